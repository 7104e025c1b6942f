// strict-test: np=2 build=check expect="collectives on two communicators that nothing orders"
// Broken: the trainer's checkpoint on a rank that does not write the model: the shard
// communicator's all-gather of the parameters runs on the communication stream, and the world
// all-reduce of the barrier on stream 0 is issued after it with nothing ordering the two. NCCL
// kernels block, so two communicators' collectives that overlap can deadlock across ranks.
// Fixed: stream 0 waits for the communication stream's last event before the world collective.
#include "world.h"
int main(int argc, char** argv) {
    int rank, world;
    ncclComm_t world_comm, shard;
    NK(strict_world(&argc, &argv, &rank, &world, &world_comm));
    NK(ncclCommSplit(world_comm, 0, rank, &shard, NULL));
    cudaStream_t comm_stream;
    cudaEvent_t comm_done;
    CK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&comm_done, cudaEventDisableTiming));
    const int n = 256;
    float *params, *loss;
    CK(cudaMalloc(&params, n * world * sizeof(float)));
    CK(cudaMalloc(&loss, world * sizeof(float)));
    CK(cudaMemset(params, 0, n * world * sizeof(float)));
    CK(cudaMemset(loss, 0, world * sizeof(float)));
    CK(cudaDeviceSynchronize());
    NK(ncclAllGather(params + rank * n, params, n, ncclFloat, shard, comm_stream));
    CK(cudaEventRecord(comm_done, comm_stream));
#ifdef FIXED
    CK(cudaStreamWaitEvent(0, comm_done, 0));
#endif
    NK(ncclAllReduce(loss, loss, world, ncclFloat, ncclSum, world_comm, 0));
    CK(cudaDeviceSynchronize());
    printf("rank %d: ok\n", rank);
    ncclCommDestroy(shard);
    ncclCommDestroy(world_comm);
    MPI_Finalize();
    return 0;
}
