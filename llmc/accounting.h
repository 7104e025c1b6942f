// Byte accounting, closed forms of what a rank holds and sends for a mesh and ZeRO stage: the
// memory per rank (parameters, gradients, optimizer state) and the bytes communicated per
// optimizer step. The trainers print them at start; the tests compare them with what the
// communication layer really sent. The formulas are derived in docs/distributed.md.
#ifndef LLMC_ACCOUNTING_H
#define LLMC_ACCOUNTING_H

#include "utils.h"
#include "mesh.h"
#include "outer_sync.h"

// Closed forms. Collectives are rings: on a group of G ranks, a reduce-scatter or an
// all-gather of G slices of k elements sends (G-1) k elements per rank, and an all-reduce of
// n elements (padded to G ceil(n/G)) sends 2 (G-1) ceil(n/G).

static size_t ring_reduce_scatter_elements(size_t slice, int G) { return (size_t)(G - 1) * slice; }
static size_t ring_all_gather_elements(size_t slice, int G) { return (size_t)(G - 1) * slice; }
static size_t ring_all_reduce_elements(size_t n, int G) { return 2 * (size_t)(G - 1) * ceil_div(n, G); }

typedef struct {
    size_t grad_reduce; // gradient reduce-scatters / all-reduces within the shard group or world
    size_t replica;     // all-reduce of the gradient shard across replicas (-ls: the outer sync's, per step)
    size_t param_gather;// all-gather of the updated parameters
    size_t scalars;     // loss and grad-norm all-reduces
    size_t total;
    // -ls H (0 otherwise): the fields above are averaged over an H-step window (rounded); a step
    // without an outer sync sends step_no_sync, a sync adds sync_replica across the replicas and
    // sync_inner inside the shard group; synchronous training would send replica_sync_training
    // across the replicas every step.
    int sync_every;
    size_t step_no_sync, sync_replica, sync_inner, replica_sync_training;
    int wire;                  // -rq: the format of sync_replica (-ls 0: of replica), after -rqs
    float topk;                // -rk
    size_t sync_replica_fp32;  // what sync_replica (-ls 0: replica) would be in fp32
    // -lf F > 1: sync_replica and sync_inner are the sums of the F fragments' syncs of a window
    // (each with its own checksum exchange and norm scalar); the largest fragment's sync sends
    // sync_replica_peak across the replicas.
    int fragments;
    size_t sync_replica_peak;
} CommBytes;

// Bytes each rank sends per optimizer step. grad_bytes: bytes per gradient element on the
// wire (4 for fp32, 2 for bf16); param_bytes likewise for the parameter all-gather; master_bytes
// 4 where fp32 master weights sit beside the parameters (a ZeRO 0 replica sync all-gathers them
// too), else 0. outer: -ls (NULL or every 0: synchronous training).
static CommBytes comm_bytes_per_step(const ShardLayout* s, const Mesh* m, int zero_stage, int grad_accum,
                                     size_t num_parameters, size_t grad_bytes, size_t param_bytes,
                                     size_t master_bytes, const OuterConfig* outer) {
    CommBytes b;
    memset(&b, 0, sizeof(b));
    int S = m->dp_shard, R = m->dp_replicate, W = m->world;
    int local = outer && outer->every > 0; // the replicas do not reduce gradients every step
    int wire = outer && outer->every == 0 && outer_compressed(outer) && R > 1; // -ls 0 with -rq/-rk
    b.scalars = ring_all_reduce_elements(1, W) * 4; // the step's loss, over all ranks
    int sync_stage = sync_stage_of(zero_stage, local, S);
    size_t owned = sync_stage == 0 ? num_parameters : s->shard_elements; // the replica sync's elements
    size_t replica_grads = 0, all_gather = 0;
    for (int u = 0; u < s->num_units; u++) { all_gather += ring_all_gather_elements(s->units[u].slice, S); }
    if (zero_stage == 0) {
        b.grad_reduce = ring_all_reduce_elements(num_parameters, local || wire ? S : W) * grad_bytes;
        // the part of the world all-reduce that a shard-group all-reduce would not send
        replica_grads = (ring_all_reduce_elements(num_parameters, W) - ring_all_reduce_elements(num_parameters, S)) *
                        grad_bytes;
        b.replica = wire ? outer_wire_bytes(num_parameters, outer, R) : 0;
    } else {
        size_t rs = 0;
        for (int u = 0; u < s->num_units; u++) { rs += ring_reduce_scatter_elements(s->units[u].slice, S); }
        int reduce_scatters = zero_stage == 1 ? 1 : grad_accum;
        b.grad_reduce = rs * reduce_scatters * grad_bytes;
        replica_grads = ring_all_reduce_elements(s->shard_elements, R) * 4; // fp32 shard accumulator
        b.replica = local ? 0 : wire ? outer_wire_bytes(s->shard_elements, outer, R) : replica_grads;
        b.param_gather = all_gather * param_bytes;
        b.scalars += ring_all_reduce_elements(1, S) * 4;                // squared norm over the shard group
    }
    b.total = b.grad_reduce + b.replica + b.param_gather + b.scalars;
    if (wire) {
        b.wire = outer->wire;
        b.topk = outer->topk;
        b.sync_replica_fp32 = replica_grads;
    }
    if (local) {
        int H = outer->every;
        b.sync_every = H;
        b.step_no_sync = b.total;
        OuterConfig fp32 = outer_config_at(outer, 0); // step 0 <= -rqs: fp32, every value
        OuterConfig late = outer_config_at(outer, outer->wire_start + 1);
        int F = outer_num_fragments(outer);
        for (int f = 0; f < F; f++) {
            size_t n = F == 1 ? owned : outer_fragment_owned(s, sync_stage, F, f);
            size_t bytes = outer_sync_replica_bytes(n, &late, R);
            b.sync_replica += bytes;
            b.sync_replica_fp32 += outer_sync_replica_bytes(n, &fp32, R);
            if (bytes > b.sync_replica_peak) { b.sync_replica_peak = bytes; }
        }
        b.fragments = F;
        b.wire = outer->wire;
        b.topk = outer->topk;
        // the synced slices all-gathered again (each fragment its own units; a sharded ZeRO 0 sync also
        // the master weights), a norm scalar per fragment, and each fragment sync's finiteness flag,
        // all-reduced over every rank before its exchange
        size_t gathered = sync_stage == zero_stage ? b.param_gather : all_gather * (param_bytes + master_bytes);
        b.sync_inner = F * (outer_sync_shard_bytes(sync_stage, S) + outer_sync_flag_bytes(W)) + gathered;
        b.replica_sync_training = replica_grads;
        b.replica = (b.sync_replica + H / 2) / H;
        b.scalars += (b.sync_inner + H / 2) / H;
        b.total = b.grad_reduce + b.replica + b.param_gather + b.scalars;
    }
    return b;
}

typedef struct {
    size_t params, grads, optimizer, activations;
    size_t outer; // -ls: the outer parameters and momentum (fp32, the replica sync's elements: llmc/mesh.h's sync_stage_of)
    size_t residual; // -rq with error feedback: the residual (fp32, one per owned element)
    size_t wire; // -rq/-rk (the CPU trainer): the trainer thread's exchange buffers, kept from start-up
    // -lo (the CPU trainer's exchanges in flight): overlap = the sum of the owned local snapshots,
    // the held sums (each fragment's packed messages, padded to the replicas) and the
    // communication thread's exchange buffers (outer_exchange_buffers of the largest fragment)
    size_t overlap, overlap_snap, overlap_held, overlap_wire;
    size_t muon; // -opt muon under ZeRO 1, 2: the owners' whole buffers (llmc/muon_plan.h's bytes)
} MemoryBytes;

// Per-rank bytes for parameters (param_bytes each, plus fp32 master copies when master is
// set), gradients, and optimizer state (fp32 m and v) for the chosen stage. Stage 2 keeps
// layer_slots layers of full gradients (1 on the CPU; 2 on the GPU, where one layer is being
// reduced while the next is computed). outer_state: -ls keeps the outer parameters and momentum
// (8 bytes per element of the replica sync). Activations are the trainer's own count.
static MemoryBytes memory_bytes_per_rank(const ShardLayout* s, int zero_stage, size_t num_parameters,
                                         size_t param_bytes, size_t grad_bytes, int master, int layer_slots,
                                         int outer_state) {
    MemoryBytes mb;
    memset(&mb, 0, sizeof(mb));
    size_t owned = zero_stage == 0 ? num_parameters : s->shard_elements;
    size_t sync_owned = sync_stage_of(zero_stage, outer_state, s->S) == 0 ? num_parameters : s->shard_elements;
    mb.outer = outer_state ? 2 * sync_owned * 4 : 0;
    mb.params = num_parameters * param_bytes + (master ? owned * 4 : 0);
    mb.optimizer = 2 * owned * 4;
    if (zero_stage == 0) {
        mb.grads = num_parameters * grad_bytes;
    } else if (zero_stage == 1) {
        mb.grads = num_parameters * grad_bytes + s->shard_elements * 4;
    } else {
        mb.grads = (s->global_elements + layer_slots * s->layer_elements) * grad_bytes + s->shard_elements * 4;
    }
    return mb;
}

#endif
