// dev/cuda/attention.cu: our attention kernels, each version against a CPU reference (naive causal
// attention in double, forward and backward, from the same bf16 inputs), then, where a real GPU is
// present, a timing loop at GPT-2 shapes.
//   versions: fa2    llmc/attention_fa2.cuh and attention_fa2_backward.cuh (mma.sync, ldmatrix, cp.async),
//                    BF16, head sizes 32, 64, 128 (the default run and --fa2: 64 only; --fa2-quick: all three)
//             scalar llmc/attention.cuh, the CUDA-core fallback (FP32 build, or other head sizes), one
//                    warp per row
//             cudnn  cuDNN's SDPA through llmc/cudnn_att.cpp (-DENABLE_CUDNN, BF16; under emucc the
//                    emulator's frontend, dev/cuda_emu/include/cudnn_frontend.h)
// Checked per case: out (B, T, C), lse (B, NH, T), dq, dk, dv (the three parts of dqkv) as
// max |got - ref| / max |ref| against tolerances stated below; every output element written
// (buffers start as NaN); a second backward bitwise identical to the first. Exits 1 on a failure.
//   build/gpu/attention_emu [--quick | --long-fa2 | --cudnn | --cudnn-small | --fa2 | --fa2-quick | --fa2-order
//                            | --fa2-order-racy | --fa2-sched | --fa2-tiny | --fa2-case B T NH HS]
//   (emucc; BF16 unless -DENABLE_FP32)
//   nvcc -O3 -std=c++17 -arch=sm_90 -o attention dev/cuda/attention.cu && ./attention
// --quick: the small cases only (no T = 1024; fa2 and scalar); --long-fa2: T = 1024 for the fa2
// version only (the checked emulator's budget; the default run leaves fa2's T 1024 to --fa2 and
// --long-fa2); --cudnn (a -DENABLE_CUDNN build): cuDNN and the
// fa2 version on the same inputs at GPT-2 124M's layer width (B 1, NH 12, C 768) at T 512 and an
// odd T (B 2, NH 12, T 77), each against the reference and against each other, then cuDNN alone on
// the small cases and head sizes (--cudnn-small: those only). --fa2: the fa2 version alone, at
// T 1024 (B 1, NH 2; forward only) and T 77 at GPT-2 124M's C 768 (B 2, NH 12). --fa2-quick (the
// checked builds' budget): T 77 (B 1, NH 3), 130 and below 64, then head sizes 128 and 32 at T 77,
// 130 and 17. --fa2-order:
// fa2 alone at B 1, NH 2, T 512 (8 key tiles: dq sums of up to 8 terms); --fa2-order-racy: the same
// with the planted racy dq (fa2_racy_backward), which must fail its rerun under a random block order.
// --fa2-sched (the reverse and random schedules' runs): T 130 (three tiles, the last partial) and
// 17 at each head size, NH 1. --fa2-tiny (the planted builds): T 77, B 1, NH 1 at each head size.
// --fa2-case B T NH HS: that one case.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.cuh"
#include "../../llmc/attention.cuh"
#ifndef ENABLE_FP32
#include "../../llmc/attention_fa2_backward.cuh"
#endif
#ifdef ENABLE_CUDNN
#include "../../llmc/cudnn_att.h"
#endif

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

#ifdef ENABLE_CUDNN
#ifdef ENABLE_FP32
#error "cuDNN's attention is BF16 only: build without -DENABLE_FP32"
#endif
static void cudnn_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    const char* err = cudnn_att_forward(out, lse, qkv, B, T, C, NH, 0);
    if (err) { fail("%s", err); }
}
static void cudnn_backward(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv, const floatX* out,
                           const float* lse, int B, int T, int C, int NH) {
    (void)delta; // cuDNN keeps its own in its workspace
    const char* err = cudnn_att_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, 0);
    if (err) { fail("%s", err); }
}
#endif

#ifndef ENABLE_FP32
// The planted racy dq (dev/tests/53_attention_fa2.sh; test code, never in the trainer): dk and dv
// from the real backward, then dq again as FlashAttention-2's first split computes it, one block per
// (query tile, key tile) pair, each adding its dS K to an fp32 sum by atomicAdd in whatever order the
// blocks run. Under a random block order the rerun check must see other bits (head size 64).
__global__ void __launch_bounds__(FA2_THREADS) fa2_racy_dq_kernel(float* acc, const float* delta, const bf16* dout,
                                                                 const bf16* qkv, const float* lse, int T, int C,
                                                                 int NH) {
    constexpr int D = 64, TE = FA2_TILE_ELEMS(D);
    extern __shared__ uint4 fa2_smem[];
    bf16 *sQ = reinterpret_cast<bf16*>(fa2_smem), *sDO = sQ + TE, *sK = sQ + 2 * TE, *sV = sQ + 3 * TE;
    int p = blockIdx.x, qb = 0;
    while ((qb + 1) * (qb + 2) / 2 <= p) { qb++; }
    int kb = p - qb * (qb + 1) / 2, h = blockIdx.y, b = blockIdx.z, q0 = qb * FA2_TILE;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = warp * 16 + lane / 4, q = q0 + row;
    size_t rs = 3 * (size_t)C, lrow = ((size_t)b * NH + h) * T;
    const bf16* head = qkv + (size_t)b * T * rs + h * D;
    const bf16* dout_head = dout + (size_t)b * T * C + h * D;
    fa2_load_tile<D>(sQ, head, rs, q0, T);
    fa2_load_tile<D>(sDO, dout_head, C, q0, T);
    fa2_load_tile<D>(sK, head + C, rs, kb * FA2_TILE, T);
    fa2_load_tile<D>(sV, head + 2 * C, rs, kb * FA2_TILE, T);
    ptx_cp_async_commit();
    ptx_cp_async_wait<0>();
    __syncthreads();
    float L[2], dl[2], s[8][4], dp[8][4], dq[D / 8][4];
    for (int hf = 0; hf < 2; hf++) {
        int r = q + 8 * hf;
        L[hf] = r < T ? lse[lrow + r] * 1.4426950408889634f : 0.0f;
        dl[hf] = r < T ? delta[lrow + r] : 0.0f;
    }
    uint32_t qf[D / 16][4], of[D / 16][4];
    fa2_load_a<D>(qf, sQ, warp * 16, lane);
    fa2_load_a<D>(of, sDO, warp * 16, lane);
    fa2_scores<D>(s, qf, sK, lane);
    fa2_scores<D>(dp, of, sV, lane);
    fa2_query_ds<D>(dp, s, L, dl, kb * FA2_TILE, q, T, lane);
    fa2_zero<D / 8>(dq);
    fa2_pv<D>(dq, dp, sK, lane);
    for (int hf = 0; hf < 2; hf++) {
        if (q + 8 * hf >= T) { continue; }
        float* arow = acc + ((size_t)b * T + q + 8 * hf) * C + h * D;
        for (int n = 0; n < D / 8; n++) {
            atomicAdd(arow + 8 * n + 2 * (lane % 4), dq[n][2 * hf]);
            atomicAdd(arow + 8 * n + 2 * (lane % 4) + 1, dq[n][2 * hf + 1]);
        }
    }
}
// dqkv's q columns = acc / sqrt(64) in bf16, one thread per element
__global__ void fa2_racy_dq_finish(bf16* dqkv, const float* acc, size_t n, int C) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) { dqkv[(i / C) * 3 * C + i % C] = __float2bfloat16(acc[i] * 0.125f); }
}
static void fa2_racy_backward(floatX* dqkv, float* delta, const floatX* dout, const floatX* qkv, const floatX* out,
                              const float* lse, int B, int T, int C, int NH) {
    attention_backward_fa2(dqkv, delta, dout, qkv, out, lse, B, T, C, NH);
    int nq = ceil_div_u(T, FA2_TILE);
    size_t n = (size_t)B * T * C;
    float* acc;
    cudaCheck(cudaMalloc((void**)&acc, n * sizeof(float)));
    cudaCheck(cudaMemset(acc, 0, n * sizeof(float)));
    fa2_racy_dq_kernel<<<dim3(nq * (nq + 1) / 2, NH, B), FA2_THREADS, 4 * FA2_TILE_ELEMS(64) * 2>>>(acc, delta, dout, qkv,
                                                                                                 lse, T, C, NH);
    cudaLaunchCheck();
    fa2_racy_dq_finish<<<ceil_div_u(n, 256), 256>>>(dqkv, acc, n, C);
    cudaLaunchCheck();
    cudaCheck(cudaFree(acc));
}
#endif

static const Version versions[] = {
#ifndef ENABLE_FP32
    {"fa2", attention_forward_fa2, attention_backward_fa2, 64},
#endif
    {"scalar", attention_forward_scalar, attention_backward_scalar, 0},
#ifdef ENABLE_CUDNN
    {"cudnn", cudnn_forward, cudnn_backward, 0},
#endif
};
#define NUM_VERSIONS (int)(sizeof(versions) / sizeof(versions[0]))

#ifndef ENABLE_FP32 // (the runs that pick a version by name are BF16 only)
static const Version* version_named(const char* name) {
    for (int i = 0; i < NUM_VERSIONS; i++) {
        if (strcmp(versions[i].name, name) == 0) { return &versions[i]; }
    }
    fail("no version %s in this build", name);
    return NULL;
}
#endif

// One shape's inputs (random, rounded to floatX) and the double reference's outputs.
typedef struct {
    int B, T, NH, hs, C;
    float a;
    size_t nqkv, nout, nlse;
    float *qkv, *dout;
    double *out, *lse, *dqkv;
} Case;

// a: the range of q and k (a = 2 gives scores of standard deviation ~1.3 at hs 64; 6 gives sharp rows).
static void case_make(Case* k, int B, int T, int NH, int hs, float a) {
    int C = NH * hs;
    size_t BT = (size_t)B * T;
    memset(k, 0, sizeof(*k));
    k->B = B; k->T = T; k->NH = NH; k->hs = hs; k->C = C; k->a = a;
    k->nqkv = BT * 3 * C; k->nout = BT * C; k->nlse = (size_t)B * NH * T;
    k->qkv = host_random(k->nqkv, 1.0f, 3 * (size_t)C, a);
    k->dout = host_random(k->nout, 1.0f, 3, 1.0f);
    k->out = (double*)malloc_check(k->nout * sizeof(double));
    k->lse = (double*)malloc_check(k->nlse * sizeof(double));
    k->dqkv = (double*)malloc_check(k->nqkv * sizeof(double));
    cpu_attention(k->out, k->lse, k->dqkv, k->qkv, k->dout, B, T, C, NH);
}

static void case_free(Case* k) { free(k->qkv); free(k->dout); free(k->out); free(k->lse); free(k->dqkv); }

// The backward's checks for case_run: dq, dk, dv (g_dqkv, on the host) against the reference, and
// a second backward into a NaN-filled buffer bitwise equal to the first.
static void case_check_backward(const Case* k, const Version* v, const float* g_dqkv, floatX* d_dqkv, float* d_delta,
                                const floatX* d_dout, const floatX* d_qkv, const floatX* d_out, const float* d_lse) {
    size_t nqkv = k->nqkv, C = k->C;
    report("  dq", v->name, rel_error(g_dqkv, k->dqkv, nqkv, 3 * C, 0, C), TOL_GRAD);
    report("  dk", v->name, rel_error(g_dqkv, k->dqkv, nqkv, 3 * C, C, 2 * C), TOL_GRAD);
    report("  dv", v->name, rel_error(g_dqkv, k->dqkv, nqkv, 3 * C, 2 * C, 3 * C), TOL_GRAD);
    cudaCheck(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(floatX)));
    v->backward(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, k->B, k->T, k->C, k->NH);
    float* again = to_host_x(d_dqkv, nqkv);
    size_t diffs = 0;
    for (size_t i = 0; i < nqkv; i++) { diffs += memcmp(&again[i], &g_dqkv[i], sizeof(float)) != 0; }
    report("  rerun dqkv bits differ (count)", v->name, (double)diffs, 0.0);
    free(again);
}

// forward_only: case_run checks out and lse only (the --fa2 run's T 1024 case; the backward over
// many key tiles is --fa2-order's T 512)
static int forward_only = 0;

// One version on one case: forward and backward against the reference, backward twice. Returns
// the outputs (host, float) in *g_out_ret and *g_dqkv_ret when those are not NULL.
static void case_run(const Case* k, const Version* v, float** g_out_ret, float** g_dqkv_ret) {
    int B = k->B, T = k->T, NH = k->NH, hs = k->hs, C = k->C;
    float a = k->a;
    size_t nqkv = k->nqkv, nout = k->nout, nlse = k->nlse;
    const float *qkv = k->qkv, *dout = k->dout;
    const double *out = k->out, *lse = k->lse;
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
    if (!forward_only) { v->backward(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH); }
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
    if (!forward_only) { case_check_backward(k, v, g_dqkv, d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse); }
    if (g_out_ret) { *g_out_ret = g_out; } else { free(g_out); }
    if (g_dqkv_ret) { *g_dqkv_ret = g_dqkv; } else { free(g_dqkv); }
    free(g_lse);
    cudaFree(d_qkv); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_dqkv); cudaFree(d_lse); cudaFree(d_delta);
}

static void check_case(const Version* v, int B, int T, int NH, int hs, float a) {
    Case k;
    case_make(&k, B, T, NH, hs, a);
    case_run(&k, v, NULL, NULL);
    case_free(&k);
}

#ifdef ENABLE_CUDNN
// cuDNN against the fa2 version on one set of inputs: each against the reference (case_run), then
// max |cudnn - fa2| / max |fa2| per tensor, within the same tolerances.
static void compare_cudnn_fa2(int B, int T, int NH, float a) {
    const Version *fa2 = version_named("fa2"), *cudnn = version_named("cudnn");
    Case k;
    case_make(&k, B, T, NH, 64, a);
    float *o[2], *d[2];
    case_run(&k, fa2, &o[0], &d[0]);
    case_run(&k, cudnn, &o[1], &d[1]);
    double* ref = (double*)malloc_check(k.nqkv * sizeof(double)); // fa2's outputs, as the "reference"
    for (size_t i = 0; i < k.nout; i++) { ref[i] = o[0][i]; }
    double s_out = rel_error(o[1], ref, k.nout, k.nout, 0, k.nout);
    for (size_t i = 0; i < k.nqkv; i++) { ref[i] = d[0][i]; }
    printf("B %d NH %d T %d hs 64: cudnn against fa2 (max |difference| / max |fa2|)\n", B, NH, T);
    report("  out", "cudnn", s_out, TOL_OUT);
    const char* part[3] = {"  dq", "  dk", "  dv"};
    for (int p = 0; p < 3; p++) {
        report(part[p], "cudnn", rel_error(d[1], ref, k.nqkv, 3 * (size_t)k.C, p * (size_t)k.C, (p + 1) * (size_t)k.C),
               TOL_GRAD);
    }
    free(ref); free(o[0]); free(o[1]); free(d[0]); free(d[1]);
    case_free(&k);
}
#endif

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
    // forward 2 of them (Q K^T, P V), backward 5 useful ones (fa2's two passes and the fallback's
    // run 7: S and dP twice)
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

// a positive integer argument of --fa2-case, or a one-line error
static int fa2_case_arg(const char* a) {
    char* end;
    long v = strtol(a, &end, 10);
    if (*a == '\0' || *end != '\0' || v < 1 || v > 4096) { fail("--fa2-case: '%s' is not an integer in 1..4096", a); }
    return (int)v;
}

int main(int argc, char** argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int long_fa2 = argc > 1 && strcmp(argv[1], "--long-fa2") == 0;
    int cudnn_compare = argc > 1 && strcmp(argv[1], "--cudnn") == 0;
    int fa2_quick = argc > 1 && strcmp(argv[1], "--fa2-quick") == 0;
    int fa2_racy = argc > 1 && strcmp(argv[1], "--fa2-order-racy") == 0;
    int fa2_order = fa2_racy || (argc > 1 && strcmp(argv[1], "--fa2-order") == 0);
    int fa2_sched = argc > 1 && strcmp(argv[1], "--fa2-sched") == 0;
    int fa2_tiny = argc > 1 && strcmp(argv[1], "--fa2-tiny") == 0;
    int fa2_case = argc > 1 && strcmp(argv[1], "--fa2-case") == 0;
    if (fa2_case && (argc != 6 || (fa2_case_arg(argv[5]) != 32 && fa2_case_arg(argv[5]) != 64 && fa2_case_arg(argv[5]) != 128))) {
        fail("--fa2-case: takes B T NH HS (positive integers, HS 32, 64 or 128)");
    }
    int fa2_only = fa2_quick || fa2_order || fa2_sched || fa2_tiny || fa2_case || (argc > 1 && strcmp(argv[1], "--fa2") == 0);
#ifdef ENABLE_FP32
    if (fa2_only) { fail("%s: the fa2 version is BF16 only (build without -DENABLE_FP32)", argv[1]); }
#endif
    int cudnn_only = cudnn_compare || (argc > 1 && strcmp(argv[1], "--cudnn-small") == 0);
#ifndef ENABLE_CUDNN
    if (cudnn_only) { fail("%s: this build has no cuDNN version (build with -DENABLE_CUDNN llmc/cudnn_att.cpp)", argv[1]); }
#endif
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) { fail("no CUDA device (or emulator) found"); }
    rng_seed(&rng, 1234);
    printf("attention kernels, %s build; tolerances: out %.1e, dq/dk/dv %.1e (max error / max |ref|), lse %.1e\n",
           PRECISION_NAME, TOL_OUT, TOL_GRAD, TOL_LSE);
    // (B, NH, T): T over {1, 17, 64, 255, 1024}, partial tiles and several B x NH
    const int cases[][3] = {{1, 1, 1}, {2, 3, 17}, {1, 2, 64}, {2, 1, 255}, {3, 2, 65}, {1, 1, 1024}};
    int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
#ifndef ENABLE_FP32
    if (fa2_only) {
        const Version* v = version_named("fa2");
        static const Version racy = {"fa2racy", attention_forward_fa2, fa2_racy_backward, 64};
        if (fa2_racy) { v = &racy; }
        if (fa2_order) { // 8 key tiles: dq sums of up to 8 terms, whose order shows in the rerun's bits
            check_case(v, 1, 512, 2, 64, 2.0f);
        } else if (fa2_case) {
            check_case(v, fa2_case_arg(argv[2]), fa2_case_arg(argv[3]), fa2_case_arg(argv[4]), fa2_case_arg(argv[5]),
                       2.0f);
        } else if (fa2_sched || fa2_tiny) {
            const int hs[3] = {64, 128, 32};
            for (int i = 0; i < 3; i++) {
                if (fa2_tiny) { check_case(v, 1, 77, 1, hs[i], 2.0f); continue; }
                check_case(v, 1, 130, 1, hs[i], 6.0f);
                check_case(v, 2, 17, 1, hs[i], 2.0f);
            }
        }
        if (fa2_order || fa2_case || fa2_sched || fa2_tiny) {
            printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
            return failures ? 1 : 0;
        }
        forward_only = 1; // 16 key tiles, 2 heads (forward only: the emulated backward costs 3 s per head)
        if (!fa2_quick) { check_case(v, 1, 1024, 2, 64, 2.0f); }
        forward_only = 0;
        check_case(v, fa2_quick ? 1 : 2, 77, fa2_quick ? 3 : 12, 64, 2.0f); // odd T: a partial second tile
        if (!fa2_quick) { // the rest: --fa2-quick's cases (the test runs those under emucc --check)
            printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
            return failures ? 1 : 0;
        }
        check_case(v, 1, 130, 2, 64, 6.0f);  // sharp rows, three tiles, the last with 2 rows
        check_case(v, 2, 17, 3, 64, 2.0f);   // T < 64: one partial tile
        check_case(v, 1, 1, 1, 64, 2.0f);
        // the other head sizes: 128 (GPT-2 shapes with fewer heads) and 32
        check_case(v, 1, 77, 1, 128, 2.0f);
        check_case(v, 1, 130, 1, 128, 6.0f);
        check_case(v, 2, 17, 2, 128, 2.0f);
        check_case(v, 1, 77, 2, 32, 2.0f);
        check_case(v, 1, 130, 2, 32, 6.0f);
        check_case(v, 2, 17, 2, 32, 2.0f);
        printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
        return failures ? 1 : 0;
    }
#endif
#ifdef ENABLE_CUDNN
    if (cudnn_compare) {
        compare_cudnn_fa2(1, 512, 12, 2.0f); // GPT-2 124M's layer: C 768, NH 12 (T 512: emulated time)
        compare_cudnn_fa2(2, 77, 12, 2.0f);   // an odd T: a partial 64-row tile
    }
#endif
    for (int vi = 0; vi < NUM_VERSIONS; vi++) {
        const Version* v = &versions[vi];
        if (cudnn_only && strcmp(v->name, "cudnn") != 0) { continue; }
        // T 1024: fa2's in the checked build's run (--long-fa2) and --fa2, the others' in the default run
        int fa2 = strcmp(v->name, "fa2") == 0;
        for (int c = 0; c < ncases; c++) {
            if (cases[c][2] > 256 && (quick || cudnn_only || fa2 != long_fa2)) { continue; }
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
