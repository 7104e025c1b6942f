// The fused classifier, standalone: softmax, cross-entropy loss and dlogits written over the
// logits, in two versions, checked against a CPU reference and, on a real GPU, timed.
//   version 1: naive, one thread per row (three passes, scalar accesses);
//   version 2: the trainer's (llmc/classifier.cuh): a block per row, 128-bit accesses, the row read
//              once from HBM for its statistics and once more (from L2) for the gradient.
//   dev/cuda_emu/emucc -O1 -DENABLE_FP32 -o cls dev/cuda/classifier.cu && ./cls [N V Vp]
//   nvcc -O3 -arch=sm_90 -o cls dev/cuda/classifier.cu && ./cls 65536 50257 50304
#include "common.cuh"
#include "../../llmc/classifier.cuh"

static void cpu_classifier(float* dlogits, float* losses, const float* logits, const int* targets, float dloss, int N,
                           int V, int Vp) {
    for (int n = 0; n < N; n++) {
        const float* x = logits + (size_t)n * Vp;
        double m = -INFINITY, s = 0.0;
        for (int i = 0; i < V; i++) { m = x[i] > m ? x[i] : m; }
        for (int i = 0; i < V; i++) { s += exp(x[i] - m); }
        losses[n] = (float)(log(s) + m - x[targets[n]]);
        for (int i = 0; i < Vp; i++) {
            double p = i < V ? exp(x[i] - m) / s : 0.0;
            dlogits[(size_t)n * Vp + i] = i < V ? (float)((p - (i == targets[n])) * dloss) : 0.0f;
        }
    }
}

__global__ void classifier_v1(floatX* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    floatX* x = logits + (size_t)n * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = 0; i < V; i++) { m = fmaxf(m, to_f(x[i])); }
    for (int i = 0; i < V; i++) { s += expf(to_f(x[i]) - m); }
    losses[n] = logf(s) + m - to_f(x[targets[n]]);
    int t = targets[n];
    for (int i = 0; i < Vp; i++) {
        float d = i < V ? (expf(to_f(x[i]) - m) / s - (i == t ? 1.0f : 0.0f)) * dloss : 0.0f;
        x[i] = to_X(d);
    }
}

static void run(int N, int V, int Vp) {
    printf("-- N %d, V %d, Vp %d (%s)\n", N, V, Vp, PRECISION_NAME);
    size_t n = (size_t)N * Vp;
    float* logits = host_random(n, 4.0f);
    int* targets = (int*)malloc_check(N * sizeof(int));
    for (int i = 0; i < N; i++) { targets[i] = (int)rng_below(&dev_rng, V); }
    floatX* d_logits = to_device_x(logits, n); // rounds the host copy to floatX too
    float *want = (float*)malloc_check(n * 4), *losses = (float*)malloc_check(N * 4), *d_losses;
    float dloss = 1.0f / N;
    cpu_classifier(want, losses, logits, targets, dloss, N, V, Vp);
    int* d_targets;
    cudaCheck(cudaMalloc((void**)&d_targets, N * sizeof(int)));
    cudaCheck(cudaMemcpy(d_targets, targets, N * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMalloc((void**)&d_losses, N * 4));
    for (int version = 1; version <= 2; version++) {
        floatX* d_x = to_device_x(logits, n);
        auto launch = [&]() {
            if (version == 1) {
                classifier_v1<<<ceil_div_u(N, 64), 64>>>(d_x, d_losses, d_targets, dloss, N, V, Vp);
            } else {
                fused_classifier(d_x, d_losses, d_targets, dloss, 1, N, V, Vp);
            }
        };
        launch();
        float *g = to_host_x(d_x, n), *gl = to_host_f(d_losses, N);
        char what[96];
        report_v(version, "fused_classifier losses", gl, losses, N);
        report_v(version, "fused_classifier dlogits", g, want, n);
        snprintf(what, sizeof(what), "v%d fused classifier (dlogits in place)", version);
        time_it(what, launch, 2.0 * n * sizeof(floatX)); // reruns on dlogits: same traffic, for timing only
        free(g); free(gl);
        cudaFree(d_x);
    }
    free(logits); free(targets); free(want); free(losses);
    cudaFree(d_logits); cudaFree(d_targets); cudaFree(d_losses);
}

int main(int argc, char** argv) {
    rng_seed(&dev_rng, 11);
    if (argc == 4) {
        run(atoi(argv[1]), atoi(argv[2]), atoi(argv[3]));
    } else {
        run(13, 1000, 1024); // whole packs
        run(5, 257, 300);    // Vp not a multiple of the pack
        run(3, 50257, 50304); // GPT-2's: 6 whole packs per thread and more, a partial one, padding
        run(2, 8192, 8448);   // one whole pack per thread, then padding packs only
    }
    return finish("dev/cuda/classifier.cu");
}
