// The CPU trainer's communication thread (-lo, docs/distributed.md): one worker per rank that runs
// the replica exchanges handed to it, one at a time in the order they were handed over (every
// rank hands them over in the same order: fragments 0..F-1 after a step), while the trainer thread
// computes. With the modelled link (-rb MB/s) an exchange that carried `bytes` is finished only at
// link_start + bytes / bandwidth, where link_start is when the worker took it up (the link carries
// one exchange at a time): the worker sleeps out the remainder, the trainer never does unless it
// needs the result. Jobs live in slots (one per fragment); a slot holds at most one job.
// The trainer calls comm_worker_submit / comm_worker_wait / comm_worker_drain; the worker thread
// calls nothing of the trainer's but the job's function.
#ifndef LLMC_COMM_THREAD_H
#define LLMC_COMM_THREAD_H

#include <pthread.h>
#include <time.h>
#include "utils.h"
#include "comm_mpi.h"
#include "watchdog.h"

// Runs one exchange on the worker thread; returns the bytes it sent (for the modelled link).
typedef size_t (*CommJobFn)(void* arg);

enum { COMM_SLOT_IDLE, COMM_SLOT_QUEUED, COMM_SLOT_DONE };

typedef struct {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed;   // a job was queued, finished, or the worker is asked to stop
    int slots;                // one per fragment
    CommJobFn fn;
    void** args;              // per slot: the job's argument
    int* state;               // per slot: COMM_SLOT_*
    int* queue;               // the slots queued, oldest first (a ring of `slots` entries)
    int head, count;
    int stop;
    float mbps;               // -rb; 0: unthrottled
    double busy_s;            // seconds the worker spent on exchanges, sleeps included (its own counter)
} CommWorker;

static void comm_sleep_until(double when) {
    for (double now = now_seconds(); now < when; now = now_seconds()) {
        double s = when - now;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void* comm_worker_main(void* p) {
    CommWorker* w = (CommWorker*)p;
    comm_on_worker = 1;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->count == 0 && !w->stop) { pthread_cond_wait(&w->changed, &w->lock); }
        if (w->count == 0) { break; }
        int slot = w->queue[w->head];
        void* arg = w->args[slot];
        pthread_mutex_unlock(&w->lock);
        double start = now_seconds();
        watchdog_span_begin("an -lo exchange on the communication thread");
        size_t bytes = w->fn(arg);
        watchdog_span_end();
        if (w->mbps > 0.0f) { comm_sleep_until(start + (double)bytes / ((double)w->mbps * 1e6)); }
        double took = now_seconds() - start;
        pthread_mutex_lock(&w->lock);
        w->busy_s += took;
        w->head = (w->head + 1) % w->slots;
        w->count--;
        w->state[slot] = COMM_SLOT_DONE;
        pthread_cond_broadcast(&w->changed);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void comm_worker_start(CommWorker* w, int slots, CommJobFn fn, float mbps) {
    w->slots = slots;
    w->fn = fn;
    w->args = (void**)calloc_check(slots, sizeof(void*));
    w->state = (int*)calloc_check(slots, sizeof(int));
    w->queue = (int*)calloc_check(slots, sizeof(int));
    w->head = w->count = w->stop = 0;
    w->mbps = mbps;
    w->busy_s = 0.0;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->changed, NULL);
    if (pthread_create(&w->thread, NULL, comm_worker_main, w) != 0) {
        fail("-lo: cannot start the communication thread");
    }
}

// Queues the job of `slot` (behind every job queued before it).
static void comm_worker_submit(CommWorker* w, int slot, void* arg) {
    pthread_mutex_lock(&w->lock);
    if (w->state[slot] == COMM_SLOT_QUEUED) { fail("-lo: fragment %d's exchange queued twice (a bug)", slot); }
    w->args[slot] = arg;
    w->state[slot] = COMM_SLOT_QUEUED;
    w->queue[(w->head + w->count) % w->slots] = slot;
    w->count++;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
}

// Whether `slot` has a job submitted and not yet collected (queued, running or done).
static int comm_worker_has(CommWorker* w, int slot) {
    pthread_mutex_lock(&w->lock);
    int has = w->state[slot] != COMM_SLOT_IDLE;
    pthread_mutex_unlock(&w->lock);
    return has;
}

// Blocks until the job of `slot` is done and collects it (the slot is idle again); returns the
// seconds the trainer waited for it.
static double comm_worker_wait(CommWorker* w, int slot) {
    double t0 = now_seconds();
    pthread_mutex_lock(&w->lock);
    if (w->state[slot] == COMM_SLOT_IDLE) { fail("-lo: waiting for fragment %d, which has no exchange (a bug)", slot); }
    while (w->state[slot] != COMM_SLOT_DONE) { pthread_cond_wait(&w->changed, &w->lock); }
    w->state[slot] = COMM_SLOT_IDLE;
    pthread_mutex_unlock(&w->lock);
    return now_seconds() - t0;
}

// Blocks until no job is queued or running (their results stay to be collected).
static void comm_worker_drain(CommWorker* w) {
    pthread_mutex_lock(&w->lock);
    while (w->count > 0) { pthread_cond_wait(&w->changed, &w->lock); }
    pthread_mutex_unlock(&w->lock);
}

static void comm_worker_stop(CommWorker* w) {
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->changed);
    free(w->args);
    free(w->state);
    free(w->queue);
}

#endif
