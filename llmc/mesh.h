// The data-parallel process mesh and the ZeRO shard layout, shared by both trainers.
// world = dp_replicate x dp_shard. Rank r has shard_idx = r % dp_shard and
// replicate_idx = r / dp_shard; the data rank is replicate_idx * dp_shard + shard_idx (= r)
// and the data-parallel degree is world.
// Sharding works on "units": each of the 12 per-layer tensors of each layer, plus wte, wpe,
// lnfw and lnfb. A unit of n elements is split into S = dp_shard slices of ceil(n/S) elements
// (the last one padded with zeros); shard rank s owns slice s. A rank's optimizer state (and,
// in stage 2, its gradient accumulator) is the concatenation of its slices of every unit.
#ifndef LLMC_MESH_H
#define LLMC_MESH_H

#include "utils.h"
#include "gpt2_model.h"

typedef struct {
    int world, rank;
    int dp_shard, dp_replicate;
    int shard_idx, replicate_idx;
    int dp_rank, dp_degree;
} Mesh;

static void mesh_init(Mesh* m, int world, int rank, int dp_shard) {
    if (dp_shard <= 0) { dp_shard = world; }
    if (world % dp_shard != 0) {
        fail("-ds %d: world size %d is not a multiple of the shard group size", dp_shard, world);
    }
    m->world = world;
    m->rank = rank;
    m->dp_shard = dp_shard;
    m->dp_replicate = world / dp_shard;
    m->shard_idx = rank % dp_shard;
    m->replicate_idx = rank / dp_shard;
    m->dp_degree = world;
    m->dp_rank = m->replicate_idx * dp_shard + m->shard_idx;
}

#define UNITS_PER_LAYER 12

typedef struct {
    int tensor;          // parameter tensor index (0..15)
    int layer;           // layer, or -1 for wte, wpe, lnfw, lnfb
    size_t offset;       // first element in the flat parameter block
    size_t size;         // elements
    size_t slice;        // ceil(size / S): elements per shard slice
    size_t shard_offset; // where this unit's slice starts in a rank's shard buffers
} ShardUnit;

typedef struct {
    int S;                  // shard group size
    int num_layers;
    int num_units;          // 12 L + 4: layer l's units are [12 l, 12 l + 12), then wte, wpe, lnfw, lnfb
    ShardUnit* units;
    size_t shard_elements;  // sum of slices: elements of one rank's shard
    size_t max_padded;      // largest S * slice: size of a collective scratch buffer
    size_t layer_elements;  // elements of one layer's 12 tensors
    size_t global_elements; // elements of wte, wpe, lnfw, lnfb
} ShardLayout;

static void shard_layout_init(ShardLayout* s, const GPT2Config* c, int S) {
    size_t sizes[NUM_PARAMETER_TENSORS], offsets[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_parameter_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { offsets[i] = off; off += sizes[i]; }
    int L = c->num_layers;
    s->S = S;
    s->num_layers = L;
    s->num_units = UNITS_PER_LAYER * L + 4;
    s->units = (ShardUnit*)malloc_check(s->num_units * sizeof(ShardUnit));
    s->shard_elements = 0;
    s->max_padded = 0;
    s->layer_elements = 0;
    s->global_elements = 0;
    static const int global_tensors[4] = {0, 1, 14, 15};
    for (int u = 0; u < s->num_units; u++) {
        ShardUnit* unit = &s->units[u];
        if (u < UNITS_PER_LAYER * L) {
            unit->layer = u / UNITS_PER_LAYER;
            unit->tensor = 2 + u % UNITS_PER_LAYER;
            size_t per_layer = sizes[unit->tensor] / L;
            unit->size = per_layer;
            unit->offset = offsets[unit->tensor] + unit->layer * per_layer;
            if (unit->layer == 0) { s->layer_elements += per_layer; }
        } else {
            unit->layer = -1;
            unit->tensor = global_tensors[u - UNITS_PER_LAYER * L];
            unit->size = sizes[unit->tensor];
            unit->offset = offsets[unit->tensor];
            s->global_elements += unit->size;
        }
        unit->slice = ceil_div(unit->size, S);
        unit->shard_offset = s->shard_elements;
        s->shard_elements += unit->slice;
        if (unit->slice * S > s->max_padded) { s->max_padded = unit->slice * S; }
    }
}

static void shard_layout_free(ShardLayout* s) { free(s->units); }

// ----------------------------------------------------------------------------
// Step logic both trainers follow (docs/design.md section 4).

// Whether backward reduce-scatters each finished layer in this micro-step: stage 1 on the
// step's last micro-step only, stage 2 on every one, stage 0 never (it all-reduces afterwards).
static int zero_reduces_in_micro_step(int zero_stage, int last_micro_step) {
    return zero_stage == 2 || (zero_stage == 1 && last_micro_step);
}

// The layout of the replica sync's elements (-ls: the outer parameters and momentum, the residual,
// the exchange): the ZeRO stage's, but with ZeRO 0 and -ls on S > 1 ranks per replica the ZeRO-1
// slices (1), so that each rank of a replica keeps and sends 1/S of them (AdamW still updates
// every element there).
static int sync_stage_of(int zero_stage, int ls_every, int dp_shard) {
    return zero_stage == 0 && ls_every > 0 && dp_shard > 1 ? 1 : zero_stage;
}

// The units whose gradients are complete when backward reports `layer`: that layer's 12
// tensors, or (layer -1, reported last) wte, wpe, lnfw and lnfb.
static void layer_units(const ShardLayout* s, int layer, int* first, int* count) {
    *first = layer >= 0 ? layer * UNITS_PER_LAYER : UNITS_PER_LAYER * s->num_layers;
    *count = layer >= 0 ? UNITS_PER_LAYER : 4;
}

// The elements of a unit that shard rank s owns: [*first, *first + return value). The last
// ranks' slices may be short or empty (the padding).
static size_t unit_owned(const ShardUnit* u, int s, size_t* first) {
    *first = (size_t)s * u->slice;
    if (*first >= u->size) { return 0; }
    return u->size - *first < u->slice ? u->size - *first : u->slice;
}

#endif
