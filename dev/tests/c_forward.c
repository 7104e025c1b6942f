// c_forward: the CPU trainer's forward pass on given tokens, logits written out, for tests that
// compare it with other implementations (dev/tests/60_ecosystem.sh: Hugging Face transformers).
//   c_forward MODEL.bin TOKENS.i32 B T OUT.f32
// TOKENS.i32 holds B*T int32 token ids; OUT.f32 gets the (B, T, V) fp32 logits, padded columns dropped.
#define TESTING
#include "../../train_gpt2.c"

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    if (argc != 6) { fail("usage: %s MODEL.bin TOKENS.i32 B T OUT.f32", argv[0]); }
    int B = atoi(argv[3]), T = atoi(argv[4]);
    GPT2Config config;
    float* params = gpt2_load_model(argv[1], &config);
    if (B < 1 || T < 1 || T > config.max_seq_len) { fail("B %d T %d: out of range", B, T); }
    int* tokens = (int*)malloc_check((size_t)B * T * sizeof(int));
    FILE* f = fopen_check(argv[2], "rb");
    if (fread(tokens, sizeof(int), (size_t)B * T, f) != (size_t)B * T) { fail("%s: fewer than B*T tokens", argv[2]); }
    fclose(f);
    GPT2 model;
    gpt2_build(&model, &config, params, B, T, 1, 0);
    gpt2_forward(&model, tokens, NULL, B, T);
    FILE* out = fopen_check(argv[5], "wb");
    for (size_t i = 0; i < (size_t)B * T; i++) {
        fwrite(model.acts.logits + i * config.padded_vocab_size, sizeof(float), config.vocab_size, out);
    }
    fclose(out);
    gpt2_free(&model);
    free(tokens);
    MPI_Finalize();
    return 0;
}
