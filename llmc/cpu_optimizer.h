// The CPU trainer's optimizer updates on fp32 host arrays (llmc/optimizer.h's settings): AdamW,
// element by element, and Muon, one matrix at a time: its momentum and Nesterov blend element by
// element, the Newton-Schulz orthogonalization through llmc/cpu_matmul.h's GEMM (fixed summation
// order: the same bits for any thread count and target). Which elements a rank updates is the
// data-parallel layer's (llmc/dp_host.h); nothing here communicates.
#ifndef LLMC_CPU_OPTIMIZER_H
#define LLMC_CPU_OPTIMIZER_H

#include <math.h>
#include "optimizer.h"
#include "cpu_matmul.h"

static void host_adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float grad_scale,
                              float weight_decay, const AdamWConfig* h, float bias1, float bias2) {
    // the hyperparameters in locals: stores through the float pointers cannot alias them, so the
    // loop vectorises
    const float beta1 = h->beta1, beta2 = h->beta2, lr = h->lr, eps = h->eps;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = fmaf(beta1, m[i], (1.0f - beta1) * g); // fused where written: the build contracts
        float vi = fmaf(beta2, v[i], (1.0f - beta2) * g * g); // nothing by itself (llmc/cpu_vecmath.h)
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bias1, vhat = vi / bias2;
        params[i] = fmaf(-lr, fmaf(weight_decay, params[i], mhat / (sqrtf(vhat) + eps)), params[i]);
    }
}

// Muon's work space for matrices of up to `elements` entries whose smaller side is at most `side`:
// the Nesterov blend U, the iterate X and the next one, S = X X^T and the polynomial in S.
typedef struct {
    float *u, *x, *y, *s, *p;
    size_t elements, side;
} MuonWork;

static void muon_work_alloc(MuonWork* w, size_t elements, size_t side) {
    w->elements = elements;
    w->side = side;
    w->u = (float*)malloc_check(elements * sizeof(float));
    w->x = (float*)malloc_check(elements * sizeof(float));
    w->y = (float*)malloc_check(elements * sizeof(float));
    w->s = (float*)malloc_check(side * side * sizeof(float));
    w->p = (float*)malloc_check(side * side * sizeof(float));
}

static void muon_work_free(MuonWork* w) {
    free(w->u);
    free(w->x);
    free(w->y);
    free(w->s);
    free(w->p);
}

// s (m x m) = X X^T for X (m x n, row stride ldx): symmetric, so only the blocks of 64 rows from
// the diagonal on are computed (each pair once) and the rest mirrored. The bits are the full
// product's: an element sums its k terms in the GEMM's one fixed order, whichever tile computes it,
// and x_ik x_jk is x_jk x_ik.
static void muon_syrk(int m, int n, const float* x, size_t ldx, float* s) {
    const int block = 64;
    for (int i0 = 0; i0 < m; i0 += block) {
        int rows = m - i0 < block ? m - i0 : block;
        gemm(rows, m - i0, n, x + (size_t)i0 * ldx, ldx, 1, x + (size_t)i0 * ldx, 1, ldx, s + (size_t)i0 * m + i0,
             m, GEMM_SET);
    }
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < m; i++) {
        int i0 = i / block * block;
        for (int j = 0; j < i0; j++) { s[(size_t)i * m + j] = s[(size_t)j * m + i]; }
    }
}

// u (rows x cols, row-major) = its Newton-Schulz orthogonalization (MuonConfig's), in w's buffers.
// The iterate is the wide orientation X (m x n, m <= n): u / max(|u|_F, eps), transposed when
// rows > cols; each step S = X X^T (m x m), P = b S + c S S, X = a X + P X; then back into u.
static void muon_newton_schulz(float* u, int rows, int cols, const MuonConfig* h, MuonWork* w) {
    int tall = rows > cols, m = tall ? cols : rows, n = tall ? rows : cols;
    size_t count = (size_t)rows * cols;
    double sq = 0.0;
    for (size_t i = 0; i < count; i++) { sq = __builtin_fma((double)u[i], (double)u[i], sq); }
    float norm = (float)sqrt(sq);
    float inv = 1.0f / (norm > h->eps ? norm : h->eps);
    float *x = w->x, *y = w->y, *s = w->s, *p = w->p;
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) { x[(size_t)i * n + j] = (tall ? u[(size_t)j * cols + i] : u[(size_t)i * n + j]) * inv; }
    }
    const float a = h->a, b = h->b, c = h->c;
    for (int step = 0; step < h->ns_steps; step++) {
#ifndef MUON_FULL_PRODUCTS
        muon_syrk(m, n, x, n, s);                              // S = X X^T
        muon_syrk(m, m, s, m, p);                              // P = S S = S S^T
#else
        gemm(m, m, n, x, n, 1, x, 1, n, s, m, GEMM_SET);       // (dev/test_muon.py: the same bits)
        gemm(m, m, m, s, m, 1, s, m, 1, p, m, GEMM_SET);
#endif
        size_t mm = (size_t)m * m;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < mm; i++) { p[i] = b * s[i] + c * p[i]; } // P = b S + c S S
        gemm(m, n, m, p, m, 1, x, n, 1, y, n, GEMM_SET);       // Y = P X
        size_t mn = (size_t)m * n;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < mn; i++) { y[i] = a * x[i] + y[i]; }
        float* t = x;
        x = y;
        y = t;
    }
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            float v = x[(size_t)i * n + j];
            if (tall) { u[(size_t)j * cols + i] = v; } else { u[(size_t)i * n + j] = v; }
        }
    }
}

// Muon's element-wise half on n elements: the momentum mom with the gradient (times grad_scale),
// and the Nesterov blend U into u (fused nowhere, as written).
static void muon_blend(const float* grads, float* mom, float* u, size_t n, float grad_scale, const MuonConfig* h) {
    const float mu = h->momentum;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = mu * mom[i] + (1.0f - mu) * g;
        mom[i] = mi;
#ifndef MUON_PLANT_NO_NESTEROV
        u[i] = (1.0f - mu) * g + mu * mi;
#else
        u[i] = mi; // dev/test_muon.py plant: plain momentum where Nesterov's is specified
#endif
    }
}

// The matrix half: u (rows x cols, the whole blend) orthogonalized in place, then the matrix params
// stepped: W = W (1 - lr wd) - lr sqrt(max(1, rows / cols)) O.
static void muon_apply(float* params, float* u, int rows, int cols, const MuonConfig* h, MuonWork* w) {
    muon_newton_schulz(u, rows, cols, h, w);
    const float decay = 1.0f - h->lr * h->weight_decay;
    float step = h->lr * muon_lr_ratio(rows, cols);
#ifdef MUON_PLANT_NO_RATIO
    step = h->lr; // dev/test_muon.py plant: a tall matrix's step not scaled by sqrt(rows / cols)
#endif
    size_t n = (size_t)rows * cols;
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) { params[i] = params[i] * decay - step * u[i]; }
}

// One Muon matrix (rows x cols) in place, where the rank holds all of it (ZeRO 0).
static void host_muon_update(float* params, const float* grads, float* mom, int rows, int cols, float grad_scale,
                             const MuonConfig* h, MuonWork* w) {
    muon_blend(grads, mom, w->u, (size_t)rows * cols, grad_scale, h);
    muon_apply(params, w->u, rows, cols, h, w);
}

#endif
