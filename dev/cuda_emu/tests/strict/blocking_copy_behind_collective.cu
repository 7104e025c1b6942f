// strict-test: np=2 expect="cudaMemcpy blocks behind a collective \(ncclAllReduce\)"
// Broken: HellaSwag's forward read back with a blocking cudaMemcpy on stream 0 while it stands
// behind an all-reduce: on a GPU the collective returns at once, and if a peer died or hangs the
// copy blocks forever, with no deadline. Fixed: the host first polls an event recorded after the
// work (cudaEventQuery with a deadline, and ncclCommGetAsyncError), then copies.
#include <chrono>
#include "world.h"
int main(int argc, char** argv) {
    int rank, world;
    ncclComm_t comm;
    NK(strict_world(&argc, &argv, &rank, &world, &comm));
    float *x, host[4] = {1, 2, 3, 4};
    cudaMalloc(&x, sizeof(host));
    cudaMemcpy(x, host, sizeof(host), cudaMemcpyHostToDevice);
    NK(ncclAllReduce(x, x, 4, ncclFloat, ncclSum, comm, 0));
#ifdef FIXED
    cudaEvent_t done;
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    cudaEventRecord(done, 0);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
        cudaError_t q = cudaEventQuery(done);
        if (q == cudaSuccess) break;
        ncclResult_t async;
        ncclCommGetAsyncError(comm, &async);
        if (q != cudaErrorNotReady || async != ncclSuccess || std::chrono::steady_clock::now() > deadline) {
            printf("rank %d: the all-reduce failed or timed out\n", rank);
            return 1;
        }
    }
#endif
    cudaMemcpy(host, x, sizeof(host), cudaMemcpyDeviceToHost);
    printf("rank %d: sum %g (want %g)\n", rank, host[0], 1.0 * world);
    ncclCommDestroy(comm);
    MPI_Finalize();
    return host[0] == world ? 0 : 1;
}
