// Causal self-attention of the CPU trainer, forward and backward, on the packed GEMM micro-kernel
// of llmc/cpu_matmul.h. Per (batch row, head), one thread walks the queries in panels of GEMM_MR
// rows: the panel's scores against the keys up to its last row (tiles wholly above the diagonal
// are skipped), the softmax of each row, then the panel's probabilities times the values. The
// backward products go the same way, the transposed ones (dv, dk) over the rows at or below a
// panel. Masked entries inside a computed tile are stored as zeros, so they add nothing. Every
// output element is summed by one thread in a fixed order: results do not depend on the thread
// count.
#ifndef LLMC_CPU_ATTENTION_H
#define LLMC_CPU_ATTENTION_H

#include <math.h>
#include <omp.h>
#include "cpu_matmul.h"
#include "cpu_vecmath.h"

static int att_round_up(int n, int unit) { return (n + unit - 1) / unit * unit; }

// c rows (m <= GEMM_MR; row stride ldc) = a_panel (kc deep, packed by gemm_pack_a) times columns
// [0, n) of bp, an operand packed whole by gemm_pack_b with depth K, from its depth k0 on.
static void att_panel_product(int kc, const float* a, const float* bp, int K, int k0, int n, float* c, size_t ldc,
                              int m) {
    for (int jr = 0; jr < n; jr += GEMM_NR) {
        gemm_micro_kernel(kc, a, bp + (size_t)jr * K + (size_t)k0 * GEMM_NR, c + jr, ldc, m,
                          n - jr < GEMM_NR ? n - jr : GEMM_NR, 0, NULL);
    }
}

// Row t of a panel's scores s[0..cols) becomes softmax(scale s[0..t]) and zeros on (t, cols).
static void att_softmax_row(float* s, int t, int cols, float scale) {
    int n = t + 1;
    for (int i = 0; i < n; i++) { s[i] *= scale; }
    float maxv = vf_array_max(s, n);
    float inv = 1.0f / vf_array_exp_sum(s, s, n, maxv);
    for (int i = 0; i < n; i++) { s[i] *= inv; }
    if (cols > n) { memset(s + n, 0, (size_t)(cols - n) * sizeof(float)); }
}

// Forward of one (batch row, head): q, k, v (T, hs) with row stride ld, out (T, hs) with row stride
// ldo, p (T, T) the probabilities. Scratch: att_forward_floats(T, hs).
static size_t att_forward_floats(int T, int hs) {
    return (size_t)hs * att_round_up(T, GEMM_NR) + (size_t)T * att_round_up(hs, GEMM_NR) + (size_t)GEMM_MR * (hs + T);
}

static void att_forward_head(float* out, size_t ldo, float* p, const float* q, const float* k, const float* v,
                             size_t ld, int T, int hs, float* scratch) {
    float* kp = scratch;                                        // B (hs, T) = k^T
    float* vp = kp + (size_t)hs * att_round_up(T, GEMM_NR);     // B (T, hs) = v
    float* qa = vp + (size_t)T * att_round_up(hs, GEMM_NR);     // A panel (MR, hs) of q
    float* pa = qa + (size_t)GEMM_MR * hs;                      // A panel (MR, T) of p
    float scale = 1.0f / sqrtf((float)hs);
    gemm_pack_b(kp, k, 1, ld, hs, T);
    gemm_pack_b(vp, v, ld, 1, T, hs);
    for (int ir = 0; ir < T; ir += GEMM_MR) {
        int m = T - ir < GEMM_MR ? T - ir : GEMM_MR, kend = ir + m; // rows see keys < kend
        int cols = att_round_up(kend, GEMM_NR) < T ? att_round_up(kend, GEMM_NR) : T;
        float* s = p + (size_t)ir * T;
        gemm_pack_a(qa, q + (size_t)ir * ld, ld, 1, m, hs);
        att_panel_product(hs, qa, kp, hs, 0, cols, s, T, m);
        for (int r = 0; r < m; r++) { att_softmax_row(s + (size_t)r * T, ir + r, cols, scale); }
        gemm_pack_a(pa, s, T, 1, m, kend);
        att_panel_product(kend, pa, vp, T, 0, hs, out + (size_t)ir * ldo, ldo, m);
    }
}

// Backward of one (batch row, head): dy (T, hs) row stride ldy -> dq, dk, dv (T, hs) with row
// stride ld (written); p holds forward's probabilities and becomes the scores' gradient.
// Scratch: att_backward_floats(T, hs).
static size_t att_backward_floats(int T, int hs) {
    int Tn = att_round_up(T, GEMM_NR), hn = att_round_up(hs, GEMM_NR);
    return 3 * (size_t)T * hn + (size_t)hs * Tn + (size_t)GEMM_MR * (T + hs + Tn);
}

// The transposed product of the lower-triangular p: c (T, hs) row stride ld, c[t2] = sum over
// t >= t2 of p[t][t2] bp[t], bp packed (T, hs).
static void att_lower_transposed_product(float* c, size_t ld, const float* p, const float* bp, int T, int hs,
                                         float* pa) {
    for (int ir = 0; ir < T; ir += GEMM_MR) {
        int m = T - ir < GEMM_MR ? T - ir : GEMM_MR;
        gemm_pack_a(pa, p + (size_t)ir * T + ir, 1, T, m, T - ir); // A (t2, t) = p[t][t2], t >= ir
        att_panel_product(T - ir, pa, bp, T, ir, hs, c + (size_t)ir * ld, ld, m);
    }
}

static void att_backward_head(float* dq, float* dk, float* dv, size_t ld, float* p, const float* dy, size_t ldy,
                              const float* q, const float* k, const float* v, int T, int hs, float* scratch) {
    int Tn = att_round_up(T, GEMM_NR), hn = att_round_up(hs, GEMM_NR);
    float* dyp = scratch;                       // B (T, hs) = dy
    float* kp = dyp + (size_t)T * hn;           // B (T, hs) = k
    float* qp = kp + (size_t)T * hn;            // B (T, hs) = q
    float* vtp = qp + (size_t)T * hn;           // B (hs, T) = v^T
    float* pa = vtp + (size_t)hs * Tn;          // A panel (MR, T)
    float* dya = pa + (size_t)GEMM_MR * T;      // A panel (MR, hs) of dy
    float* datt = dya + (size_t)GEMM_MR * hs;   // (MR, Tn): a panel's dy v^T
    float scale = 1.0f / sqrtf((float)hs);
    gemm_pack_b(dyp, dy, ldy, 1, T, hs);
    gemm_pack_b(kp, k, ld, 1, T, hs);
    gemm_pack_b(qp, q, ld, 1, T, hs);
    gemm_pack_b(vtp, v, 1, ld, hs, T);
    att_lower_transposed_product(dv, ld, p, dyp, T, hs, pa); // dv = p^T dy
    for (int ir = 0; ir < T; ir += GEMM_MR) {
        int m = T - ir < GEMM_MR ? T - ir : GEMM_MR, kend = ir + m;
        gemm_pack_a(dya, dy + (size_t)ir * ldy, ldy, 1, m, hs);
        att_panel_product(hs, dya, vtp, hs, 0, att_round_up(kend, GEMM_NR), datt, Tn, m); // datt = dy v^T
        for (int r = 0; r < m; r++) { // dscores = p (datt - sum p datt) scale, over t2 <= t
            float* pr = p + (size_t)(ir + r) * T;
            const float* d = datt + (size_t)r * Tn;
            int n = ir + r + 1;
            float dot = vf_array_dot(pr, d, n);
            for (int t2 = 0; t2 < n; t2++) { pr[t2] = pr[t2] * (d[t2] - dot) * scale; }
        }
        gemm_pack_a(pa, p + (size_t)ir * T, T, 1, m, kend);
        att_panel_product(kend, pa, kp, T, 0, hs, dq + (size_t)ir * ld, ld, m); // dq = dscores k
    }
    att_lower_transposed_product(dk, ld, p, qp, T, hs, pa); // dk = dscores^T q
}

// out (B, T, C) = causal attention of qkv (B, T, 3C: q, k, v, head h in columns h hs .. of each
// third), heads side by side; att (B, NH, T, T) gets the probabilities (zeros above the diagonal
// inside computed tiles; the rest is not written and never read).
static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* base = qkv + (size_t)b * T * C3 + h * hs;
            float* scratch = vf_thread_scratch(att_forward_floats(T, hs));
            att_forward_head(out + (size_t)b * T * C + h * hs, C, att + ((size_t)b * NH + h) * T * T, base, base + C,
                             base + 2 * C, C3, T, hs, scratch);
        }
    }
}

// dout (B, T, C) -> dqkv (B, T, 3C) (written), from forward's qkv and att; att becomes the
// gradient of the pre-softmax scores.
static void attention_backward(float* dqkv, const float* dout, const float* qkv, float* att, int B, int T, int C,
                               int NH) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    #pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* base = qkv + (size_t)b * T * C3 + h * hs;
            float* dbase = dqkv + (size_t)b * T * C3 + h * hs;
            float* scratch = vf_thread_scratch(att_backward_floats(T, hs));
            att_backward_head(dbase, dbase + C, dbase + 2 * C, C3, att + ((size_t)b * NH + h) * T * T,
                              dout + (size_t)b * T * C + h * hs, C, base, base + C, base + 2 * C, T, hs, scratch);
        }
    }
}

#endif
