// test_nccl_nonblocking.cu: nonblocking communicators of the emulated NCCL (ncclConfig_t blocking 0),
// on 3 MPI ranks (run by check_nccl_nonblocking.sh). Checks, as NCCL documents them: the init
// returns ncclInProgress and its state polls to ncclSuccess; an all-reduce returns ncclInProgress and
// sums 1 + 2 + 3 once polled; a split with a NULL config inherits nonblocking (in progress, then a
// 2-rank all-reduce of the odd and even ranks); an init that rank 2 never joins stays in progress
// on ranks 0 and 1 until they abort it, after which a new 3-rank init works. With the argument
// `owed`, every rank issues a second all-reduce without polling the first's ncclInProgress: the
// emulator must report it (exit 66), which the runner checks.
// Rank 0 prints one line per check ("nonblocking: ok ..." or "nonblocking: FAIL ...").
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <mpi.h>
#include <chrono>
#include <nccl.h>
#include <unistd.h>

static int fails = 0, me = 0;

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

static void report(bool ok, const char* what) {
    if (me == 0) printf("nonblocking: %s %s\n", ok ? "ok" : "FAIL", what);
    fflush(stdout);
    fails += !ok;
}

// Polls comm's state for up to limit seconds: the first state that is not ncclInProgress, or
// ncclInProgress at the limit; *polls counts the polls.
static ncclResult_t settle(ncclComm_t comm, double limit, int* polls) {
    ncclResult_t e = ncclInProgress;
    *polls = 0;
    for (double end = now() + limit; e == ncclInProgress && now() < end;) {
        ncclCommGetAsyncError(comm, &e);
        ++*polls;
        if (e == ncclInProgress) usleep(1000);
    }
    return e;
}

static ncclUniqueId shared_id() {
    ncclUniqueId id;
    if (me == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    return id;
}

// v summed over comm, polled as NCCL's nonblocking rule asks (*ret: what the call returned).
static float nb_all_reduce(float v, ncclComm_t comm, ncclResult_t* ret) {
    float* x;
    cudaMalloc(&x, sizeof(float));
    cudaMemcpy(x, &v, sizeof(float), cudaMemcpyHostToDevice);
    *ret = ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm, 0);
    int polls;
    if (*ret == ncclInProgress && settle(comm, 10.0, &polls) != ncclSuccess) return -1.0f;
    cudaMemcpyAsync(&v, x, sizeof(float), cudaMemcpyDeviceToHost, 0);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaEventRecord(ev, 0);
    for (double end = now() + 10.0; cudaEventQuery(ev) != cudaSuccess; usleep(1000))
        if (now() > end) return -1.0f;
    cudaEventDestroy(ev);
    return v;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 3) {
        if (me == 0) fprintf(stderr, "usage: mpirun -np 3 %s [owed]\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char line[256];
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t world = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&world, 3, shared_id(), me, &config);
    int polls = 0;
    ncclResult_t s = settle(world, 20.0, &polls);
    snprintf(line, sizeof(line), "nonblocking init: %s, then %s after %d polls", ncclGetErrorString(r),
             ncclGetErrorString(s), polls);
    report(r == ncclInProgress && s == ncclSuccess, line);

    if (argc > 1 && strcmp(argv[1], "owed") == 0) {  // the misuse the emulator must report
        float* x;
        cudaMalloc(&x, sizeof(float));
        r = ncclAllReduce(x, x, 1, ncclFloat, ncclSum, world, 0);
        printf("nonblocking: rank %d: the first all-reduce returned %s; the second follows unpolled\n", me,
               ncclGetErrorString(r));
        fflush(stdout);
        ncclAllReduce(x, x, 1, ncclFloat, ncclSum, world, 0);
        printf("nonblocking: rank %d: FAIL the unpolled call was not reported\n", me);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    float sum = nb_all_reduce(1.0f + me, world, &r);
    snprintf(line, sizeof(line), "all-reduce: returned %s, %g once polled (want 6)", ncclGetErrorString(r), sum);
    report(r == ncclInProgress && sum == 6.0f, line);

    ncclComm_t half = nullptr;
    r = ncclCommSplit(world, me % 2, me, &half, nullptr);
    ncclResult_t sw = settle(world, 20.0, &polls);
    s = settle(half, 20.0, &polls);
    int size = 0;
    if (s == ncclSuccess) ncclCommCount(half, &size);
    ncclResult_t ra = ncclSuccess;
    sum = s == ncclSuccess ? nb_all_reduce(1.0f + me, half, &ra) : -1.0f;
    float want = me % 2 ? 2.0f : 4.0f;  // ranks 0, 2: 1 + 3; rank 1 alone: 2
    float all_ok = (sum == want) ? 1.0f : 0.0f;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
    snprintf(line, sizeof(line), "split with a NULL config: %s, parent %s, child %s (%d ranks), its all-reduce %s on every rank",
             ncclGetErrorString(r), ncclGetErrorString(sw), ncclGetErrorString(s), size, all_ok == 1.0f ? "right" : "wrong");
    report(r == ncclInProgress && sw == ncclSuccess && s == ncclSuccess && size == (me % 2 ? 1 : 2) && all_ok == 1.0f, line);

    ncclUniqueId id = shared_id();
    ncclComm_t stuck = nullptr;
    if (me < 2) {  // rank 2 never joins this one
        r = ncclCommInitRankConfig(&stuck, 3, id, me, &config);
        s = settle(stuck, 1.0, &polls);
        ncclResult_t ab = ncclCommAbort(stuck);
        snprintf(line, sizeof(line), "an init rank 2 never joins: %s, still %s after 1 s; ncclCommAbort: %s",
                 ncclGetErrorString(r), ncclGetErrorString(s), ncclGetErrorString(ab));
        report(r == ncclInProgress && s == ncclInProgress && ab == ncclSuccess, line);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ncclComm_t again = nullptr;
    r = ncclCommInitRankConfig(&again, 3, shared_id(), me, &config);
    s = settle(again, 20.0, &polls);
    sum = s == ncclSuccess ? nb_all_reduce(1.0f + me, again, &ra) : -1.0f;
    snprintf(line, sizeof(line), "a new init after the abort: %s, its all-reduce %g (want 6)", ncclGetErrorString(s), sum);
    report(s == ncclSuccess && sum == 6.0f, line);

    ncclCommDestroy(again);
    ncclCommDestroy(half);
    ncclCommDestroy(world);
    if (me == 0) printf("nonblocking: %s\n", fails ? "FAILED" : "all checks passed");
    fflush(stdout);
    MPI_Finalize();
    return fails ? 1 : 0;
}
