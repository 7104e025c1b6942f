// libFuzzer harness for the multiple-choice eval file reader (HellaSwag, llm.c's format),
// eval_file_load (llmc/eval_loader.h). Input: 2 bytes of settings, then a whole eval file:
//   [0] vocab = 1 + x (1..256)      [1] T = 1 + x % 64
// A file the reader accepts must have its examples tile the payload exactly (each: 6 header
// words, the context, each completion's length and tokens), every example 1..16 completions, a
// label among them, a context and completions that are not empty, every row within T positions,
// every token below the vocab; each row must fill (eval_fill_row) within T. A file it refuses
// must get an error naming the file, on one line.
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/eval_loader.h"

#define SETTINGS 2

typedef struct {
    const char* path;
    int vocab, T;
    EvalFile f;
} EvalCall;

static void load_body(void* ctx) {
    EvalCall* c = (EvalCall*)ctx;
    eval_file_load(&c->f, c->path, c->vocab, c->T);
}

// The accepted file, checked against the bytes it was read from (n uint16 after the header).
static void check_accepted(const EvalFile* f, size_t n, int vocab, int T) {
    FUZZ_CHECK(f->num_examples >= 1);
    size_t words = 0;
    int inputs[64], targets[64];
    for (int e = 0; e < f->num_examples; e++) {
        const EvalExample* ex = &f->examples[e];
        FUZZ_CHECK(ex->num_completions >= 1 && ex->num_completions <= EVAL_MAX_COMPLETIONS);
        FUZZ_CHECK(ex->label >= 0 && ex->label < ex->num_completions && ex->context_len >= 1);
        FUZZ_CHECK(ex->context == f->stream + words + 6); // right after this example's 6 header words
        words += 6 + (size_t)ex->context_len;
        for (int i = 0; i < ex->context_len; i++) { FUZZ_CHECK(ex->context[i] < vocab); }
        for (int c = 0; c < ex->num_completions; c++) {
            int len = ex->completion_len[c];
            FUZZ_CHECK(len >= 1 && ex->context_len + len - 1 <= T);
            FUZZ_CHECK(ex->completion[c] == f->stream + words + 1 && f->stream[words] == len);
            words += 1 + (size_t)len;
            for (int i = 0; i < len; i++) { FUZZ_CHECK(ex->completion[c][i] < vocab); }
            eval_fill_row(ex, c, inputs, targets, T);
            FUZZ_CHECK(targets[ex->context_len + len - 2] == ex->completion[c][len - 1]); // the last target
        }
    }
    FUZZ_CHECK(words == n); // the examples cover the payload, nothing before, between or after
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < SETTINGS || size > (1 << 20)) { return 0; }
    char path[4096];
    fuzz_write_file(path, sizeof(path), "eval.bin", data + SETTINGS, size - SETTINGS);
    EvalCall call = {path, 1 + data[0], 1 + data[1] % 64, {0}};
    if (fuzz_call(load_body, &call)) {
        fuzz_require_names(path);
    } else {
        check_accepted(&call.f, (size - SETTINGS - 1024) / 2, call.vocab, call.T);
        eval_file_free(&call.f);
    }
    fuzz_end("eval_file_load");
    return 0;
}
