// Matmul epilogues, standalone: y = x W^T + b, GELU(y) with the pre-activation kept, the GELU
// gradient in the backward, and the bias gradient, in two versions, checked against a CPU
// reference and, on a real GPU, timed.
//   version 1: a plain cuBLASLt matmul, then our own elementwise kernels for bias, GELU, dGELU,
//              and a thread-per-column bias gradient;
//   version 2: the trainer's (llmc/matmul.cuh): the BIAS, GELU_AUX_BIAS and DGELU epilogues fused
//              into cuBLASLt's matmul (cached plans), the bias gradient one column-sum launch.
//   dev/cuda_emu/emucc -O1 -DENABLE_FP32 -o mm dev/cuda/matmul.cu && ./mm [N C OC]
//   nvcc -O3 -arch=sm_90 -o mm dev/cuda/matmul.cu -lcublasLt && ./mm 65536 768 3072
#include "common.cuh"
#include "../../llmc/gelu.cuh"
#include "../../llmc/matmul.cuh"

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_grad_d(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

// y (N, OC) += bias, then (gelu) pre = y, y = GELU(y)
__global__ void bias_gelu_v1(floatX* y, floatX* pre, const floatX* bias, int N, int OC, int gelu) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * OC) { return; }
    float v = to_f(y[i]) + to_f(bias[i % OC]);
    if (gelu) { pre[i] = to_X(v); v = gelu_f(v); }
    y[i] = to_X(v);
}

// d (n) *= GELU'(pre)
__global__ void dgelu_v1(floatX* d, const floatX* pre, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float x = to_f(pre[i]), u = GELU_SCALE * (x + 0.044715f * x * x * x), t = tanhf(u);
    float g = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    d[i] = to_X(to_f(d[i]) * g);
}

// db (OC) += column sums of dy (N, OC): one thread per column, rows in order
__global__ void bias_grad_v1(floatX* db, const floatX* dy, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) { return; }
    float s = 0.0f;
    for (int n = 0; n < N; n++) { s += to_f(dy[(size_t)n * OC + o]); }
    db[o] = to_X(to_f(db[o]) + s);
}

static void run(int N, int C, int OC) {
    printf("-- N %d, C %d, OC %d (%s)\n", N, C, OC, PRECISION_NAME);
    size_t ni = (size_t)N * C, no = (size_t)N * OC;
    float *x = host_random(ni, 1.0f), *w = host_random((size_t)OC * C, 0.3f), *b = host_random(OC, 0.5f);
    float *dy = host_random(no, 1.0f);
    floatX *d_x = to_device_x(x, ni), *d_w = to_device_x(w, (size_t)OC * C), *d_b = to_device_x(b, OC),
           *d_dy = to_device_x(dy, no);
    float *pre = (float*)malloc_check(no * 4), *act = (float*)malloc_check(no * 4), *dx = (float*)malloc_check(ni * 4),
          *db = (float*)calloc_check(OC, 4);
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < OC; o++) {
            double s = b[o];
            for (int c = 0; c < C; c++) { s += (double)x[(size_t)n * C + c] * w[(size_t)o * C + c]; }
            pre[(size_t)n * OC + o] = (float)s;
            act[(size_t)n * OC + o] = (float)gelu_d(s);
            db[o] += dy[(size_t)n * OC + o];
        }
    }
    // dx = (dy W) * GELU'(x) with x standing in for a pre-activation of shape (N, C)
    for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) {
            double s = 0.0;
            for (int o = 0; o < OC; o++) { s += (double)dy[(size_t)n * OC + o] * w[(size_t)o * C + c]; }
            dx[(size_t)n * C + c] = (float)(s * gelu_grad_d(x[(size_t)n * C + c]));
        }
    }
    floatX *d_y, *d_pre, *d_dx, *d_db;
    float* d_partial;
    cudaCheck(cudaMalloc((void**)&d_y, no * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_pre, no * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_dx, ni * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_db, OC * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_partial, colsum_partial_floats(N, OC) * 4));
    double flops = 2.0 * N * C * OC;
    for (int version = 1; version <= 2; version++) {
        char what[96];
        auto fwd = [&]() {
            if (version == 1) {
                matmul_lt(d_y, d_w, d_x, OC, N, C, 1, 0, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
                bias_gelu_v1<<<ceil_div_u(no, 256), 256>>>(d_y, d_pre, d_b, N, OC, 1);
            } else {
                matmul_forward_gelu(d_y, d_pre, d_x, d_w, d_b, N, C, OC);
            }
        };
        fwd();
        float *g_y = to_host_x(d_y, no), *g_pre = to_host_x(d_pre, no);
        report_v(version, "matmul + bias + GELU: out", g_y, act, no);
        report_v(version, "matmul + bias + GELU: pre-activation", g_pre, pre, no);
        snprintf(what, sizeof(what), "v%d forward (bias, GELU)", version);
        time_it(what, fwd, (double)(ni + (size_t)OC * C + 2 * no) * sizeof(floatX), flops);
        auto bwd = [&]() {
            if (version == 1) {
                matmul_lt(d_dx, d_w, d_dy, C, N, OC, 0, 0, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL);
                dgelu_v1<<<ceil_div_u(ni, 256), 256>>>(d_dx, d_x, ni);
            } else {
                matmul_lt(d_dx, d_w, d_dy, C, N, OC, 0, 0, 0.0f, CUBLASLT_EPILOGUE_DGELU, NULL, d_x);
            }
        };
        bwd();
        float* g_dx = to_host_x(d_dx, ni);
        report_v(version, "backward dinp * GELU'(pre)", g_dx, dx, ni);
        snprintf(what, sizeof(what), "v%d backward dinp (dGELU)", version);
        time_it(what, bwd, (double)(2 * ni + (size_t)OC * C + no) * sizeof(floatX), flops);
        cudaCheck(cudaMemset(d_db, 0, OC * sizeof(floatX)));
        if (version == 1) {
            bias_grad_v1<<<ceil_div_u(OC, 128), 128>>>(d_db, d_dy, N, OC);
        } else {
            bias_backward(d_db, d_partial, d_dy, N, OC);
        }
        float* g_db = to_host_x(d_db, OC);
        report_v(version, "bias gradient (column sums)", g_db, db, OC);
        if (version == 2) { // the same bits under every schedule (52_dev_cuda.sh compares the lines)
            snprintf(what, sizeof(what), "bias gradient N %d OC %d", N, OC);
            print_bits(what, d_db, OC);
        }
        free(g_y); free(g_pre); free(g_dx); free(g_db);
    }
    free(x); free(w); free(b); free(dy); free(pre); free(act); free(dx); free(db);
    cudaFree(d_x); cudaFree(d_w); cudaFree(d_b); cudaFree(d_dy); cudaFree(d_y); cudaFree(d_pre); cudaFree(d_dx);
    cudaFree(d_db); cudaFree(d_partial);
}

int main(int argc, char** argv) {
    rng_seed(&dev_rng, 9);
    matmul_init();
    if (argc == 4) {
        run(atoi(argv[1]), atoi(argv[2]), atoi(argv[3]));
    } else {
        run(40, 32, 96);
        run(300, 16, 40); // column-sum chunks of 8 rows
        run(2000, 8, 520); // 5 strips of 128 columns (FP32), a wave of chunks of 9-10 rows, summed by the second launch
    }
    long built = matmul_ctx.plan_misses;
    matmul_free();
    printf("matmul plans built: %ld (cached per shape and epilogue)\n", built);
    return finish("dev/cuda/matmul.cu");
}
