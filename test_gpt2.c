// test_gpt2cpu: checks the CPU trainer against the PyTorch reference (train_gpt2.py) on a small
// model: logits, loss and all 16 gradient tensors of one batch, then the losses of 10 AdamW
// steps. Exits non-zero on any mismatch.
//   test_gpt2cpu MODEL.bin STATE.bin LOSSES.txt DATA.bin [-p TENSOR] [-b MODEL_BF16.bin]
// -p adds an error of 10x the tolerance to one gradient tensor before comparing (the test of the test: it must
// then fail). -b also checks that a bf16 (v5) file of the same model loads as the fp32 values
// rounded to bf16.
#define TESTING
#include "train_gpt2.c"
#include "llmc/debug_state.h"

// Tolerances, from fp32 rounding across two summation orders (measured margins in docs/testing.md):
#define LOGITS_TOL 1e-5f       // max |C - PyTorch| over all logits
#define LOSS_TOL 1e-5f         // |C - PyTorch| of the batch loss
#define GRAD_REL_TOL 1e-5f     // max |C - PyTorch| of a gradient tensor / max |PyTorch| of it
#define STEP_LOSS_TOL 1e-5f    // |C - PyTorch| of each of the 10 training losses
#define TEST_STEPS 10

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

    DebugState ref;
    debug_state_read(&ref, state_path, &config);
    int B = ref.B, T = ref.T;
    size_t n = gpt2_num_parameters(&config);
    printf("model L %d C %d NH %d V %d | batch B %d T %d | %zu parameters\n", config.num_layers, config.channels,
           config.num_heads, config.vocab_size, B, T, n);

    if (bf16_path) {
        GPT2Config c16;
        float* p16 = gpt2_load_model(bf16_path, &c16);
        check_bf16_copy(p16, params, n);
        free(p16);
    }

    GPT2 model;
    gpt2_build(&model, &config, params, B, T, 1, 0);
    HostDP dp; // one rank, ZeRO 0: the update the trainer runs
    OuterConfig synchronous = {0};
    float* grad_tensors[NUM_PARAMETER_TENSORS];
    memcpy(grad_tensors, &model.grads, sizeof(grad_tensors));
    host_dp_init(&dp, &config, 1, 0, 0, 0, &synchronous, model.params_memory, model.grads_memory, grad_tensors, 0);

    // one batch: logits, loss, gradients
    float loss = gpt2_forward(&model, ref.x, ref.y, B, T);
    check_logits(model.acts.logits, config.padded_vocab_size, &ref, config.vocab_size, LOGITS_TOL);
    check_report("loss", fabsf(loss - ref.loss), LOSS_TOL);
    printf("     loss C %.6f PyTorch %.6f\n", loss, ref.loss);
    gpt2_zero_grads(&model);
    gpt2_backward(&model, B, T, 1.0f, NULL, NULL);
    check_gradients(model.grads_memory, &ref, &config, perturb, GRAD_REL_TOL);

    // training: the reference's hyperparameters (constant lr 1e-4, no weight decay, clip 1.0)
    float ref_losses[TEST_STEPS];
    read_reference_losses(losses_path, ref_losses, TEST_STEPS);
    DataLoader loader;
    dataloader_init(&loader, data_path, "data", B, T, 0, 1, 1, config.vocab_size, 0, 0);
    OptimizerConfig adamw = {.kind = OPT_ADAMW, .adamw = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f}};
    for (int step = 0; step < TEST_STEPS; step++) {
        dataloader_next(&loader);
        gpt2_zero_grads(&model);
        float step_loss = gpt2_forward(&model, loader.inputs, loader.targets, B, T);
        gpt2_backward(&model, B, T, 1.0f, NULL, NULL);
        host_dp_finish_gradients(&dp);
        float norm = host_dp_grad_norm(&dp);
        float scale = norm > 1.0f ? 1.0f / norm : 1.0f;
        host_dp_optimizer_step(&dp, &adamw, scale, step + 1);
        char what[64];
        snprintf(what, sizeof(what), "step %d loss", step + 1);
        check_report(what, fabsf(step_loss - ref_losses[step]), STEP_LOSS_TOL);
    }
    printf("%s: %d failures\n", check_failures ? "FAILED" : "passed", check_failures);
    dataloader_free(&loader);
    host_dp_free(&dp);
    gpt2_free(&model);
    debug_state_free(&ref);
    MPI_Finalize();
    return check_failures ? 1 : 0;
}
