// test_nccl_peer_stops.cu MODE: the emulated NCCL is asynchronous, and a peer that stops answering
// is seen only through polling (2 MPI ranks; run by check_peer_stops.sh, which says what is proven).
// Both modes: a first all-reduce (rank 1 joins it 1 s late) must return at once on rank 0, and its
// result, polled for, must be right. Then rank 1 stops answering (emu_nccl_stop_answering, the
// `peer stops` fault) before the second all-reduce, which rank 0 issues on its stream:
//   block  rank 0 calls cudaStreamSynchronize behind it: on a GPU this never returns (run with
//          EMU_STRICT=0, or the host-wait rule reports the call at once); the runner's timeout ends it.
//   poll   rank 0 polls an event and ncclCommGetAsyncError for up to 5 s: it must see
//          ncclRemoteError naming rank 1 after the detection delay (EMU_NCCL_DETECT_S), the event
//          still not ready; with EMU_NCCL_DETECT_S=off it must see no error and a pending event.
// Rank 0 prints one result line ("peer_stops: ...") and ends the job with MPI_Abort (rank 1 never
// returns): the runner reads the lines, not the exit status.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Polls ev and comm for up to limit seconds: 0 when ev completed, else the async error seen (or
// ncclInProgress when neither came within the limit).
static int poll(cudaEvent_t ev, ncclComm_t comm, double limit) {
    double end = now() + limit;
    while (now() < end) {
        if (cudaEventQuery(ev) == cudaSuccess) return 0;
        ncclResult_t e = ncclSuccess;
        ncclCommGetAsyncError(comm, &e);
        if (e != ncclSuccess) return e;
        usleep(100);
    }
    return ncclInProgress;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const char* mode = argc > 1 ? argv[1] : "";
    if (world != 2 || (strcmp(mode, "block") && strcmp(mode, "poll"))) {
        if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 %s block|poll\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    ncclCommInitRank(&comm, world, id, rank);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    float *x, host = 1.0f + rank;
    cudaMalloc(&x, sizeof(float));
    cudaMemcpy(x, &host, sizeof(float), cudaMemcpyHostToDevice);

    if (rank == 1) sleep(1);  // rank 0's call must not wait for this rank
    double t0 = now();
    ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm, s);
    double call = now() - t0;
    cudaEventRecord(ev, s);
    int first = poll(ev, comm, 30.0);
    cudaMemcpyAsync(&host, x, sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaEventRecord(ev, s);
    first = first ? first : poll(ev, comm, 30.0);
    if (rank == 1) {  // (no host MPI call from here: the progress thread owns MPI)
        emu_nccl_stop_answering();
        for (;;) sleep(1000);
    }
    if (first != 0 || host != 3.0f || call > 0.5) {
        printf("peer_stops: FAIL first all-reduce: poll %d, sum %g (want 3), the call took %.2f s (want < 0.5 s: it "
               "must not wait for the late peer)\n", first, host, call);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    printf("peer_stops: first all-reduce returned after %.3f s with the peer 1 s late; polled sum %g\n", call, host);
    t0 = now();
    ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm, s);  // rank 1 never joins
    cudaEventRecord(ev, s);
    if (strcmp(mode, "block") == 0) {
        printf("peer_stops: block: cudaStreamSynchronize behind the all-reduce rank 1 never joins\n");
        fflush(stdout);
        cudaStreamSynchronize(s);
        printf("peer_stops: block: FAIL cudaStreamSynchronize returned after %.1f s\n", now() - t0);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int r = poll(ev, comm, 5.0);
    double took = now() - t0;
    bool ready = cudaEventQuery(ev) == cudaSuccess;
    printf("peer_stops: poll: %s after %.2f s, the peer named: rank %d, the event %s\n",
           r == 0 ? "the event completed" : ncclGetErrorString((ncclResult_t)r), took, emu_nccl_stopped_peer(comm),
           ready ? "ready" : "not ready");
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 0);
}
