// ckpt_tool: what a log dir's checkpoints hold, whether they verify, and a checkpoint turned
// into one model file (docs/checkpoints.md). Build: make ckpt_tool.
//   ckpt_tool info DIR [STEP]            every checkpoint (or one): step, layout, data position
//   ckpt_tool verify DIR [STEP]          CRC-32C and sizes of every file; exit 1 if one fails
//   ckpt_tool export DIR STEP OUT.bin    the weights as an fp32 model file (version 3): the fp32
//                                        master weights gathered from the shards when the
//                                        checkpoint has them (bf16 GPU runs), else its model file
//   ckpt_tool slots                      the state header's slot table (llmc/ckpt_state_file.h) as
//                                        docs/checkpoints.md shows it; exit 1 if two rows overlap
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/utils.h"
#include "llmc/gpt2_model.h"
#include "llmc/mesh.h"
#include "llmc/checkpoint.h"
#include "llmc/outer_sync.h"

static void usage(void) {
    fprintf(stderr, "usage: ckpt_tool info|verify DIR [STEP] | ckpt_tool export DIR STEP OUT.bin | ckpt_tool slots\n");
    exit(2);
}

static int parse_step(const char* s) {
    char* end = NULL;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 2147483647L) { fail("STEP %s: not a step number", s); }
    return (int)v;
}

static void header_of(const char* dir, int step, TrainState* s) {
    char path[4096], why[4400];
    checkpoint_path(path, sizeof(path), dir, "state", step, checkpoint_first_state_rank(dir, step));
    FILE* f = fopen_check(path, "rb");
    int header[STATE_HEADER_INTS];
    if (!state_read_header(f, path, s, header, why, sizeof(why))) { fail("%s", why); }
    fclose(f);
}

static void info_one(const char* dir, int step) {
    char path[4096], why[8192];
    int world = 0;
    int ok = checkpoint_verify(dir, step, &world, why, sizeof(why));
    printf("checkpoint %d: %s\n", step, ok ? "complete, verifies" : why);
    if (!ok) { return; }
    TrainState s;
    header_of(dir, step, &s);
    GPT2Config c;
    checkpoint_path(path, sizeof(path), dir, "model", step, -1);
    FILE* f = fopen_check(path, "rb");
    int version = gpt2_read_header(f, path, &c);
    fclose(f);
    printf("  model: %s (v%d %s) L %d NH %d C %d V %d T_max %d, %zu parameters\n", path, version,
           version == MODEL_VERSION_FP32 ? "fp32" : "bf16", c.num_layers, c.num_heads, c.channels, c.vocab_size,
           c.max_seq_len, gpt2_num_parameters(&c));
    printf("  written by: %d ranks, dp_shard %d, ZeRO %d, -b %d -t %d -d %d\n", s.world, s.dp_shard, s.zero_stage,
           s.B, s.T, s.total_batch);
    printf("  optimizer: %s, %llu elements per rank%s, fp32 master weights: %s\n",
           s.optimizer == 1 ? "muon" : s.optimizer == 0 ? "adamw" : "(unknown)", (unsigned long long)s.owned,
           s.optimizer == 1 ? " (m: Muon's momentum on its matrices, AdamW's m on the rest)" : "",
           s.has_master ? "yes" : "no");
    if (s.sync_stage != s.zero_stage) {
        printf("  replica sync: %llu elements per rank (its ZeRO-%d slices)\n", (unsigned long long)s.sync_owned,
               s.sync_stage);
    }
    printf("  position: step %d, data epoch %d file %d row %ld, skipped steps %d (%d in a row), spike window %d\n",
           s.step, s.epoch, s.file_pos, s.row_pos, s.skipped, s.consecutive_skips, s.loss_count);
    const OuterConfig* o = &s.outer;
    if (o->every > 0) {
        int in_window = outer_window_position(o, s.step);
        printf("  outer sync: -ls %d -lss %d -ol %g -om %g, %d replicas; step %d is %d steps into its window, the "
               "replicas %s\n", o->every, o->start, o->lr, o->momentum, s.world / s.dp_shard,
               s.step, in_window, s.in_agreement ? "agree (a sync step or synchronous)" : "differ (mid-window)");
        printf("  outer state: %s; each rank's local parameters: %s\n",
               s.has_outer ? "outer parameters and momentum in every state file" : "not begun yet (before -lss)",
               s.has_local ? "in its state file" : "no");
        int R = s.world / s.dp_shard;
        uint8_t* lost = (uint8_t*)malloc_check((size_t)R);
        if (R > 1 && checkpoint_missing_replicas(dir, step, R, lost) > 0) {
            printf("  lost when it was written (-le 1), no state files:");
            for (int q = 0; q < R; q++) {
                if (lost[q]) { printf(" replica %d", q); }
            }
            printf("; a resume rebuilds them from the outer state\n");
        }
        free(lost);
        if (o->fragments > 1) {
            printf("  streaming fragments: -lf %d (fragment f syncs f * %d / %d steps into each window)\n", o->fragments,
                   o->every, o->fragments);
        }
        if (o->overlap > 0) {
            printf("  overlap: -lo %d; exchanges in flight at this step: %s\n", o->overlap,
                   s.has_pending ? "yes (each state file holds their local snapshots and held sums)" : "none");
        }
    }
    if (o->wire != WIRE_FP32 || o->topk > 0.0f) {
        printf("  replica link: -rq %s -rk %g -ref %d -rqs %d; error-feedback residual: %s\n",
               wire_format_names[(unsigned)o->wire % WIRE_FORMATS], o->topk, o->feedback, o->wire_start,
               s.has_residual ? "in every state file" : "none");
    }
}

// Exports the weights of checkpoint `step` as an fp32 model file.
static void export_model(const char* dir, int step, const char* out) {
    char why[8192], path[4096];
    if (!checkpoint_verify(dir, step, NULL, why, sizeof(why))) { fail("checkpoint %d does not verify: %s", step, why); }
    GPT2Config c;
    checkpoint_path(path, sizeof(path), dir, "model", step, -1);
    float* params = gpt2_load_model(path, &c);
    TrainState s;
    header_of(dir, step, &s);
    const char* source = "its model file";
    if (s.has_master) {
        size_t n = gpt2_num_parameters(&c);
        StateTarget t = {.rank = 0, .world = 1, .dp_shard = 1, .zero_stage = 0, .B = s.B, .T = s.T,
                         .total_batch = s.total_batch, .owned = n, .has_master = 1, .sync_stage = 0, .sync_owned = n,
                         .config = &c, .outer = &s.outer, .has_residual = s.has_residual};
        float* m = (float*)malloc_check(n * sizeof(float));
        float* v = (float*)malloc_check(n * sizeof(float));
        state_load_resharded(dir, step, &t, &s, m, v, params);
        free(m);
        free(v);
        source = "the fp32 master weights of its state files";
    }
    gpt2_write_model(out, &c, params, MODEL_VERSION_FP32);
    printf("wrote %s: checkpoint %d as an fp32 model file (v3), from %s\n", out, step, source);
    free(params);
}

// The slot table as markdown, after checking that its rows are in slot order, inside the header
// and apart (returns 1 where they are not, naming the rows).
static int print_slots(void) {
    static const char* groups[] = {"always", "with -ls", "with -rq/-rk", "with a sync layout of its own"};
    int end = 0;
    for (int k = 0; k < STATE_NUM_SLOTS; k++) {
        const StateSlot* e = &state_slots[k];
        int width = state_slot_width(e->type);
        if (e->slot < end || e->slot + width > STATE_HEADER_INTS) {
            fprintf(stderr, "state header table: row %s (slot %d, %d ints) overlaps the row before it or leaves the "
                    "header\n", e->name, e->slot, width);
            return 1;
        }
        end = e->slot + width;
    }
    printf("| slot | field | written | meaning |\n| --- | --- | --- | --- |\n");
    for (int k = 0; k < STATE_NUM_SLOTS; k++) {
        const StateSlot* e = &state_slots[k];
        int width = state_slot_width(e->type);
        char slots[32];
        if (width == 1) { snprintf(slots, sizeof(slots), "%d", e->slot); }
        else { snprintf(slots, sizeof(slots), "%d-%d", e->slot, e->slot + width - 1); }
        char value[32] = "";
        if (e->type == SLOT_CONST) { snprintf(value, sizeof(value), ", %d", e->value); }
        printf("| %s | `%s` | %s | %s%s |\n", slots, e->name, groups[e->group], e->meaning, value);
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "slots") == 0) { return print_slots(); }
    if (argc < 3) { usage(); }
    const char* cmd = argv[1];
    const char* dir = argv[2];
    if (strcmp(cmd, "export") == 0) {
        if (argc != 5) { usage(); }
        export_model(dir, parse_step(argv[3]), argv[4]);
        return 0;
    }
    if (strcmp(cmd, "info") != 0 && strcmp(cmd, "verify") != 0) { usage(); }
    if (argc > 4) { usage(); }
    int count = 0;
    int* steps = NULL;
    int one = 0;
    if (argc == 4) {
        one = parse_step(argv[3]);
        steps = &one;
        count = 1;
    } else {
        steps = checkpoint_list(dir, &count);
        if (count == 0) { printf("%s: no checkpoints (no DONE_* manifest)\n", dir); }
    }
    int bad = 0;
    for (int i = 0; i < count; i++) {
        if (strcmp(cmd, "info") == 0) {
            info_one(dir, steps[i]);
        } else {
            char why[8192];
            int ok = checkpoint_verify(dir, steps[i], NULL, why, sizeof(why));
            printf("checkpoint %d: %s\n", steps[i], ok ? "ok" : why);
            bad += !ok;
        }
    }
    if (argc != 4) { free(steps); }
    return bad ? 1 : 0;
}
