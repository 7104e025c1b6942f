// Tests of the CPU trainer's kernels (llmc/cpu_matmul.h, llmc/cpu_attention.h, llmc/cpu_vecmath.h)
// against naive double-precision loops: matmul forward and backward on odd shapes (edges of every
// tile size, both operand-sharing branches, several K rounds through a small shared budget,
// streaming stores where 40_cpu_speed.sh builds it with GEMM_STREAM_BYTES=0),
// causal attention forward and backward, bitwise independence of the thread count, exp /
// GELU / GELU' accuracy, and the bits of the reductions and of the GEMM against scalar loops of
// the order the headers specify (the same on every target). Exits non-zero on a failure.
//   gcc $(make -s cpu-cflags) -Illmc -DGEMM_SHARED_FLOATS=8192 dev/tests/cpu_kernels_test.c -lm
#include <math.h>
#include <stdio.h>
#include "cpu_matmul.h"
#include "cpu_attention.h"
#include "cpu_vecmath.h"

static int failures = 0;

static void expect(int ok, const char* what, double err) {
    printf("%-4s %-52s %.3e\n", ok ? "ok" : "FAIL", what, err);
    if (!ok) { failures++; }
}

static unsigned rng_state = 12345u;
static float rnd(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static float* rnd_array(size_t n) { // 64-byte aligned, so that outputs may take the streaming stores
    float* x = (float*)aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) { x[i] = rnd(); }
    return x;
}

// Worst |got - want| / (sum_k |a_k b_k| + 1e-30) over an (R, S) result; want in double.
static double rel_err(const float* got, const double* want, const double* scale, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (scale[i] + 1e-30);
        if (!(e <= worst)) { worst = e; }
    }
    return worst;
}

static void test_matmul(int N, int C, int OC, int with_bias, int accumulate) {
    float *inp = rnd_array((size_t)N * C), *w = rnd_array((size_t)OC * C), *bias = rnd_array(OC);
    float *dout = rnd_array((size_t)N * OC), *out = rnd_array((size_t)N * OC), *dinp = rnd_array((size_t)N * C);
    float *dw = rnd_array((size_t)OC * C), *db = rnd_array(OC);
    double *want = (double*)malloc(sizeof(double) * N * OC), *scale = (double*)malloc(sizeof(double) * N * OC);
    double *wdw = (double*)malloc(sizeof(double) * OC * C), *sdw = (double*)malloc(sizeof(double) * OC * C);
    double *wdi = (double*)malloc(sizeof(double) * N * C), *sdi = (double*)malloc(sizeof(double) * N * C);
    double *wdb = (double*)malloc(sizeof(double) * OC), *sdb = (double*)malloc(sizeof(double) * OC);
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = with_bias ? bias[o] : 0.0, a = with_bias ? fabs(bias[o]) : 0.0;
            for (int c = 0; c < C; c++) { s += (double)inp[n * C + c] * w[o * C + c]; a += fabs((double)inp[n * C + c] * w[o * C + c]); }
            want[n * OC + o] = s;
            scale[n * OC + o] = a;
        }
    }
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            double s = 0.0, a = 0.0;
            for (int o = 0; o < OC; o++) { s += (double)dout[n * OC + o] * w[o * C + c]; a += fabs((double)dout[n * OC + o] * w[o * C + c]); }
            wdi[n * C + c] = s;
            sdi[n * C + c] = a;
        }
    }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double s = accumulate ? dw[o * C + c] : 0.0, a = accumulate ? fabs(dw[o * C + c]) : 0.0;
            for (int n = 0; n < N; n++) { s += (double)dout[n * OC + o] * inp[n * C + c]; a += fabs((double)dout[n * OC + o] * inp[n * C + c]); }
            wdw[o * C + c] = s;
            sdw[o * C + c] = a;
        }
        double s = accumulate ? db[o] : 0.0, a = accumulate ? fabs(db[o]) : 0.0;
        for (int n = 0; n < N; n++) { s += dout[n * OC + o]; a += fabs(dout[n * OC + o]); }
        wdb[o] = s;
        sdb[o] = a;
    }
    matmul_forward(out, inp, w, with_bias ? bias : NULL, N, C, OC);
    matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC, accumulate);
    char what[128];
    double e;
    const double tol = 1e-6; // fp32 sums of up to a few hundred terms stay far below this
    snprintf(what, sizeof(what), "matmul N %d C %d OC %d%s: out", N, C, OC, with_bias ? " bias" : "");
    e = rel_err(out, want, scale, (size_t)N * OC); expect(e < tol, what, e);
    snprintf(what, sizeof(what), "matmul N %d C %d OC %d: dinp", N, C, OC);
    e = rel_err(dinp, wdi, sdi, (size_t)N * C); expect(e < tol, what, e);
    snprintf(what, sizeof(what), "matmul N %d C %d OC %d: dweight (%s)", N, C, OC, accumulate ? "+=" : "=");
    e = rel_err(dw, wdw, sdw, (size_t)OC * C); expect(e < tol, what, e);
    snprintf(what, sizeof(what), "matmul N %d C %d OC %d: dbias (%s)", N, C, OC, accumulate ? "+=" : "=");
    e = rel_err(db, wdb, sdb, OC); expect(e < tol, what, e);
    free(inp); free(w); free(bias); free(dout); free(out); free(dinp); free(dw); free(db);
    free(want); free(scale); free(wdw); free(sdw); free(wdi); free(sdi); free(wdb); free(sdb);
}

// The same GEMM on 1, 2 and 3 threads gives bitwise the same result.
static void test_thread_independence(int M, int N, int K) {
    float *a = rnd_array((size_t)M * K), *b = rnd_array((size_t)K * N);
    float* c[3];
    for (int t = 0; t < 3; t++) {
        c[t] = (float*)malloc(sizeof(float) * M * N);
        omp_set_num_threads(t + 1);
        gemm(M, N, K, a, K, 1, b, N, 1, c[t], N, 0);
    }
    omp_set_num_threads(2);
    char what[128];
    snprintf(what, sizeof(what), "gemm %dx%dx%d bitwise equal on 1, 2, 3 threads", M, N, K);
    int same = memcmp(c[0], c[1], sizeof(float) * M * N) == 0 && memcmp(c[0], c[2], sizeof(float) * M * N) == 0;
    expect(same, what, 0.0);
    free(a); free(b); free(c[0]); free(c[1]); free(c[2]);
}

// Causal attention of one (b, h) in double: probabilities p (T, T; 0 above the diagonal), out, and
// from dy the gradients dq, dk, dv (T, hs) and of the scores ds; q, k, v, dy rows of stride ld.
static void naive_attention(double* p, double* out, double* ds, double* dq, double* dk, double* dv, const float* q,
                            const float* k, const float* v, const float* dy, size_t ld, size_t ldy, int T, int hs) {
    double scale = 1.0 / sqrt((double)hs);
    for (int t = 0; t < T; t++) {
        double maxv = -1e300, sum = 0.0;
        for (int u = 0; u < T; u++) {
            double s = 0.0;
            for (int i = 0; i < hs; i++) { s += (double)q[t * ld + i] * k[u * ld + i]; }
            p[t * T + u] = u <= t ? s * scale : 0.0;
            if (u <= t && p[t * T + u] > maxv) { maxv = p[t * T + u]; }
        }
        for (int u = 0; u <= t; u++) { p[t * T + u] = exp(p[t * T + u] - maxv); sum += p[t * T + u]; }
        for (int u = 0; u <= t; u++) { p[t * T + u] /= sum; }
        for (int i = 0; i < hs; i++) {
            double o = 0.0;
            for (int u = 0; u <= t; u++) { o += p[t * T + u] * v[u * ld + i]; }
            out[t * hs + i] = o;
        }
    }
    for (int t = 0; t < T; t++) {
        double dot = 0.0;
        for (int u = 0; u <= t; u++) {
            double d = 0.0;
            for (int i = 0; i < hs; i++) { d += (double)dy[t * ldy + i] * v[u * ld + i]; }
            ds[t * T + u] = d;
            dot += p[t * T + u] * d;
        }
        for (int u = 0; u < T; u++) { ds[t * T + u] = u <= t ? p[t * T + u] * (ds[t * T + u] - dot) * scale : 0.0; }
    }
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < hs; i++) {
            double a = 0.0, b = 0.0, c = 0.0;
            for (int u = 0; u < T; u++) {
                a += ds[t * T + u] * k[u * ld + i];
                b += ds[u * T + t] * q[u * ld + i];
                c += p[u * T + t] * dy[u * ldy + i];
            }
            dq[t * hs + i] = a; dk[t * hs + i] = b; dv[t * hs + i] = c;
        }
    }
}

// Worst |got - want| / (1 + |want|) over n elements, got[i * gs + j] against want[i * n1 + j] for
// j < n1, i < n / n1.
static double att_err(const float* got, size_t gs, const double* want, size_t n, size_t n1) {
    double worst = 0.0;
    for (size_t i = 0; i < n / n1; i++) {
        for (size_t j = 0; j < n1; j++) {
            double e = fabs((double)got[i * gs + j] - want[i * n1 + j]) / (1.0 + fabs(want[i * n1 + j]));
            if (!(e <= worst)) { worst = e; }
        }
    }
    return worst;
}

// attention_forward / attention_backward on (B, T, C, NH) against naive_attention, on 2 threads, and
// bitwise the same on 1 and 3 threads. Masked entries of att are filled with garbage first: they
// must be neither read as they were nor left unwritten where a tile covers them.
static void test_attention(int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C, natt = (size_t)B * NH * T * T;
    float *qkv = rnd_array((size_t)B * T * C3), *dout = rnd_array((size_t)B * T * C);
    for (size_t i = 0; i < (size_t)B * T * C3; i++) { qkv[i] *= 2.0f; } // scores of a few units
    float *out[3], *dqkv[3], *att[3];
    for (int r = 0; r < 3; r++) {
        out[r] = (float*)malloc(sizeof(float) * B * T * C);
        dqkv[r] = (float*)malloc(sizeof(float) * B * T * C3);
        att[r] = (float*)malloc(sizeof(float) * natt);
        for (size_t i = 0; i < natt; i++) { att[r][i] = 1e30f; }
        omp_set_num_threads(r == 0 ? 2 : r == 1 ? 1 : 3);
        attention_forward(out[r], att[r], qkv, B, T, C, NH);
        attention_backward(dqkv[r], dout, qkv, att[r], B, T, C, NH);
    }
    omp_set_num_threads(2);
    float* probs = (float*)malloc(sizeof(float) * natt);
    for (size_t i = 0; i < natt; i++) { probs[i] = 1e30f; }
    attention_forward(out[0], probs, qkv, B, T, C, NH);
    size_t n = (size_t)T * T, nh = (size_t)T * hs;
    double *p = malloc(sizeof(double) * n), *ds = malloc(sizeof(double) * n), *o = malloc(sizeof(double) * nh);
    double *dq = malloc(sizeof(double) * nh), *dk = malloc(sizeof(double) * nh), *dv = malloc(sizeof(double) * nh);
    double e[6] = {0};
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* base = qkv + (size_t)b * T * C3 + h * hs;
            const float* dy = dout + (size_t)b * T * C + h * hs;
            naive_attention(p, o, ds, dq, dk, dv, base, base + C, base + 2 * C, dy, C3, C, T, hs);
            const float* pa = probs + ((size_t)b * NH + h) * n;
            const float* sa = att[0] + ((size_t)b * NH + h) * n;
            const float* g = dqkv[0] + (size_t)b * T * C3 + h * hs;
            double got[6];
            double pe = 0.0, se = 0.0; // only t2 <= t is defined
            for (int t = 0; t < T; t++) {
                for (int u = 0; u <= t; u++) {
                    double x = fabs(pa[t * T + u] - p[t * T + u]), y = fabs(sa[t * T + u] - ds[t * T + u]);
                    if (!(x <= pe)) { pe = x; }
                    if (!(y <= se)) { se = y; }
                }
            }
            got[0] = pe; got[1] = se;
            got[2] = att_err(out[0] + (size_t)b * T * C + h * hs, C, o, nh, hs);
            got[3] = att_err(g, C3, dq, nh, hs);
            got[4] = att_err(g + C, C3, dk, nh, hs);
            got[5] = att_err(g + 2 * C, C3, dv, nh, hs);
            for (int i = 0; i < 6; i++) { if (!(got[i] <= e[i])) { e[i] = got[i]; } }
        }
    }
    const char* names[6] = {"probabilities", "dscores", "out", "dq", "dk", "dv"};
    for (int i = 0; i < 6; i++) {
        char what[128];
        snprintf(what, sizeof(what), "attention B %d T %d C %d NH %d: %s", B, T, C, NH, names[i]);
        expect(e[i] < 2e-6, what, e[i]);
    }
    int same = 1;
    for (int r = 1; r < 3; r++) {
        same = same && memcmp(out[0], out[r], sizeof(float) * B * T * C) == 0 &&
               memcmp(dqkv[0], dqkv[r], sizeof(float) * B * T * C3) == 0;
    }
    char what[128];
    snprintf(what, sizeof(what), "attention B %d T %d C %d NH %d bitwise equal on 1, 2, 3 threads", B, T, C, NH);
    expect(same, what, 0.0);
    for (int r = 0; r < 3; r++) { free(out[r]); free(dqkv[r]); free(att[r]); }
    free(qkv); free(dout); free(probs); free(p); free(ds); free(o); free(dq); free(dk); free(dv);
}

static void test_vecmath(void) {
    double e_exp = 0.0, e_gelu = 0.0, e_grad = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        float g = vf_exp(vf_splat(x))[0];
        double want = exp((double)x);
        double e = fabs(g - want) / want;
        if (!(e <= e_exp)) { e_exp = e; }
    }
    for (int i = 0; i <= 200000; i++) {
        float x = -12.0f + 24.0f * (float)i / 200000.0f;
        double xd = x, u = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd), th = tanh(u);
        double gelu = 0.5 * xd * (1.0 + th);
        double grad = 0.5 * (1.0 + th) + 0.5 * xd * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * xd * xd);
        double e1 = fabs(vf_gelu(vf_splat(x))[0] - gelu) / (1.0 + fabs(xd));
        double e2 = fabs(vf_gelu_grad(vf_splat(x))[0] - grad);
        if (!(e1 <= e_gelu)) { e_gelu = e1; }
        if (!(e2 <= e_grad)) { e_grad = e2; }
    }
    expect(e_exp < 4e-7, "exp relative error on [-87, 88]", e_exp);
    expect(e_gelu < 1e-6, "gelu error / (1 + |x|) on [-12, 12]", e_gelu);
    expect(e_grad < 1e-6, "gelu derivative error on [-12, 12]", e_grad);
    // partial vectors: the sum and max helpers ignore lanes past n
    float x[VEC_W + 3];
    for (int i = 0; i < VEC_W + 3; i++) { x[i] = (float)i; }
    double s = 0.0;
    for (int i = 0; i < VEC_W + 1; i++) { s += exp((double)i - VEC_W); }
    double es = fabs(vf_array_exp_sum(NULL, x, VEC_W + 1, (float)VEC_W) - s) / s;
    expect(es < 1e-6 && vf_array_max(x, VEC_W + 1) == (float)VEC_W, "exp-sum and max over a partial vector", es);
    // vf_load_n / vf_store_n for every n: lanes < n read and written, the rest the fill / untouched
    int bad = 0;
    for (int n = 0; n <= VEC_W; n++) {
        vfloat v = vf_load_n(x + 1, n, -7.0f);
        float out[VEC_W + 2];
        for (int i = 0; i < VEC_W + 2; i++) { out[i] = -99.0f; }
        vf_store_n(out + 1, v, n);
        for (int i = 0; i < VEC_W; i++) {
            bad += v[i] != (i < n ? x[1 + i] : -7.0f);
            bad += out[1 + i] != (i < n ? x[1 + i] : -99.0f);
        }
        bad += out[0] != -99.0f || out[VEC_W + 1] != -99.0f;
    }
    expect(bad == 0, "partial vector loads and stores, every n", bad);
}

// The order every target must keep (llmc/cpu_vecmath.h, cpu_matmul.h), written as scalar loops with
// no vectors: 16 lane partials taking elements l, l + 16, ... (+0 past the end), combined by the
// tree l + 8, + 4, + 2, + 1; a GEMM output as bias (or its old value) plus each KC block's fused
// chain from 0, the blocks in order. Every build of this test (each vector width and tile) must
// give these exact bits, so all builds give the same ones.
static float spec_tree(float* l) {
    for (int h = 8; h >= 1; h /= 2) {
        for (int i = 0; i < h; i++) { l[i] += l[i + h]; }
    }
    return l[0];
}
static float spec_sum(const float* x, int n, const float* y) { // y: a dot product, fused per term
    float l[16] = {0};
    for (int i = 0; i < (n + 15) / 16 * 16; i++) {
        float xi = i < n ? x[i] : 0.0f;
        l[i % 16] = y ? fmaf(xi, i < n ? y[i] : 0.0f, l[i % 16]) : l[i % 16] + xi;
    }
    return spec_tree(l);
}
static float spec_exp_sum(const float* x, int n, float shift) {
    float l[16] = {0};
    for (int i = 0; i < (n + 15) / 16 * 16; i++) { l[i % 16] += i < n ? vf_exp(vf_splat(x[i] - shift))[0] : 0.0f; }
    return spec_tree(l);
}
static void test_reduction_order(void) {
    float* x = rnd_array(1100);
    float* y = rnd_array(1100);
    int bad = 0, cases = 0;
    for (int n = 0; n <= 1100; n += n < 80 ? 1 : 97) {
        float want[4] = {spec_sum(x, n, NULL), spec_sum(x, n, y), spec_exp_sum(x, n, 0.5f), -__builtin_inff()};
        for (int i = 0; i < n; i++) { want[3] = x[i] > want[3] ? x[i] : want[3]; }
        float got[4] = {vf_array_sum(x, n), vf_array_dot(x, y, n), vf_array_exp_sum(NULL, x, n, 0.5f), vf_array_max(x, n)};
        for (int k = 0; k < 4; k++) { bad += memcmp(&want[k], &got[k], sizeof(float)) != 0; }
        cases += 4;
    }
    expect(bad == 0, "sum, dot, exp-sum, max: the specified order's bits", (double)bad / cases);
    free(x); free(y);
}
static void test_gemm_order(int M, int N, int K, int with_bias, int accumulate) {
    float *a = rnd_array((size_t)M * K), *b = rnd_array((size_t)K * N), *bias = rnd_array(N);
    float *c = rnd_array((size_t)M * N), *want = (float*)malloc(sizeof(float) * M * N);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float v = c[(size_t)i * N + j];
            for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
                float acc = 0.0f;
                for (int k = k0; k < K && k < k0 + GEMM_KC; k++) { acc = fmaf(a[(size_t)i * K + k], b[(size_t)k * N + j], acc); }
                v = k0 > 0 || accumulate ? v + acc : with_bias ? bias[j] + acc : acc;
            }
            want[(size_t)i * N + j] = v;
        }
    }
    gemm_bias(M, N, K, a, K, 1, b, N, 1, c, N, accumulate ? GEMM_ADD : GEMM_SET | GEMM_STREAM, with_bias ? bias : NULL);
    char what[128];
    snprintf(what, sizeof(what), "gemm %dx%dx%d%s%s: the specified order's bits", M, N, K, with_bias ? " bias" : "",
             accumulate ? " +=" : "");
    size_t bad = 0;
    for (size_t i = 0; i < (size_t)M * N; i++) { bad += memcmp(&want[i], &c[i], sizeof(float)) != 0; }
    expect(bad == 0, what, (double)bad / ((double)M * N));
    free(a); free(b); free(bias); free(c); free(want);
}

int main(void) {
    omp_set_num_threads(2);
    int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {13, 37, 100}, {100, 37, 13}, {37, 300, 65}, {65, 300, 37},
                       {256, 64, 257}, {130, 520, 200}, {33, 96, 1000}, {1000, 96, 33}};
    for (int i = 0; i < 10; i++) { test_matmul(shapes[i][0], shapes[i][1], shapes[i][2], i % 2, i / 2 % 2); }
    test_matmul(29, 17, 31, 0, 1);
    test_thread_independence(100, 300, 530);
    test_thread_independence(300, 100, 530);
    int att_shapes[][4] = {{1, 1, 4, 1}, {2, 13, 10, 2}, {3, 37, 96, 3}, {2, 64, 128, 2}, {1, 100, 48, 1}, {2, 130, 80, 1}};
    for (int i = 0; i < 6; i++) { test_attention(att_shapes[i][0], att_shapes[i][1], att_shapes[i][2], att_shapes[i][3]); }
    test_vecmath();
    test_reduction_order();
    test_gemm_order(37, 45, 600, 1, 0);
    test_gemm_order(100, 13, 300, 0, 1);
    test_gemm_order(13, 100, 257, 0, 0);
    test_gemm_order(70, 70, 1, 1, 0);
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    return failures != 0;
}
