// libFuzzer harness for the tokenizer reader, tokenizer_init (llmc/tokenizer.h). Input: a
// whole tokenizer file. A file the reader accepts must give a string of at most 255 bytes for
// every token id, "<?>" for ids outside the vocabulary, print every token (to /dev/null), and
// give back every block through tokenizer_free; a file it refuses must get an error naming
// the file. With -DPLANT_BUG the harness drops one token before tokenizer_free: the planted
// leak that proves leaks are caught (dev/tests/45_fuzz.sh).
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/tokenizer.h"

typedef struct {
    const char* path;
    Tokenizer t;
} TokenizerCall;

static void init_body(void* ctx) {
    TokenizerCall* c = (TokenizerCall*)ctx;
    tokenizer_init(&c->t, c->path);
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    (void)argc;
    (void)argv;
    if (freopen("/dev/null", "w", stdout) == NULL) { abort(); } // tokenizer_print writes here
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    char path[4096];
    fuzz_write_file(path, sizeof(path), "tokenizer.bin", data, size);
    TokenizerCall call = {path, {0}};
    if (fuzz_call(init_body, &call)) {
        fuzz_require_names(path);
    } else {
        const Tokenizer* t = &call.t;
        FUZZ_CHECK(t->eot_token >= 0 && t->eot_token < t->vocab_size);
        for (int i = 0; i < t->vocab_size; i++) {
            FUZZ_CHECK(strlen(tokenizer_decode(t, i)) <= 255); // a 0 byte ends a token early
            tokenizer_print(t, i);
        }
        FUZZ_CHECK(strcmp(tokenizer_decode(t, -1), "<?>") == 0);
        FUZZ_CHECK(strcmp(tokenizer_decode(t, t->vocab_size), "<?>") == 0);
#ifdef PLANT_BUG
        call.t.tokens[call.t.vocab_size - 1] = NULL; // the planted leak: one token is lost
#endif
        tokenizer_free(&call.t);
    }
    fuzz_end("tokenizer_init");
    return 0;
}
