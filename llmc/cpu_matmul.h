// Matmuls of the CPU trainer, y = x W^T + b with W stored (out, in), and their backward, on a
// cache-blocked packed GEMM with a register-blocked micro-kernel written with GCC vector
// extensions: 512-bit vectors and a 12x32 tile where AVX-512 is enabled, 256-bit and 6x16 with
// AVX, 128-bit and 6x8 otherwise (plain C on targets without SIMD). Every output element is
// produced by exactly one thread, summing over k in a fixed order (KC blocks in sequence), so
// results do not depend on the thread count.
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define GEMM_VW 16
#define GEMM_MR 12
#elif defined(__AVX__)
#define GEMM_VW 8
#define GEMM_MR 6
#else
#define GEMM_VW 4
#define GEMM_MR 6
#endif
#define GEMM_NR (2 * GEMM_VW)
#define GEMM_KC 256                 // depth of a packed block: B micro-panel (KC x NR) stays in L1
#define GEMM_MC (20 * GEMM_MR)      // rows of a packed A block (MC x KC) kept in L2
#define GEMM_NC (128 * GEMM_NR)     // columns of a packed B block (KC x NC) kept in L3

typedef float gemm_vec __attribute__((vector_size(GEMM_VW * 4)));
typedef float gemm_vec_u __attribute__((vector_size(GEMM_VW * 4), aligned(4)));

// c (MR x NR tile, row stride ldc) = (accumulate ? c : 0) + a_panel (kc x MR) * b_panel (kc x NR),
// written only for the first m rows and n columns.
static inline void gemm_micro_kernel(int kc, const float* restrict a, const float* restrict b, float* c,
                                     size_t ldc, int m, int n, int accumulate) {
    gemm_vec acc0[GEMM_MR], acc1[GEMM_MR];
    #pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++) { acc0[i] = (gemm_vec){0}; acc1[i] = (gemm_vec){0}; }
    for (int k = 0; k < kc; k++) {
        gemm_vec b0 = *(const gemm_vec*)(b + (size_t)k * GEMM_NR);
        gemm_vec b1 = *(const gemm_vec*)(b + (size_t)k * GEMM_NR + GEMM_VW);
        const float* ak = a + (size_t)k * GEMM_MR;
        #pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            gemm_vec ai = (gemm_vec){0} + ak[i];
            acc0[i] += ai * b0;
            acc1[i] += ai * b1;
        }
    }
    if (m == GEMM_MR && n == GEMM_NR) {
        #pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            gemm_vec_u* row = (gemm_vec_u*)(c + i * ldc);
            if (accumulate) { row[0] += acc0[i]; row[1] += acc1[i]; }
            else { row[0] = acc0[i]; row[1] = acc1[i]; }
        }
        return;
    }
    float tile[GEMM_MR][GEMM_NR] __attribute__((aligned(64)));
    for (int i = 0; i < GEMM_MR; i++) {
        *(gemm_vec*)&tile[i][0] = acc0[i];
        *(gemm_vec*)&tile[i][GEMM_VW] = acc1[i];
    }
    for (int i = 0; i < m; i++) {
        float* row = c + i * ldc;
        for (int j = 0; j < n; j++) { row[j] = (accumulate ? row[j] : 0.0f) + tile[i][j]; }
    }
}

// Packs A(i0 .. i0+mc, k0 .. k0+kc) into MR-row panels (k-major within a panel, zero rows past mc).
// A(i, k) = a[i * rs + k * cs].
static void gemm_pack_a(float* dst, const float* a, size_t rs, size_t cs, int mc, int kc) {
    for (int p = 0; p < mc; p += GEMM_MR) {
        int rows = mc - p < GEMM_MR ? mc - p : GEMM_MR;
        float* d = dst + (size_t)p * kc;
        if (rows < GEMM_MR) { memset(d, 0, (size_t)kc * GEMM_MR * sizeof(float)); }
        if (cs == 1) {
            for (int i = 0; i < rows; i++) {
                const float* src = a + (size_t)(p + i) * rs;
                for (int k = 0; k < kc; k++) { d[(size_t)k * GEMM_MR + i] = src[k]; }
            }
        } else {
            for (int k = 0; k < kc; k++) {
                const float* src = a + (size_t)k * cs + (size_t)p * rs;
                for (int i = 0; i < rows; i++) { d[(size_t)k * GEMM_MR + i] = src[(size_t)i * rs]; }
            }
        }
    }
}

// Packs B(k0 .. k0+kc, j0 .. j0+nc) into NR-column panels (k-major, zero columns past nc).
// B(k, j) = b[k * rs + j * cs].
static void gemm_pack_b(float* dst, const float* b, size_t rs, size_t cs, int kc, int nc) {
    for (int p = 0; p < nc; p += GEMM_NR) {
        int cols = nc - p < GEMM_NR ? nc - p : GEMM_NR;
        float* d = dst + (size_t)p * kc;
        if (cols < GEMM_NR) { memset(d, 0, (size_t)kc * GEMM_NR * sizeof(float)); }
        if (cs == 1) {
            for (int k = 0; k < kc; k++) {
                const float* src = b + (size_t)k * rs + p;
                for (int j = 0; j < cols; j++) { d[(size_t)k * GEMM_NR + j] = src[j]; }
            }
        } else {
            for (int j = 0; j < cols; j++) {
                const float* src = b + (size_t)(p + j) * cs;
                for (int k = 0; k < kc; k++) { d[(size_t)k * GEMM_NR + j] = src[(size_t)k * rs]; }
            }
        }
    }
}

// One thread's pack buffers, allocated on its first GEMM and kept for the life of the thread.
static _Thread_local float* gemm_pack_buffer;

// c (M, N; row stride ldc) = (accumulate ? c : 0) + A (M, K) B (K, N), A(i, k) = a[i * ars + k * acs],
// B(k, j) = b[k * brs + j * bcs]. Called outside a parallel region; splits the larger of M, N over
// the OpenMP threads.
static void gemm(int M, int N, int K, const float* a, size_t ars, size_t acs, const float* b, size_t brs,
                 size_t bcs, float* c, size_t ldc, int accumulate) {
    if (K == 0) {
        if (!accumulate) { for (int i = 0; i < M; i++) { memset(c + i * ldc, 0, (size_t)N * sizeof(float)); } }
        return;
    }
    #pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int split_n = N >= M;
        int unit = split_n ? GEMM_NR : GEMM_MR, units = ((split_n ? N : M) + unit - 1) / unit;
        int u0 = (int)((long)units * t / nt), u1 = (int)((long)units * (t + 1) / nt);
        int m0 = 0, m1 = M, n0 = 0, n1 = N;
        if (split_n) { n0 = u0 * unit; n1 = u1 * unit < N ? u1 * unit : N; }
        else { m0 = u0 * unit; m1 = u1 * unit < M ? u1 * unit : M; }
        if (m0 < m1 && n0 < n1) {
            if (!gemm_pack_buffer) {
                gemm_pack_buffer = (float*)aligned_alloc(64, sizeof(float) * GEMM_KC * (GEMM_MC + GEMM_NC));
                if (!gemm_pack_buffer) { abort(); }
            }
            float* pa = gemm_pack_buffer;
            float* pb = gemm_pack_buffer + GEMM_KC * GEMM_MC;
            for (int jc = n0; jc < n1; jc += GEMM_NC) {
                int nc = n1 - jc < GEMM_NC ? n1 - jc : GEMM_NC;
                for (int pc = 0; pc < K; pc += GEMM_KC) {
                    int kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
                    int acc = accumulate || pc > 0;
                    gemm_pack_b(pb, b + (size_t)pc * brs + (size_t)jc * bcs, brs, bcs, kc, nc);
                    for (int ic = m0; ic < m1; ic += GEMM_MC) {
                        int mc = m1 - ic < GEMM_MC ? m1 - ic : GEMM_MC;
                        gemm_pack_a(pa, a + (size_t)ic * ars + (size_t)pc * acs, ars, acs, mc, kc);
                        for (int jr = 0; jr < nc; jr += GEMM_NR) {
                            int n = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
                            for (int ir = 0; ir < mc; ir += GEMM_MR) {
                                int m = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
                                gemm_micro_kernel(kc, pa + (size_t)ir * kc, pb + (size_t)jr * kc,
                                                  c + (size_t)(ic + ir) * ldc + jc + jr, ldc, m, n, acc);
                            }
                        }
                    }
                }
            }
        }
    }
}

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), bias may be NULL
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    if (bias) {
        #pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) { memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float)); }
    }
    gemm(N, OC, C, inp, C, 1, weight, 1, C, out, OC, bias != NULL);
}

// dinp (N, C) = dout @ weight (written); dweight (OC, C) += dout^T @ inp; dbias (OC) += column
// sums of dout (dbias may be NULL).
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int C, int OC) {
    gemm(N, C, OC, dout, OC, 1, weight, C, 1, dinp, C, 0);
    gemm(OC, C, N, dout, 1, OC, inp, C, 1, dweight, C, 1);
    if (dbias) {
        #pragma omp parallel
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int o0 = (int)((long)OC * t / nt), o1 = (int)((long)OC * (t + 1) / nt);
            for (int n = 0; n < N; n++) {
                const float* g = dout + (size_t)n * OC;
                for (int o = o0; o < o1; o++) { dbias[o] += g[o]; }
            }
        }
    }
}

#endif
