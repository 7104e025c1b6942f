// nccl_poll.h: for the emulated NCCL's fault tests (test_nccl_shrink.cu, test_nccl_elastic.cu): the
// clock, an all-reduce polled with a limit instead of waited for (a peer may never join), and one
// whose communicator's asynchronous error is polled for (a peer that never joins).
#ifndef NCCL_POLL_H
#define NCCL_POLL_H
#include <chrono>
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The all-reduce of v over comm on a new stream, polled for up to 10 s: the sum, or -1 (never completed).
static float all_reduce(float v, ncclComm_t comm) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *x, host = v;
    cudaMalloc(&x, sizeof(float));
    cudaMemcpy(x, &host, sizeof(float), cudaMemcpyHostToDevice);
    ncclAllReduce(x, x, 1, ncclFloat, ncclSum, comm, s);
    cudaMemcpyAsync(&host, x, sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaEventRecord(ev, s);
    for (double end = now() + 10.0; now() < end; usleep(1000))
        if (cudaEventQuery(ev) == cudaSuccess) return host;
    return -1.0f;
}

// An all-reduce over comm that a peer never joins, on a new stream (*s, its one-float buffer *x),
// then ncclCommGetAsyncError polled for up to `limit` seconds: returns the error it reported
// (ncclSuccess: none within the limit), *waited the seconds it took.
static ncclResult_t stuck_all_reduce(ncclComm_t comm, double limit, cudaStream_t* s, float** x, double* waited) {
    cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
    cudaMalloc(x, sizeof(float));
    ncclAllReduce(*x, *x, 1, ncclFloat, ncclSum, comm, *s);
    double t0 = now();
    ncclResult_t e = ncclSuccess;
    while (e == ncclSuccess && now() - t0 < limit) {
        ncclCommGetAsyncError(comm, &e);
        usleep(1000);
    }
    *waited = now() - t0;
    return e;
}
#endif
