// Waiting for the device without waiting forever: the communicators to watch, a host wait that
// polls NCCL's asynchronous errors with a deadline (a dead peer ends the job instead of hanging
// it), and fail()'s way of ending every rank.
#ifndef LLMC_DEVICE_WAIT_CUH
#define LLMC_DEVICE_WAIT_CUH

#include <unistd.h>
#include "cuda_common.cuh"
#include "nccl_setup.cuh"

// waiting for the device without waiting forever

#define MAX_WATCHED_COMMS 3
static ncclComm_t watched_comms[MAX_WATCHED_COMMS];
static int num_watched_comms = 0;

static void watch_comm(ncclComm_t c) {
    if (c && num_watched_comms < MAX_WATCHED_COMMS) { watched_comms[num_watched_comms++] = c; }
}

// fail()'s way of ending every rank: MPI_Abort where MPI is up; otherwise abort the NCCL
// communicators, so that the peers' pending collectives report an error instead of hanging
// (their wait_device then fails too, and the launcher sees the non-zero exits).
static void abort_all_ranks(void) {
    int mpi = 0;
    MPI_Initialized(&mpi);
    if (mpi) { MPI_Abort(MPI_COMM_WORLD, 1); }
    for (int i = 0; i < num_watched_comms; i++) { ncclCommAbort(watched_comms[i]); }
    num_watched_comms = 0;
}

// Which peer stopped, as far as this rank's NCCL can tell: the emulator names the rank; real NCCL
// reports ncclRemoteError without a rank (ncclGetLastError's text may name a host), so "a peer".
static void nccl_peer_text(ncclComm_t c, char* out, size_t len) {
#ifdef EMU_CUDA
    int p = emu_nccl_stopped_peer(c);
    if (p >= 0) {
        snprintf(out, len, "rank %d stopped answering", p);
        return;
    }
#endif
    const char* last = ncclGetLastError(c);
    snprintf(out, len, "a peer stopped answering%s%s", last[0] ? ": " : "", last);
}

// The limit of the wait now beginning and where it comes from, for the message when it expires.
static double wait_limit_s(char* src, size_t len) {
    if (watchdog_timeout_s <= 0.0) {
        snprintf(src, len, "-wt 0: TRAIN_GPT2_TIMEOUT or its default");
        return peer_timeout_s();
    }
    if (watchdog_grace_next) {
        snprintf(src, len, "10 x -wt %g s, the grace of a wait that may be long", watchdog_timeout_s);
    } else {
        snprintf(src, len, "-wt %g s", watchdog_timeout_s);
    }
    return watchdog_limit_s();
}

// How a wait ended (wait_event_until): done, an NCCL error on a watched communicator, the limit.
typedef enum { WAIT_DONE, WAIT_PEER, WAIT_LIMIT } WaitEnd;

// -le 1 (llmc/dp_elastic.cuh): the communicators that span the replicas, whose errors only the
// elastic waits act on (a wait that needs one of their collectives ends at its limit instead).
static ncclComm_t elastic_comms[2];

static int comm_is_elastic(ncclComm_t c) { return c && (c == elastic_comms[0] || c == elastic_comms[1]); }

// -le 1 makes those communicators nonblocking (NCCL's blocking 0, nccl_world_init): NCCL may answer
// any call on one with ncclInProgress, and its state must then be polled out of ncclInProgress
// (ncclCommGetAsyncError) before the next call on it or work on its streams. nccl_settle polls for
// up to limit_s seconds: the state then (ncclInProgress where the limit passed).
static ncclResult_t nccl_settle(ncclComm_t comm, double limit_s) {
    double deadline = now_seconds() + limit_s;
    for (;;) {
        ncclResult_t r = ncclInProgress, q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess) { return q; }
        if (r != ncclInProgress || now_seconds() > deadline) { return r; }
        usleep(20);
    }
}

// ncclCheck for a call on comm, which may be nonblocking: an ncclInProgress is polled out of within
// the wait's limit. What is left (an error, or still in progress at the limit) on a communicator
// that spans the replicas and is no longer healthy goes to the elastic wait that follows each of
// their calls (it sees the error, or its own limit passes); anything else fails here.
#define ncclCheckOn(comm, call)                                         \
    do {                                                                \
        watchdog_arm("an NCCL call");                                   \
        ncclResult_t nccl_result_ = (call);                             \
        watchdog_disarm_after(0);                                       \
        nccl_check_on((comm), nccl_result_, #call, __FILE__, __LINE__); \
    } while (0)
static void nccl_check_on(ncclComm_t comm, ncclResult_t r, const char* what, const char* file, int line) {
    if (r == ncclInProgress) {
        char src[96];
        r = nccl_settle(comm, wait_limit_s(src, sizeof(src)));
    }
    if (r == ncclSuccess) { return; }
    ncclResult_t state = ncclSuccess;
    if (comm_is_elastic(comm) && ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess) { return; }
    nccl_check(r, what, file, line);
}

// Destroys c, blocking or not (a nonblocking one is finalized first and polled out of ncclInProgress
// within the wait limit, as NCCL asks before its destroy).
static void nccl_destroy(ncclComm_t c) {
    ncclResult_t r = ncclCommFinalize(c);
    if (r == ncclInProgress) {
        char src[96];
        r = nccl_settle(c, wait_limit_s(src, sizeof(src)));
    }
    nccl_check(r, "ncclCommFinalize", __FILE__, __LINE__);
    ncclCheck(ncclCommDestroy(c));
}

// ncclCommSplit of parent (which may be nonblocking) into *child, which is blocking where
// blocking_child, else as the parent; both polled out of ncclInProgress for up to limit_s seconds.
// Returns ncclSuccess or what failed (ncclInProgress where the limit passed).
static ncclResult_t nccl_split_settled(ncclComm_t parent, int color, int key, ncclComm_t* child, int blocking_child,
                                       double limit_s) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1; // (not left to NCCL's default)
    *child = NULL;
    ncclResult_t r = ncclCommSplit(parent, color, key, child, blocking_child ? &config : NULL);
    if (r != ncclInProgress) { return r; }
    r = nccl_settle(parent, limit_s);
    return r == ncclSuccess && *child ? nccl_settle(*child, limit_s) : r;
}

// Polls ev and the watched communicators' asynchronous errors (those of elastic_comms only where
// `elastic`) until the work before ev's last record has run (WAIT_DONE; where `elastic`, with no
// error on elastic_comms: a collective that ends on a communicator in error lacks a lost peer's
// part), an NCCL error (WAIT_PEER, *failed its communicator) or the limit (WAIT_LIMIT: -wt seconds, 10 times that after
// watchdog_grace, TRAIN_GPT2_TIMEOUT when -wt is 0); why names the step, its phase, what it waited
// for and the peer or the limit. end_grace: this is the wait a grace is for (watchdog.h), so
// completing it ends the grace; a short wait for an earlier copy passes 0.
static WaitEnd wait_event_until(cudaEvent_t ev, const char* what, int end_grace, int elastic, ncclComm_t* failed,
                                char* why, size_t len) {
    char src[96];
    double limit = wait_limit_s(src, sizeof(src));
    double deadline = now_seconds() + limit;
    for (;;) {
        cudaError_t q = cudaEventQuery(ev);
        if (q != cudaSuccess && q != cudaErrorNotReady) { cudaCheck(q); }
        for (int i = 0; i < num_watched_comms; i++) {
            // an elastic wait trusts no collective that ended on a communicator in error (a lost peer's
            // part is missing from it); the others end once their work has run
            if (q == cudaSuccess && !(elastic && comm_is_elastic(watched_comms[i]))) { continue; }
            if (!elastic && comm_is_elastic(watched_comms[i])) { continue; }
            ncclResult_t r = ncclSuccess;
            ncclCheck(ncclCommGetAsyncError(watched_comms[i], &r));
            if (r != ncclSuccess && r != ncclInProgress) {
                char peer[256];
                nccl_peer_text(watched_comms[i], peer, sizeof(peer));
                snprintf(why, len, "step %d, %s: %s (NCCL: %s) while waiting for %s", (int)preempt_step, preempt_phase,
                         peer, ncclGetErrorString(r), what);
                *failed = watched_comms[i];
                return WAIT_PEER;
            }
        }
        if (q == cudaSuccess) {
            watchdog_disarm_after(end_grace);
            return WAIT_DONE;
        }
        if (now_seconds() > deadline) {
            snprintf(why, len, "step %d, %s: waited %.0f s (%s) for %s: a peer has died or hangs", (int)preempt_step,
                     preempt_phase, limit, src, what);
            return WAIT_LIMIT;
        }
        usleep(50);
    }
}

// -le 1 -lo (llmc/dp_device.cuh sets it while an exchange is in flight, whose chunks on the
// communication stream any wait may stand behind): a wait that ends on an NCCL error or at its
// limit hands it here (the survivors recover, or this rank stops) and goes on waiting.
static void (*elastic_wait_hook)(const char* why, ncclComm_t failed) = NULL;

// Blocks until the work before the last record of ev has run; fails (wait_event_until's why) on
// an NCCL error or at the limit (elastic_wait_hook where set).
static void wait_event(cudaEvent_t ev, const char* what, int end_grace) {
    for (;;) {
        char why[768];
        ncclComm_t failed = NULL;
        void (*hook)(const char*, ncclComm_t) = elastic_wait_hook;
        if (wait_event_until(ev, what, end_grace, hook != NULL, &failed, why, sizeof(why)) == WAIT_DONE) { return; }
        if (hook == NULL) { fail("%s", why); }
        elastic_wait_hook = NULL; // (no wait inside the recovery recovers again)
        hook(why, failed);
        elastic_wait_hook = hook;
    }
}

// wait_event for a short wait (EventWaitFn, llmc/cuda_common.cuh: host_wait_event).
static void wait_event_short(cudaEvent_t ev, const char* what) { wait_event(ev, what, 0); }

// Blocks until everything issued so far on stream has run (wait_event on ev recorded now).
static void wait_device(cudaStream_t stream, cudaEvent_t ev, const char* what) {
    cudaCheck(cudaEventRecord(ev, stream));
    wait_event(ev, what, 1);
}

#endif
