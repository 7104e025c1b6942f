// The data-parallel plan of one rank, computed once at start-up in host code from the flags and
// the model's tensor table, the same for both trainers: the mesh (docs/design.md section 3), the
// ZeRO stage and shard layout (section 4), the elements this rank owns and where they lie in the
// parameters (owned spans: AdamW's, and the replica sync's where they differ), the buckets (the units one finished layer of backward hands to the
// shard group's reduce-scatter), the -lf fragments (every owned element's place in its
// fragment's packed message) and the replica link's settings. The data-parallel layer's backends
// (llmc/dp_host.h, llmc/dp_device.cuh) size and address their buffers by it; nothing here moves
// memory or talks to another rank.
#ifndef LLMC_DP_PLAN_H
#define LLMC_DP_PLAN_H

#include "utils.h"
#include "mesh.h"
#include "outer_sync.h"

// A run of the replica sync's elements of one unit: parameters [param, +count) are its elements
// [owned, +count) (the outer state's order), AdamW's [adam, +count) (the master weights') and places
// [packed, +count) of fragment `fragment`'s packed message. A unit's run has all of its elements
// (sync stage 0: the whole unit; 1, 2: this rank's slice without its padding); its place in the
// message counts the padding (the slice), as the outer state does.
typedef struct {
    size_t param, owned, adam, packed, count;
    int fragment;
} DpRun;

// The units backward completes together: a layer's 12 (layer >= 0), or wte, wpe, lnfw, lnfb
// (layer -1, reported last). slices: the elements of this rank's slices of them (a reduce-scatter
// group's receive space); padded: the zero-padded copies of those units S does not divide.
typedef struct {
    int layer, first, count;
    size_t slices, padded;
} DpBucket;

typedef struct {
    Mesh mesh;
    int zero_stage;
    ShardLayout layout;
    size_t tensor_sizes[NUM_PARAMETER_TENSORS]; // the model's 16 tensors, in file order
    size_t num_parameters;
    size_t owned;          // AdamW's elements on this rank: every parameter (ZeRO 0) or its slices of every unit
    size_t owned_padded;   // owned rounded up to dp_replicate: R equal slices on the replica link (-ls 0)
    OwnedSpan* spans;      // AdamW's elements in the parameters (llmc/outer_sync.h)
    int num_spans;
    // the replica sync's elements (the outer state, the residual, -lo's snapshots; llmc/mesh.h's
    // sync_stage_of): AdamW's, or with ZeRO 0 and -ls over S > 1 ranks this rank's ZeRO-1 slices
    int sync_stage;
    size_t sync_owned;
    size_t sync_padded;    // sync_owned rounded up to dp_replicate
    OwnedSpan* sync_spans;
    int num_sync_spans;
    DpBucket* buckets;     // layers 0..L-1, then the globals (index L)
    size_t bucket_slices_max, bucket_padded_max;
    const OuterConfig* outer; // the replica sync's settings (the run's TrainArgs.outer)
    // -ls (one fragment without -lf): every unit's run of the sync's elements, by fragment, then in their order;
    // fragment f's runs are runs[frag_runs[f] .. frag_runs[f + 1]), its packed length (padding
    // included) frag_count[f], and its held sum (-lo) starts at held_off[f] of a buffer of
    // held_off[F] (each fragment rounded up to R)
    int num_fragments;
    DpRun* runs;
    int num_runs;
    int* frag_runs;
    size_t* frag_count;
    size_t* held_off;
    size_t frag_max;       // the largest frag_count
} DpPlan;

static int dp_run_order(const void* pa, const void* pb) { // by fragment, then in owned order
    const DpRun *a = (const DpRun*)pa, *b = (const DpRun*)pb;
    if (a->fragment != b->fragment) { return a->fragment < b->fragment ? -1 : 1; }
    return a->owned < b->owned ? -1 : (a->owned > b->owned);
}

// The plan of rank `rank` of `world` with -ds dp_shard (0: all) and -z zero_stage for model c;
// outer: the replica sync's settings (every 0: synchronous; kept by pointer).
static void dp_plan_init(DpPlan* p, const GPT2Config* c, int world, int rank, int dp_shard, int zero_stage,
                         const OuterConfig* outer) {
    memset(p, 0, sizeof(*p));
    mesh_init(&p->mesh, world, rank, dp_shard);
    int S = p->mesh.dp_shard, R = p->mesh.dp_replicate;
    p->zero_stage = zero_stage;
    p->outer = outer;
    shard_layout_init(&p->layout, c, S);
    const ShardLayout* l = &p->layout;
    gpt2_parameter_sizes(c, p->tensor_sizes);
    p->num_parameters = gpt2_num_parameters(c);
    p->owned = zero_stage == 0 ? p->num_parameters : l->shard_elements;
    p->owned_padded = round_up(p->owned, R);
    p->spans = (OwnedSpan*)malloc_check(l->num_units * sizeof(OwnedSpan));
    p->num_spans = owned_spans(l, zero_stage, p->mesh.shard_idx, p->num_parameters, p->spans);
    int ss = sync_stage_of(zero_stage, outer->every, S);
    p->sync_stage = ss;
    p->sync_owned = ss == 0 ? p->num_parameters : l->shard_elements;
    p->sync_padded = round_up(p->sync_owned, R);
    p->sync_spans = (OwnedSpan*)malloc_check(l->num_units * sizeof(OwnedSpan));
    p->num_sync_spans = owned_spans(l, ss, p->mesh.shard_idx, p->num_parameters, p->sync_spans);
    p->buckets = (DpBucket*)malloc_check((l->num_layers + 1) * sizeof(DpBucket));
    for (int b = 0; b <= l->num_layers; b++) {
        DpBucket* k = &p->buckets[b];
        k->layer = b < l->num_layers ? b : -1;
        layer_units(l, k->layer, &k->first, &k->count);
        k->slices = k->padded = 0;
        for (int u = k->first; u < k->first + k->count; u++) {
            const ShardUnit* unit = &l->units[u];
            k->slices += unit->slice;
            if (unit->size != unit->slice * S) { k->padded += unit->slice * S; }
        }
        if (k->slices > p->bucket_slices_max) { p->bucket_slices_max = k->slices; }
        if (k->padded > p->bucket_padded_max) { p->bucket_padded_max = k->padded; }
    }
    int F = outer->fragments > 1 ? outer->fragments : 1;
    p->num_fragments = F;
    p->num_runs = l->num_units;
    p->runs = (DpRun*)malloc_check(l->num_units * sizeof(DpRun));
    for (int u = 0; u < l->num_units; u++) {
        const ShardUnit* unit = &l->units[u];
        DpRun* r = &p->runs[u];
        size_t first = 0;
        r->count = ss == 0 ? unit->size : unit_owned(unit, p->mesh.shard_idx, &first);
        r->param = unit->offset + first;
        r->owned = ss == 0 ? unit->offset : unit->shard_offset;
        r->adam = zero_stage == 0 ? r->param : r->owned; // dp_span_adam's rule
        r->fragment = outer_unit_fragment(unit, l->num_layers, F);
    }
    qsort(p->runs, p->num_runs, sizeof(DpRun), dp_run_order);
    p->frag_runs = (int*)calloc_check(F + 1, sizeof(int));
    p->frag_count = (size_t*)calloc_check(F, sizeof(size_t));
    p->held_off = (size_t*)calloc_check(F + 1, sizeof(size_t));
    for (int i = 0; i < p->num_runs; i++) {
        DpRun* r = &p->runs[i];
        const ShardUnit* unit = &l->units[0];
        for (int u = 0; u < l->num_units; u++) { // the run's unit: its packed length counts the padding
            size_t at = ss == 0 ? l->units[u].offset : l->units[u].shard_offset;
            if (at == r->owned) { unit = &l->units[u]; }
        }
        r->packed = p->frag_count[r->fragment];
        p->frag_count[r->fragment] += ss == 0 ? unit->size : unit->slice;
        p->frag_runs[r->fragment + 1] = i + 1;
    }
    for (int f = 1; f <= F; f++) {
        if (p->frag_runs[f] < p->frag_runs[f - 1]) { p->frag_runs[f] = p->frag_runs[f - 1]; }
    }
    for (int f = 0; f < F; f++) {
        p->held_off[f + 1] = p->held_off[f] + round_up(p->frag_count[f], R);
        if (p->frag_count[f] > p->frag_max) { p->frag_max = p->frag_count[f]; }
    }
}

static void dp_plan_free(DpPlan* p) {
    void* arrays[] = {p->spans, p->sync_spans, p->buckets, p->runs, p->frag_runs, p->frag_count, p->held_off};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) { free(arrays[i]); }
    shard_layout_free(&p->layout);
}

// Where a span of the sync's elements lies in AdamW's arrays (the master weights): at its parameters
// in ZeRO 0 (AdamW's order is the parameters'), else at its place in the sync's order (the same slices).
static size_t dp_span_adam(const DpPlan* p, const OwnedSpan* sp) {
    return p->zero_stage == 0 ? sp->param_offset : sp->owned_offset;
}

// fragment f's packed length rounded up to R slices, and one slice of it.
static size_t dp_frag_padded(const DpPlan* p, int f) { return round_up(p->frag_count[f], p->mesh.dp_replicate); }
static size_t dp_frag_slice(const DpPlan* p, int f) { return dp_frag_padded(p, f) / p->mesh.dp_replicate; }

// Host arrays: a packed buffer of every fragment's held values (fragment f's at held_off[f]) to
// the sync's order (to_owned 1; padding 0) or back (0).
static void dp_plan_held_owned(const DpPlan* p, float* held, float* owned_order, int to_owned) {
    if (to_owned) { memset(owned_order, 0, p->sync_owned * sizeof(float)); }
    for (int f = 0; f < p->num_fragments; f++) {
        for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
            const DpRun* r = &p->runs[i];
            float* h = held + p->held_off[f] + r->packed;
            float* o = owned_order + r->owned;
            memcpy(to_owned ? o : h, to_owned ? h : o, r->count * sizeof(float));
        }
    }
}

#endif
