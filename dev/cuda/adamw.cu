// AdamW, standalone: every tensor of a step updated by one launch per tensor (version 1,
// llmc/adamw.cuh adamw_update) or by one launch for all of them (version 2, the multi-tensor
// AdamWMulti the trainer uses), checked against a CPU reference, against each other bit for bit
// (same stochastic rounding), and, on a real GPU, timed. Segments start at odd offsets too (as
// ZeRO slices do), so the element-by-element path runs beside the 128-bit one.
//   dev/cuda_emu/emucc -O1 -o adamw dev/cuda/adamw.cu && ./adamw [elements-per-tensor]
//   nvcc -O3 -arch=sm_90 -o adamw dev/cuda/adamw.cu && ./adamw 10000000
#include "common.cuh"
#include "../../llmc/adamw.cuh"

#define TENSORS 6

static void run(size_t per) {
    printf("-- %d tensors of ~%zu elements (%s, fp32 master weights)\n", TENSORS, per, PRECISION_NAME);
    size_t sizes[TENSORS], offs[TENSORS + 1], n = 0;
    for (int i = 0; i < TENSORS; i++) { sizes[i] = per + (size_t)(i * 37 % 11); offs[i] = n; n += sizes[i]; }
    offs[TENSORS] = n;
    float *p = host_random(n, 1.0f), *g = host_random(n, 0.3f), *m = host_random(n, 0.01f), *v = host_random(n, 0.01f);
    for (size_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); }
    floatX* d_g = to_device_x(g, n); // rounds g on the host as well
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    float bias1 = 1.0f - powf(b1, 3.0f), bias2 = 1.0f - powf(b2, 3.0f);
    uint32_t seed = 1234u;
    // CPU reference of the master weights and moments
    float *wm = (float*)malloc_check(n * 4), *wv = (float*)malloc_check(n * 4), *wp = (float*)malloc_check(n * 4);
    for (int t = 0; t < TENSORS; t++) {
        float decay = t % 2 == 0 ? wd : 0.0f;
        for (size_t i = offs[t]; i < offs[t + 1]; i++) {
            float gi = g[i] * scale;
            wm[i] = b1 * m[i] + (1.0f - b1) * gi;
            wv[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
            wp[i] = p[i] - lr * ((wm[i] / bias1) / (sqrtf(wv[i] / bias2) + eps) + decay * p[i]);
        }
    }
    float* results[2][4];
    AdamWMulti table;
    adamw_multi_init(&table, TENSORS);
    for (int t = 0; t < TENSORS; t++) { adamw_multi_add(&table, offs[t], offs[t], sizes[t], 0, t, t % 2 == 0); }
    adamw_multi_upload(&table);
    for (int version = 1; version <= 2; version++) {
        float *d_m = to_device_f(m, n), *d_v = to_device_f(v, n), *d_master = NULL;
        float* pc = (float*)malloc_check(n * 4);
        memcpy(pc, p, n * 4);
        floatX* d_p = to_device_x(pc, n);
        if (sizeof(floatX) != sizeof(float)) { d_master = to_device_f(p, n); }
        auto launch = [&]() {
            if (version == 1) {
                for (int t = 0; t < TENSORS; t++) {
                    adamw_update(d_p + offs[t], d_master ? d_master + offs[t] : NULL, d_g + offs[t], d_m + offs[t],
                                 d_v + offs[t], sizes[t], lr, b1, b2, eps, t % 2 == 0 ? wd : 0.0f, scale, bias1, bias2,
                                 seed + (uint32_t)t);
                }
            } else {
                adamw_multi_update(&table, d_p, d_master, d_g, d_m, d_v, lr, b1, b2, eps, wd, scale, bias1, bias2, seed);
            }
        };
        launch();
        results[version - 1][0] = to_host_x(d_p, n);
        results[version - 1][1] = to_host_f(d_m, n);
        results[version - 1][2] = to_host_f(d_v, n);
        results[version - 1][3] = d_master ? to_host_f(d_master, n) : to_host_x(d_p, n);
        char what[96];
        report_v(version, "adamw m", results[version - 1][1], wm, n);
        report_v(version, "adamw v", results[version - 1][2], wv, n);
        report_v(version, "adamw master weights", results[version - 1][3], wp, n);
        report_v(version, "adamw params (floatX)", results[version - 1][0], wp, n);
        snprintf(what, sizeof(what), "v%d adamw, %d tensors", version, TENSORS);
        double bytes = (double)n * (2 * sizeof(floatX) + 16 + (d_master ? 8 : 0));
        time_it(what, launch, bytes);
        free(pc);
        cudaFree(d_m); cudaFree(d_v); cudaFree(d_p);
        if (d_master) { cudaFree(d_master); }
    }
    size_t differ = 0;
    for (int k = 0; k < 4; k++) { differ += memcmp(results[0][k], results[1][k], n * 4) != 0; }
    printf("%-4s multi-tensor == per-tensor, bit for bit (4 arrays differing: %zu)\n", differ ? "FAIL" : "ok", differ);
    if (differ) { dev_failures++; }
    for (int v2 = 0; v2 < 2; v2++) { for (int k = 0; k < 4; k++) { free(results[v2][k]); } }
    adamw_multi_free(&table);
    free(p); free(g); free(m); free(v); free(wm); free(wv); free(wp);
    cudaFree(d_g);
}

int main(int argc, char** argv) {
    rng_seed(&dev_rng, 3);
    run(argc == 2 ? (size_t)atoll(argv[1]) : 5000);
    return finish("dev/cuda/adamw.cu");
}
