// The token + position embedding, standalone: forward and the deterministic backward, in two
// versions, checked against a CPU reference and, on a real GPU, timed.
//   version 1: naive: one thread per element forward; backward one thread per (token, channel)
//              scanning every position (no buckets);
//   version 2: the trainer's (llmc/encoder.cuh): 128-bit packs, the backward from token buckets
//              built on the host and copied asynchronously.
//   dev/cuda_emu/emucc -O1 -DENABLE_FP32 -o enc dev/cuda/encoder.cu && ./enc [B T C V]
//   nvcc -O3 -arch=sm_90 -o enc dev/cuda/encoder.cu && ./enc 64 1024 768 50257
#include "common.cuh"
#include "../../llmc/encoder.cuh"

__global__ void encoder_forward_v1(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int BT, int T,
                                   int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C) { return; }
    int bt = (int)(i / C), c = (int)(i % C);
    out[i] = to_X(to_f(wte[(size_t)tokens[bt] * C + c]) + to_f(wpe[(size_t)(bt % T) * C + c]));
}

// dwte[v][c] += sum over positions with token v, in position order; dwpe likewise per t.
__global__ void encoder_backward_v1(floatX* dwte, floatX* dwpe, const floatX* dout, const int* tokens, int BT, int T,
                                    int C, int V) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)V * C) {
        int v = (int)(i / C), c = (int)(i % C);
        float s = 0.0f;
        for (int p = 0; p < BT; p++) { if (tokens[p] == v) { s += to_f(dout[(size_t)p * C + c]); } }
        dwte[i] = to_X(to_f(dwte[i]) + s);
    }
    if (i < (size_t)T * C) {
        float s = 0.0f;
        for (int b = 0; b < BT / T; b++) { s += to_f(dout[(size_t)b * T * C + i]); }
        dwpe[i] = to_X(to_f(dwpe[i]) + s);
    }
}

// The buckets just prepared (the host slot last filled): no bucket has more positions than the
// one before it, equal ones by ascending token, each bucket's positions ascending and of its token.
static void check_bucket_order(const EncoderBuckets* e, int BT) {
    const int *order = e->host[e->slot ^ 1], *start = order + BT, *token = start + BT + 1;
    int bad = 0;
    for (int k = 0; k < e->buckets; k++) {
        int size = start[k + 1] - start[k];
        if (k > 0) {
            int prev = start[k] - start[k - 1];
            bad += size > prev || (size == prev && token[k] <= token[k - 1]);
        }
        for (int j = start[k] + 1; j < start[k + 1]; j++) { bad += order[j] <= order[j - 1]; }
    }
    printf("%-4s v2 encoder buckets: %d, larger first, positions ascending (%d out of order)\n", bad ? "FAIL" : "ok",
           e->buckets, bad);
    dev_failures += bad != 0;
}

static void run(int B, int T, int C, int V) {
    printf("-- B %d, T %d, C %d, V %d (%s)\n", B, T, C, V, PRECISION_NAME);
    int BT = B * T;
    int* tokens = (int*)malloc_check(BT * sizeof(int));
    for (int i = 0; i < BT; i++) { tokens[i] = i % 3 == 0 ? V - 1 : (int)rng_below(&dev_rng, V); } // repeats
    float *wte = host_random((size_t)V * C, 1.0f), *wpe = host_random((size_t)T * C, 1.0f);
    float* dout = host_random((size_t)BT * C, 1.0f);
    floatX *d_wte = to_device_x(wte, (size_t)V * C), *d_wpe = to_device_x(wpe, (size_t)T * C),
           *d_dout = to_device_x(dout, (size_t)BT * C);
    float *out = (float*)malloc_check((size_t)BT * C * 4), *dwte = (float*)calloc_check((size_t)V * C, 4),
          *dwpe = (float*)calloc_check((size_t)T * C, 4);
    for (int p = 0; p < BT; p++) {
        for (int c = 0; c < C; c++) {
            out[(size_t)p * C + c] = wte[(size_t)tokens[p] * C + c] + wpe[(size_t)(p % T) * C + c];
            dwte[(size_t)tokens[p] * C + c] += dout[(size_t)p * C + c];
            dwpe[(size_t)(p % T) * C + c] += dout[(size_t)p * C + c];
        }
    }
    int* d_tokens;
    cudaCheck(cudaMalloc((void**)&d_tokens, BT * sizeof(int)));
    cudaCheck(cudaMemcpy(d_tokens, tokens, BT * sizeof(int), cudaMemcpyHostToDevice));
    floatX *d_out, *d_dwte, *d_dwpe;
    cudaCheck(cudaMalloc((void**)&d_out, (size_t)BT * C * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_dwte, (size_t)V * C * sizeof(floatX)));
    cudaCheck(cudaMalloc((void**)&d_dwpe, (size_t)T * C * sizeof(floatX)));
    EncoderBuckets buckets;
    encoder_buckets_init(&buckets, BT, V);
    for (int version = 1; version <= 2; version++) {
        char what[96];
        auto fwd = [&]() {
            if (version == 1) {
                encoder_forward_v1<<<ceil_div_u((size_t)BT * C, 256), 256>>>(d_out, d_tokens, d_wte, d_wpe, BT, T, C);
            } else {
                encoder_forward(d_out, d_tokens, d_wte, d_wpe, B, T, C);
            }
        };
        fwd();
        float* g = to_host_x(d_out, (size_t)BT * C);
        report_v(version, "encoder_forward", g, out, (size_t)BT * C);
        time_it(what, fwd, 3.0 * BT * C * sizeof(floatX));
        cudaCheck(cudaMemset(d_dwte, 0, (size_t)V * C * sizeof(floatX)));
        cudaCheck(cudaMemset(d_dwpe, 0, (size_t)T * C * sizeof(floatX)));
        if (version == 1) {
            size_t threads = (size_t)(V > T ? V : T) * C;
            encoder_backward_v1<<<ceil_div_u(threads, 256), 256>>>(d_dwte, d_dwpe, d_dout, d_tokens, BT, T, C, V);
        } else {
            encoder_buckets_prepare(&buckets, tokens, BT);
            check_bucket_order(&buckets, BT);
            encoder_backward(d_dwte, d_dwpe, &buckets, d_dout, NULL, B, T, C);
        }
        float *gw = to_host_x(d_dwte, (size_t)V * C), *gp = to_host_x(d_dwpe, (size_t)T * C);
        report_v(version, "encoder_backward dwte", gw, dwte, (size_t)V * C);
        report_v(version, "encoder_backward dwpe", gp, dwpe, (size_t)T * C);
        if (version == 2) { // the backward alone (buckets prepared once), accumulating: timing only
            snprintf(what, sizeof(what), "v2 encoder_backward (kernels)");
            time_it(what, [&]() { encoder_backward(d_dwte, d_dwpe, &buckets, d_dout, NULL, B, T, C); },
                    4.0 * BT * C * sizeof(floatX));
        }
        free(g); free(gw); free(gp);
    }
    encoder_buckets_free(&buckets);
    free(tokens); free(wte); free(wpe); free(dout); free(out); free(dwte); free(dwpe);
    cudaFree(d_wte); cudaFree(d_wpe); cudaFree(d_dout); cudaFree(d_tokens); cudaFree(d_out); cudaFree(d_dwte);
    cudaFree(d_dwpe);
}

int main(int argc, char** argv) {
    rng_seed(&dev_rng, 5);
    if (argc == 5) {
        run(atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
    } else {
        run(3, 17, 64, 101); // whole packs
        run(2, 9, 36, 50);   // C not a multiple of the bf16 pack
        run(2, 24, 1600, 9); // GPT-2 XL width: two blocks of packs per bucket (FP32), buckets of every size
    }
    return finish("dev/cuda/encoder.cu");
}
