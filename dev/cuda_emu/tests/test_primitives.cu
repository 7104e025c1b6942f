// test_primitives.cu: kernels exercising the CUDA primitives the emulator provides, each compared
// with a CPU computation: block and warp reductions, prefix scans, an atomic histogram, atomics'
// return values, a shared-memory transpose, every shuffle variant and vote (also in divergent
// half-warps), vector loads, math intrinsics, __constant__ memory, template kernels, 3D indexing,
// cudaLaunchKernelEx, streams, events and device properties. Real CUDA: it also compiles with nvcc.
#include <vector>
#include <algorithm>
#include "check.h"

// ---- block reduction: dynamic shared staging, warp shuffles, static shared warp sums, atomicAdd ----
__global__ void __launch_bounds__(256) block_sum(const float* __restrict__ in, float* out, float* block_out, int n) {
    __shared__ float warp_sums[32];
    extern __shared__ float stage[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    stage[threadIdx.x] = i < n ? in[i] : 0.0f;
    __syncthreads();
    float v = stage[blockDim.x - 1 - threadIdx.x];  // read another thread's value: needs the barrier
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) {
            block_out[blockIdx.x] = v;
            atomicAdd(out, v);
        }
    }
}

// ---- inclusive block scan (Hillis-Steele, double-buffered dynamic shared memory) ----
__global__ void block_scan(const int* in, int* out) {
    extern __shared__ int buf[];  // 2 * blockDim.x ints
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    int* src = buf;
    int* dst = buf + blockDim.x;
    src[t] = in[base + t];
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off *= 2) {
        dst[t] = src[t] + (t >= off ? src[t - off] : 0);
        __syncthreads();
        int* tmp = src; src = dst; dst = tmp;
    }
    out[base + t] = src[t];
}

// ---- inclusive warp scan with __shfl_up_sync ----
__global__ void warp_scan(const int* in, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    int v = in[i];
    for (int d = 1; d < 32; d *= 2) {
        int up = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += up;
    }
    out[i] = v;
}

// ---- histogram: shared-memory atomics, then global atomics ----
__global__ void histogram(const unsigned char* data, int n, unsigned int* hist) {
    __shared__ unsigned int local[64];
    for (int b = threadIdx.x; b < 64; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) atomicAdd(&local[data[i] % 64], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 64; b += blockDim.x) atomicAdd(&hist[b], local[b]);
}

// ---- atomics and their return values ----
__global__ void atomics(int* ticket_old, int* counter, double* dsum, int* imax, int* imin, unsigned* ucount,
                        float* fmax_cas, int* exch, unsigned long long* ull) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    ticket_old[i] = atomicAdd(counter, 1);
    atomicAdd(dsum, 0.5 * i);
    atomicMax(imax, (i * 37) % 1001);
    atomicMin(imin, 1000 - (i * 37) % 1001);
    atomicAdd(ucount, 2u);
    atomicAdd(ull, 3ull);
    float v = (float)((i * 53) % 997);  // float max through an atomicCAS loop
    int* addr = (int*)fmax_cas;
    int old = *addr, assumed;
    do {
        assumed = old;
        if (__int_as_float(assumed) >= v) break;
        old = atomicCAS(addr, assumed, __float_as_int(v));
    } while (old != assumed);
    atomicExch(exch, i);
}

// ---- tiled transpose through shared memory (32x33 tile, 32x8 threads) ----
__global__ void transpose(const float* in, float* out, int rows, int cols) {
    __shared__ float tile[32][33];
    int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * 32 + threadIdx.x;
    y = blockIdx.x * 32 + threadIdx.y;
    for (int j = 0; j < 32; j += 8)
        if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

// ---- every shuffle variant, vote and counting barrier; 14 outputs per thread ----
__global__ void shuffles(int* out, double* dout) {
    int t = threadIdx.x, lane = t % 32;
    int v = 100 * t;
    int* o = out + 14 * t;
    o[0] = __shfl_sync(0xffffffffu, v, 3);
    o[1] = __shfl_sync(0xffffffffu, v, lane + 5, 8);
    o[2] = __shfl_up_sync(0xffffffffu, v, 1, 16);
    o[3] = __shfl_down_sync(0xffffffffu, v, 2);
    o[4] = __shfl_xor_sync(0xffffffffu, v, 1, 4);
    o[5] = __shfl_xor_sync(0xffffffffu, v, 16);
    o[6] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[7] = __any_sync(0xffffffffu, lane == 31);
    o[8] = __all_sync(0xffffffffu, lane < 31);
    o[9] = __all_sync(0xffffffffu, v >= 0);
    o[10] = -1;
    if (lane < 16) o[10] = __shfl_down_sync(0x0000ffffu, v, 1, 16);  // half-warp mask
    __syncwarp();
    o[11] = __syncthreads_count(lane < 4);
    o[12] = __syncthreads_and(lane < 31);
    o[13] = __syncthreads_or(t == 5);
    dout[t] = __shfl_sync(0xffffffffu, 0.25 * t, 31 - lane);
}

// ---- divergent half-warps, each synchronising only its own lanes ----
__global__ void half_warps(int* out) {
    int lane = threadIdx.x % 32, v = 10 * lane;
    if (lane < 16) v = __shfl_xor_sync(0x0000ffffu, v, 1);
    else v = __shfl_down_sync(0xffff0000u, v, 1, 16);
    out[threadIdx.x] = v;
}

// ---- vector types, cache-hinted loads and stores, math intrinsics ----
__global__ void vectors_and_math(const float* in, float* out, const int* iin, int* iout, float* math, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 a = __ldg(reinterpret_cast<const float4*>(in) + i);
        float4 b = __ldcs(reinterpret_cast<const float4*>(in) + i);
        float4 r = make_float4(a.x + b.w, a.y * 2.0f, a.z - b.x, a.w);
        __stcs(reinterpret_cast<float4*>(out) + i, r);
        int4 q = reinterpret_cast<const int4*>(iin)[i];
        reinterpret_cast<int4*>(iout)[i] = make_int4(q.w, q.z, q.y, q.x);
        float x = in[4 * i] * 0.01f;
        float* m = math + 8 * i;
        m[0] = __expf(x);
        m[1] = rsqrtf(x + 2.0f);
        m[2] = tanhf(x);
        m[3] = __fdividef(x, 3.0f);
        m[4] = __logf(x + 2.0f);
        m[5] = fmaxf(x, 0.1f) + fminf(x, 0.1f);
        m[6] = (float)__popc((unsigned)i) + (float)__clz(i + 1);
        m[7] = __saturatef(x);
    }
}

// ---- __constant__ memory and template kernels ----
__constant__ float c_coeffs[8];
template <typename T, int N>
__global__ void poly(T* out, const T* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    T acc = 0;
#pragma unroll
    for (int k = N - 1; k >= 0; k--) acc = acc * in[i] + (T)c_coeffs[k];
    out[i] = acc;
}
template <class T>
__global__ void fill(T* p, T v, int n) {  // launched with deduced template arguments
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v + (T)i;
}

// ---- 3D grids and blocks ----
__global__ void index3d(int* out) {
    int bx = blockDim.x, by = blockDim.y, bz = blockDim.z;
    int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int thread = threadIdx.x + bx * (threadIdx.y + by * threadIdx.z);
    out[block * bx * by * bz + thread] += 1 + (warpSize == 32 ? 0 : 1000);
}

int main() {
    // device properties
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
#ifdef EMU_CUDA
    EXPECT(p.multiProcessorCount == 132 && p.major == 9 && p.minor == 0, "sm %d cc %d.%d", p.multiProcessorCount, p.major, p.minor);
    EXPECT(p.sharedMemPerBlock == 48 * 1024 && p.sharedMemPerBlockOptin == 227 * 1024, "smem %zu %zu", p.sharedMemPerBlock, p.sharedMemPerBlockOptin);
#endif
    EXPECT(p.maxThreadsPerBlock == 1024 && p.warpSize == 32, "threads %d warp %d", p.maxThreadsPerBlock, p.warpSize);

    // block reduction
    {
        const int n = 10000, threads = 256, blocks = (n + threads - 1) / threads;
        std::vector<float> h(n);
        double want = 0;
        for (int i = 0; i < n; i++) { h[i] = (float)((i * 7919) % 1000) / 100.0f - 5.0f; want += h[i]; }
        float *d, *out, *bout;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
        CUDA_CHECK(cudaMalloc(&bout, blocks * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(out, 0, sizeof(float)));
        block_sum<<<blocks, threads, threads * sizeof(float)>>>(d, out, bout, n);
        CUDA_CHECK(cudaGetLastError());
        float got;
        std::vector<float> bgot(blocks);
        CUDA_CHECK(cudaMemcpy(&got, out, sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(bgot.data(), bout, blocks * sizeof(float), cudaMemcpyDeviceToHost));
        EXPECT(close_to(got, want, 1e-4), "block sum %f want %f", got, want);
        for (int b = 0; b < blocks; b++) {
            double bw = 0;
            for (int i = b * threads; i < std::min(n, (b + 1) * threads); i++) bw += h[i];
            EXPECT(close_to(bgot[b], bw, 1e-5), "block %d sum %f want %f", b, bgot[b], bw);
        }
        cudaFree(d); cudaFree(out); cudaFree(bout);
    }

    // block scan and warp scan
    {
        const int threads = 512, blocks = 3, n = threads * blocks;
        std::vector<int> h(n), got(n), got2(n);
        for (int i = 0; i < n; i++) h[i] = (i * 31) % 17 - 8;
        int *d, *o;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
        CUDA_CHECK(cudaMalloc(&o, n * sizeof(int)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        block_scan<<<blocks, threads, 2 * threads * sizeof(int)>>>(d, o);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(got.data(), o, n * sizeof(int), cudaMemcpyDeviceToHost));
        warp_scan<<<blocks, threads>>>(d, o);
        CUDA_CHECK(cudaMemcpy(got2.data(), o, n * sizeof(int), cudaMemcpyDeviceToHost));
        int bad = 0, bad2 = 0;
        for (int i = 0, s = 0, w = 0; i < n; i++) {
            s = (i % threads == 0 ? 0 : s) + h[i];
            w = (i % 32 == 0 ? 0 : w) + h[i];
            bad += got[i] != s;
            bad2 += got2[i] != w;
        }
        EXPECT(bad == 0, "block scan: %d wrong", bad);
        EXPECT(bad2 == 0, "warp scan: %d wrong", bad2);
        cudaFree(d); cudaFree(o);
    }

    // histogram
    {
        const int n = 5000;
        std::vector<unsigned char> h(n);
        std::vector<unsigned> want(64, 0), got(64);
        for (int i = 0; i < n; i++) { h[i] = (unsigned char)((i * i + 7 * i) % 251); want[h[i] % 64]++; }
        unsigned char* d;
        unsigned* hist;
        CUDA_CHECK(cudaMalloc(&d, n));
        CUDA_CHECK(cudaMalloc(&hist, 64 * sizeof(unsigned)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), n, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(hist, 0, 64 * sizeof(unsigned)));
        histogram<<<4, 128>>>(d, n, hist);
        CUDA_CHECK(cudaMemcpy(got.data(), hist, 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
        EXPECT(got == want, "histogram differs");
        cudaFree(d); cudaFree(hist);
    }

    // atomics
    {
        const int n = 4 * 96;
        struct Out { int counter, imax, imin, exch; unsigned ucount; float fmax; double dsum; unsigned long long ull; };
        Out init = {0, -1, 1 << 30, -1, 0, -1.0f, 0.0, 0};
        Out* d;
        int* tickets;
        CUDA_CHECK(cudaMalloc(&d, sizeof(Out)));
        CUDA_CHECK(cudaMalloc(&tickets, n * sizeof(int)));
        CUDA_CHECK(cudaMemcpy(d, &init, sizeof(Out), cudaMemcpyHostToDevice));
        atomics<<<4, 96>>>(tickets, &d->counter, &d->dsum, &d->imax, &d->imin, &d->ucount, &d->fmax, &d->exch, &d->ull);
        Out g;
        std::vector<int> t(n);
        CUDA_CHECK(cudaMemcpy(&g, d, sizeof(Out), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(t.data(), tickets, n * sizeof(int), cudaMemcpyDeviceToHost));
        std::sort(t.begin(), t.end());
        bool perm = true;
        for (int i = 0; i < n; i++) perm = perm && t[i] == i;
        int wmax = 0, wmin = 1 << 30;
        float wf = 0;
        for (int i = 0; i < n; i++) {
            wmax = std::max(wmax, (i * 37) % 1001);
            wmin = std::min(wmin, 1000 - (i * 37) % 1001);
            wf = std::max(wf, (float)((i * 53) % 997));
        }
        EXPECT(perm && g.counter == n, "atomicAdd old values are not a permutation of 0..n-1");
        EXPECT(g.dsum == 0.5 * n * (n - 1) / 2, "double atomicAdd %f", g.dsum);
        EXPECT(g.imax == wmax && g.imin == wmin, "atomicMax %d/%d atomicMin %d/%d", g.imax, wmax, g.imin, wmin);
        EXPECT(g.ucount == 2u * n && g.ull == 3ull * n, "unsigned atomicAdd %u %llu", g.ucount, g.ull);
        EXPECT(g.fmax == wf, "atomicCAS float max %f want %f", g.fmax, wf);
        EXPECT(g.exch >= 0 && g.exch < n, "atomicExch left %d", g.exch);
        cudaFree(d); cudaFree(tickets);
    }

    // transpose
    {
        const int rows = 70, cols = 45;
        std::vector<float> h(rows * cols), got(rows * cols);
        for (int i = 0; i < rows * cols; i++) h[i] = (float)i;
        float *d, *o;
        CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&o, h.size() * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
        transpose<<<dim3((cols + 31) / 32, (rows + 31) / 32), dim3(32, 8)>>>(d, o, rows, cols);
        CUDA_CHECK(cudaMemcpy(got.data(), o, h.size() * sizeof(float), cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) bad += got[c * rows + r] != h[r * cols + c];
        EXPECT(bad == 0, "transpose: %d wrong", bad);
        cudaFree(d); cudaFree(o);
    }

    // shuffles and votes (two warps)
    {
        const int threads = 64;
        int* d;
        double* dd;
        std::vector<int> g(14 * threads);
        std::vector<double> gd(threads);
        CUDA_CHECK(cudaMalloc(&d, g.size() * sizeof(int)));
        CUDA_CHECK(cudaMalloc(&dd, threads * sizeof(double)));
        shuffles<<<1, threads>>>(d, dd);
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaMemcpy(g.data(), d, g.size() * sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(gd.data(), dd, threads * sizeof(double), cudaMemcpyDeviceToHost));
        for (int t = 0; t < threads; t++) {
            int lane = t % 32, w = t - lane, *o = &g[14 * t];
            auto val = [&](int l) { return 100 * (w + l); };
            int want[14] = {
                val(3),
                val((lane & ~7) + ((lane + 5) & 7)),
                (lane % 16) >= 1 ? val(lane - 1) : val(lane),
                lane + 2 < 32 ? val(lane + 2) : val(lane),
                val(lane ^ 1),
                val(lane ^ 16),
                (int)0x49249249u,
                1,
                0,
                1,
                lane < 16 ? ((lane % 16) + 1 < 16 ? val(lane + 1) : val(lane)) : -1,
                (threads / 32) * 4,
                0,
                1,
            };
            for (int k = 0; k < 14; k++) EXPECT(o[k] == want[k], "thread %d shuffle output %d: %d want %d", t, k, o[k], want[k]);
            EXPECT(gd[t] == 0.25 * (w + 31 - lane), "double shuffle thread %d", t);
        }
        half_warps<<<1, threads>>>(d);
        CUDA_CHECK(cudaMemcpy(g.data(), d, threads * sizeof(int), cudaMemcpyDeviceToHost));
        for (int t = 0; t < threads; t++) {
            int lane = t % 32;
            int want = lane < 16 ? 10 * (lane ^ 1) : (lane % 16 + 1 < 16 ? 10 * (lane + 1) : 10 * lane);
            EXPECT(g[t] == want, "half-warp shuffle thread %d: %d want %d", t, g[t], want);
        }
        cudaFree(d); cudaFree(dd);
    }

    // vector types, cache hints, math intrinsics
    {
        const int n4 = 100, n = 4 * n4;
        std::vector<float> h(n), got(n), m(8 * n4);
        std::vector<int> hi(n), goti(n);
        for (int i = 0; i < n; i++) { h[i] = (float)(i % 50) - 20.0f; hi[i] = i * 3; }
        float *d, *o, *dm;
        int *di, *oi;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&o, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&dm, 8 * n4 * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&di, n * sizeof(int)));
        CUDA_CHECK(cudaMalloc(&oi, n * sizeof(int)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(di, hi.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        vectors_and_math<<<(n4 + 63) / 64, 64>>>(d, o, di, oi, dm, n4);
        CUDA_CHECK(cudaMemcpy(got.data(), o, n * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(goti.data(), oi, n * sizeof(int), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(m.data(), dm, m.size() * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n4; i++) {
            const float* a = &h[4 * i];
            float want[4] = {a[0] + a[3], a[1] * 2.0f, a[2] - a[0], a[3]};
            for (int k = 0; k < 4; k++) EXPECT(got[4 * i + k] == want[k], "float4 %d.%d", i, k);
            for (int k = 0; k < 4; k++) EXPECT(goti[4 * i + k] == hi[4 * i + 3 - k], "int4 %d.%d", i, k);
            float x = a[0] * 0.01f;
            double wm[8] = {exp(x), 1 / sqrt(x + 2.0), tanh(x), x / 3.0, log(x + 2.0), std::max(x, 0.1f) + std::min(x, 0.1f),
                            (double)__builtin_popcount(i) + __builtin_clz(i + 1), std::min(std::max(x, 0.0f), 1.0f)};
            for (int k = 0; k < 8; k++) EXPECT(close_to(m[8 * i + k], wm[k], 2e-6), "math %d of x=%g: %.9g want %.9g", k, x, m[8 * i + k], wm[k]);
        }
        cudaFree(d); cudaFree(o); cudaFree(dm); cudaFree(di); cudaFree(oi);
    }

    // __constant__ memory, template kernels (explicit and deduced), cudaLaunchKernelEx
    {
        const int n = 300;
        float coeffs[8] = {1.0f, -2.0f, 0.5f, 0.25f, 9.0f, 9.0f, 9.0f, 9.0f};
        CUDA_CHECK(cudaMemcpyToSymbol(c_coeffs, coeffs, sizeof(coeffs)));
        float back[2];
        CUDA_CHECK(cudaMemcpyFromSymbol(back, c_coeffs, sizeof(back), 2 * sizeof(float)));
        EXPECT(back[0] == 0.5f && back[1] == 0.25f, "cudaMemcpyFromSymbol with offset");
        std::vector<float> h(n), got(n);
        for (int i = 0; i < n; i++) h[i] = (float)(i % 10) * 0.1f;
        float *d, *o;
        double* dd;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&o, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&dd, n * sizeof(double)));
        CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        poly<float, 4><<<(n + 127) / 128, 128>>>(o, d, n);
        CUDA_CHECK(cudaMemcpy(got.data(), o, n * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) {
            float x = h[i], want = ((0.25f * x + 0.5f) * x - 2.0f) * x + 1.0f;
            EXPECT(close_to(got[i], want, 1e-6), "poly %d: %f want %f", i, got[i], want);
        }
        fill<<<(n + 127) / 128, 128>>>(dd, 1.5, n);
        std::vector<double> gd(n);
        CUDA_CHECK(cudaMemcpy(gd.data(), dd, n * sizeof(double), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) EXPECT(gd[i] == 1.5 + i, "deduced template fill %d", i);
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((n + 63) / 64);
        cfg.blockDim = dim3(64);
        CUDA_CHECK(cudaLaunchKernelEx(&cfg, fill<float>, o, 2.0f, n));
        CUDA_CHECK(cudaMemcpy(got.data(), o, n * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++) EXPECT(got[i] == 2.0f + i, "cudaLaunchKernelEx fill %d", i);
        cudaFree(d); cudaFree(o); cudaFree(dd);
    }

    // 3D grid and block: every thread of every block runs exactly once
    {
        dim3 grid(2, 3, 2), block(4, 2, 3);
        const int n = 2 * 3 * 2 * 4 * 2 * 3;
        int* d;
        std::vector<int> g(n);
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
        CUDA_CHECK(cudaMemset(d, 0, n * sizeof(int)));
        index3d<<<grid, block>>>(d);
        CUDA_CHECK(cudaMemcpy(g.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
        EXPECT(std::count(g.begin(), g.end(), 1) == n, "3D launch coverage");
        cudaFree(d);
    }

    // streams, events, async copies
    {
        const int n = 1000;
        cudaStream_t s;
        cudaEvent_t a, b;
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreate(&a));
        CUDA_CHECK(cudaEventCreate(&b));
        float *d, *h;
        CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
        CUDA_CHECK(cudaMallocHost(&h, n * sizeof(float)));
        CUDA_CHECK(cudaEventRecord(a, s));
        CUDA_CHECK(cudaMemsetAsync(d, 0, n * sizeof(float), s));
        fill<<<(n + 255) / 256, 256, 0, s>>>(d, 7.0f, n);
        CUDA_CHECK(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaEventRecord(b, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        float ms = -1;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        EXPECT(ms >= 0.0f, "elapsed %f", ms);
        bool ok = true;
        for (int i = 0; i < n; i++) ok = ok && h[i] == 7.0f + i;
        EXPECT(ok, "stream-ordered memset, kernel, async copy");
        size_t fr, tot;
        CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
        EXPECT(fr <= tot && tot > 0, "cudaMemGetInfo");
        CUDA_CHECK(cudaFreeHost(h));
        CUDA_CHECK(cudaFree(d));
        CUDA_CHECK(cudaEventDestroy(a));
        CUDA_CHECK(cudaEventDestroy(b));
        CUDA_CHECK(cudaStreamDestroy(s));
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    return finish("test_primitives");
}
