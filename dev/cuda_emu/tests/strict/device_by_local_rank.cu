// strict-test: np=2 visible=per-rank expect="invalid device ordinal|cudaErrorInvalidDevice"
// Broken: each rank takes the GPU of its local rank. Started with one visible GPU per rank
// (CUDA_VISIBLE_DEVICES set per task, as srun --gpus-per-task=1 does), rank 1 asks for GPU 1 of 1.
// Fixed: the local rank only where that many GPUs are visible, GPU 0 where one is.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
int main() {
    const char* lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int local_rank = lr ? atoi(lr) : 0, devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) { printf("no GPU\n"); return 1; }
    int device = local_rank;
#ifdef FIXED
    if (devices == 1) device = 0;
#endif
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        printf("local rank %d: cudaSetDevice(%d) with %d visible: %s (%s)\n", local_rank, device, devices,
               cudaGetErrorString(e), cudaGetErrorName(e));
        return 1;
    }
    float* x;
    if (cudaMalloc(&x, 64) != cudaSuccess) return 1;
    printf("local rank %d: GPU %d of %d visible: ok\n", local_rank, device, devices);
    return 0;
}
