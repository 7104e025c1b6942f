// libFuzzer harness for the optimizer state reader, state_read (llmc/checkpoint.h). Input:
// one byte of mismatch bits, then a whole state file. The run's expectation (rank, world,
// dp_shard, ZeRO stage, B, T, -d, element count, master weights) is taken from the file's own
// header so that the fuzzer reaches the arrays, and bit i of the first byte makes expectation
// i differ, as a resume on another layout would. A file the reader accepts must fill the
// run's m, v (and master) buffers exactly (ASan) and survive state_write + state_read
// unchanged; a file it refuses must get an error naming the file. With no mismatch bit set, the
// manifest's check of a state file (state_check_file) must accept exactly what the reader accepts.
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/checkpoint.h"

#define MAX_OWNED 4096

typedef struct {
    const char* path;
    TrainState expect, got;
    float *m, *v, *master;
} StateCall;

static void read_body(void* ctx) {
    StateCall* c = (StateCall*)ctx;
    state_read(c->path, &c->expect, &c->got, c->m, c->v, c->master);
}

static int same_state(const TrainState* a, const TrainState* b) {
    return a->rank == b->rank && a->world == b->world && a->dp_shard == b->dp_shard &&
           a->zero_stage == b->zero_stage && a->B == b->B && a->T == b->T && a->total_batch == b->total_batch &&
           a->step == b->step && a->epoch == b->epoch && a->file_pos == b->file_pos && a->row_pos == b->row_pos &&
           a->rng == b->rng && a->owned == b->owned && a->has_master == b->has_master;
}

// checkpoint_verify's check of a state file (header and payload CRC), as the manifest reader runs it
typedef struct {
    const char* path;
    int ok;
} CheckCall;

static void check_body(void* ctx) {
    CheckCall* c = (CheckCall*)ctx;
    TrainState s;
    char why[8192];
    c->ok = state_check_file(c->path, &s, why, sizeof(why));
}

static float* buffer(uint64_t owned) { return (float*)calloc(owned ? owned : 1, sizeof(float)); }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) { return 0; }
    uint8_t flip = data[0];
    const uint8_t* file = data + 1;
    size_t file_size = size - 1;
    char path[4096], again[4096];
    fuzz_write_file(path, sizeof(path), "state.bin", file, file_size);

    TrainState e;
    memset(&e, 0, sizeof(e)); // no -ls arrays (has_local, has_outer): state_read reads m, v, master only
    e.rank = fuzz_int_at(file, file_size, 8);
    e.world = fuzz_int_at(file, file_size, 12);
    e.dp_shard = fuzz_int_at(file, file_size, 16);
    e.zero_stage = fuzz_int_at(file, file_size, 20);
    e.B = fuzz_int_at(file, file_size, 24);
    e.T = fuzz_int_at(file, file_size, 28);
    e.total_batch = fuzz_int_at(file, file_size, 32);
    uint64_t header_owned = (uint32_t)fuzz_int_at(file, file_size, 72) | (uint64_t)(uint32_t)fuzz_int_at(file, file_size, 76) << 32;
    e.owned = header_owned;
    e.has_master = fuzz_int_at(file, file_size, 64);
    e.step = e.epoch = e.file_pos = 0;
    e.row_pos = 0;
    e.rng = 0;
    if (flip & 1) { e.rank ^= 1; }
    if (flip & 2) { e.world ^= 2; }
    if (flip & 4) { e.dp_shard ^= 1; }
    if (flip & 8) { e.zero_stage ^= 3; }
    if (flip & 16) { e.B ^= 1; }
    if (flip & 32) { e.total_batch ^= 64; }
    if (flip & 64) { e.owned ^= 1; }
    if (flip & 128) { e.has_master = !e.has_master; }
    if (e.owned > MAX_OWNED) { e.owned = MAX_OWNED; } // the run's own size: it never matches such a file
    // what a run allocates for itself, from its own expectation
    StateCall call = {path, e, {0}, buffer(e.owned), buffer(e.owned), e.has_master ? buffer(e.owned) : NULL};
    int refused = fuzz_call(read_body, &call);
    if (refused) {
        fuzz_require_names(path);
    } else {
        FUZZ_CHECK(call.got.owned == e.owned && call.got.has_master == e.has_master);
        FUZZ_CHECK(file_size == 1024 + call.got.owned * 4 * (call.got.has_master ? 3 : 2));
        fuzz_path(again, sizeof(again), "again.bin");
        state_write(again, &call.got, call.m, call.v, call.master);
        StateCall call2 = {again, call.got, {0}, buffer(e.owned), buffer(e.owned), e.has_master ? buffer(e.owned) : NULL};
        FUZZ_CHECK(fuzz_call(read_body, &call2) == 0);
        FUZZ_CHECK(same_state(&call.got, &call2.got));
        size_t bytes = e.owned * sizeof(float);
        FUZZ_CHECK(memcmp(call.m, call2.m, bytes) == 0 && memcmp(call.v, call2.v, bytes) == 0);
        FUZZ_CHECK(!e.has_master || memcmp(call.master, call2.master, bytes) == 0);
        free(call2.m);
        free(call2.v);
        free(call2.master);
    }
    // The manifest's check of a state file must take exactly the files the strict reader takes on
    // their own layout (else a resume would pick a checkpoint it cannot read, or pass one over):
    // files without -ls arrays (header slots 24, 25, 31, 38), of the sizes a run here allocates.
    CheckCall check = {path, 0};
    FUZZ_CHECK(fuzz_call(check_body, &check) == 0);
    int plain = !fuzz_int_at(file, file_size, 96) && !fuzz_int_at(file, file_size, 100) &&
                !fuzz_int_at(file, file_size, 124) && !fuzz_int_at(file, file_size, 152);
    if (flip == 0 && plain && header_owned <= MAX_OWNED) { FUZZ_CHECK(check.ok == !refused); }
    free(call.m);
    free(call.v);
    free(call.master);
    fuzz_end("state_read");
    return 0;
}
