// Kernel tests: every kernel of llmc/*.cuh (and our cuBLASLt calls) against CPU references
// written from the CPU trainer's formulas, on shapes that are not multiples of any block size:
// odd T, C = 48, V = 257, more rows than one column-sum chunk, T > 32 in attention. Built in
// FP32 for tight comparison; run through the emulator, also under AddressSanitizer. Exits
// non-zero on any mismatch.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/utils.h"
#include "../../llmc/rng.h"
#include "../../llmc/cuda_common.cuh"
#include "../../llmc/encoder.cuh"
#include "../../llmc/layernorm.cuh"
#include "../../llmc/gelu.cuh"
#include "../../llmc/attention.cuh"
#include "../../llmc/classifier.cuh"
#include "../../llmc/matmul.cuh"
#include "../../llmc/adamw.cuh"
#include "../cuda/copies.cuh"

#ifndef ENABLE_FP32
#error "the kernel tests compare fp32 kernels: build with -DENABLE_FP32"
#endif

// The CPU references: the CPU trainer's formulas (train_gpt2.c) as plain serial loops, in double
// where a sum is long, so that they are an independent, order-insensitive yardstick.
namespace cpu {
static void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        for (int c = 0; c < C; c++) { out[(size_t)bt * C + c] = wte[(size_t)tokens[bt] * C + c] + wpe[(size_t)(bt % T) * C + c]; }
    }
}
static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        for (int c = 0; c < C; c++) {
            dwte[(size_t)tokens[bt] * C + c] += dout[(size_t)bt * C + c];
            dwpe[(size_t)(bt % T) * C + c] += dout[(size_t)bt * C + c];
        }
    }
}
static void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                              int N, int C) {
    for (int n = 0; n < N; n++) {
        const float* xn = x + (size_t)n * C;
        double m = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) { m += xn[c]; }
        m /= C;
        for (int c = 0; c < C; c++) { var += (xn[c] - m) * (xn[c] - m); }
        double s = 1.0 / sqrt(var / C + 1e-5);
        for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = (float)((xn[c] - m) * s * w[c] + b[c]); }
        mean[n] = (float)m;
        rstd[n] = (float)s;
    }
}
static void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* x, const float* w,
                               const float* mean, const float* rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * C, *xn = x + (size_t)n * C;
        double md = 0.0, mdn = 0.0;
        for (int c = 0; c < C; c++) {
            double norm = (xn[c] - mean[n]) * rstd[n], dnorm = (double)dy[c] * w[c];
            md += dnorm;
            mdn += dnorm * norm;
            dw[c] += (float)(dy[c] * norm);
            db[c] += dy[c];
        }
        md /= C;
        mdn /= C;
        for (int c = 0; c < C; c++) {
            double norm = (xn[c] - mean[n]) * rstd[n], dnorm = (double)dy[c] * w[c];
            dinp[(size_t)n * C + c] += (float)(rstd[n] * (dnorm - md - norm * mdn));
        }
    }
}
static double gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_grad(double x) {
    double k = sqrt(2.0 / M_PI), th = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        const float* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float* a = att + (((size_t)b * NH + h) * T + t) * T;
        double maxv = -INFINITY, sum = 0.0;
        double* s = (double*)malloc_check((size_t)T * sizeof(double));
        for (int t2 = 0; t2 <= t; t2++) {
            const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
            double d = 0.0;
            for (int i = 0; i < hs; i++) { d += (double)q[i] * k[i]; }
            s[t2] = d / sqrt((double)hs);
            if (s[t2] > maxv) { maxv = s[t2]; }
        }
        for (int t2 = 0; t2 <= t; t2++) { s[t2] = exp(s[t2] - maxv); sum += s[t2]; }
        for (int t2 = 0; t2 <= t; t2++) { a[t2] = (float)(s[t2] / sum); }
        for (int i = 0; i < hs; i++) {
            double o = 0.0;
            for (int t2 = 0; t2 <= t; t2++) { o += s[t2] / sum * qkv[((size_t)b * T + t2) * 3 * C + 2 * C + h * hs + i]; }
            out[((size_t)b * T + t) * C + h * hs + i] = (float)o;
        }
        free(s);
    }
}
static void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C,
                               int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(float));
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        const float* a = att + (((size_t)b * NH + h) * T + t) * T;
        const float* dy = dout + ((size_t)b * T + t) * C + h * hs;
        const float* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double* datt = (double*)malloc_check((size_t)T * sizeof(double));
        double dot = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
            float* dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
            double d = 0.0;
            for (int i = 0; i < hs; i++) { d += (double)dy[i] * v[i]; dv[i] += a[t2] * dy[i]; }
            datt[t2] = d;
            dot += a[t2] * d;
        }
        for (int t2 = 0; t2 <= t; t2++) {
            double dpre = a[t2] * (datt[t2] - dot) * scale;
            const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
            float* dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
            float* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
            for (int i = 0; i < hs; i++) { dq[i] += (float)(dpre * k[i]); dk[i] += (float)(dpre * q[i]); }
        }
        free(datt);
    }
}
// losses; with dloss != 0, logits become (softmax - onehot) * dloss over V, 0 in the padding
static void classifier(float* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    for (int n = 0; n < N; n++) {
        float* l = logits + (size_t)n * Vp;
        double maxv = -INFINITY, sum = 0.0;
        for (int i = 0; i < V; i++) { if (l[i] > maxv) { maxv = l[i]; } }
        for (int i = 0; i < V; i++) { sum += exp(l[i] - maxv); }
        losses[n] = (float)(log(sum) + maxv - l[targets[n]]);
        if (dloss == 0.0f) { continue; }
        for (int i = 0; i < Vp; i++) {
            l[i] = i < V ? (float)((exp(l[i] - maxv) / sum - (i == targets[n])) * dloss) : 0.0f;
        }
    }
}
static void matmul_forward(float* out, const float* inp, const float* w, const float* b, int N, int C, int OC) {
    for (int n = 0; n < N; n++) for (int o = 0; o < OC; o++) {
        double s = b ? b[o] : 0.0;
        for (int c = 0; c < C; c++) { s += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c]; }
        out[(size_t)n * OC + o] = (float)s;
    }
}
static void matmul_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                            int N, int C, int OC) {
    for (int n = 0; n < N; n++) for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int o = 0; o < OC; o++) { s += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c]; }
        dinp[(size_t)n * C + c] = (float)s;
    }
    for (int o = 0; o < OC; o++) {
        double sb = 0.0;
        for (int n = 0; n < N; n++) { sb += dout[(size_t)n * OC + o]; }
        db[o] += (float)sb;
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int n = 0; n < N; n++) { s += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c]; }
            dw[(size_t)o * C + c] += (float)s;
        }
    }
}
static void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2, float eps,
                  float wd, float scale, float bias1, float bias2) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * scale;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        p[i] -= lr * ((m[i] / bias1) / (sqrtf(v[i] / bias2) + eps) + wd * p[i]);
    }
}
}


#define TOL 2e-5f // max |GPU - CPU| / max(1, max |CPU|)

static int failures = 0;
static Rng rng;

static void report(const char* what, const float* got, const float* want, size_t n) {
    float err = rel_max_error(got, want, n);
    int ok = err <= TOL;
    printf("%-4s %-34s n %-7zu error %.3e (tolerance %.0e)\n", ok ? "ok" : "FAIL", what, n, err, TOL);
    if (!ok) { failures++; }
}

static float* host_random(size_t n, float scale) {
    float* x = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = (rng_uniform(&rng) * 2.0f - 1.0f) * scale; }
    return x;
}

static void test_encoder(int B, int T, int C, int V) {
    size_t BT = (size_t)B * T;
    int* tokens = (int*)malloc_check(BT * sizeof(int));
    for (size_t i = 0; i < BT; i++) { tokens[i] = i % 3 == 0 ? V - 1 : (int)rng_below(&rng, 5) * (V / 5); } // repeats
    float *wte = host_random((size_t)V * C, 1.0f), *wpe = host_random((size_t)T * C, 1.0f);
    float* out = (float*)calloc_check(BT * C, sizeof(float));
    cpu::encoder_forward(out, tokens, wte, wpe, B, T, C);
    float *d_wte = to_device_f(wte, (size_t)V * C), *d_wpe = to_device_f(wpe, (size_t)T * C);
    float* d_out = to_device_f(out, BT * C);
    int* d_tok = to_device_copy(tokens, BT);
    cudaCheck(cudaMemset(d_out, 0, BT * C * sizeof(float)));
    encoder_forward(d_out, d_tok, d_wte, d_wpe, B, T, C);
    float* got = to_host_f(d_out, BT * C);
    report("encoder_forward", got, out, BT * C);
    // backward accumulates into existing gradients
    float* dout = host_random(BT * C, 1.0f);
    float *dwte = host_random((size_t)V * C, 0.1f), *dwpe = host_random((size_t)T * C, 0.1f);
    float *d_dwte = to_device_f(dwte, (size_t)V * C), *d_dwpe = to_device_f(dwpe, (size_t)T * C);
    float* d_dout = to_device_f(dout, BT * C);
    cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
    EncoderBuckets buckets;
    encoder_buckets_init(&buckets, (int)BT, V);
    encoder_backward(d_dwte, d_dwpe, &buckets, d_dout, tokens, B, T, C);
    float *got_wte = to_host_f(d_dwte, (size_t)V * C), *got_wpe = to_host_f(d_dwpe, (size_t)T * C);
    report("encoder_backward dwte", got_wte, dwte, (size_t)V * C);
    report("encoder_backward dwpe", got_wpe, dwpe, (size_t)T * C);
    encoder_buckets_free(&buckets);
    free(tokens); free(wte); free(wpe); free(out); free(got); free(dout); free(dwte); free(dwpe);
    free(got_wte); free(got_wpe);
    cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_out); cudaFree(d_tok); cudaFree(d_dwte); cudaFree(d_dwpe); cudaFree(d_dout);
}

static void test_layernorm(int N, int C) {
    size_t n = (size_t)N * C;
    float *a = host_random(n, 2.0f), *b = host_random(n, 1.0f), *w = host_random(C, 1.0f), *bias = host_random(C, 0.5f);
    for (size_t i = 0; i < n; i++) { a[i] += 0.5f; } // a non-zero mean
    // CPU: residual = a + b, then LayerNorm of it
    float* res = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { res[i] = a[i] + b[i]; }
    float *out = (float*)malloc_check(n * sizeof(float)), *mean = (float*)malloc_check(N * sizeof(float));
    float* rstd = (float*)malloc_check(N * sizeof(float));
    cpu::layernorm_forward(out, mean, rstd, res, w, bias, N, C);
    float *d_a = to_device_f(a, n), *d_b = to_device_f(b, n), *d_w = to_device_f(w, C), *d_bias = to_device_f(bias, C);
    float *d_res = to_device_f(a, n), *d_out = to_device_f(a, n), *d_mean = to_device_f(mean, N), *d_rstd = to_device_f(rstd, N);
    residual_layernorm_forward(d_out, d_mean, d_rstd, d_res, d_a, d_b, d_w, d_bias, N, C);
    float *g_out = to_host_f(d_out, n), *g_res = to_host_f(d_res, n), *g_mean = to_host_f(d_mean, N), *g_rstd = to_host_f(d_rstd, N);
    report("residual_layernorm_forward res", g_res, res, n);
    report("residual_layernorm_forward out", g_out, out, n);
    report("residual_layernorm_forward mean", g_mean, mean, N);
    report("residual_layernorm_forward rstd", g_rstd, rstd, N);
    // plain LayerNorm of the residual (b = NULL)
    cudaCheck(cudaMemset(d_out, 0, n * sizeof(float)));
    residual_layernorm_forward(d_out, d_mean, d_rstd, NULL, d_res, NULL, d_w, d_bias, N, C);
    free(g_out);
    g_out = to_host_f(d_out, n);
    report("layernorm_forward out", g_out, out, n);
    // backward, accumulating into dinp, dweight, dbias
    float *dout = host_random(n, 1.0f), *dinp = host_random(n, 0.1f), *dw = host_random(C, 0.1f), *db = host_random(C, 0.1f);
    float *d_dout = to_device_f(dout, n), *d_dinp = to_device_f(dinp, n), *d_dw = to_device_f(dw, C), *d_db = to_device_f(db, C);
    float* d_partial;
    cudaCheck(cudaMalloc((void**)&d_partial, layernorm_backward_partial_floats(N, C) * sizeof(float)));
    cpu::layernorm_backward(dinp, dw, db, dout, res, w, mean, rstd, N, C);
    layernorm_backward(d_dinp, d_dw, d_db, d_partial, d_dout, d_res, d_w, d_mean, d_rstd, N, C);
    float *g_dinp = to_host_f(d_dinp, n), *g_dw = to_host_f(d_dw, C), *g_db = to_host_f(d_db, C);
    report("layernorm_backward dinp", g_dinp, dinp, n);
    report("layernorm_backward dweight", g_dw, dw, C);
    report("layernorm_backward dbias", g_db, db, C);
    free(a); free(b); free(w); free(bias); free(res); free(out); free(mean); free(rstd); free(g_out); free(g_res);
    free(g_mean); free(g_rstd); free(dout); free(dinp); free(dw); free(db); free(g_dinp); free(g_dw); free(g_db);
    cudaFree(d_a); cudaFree(d_b); cudaFree(d_w); cudaFree(d_bias); cudaFree(d_res); cudaFree(d_out); cudaFree(d_mean);
    cudaFree(d_rstd); cudaFree(d_dout); cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db); cudaFree(d_partial);
}

static void test_gelu(size_t n) {
    float *x = host_random(n, 4.0f), *want = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { want[i] = (float)cpu::gelu(x[i]); }
    float *d_x = to_device_f(x, n), *d_y = to_device_f(x, n);
    gelu_forward(d_y, d_x, n);
    float* got = to_host_f(d_y, n);
    report("gelu_forward", got, want, n);
    // the backward's rebuilding pass: d * GELU'(x) in place and GELU(x) beside it (-r 1 and 2, -ge 0)
    float *d = host_random(n, 1.0f), *want_d = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { want_d[i] = (float)(d[i] * cpu::gelu_grad(x[i])); }
    float* d_d = to_device_f(d, n);
    cudaCheck(cudaMemset(d_y, 0xff, n * sizeof(float))); // NaN: every element must be written
    gelu_backward_rebuild(d_d, d_y, d_x, n);
    float *got_d = to_host_f(d_d, n), *got_y = to_host_f(d_y, n);
    report("gelu_backward_rebuild gradient", got_d, want_d, n);
    report("gelu_backward_rebuild output", got_y, want, n);
    free(x); free(want); free(got); free(d); free(want_d); free(got_d); free(got_y);
    cudaFree(d_x); cudaFree(d_y); cudaFree(d_d);
}

// The CPU reference keeps the (T, T) probabilities; the kernels keep one log-sum-exp per row
// (dev/cuda/attention.cu checks lse itself and the BF16 tensor-core version).
static void test_attention(int B, int T, int C, int NH) {
    size_t BT = (size_t)B * T, natt = (size_t)B * NH * T * T, nlse = (size_t)B * NH * T;
    float* qkv = host_random(BT * 3 * C, 1.0f);
    float *out = (float*)calloc_check(BT * C, sizeof(float)), *att = (float*)calloc_check(natt, sizeof(float));
    cpu::attention_forward(out, att, qkv, B, T, C, NH);
    float *d_qkv = to_device_f(qkv, BT * 3 * C), *d_out = to_device_f(out, BT * C), *d_lse = to_device_f(qkv, nlse);
    cudaCheck(cudaMemset(d_out, 0, BT * C * sizeof(float)));
    attention_forward_scalar(d_out, d_lse, d_qkv, B, T, C, NH);
    float* g_out = to_host_f(d_out, BT * C);
    report("attention_forward out", g_out, out, BT * C);
    float* dout = host_random(BT * C, 1.0f);
    float* dqkv = (float*)calloc_check(BT * 3 * C, sizeof(float));
    cpu::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
    float *d_dout = to_device_f(dout, BT * C), *d_dqkv = to_device_f(dqkv, BT * 3 * C), *d_delta = to_device_f(qkv, nlse);
    cudaCheck(cudaMemset(d_dqkv, 0xff, BT * 3 * C * sizeof(float))); // NaN: every element must be written
    attention_backward_scalar(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
    float* g_dqkv = to_host_f(d_dqkv, BT * 3 * C);
    report("attention_backward dqkv", g_dqkv, dqkv, BT * 3 * C);
    free(qkv); free(out); free(att); free(g_out); free(dout); free(dqkv); free(g_dqkv);
    cudaFree(d_qkv); cudaFree(d_out); cudaFree(d_lse); cudaFree(d_dout); cudaFree(d_dqkv); cudaFree(d_delta);
}

static void test_classifier(int N, int V, int Vp) {
    size_t n = (size_t)N * Vp;
    float* logits = host_random(n, 5.0f);
    int* targets = (int*)malloc_check(N * sizeof(int));
    for (int i = 0; i < N; i++) { targets[i] = i == 0 ? V - 1 : (int)rng_below(&rng, V); }
    float* losses = (float*)malloc_check(N * sizeof(float));
    float *d_logits = to_device_f(logits, n), *d_losses = to_device_f(logits, N);
    int* d_targets = to_device_copy(targets, N);
    cpu::classifier(logits, losses, targets, 0.0f, N, V, Vp);
    fused_classifier(d_logits, d_losses, d_targets, 0.0f, 0, N, V, Vp);
    float *g_losses = to_host_f(d_losses, N), *g_logits = to_host_f(d_logits, n);
    report("fused_classifier loss", g_losses, losses, N);
    report("fused_classifier keeps logits", g_logits, logits, n);
    float dloss = 1.0f / N;
    cpu::classifier(logits, losses, targets, dloss, N, V, Vp);
    fused_classifier(d_logits, d_losses, d_targets, dloss, 1, N, V, Vp);
    free(g_losses); free(g_logits);
    g_losses = to_host_f(d_losses, N);
    g_logits = to_host_f(d_logits, n);
    report("fused_classifier loss (training)", g_losses, losses, N);
    report("fused_classifier dlogits", g_logits, logits, n);
    free(logits); free(targets); free(losses); free(g_losses); free(g_logits);
    cudaFree(d_logits); cudaFree(d_losses); cudaFree(d_targets);
}

// Our cuBLASLt calls (layouts, bias and GELU epilogues) and the bias-gradient column sums; GELU
// and its gradient from cuBLASLt's epilogues (ge 1) or our kernels after the matmul (ge 0).
static void test_matmul(int N, int C, int OC, int ge) {
    matmul_ctx.gelu_fusion = ge;
    char what[3][64];
    snprintf(what[0], sizeof(what[0]), "matmul_forward_gelu out (-ge %d)", ge);
    snprintf(what[1], sizeof(what[1]), "matmul_forward_gelu pre (-ge %d)", ge);
    snprintf(what[2], sizeof(what[2]), "matmul_backward dinp, GELU' (-ge %d)", ge);
    float *inp = host_random((size_t)N * C, 1.0f), *w = host_random((size_t)OC * C, 0.5f), *b = host_random(OC, 0.5f);
    float* out = (float*)malloc_check((size_t)N * OC * sizeof(float));
    cpu::matmul_forward(out, inp, w, b, N, C, OC);
    float *d_inp = to_device_f(inp, (size_t)N * C), *d_w = to_device_f(w, (size_t)OC * C), *d_b = to_device_f(b, OC);
    float *d_out = to_device_f(out, (size_t)N * OC), *d_pre = to_device_f(out, (size_t)N * OC);
    matmul_forward(d_out, d_inp, d_w, d_b, N, C, OC);
    float* got = to_host_f(d_out, (size_t)N * OC);
    report("matmul_forward (bias epilogue)", got, out, (size_t)N * OC);
    float* gelu = (float*)malloc_check((size_t)N * OC * sizeof(float));
    for (size_t i = 0; i < (size_t)N * OC; i++) { gelu[i] = (float)cpu::gelu(out[i]); }
    matmul_forward_gelu(d_out, d_pre, d_inp, d_w, d_b, N, C, OC);
    float *g_gelu = to_host_f(d_out, (size_t)N * OC), *g_pre = to_host_f(d_pre, (size_t)N * OC);
    report(what[0], g_gelu, gelu, (size_t)N * OC);
    report(what[1], g_pre, out, (size_t)N * OC);
    // backward through GELU: dinp = (dout W) * gelu'(pre)
    float *dout = host_random((size_t)N * OC, 1.0f), *dinp = (float*)malloc_check((size_t)N * C * sizeof(float));
    float *dw = host_random((size_t)OC * C, 0.1f), *db = host_random(OC, 0.1f);
    float* pre = host_random((size_t)N * C, 2.0f);
    float *d_dout = to_device_f(dout, (size_t)N * OC), *d_dinp = to_device_f(dinp, (size_t)N * C);
    float *d_dw = to_device_f(dw, (size_t)OC * C), *d_db = to_device_f(db, OC), *d_gpre = to_device_f(pre, (size_t)N * C);
    float* d_partial;
    cudaCheck(cudaMalloc((void**)&d_partial, colsum_partial_floats(N, OC) * sizeof(float)));
    cpu::matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    for (size_t i = 0; i < (size_t)N * C; i++) { dinp[i] = (float)(dinp[i] * cpu::gelu_grad(pre[i])); }
    matmul_backward(d_dinp, d_dw, d_db, d_partial, d_dout, d_inp, d_w, d_gpre, N, C, OC);
    float *g_dinp = to_host_f(d_dinp, (size_t)N * C), *g_dw = to_host_f(d_dw, (size_t)OC * C), *g_db = to_host_f(d_db, OC);
    report(what[2], g_dinp, dinp, (size_t)N * C);
    report("matmul_backward dweight", g_dw, dw, (size_t)OC * C);
    report("matmul_backward dbias", g_db, db, OC);
    free(inp); free(w); free(b); free(out); free(got); free(gelu); free(g_gelu); free(g_pre); free(dout); free(dinp);
    free(dw); free(db); free(pre); free(g_dinp); free(g_dw); free(g_db);
    cudaFree(d_inp); cudaFree(d_w); cudaFree(d_b); cudaFree(d_out); cudaFree(d_pre); cudaFree(d_dout); cudaFree(d_dinp);
    cudaFree(d_dw); cudaFree(d_db); cudaFree(d_gpre); cudaFree(d_partial);
}

static void test_adamw_and_norm(size_t n) {
    float *p = host_random(n, 1.0f), *g = host_random(n, 0.3f), *m = host_random(n, 0.01f), *v = host_random(n, 0.01f);
    for (size_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); }
    float *d_p = to_device_f(p, n), *d_g = to_device_f(g, n), *d_m = to_device_f(m, n), *d_v = to_device_f(v, n);
    float* d_scratch;
    cudaCheck(cudaMalloc((void**)&d_scratch, (NORM_BLOCKS + 1) * sizeof(float)));
    float norm = global_norm(d_g, n, d_scratch);
    double sq = 0.0;
    for (size_t i = 0; i < n; i++) { sq += (double)g[i] * g[i]; }
    float want_norm = (float)sqrt(sq);
    report("global_norm", &norm, &want_norm, 1);
    float bias1 = 1.0f - powf(0.9f, 3.0f), bias2 = 1.0f - powf(0.95f, 3.0f);
    cpu::adamw(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, bias1, bias2);
    adamw_update(d_p, NULL, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, bias1, bias2, 7u);
    float *g_p = to_host_f(d_p, n), *g_m = to_host_f(d_m, n), *g_v = to_host_f(d_v, n);
    report("adamw params", g_p, p, n);
    report("adamw m", g_m, m, n);
    report("adamw v", g_v, v, n);
    free(p); free(g); free(m); free(v); free(g_p); free(g_m); free(g_v);
    cudaFree(d_p); cudaFree(d_g); cudaFree(d_m); cudaFree(d_v); cudaFree(d_scratch);
}

int main(void) {
    rng_seed(&rng, 42);
    matmul_init();
    test_encoder(3, 7, 48, 257);
    test_layernorm(21, 48);
    test_layernorm(611, 50); // three column-sum chunks, the last one partial
    test_layernorm(300, 520); // backward teams of 8 warps, two row blocks
    test_gelu(1001);
    test_attention(2, 7, 48, 3);
    test_attention(1, 37, 48, 3); // more keys than lanes
    test_classifier(21, 257, 384);
    test_matmul(21, 48, 200, 1);
    test_matmul(21, 48, 200, 0);
    test_matmul(300, 48, 72, 1);
    test_matmul(301, 45, 77, 0); // GELU kernels with a tail shorter than a pack
    test_matmul(600, 40, 520, 1); // bias sums over 3 chunks and 5 strips of columns
    long plans = matmul_ctx.plan_misses;
    test_matmul(21, 48, 200, 1); // the same shapes again: every plan comes from the cache
    printf("%-4s matmul plans built on the repeat: %ld (want 0), cached %d\n",
           matmul_ctx.plan_misses == plans ? "ok" : "FAIL", matmul_ctx.plan_misses - plans, matmul_ctx.num_plans);
    if (matmul_ctx.plan_misses != plans) { failures++; }
    test_adamw_and_norm(70001);
    matmul_free();
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
