// Muon on the GPU (llmc/optimizer.h's settings, the CPU's llmc/cpu_optimizer.h step for step), one
// block matrix at a time on stream 0: the momentum and Nesterov blend in fp32 (muon_blend_kernel),
// the norm by the deterministic sum of squares of llmc/adamw.cuh, the quintic Newton-Schulz through
// cuBLASLt (floatX operands, fp32 accumulation: bf16 in the BF16 build, as torch.optim.Muon runs it,
// fp32 in the FP32 build), and the matrix step into the fp32 master weights (where kept) and the
// floatX parameters with stochastic rounding (muon_step_kernel). No host round trip.
//
// Orientation without a transpose: a matrix stored row-major rows x cols is, to cuBLASLt's
// column-major view, its transpose. Tall (rows > cols): that view is X (m = cols x n = rows), the
// wide orientation itself; S = X X^T, Y = P X. Wide: the view is X^T (n x m); S = (X^T)^T X^T and
// Y^T = X^T P (P symmetric). Either way the result lies in the matrix's own layout.
#ifndef LLMC_MUON_CUH
#define LLMC_MUON_CUH

#include "cuda_common.cuh"
#include "matmul.cuh"
#include "adamw.cuh"
#include "optimizer.h"

// The work space, for matrices of up to `elements` entries whose smaller side is at most `side`:
// U (fp32), the iterate X and the next Y (floatX), S and P (floatX, side x side), the norm's
// scratch (NORM_BLOCKS + 1 floats).
typedef struct {
    float* u;
    floatX *x, *y, *s, *p;
    float* scratch;
} DeviceMuon;

static void device_muon_alloc(DeviceMuon* w, size_t elements, size_t side) {
    cudaCheck(cudaMalloc((void**)&w->u, elements * sizeof(float)));
    cudaCheck(cudaMalloc((void**)&w->x, elements * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&w->y, elements * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&w->s, side * side * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&w->p, side * side * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&w->scratch, (NORM_BLOCKS + 1) * sizeof(float)));
}

static void device_muon_free(DeviceMuon* w) {
    void* bufs[] = {w->u, w->x, w->y, w->s, w->p, w->scratch};
    for (int i = 0; i < 6; i++) { cudaCheck(cudaFree(bufs[i])); }
}

// In: grads (n, G: floatX or fp32) times grad_scale. In/out: mom (n, fp32). Out: u (n, fp32) =
// (1 - mu) g + mu M after M = mu M + (1 - mu) g.
template <class G>
__global__ void muon_blend_kernel(float* __restrict__ u, float* __restrict__ mom, const G* __restrict__ grads,
                                  size_t n, float grad_scale, float mu) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = (float)grads[i] * grad_scale;
        float m = mu * mom[i] + (1.0f - mu) * g;
        mom[i] = m;
        u[i] = (1.0f - mu) * g + mu * m;
    }
}

// x (n, floatX) = u / max(sqrt(sq[0]), eps): the iterate's start, its norm from the device.
__global__ void muon_scale_kernel(floatX* __restrict__ x, const float* __restrict__ u, const float* __restrict__ sq,
                                  size_t n, float eps) {
    float norm = sqrtf(sq[0]);
    float inv = 1.0f / (norm > eps ? norm : eps);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        x[i] = (floatX)(u[i] * inv);
    }
}

// p (n) = b s + c p: the polynomial in S, once S S is in p.
__global__ void muon_poly_kernel(floatX* __restrict__ p, const floatX* __restrict__ s, size_t n, float b, float c) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        p[i] = (floatX)(b * (float)s[i] + c * (float)p[i]);
    }
}

// The matrix step: w = w decay - step o on the fp32 master (else the floatX parameter read as
// float), params rewritten with stochastic rounding (bits from element index + index and seed).
__global__ void muon_step_kernel(floatX* __restrict__ params, float* __restrict__ master, const floatX* __restrict__ o,
                                 size_t n, float decay, float step, uint32_t seed, size_t index) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float w = master ? master[i] : (float)params[i];
        w = w * decay - step * (float)o[i];
        if (master) { master[i] = w; }
        params[i] = round_stochastic(w, hash_u32((uint32_t)(index + i), seed));
    }
}

static unsigned int muon_blocks(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned int)(b < 4096 ? (b < 1 ? 1 : b) : 4096);
}

// w->x (rows x cols, the matrix's layout) = the Newton-Schulz orthogonalization of w->u.
static void device_muon_orthogonalize(DeviceMuon* w, int rows, int cols, const MuonConfig* h) {
    size_t n = (size_t)rows * cols;
    int tall = rows > cols, m = tall ? cols : rows, big = tall ? rows : cols;
    sum_of_squares(w->scratch + NORM_BLOCKS, w->u, n, w->scratch);
    muon_scale_kernel<<<muon_blocks(n), 256>>>(w->x, w->u, w->scratch + NORM_BLOCKS, n, h->eps);
    cudaLaunchCheck();
    for (int step = 0; step < h->ns_steps; step++) {
        if (tall) { matmul_lt(w->s, w->x, w->x, m, m, big, 0, 1, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL); }
        else { matmul_lt(w->s, w->x, w->x, m, m, big, 1, 0, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL); }
        matmul_lt(w->p, w->s, w->s, m, m, m, 0, 0, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL); // S S
        muon_poly_kernel<<<muon_blocks((size_t)m * m), 256>>>(w->p, w->s, (size_t)m * m, h->b, h->c);
        cudaLaunchCheck();
        cudaCheck(cudaMemcpyAsync(w->y, w->x, n * sizeof(floatX), cudaMemcpyDeviceToDevice, 0));
        // Y = P X + a X (tall), Y^T = X^T P + a X^T (wide)
        if (tall) { matmul_lt(w->y, w->p, w->x, m, big, m, 0, 0, h->a, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL); }
        else { matmul_lt(w->y, w->x, w->p, big, m, m, 0, 0, h->a, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL); }
        floatX* t = w->x;
        w->x = w->y;
        w->y = t;
    }
}

// One Muon matrix (rows x cols): params (floatX) and master (fp32 or NULL) stepped with its
// gradient grads (times grad_scale) and momentum mom; seed and index draw the rounding bits.
template <class G>
static void device_muon_update(DeviceMuon* w, floatX* params, float* master, const G* grads, float* mom, int rows,
                               int cols, float grad_scale, const MuonConfig* h, uint32_t seed, size_t index) {
    size_t n = (size_t)rows * cols;
    muon_blend_kernel<G><<<muon_blocks(n), 256>>>(w->u, mom, grads, n, grad_scale, h->momentum);
    cudaLaunchCheck();
    device_muon_orthogonalize(w, rows, cols, h);
    float decay = 1.0f - h->lr * h->weight_decay, step = h->lr * muon_lr_ratio(rows, cols);
    muon_step_kernel<<<muon_blocks(n), 256>>>(params, master, w->x, n, decay, step, seed, index);
    cudaLaunchCheck();
}

#endif
