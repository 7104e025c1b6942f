// nccl_poll.h: for the emulated NCCL's fault tests (test_nccl_shrink.cu, test_nccl_elastic.cu): the
// clock, and an all-reduce polled with a limit instead of waited for (a peer may never join).
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
#endif
