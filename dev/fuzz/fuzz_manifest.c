// libFuzzer harness for a checkpoint's manifest DONE_S (llmc/ckpt_manifest.h): checkpoint_verify,
// and for a manifest that verifies, the -le 1 line naming the replicas lost when it was written
// (checkpoint_missing_replicas) and the lowest rank whose state file it lists
// (checkpoint_first_state_rank). Input: one byte of settings, then the manifest's text. Bit 0 of
// the byte clear: the harness appends the end line with the text's right CRC-32C, so that the
// fuzzer gets past the checksum to the lines; set: the text is the whole manifest. The other files
// of the checkpoint (step 1) are fixed: model_00000001.bin (16 bytes) and valid state files of
// ranks 0-3. A manifest that verifies must list the model file and the state file of every rank of
// its world but those of the replicas it names as lost, each once; reading those back must not
// fail. One that does not verify must say why, naming the manifest or a file, on one line.
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/checkpoint.h"

#define STATE_FILES 4

static char dir[4096];

// The fixed files of the checkpoint, once.
static void setup(void) {
    if (dir[0]) { return; }
    char path[4096];
    uint8_t model[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    fuzz_write_file(path, sizeof(path), "model_00000001.bin", model, sizeof(model));
    snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(path, '/') - path), path);
    float m[3] = {1, 2, 3}, v[3] = {4, 5, 6};
    for (int r = 0; r < STATE_FILES; r++) {
        TrainState s = {.rank = r, .world = STATE_FILES, .dp_shard = 1, .zero_stage = 1, .B = 1, .T = 4,
                        .total_batch = 16, .step = 1, .owned = 3};
        checkpoint_path(path, sizeof(path), dir, "state", 1, r);
        state_write(path, &s, m, v, NULL);
    }
}

typedef struct {
    int R, n, first;
    uint8_t lost[STATE_FILES];
} MissingCall;

static void missing_body(void* ctx) {
    MissingCall* c = (MissingCall*)ctx;
    c->n = checkpoint_missing_replicas(dir, 1, c->R, c->lost);
    c->first = checkpoint_first_state_rank(dir, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1 || size > 65536) { return 0; }
    setup();
    char* text = (char*)malloc(size + 32);
    memcpy(text, data + 1, size - 1);
    size_t len = size - 1;
    if (!(data[0] & 1)) { len += snprintf(text + len, 32, "end %08x\n", crc32c_update(0, text, len)); }
    char path[4096], why[8192];
    fuzz_write_file(path, sizeof(path), "DONE_00000001", (const uint8_t*)text, len);
    int world = 0;
    int ok = checkpoint_verify(dir, 1, &world, why, sizeof(why));
    if (getenv("FUZZ_VERBOSE")) { fprintf(stderr, "%s\n", ok ? "verifies" : why); }
    if (!ok) {
        FUZZ_CHECK(strchr(why, '\n') == NULL && strstr(why, dir) != NULL);
    } else {
        // what it verified: the state files listed are those of the ranks not named as lost
        int S = 1, listed = 0, lost = 0, first = -1;
        char* save = NULL;
        text[len] = '\0';
        for (char* line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            int got = manifest_missing_line(line, world, NULL, &S);
            FUZZ_CHECK(got >= 0);
            lost += got;
            if (strncmp(line, "file state_", 11) == 0) {
                int r = atoi(line + strlen("file state_00000001_"));
                listed++;
                first = first < 0 || r < first ? r : first;
            }
        }
        FUZZ_CHECK(world >= 1 && world <= STATE_FILES && world % S == 0);
        FUZZ_CHECK(listed == world - lost * S);
        MissingCall c = {.R = world / S};
        FUZZ_CHECK(fuzz_call(missing_body, &c) == 0);
        int named = 0;
        for (int q = 0; q < c.R; q++) { named += c.lost[q]; }
        FUZZ_CHECK(c.n == lost && named == lost && lost < c.R);
        FUZZ_CHECK(c.first == first); // the lowest rank listed: the writer's view of the checkpoint
    }
    fuzz_end("checkpoint_verify");
    free(text);
    return 0;
}
