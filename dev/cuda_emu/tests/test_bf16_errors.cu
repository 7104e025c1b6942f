// test_bf16_errors.cu: cuda_bf16.h conversions (round to nearest even on ties, NaN, Inf, round
// toward zero, the bf16 operators) on the host and in a kernel, and the launch errors a GPU
// reports through cudaGetLastError (zero dimensions, too many threads, block and grid dimension
// limits, dynamic shared memory above 48 KiB without opt-in and above the 227 KiB opt-in limit),
// with a check that a refused kernel does not run. Real CUDA: it also compiles with nvcc.
#include <cstring>
#include <cstdint>
#include <cuda_bf16.h>
#include "check.h"

static float bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

__global__ void bf16_kernel(const float* in, __nv_bfloat16* out, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __float2bfloat16(in[i]);
        __nv_bfloat162 pair = __floats2bfloat162_rn(in[i], 2.0f * in[i]);
        float2 f = __bfloat1622float2(pair);
        back[i] = __bfloat162float(out[i] * __float2bfloat16(2.0f)) + f.y - f.y + (f.x - __low2float(pair));
    }
}

__global__ void mark(int* flag, int value) { flag[threadIdx.x] = value; }
__global__ void big_smem(int* flag) {
    extern __shared__ int dyn[];
    dyn[threadIdx.x] = 1;
    __syncthreads();
    if (threadIdx.x == 0) *flag = dyn[0] + 41;
}

static int launch_result(dim3 grid, dim3 block, size_t smem, int* flag) {
    CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
    mark<<<grid, block, smem>>>(flag, 1);
    cudaError_t e = cudaGetLastError();
    int ran;
    CUDA_CHECK(cudaMemcpy(&ran, flag, sizeof(int), cudaMemcpyDeviceToHost));
    if (e != cudaSuccess && ran) return -1;  // a refused launch must not run
    return (int)e;
}

// Conversions a GPU does in one step: double -> bf16 rounded once; float -> int saturating, NaN -> 0.
__global__ void conversions(const double* d, float* bf, int* ints) {
    *bf = __bfloat162float(__double2bfloat16(*d));
    ints[0] = __float2int_rn(__int_as_float(0x7fc00000));  // NaN
    ints[1] = __float2int_rz(3e9f);
    ints[2] = __float2int_rd(-3e9f);
    ints[3] = (int)__float2uint_rn(-5.0f);
}

int main() {
    // host conversions: (input bits, round-to-nearest-even result, round-toward-zero result)
    struct Case { uint32_t in; uint16_t rn, rz; };
    const Case cases[] = {
        {0x3f800000u, 0x3f80, 0x3f80},  // 1.0 exact
        {0x3f808000u, 0x3f80, 0x3f80},  // tie, even below: stays
        {0x3f818000u, 0x3f82, 0x3f81},  // tie, odd below: rounds up to even
        {0x3f808001u, 0x3f81, 0x3f80},  // just above the tie
        {0x3f807fffu, 0x3f80, 0x3f80},  // just below the tie
        {0xbf818000u, 0xbf82, 0xbf81},  // negative tie
        {0x7f7fffffu, 0x7f80, 0x7f7f},  // FLT_MAX rounds to +Inf
        {0x7f800000u, 0x7f80, 0x7f80},  // +Inf
        {0xff800000u, 0xff80, 0xff80},  // -Inf
        {0x00000001u, 0x0000, 0x0000},  // smallest denormal
        {0x80000000u, 0x8000, 0x8000},  // -0
    };
    for (const Case& c : cases) {
        float f = bits_to_float(c.in);
        uint16_t rn = __bfloat16_as_ushort(__float2bfloat16(f)), rn2 = __bfloat16_as_ushort(__float2bfloat16_rn(f));
        uint16_t rz = __bfloat16_as_ushort(__float2bfloat16_rz(f));
        EXPECT(rn == c.rn && rn2 == c.rn, "rn of 0x%08x: 0x%04x want 0x%04x", c.in, rn, c.rn);
        EXPECT(rz == c.rz, "rz of 0x%08x: 0x%04x want 0x%04x", c.in, rz, c.rz);
        EXPECT(__bfloat16_as_ushort(__float2bfloat16(__bfloat162float(__ushort_as_bfloat16(c.rn)))) == c.rn, "round trip 0x%04x", c.rn);
    }
    for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00001u}) {
        uint16_t h = __bfloat16_as_ushort(__float2bfloat16(bits_to_float(nan)));
        uint16_t z = __bfloat16_as_ushort(__float2bfloat16_rz(bits_to_float(nan)));
        EXPECT((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0, "NaN 0x%08x became 0x%04x", nan, h);
        EXPECT((z & 0x7f80) == 0x7f80 && (z & 0x7f) != 0, "NaN 0x%08x (rz) became 0x%04x", nan, z);
    }
    __nv_bfloat16 a = __float2bfloat16(1.5f), b = __float2bfloat16(0.25f);
    EXPECT(__bfloat162float(a + b) == 1.75f && __bfloat162float(a * b) == 0.375f && __bfloat162float(a - b) == 1.25f, "bf16 operators");
    EXPECT(__bfloat162float(__float2bfloat16(1.0f) + __float2bfloat16(1.0f / 256.0f)) == 1.0f, "bf16 sum rounds (1 + 2^-8 is a tie to even)");

    // the same conversions inside a kernel
    {
        const int n = 64;
        float h[n], back[n];
        __nv_bfloat16 out[n];
        for (int i = 0; i < n; i++) h[i] = bits_to_float(0x3f800000u + (uint32_t)i * 0x4000u);  // steps of a quarter bf16 ulp
        float *d, *db;
        __nv_bfloat16* dout;
        CUDA_CHECK(cudaMalloc(&d, sizeof(h)));
        CUDA_CHECK(cudaMalloc(&db, sizeof(back)));
        CUDA_CHECK(cudaMalloc(&dout, sizeof(out)));
        CUDA_CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
        bf16_kernel<<<2, 32>>>(d, dout, db, n);
        CUDA_CHECK(cudaMemcpy(out, dout, sizeof(out), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(back, db, sizeof(back), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) {
            // i quarter-ulps above 1.0: i/4 ulps plus a remainder of 0, 1/4 (down), 1/2 (tie to even), 3/4 (up)
            uint32_t q = i / 4, r = i % 4;
            uint32_t want = 0x3f80 + q + (r == 3 || (r == 2 && (q & 1)));
            EXPECT(__bfloat16_as_ushort(out[i]) == want, "kernel bf16 of step %d: 0x%04x want 0x%04x", i, __bfloat16_as_ushort(out[i]), want);
            EXPECT(back[i] == 2.0f * __bfloat162float(out[i]), "kernel bf16 arithmetic %d", i);
        }
        cudaFree(d); cudaFree(db); cudaFree(dout);
    }

    // launch errors
    int* flag;
    CUDA_CHECK(cudaMalloc(&flag, 1024 * sizeof(int)));
    EXPECT(launch_result(dim3(1), dim3(1024), 0, flag) == cudaSuccess, "1024 threads is allowed");
    EXPECT(launch_result(dim3(1), dim3(1025), 0, flag) == cudaErrorInvalidConfiguration, "1025 threads");
    EXPECT(launch_result(dim3(1), dim3(32, 32, 2), 0, flag) == cudaErrorInvalidConfiguration, "2048 threads in 3D");
    EXPECT(launch_result(dim3(1), dim3(1, 1, 65), 0, flag) == cudaErrorInvalidConfiguration, "block z 65");
    EXPECT(launch_result(dim3(0), dim3(32), 0, flag) == cudaErrorInvalidConfiguration, "zero grid");
    EXPECT(launch_result(dim3(1), dim3(0), 0, flag) == cudaErrorInvalidConfiguration, "zero block");
    EXPECT(launch_result(dim3(1, 1, 0), dim3(32), 0, flag) == cudaErrorInvalidConfiguration, "zero grid z");
    EXPECT(launch_result(dim3(1, 65536), dim3(32), 0, flag) == cudaErrorInvalidConfiguration, "grid y 65536");
    EXPECT(launch_result(dim3(1), dim3(32), 48 * 1024, flag) == cudaSuccess, "48 KiB dynamic shared memory");
    EXPECT(launch_result(dim3(1), dim3(32), 48 * 1024 + 1, flag) == cudaErrorInvalidValue, "48 KiB + 1 without opt-in");
    EXPECT(cudaGetLastError() == cudaSuccess, "cudaGetLastError resets the error");
    mark<<<1, 2000>>>(flag, 1);
    EXPECT(cudaPeekAtLastError() == cudaErrorInvalidConfiguration && cudaGetLastError() == cudaErrorInvalidConfiguration &&
               cudaGetLastError() == cudaSuccess, "peek keeps the error, get clears it");
    EXPECT(strcmp(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration argument") == 0, "error string");

    const int big = 200 * 1024;
    CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
    big_smem<<<1, 64, big>>>(flag);
    EXPECT(cudaGetLastError() == cudaErrorInvalidValue, "200 KiB before opt-in");
    CUDA_CHECK(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
    big_smem<<<1, 64, big>>>(flag);
    EXPECT(cudaGetLastError() == cudaSuccess, "200 KiB after opt-in");
    int got = 0;
    CUDA_CHECK(cudaMemcpy(&got, flag, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(got == 42, "opted-in kernel ran: %d", got);
    void (*through_pointer)(int*) = big_smem;  // the opt-in follows the kernel, however it is named
    through_pointer<<<1, 64, big>>>(flag);
    EXPECT(cudaGetLastError() == cudaSuccess, "200 KiB after opt-in, launched through a function pointer");
    big_smem<<<1, 64, big + 1>>>(flag);
    EXPECT(cudaGetLastError() == cudaErrorInvalidValue, "above the opted-in size");
    EXPECT(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024) == cudaErrorInvalidValue,
           "opt-in above 227 KiB");
    cudaGetLastError();
    EXPECT(launch_result(dim3(1), dim3(32), big, flag) == cudaErrorInvalidValue, "opt-in is per kernel");
    CUDA_CHECK(cudaFree(flag));
    {
        // 1 + 2^-8 + 2^-30: the nearest bf16 is 1 + 2^-7; rounding to float first gives a tie that rounds to 1
        double hd = 1.0 + 1.0 / 256 + 1.0 / (1 << 30), *dd;
        float hb, *db;
        int hi[4], *di;
        CUDA_CHECK(cudaMalloc(&dd, sizeof(double)));
        CUDA_CHECK(cudaMalloc(&db, sizeof(float)));
        CUDA_CHECK(cudaMalloc(&di, sizeof(hi)));
        CUDA_CHECK(cudaMemcpy(dd, &hd, sizeof(double), cudaMemcpyHostToDevice));
        conversions<<<1, 1>>>(dd, db, di);
        CUDA_CHECK(cudaMemcpy(&hb, db, sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(hi, di, sizeof(hi), cudaMemcpyDeviceToHost));
        EXPECT(hb == 1.0f + 1.0f / 128, "__double2bfloat16(1 + 2^-8 + 2^-30) = %.9g, want 1.0078125", hb);
        EXPECT(hi[0] == 0 && hi[1] == 2147483647 && hi[2] == (-2147483647 - 1) && hi[3] == 0,
               "float->int conversions %d %d %d %d, want 0 INT_MAX INT_MIN 0", hi[0], hi[1], hi[2], hi[3]);
        CUDA_CHECK(cudaFree(dd));
        CUDA_CHECK(cudaFree(db));
        CUDA_CHECK(cudaFree(di));
    }
    return finish("test_bf16_errors");
}
