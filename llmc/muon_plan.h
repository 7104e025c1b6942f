// The plan of Muon's matrices owned whole under ZeRO 1 and 2, one for both trainers' ZeRO cores
// (llmc/dp_host.h, llmc/muon_owned.cuh; docs/design.md, "Muon with shards"): each layer's block
// matrices belong to one rank of the shard group (muon_owners, dealt out by their Newton-Schulz
// FLOPs), which alone keeps their reduced fp32 gradient and momentum, whole, in buffers laid out unit
// after unit (`at`). A unit's reduce-scatter becomes a reduce to its owner and its all-gather a
// broadcast from it; with R > 1 replicas the shard's other slices and the owned gradients travel in
// one packed all-reduce. The bytes a rank sends beyond AdamW's follow from the plan.
#ifndef LLMC_MUON_PLAN_H
#define LLMC_MUON_PLAN_H

#include <stdint.h>
#include "utils.h"
#include "mesh.h"
#include "optimizer.h"
#include "accounting.h"

typedef struct {
    int* owner;            // each unit's owner in the shard group (-1: not a Muon matrix)
    size_t* at;            // where a unit this rank owns starts in the whole buffers (SIZE_MAX: not its)
    size_t elements;       // the elements of the units this rank owns
    int mine;              // the matrices this rank orthogonalizes (-mq 1: a qkvw counts 3)
    double mine_flops, most_flops; // their Newton-Schulz FLOPs, and the busiest rank's
    // R > 1: the pack of the replicas' all-reduce (padded to R): the shard's slices of the other
    // units, as runs of consecutive units (run_at in the shard layout, run_n), then the owned gradients
    size_t others, pack_elements, num_runs, *run_at, *run_n;
    // the elements each shard rank sends beyond AdamW's, MUON_EXTRAS a rank: per reduction of the
    // gradients (the reduces in place of the reduce-scatters), per parameter update (the broadcasts in
    // place of the all-gathers), per replica all-reduce (fp32, its pack in place of the shard), and per
    // -ls 0 compressed sum (fp32: its owned gradients scattered to the slices the wire sums, gathered back)
    int S, me;
    long long* extra;
    size_t bytes;          // this rank's whole buffers (the start-up memory line), set by the backend allocating them
} MuonPlan;

enum { MUON_EXTRA_REDUCE, MUON_EXTRA_GATHER, MUON_EXTRA_PACK, MUON_EXTRA_WIRE, MUON_EXTRAS };

// The plan of layout l (S ranks in the shard group, R replicas) for shard rank me.
static void muon_plan_init(MuonPlan* o, const ShardLayout* l, const GPT2Config* c, int split_qkv, int S, int me, int R) {
    memset(o, 0, sizeof(*o));
    int* units = (int*)malloc_check(l->num_units * sizeof(int));
    double* load = (double*)calloc_check(S, sizeof(double));
    for (int u = 0; u < l->num_units; u++) { units[u] = parameter_is_muon[l->units[u].tensor] ? l->units[u].tensor : -1; }
    o->owner = (int*)malloc_check(l->num_units * sizeof(int));
    o->at = (size_t*)malloc_check(l->num_units * sizeof(size_t));
    muon_owners(units, l->num_units, c, MUON_NS_STEPS, split_qkv, S, o->owner, load);
    o->S = S, o->me = me;
    o->extra = (long long*)calloc_check((size_t)S * MUON_EXTRAS, sizeof(long long));
    size_t* elements = (size_t*)calloc_check(S, sizeof(size_t)); // each rank's owned elements
    for (int u = 0; u < l->num_units; u++) {
        const ShardUnit* unit = &l->units[u];
        int owner = o->owner[u];
        o->at[u] = SIZE_MAX;
        if (owner < 0) { continue; }
        if (owner == me) {
            o->at[u] = o->elements;
            o->elements += unit->size;
            o->mine += muon_matrices_per_layer(c, unit->tensor, split_qkv);
        }
        elements[owner] += unit->size;
        for (int r = 0; r < S && S > 1; r++) {
            // a reduce: every rank but the owner sends the unit once; a broadcast: every rank but the
            // chain's last (the owner's predecessor); AdamW's reduce-scatter and all-gather: S - 1 slices each
            long long n = (long long)unit->size, adamw = (long long)(S - 1) * (long long)unit->slice;
            long long* x = o->extra + r * MUON_EXTRAS;
            size_t first, mine = unit_owned(unit, r, &first), theirs = unit_owned(unit, owner, &first);
            x[MUON_EXTRA_REDUCE] += (r != owner ? n : 0) - adamw;
            x[MUON_EXTRA_GATHER] += (r != (owner + S - 1) % S ? n : 0) - adamw;
            x[MUON_EXTRA_WIRE] += r == owner ? n - (long long)theirs : (long long)mine; // slices out, then back
        }
    }
    o->mine_flops = load[me];
    for (int r = 0; r < S; r++) { o->most_flops = fmax(o->most_flops, load[r]); }
    o->run_at = (size_t*)malloc_check(l->num_units * sizeof(size_t));
    o->run_n = (size_t*)malloc_check(l->num_units * sizeof(size_t));
    for (int u = 0; u < l->num_units;) {
        if (o->owner[u] >= 0) { u++; continue; }
        o->run_at[o->num_runs] = l->units[u].shard_offset;
        o->run_n[o->num_runs] = 0;
        for (; u < l->num_units && o->owner[u] < 0; u++) { o->run_n[o->num_runs] += l->units[u].slice; }
        o->others += o->run_n[o->num_runs++];
    }
    o->pack_elements = round_up(o->others + o->elements, R);
    for (int r = 0; r < S && R > 1; r++) {
        o->extra[r * MUON_EXTRAS + MUON_EXTRA_PACK] = (long long)ring_all_reduce_elements(o->others + elements[r], R) -
                                                      (long long)ring_all_reduce_elements(l->shard_elements, R);
    }
    free(elements);
    free(units);
    free(load);
}

// Shard rank r's bytes per step beyond AdamW's: `reductions` gradient reductions a step (ZeRO 2: one
// per micro-step), grad_bytes and param_bytes per element on the wire; replicas 1 where the core
// all-reduces the gradients over R > 1 replicas every step, 2 where -ls 0's compressed wire sums them.
static long long muon_plan_bytes_delta(const MuonPlan* o, int r, size_t grad_bytes, size_t param_bytes, int reductions,
                                       int replicas) {
    const long long* x = o->extra + r * MUON_EXTRAS;
    return (long long)grad_bytes * x[MUON_EXTRA_REDUCE] * reductions + (long long)param_bytes * x[MUON_EXTRA_GATHER] +
           4 * (replicas == 1 ? x[MUON_EXTRA_PACK] : replicas == 2 ? x[MUON_EXTRA_WIRE] : 0);
}

// muon_plan_bytes_delta's `replicas` for a run of R replicas: 0 where no replica sum runs every
// step (R 1, or -ls every > 0: between syncs), 2 where -ls 0's compressed wire sums, else 1.
static int muon_plan_replicas(int R, int outer_every, int compressed) {
    return R == 1 || outer_every > 0 ? 0 : compressed ? 2 : 1;
}

// The optimizer's start-up lines (optimizer_describe): with the plan o (NULL: ZeRO 0, every rank
// all) this rank's share and, over a shard group of S > 1, the bytes it sends per step (AdamW's
// adamw_bytes plus muon_plan_bytes_delta's with the arguments given) and the most any rank sends.
static void muon_plan_describe(const OptimizerConfig* opt, const GPT2Config* c, size_t num_parameters, int zero_stage,
                               const MuonPlan* o, size_t adamw_bytes, size_t grad_bytes, size_t param_bytes,
                               int reductions, int replicas, char* out, size_t len) {
    optimizer_describe(opt, c, num_parameters, zero_stage, o ? o->mine : -1, o ? o->mine_flops : 0.0,
                       o ? o->most_flops : 0.0, out, len);
    if (!o || o->S == 1) { return; }
    long long delta = muon_plan_bytes_delta(o, o->me, grad_bytes, param_bytes, reductions, replicas), most = delta;
    for (int r = 0; r < o->S; r++) {
        long long d = muon_plan_bytes_delta(o, r, grad_bytes, param_bytes, reductions, replicas);
        most = d > most ? d : most;
    }
    size_t at = strlen(out);
    snprintf(out + at, len - at, "\nmuon communication: %zu bytes sent by this rank per step (AdamW's %zu %+lld; the "
             "most of a shard rank %+lld: its matrices reduced to their owners, broadcast from them, in place of the "
             "reduce-scatters and all-gathers)", (size_t)((long long)adamw_bytes + delta), adamw_bytes, delta, most);
}

static void muon_plan_free(MuonPlan* o) {
    void* bufs[] = {o->owner, o->at, o->run_at, o->run_n, o->extra};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) { free(bufs[i]); }
}

#endif
