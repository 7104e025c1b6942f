// Collectives on host fp32 buffers over MPI, used by the CPU trainer: ring reduce-scatter,
// ring all-gather and all-reduce (= reduce-scatter then all-gather) built from MPI_Sendrecv,
// so the summation order is fixed (runs are reproducible) and every byte handed to MPI is
// counted in comm_bytes_sent (the figure the tests compare with accounting.h's closed forms). Every
// exchange is watched (llmc/watchdog.h) and its MPI errors end the job naming the step.
// Built with -DNO_MPI, MPI is llmc/mpi_single.h: one process, no communication. The -lo
// communication thread (llmc/comm_thread.h) runs them too, on its own communicator and tags
// (CommGroup.tag): it counts its bytes in its own comm_bytes_sent and its waits are watched by the
// watchdog's span (the trainer's wait slot is the trainer thread's alone).
#ifndef LLMC_COMM_MPI_H
#define LLMC_COMM_MPI_H

#ifdef NO_MPI
#include "mpi_single.h"
#else
#include <mpi.h>
#endif
#include "utils.h"
#include "watchdog.h"
#include <time.h>

typedef struct {
    MPI_Comm comm;
    int size, rank;
    int tag; // added to the exchanges' tags (0; the communication thread's: its fragment's)
} CommGroup;

static __thread size_t comm_bytes_sent = 0; // per thread: the trainer's, the communication thread's
static __thread int comm_on_worker = 0;     // 1 on the -lo communication thread

static void comm_group_from(CommGroup* g, MPI_Comm comm) {
    g->comm = comm;
    g->tag = 0;
    MPI_Comm_size(comm, &g->size);
    MPI_Comm_rank(comm, &g->rank);
}

// MPI_Sendrecv, except on the communication thread: there a non-blocking pair whose completion is
// polled every 0.1 ms, sleeping in between, so that the thread does not spin a core the trainer
// threads need while it waits for a peer (Open MPI's blocking calls busy-poll).
static int comm_sendrecv(const void* send, int n, MPI_Datatype type, int to, void* recv, int from, int tag,
                         MPI_Comm comm) {
    if (!comm_on_worker) {
        return MPI_Sendrecv(send, n, type, to, tag, recv, n, type, from, tag, comm, MPI_STATUS_IGNORE);
    }
    MPI_Request req[2];
    int rc = MPI_Irecv(recv, n, type, from, tag, comm, &req[0]);
    if (rc == MPI_SUCCESS) { rc = MPI_Isend(send, n, type, to, tag, comm, &req[1]); }
    for (int done = 0; rc == MPI_SUCCESS && !done;) {
        rc = MPI_Testall(2, req, &done, MPI_STATUSES_IGNORE);
        if (!done) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    return rc;
}

// Sends n elements of `type` (size bytes each) to group rank `to` while receiving as many from group
// rank `from`, in pieces MPI's int counts can hold, watched and counted; tag: 7 for the rings, 8 for
// the pairwise exchanges (plus the group's); what: the exchange's name in an error.
static void comm_exchange(CommGroup* g, const void* send, int to, void* recv, int from, size_t n, MPI_Datatype type,
                          size_t size, int tag, const char* what) {
    const size_t max_chunk = ((size_t)1 << 30) / size;
    for (size_t done = 0; done < n; done += max_chunk) {
        int k = (int)(n - done < max_chunk ? n - done : max_chunk);
        if (!comm_on_worker) { watchdog_arm(what); }
        int rc = comm_sendrecv((const char*)send + done * size, k, type, to, (char*)recv + done * size, from,
                               tag + g->tag, g->comm);
        if (!comm_on_worker) { watchdog_disarm(); }
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, msg, &len);
            fail("step %d: MPI error in %s (%s): a peer has died?", (int)preempt_step, what, msg);
        }
    }
    if (to != MPI_PROC_NULL) { comm_bytes_sent += n * size; }
}

// Sends count floats to the right neighbour while receiving count floats from the left one.
static void ring_exchange(CommGroup* g, const float* send, float* recv, size_t count) {
    int right = (g->rank + 1) % g->size, left = (g->rank + g->size - 1) % g->size;
    comm_exchange(g, send, right, recv, left, count, MPI_FLOAT, sizeof(float), 7, "a ring exchange");
}

// Sends `bytes` bytes to group rank `to` while receiving `bytes` bytes from group rank `from`: the
// pairwise exchanges of the compressed replica link (llmc/dp_host.h, llmc/wire_format.h).
static void pair_exchange_bytes(CommGroup* g, const void* send, int to, void* recv, int from, size_t bytes) {
    comm_exchange(g, send, to, recv, from, bytes, MPI_BYTE, 1, 8, "a pairwise exchange");
}

// One side of a one-way transfer: n floats sent to group rank `to` (-1: none) while n are received
// from `from` (-1: none); tag 9. The pieces of a gather to one rank and of a chain broadcast.
static void comm_transfer(CommGroup* g, const float* send, int to, float* recv, int from, size_t n) {
    // the absent side's buffer is the other's (MPI refuses NULL even where nothing moves)
    const float* s = send ? send : recv;
    float* r = recv ? recv : (float*)send;
    comm_exchange(g, s, to < 0 ? MPI_PROC_NULL : to, r, from < 0 ? MPI_PROC_NULL : from, n, MPI_FLOAT, sizeof(float), 9,
                  "a transfer to one rank");
}

// buf (n floats) from group rank `root` to every rank, down the chain root, root + 1, ... (mod the
// size) in pieces of 64K floats, so that the links carry pieces at once: each rank but the chain's
// last sends n floats (the group in all (size - 1) n, as an all-gather of n).
static void chain_broadcast(CommGroup* g, float* buf, size_t n, int root) {
    int G = g->size, k = (g->rank - root + G) % G;
    int prev = k == 0 ? -1 : (g->rank + G - 1) % G, next = k == G - 1 ? -1 : (g->rank + 1) % G;
    const size_t piece = (size_t)1 << 16;
    for (size_t at = 0; at < n; at += piece) {
        size_t m = n - at < piece ? n - at : piece;
        if (prev >= 0) { comm_transfer(g, NULL, -1, buf + at, prev, m); }
        if (next >= 0) { comm_transfer(g, buf + at, next, NULL, -1, m); }
    }
}

// The sum over the group of buf (n floats on each rank) into group rank root's buf, up the chain
// root + 1, root + 2, ..., root (mod the size) in pieces of 64K floats: each rank adds what its
// predecessor sent into its own buf and passes it on, so each rank but the root sends n floats (the
// group in all (size - 1) n, as a reduce-scatter of n). The other ranks' buf is left partly summed.
// tmp: min(n, 64K) floats.
static void chain_reduce(CommGroup* g, float* buf, size_t n, int root, float* tmp) {
    int G = g->size, k = (g->rank - root - 1 + 2 * G) % G;
    int prev = k == 0 ? -1 : (g->rank + G - 1) % G, next = k == G - 1 ? -1 : (g->rank + 1) % G;
    const size_t piece = (size_t)1 << 16;
    for (size_t at = 0; at < n; at += piece) {
        size_t m = n - at < piece ? n - at : piece;
        if (prev >= 0) {
            comm_transfer(g, NULL, -1, tmp, prev, m);
            for (size_t i = 0; i < m; i++) { buf[at + i] += tmp[i]; }
        }
        if (next >= 0) { comm_transfer(g, buf + at, next, NULL, -1, m); }
    }
}

static size_t ring_slot(int i, int size) { return (size_t)(((i % size) + size) % size); }

// buf holds size slices of slice elements. On return slice g->rank holds the sum over the group
// of that slice (the other slices hold partial sums). tmp: slice elements of scratch.
static void ring_reduce_scatter(CommGroup* g, float* buf, size_t slice, float* tmp) {
    int G = g->size, s = g->rank;
    for (int k = 0; k < G - 1; k++) {
        float* send = buf + ring_slot(s - k - 1, G) * slice;
        float* dst = buf + ring_slot(s - k - 2, G) * slice;
        ring_exchange(g, send, tmp, slice);
        for (size_t i = 0; i < slice; i++) { dst[i] += tmp[i]; }
    }
}

// buf holds size slices; slice g->rank is valid on entry, all are on return.
static void ring_all_gather(CommGroup* g, float* buf, size_t slice) {
    int G = g->size, s = g->rank;
    for (int k = 0; k < G - 1; k++) {
        ring_exchange(g, buf + ring_slot(s - k, G) * slice, buf + ring_slot(s - k - 1, G) * slice, slice);
    }
}

// Sums buf over the group; padded_n must be a multiple of the group size. tmp: padded_n / size.
static void ring_all_reduce(CommGroup* g, float* buf, size_t padded_n, float* tmp) {
    if (g->size == 1) { return; }
    size_t slice = padded_n / g->size;
    ring_reduce_scatter(g, buf, slice, tmp);
    ring_all_gather(g, buf, slice);
}

// Sum of one value over the group (same ring, padded to one element per rank).
static float all_reduce_sum_scalar(CommGroup* g, float value) {
    if (g->size == 1) { return value; }
    float* buf = (float*)calloc_check(g->size + 1, sizeof(float));
    buf[0] = value;
    ring_all_reduce(g, buf, g->size, buf + g->size);
    float sum = buf[0];
    free(buf);
    return sum;
}

// Sums n small values over the group in one ring all-reduce of max(n, size) slots padded to a
// multiple of the size: for n <= size it sends what all_reduce_sum_scalar sends (the step's
// loss and its preemption votes travel together at the cost of the loss alone).
static void all_reduce_sum_small(CommGroup* g, float* values, int n) {
    if (g->size == 1) { return; }
    size_t padded = round_up((size_t)n, (size_t)g->size);
    float* buf = (float*)calloc_check(padded + padded / g->size, sizeof(float));
    memcpy(buf, values, n * sizeof(float));
    ring_all_reduce(g, buf, padded, buf + padded);
    memcpy(values, buf, n * sizeof(float));
    free(buf);
}

#endif
