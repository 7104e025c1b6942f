// NCCL set-up of the CUDA trainer: the error check, the floatX wire type, and the world
// communicator, whose unique id rank 0 creates and hands to the others (-pi mpi: MPI_Bcast; -pi fs:
// files in a shared directory; -pi tcp: a rendezvous on rank 0's host and port; llmc/rendezvous.h).
#ifndef LLMC_NCCL_SETUP_CUH
#define LLMC_NCCL_SETUP_CUH

#include <errno.h>
#include <nccl.h>
#include <time.h>
#include <unistd.h>
#include "cuda_common.cuh"
#include "process_info.h" // <mpi.h>, or llmc/mpi_single.h in a -DNO_MPI build
#include "watchdog.h"
#include "rendezvous.h"
#include "faults.h"

// Every NCCL call is watched (llmc/watchdog.h): in the emulator's --check builds a collective
// blocks inside the call until the peers join, and a dead or hung peer must not keep it there. A grace
// (watchdog_grace) lasts until the next completed host wait, where a real GPU blocks.
#define ncclCheck(call)                                      \
    do {                                                     \
        watchdog_arm("an NCCL call");                        \
        ncclResult_t nccl_result_ = (call);                  \
        watchdog_disarm_after(0);                            \
        nccl_check(nccl_result_, #call, __FILE__, __LINE__); \
    } while (0)
static void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess) { fail("NCCL error %s at %s:%d (%s)", ncclGetErrorString(r), file, line, what); }
}

#ifdef ENABLE_FP32
#define ncclFloatX ncclFloat
#else
#define ncclFloatX ncclBfloat16
#endif

// The world communicator: rank 0 creates the NCCL id and hands it to every rank (-pi mpi: MPI_Bcast;
// fs, tcp: llmc/rendezvous.h, only to the ranks of this job, rdv). join (-le 1, else NULL): where
// rank 0 answers that this rank rejoins a running job, the communicator is the one of the
// replicas training from there (join->alive, S ranks each, in world-rank order), and the
// communicator is nonblocking (NCCL's blocking 0: its calls may return ncclInProgress, to be
// polled out of; llmc/device_wait.cuh, ncclCheckOn), as are the replica communicators split from it.
// faults: -fi (its die_join).
static ncclComm_t nccl_world_init(const ProcessInfo* p, const char* method, const char* fs_dir, const char* host,
                                  int port, const Rendezvous* rdv, RdvJoin* join, int S, const char* faults) {
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (join) { join->step = -1; }
    if (p->rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
    if (p->world == 1) {
        // one process: nobody to hand the id to (no file for -pi fs, no port for -pi tcp)
    } else if (strcmp(method, "mpi") == 0) {
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    } else if (strcmp(method, "fs") == 0) {
        rendezvous_fs(rdv, &id, sizeof(id), fs_dir, join);
    } else {
        if (host[0] == '\0' && p->rank != 0) { fail("-pi tcp: needs rank 0's address (-ps)"); }
        rendezvous_tcp(rdv, &id, sizeof(id), host, port, join);
    }
    int n = p->world, me = p->rank;
    if (join && (join->step >= 0 || join->partial)) { // the ranks of the replicas training from join->step on (-lw: from the start)
        Fault f = fault_parse(faults);
        if (join->step >= 0) { fault_die_from(&f, FAULT_DIE_JOIN, join->step, p->rank, "its rejoin, once admitted,"); }
        n = 0;
        for (int r = 0; r < p->world; r++) {
            if (!join->alive[r / S]) { continue; }
            if (r == p->rank) { me = n; }
            n++;
        }
    }
    ncclComm_t comm = NULL;
    if (join) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        watchdog_arm("the world communicator's set-up (NCCL)"); // (its deadline, as for a blocking call)
        ncclResult_t r = ncclCommInitRankConfig(&comm, n, id, me, &config);
        while (r == ncclInProgress) {
            usleep(100);
            if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) { r = ncclInternalError; }
        }
        watchdog_disarm_after(0);
        nccl_check(r, "ncclCommInitRankConfig (nonblocking)", __FILE__, __LINE__);
    } else {
        ncclCheck(ncclCommInitRank(&comm, n, id, me));
    }
    if (strcmp(method, "fs") == 0 && p->rank == 0 && p->world > 1) { rendezvous_fs_cleanup(rdv, fs_dir); }
    return comm;
}

#endif
