// LayerNorm kernels, standalone: the residual add + LayerNorm forward and the LayerNorm backward
// (input, weight and bias gradients), each in two versions, checked against a CPU reference and,
// on a real GPU, timed.
//   version 1: the naive kernels (one thread per row, 2- or 4-byte accesses, column sums in a
//              second kernel), as a baseline;
//   version 2: the trainer's (llmc/layernorm.cuh): a warp per row forward, teams of warps per row
//              backward, 128-bit Packed128 accesses, one launch each, parameter gradients
//              accumulated in the same kernel.
//   dev/cuda_emu/emucc -O1 -DENABLE_FP32 -o ln dev/cuda/layernorm.cu && ./ln [N C]
//   nvcc -O3 -arch=sm_90 -o ln dev/cuda/layernorm.cu && ./ln 65536 768
#include "common.cuh"
#include "../../llmc/layernorm.cuh"

// ---- CPU reference (double accumulation)
static void cpu_forward(float* out, float* mean, float* rstd, float* res, const float* a, const float* b,
                        const float* w, const float* bias, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = res + (size_t)n * C;
        for (int c = 0; c < C; c++) { res[(size_t)n * C + c] = a[(size_t)n * C + c] + b[(size_t)n * C + c]; }
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) { m += x[c]; }
        m /= C;
        for (int c = 0; c < C; c++) { v += (x[c] - m) * (x[c] - m); }
        double s = 1.0 / sqrt(v / C + LN_EPS);
        for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = (float)((x[c] - m) * s * w[c] + bias[c]); }
        mean[n] = (float)m;
        rstd[n] = (float)s;
    }
}

static void cpu_backward(float* dinp, float* dw, float* db, const float* dout, const float* x, const float* w,
                         const float* mean, const float* rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * C, *xr = x + (size_t)n * C;
        double md = 0.0, mdn = 0.0;
        for (int c = 0; c < C; c++) {
            double norm = (xr[c] - mean[n]) * rstd[n], dn = (double)dy[c] * w[c];
            md += dn;
            mdn += dn * norm;
        }
        md /= C;
        mdn /= C;
        for (int c = 0; c < C; c++) {
            double norm = (xr[c] - mean[n]) * rstd[n], dn = (double)dy[c] * w[c];
            dinp[(size_t)n * C + c] += (float)(rstd[n] * (dn - md - norm * mdn));
            dw[c] += (float)(dy[c] * norm);
            db[c] += dy[c];
        }
    }
}

// ---- version 1: one thread per row
__global__ void ln_forward_v1(floatX* out, float* mean, float* rstd, floatX* res, const floatX* a, const floatX* b,
                              const floatX* w, const floatX* bias, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    floatX* x = res + (size_t)n * C;
    float m = 0.0f, v = 0.0f;
    for (int c = 0; c < C; c++) { x[c] = to_X(to_f(a[(size_t)n * C + c]) + to_f(b[(size_t)n * C + c])); m += to_f(x[c]); }
    m /= C;
    for (int c = 0; c < C; c++) { float d = to_f(x[c]) - m; v += d * d; }
    float s = 1.0f / sqrtf(v / C + LN_EPS);
    for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = to_X((to_f(x[c]) - m) * s * to_f(w[c]) + to_f(bias[c])); }
    mean[n] = m;
    rstd[n] = s;
}

__global__ void ln_backward_input_v1(floatX* dinp, const floatX* dout, const floatX* x, const floatX* w,
                                     const float* mean, const float* rstd, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    const floatX *dy = dout + (size_t)n * C, *xr = x + (size_t)n * C;
    float md = 0.0f, mdn = 0.0f;
    for (int c = 0; c < C; c++) {
        float norm = (to_f(xr[c]) - mean[n]) * rstd[n], dn = to_f(dy[c]) * to_f(w[c]);
        md += dn;
        mdn += dn * norm;
    }
    md /= C;
    mdn /= C;
    for (int c = 0; c < C; c++) {
        float norm = (to_f(xr[c]) - mean[n]) * rstd[n], dn = to_f(dy[c]) * to_f(w[c]);
        dinp[(size_t)n * C + c] = to_X(to_f(dinp[(size_t)n * C + c]) + rstd[n] * (dn - md - norm * mdn));
    }
}

// one thread per column, every row in order
__global__ void ln_backward_params_v1(floatX* dw, floatX* db, const floatX* dout, const floatX* x, const float* mean,
                                      const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float sw = 0.0f, sb = 0.0f;
    for (int n = 0; n < N; n++) {
        float dy = to_f(dout[(size_t)n * C + c]);
        sw += dy * (to_f(x[(size_t)n * C + c]) - mean[n]) * rstd[n];
        sb += dy;
    }
    dw[c] = to_X(to_f(dw[c]) + sw);
    db[c] = to_X(to_f(db[c]) + sb);
}

static void run(int N, int C) {
    printf("-- N %d, C %d (%s)\n", N, C, PRECISION_NAME);
    size_t n = (size_t)N * C;
    float *a = host_random(n, 1.0f), *b = host_random(n, 1.0f), *w = host_random(C, 1.0f), *bias = host_random(C, 0.5f);
    float *dout = host_random(n, 1.0f), *dinp0 = host_random(n, 0.1f), *dw0 = host_random(C, 0.1f),
          *db0 = host_random(C, 0.1f);
    floatX *d_a = to_device_x(a, n), *d_b = to_device_x(b, n), *d_w = to_device_x(w, C), *d_bias = to_device_x(bias, C);
    floatX *d_dout = to_device_x(dout, n);
    // inputs rounded to floatX by to_device_x; the reference starts from the same values
    float *out = (float*)malloc_check(n * 4), *res = (float*)malloc_check(n * 4), *mean = (float*)malloc_check(N * 4),
          *rstd = (float*)malloc_check(N * 4);
    cpu_forward(out, mean, rstd, res, a, b, w, bias, N, C);
    floatX *d_out, *d_res;
    float *d_mean, *d_rstd, *d_partial;
    cudaCheck(cudaMalloc((void**)&d_out, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_res, n * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_mean, N * 4));
    cudaCheck(cudaMalloc((void**)&d_rstd, N * 4));
    cudaCheck(cudaMalloc((void**)&d_partial, layernorm_backward_partial_floats(N, C) * 4));
    for (int version = 1; version <= 2; version++) {
        auto fwd = [&]() {
            if (version == 1) {
                ln_forward_v1<<<ceil_div_u(N, 128), 128>>>(d_out, d_mean, d_rstd, d_res, d_a, d_b, d_w, d_bias, N, C);
            } else {
                residual_layernorm_forward(d_out, d_mean, d_rstd, d_res, d_a, d_b, d_w, d_bias, N, C);
            }
        };
        fwd();
        char what[96];
        float *g_out = to_host_x(d_out, n), *g_mean = to_host_f(d_mean, N);
        report_v(version, "residual_layernorm_forward out", g_out, out, n);
        report_v(version, "residual_layernorm_forward mean", g_mean, mean, N);
        snprintf(what, sizeof(what), "v%d forward", version);
        time_it(what, fwd, (4.0 * n) * sizeof(floatX));
        // backward from the reference's saved statistics (so both versions see the same input)
        float *dinp = (float*)malloc_check(n * 4), *dw = (float*)malloc_check(C * 4), *db = (float*)malloc_check(C * 4);
        memcpy(dinp, dinp0, n * 4);
        memcpy(dw, dw0, C * 4);
        memcpy(db, db0, C * 4);
        floatX *d_dinp = to_device_x(dinp, n), *d_dw = to_device_x(dw, C), *d_db = to_device_x(db, C);
        float *d_m = to_device_f(mean, N), *d_s = to_device_f(rstd, N);
        floatX* d_x = to_device_x(res, n);
        cpu_backward(dinp, dw, db, dout, res, w, mean, rstd, N, C);
        auto bwd = [&]() {
            if (version == 1) {
                ln_backward_input_v1<<<ceil_div_u(N, 128), 128>>>(d_dinp, d_dout, d_x, d_w, d_m, d_s, N, C);
                ln_backward_params_v1<<<ceil_div_u(C, 128), 128>>>(d_dw, d_db, d_dout, d_x, d_m, d_s, N, C);
            } else {
                layernorm_backward(d_dinp, d_dw, d_db, d_partial, d_dout, d_x, d_w, d_m, d_s, N, C);
            }
        };
        bwd();
        float *g_dinp = to_host_x(d_dinp, n), *g_dw = to_host_x(d_dw, C), *g_db = to_host_x(d_db, C);
        report_v(version, "layernorm_backward dinp", g_dinp, dinp, n);
        report_v(version, "layernorm_backward dweight", g_dw, dw, C);
        report_v(version, "layernorm_backward dbias", g_db, db, C);
        if (version == 2) { // the same bits under every schedule (52_dev_cuda.sh compares the lines)
            snprintf(what, sizeof(what), "layernorm_backward N %d C %d dweight", N, C);
            print_bits(what, d_dw, C);
            snprintf(what, sizeof(what), "layernorm_backward N %d C %d dbias", N, C);
            print_bits(what, d_db, C);
            snprintf(what, sizeof(what), "layernorm_backward N %d C %d dinp", N, C);
            print_bits(what, d_dinp, n);
        }
        snprintf(what, sizeof(what), "v%d backward", version);
        time_it(what, bwd, (4.0 * n) * sizeof(floatX)); // dout, x, dinp read + dinp written
        free(g_out); free(g_mean); free(dinp); free(dw); free(db); free(g_dinp); free(g_dw); free(g_db);
        cudaFree(d_dinp); cudaFree(d_dw); cudaFree(d_db); cudaFree(d_m); cudaFree(d_s); cudaFree(d_x);
    }
    free(a); free(b); free(w); free(bias); free(dout); free(dinp0); free(dw0); free(db0); free(out); free(res);
    free(mean); free(rstd);
    cudaFree(d_a); cudaFree(d_b); cudaFree(d_w); cudaFree(d_bias); cudaFree(d_dout); cudaFree(d_out); cudaFree(d_res);
    cudaFree(d_mean); cudaFree(d_rstd); cudaFree(d_partial);
}

int main(int argc, char** argv) {
    rng_seed(&dev_rng, 7);
    if (argc == 3) {
        run(atoi(argv[1]), atoi(argv[2]));
    } else {
        run(300, 96); // whole 128-bit packs, two backward blocks
        run(77, 50);  // C not a multiple of the pack: the element-by-element path
        run(40, 768); // GPT-2 small width: backward teams of 8 warps in FP32 (4 in BF16)
        run(9, 1602); // the widest team (16 warps in FP32), element by element
        run(2048, 96); // the backward's grid: 128 blocks of 16 rows, their partials added by the second launch
    }
    return finish("dev/cuda/layernorm.cu");
}
