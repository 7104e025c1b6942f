// Matmuls of the CPU trainer, y = x W^T + b with W stored (out, in), and their backward, on a
// cache-blocked packed GEMM with a register-blocked micro-kernel written with GCC vector
// extensions: 512-bit vectors and a 12x32 tile where AVX-512 is enabled (8x32 on AMD Zen 5),
// 256-bit and 8x16 on AMD Zen 4 (AVX-512 in two 256-bit halves), 256-bit and 6x16 with AVX,
// 128-bit and 6x8 otherwise (plain C on targets without SIMD); -DGEMM_VW=.. -DGEMM_MR=.. sets
// another. Every output element is produced by exactly one thread, summing over k in a fixed order
// (in k order within a KC block, one fused multiply-add per term, then the blocks in sequence), so
// results depend neither on the thread count nor on the tile nor on the target. An output written once and not read again soon (a weight
// gradient) can bypass the caches with streaming stores (GEMM_STREAM).
#ifndef LLMC_CPU_MATMUL_H
#define LLMC_CPU_MATMUL_H

#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#include "cpu_vecmath.h"

#if defined(GEMM_VW) != defined(GEMM_MR)
#error "GEMM_VW and GEMM_MR are set together"
#elif defined(GEMM_VW)
// set by the build (e.g. 256-bit tiles on a CPU that runs AVX-512 as two 256-bit halves)
#elif defined(__AVX512VL__) && (defined(__znver3__) || defined(__znver4__)) && !defined(__AVX512VP2INTERSECT__)
// AMD Zen 4 (gcc 12 calls it znver3 plus AVX-512) runs 512-bit ops as two 256-bit halves: there
// 8 x 16 tiles of 256-bit vectors, in AVX-512VL's 32 registers, measured faster than 12 x 32
#define GEMM_VW 8
#define GEMM_MR 8
#elif defined(__AVX512F__) && (defined(__znver3__) || defined(__znver4__) || defined(__znver5__))
// AMD Zen 5 (a gcc older than its znver5 calls it znver3 or znver4 too; it has VP2INTERSECT, Zen 4 not)
// has whole 512-bit FMA units: 8 x 32 measured 4 points of the peak above 12 x 32, and twice
// the 8 x 16 of Zen 4
#define GEMM_VW 16
#define GEMM_MR 8
#elif defined(__AVX512F__)
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
#ifndef GEMM_KC
#define GEMM_KC 256                 // depth of a packed block: B micro-panel (KC x NR) stays in L1
#endif

typedef float gemm_vec __attribute__((vector_size(GEMM_VW * 4)));
typedef float gemm_vec_u __attribute__((vector_size(GEMM_VW * 4), aligned(4)));
#define gemm_fma VF_CAT(vf, GEMM_VW, _fma) // c + a b in one rounding (llmc/cpu_vecmath.h)

// How a micro-kernel writes its tile: over what is there, added to it, or over it with
// non-temporal (streaming) stores that skip the caches and the read of the lines they replace.
enum { GEMM_SET = 0, GEMM_ADD = 1, GEMM_SET_STREAM = 2 };
#if defined(__AVX512F__) && GEMM_VW == 16
#define GEMM_CAN_STREAM 1
static inline void gemm_stream_vec(float* p, gemm_vec x) { _mm512_stream_ps(p, (__m512)x); }
#elif defined(__AVX__) && GEMM_VW == 8
#define GEMM_CAN_STREAM 1
static inline void gemm_stream_vec(float* p, gemm_vec x) { _mm256_stream_ps(p, (__m256)x); }
#else // 128-bit rows of a tile are half a cache line: not worth it
#define GEMM_CAN_STREAM 0
static inline void gemm_stream_vec(float* p, gemm_vec x) { *(gemm_vec_u*)p = x; }
#endif
#ifndef GEMM_STREAM_BYTES // the kernel test sets 0 to stream every output it may
#define GEMM_STREAM_BYTES ((size_t)4 << 20) // smaller outputs stay in the cache for their next reader
#endif

// c (MR x NR tile, row stride ldc) = (store == GEMM_ADD ? c : bias row or 0) + a_panel (kc x MR) *
// b_panel (kc x NR), written only for the first m rows and n columns; bias (n values, may be NULL)
// is read only when not adding. GEMM_SET_STREAM needs c and ldc aligned to whole vectors.
static inline void gemm_micro_kernel(int kc, const float* restrict a, const float* restrict b, float* c,
                                     size_t ldc, int m, int n, int store, const float* bias) {
    int accumulate = store == GEMM_ADD;
    gemm_vec acc0[GEMM_MR], acc1[GEMM_MR];
    #pragma GCC unroll 16
    for (int i = 0; i < GEMM_MR; i++) { acc0[i] = (gemm_vec){0}; acc1[i] = (gemm_vec){0}; }
    for (int k = 0; k < kc; k++) {
        gemm_vec b0 = *(const gemm_vec*)(b + (size_t)k * GEMM_NR);
        gemm_vec b1 = *(const gemm_vec*)(b + (size_t)k * GEMM_NR + GEMM_VW);
        const float* ak = a + (size_t)k * GEMM_MR;
        #pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            gemm_vec ai = ak[i] - (gemm_vec){0}; // a broadcast (x - 0 is exactly x, unlike 0 + x for -0)
            acc0[i] = gemm_fma(ai, b0, acc0[i]);
            acc1[i] = gemm_fma(ai, b1, acc1[i]);
        }
    }
    if (m == GEMM_MR && n == GEMM_NR) {
        gemm_vec bias0 = (gemm_vec){0}, bias1 = (gemm_vec){0};
        if (bias && !accumulate) { bias0 = *(const gemm_vec_u*)bias; bias1 = *(const gemm_vec_u*)(bias + GEMM_VW); }
        #pragma GCC unroll 16
        for (int i = 0; i < GEMM_MR; i++) {
            gemm_vec_u* row = (gemm_vec_u*)(c + i * ldc);
            if (accumulate) { row[0] += acc0[i]; row[1] += acc1[i]; }
            else if (store == GEMM_SET_STREAM) {
                gemm_stream_vec(c + i * ldc, bias ? bias0 + acc0[i] : acc0[i]);
                gemm_stream_vec(c + i * ldc + GEMM_VW, bias ? bias1 + acc1[i] : acc1[i]);
            } else if (bias) { row[0] = bias0 + acc0[i]; row[1] = bias1 + acc1[i]; }
            else { row[0] = acc0[i]; row[1] = acc1[i]; }
        }
        return;
    }
    float tile[GEMM_MR][GEMM_NR] __attribute__((aligned(64)));
    #pragma GCC unroll 16 // unrolled, every acc index is a constant: the accumulators stay in registers
    for (int i = 0; i < GEMM_MR; i++) {
        *(gemm_vec*)&tile[i][0] = acc0[i];
        *(gemm_vec*)&tile[i][GEMM_VW] = acc1[i];
    }
    for (int i = 0; i < m; i++) {
        float* row = c + i * ldc;
        // the same operations as a whole tile's (no `0 + x`, which would turn -0 into +0): which
        // outputs fall in an edge tile depends on the tile's shape, their values must not
        for (int j = 0; j < n; j++) { row[j] = accumulate ? row[j] + tile[i][j] : bias ? bias[j] + tile[i][j] : tile[i][j]; }
    }
}

// The full panels (width w, the first `full` rows or columns) of a block whose values of each k are
// one contiguous run x + k * ld: copied run by run, each panel's w values in one piece, the run 8
// ahead prefetched (it comes from memory).
static inline __attribute__((always_inline)) void gemm_pack_runs(float* dst, const float* x, size_t ld, int kc,
                                                                 int full, int w) {
    for (int k = 0; k < kc; k++) {
        const float* src = x + (size_t)k * ld;
        if (k + 8 < kc) {
            for (int i = 0; i < full; i += 16) { __builtin_prefetch(src + 8 * ld + i); }
        }
        for (int p = 0; p < full; p += w) { memcpy(dst + (size_t)p * kc + (size_t)k * w, src + p, w * sizeof(float)); }
    }
}

// Packs A(i0 .. i0+mc, k0 .. k0+kc) into MR-row panels (k-major within a panel, zero rows past mc).
// A(i, k) = a[i * rs + k * cs].
static void gemm_pack_a(float* dst, const float* a, size_t rs, size_t cs, int mc, int kc) {
    int full = mc / GEMM_MR * GEMM_MR; // rows in full panels
    if (rs == 1 && cs != 1 && full > 0) { gemm_pack_runs(dst, a, cs, kc, full, GEMM_MR); } // columns contiguous
    for (int p = rs == 1 && cs != 1 ? full : 0; p < mc; p += GEMM_MR) {
        int rows = mc - p < GEMM_MR ? mc - p : GEMM_MR;
        float* d = dst + (size_t)p * kc;
        if (rows < GEMM_MR) { memset(d, 0, (size_t)kc * GEMM_MR * sizeof(float)); }
        if (cs == 1 && rows == GEMM_MR) { // rows contiguous: read MR rows side by side, write sequentially
            const float* src = a + (size_t)p * rs;
            for (int k = 0; k < kc; k++) {
                #pragma GCC unroll 16
                for (int i = 0; i < GEMM_MR; i++) { d[(size_t)k * GEMM_MR + i] = src[(size_t)i * rs + k]; }
            }
        } else if (cs == 1) {
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

// dst[k * lds + j] = src[j * ldr + k] for j, k < GEMM_VW: a square block transposed in registers by
// log2(VW) rounds of swapping the off-diagonal halves of ever smaller blocks.
typedef int gemm_ivec __attribute__((vector_size(GEMM_VW * 4)));
static inline void gemm_transpose_block(float* dst, size_t lds, const float* src, size_t ldr) {
    gemm_vec r[GEMM_VW];
    #pragma GCC unroll 16
    for (int j = 0; j < GEMM_VW; j++) { r[j] = *(const gemm_vec_u*)(src + (size_t)j * ldr); }
    #pragma GCC unroll 4
    for (int h = GEMM_VW / 2; h >= 1; h /= 2) {
        gemm_ivec lo, hi; // row i keeps its columns without bit h and takes row i + h's; i + h the rest
        #pragma GCC unroll 16
        for (int c = 0; c < GEMM_VW; c++) {
            lo[c] = (c & h) ? GEMM_VW + c - h : c;
            hi[c] = (c & h) ? GEMM_VW + c : c + h;
        }
        #pragma GCC unroll 16
        for (int i = 0; i < GEMM_VW; i++) {
            if (i & h) { continue; }
            gemm_vec a = r[i], b = r[i + h];
            r[i] = __builtin_shuffle(a, b, lo);
            r[i + h] = __builtin_shuffle(a, b, hi);
        }
    }
    #pragma GCC unroll 16
    for (int k = 0; k < GEMM_VW; k++) { *(gemm_vec_u*)(dst + (size_t)k * lds) = r[k]; }
}

// Packs B(k0 .. k0+kc, j0 .. j0+nc) into NR-column panels (k-major, zero columns past nc).
// B(k, j) = b[k * rs + j * cs].
static void gemm_pack_b(float* dst, const float* b, size_t rs, size_t cs, int kc, int nc) {
    int full = nc / GEMM_NR * GEMM_NR; // columns in full panels
    if (cs == 1 && full > 0) { gemm_pack_runs(dst, b, rs, kc, full, GEMM_NR); } // rows contiguous
    for (int p = cs == 1 ? full : 0; p < nc; p += GEMM_NR) {
        int cols = nc - p < GEMM_NR ? nc - p : GEMM_NR;
        float* d = dst + (size_t)p * kc;
        if (cols < GEMM_NR) { memset(d, 0, (size_t)kc * GEMM_NR * sizeof(float)); }
        if (cs == 1) {
            for (int k = 0; k < kc; k++) {
                const float* src = b + (size_t)k * rs + p;
                for (int j = 0; j < cols; j++) { d[(size_t)k * GEMM_NR + j] = src[j]; }
            }
        } else if (rs == 1 && cols == GEMM_NR) { // columns contiguous: VW x VW blocks transposed in registers
            const float* src = b + (size_t)p * cs;
            int kfull = kc / GEMM_VW * GEMM_VW;
            for (int k = 0; k < kfull; k += GEMM_VW) {
                if (k + 4 * GEMM_VW < kc) { // each row is a stream of its own: ask for its line 4 blocks ahead
                    for (int j = 0; j < GEMM_NR; j++) { __builtin_prefetch(src + (size_t)j * cs + k + 4 * GEMM_VW); }
                }
                gemm_transpose_block(d + (size_t)k * GEMM_NR, GEMM_NR, src + k, cs);
                gemm_transpose_block(d + (size_t)k * GEMM_NR + GEMM_VW, GEMM_NR, src + GEMM_VW * cs + k, cs);
            }
            for (int k = kfull; k < kc; k++) {
                for (int j = 0; j < GEMM_NR; j++) { d[(size_t)k * GEMM_NR + j] = src[(size_t)j * cs + k]; }
            }
        } else {
            for (int j = 0; j < cols; j++) {
                const float* src = b + (size_t)(p + j) * cs;
                for (int k = 0; k < kc; k++) { d[(size_t)k * GEMM_NR + j] = src[(size_t)k * rs]; }
            }
        }
    }
}

#define GEMM_TILE_N (4 * GEMM_NR) // widest column tile of B a task packs
#define GEMM_TILE_M (8 * GEMM_MR) // tallest row tile of A a task packs
#ifndef GEMM_SHARED_FLOATS // the kernel test sets a small budget to get several rounds
#define GEMM_SHARED_FLOATS (1 << 20) // budget of the shared packed operand, per round
#endif

// A software prefetch (into L2) of the own operand's next block, spread over the micro-kernel
// calls of the current one, so that the next pack finds its data near instead of in memory. The
// region is `outer` runs of `inner` contiguous floats, `stride` floats apart.
typedef struct {
    const float* base;
    size_t stride;
    int inner_lines, next, total, per_call; // next: the next line to ask for, of total
    int o, l;                               // next's run and line in it (no division per line)
} GemmPrefetch;

// X(r, q) = x[r * rs + q * cs] for r < rows, q < cols, asked for over `calls` steps. A region
// with neither dimension contiguous is not prefetched.
static GemmPrefetch gemm_prefetch_plan(const float* x, size_t rs, size_t cs, int rows, int cols, int calls) {
    GemmPrefetch p = {x, 0, 0, 0, 0, 0, 0, 0};
    int outer = cs == 1 ? rows : cols, inner = cs == 1 ? cols : rows;
    if (cs != 1 && rs != 1) { return p; }
    p.stride = cs == 1 ? rs : cs;
    p.inner_lines = (inner + 15) / 16;
    p.total = outer * p.inner_lines;
    p.per_call = (p.total + calls - 1) / (calls > 0 ? calls : 1);
    return p;
}

static inline void gemm_prefetch_step(GemmPrefetch* p) {
    int end = p->next + p->per_call < p->total ? p->next + p->per_call : p->total;
    for (; p->next < end; p->next++) {
        __builtin_prefetch(p->base + (size_t)p->o * p->stride + (size_t)p->l * 16, 0, 2);
        if (++p->l == p->inner_lines) { p->l = 0; p->o++; }
    }
}

// Buffers kept across calls (grown by the first calls, so a training step allocates nothing):
// the shared packed operand, and each thread's packed tile.
static float* gemm_shared;
static size_t gemm_shared_floats;
static _Thread_local float* gemm_tile_buffer;

static float* gemm_alloc(size_t floats) {
    return (float*)aligned_alloc_check(floats * sizeof(float), "a matmul packing buffer");
}

// gemm_bias's mode: GEMM_ADD, or GEMM_SET (0) with GEMM_STREAM to ask for streaming stores where
// they pay: c written in one pass (K within one KC block), at least GEMM_STREAM_BYTES, rows aligned.
#define GEMM_STREAM 2

// c (M, N; row stride ldc) = (mode & GEMM_ADD ? c : bias, each row, or 0 where bias is NULL) + A (M, K)
// B (K, N), A(i, k) = a[i * ars + k * acs], B(k, j) = b[k * brs + j * bcs], bias (N). The bias goes in
// with the first KC block, so c = bias + (block 0) + (block 1) ..., summed in that order. Called
// outside a parallel region. The operand with the smaller
// free dimension is packed once into a shared buffer (in rounds of at most GEMM_SHARED_FLOATS);
// the larger free dimension is cut into tiles that threads take dynamically, each packing its slice
// of the other operand once. A tile's outputs sum the KC blocks in order, whoever computes it.
static void gemm_bias(int M, int N, int K, const float* a, size_t ars, size_t acs, const float* b, size_t brs,
                      size_t bcs, float* c, size_t ldc, int mode, const float* bias) {
    int accumulate = mode & GEMM_ADD;
    int stream = GEMM_CAN_STREAM && (mode & GEMM_STREAM) && !accumulate && K <= GEMM_KC &&
                 4.0 * M * N >= (double)GEMM_STREAM_BYTES && (uintptr_t)c % (GEMM_VW * 4) == 0 &&
                 ldc % GEMM_VW == 0;
    if (K == 0) {
        for (int i = 0; i < M && !accumulate; i++) {
            if (bias) { memcpy(c + i * ldc, bias, (size_t)N * sizeof(float)); }
            else { memset(c + i * ldc, 0, (size_t)N * sizeof(float)); }
        }
        return;
    }
    int a_shared = M <= N;
    int small = a_shared ? M : N, big = a_shared ? N : M;
    int small_unit = a_shared ? GEMM_MR : GEMM_NR, big_unit = a_shared ? GEMM_NR : GEMM_MR;
    size_t small_pad = (size_t)(small + small_unit - 1) / small_unit * small_unit;
    int per_round = (int)(GEMM_SHARED_FLOATS / (small_pad * GEMM_KC));
    int round_k = GEMM_KC * (per_round > 0 ? per_round : 1);
    if (round_k > K) { round_k = K; }
    size_t shared_need = small_pad * (size_t)((round_k + GEMM_KC - 1) / GEMM_KC * GEMM_KC);
    if (shared_need > gemm_shared_floats) {
        free(gemm_shared);
        gemm_shared = gemm_alloc(shared_need);
        gemm_shared_floats = shared_need;
    }
    int nt = omp_get_max_threads();
    int tile = a_shared ? GEMM_TILE_N : GEMM_TILE_M; // shrink until every thread gets about 4 tiles
    while (tile > big_unit && (big + tile - 1) / tile < 4 * nt) { tile -= big_unit; }
    int ntiles = (big + tile - 1) / tile;
    int small_panels = (int)(small_pad / small_unit);
    for (int k0 = 0; k0 < K; k0 += round_k) {
        int kr = K - k0 < round_k ? K - k0 : round_k;
        int kblocks = (kr + GEMM_KC - 1) / GEMM_KC;
        #pragma omp parallel
        {
            #pragma omp for schedule(static)
            for (int job = 0; job < kblocks * small_panels; job++) {
                int kb = job / small_panels, panel = job % small_panels;
                int pc = k0 + kb * GEMM_KC, kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
                int first = panel * small_unit, count = small - first < small_unit ? small - first : small_unit;
                float* dst = gemm_shared + small_pad * (size_t)kb * GEMM_KC + (size_t)first * kc;
                if (a_shared) { gemm_pack_a(dst, a + (size_t)first * ars + (size_t)pc * acs, ars, acs, count, kc); }
                else { gemm_pack_b(dst, b + (size_t)pc * brs + (size_t)first * bcs, brs, bcs, kc, count); }
            }
            if (!gemm_tile_buffer) { gemm_tile_buffer = gemm_alloc((size_t)GEMM_KC * (GEMM_TILE_N > GEMM_TILE_M ? GEMM_TILE_N : GEMM_TILE_M)); }
            float* own = gemm_tile_buffer;
            #pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < ntiles; t++) {
                int first = t * tile, count = big - first < tile ? big - first : tile;
                for (int kb = 0; kb < kblocks; kb++) {
                    int pc = k0 + kb * GEMM_KC, kc = K - pc < GEMM_KC ? K - pc : GEMM_KC;
                    int acc = accumulate || pc > 0;
                    int store = acc ? GEMM_ADD : stream ? GEMM_SET_STREAM : GEMM_SET;
                    const float* bias_row = bias && !acc ? bias : NULL;
                    const float* sh = gemm_shared + small_pad * (size_t)kb * GEMM_KC;
                    // the own operand's next block: this tile's next KC block, or the first block of the
                    // tile this thread likely takes next (t + threads: they take tiles in turn)
                    int nt_next = kb + 1 < kblocks ? t : t + nt, pc_next = kb + 1 < kblocks ? pc + kc : k0;
                    int f_next = nt_next * tile, c_next = big - f_next < tile ? big - f_next : tile;
                    int kc_next = K - pc_next < GEMM_KC ? K - pc_next : GEMM_KC;
                    GemmPrefetch pf = {0};
                    if (nt_next < ntiles) {
                        int calls = a_shared ? (count + GEMM_NR - 1) / GEMM_NR * ((M + GEMM_MR - 1) / GEMM_MR)
                                             : (N + GEMM_NR - 1) / GEMM_NR * ((count + GEMM_MR - 1) / GEMM_MR);
                        pf = a_shared ? gemm_prefetch_plan(b + (size_t)pc_next * brs + (size_t)f_next * bcs, brs, bcs,
                                                           kc_next, c_next, calls)
                                      : gemm_prefetch_plan(a + (size_t)f_next * ars + (size_t)pc_next * acs, ars, acs,
                                                           c_next, kc_next, calls);
                    }
                    if (a_shared) { // own: B (kc, count) in NR panels; all M rows
                        gemm_pack_b(own, b + (size_t)pc * brs + (size_t)first * bcs, brs, bcs, kc, count);
                        for (int jr = 0; jr < count; jr += GEMM_NR) {
                            int n = count - jr < GEMM_NR ? count - jr : GEMM_NR;
                            for (int ir = 0; ir < M; ir += GEMM_MR) {
                                int m = M - ir < GEMM_MR ? M - ir : GEMM_MR;
                                gemm_prefetch_step(&pf);
                                gemm_micro_kernel(kc, sh + (size_t)ir * kc, own + (size_t)jr * kc,
                                                  c + (size_t)ir * ldc + first + jr, ldc, m, n, store,
                                                  bias_row ? bias_row + first + jr : NULL);
                            }
                        }
                    } else { // own: A (count, kc) in MR panels; all N columns
                        gemm_pack_a(own, a + (size_t)first * ars + (size_t)pc * acs, ars, acs, count, kc);
                        for (int jr = 0; jr < N; jr += GEMM_NR) {
                            int n = N - jr < GEMM_NR ? N - jr : GEMM_NR;
                            for (int ir = 0; ir < count; ir += GEMM_MR) {
                                int m = count - ir < GEMM_MR ? count - ir : GEMM_MR;
                                gemm_prefetch_step(&pf);
                                gemm_micro_kernel(kc, own + (size_t)ir * kc, sh + (size_t)jr * kc,
                                                  c + (size_t)(first + ir) * ldc + jr, ldc, m, n, store,
                                                  bias_row ? bias_row + jr : NULL);
                            }
                        }
                    }
                }
            }
#if GEMM_CAN_STREAM
            if (stream) { _mm_sfence(); } // the streamed lines reach memory before anyone reads them
#endif
        }
    }
}

// c = (mode & GEMM_ADD ? c : 0) + A B: gemm_bias without a bias.
static void gemm(int M, int N, int K, const float* a, size_t ars, size_t acs, const float* b, size_t brs,
                 size_t bcs, float* c, size_t ldc, int mode) {
    gemm_bias(M, N, K, a, ars, acs, b, brs, bcs, c, ldc, mode, NULL);
}

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC), bias may be NULL; the bias enters with the
// products' first KC block (no pass of its own). The caller keeps inp for backward: the weight
// gradient is dout^T @ inp.
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    gemm_bias(N, OC, C, inp, C, 1, weight, 1, C, out, OC, 0, bias);
}

// dinp (N, C) = dout @ weight (written); dweight (OC, C) = (accumulate ? dweight : 0) + dout^T @ inp;
// dbias (OC) likewise with the column sums of dout (dbias may be NULL). dweight is not read again
// in this backward: written, it may stream past the caches.
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int C, int OC, int accumulate) {
    gemm(N, C, OC, dout, OC, 1, weight, C, 1, dinp, C, 0);
    gemm(OC, C, N, dout, 1, OC, inp, C, 1, dweight, C, accumulate ? GEMM_ADD : GEMM_SET | GEMM_STREAM);
    if (dbias) {
        #pragma omp parallel
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int o0 = (int)((long)OC * t / nt), o1 = (int)((long)OC * (t + 1) / nt);
            if (!accumulate) { memset(dbias + o0, 0, (size_t)(o1 - o0) * sizeof(float)); }
            for (int n = 0; n < N; n++) {
                const float* g = dout + (size_t)n * OC;
                for (int o = o0; o < o1; o++) { dbias[o] += g[o]; }
            }
        }
    }
}

#endif
