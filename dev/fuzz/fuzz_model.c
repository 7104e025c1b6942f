// libFuzzer harness for the model file reader, gpt2_load_model (llmc/gpt2_model.h): the
// input is a whole model file, version 3 (fp32) or 5 (bf16). A file the reader accepts must
// describe a config whose parameter count fits in memory arithmetic without wrapping, and
// its buffer must hold every tensor (ASan checks the touches below); written back with
// gpt2_write_model in the same precision and read again it must give the same config and
// the same parameters. A file it refuses must get an error naming the file.
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/gpt2_model.h"

typedef struct {
    const char* path;
    GPT2Config config;
    float* params;
} LoadCall;

static void load_body(void* ctx) {
    LoadCall* c = (LoadCall*)ctx;
    c->params = gpt2_load_model(c->path, &c->config);
}

// The parameter count in exact 128-bit arithmetic, independent of gpt2_parameter_sizes.
static unsigned __int128 exact_parameter_count(const GPT2Config* c) {
    unsigned __int128 Vp = c->padded_vocab_size, C = c->channels, L = c->num_layers, T = c->max_seq_len;
    return Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

static int same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b)); }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[4096], again[4096];
    fuzz_write_file(path, sizeof(path), "model.bin", data, size);
    LoadCall call = {path, {0}, NULL};
    if (fuzz_call(load_body, &call)) {
        fuzz_require_names(path);
        fuzz_end("gpt2_load_model");
        return 0;
    }
    size_t n = gpt2_num_parameters(&call.config);
    FUZZ_CHECK(exact_parameter_count(&call.config) == n);
    int version = fuzz_int_at(data, size, 4);
    FUZZ_CHECK(size == 1024 + n * (version == MODEL_VERSION_FP32 ? 4 : 2));
    ParameterTensors t;
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_point_parameters(&t, &call.config, call.params);
    gpt2_parameter_sizes(&call.config, sizes);
    float* const* first = &t.wte;
    volatile float sink = 0.0f;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { sink += first[i][0] + first[i][sizes[i] - 1]; }
    (void)sink;

    // round trip through the writer
    fuzz_path(again, sizeof(again), "again.bin");
    gpt2_write_model(again, &call.config, call.params, version);
    LoadCall call2 = {again, {0}, NULL};
    FUZZ_CHECK(fuzz_call(load_body, &call2) == 0);
    FUZZ_CHECK(memcmp(&call.config, &call2.config, sizeof(GPT2Config)) == 0);
    for (size_t i = 0; i < n; i++) { FUZZ_CHECK(same_bits(call.params[i], call2.params[i])); }
    free(call.params);
    free(call2.params);
    fuzz_end("gpt2_load_model");
    return 0;
}
