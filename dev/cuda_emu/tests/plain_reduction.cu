// plain_reduction.cu: an ordinary CUDA program, written with no emulator in mind: a sum reduction
// using static and dynamic shared memory, warp shuffles and atomicAdd, checked against the CPU.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define cudaCheck(err) do { cudaError_t e = (err); if (e != cudaSuccess) { \
    printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(EXIT_FAILURE); } } while (0)

__device__ __forceinline__ float warpReduceSum(float val) {
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        val += __shfl_down_sync(0xffffffff, val, offset);
    return val;
}

__global__ void sum_kernel(const float* __restrict__ x, float* result, int N) {
    extern __shared__ float partial[];  // one float per thread
    __shared__ float warp_totals[32];
    int tid = threadIdx.x;
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < N; i += blockDim.x * gridDim.x) sum += x[i];
    partial[tid] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride >= 32; stride /= 2) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    float v = tid < 32 ? warpReduceSum(partial[tid]) : 0.0f;
    if (tid == 0) warp_totals[0] = v;
    __syncthreads();
    if (tid == 0) atomicAdd(result, warp_totals[0]);
}

int main() {
    const int N = 1 << 18;
    float* h_x = (float*)malloc(N * sizeof(float));
    srand(1234);
    for (int i = 0; i < N; i++) h_x[i] = (float)rand() / RAND_MAX - 0.5f;
    double cpu = 0.0;
    for (int i = 0; i < N; i++) cpu += h_x[i];

    float *d_x, *d_result;
    cudaCheck(cudaMalloc(&d_x, N * sizeof(float)));
    cudaCheck(cudaMalloc(&d_result, sizeof(float)));
    cudaCheck(cudaMemcpy(d_x, h_x, N * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(d_result, 0, sizeof(float)));
    int block_size = 256, grid_size = 64;
    sum_kernel<<<grid_size, block_size, block_size * sizeof(float)>>>(d_x, d_result, N);
    cudaCheck(cudaGetLastError());
    float gpu;
    cudaCheck(cudaMemcpy(&gpu, d_result, sizeof(float), cudaMemcpyDeviceToHost));
    printf("GPU sum: %.4f\nCPU sum: %.4f\n", gpu, cpu);
    int ok = fabs(gpu - cpu) < 1e-3 * (1.0 + fabs(cpu));
    printf(ok ? "match\n" : "MISMATCH\n");
    cudaCheck(cudaFree(d_x));
    cudaCheck(cudaFree(d_result));
    free(h_x);
    return ok ? 0 : 1;
}
