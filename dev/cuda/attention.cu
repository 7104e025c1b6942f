// dev/cuda/attention.cu: the attention kernels of llmc/attention.cuh, each version against a CPU
// reference (naive causal attention in double, forward and backward, from the same bf16 inputs),
// then, where a real GPU is present, a timing loop at GPT-2 shapes.
//   versions: flash  tensor cores (nvcuda::wmma), BF16 build, head size 64
//             scalar the CUDA-core fallback (FP32 build, or other head sizes), one warp per row
// Checked per case: out (B, T, C), lse (B, NH, T), dq, dk, dv (the three parts of dqkv) as
// max |got - ref| / max |ref| against tolerances stated below; every output element written
// (buffers start as NaN); a second backward bitwise identical to the first. Exits 1 on a failure.
//   build/gpu/attention_emu [--quick | --long-flash-only]     (emucc; BF16 unless -DENABLE_FP32)
//   nvcc -O3 -std=c++17 -arch=sm_90 -o attention dev/cuda/attention.cu && ./attention
// --quick: the small cases only (no T = 1024); --long-flash-only: T = 1024 for the tensor-core
// version only (the checked emulator's budget).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.cuh"
#include "../../llmc/attention.cuh"

// Tolerances on max |got - ref| / max(max |ref|, 0.01) per tensor. BF16: the outputs are rounded to bf16
// (2^-9 relative), and so are the probabilities P and score gradients dS that feed the tensor-core
// products (each term off by up to 2^-9 relative, mostly cancelling over 64..1024 terms). Measured
// worst cases, emulated, over every case below: out 2.8e-3, dq/dk/dv 5.3e-3 (each run prints its
// own), about a third of the tolerances. FP32: fp32 sums in another order than the double
// reference. lse (fp32 in both builds): max |got - ref| / max(1, |ref|) per row.
#ifdef ENABLE_FP32
#define TOL_OUT 1e-5
#define TOL_GRAD 1e-5
#define TOL_LSE 1e-5
#else
#define TOL_OUT 1e-2
#define TOL_GRAD 1.5e-2
#define TOL_LSE 1e-4
#endif

static int failures = 0;

// ----------------------------------------------------------------------------
// CPU reference: y = softmax(q k^T / sqrt(hs), causal) v per (b, h), in double

static void cpu_attention(double* out, double* lse, double* dqkv, const float* qkv, const float* dout, int B, int T,
                          int C, int NH) {
    int hs = C / NH;
    size_t rs = 3 * (size_t)C;
    double scale = 1.0 / sqrt((double)hs);
    double* p = (double*)malloc_check((size_t)T * sizeof(double));
    double* dp = (double*)malloc_check((size_t)T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * rs * sizeof(double));
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        const float* q = qkv + ((size_t)b * T + t) * rs + h * hs;
        const float* dy = dout + ((size_t)b * T + t) * C + h * hs;
        double m = -INFINITY, sum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* k = qkv + ((size_t)b * T + t2) * rs + C + h * hs;
            double s = 0.0;
            for (int i = 0; i < hs; i++) { s += (double)q[i] * k[i]; }
            p[t2] = s * scale;
            m = fmax(m, p[t2]);
        }
        for (int t2 = 0; t2 <= t; t2++) { p[t2] = exp(p[t2] - m); sum += p[t2]; }
        lse[((size_t)b * NH + h) * T + t] = m + log(sum);
        double* o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) { o[i] = 0.0; }
        double delta = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
            p[t2] /= sum;
            const float* v = qkv + ((size_t)b * T + t2) * rs + 2 * C + h * hs;
            double d = 0.0;
            for (int i = 0; i < hs; i++) { o[i] += p[t2] * v[i]; d += (double)dy[i] * v[i]; }
            dp[t2] = d;
            delta += p[t2] * d;
        }
        // dS = P (dP - sum_j P_j dP_j); dq = scale dS k, dk = scale dS q, dv = P dy
        double* dq = dqkv + ((size_t)b * T + t) * rs + h * hs;
        for (int t2 = 0; t2 <= t; t2++) {
            double ds = p[t2] * (dp[t2] - delta) * scale;
            const float* k = qkv + ((size_t)b * T + t2) * rs + C + h * hs;
            double* dk = dqkv + ((size_t)b * T + t2) * rs + C + h * hs;
            for (int i = 0; i < hs; i++) {
                dq[i] += ds * k[i];
                dk[i] += ds * q[i];
                dk[C + i] += p[t2] * dy[i];
            }
        }
    }
    free(p);
    free(dp);
}

// ----------------------------------------------------------------------------
// helpers

static Rng rng;

static float round_floatX(float x) { return sizeof(floatX) == 2 ? bf16_to_float(float_to_bf16(x)) : x; }

// n values uniform in (-a, a) (a_qk for the q and k columns of a qkv row of width `row`, else a),
// rounded to floatX so that the reference sees exactly the kernel's inputs.
static float* host_random(size_t n, float a, size_t row, float a_qk) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float range = i % row < row / 3 * 2 ? a_qk : a;
        x[i] = round_floatX((rng_uniform(&rng) * 2.0f - 1.0f) * range);
    }
    return x;
}

static floatX* to_device(const float* x, size_t n) {
    floatX* d;
    cudaCheck(cudaMalloc((void**)&d, n * sizeof(floatX)));
    if (sizeof(floatX) == 4) {
        cudaCheck(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
        return d;
    }
    uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) { tmp[i] = float_to_bf16(x[i]); }
    cudaCheck(cudaMemcpy(d, tmp, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}

// max |got - ref| / max |ref| over n values (elements i with i % period in [lo, hi)); NaN counts as
// infinite. The scale is at least 0.01: at T = 1, dq and dk are exactly zero.
static double rel_error(const float* got, const double* ref, size_t n, size_t period, size_t lo, size_t hi) {
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        size_t j = i % period;
        if (j < lo || j >= hi) { continue; }
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= err)) { err = isnan(d) ? INFINITY : d; }
        scale = fmax(scale, fabs(ref[i]));
    }
    return err / fmax(scale, 1e-2);
}

static void report(const char* what, const char* name, double err, double tol) {
    int ok = err <= tol;
    printf("%-4s %-34s %-8s error %.3e (tolerance %.1e)\n", ok ? "ok" : "FAIL", what, name, err, tol);
    if (!ok) { failures++; }
}

typedef void (*ForwardFn)(floatX*, float*, const floatX*, int, int, int, int);
typedef void (*BackwardFn)(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, int, int, int,
                           int);
typedef struct {
    const char* name;
    ForwardFn forward;
    BackwardFn backward;
    int only_hs; // 0: any head size
} Version;

static const Version versions[] = {
#ifndef ENABLE_FP32
    {"flash", attention_forward_flash, attention_backward_flash, 64},
#endif
    {"scalar", attention_forward_scalar, attention_backward_scalar, 0},
};
#define NUM_VERSIONS (int)(sizeof(versions) / sizeof(versions[0]))

// One shape through one version: forward and backward against the reference, backward twice.
// a: the range of q and k (a = 2 gives scores of standard deviation ~1.3 at hs 64; 6 gives sharp rows).
static void check_case(const Version* v, int B, int T, int NH, int hs, float a) {
    int C = NH * hs;
    size_t BT = (size_t)B * T, nqkv = BT * 3 * C, nout = BT * C, nlse = (size_t)B * NH * T;
    float* qkv = host_random(nqkv, 1.0f, 3 * (size_t)C, a);
    float* dout = host_random(nout, 1.0f, 3, 1.0f);
    double *out = (double*)malloc_check(nout * sizeof(double)), *lse = (double*)malloc_check(nlse * sizeof(double));
    double* dqkv = (double*)malloc_check(nqkv * sizeof(double));
    cpu_attention(out, lse, dqkv, qkv, dout, B, T, C, NH);

    floatX *d_qkv = to_device(qkv, nqkv), *d_dout = to_device(dout, nout), *d_out, *d_dqkv;
    float *d_lse, *d_delta;
    cudaCheck(cudaMalloc((void**)&d_out, nout * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_dqkv, nqkv * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_lse, nlse * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&d_delta, nlse * sizeof(float)));
    cudaCheck(cudaMemset(d_out, 0xff, nout * sizeof(floatX))); // NaN: every element must be written
    cudaCheck(cudaMemset(d_lse, 0xff, nlse * sizeof(float)));
    cudaCheck(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(floatX)));
    v->forward(d_out, d_lse, d_qkv, B, T, C, NH);
    v->backward(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
    float *g_out = to_host_x(d_out, nout), *g_dqkv = to_host_x(d_dqkv, nqkv);
    float* g_lse = (float*)malloc_check(nlse * sizeof(float));
    cudaCheck(cudaMemcpy(g_lse, d_lse, nlse * sizeof(float), cudaMemcpyDeviceToHost));
    double lse_err = 0.0;
    for (size_t i = 0; i < nlse; i++) {
        double d = fabs(g_lse[i] - lse[i]) / fmax(1.0, fabs(lse[i]));
        if (!(d <= lse_err)) { lse_err = isnan(d) ? INFINITY : d; }
    }
    char what[96];
    snprintf(what, sizeof(what), "B %d NH %d T %d hs %d q,k in +-%g", B, NH, T, hs, a);
    printf("%s (%s)\n", what, v->name);
    report("  out", v->name, rel_error(g_out, out, nout, nout, 0, nout), TOL_OUT);
    report("  lse (relative)", v->name, lse_err, TOL_LSE);
    report("  dq", v->name, rel_error(g_dqkv, dqkv, nqkv, 3 * C, 0, C), TOL_GRAD);
    report("  dk", v->name, rel_error(g_dqkv, dqkv, nqkv, 3 * C, C, 2 * C), TOL_GRAD);
    report("  dv", v->name, rel_error(g_dqkv, dqkv, nqkv, 3 * C, 2 * C, 3 * C), TOL_GRAD);
    // determinism: the same backward again, into a NaN-filled buffer, must give the same bits
    cudaCheck(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(floatX)));
    v->backward(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
    float* again = to_host_x(d_dqkv, nqkv);
    size_t diffs = 0;
    for (size_t i = 0; i < nqkv; i++) { diffs += memcmp(&again[i], &g_dqkv[i], sizeof(float)) != 0; }
    report("  rerun dqkv bits differ (count)", v->name, (double)diffs, 0.0);
    free(qkv); free(dout); free(out); free(lse); free(dqkv); free(g_out); free(g_dqkv); free(g_lse); free(again);
    cudaFree(d_qkv); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_dqkv); cudaFree(d_lse); cudaFree(d_delta);
}

// ----------------------------------------------------------------------------
// timing (a real GPU only): forward and backward at GPT-2 124M's attention shape

static void time_versions(int B, int T, int NH) {
    int hs = 64, C = NH * hs;
    size_t BT = (size_t)B * T;
    floatX *qkv, *out, *dout, *dqkv;
    float *lse, *delta;
    cudaCheck(cudaMalloc((void**)&qkv, BT * 3 * C * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&dqkv, BT * 3 * C * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&out, BT * C * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&dout, BT * C * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&lse, BT * NH * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&delta, BT * NH * sizeof(float)));
    cudaCheck(cudaMemset(qkv, 0, BT * 3 * C * sizeof(floatX)));
    cudaCheck(cudaMemset(dout, 0, BT * C * sizeof(floatX)));
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    // flop: one full (T x hs) by (hs x T) matmul per (b, h). Causal attention does half of each:
    // forward 2 of them (Q K^T, P V), backward 5 useful ones (we run 7: S and dP twice)
    double flop = 2.0 * B * NH * (double)T * T * hs;
    printf("timing B %d NH %d T %d hs 64 (mean of 20 after 3 warm-up runs), TFLOP/s counts the useful causal FLOPs\n",
           B, NH, T);
    for (int vi = 0; vi < NUM_VERSIONS; vi++) {
        const Version* v = &versions[vi];
        float ms[2];
        for (int pass = 0; pass < 2; pass++) {
            for (int it = 0; it < 23; it++) {
                if (it == 3) { cudaCheck(cudaEventRecord(e0)); }
                if (pass == 0) { v->forward(out, lse, qkv, B, T, C, NH); }
                else { v->backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH); }
            }
            cudaCheck(cudaEventRecord(e1));
            cudaCheck(cudaEventSynchronize(e1));
            cudaCheck(cudaEventElapsedTime(&ms[pass], e0, e1));
            ms[pass] /= 20.0f;
        }
        printf("%-8s forward %8.3f ms (%6.1f TFLOP/s) backward %8.3f ms (%6.1f TFLOP/s)\n", v->name, ms[0],
               2.0 * flop / 2.0 / (ms[0] * 1e9), ms[1], 5.0 * flop / 2.0 / (ms[1] * 1e9));
    }
    cudaFree(qkv); cudaFree(dqkv); cudaFree(out); cudaFree(dout); cudaFree(lse); cudaFree(delta);
}

int main(int argc, char** argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int long_flash_only = argc > 1 && strcmp(argv[1], "--long-flash-only") == 0;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) { fail("no CUDA device (or emulator) found"); }
    rng_seed(&rng, 1234);
    printf("attention kernels, %s build; tolerances: out %.1e, dq/dk/dv %.1e (max error / max |ref|), lse %.1e\n",
           PRECISION_NAME, TOL_OUT, TOL_GRAD, TOL_LSE);
    // (B, NH, T): T over {1, 17, 64, 255, 1024}, partial tiles and several B x NH
    const int cases[][3] = {{1, 1, 1}, {2, 3, 17}, {1, 2, 64}, {2, 1, 255}, {3, 2, 65}, {1, 1, 1024}};
    int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int vi = 0; vi < NUM_VERSIONS; vi++) {
        const Version* v = &versions[vi];
        for (int c = 0; c < ncases; c++) {
            if (cases[c][2] > 256 && (quick || (long_flash_only && v->only_hs != 64))) { continue; }
            check_case(v, cases[c][0], cases[c][2], cases[c][1], 64, 2.0f);
        }
        check_case(v, 1, 130, 2, 64, 6.0f); // sharp rows: the running max moves across key blocks
        if (v->only_hs == 0) { // the fallback's other head sizes (GPT-2 test models, odd sizes)
            check_case(v, 2, 33, 4, 16, 2.0f);
            check_case(v, 1, 40, 2, 48, 2.0f);
            check_case(v, 1, 20, 1, 96, 2.0f);
        }
    }
#ifdef EMU_CUDA
    printf("no GPU: correctness only\n");
#else
    time_versions(8, 1024, 12);
#endif
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
