// libFuzzer harness for the data shard reader, the data loader (llmc/dataloader.h). Input: 18
// bytes of loader settings, then the bytes of up to three shard files A, B, C:
//   [0] B = 1 + x % 4          [1] T = 1 + x % 16        [2] dp_degree = 1 + x % 3
//   [3] dp_rank = x % dp_degree [4] grad_accum = 1 + x % 3 [5,6] vocab = 1 + uint16
//   [7] bit 0 shuffle, bit 1 B is a second file, bit 2 seek (a resumed run), bit 3 the first
//       file is rewritten with C after the loader started (the data changed under a job)
//   [8] micro-batches to draw = x % 64    [9,10] where B starts   [16,17] where C starts
//   [11] seek epoch (int8)  [12] seek file position (int8)  [13,14] seek row (int16)
//   [15] shuffle seed
// A loader that starts must hand out only tokens below the vocab size (ASan checks every
// read); a shard it refuses must get a one-line error. With -DPLANT_BUG the harness itself
// reads the token at an index taken from the shard header without a bounds check: the
// planted bug that proves the fuzzer finds out-of-bounds reads (dev/tests/45_fuzz.sh).
// Build and run: make fuzz (see docs/fuzzing.md).
#include "fuzz_common.h"
#include "../../llmc/dataloader.h"

#define SETTINGS 18

typedef struct {
    const uint8_t* cfg;
    const uint8_t *file0, *file1, *file2;
    size_t size0, size1, size2;
    char pattern[4096], path0[4096], path1[4096];
    DataLoader d;
} ShardCall;

static void loader_body(void* ctx) {
    ShardCall* c = (ShardCall*)ctx;
    const uint8_t* cfg = c->cfg;
    int B = 1 + cfg[0] % 4, T = 1 + cfg[1] % 16, dp_degree = 1 + cfg[2] % 3;
    int dp_rank = cfg[3] % dp_degree, grad_accum = 1 + cfg[4] % 3;
    int vocab = 1 + (cfg[5] | cfg[6] << 8);
    int flags = cfg[7], draws = cfg[8] % 64;
    DataLoader* d = &c->d;
    dataloader_init(d, c->pattern, "-i", B, T, dp_rank, dp_degree, grad_accum, vocab, flags & 1, cfg[15]);
    if (flags & 8) { fuzz_write_file(c->path0, sizeof(c->path0), "shard_0.bin", c->file2, c->size2); }
#ifdef PLANT_BUG
    volatile uint16_t planted = d->tokens[fuzz_int_at(c->file0, c->size0, 12)]; // no bounds check
    (void)planted;
#endif
    if (flags & 4) {
        int16_t row = (int16_t)(cfg[13] | cfg[14] << 8);
        dataloader_seek(d, (int8_t)cfg[11], (int8_t)cfg[12], row);
    }
    long rows = dataloader_rows_per_batch(d);
    for (int i = 0; i < draws; i++) {
        dataloader_next(d);
        for (int k = 0; k < B * T; k++) {
            FUZZ_CHECK(d->inputs[k] >= 0 && d->inputs[k] < vocab);
            FUZZ_CHECK(d->targets[k] >= 0 && d->targets[k] < vocab);
        }
        FUZZ_CHECK(d->row_pos >= 0 && d->row_pos + rows <= d->num_rows);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < SETTINGS) { return 0; }
    ShardCall* c = (ShardCall*)calloc(1, sizeof(ShardCall));
    c->cfg = data;
    const uint8_t* files = data + SETTINGS;
    size_t files_size = size - SETTINGS;
    size_t split2 = (data[7] & 8) ? (size_t)(data[16] | data[17] << 8) : files_size;
    if (split2 > files_size) { split2 = files_size; }
    size_t split1 = (data[7] & 2) ? (size_t)(data[9] | data[10] << 8) : split2;
    if (split1 > split2) { split1 = split2; }
    c->file0 = files;
    c->size0 = split1;
    c->file1 = files + split1;
    c->size1 = split2 - split1;
    c->file2 = files + split2;
    c->size2 = files_size - split2;
    fuzz_write_file(c->path0, sizeof(c->path0), "shard_0.bin", c->file0, c->size0);
    fuzz_path(c->path1, sizeof(c->path1), "shard_1.bin");
    unlink(c->path1);
    if (data[7] & 2) { fuzz_write_file(c->path1, sizeof(c->path1), "shard_1.bin", c->file1, c->size1); }
    snprintf(c->pattern, sizeof(c->pattern), "%s/shard_*.bin", fuzz_dir);
    if (fuzz_call(loader_body, c)) {
        if (c->d.files.gl_pathv != NULL) { globfree(&c->d.files); }
    } else {
        dataloader_free(&c->d);
    }
    free(c);
    fuzz_end("dataloader");
    return 0;
}
