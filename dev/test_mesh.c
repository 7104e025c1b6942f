// Mesh and data-split checks (computed, not launched): for every (dp_replicate, dp_shard) with
// up to 8 ranks, and the 8 x 4 mesh that broke other trainers, the data ranks are exactly
// 0 .. dp_degree-1; and the rows the data loader hands to every (rank, micro-step) of a global
// batch are disjoint and cover the batch, with and without shuffling, for several grad_accum.
#include "llmc/utils.h"
#include "llmc/mesh.h"
#include "llmc/dataloader.h"

static int failures = 0;

static void expect(int ok, const char* what, int world, int shard) {
    if (!ok) { printf("FAIL %s (world %d, dp_shard %d)\n", what, world, shard); failures++; }
}

static void check_mesh(int world, int dp_shard) {
    int* seen = (int*)calloc_check(world, sizeof(int));
    int ok = 1;
    for (int r = 0; r < world; r++) {
        Mesh m;
        mesh_init(&m, world, r, dp_shard);
        ok &= m.dp_degree == world && m.dp_replicate * m.dp_shard == world;
        ok &= m.shard_idx == r % dp_shard && m.replicate_idx == r / dp_shard;
        if (m.dp_rank < 0 || m.dp_rank >= m.dp_degree) { ok = 0; continue; }
        seen[m.dp_rank]++;
    }
    for (int i = 0; i < world; i++) { ok &= seen[i] == 1; }
    expect(ok, "data ranks are exactly 0..dp_degree-1", world, dp_shard);
    free(seen);
}

// A shard whose token at position i is i, so a row's first input token is where it starts.
static void write_position_shard(const char* path, int ntok) {
    int header[256] = {SHARD_MAGIC, SHARD_VERSION, ntok};
    FILE* f = fopen_check(path, "wb");
    fwrite_check(header, sizeof(int), 256, f, path);
    for (int i = 0; i < ntok; i++) { uint16_t t = (uint16_t)i; fwrite_check(&t, 2, 1, f, path); }
    fclose_check(f, path);
}

static void check_split(const char* path, int world, int grad_accum, int B, int T, int shuffle) {
    int steps = 3, rows = world * grad_accum * B;
    int* starts = (int*)malloc_check((size_t)steps * rows * sizeof(int));
    int count = 0;
    for (int r = 0; r < world; r++) {
        DataLoader d;
        dataloader_init(&d, path, "-i", B, T, r, world, grad_accum, 65536, shuffle, 7);
        for (int s = 0; s < steps; s++) {
            for (int m = 0; m < grad_accum; m++) {
                dataloader_next(&d);
                for (int b = 0; b < B; b++) {
                    int start = d.inputs[b * T];
                    int ok = start % T == 0 && d.targets[b * T + T - 1] == start + T;
                    expect(ok, "a row is T+1 consecutive tokens starting at a multiple of T", world, 0);
                    starts[count++] = s * 1000000 + start; // tag with the step: rows may repeat across steps only
                }
            }
        }
        dataloader_free(&d);
    }
    // disjoint within a step: all (step, start) pairs distinct
    int dup = 0;
    for (int i = 0; i < count; i++) {
        for (int j = i + 1; j < count; j++) { dup += starts[i] == starts[j]; }
    }
    expect(dup == 0 && count == steps * rows, "rows of a global batch are disjoint and there are R of them", world, 0);
    if (!shuffle) {
        // unshuffled, step s covers exactly rows [s R, (s+1) R)
        int ok = 1;
        for (int i = 0; i < count; i++) {
            int s = starts[i] / 1000000, row = (starts[i] % 1000000) / T;
            ok &= row >= s * rows && row < (s + 1) * rows;
        }
        expect(ok, "unshuffled global batch s covers rows [sR, (s+1)R)", world, 0);
    }
    free(starts);
}

int main(void) {
    int meshes = 0;
    for (int world = 1; world <= 8; world++) {
        for (int shard = 1; shard <= world; shard++) {
            if (world % shard == 0) { check_mesh(world, shard); meshes++; }
        }
    }
    check_mesh(32, 4); // 8 replicas x 4 shards
    meshes++;
    const char* path = "build/position_shard.bin";
    write_position_shard(path, 60000);
    int splits = 0;
    int worlds[] = {1, 2, 3, 4, 8}, accums[] = {1, 2, 3, 8};
    for (int w = 0; w < 5; w++) {
        for (int a = 0; a < 4; a++) {
            for (int shuffle = 0; shuffle <= 1; shuffle++) {
                check_split(path, worlds[w], accums[a], 2, 16, shuffle);
                splits++;
            }
        }
    }
    printf("%d meshes, %d data splits checked: %d failures\n", meshes, splits, failures);
    return failures ? 1 : 0;
}
