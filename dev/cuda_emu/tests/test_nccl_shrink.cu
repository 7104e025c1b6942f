// test_nccl_shrink.cu: ncclCommShrink and ncclCommRevoke of the emulated NCCL (NCCL 2.27's API),
// on 3 MPI ranks (run by check_nccl_shrink.sh). Rank 2 stops answering (the `peer stops` fault)
// before an all-reduce on the world communicator; ranks 0 and 1 poll until ncclCommGetAsyncError
// reports ncclRemoteError naming rank 2, then shrink the world with NCCL_SHRINK_ABORT excluding
// rank 2: the all-reduce stuck in flight is abandoned, the new communicator has 2 ranks (old ranks
// 0, 1 as 0, 1), an all-reduce on it sums 1 + 2 = 3, and the revoked world refuses a new collective
// (ncclInvalidUsage). Also: excluding oneself or a rank out of range is ncclInvalidArgument, and a
// shrink with nothing in flight (NCCL_SHRINK_DEFAULT, excluding nobody) keeps every rank.
// Rank 0 prints one line per check ("shrink: ok ..." or "shrink: FAIL ...") and ends the job with
// MPI_Abort (rank 2 never returns): the runner reads the lines.
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include "nccl_poll.h"
#include <unistd.h>

static int fails = 0;

static void report(int rank, bool ok, const char* what) {
    if (rank == 0) printf("shrink: %s %s\n", ok ? "ok" : "FAIL", what);
    fflush(stdout);
    fails += !ok;
}

// The world communicator of 3 MPI ranks (*rank: this one's); anything but 3 ranks ends the job.
static ncclComm_t world_of_three(int* rank, const char* program) {
    int n;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 3) {
        if (*rank == 0) fprintf(stderr, "usage: mpirun -np 3 %s\n", program);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    ncclUniqueId id;
    if (*rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    ncclCommInitRank(&comm, n, id, *rank);
    return comm;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank;
    ncclComm_t comm = world_of_three(&rank, argv[0]);
    char line[256];

    float all = all_reduce(1.0f + rank, comm);  // 1 + 2 + 3
    snprintf(line, sizeof(line), "all-reduce over 3 ranks before anything: %g (want 6)", all);
    report(rank, all == 6.0f, line);
    ncclComm_t same = nullptr;
    ncclResult_t r = ncclCommShrink(comm, nullptr, 0, &same, nullptr, NCCL_SHRINK_DEFAULT);
    int n = 0, me = -1;
    if (same) { ncclCommCount(same, &n); ncclCommUserRank(same, &me); }
    snprintf(line, sizeof(line), "NCCL_SHRINK_DEFAULT excluding nobody: %s, %d ranks, this one %d", ncclGetErrorString(r),
             n, me);
    report(rank, r == ncclSuccess && n == 3 && me == rank, line);
    if (same) ncclCommDestroy(same);

    if (rank == 2) {  // (no host MPI call from here: the progress thread owns MPI)
        emu_nccl_stop_answering();
        for (;;) sleep(1000);
    }
    int self = rank, out_of_range = 3;
    ncclComm_t bad = nullptr;
    ncclResult_t r1 = ncclCommShrink(comm, &self, 1, &bad, nullptr, NCCL_SHRINK_ABORT);
    ncclResult_t r2 = ncclCommShrink(comm, &out_of_range, 1, &bad, nullptr, NCCL_SHRINK_ABORT);
    snprintf(line, sizeof(line), "excluding itself: %s; rank 3 of 3: %s", ncclGetErrorString(r1), ncclGetErrorString(r2));
    report(rank, r1 == ncclInvalidArgument && r2 == ncclInvalidArgument && bad == nullptr, line);

    cudaStream_t s;
    float* x;
    double waited;
    ncclResult_t e = stuck_all_reduce(comm, 10.0, &s, &x, &waited); // rank 2 never joins
    snprintf(line, sizeof(line), "the all-reduce rank 2 never joins: %s after %.2f s, naming rank %d", ncclGetErrorString(e),
             waited, emu_nccl_stopped_peer(comm));
    report(rank, e == ncclRemoteError && emu_nccl_stopped_peer(comm) == 2, line);

    int gone = 2;
    ncclComm_t small = nullptr;
    r = ncclCommShrink(comm, &gone, 1, &small, nullptr, NCCL_SHRINK_ABORT);
    n = 0, me = -1;
    if (small) { ncclCommCount(small, &n); ncclCommUserRank(small, &me); }
    snprintf(line, sizeof(line), "NCCL_SHRINK_ABORT excluding rank 2: %s, %d ranks, this one %d", ncclGetErrorString(r), n, me);
    report(rank, r == ncclSuccess && n == 2 && me == rank, line);
    float two = small ? all_reduce(1.0f + rank, small) : -1.0f;
    snprintf(line, sizeof(line), "all-reduce on the shrunk communicator: %g (want 3: the stuck one abandoned)", two);
    report(rank, two == 3.0f, line);
    r = ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm, s);
    snprintf(line, sizeof(line), "a new collective on the shrunk-with-abort world: %s", ncclGetErrorString(r));
    report(rank, r == ncclInvalidUsage, line);
    if (rank == 0) printf("shrink: %s\n", fails ? "FAILED" : "all checks passed");
    fflush(stdout);
    if (rank == 1) { for (;;) sleep(1000); }
    MPI_Abort(MPI_COMM_WORLD, fails ? 1 : 0);
}
