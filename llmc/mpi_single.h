// A single-process stand-in for the few MPI calls the CPU trainer makes, used when it is built
// without Open MPI (-DNO_MPI, which the Makefile sets when mpicc is missing): a world of one rank.
// The GPU trainer built so (dev/gpu.mk without mpicc) compiles against it too but never starts MPI:
// it refuses -pi mpi (llmc/process_info.h) and takes its ranks from -pi fs or tcp.
// A build without MPI refuses to start as one of several ranks (slurm, a launcher) rather than
// silently training the same model once per process.
#ifndef LLMC_MPI_SINGLE_H
#define LLMC_MPI_SINGLE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Request;
#define MPI_COMM_WORLD 0
#define MPI_FLOAT 0
#define MPI_DOUBLE 1
#define MPI_BYTE 2
#define MPI_PROC_NULL (-2)
#define MPI_SUM 0
#define MPI_STATUS_IGNORE NULL
#define MPI_STATUSES_IGNORE NULL
#define MPI_SUCCESS 0
#define MPI_ERRORS_RETURN 0
#define MPI_MAX_ERROR_STRING 64
#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3
#define MPI_COMM_TYPE_SHARED 0
#define MPI_INFO_NULL 0

static int mpi_single_started = 0; // MPI_Init was called

static int MPI_Init(int* argc, char*** argv) {
    (void)argc;
    (void)argv;
    static const char* world_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"};
    for (int i = 0; i < 4; i++) {
        const char* v = getenv(world_vars[i]);
        if (v && atoi(v) > 1) {
            fail("%s=%s but this binary was built without MPI (one process only): install Open MPI "
                 "(make deps) and rebuild", world_vars[i], v);
        }
    }
    mpi_single_started = 1;
    return 0;
}
static int MPI_Initialized(int* flag) {
    *flag = mpi_single_started;
    return 0;
}
// One process: every thread level is provided (no other rank to talk to).
static int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
    *provided = required;
    return MPI_Init(argc, argv);
}
static int MPI_Query_thread(int* provided) {
    *provided = MPI_THREAD_MULTIPLE;
    return 0;
}
static int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) {
    *out = comm;
    return 0;
}
static int MPI_Comm_free(MPI_Comm* comm) {
    (void)comm;
    return 0;
}
static int MPI_Finalize(void) { return 0; }
static int MPI_Comm_size(MPI_Comm comm, int* size) { (void)comm; *size = 1; return 0; }
static int MPI_Comm_rank(MPI_Comm comm, int* rank) { (void)comm; *rank = 0; return 0; }
static int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
    (void)color;
    (void)key;
    *out = comm;
    return 0;
}
static int MPI_Comm_set_errhandler(MPI_Comm comm, int handler) { (void)comm; (void)handler; return 0; }
static int MPI_Error_string(int code, char* msg, int* len) {
    *len = snprintf(msg, MPI_MAX_ERROR_STRING, "MPI error %d", code);
    return 0;
}
static int MPI_Barrier(MPI_Comm comm) { (void)comm; return 0; }
// One rank: the root's buffer is already every rank's.
static int MPI_Bcast(void* buf, int n, int type, int root, MPI_Comm comm) {
    (void)buf; (void)n; (void)type; (void)root; (void)comm;
    return 0;
}
static int MPI_Comm_split_type(MPI_Comm comm, int type, int key, int info, MPI_Comm* out) {
    (void)type; (void)key; (void)info;
    *out = comm;
    return 0;
}
// One rank: the sum is the rank's own values.
static int MPI_Allreduce(const void* s, void* r, int n, int type, int op, MPI_Comm comm) {
    (void)op;
    (void)comm;
    memmove(r, s, (size_t)n * (type == MPI_DOUBLE ? sizeof(double) : sizeof(float)));
    return 0;
}
static int MPI_Abort(MPI_Comm comm, int code) { (void)comm; exit(code); }
// With one rank the ring collectives never send; reaching this is a bug.
static int MPI_Sendrecv(const void* s, int sn, int st, int dest, int stag, void* r, int rn, int rt, int src, int rtag,
                        MPI_Comm comm, void* status) {
    (void)s; (void)sn; (void)st; (void)dest; (void)stag; (void)r; (void)rn; (void)rt; (void)src; (void)rtag;
    (void)comm; (void)status;
    fail("MPI_Sendrecv called in a single-process build (NO_MPI)");
    return 1;
}
// The -lo communication thread's point-to-point calls: never reached with one rank either.
static int MPI_Irecv(void* r, int n, int t, int src, int tag, MPI_Comm comm, MPI_Request* req) {
    (void)r; (void)n; (void)t; (void)src; (void)tag; (void)comm; (void)req;
    fail("MPI_Irecv called in a single-process build (NO_MPI)");
    return 1;
}
static int MPI_Isend(const void* s, int n, int t, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
    (void)s; (void)n; (void)t; (void)dest; (void)tag; (void)comm; (void)req;
    fail("MPI_Isend called in a single-process build (NO_MPI)");
    return 1;
}
static int MPI_Testall(int n, MPI_Request* req, int* done, void* statuses) {
    (void)n; (void)req; (void)statuses;
    *done = 1;
    return 0;
}

#endif
