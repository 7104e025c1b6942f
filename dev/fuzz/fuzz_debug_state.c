// libFuzzer harness for the debug state reader, debug_state_read (llmc/debug_state.h): the
// reference batch, logits, loss and gradients that train_gpt2.py writes for the tests. Input:
// 5 bytes choosing the model config the state is read against, then a whole debug state file:
//   [0] V = 1 + x % 64 (padded to 128)  [1] L = 1 + x % 2  [2] NH = 1 + x % 2
//   [3] C = NH * (1 + x % 4)            [4] T_max = 1 + x % 8
// A file the reader accepts must be exactly as long as B, T and the model say (computed here
// in 128-bit arithmetic) and fill every array (ASan checks the touches); a file it refuses
// must get an error naming the file.
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/debug_state.h"

#define SETTINGS 5

typedef struct {
    const char* path;
    GPT2Config config;
    DebugState s;
} DebugCall;

static void read_body(void* ctx) {
    DebugCall* c = (DebugCall*)ctx;
    debug_state_read(&c->s, c->path, &c->config);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < SETTINGS) { return 0; }
    char path[4096];
    fuzz_write_file(path, sizeof(path), "debug_state.bin", data + SETTINGS, size - SETTINGS);
    DebugCall call;
    memset(&call, 0, sizeof(call));
    call.path = path;
    GPT2Config* c = &call.config;
    c->vocab_size = 1 + data[0] % 64;
    c->padded_vocab_size = 128;
    c->num_layers = 1 + data[1] % 2;
    c->num_heads = 1 + data[2] % 2;
    c->channels = c->num_heads * (1 + data[3] % 4);
    c->max_seq_len = 1 + data[4] % 8;
    if (fuzz_call(read_body, &call)) {
        fuzz_require_names(path);
    } else {
        const DebugState* s = &call.s;
        unsigned __int128 BT = (unsigned __int128)(uint32_t)s->B * (uint32_t)s->T;
        size_t n = gpt2_num_parameters(c);
        FUZZ_CHECK(s->B > 0 && s->T > 0);
        FUZZ_CHECK((unsigned __int128)(size - SETTINGS) == 1024 + 8 * BT + 4 * (BT * c->vocab_size + 1 + n));
        size_t bt = (size_t)BT;
        volatile float sink = s->loss + s->logits[bt * c->vocab_size - 1] + s->grads[n - 1];
        volatile int isink = s->x[bt - 1] ^ s->y[bt - 1];
        (void)sink;
        (void)isink;
        debug_state_free(&call.s);
    }
    fuzz_end("debug_state_read");
    return 0;
}
