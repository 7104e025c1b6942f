// Tests of the CPU trainer's kernels (llmc/cpu_matmul.h, llmc/cpu_vecmath.h) against naive
// double-precision loops: matmul forward and backward on odd shapes (edges of every tile size,
// both operand-sharing branches, several K rounds through a small shared budget), bitwise
// independence of the thread count, and exp / GELU / GELU' accuracy. Exits non-zero on a failure.
//   gcc -O3 -march=native -fopenmp -fno-math-errno -Illmc -DGEMM_SHARED_FLOATS=8192 dev/tests/cpu_kernels_test.c -lm
#include <math.h>
#include <stdio.h>
#include "cpu_matmul.h"
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

static float* rnd_array(size_t n) {
    float* x = (float*)malloc(n * sizeof(float));
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
}

int main(void) {
    omp_set_num_threads(2);
    int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {13, 37, 100}, {100, 37, 13}, {37, 300, 65}, {65, 300, 37},
                       {256, 64, 257}, {130, 520, 200}, {33, 96, 1000}, {1000, 96, 33}};
    for (int i = 0; i < 10; i++) { test_matmul(shapes[i][0], shapes[i][1], shapes[i][2], i % 2, i / 2 % 2); }
    test_matmul(29, 17, 31, 0, 1);
    test_thread_independence(100, 300, 530);
    test_thread_independence(300, 100, 530);
    test_vecmath();
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    return failures != 0;
}
