// test_gpt2cpu: checks the CPU trainer against the PyTorch reference (train_gpt2.py) on a small
// model: logits, loss and all 16 gradient tensors of one batch, then the losses of 10 AdamW
// steps. Exits non-zero on any mismatch.
//   test_gpt2cpu MODEL.bin STATE.bin LOSSES.txt DATA.bin [-p TENSOR] [-b MODEL_BF16.bin]
// -p adds a small error to one gradient tensor before comparing (the test of the test: it must
// then fail). -b also checks that a bf16 (v5) file of the same model loads as the fp32 values
// rounded to bf16.
#define TESTING
#include "train_gpt2.c"

// Tolerances, from fp32 rounding across two summation orders (measured margins in README):
#define LOGITS_TOL 1e-5f       // max |C - PyTorch| over all logits
#define LOSS_TOL 1e-5f         // |C - PyTorch| of the batch loss
#define GRAD_REL_TOL 1e-5f     // max |C - PyTorch| of a gradient tensor / max |PyTorch| of it
#define STEP_LOSS_TOL 1e-5f    // |C - PyTorch| of each of the 10 training losses
#define TEST_STEPS 10

static int failures = 0;

static void report(const char* what, float err, float tol) {
    int ok = err <= tol;
    printf("%-4s %-22s error %.3e (tolerance %.0e)\n", ok ? "ok" : "FAIL", what, err, tol);
    if (!ok) { failures++; }
}

static float max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) { if (fabsf(x[i]) > m) { m = fabsf(x[i]); } }
    return m;
}

static float max_abs_diff(const float* a, const float* b, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) { m = d; } // NaN propagates as a failure
    }
    return m;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    if (argc < 5) { fail("usage: %s MODEL.bin STATE.bin LOSSES.txt DATA.bin [-p TENSOR] [-b MODEL_BF16.bin]", argv[0]); }
    const char *model_path = argv[1], *state_path = argv[2], *losses_path = argv[3], *data_path = argv[4];
    int perturb = -1;
    const char* bf16_path = NULL;
    for (int i = 5; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-p") == 0) { perturb = atoi(argv[i + 1]); }
        else if (strcmp(argv[i], "-b") == 0) { bf16_path = argv[i + 1]; }
        else { fail("unknown option %s", argv[i]); }
    }

    GPT2Config config;
    float* params = gpt2_load_model(model_path, &config);

    FILE* f = fopen_check(state_path, "rb");
    int header[256];
    fread_check(header, sizeof(int), 256, f, state_path, "state header");
    if (header[0] != 20240327 || header[1] != 2) { fail("%s: bad debug state magic/version %d %d", state_path, header[0], header[1]); }
    int B = header[2], T = header[3];
    size_t BT = (size_t)B * T, V = config.vocab_size, Vp = config.padded_vocab_size;
    int* x = (int*)malloc_check(BT * sizeof(int));
    int* y = (int*)malloc_check(BT * sizeof(int));
    float* ref_logits = (float*)malloc_check(BT * V * sizeof(float));
    float ref_loss;
    size_t n = gpt2_num_parameters(&config);
    float* ref_grads = (float*)malloc_check(n * sizeof(float));
    fread_check(x, sizeof(int), BT, f, state_path, "x");
    fread_check(y, sizeof(int), BT, f, state_path, "y");
    fread_check(ref_logits, sizeof(float), BT * V, f, state_path, "logits");
    fread_check(&ref_loss, sizeof(float), 1, f, state_path, "loss");
    fread_check(ref_grads, sizeof(float), n, f, state_path, "grads");
    fclose(f);
    printf("model L %d C %d NH %d V %d | batch B %d T %d | %zu parameters\n", config.num_layers, config.channels,
           config.num_heads, config.vocab_size, B, T, n);

    if (bf16_path) {
        GPT2Config c16;
        float* p16 = gpt2_load_model(bf16_path, &c16);
        size_t mismatches = 0;
        for (size_t i = 0; i < n; i++) { mismatches += p16[i] != bf16_to_float(float_to_bf16(params[i])); }
        report("bf16 file == rounded", (float)mismatches, 0.0f);
        free(p16);
    }

    GPT2 model;
    gpt2_build(&model, &config, params, B, T, 1, 0);
    DataParallel dp;
    dp_init(&dp, &model, 0, 1, 0);

    // one batch: logits, loss, gradients
    float loss = gpt2_forward(&model, x, y, B, T);
    float logit_err = 0.0f;
    for (size_t bt = 0; bt < BT; bt++) {
        float e = max_abs_diff(model.acts.logits + bt * Vp, ref_logits + bt * V, V);
        if (!(e <= logit_err)) { logit_err = e; }
    }
    report("logits", logit_err, LOGITS_TOL);
    report("loss", fabsf(loss - ref_loss), LOSS_TOL);
    printf("     loss C %.6f PyTorch %.6f\n", loss, ref_loss);
    gpt2_zero_grads(&model);
    gpt2_backward(&model, B, T, 1.0f, NULL, NULL);
    size_t sizes[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_parameter_sizes(&config, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        float* g = model.grads_memory + off;
        if (i == perturb) { g[sizes[i] / 2] += 1e-2f * max_abs(ref_grads + off, sizes[i]); }
        float scale = max_abs(ref_grads + off, sizes[i]);
        char what[64];
        snprintf(what, sizeof(what), "grad %s", parameter_names[i]);
        report(what, max_abs_diff(g, ref_grads + off, sizes[i]) / (scale > 0.0f ? scale : 1.0f), GRAD_REL_TOL);
        off += sizes[i];
    }

    // training: the reference's hyperparameters (constant lr 1e-4, no weight decay, clip 1.0)
    FILE* lf = fopen_check(losses_path, "r");
    float ref_losses[TEST_STEPS];
    for (int i = 0; i < TEST_STEPS; i++) {
        if (fscanf(lf, "%f", &ref_losses[i]) != 1) { fail("%s: fewer than %d losses", losses_path, TEST_STEPS); }
    }
    fclose(lf);
    DataLoader loader;
    dataloader_init(&loader, data_path, "data", B, T, 0, 1, 1, config.vocab_size, 0, 0);
    AdamWConfig adamw = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f};
    for (int step = 0; step < TEST_STEPS; step++) {
        dataloader_next(&loader);
        gpt2_zero_grads(&model);
        float step_loss = gpt2_forward(&model, loader.inputs, loader.targets, B, T);
        gpt2_backward(&model, B, T, 1.0f, NULL, NULL);
        dp_finish_gradients(&dp, &model);
        float norm = dp_grad_norm(&dp, &model);
        float scale = norm > 1.0f ? 1.0f / norm : 1.0f;
        dp_optimizer_step(&dp, &model, &adamw, scale, step + 1);
        char what[64];
        snprintf(what, sizeof(what), "step %d loss", step + 1);
        report(what, fabsf(step_loss - ref_losses[step]), STEP_LOSS_TOL);
    }
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    dataloader_free(&loader);
    dp_free(&dp);
    gpt2_free(&model);
    free(x); free(y); free(ref_logits); free(ref_grads);
    MPI_Finalize();
    return failures ? 1 : 0;
}
