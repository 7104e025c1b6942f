// libFuzzer harness for the flag parser (llmc/args.h): args_parse, args_validate and
// args_grad_accum, then the model descriptor (-e dN) through gpt2_config_from_descriptor, the
// path every command line takes before any file is read. Input: one byte (bit 0: GPU
// trainer; the rest: ranks = 1 + x/2 % 8), then the arguments separated by NUL bytes (-h and
// --help, which print and exit 0, are skipped). A command line that is accepted must give
// grad_accum >= 1 with -d == grad_accum * B * T * ranks exactly, and a descriptor's parameter
// count must not wrap; one that is refused must get a one-line error.
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/args.h"
#include "../../llmc/gpt2_model.h"

#define MAX_ARGS 64

typedef struct {
    int argc, gpu, ranks;
    char* argv[MAX_ARGS + 1];
    TrainArgs a;
    int grad_accum;
} ArgsCall;

static void parse_body(void* ctx) {
    ArgsCall* c = (ArgsCall*)ctx;
    args_parse(&c->a, c->argc, c->argv, c->gpu);
    args_validate(&c->a, c->gpu);
    c->grad_accum = args_grad_accum(&c->a, c->ranks);
    const char* e = c->a.model;
    if (e[0] == 'd' && strchr(e, '/') == NULL && strchr(e, '.') == NULL) {
        GPT2Config config;
        gpt2_config_from_descriptor(&config, e, c->a.vocab_size ? c->a.vocab_size : 50257, c->a.max_seq_len);
        unsigned __int128 Vp = config.padded_vocab_size, C = config.channels, L = config.num_layers;
        unsigned __int128 exact = Vp * C + (unsigned __int128)config.max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
        FUZZ_CHECK(exact == gpt2_num_parameters(&config));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) { return 0; }
    ArgsCall* c = (ArgsCall*)calloc(1, sizeof(ArgsCall));
    c->gpu = data[0] & 1;
    c->ranks = 1 + (data[0] >> 1) % 8;
    char* text = (char*)malloc(size); // the arguments, NUL-terminated one after another
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    c->argv[c->argc++] = "train_gpt2";
    for (char* p = text; p < text + size - 1 && c->argc < MAX_ARGS; p += strlen(p) + 1) {
        if (strcmp(p, "-h") != 0 && strcmp(p, "--help") != 0) { c->argv[c->argc++] = p; }
    }
    c->argv[c->argc] = NULL;
    if (fuzz_call(parse_body, c)) {
        FUZZ_CHECK(strchr(fail_message, '\n') == NULL || memchr(data + 1, '\n', size - 1) != NULL);
    } else {
        const TrainArgs* a = &c->a;
        FUZZ_CHECK(c->grad_accum >= 1);
        FUZZ_CHECK((long long)a->total_batch == (long long)c->grad_accum * a->B * a->T * c->ranks);
    }
    free(text);
    free(c);
    fuzz_end("args_parse");
    return 0;
}
