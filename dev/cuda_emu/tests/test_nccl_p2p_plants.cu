// test_nccl_p2p_plants.cu: mistakes with ncclSend/ncclRecv that the emulator must report (run by
// tests/check_nccl_p2p.sh on 2 ranks). Mode (argv[1]):
//   mismatch   rank 0 sends 5 floats, rank 1 receives 4: the receive must end the program with a
//              message naming both counts (plain build).
//   no_wait    rank 1 receives on a communication stream and a kernel on stream 0 reads the buffer
//              with nothing ordering it after the receive: --check must report the race. With
//              -DFIXED an event recorded after the receive is waited for, and the run passes.
#include <mpi.h>
#include <nccl.h>
#include <cstring>
#include <vector>
#include "check.h"

// y[i] = 2 x[i] for i < n
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2 || argc != 2) { fprintf(stderr, "usage: mpirun -np 2 %s mismatch|no_wait\n", argv[0]); return 2; }
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, 2, id, rank));
    const int len = 256;
    float *buf, *out;
    CUDA_CHECK(cudaMalloc(&buf, len * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&out, len * sizeof(float)));
    std::vector<float> h(len);
    for (int i = 0; i < len; i++) h[i] = (float)(i + 1);
    CUDA_CHECK(cudaMemcpy(buf, h.data(), sizeof(float) * len, cudaMemcpyHostToDevice));
    cudaStream_t cs;
    CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    bool mismatch = strcmp(argv[1], "mismatch") == 0;
    int count = mismatch ? 5 - rank : len;
    if (rank == 0) NCCL_CHECK(ncclSend(buf, count, ncclFloat32, 1, comm, cs));
    else NCCL_CHECK(ncclRecv(buf, count, ncclFloat32, 0, comm, cs));
#ifdef FIXED
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, cs));
    CUDA_CHECK(cudaStreamWaitEvent(0, done, 0));
#endif
    if (rank == 1) twice<<<1, len>>>(buf, out, len);
    CUDA_CHECK(cudaGetLastError());
    while (cudaStreamQuery(cs) == cudaErrorNotReady) {}  // poll: the strict emulator wants no blocking wait
    while (cudaStreamQuery(0) == cudaErrorNotReady) {}
    CUDA_CHECK(cudaDeviceSynchronize());
    NCCL_CHECK(ncclCommDestroy(comm));
    MPI_Finalize();
    return 0;
}
