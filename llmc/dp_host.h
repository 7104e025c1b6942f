// The data-parallel layer's host backend (the CPU trainer's ZeRO core): stages 0, 1, 2 on fp32 host
// buffers (docs/design.md sections 3, 4) over a dp_replicate x dp_shard mesh, through the ring
// collectives of llmc/comm_mpi.h (a fixed summation order, every byte counted): the gradients
// reduced (the shard group's reduce-scatter during backward, the replicas' all-reduce), their norm,
// the optimizer on the owned elements (llmc/cpu_optimizer.h: AdamW, Muon's whole matrices on
// their owners), the parameter all-gather, and the optimizer's arrays of a state file. The plan is
// llmc/dp_plan.h's. The replica sync (-ls, -rq/-rk) sits above, in llmc/replica_host.h, reaching
// in through HostSyncHooks alone. The model stays the trainer's: it hands over its parameter and
// gradient blocks and calls host_dp_grads_ready from backward.
#ifndef LLMC_DP_HOST_H
#define LLMC_DP_HOST_H

#include <math.h>
#include "utils.h"
#include "dp_plan.h"
#include "ckpt_state_file.h"
#include "comm_mpi.h"
#include "optimizer.h"
#include "cpu_optimizer.h"
#include "op_profile.h"
#include "cpu_memory.h"
#include "dp_ops.h"
#include "muon_plan.h"

// A collective timed as communication (-op 1), with the bytes it sent (untimed on the -lo
// communication thread: the profile is the trainer thread's).
#define COMM_TIMED(call)                                                                          \
    do {                                                                                          \
        if (comm_on_worker) {                                                                     \
            call;                                                                                 \
            break;                                                                                \
        }                                                                                         \
        size_t comm_sent0_ = comm_bytes_sent;                                                     \
        OP_TIMED(OP_COMM, 0.0, (double)(comm_bytes_sent - comm_sent0_), call);                    \
    } while (0)


// What the replica sync (llmc/replica_host.h) adds to the core's step and state files; every entry
// NULL without one.
typedef struct {
    void* ctx;
    // After the shard group's reduction, with every step's gradients averaged over the world:
    // whether this step sums them over the replicas itself (a compressed link: 1) or leaves it to
    // the core (0); then, where it does, the sum of the shard's slices (shard_grads; ZeRO 0: grads).
    int (*wire_sums)(void* ctx);
    void (*sum_gradients)(void* ctx);
    // A state file's arrays beyond the optimizer's: filled in for writing s, or (s NULL) as the
    // targets of a read; then done, with what was read (got, NULL after a write).
    void (*state_arrays)(void* ctx, const TrainState* s, StateArrays* arrays);
    void (*state_done)(void* ctx, const TrainState* got);
} HostSyncHooks;

typedef struct HostDP {
    DpPlan plan;
    CommGroup world, shard, replica;
    float* params;           // the model's parameters (the trainer's block)
    float* grads;            // the model's gradient block (ZeRO 0, 1: every gradient; 2: the globals and one layer)
    float** unit_grads;      // where each unit's full gradient lives
    int last_micro_step;     // set by the training loop: 1 during the step's last backward
    int replica_reduce;      // 1: gradients averaged over every rank; 0 (-ls): over the shard group only
    float* opt_m;            // AdamW's m and v (owned elements); -opt muon: m holds Muon's momentum of its
    float* opt_v;            // matrices (their v stays 0)
    int muon;                // -opt muon (ZeRO 0: every rank orthogonalizes every matrix)
    MuonWork muon_work;
    GPT2Config muon_model;   // the shapes of its matrices
    int muon_sharded;        // ZeRO 1, 2: each matrix owned whole by one rank (llmc/muon_plan.h)
    MuonPlan muon_plan;      // their owners, this rank's whole buffers
    float* muon_pack;        // R > 1: the replicas' all-reduce of the other slices, then muon_acc
    float* muon_acc;         // the owned matrices' gradients, reduced (fp32; micro-steps and replicas summed in)
    float* muon_mom;         // their momentum (the state files: AdamW's m, sliced)
    float* muon_piece;       // a reduce's landing piece
    float* shard_grads;      // stages 1, 2: this rank's reduced gradient slices (padded to dp_replicate)
    float* scratch;          // a padded unit, or the stage-0 all-reduce slice
    float* ring_tmp;         // one slice
    HostSyncHooks hooks;     // the replica sync's (llmc/replica_host.h), or empty
} HostDP;

// The plan and buffers of rank `rank` of `world` (MPI_COMM_WORLD's) for the model config: params
// and grads its parameter and gradient blocks, grad_tensors[16] where each gradient tensor starts
// (ZeRO 2: the per-layer ones in a one-layer slot, one_layer 1); outer: the run's -ls settings.
static void host_dp_init(HostDP* dp, const GPT2Config* c, int world, int rank, int dp_shard, int zero_stage,
                         const OuterConfig* outer, float* params, float* grads, float* const* grad_tensors,
                         int one_layer) {
    memset(dp, 0, sizeof(*dp));
    DpPlan* p = &dp->plan;
    dp_plan_init(p, c, world, rank, dp_shard, zero_stage, outer);
    const Mesh* mesh = &p->mesh;
    comm_group_from(&dp->world, MPI_COMM_WORLD);
    MPI_Comm shard_comm, replica_comm;
    MPI_Comm_split(MPI_COMM_WORLD, mesh->replicate_idx, mesh->shard_idx, &shard_comm);
    MPI_Comm_split(MPI_COMM_WORLD, mesh->shard_idx, mesh->replicate_idx, &replica_comm);
    comm_group_from(&dp->shard, shard_comm);
    comm_group_from(&dp->replica, replica_comm);
    dp->params = params;
    dp->grads = grads;
    dp->replica_reduce = 1;
    const ShardLayout* l = &p->layout;
    dp->opt_m = (float*)cpu_zeroed_touched(p->owned, sizeof(float), "AdamW's m");
    dp->opt_v = (float*)cpu_zeroed_touched(p->owned, sizeof(float), "AdamW's v");
    int ls = outer->every > 0;
    size_t padded_shard = round_up(l->shard_elements, mesh->dp_replicate);
    dp->shard_grads = zero_stage == 0 ? NULL : (float*)calloc_check(padded_shard, sizeof(float));
    // scratch: a padded unit (stages 1, 2, and a sync sharded over ZeRO 0's shard group) or one slice
    // of the stage-0 all-reduce (over the shard group with -ls, or the outer sync's over the
    // replicas); ring_tmp: the largest slice a ring step receives
    int groups = mesh->dp_shard < mesh->dp_replicate ? mesh->dp_shard : mesh->dp_replicate;
    size_t scratch = zero_stage == 0 ? ceil_div(p->num_parameters, ls ? groups : world) : l->max_padded;
    if (p->sync_stage != 0 && scratch < l->max_padded) { scratch = l->max_padded; }
    size_t tmp = zero_stage == 0 ? 1 : l->max_padded / mesh->dp_shard;
    if (zero_stage != 0 && padded_shard / mesh->dp_replicate > tmp) { tmp = padded_shard / mesh->dp_replicate; }
    int compressed = outer_compressed(outer);
    if (compressed && !ls && zero_stage == 0) { // -ls 0's shard-group all-reduce of the gradient
        scratch = ceil_div(p->num_parameters, mesh->dp_shard);
    }
    dp->scratch = (float*)calloc_check(scratch, sizeof(float));
    dp->ring_tmp = (float*)calloc_check(tmp, sizeof(float));
    dp->unit_grads = (float**)malloc_check(l->num_units * sizeof(float*));
    for (int u = 0; u < l->num_units; u++) { // in stage 2 the one-layer slot serves every layer
        const ShardUnit* unit = &l->units[u];
        size_t layer_offset = (one_layer || unit->layer < 0) ? 0 : unit->layer * unit->size;
        dp->unit_grads[u] = grad_tensors[unit->tensor] + layer_offset;
    }
}


// ----------------------------------------------------------------------------
// the ZeRO step

static int host_dp_owned_whole(const HostDP* dp, int u) { return dp->muon_sharded && dp->muon_plan.owner[u] >= 0; }

// Reduce-scatters one unit's gradient over the shard group and adds this rank's slice of the
// sum into shard_grads; a Muon matrix owned whole (-opt muon) is reduced to its owner, which adds
// the sum into muon_acc.
static void host_dp_reduce_scatter_unit(HostDP* dp, int u) {
    const ShardUnit* unit = &dp->plan.layout.units[u];
    float* buf = dp->scratch;
    memcpy(buf, dp->unit_grads[u], unit->size * sizeof(float));
    if (host_dp_owned_whole(dp, u)) {
        const MuonPlan* o = &dp->muon_plan;
        COMM_TIMED(chain_reduce(&dp->shard, buf, unit->size, o->owner[u], dp->muon_piece));
        if (o->at[u] == SIZE_MAX) { return; }
        float* acc = dp->muon_acc + o->at[u];
        for (size_t i = 0; i < unit->size; i++) { acc[i] += buf[i]; }
        return;
    }
    memset(buf + unit->size, 0, (unit->slice * dp->shard.size - unit->size) * sizeof(float));
    COMM_TIMED(ring_reduce_scatter(&dp->shard, buf, unit->slice, dp->ring_tmp));
    float* mine = buf + (size_t)dp->shard.rank * unit->slice;
    float* acc = dp->shard_grads + unit->shard_offset;
    for (size_t i = 0; i < unit->slice; i++) { acc[i] += mine[i]; }
}

// Backward's report that `layer`'s gradients (-1: wte, wpe, lnfw, lnfb, last) are complete: stage
// 1 reduce-scatters them on the last micro-step, stage 2 on every one. Returns 1 where the model's
// gradients are then to be marked zero for the next micro-step (stage 2 after the last bucket:
// every backward writes, not adds, each layer into the one-layer slot).
static int host_dp_grads_ready(HostDP* dp, int layer) {
    const DpPlan* p = &dp->plan;
    if (!zero_reduces_in_micro_step(p->zero_stage, dp->last_micro_step)) { return 0; }
    const DpBucket* b = &p->buckets[layer >= 0 ? layer : p->layout.num_layers];
    for (int u = b->first; u < b->first + b->count; u++) { host_dp_reduce_scatter_unit(dp, u); }
    return p->zero_stage == 2 && layer < 0;
}


// Muon's matrices owned whole and their slices in the shard layout (every rank of the shard group
// calls it): to_slices 1 sends each owner's whole unit (in whole: muon_acc or muon_mom) out as each
// rank's slice of `slices` (a shard-layout array: shard_grads, m); 0 gathers the slices back into
// the owner's whole buffer.
static void host_dp_muon_slices(HostDP* dp, float* whole, float* slices, int to_slices) {
    const ShardLayout* l = &dp->plan.layout;
    const MuonPlan* o = &dp->muon_plan;
    int S = dp->shard.size, me = dp->shard.rank;
    for (int u = 0; u < l->num_units; u++) {
        if (!host_dp_owned_whole(dp, u)) { continue; }
        const ShardUnit* unit = &l->units[u];
        int owner = o->owner[u];
        for (int k = 0; k < S; k++) {
            int r = (owner + k) % S;
            size_t first, n = unit_owned(unit, r, &first);
            float* w = me == owner ? whole + o->at[u] + first : NULL;
            float* mine = slices + unit->shard_offset;
            if (n == 0 || (me != owner && me != r)) { continue; }
            if (r == owner) { // the owner's own slice
                memcpy(to_slices ? mine : w, to_slices ? w : mine, n * sizeof(float));
            } else if (me == owner) {
                COMM_TIMED(to_slices ? comm_transfer(&dp->shard, w, r, NULL, -1, n)
                                     : comm_transfer(&dp->shard, NULL, -1, w, r, n));
            } else {
                COMM_TIMED(to_slices ? comm_transfer(&dp->shard, NULL, -1, mine, owner, n)
                                     : comm_transfer(&dp->shard, mine, owner, NULL, -1, n));
            }
        }
    }
}

// The owned matrices' slices of a shard-layout array set to 0 (shard_grads: their gradients live in muon_acc).
static void host_dp_muon_zero_slices(HostDP* dp, float* slices) {
    const ShardLayout* l = &dp->plan.layout;
    for (int u = 0; u < l->num_units; u++) {
        if (host_dp_owned_whole(dp, u)) { memset(slices + l->units[u].shard_offset, 0, l->units[u].slice * sizeof(float)); }
    }
}

// R > 1 replicas, the owned matrices' gradients in muon_acc: the shard's other slices and muon_acc
// summed over the replicas in one all-reduce of the pack (AdamW's bytes but for the padding).
static void host_dp_muon_replica_sum(HostDP* dp) {
    const MuonPlan* o = &dp->muon_plan;
    size_t k = 0;
    for (size_t r = 0; r < o->num_runs; k += o->run_n[r++]) {
        memcpy(dp->muon_pack + k, dp->shard_grads + o->run_at[r], o->run_n[r] * sizeof(float));
    }
    COMM_TIMED(ring_all_reduce(&dp->replica, dp->muon_pack, o->pack_elements, dp->ring_tmp));
    k = 0;
    for (size_t r = 0; r < o->num_runs; k += o->run_n[r++]) {
        memcpy(dp->shard_grads + o->run_at[r], dp->muon_pack + k, o->run_n[r] * sizeof(float));
    }
}

// After the last micro-step: finish the reduction across ranks and average over the world (or,
// with -ls between syncs, over the replica's shard group: the replicas keep their own gradients).
static void host_dp_finish_gradients(HostDP* dp) {
    const DpPlan* p = &dp->plan;
    CommGroup* group = dp->replica_reduce ? &dp->world : &dp->shard;
    if (group->size == 1) { return; } // nothing to reduce, and the average is the gradient itself
    float inv = 1.0f / (float)group->size;
    size_t whole = dp->muon_sharded ? dp->muon_plan.elements : 0;
    if (dp->replica_reduce && dp->replica.size > 1 && dp->hooks.wire_sums && dp->hooks.wire_sums(dp->hooks.ctx)) {
        // the wire sums the shard's slices: the owned matrices' gradients go out to theirs and back
        if (dp->muon_sharded) { host_dp_muon_slices(dp, dp->muon_acc, dp->shard_grads, 1); }
        dp->hooks.sum_gradients(dp->hooks.ctx);
        if (dp->muon_sharded) {
#ifndef MUON_PLANT_WIRE_NO_GATHER // dev/test_muon.py plant: each replica keeps its own sum of them
            host_dp_muon_slices(dp, dp->muon_acc, dp->shard_grads, 0);
#endif
            host_dp_muon_zero_slices(dp, dp->shard_grads);
        }
        float* g = p->zero_stage == 0 ? dp->grads : dp->shard_grads;
        for (size_t i = 0; i < p->owned; i++) { g[i] *= inv; }
        for (size_t i = 0; i < whole; i++) { dp->muon_acc[i] *= inv; }
        return;
    }
    if (p->zero_stage == 0) {
        size_t padded = round_up(p->num_parameters, group->size);
        COMM_TIMED(ring_all_reduce(group, dp->grads, padded, dp->scratch));
        for (size_t i = 0; i < p->num_parameters; i++) { dp->grads[i] *= inv; }
    } else {
        if (dp->replica_reduce && dp->muon_sharded && dp->replica.size > 1) {
            host_dp_muon_replica_sum(dp);
        } else if (dp->replica_reduce) {
            size_t padded = round_up(p->layout.shard_elements, dp->replica.size);
            COMM_TIMED(ring_all_reduce(&dp->replica, dp->shard_grads, padded, dp->ring_tmp));
        }
        for (size_t i = 0; i < p->layout.shard_elements; i++) { dp->shard_grads[i] *= inv; }
        for (size_t i = 0; i < whole; i++) { dp->muon_acc[i] *= inv; }
    }
}

// Sum of squares of x[0..n) in double, in 64 fixed chunks: the same result for any thread count.
// A chunk sums in 8 lane partials (lane l takes its elements l, l + 8, ..., fused), combined as a
// tree (l + 4, + 2, + 1): the same order whatever the vector width (llmc/cpu_vecmath.h).
static double host_sum_of_squares(const float* x, size_t n) {
    double parts[64];
    #pragma omp parallel for schedule(static)
    for (int p = 0; p < 64; p++) {
        size_t i0 = n * p / 64, i1 = n * (p + 1) / 64, i = i0;
        double l[8] = {0};
        for (; i + 8 <= i1; i += 8) {
            for (int j = 0; j < 8; j++) { l[j] = __builtin_fma((double)x[i + j], (double)x[i + j], l[j]); }
        }
        for (int j = 0; i + j < i1; j++) { l[j] = __builtin_fma((double)x[i + j], (double)x[i + j], l[j]); }
        for (int h = 4; h >= 1; h /= 2) {
            for (int j = 0; j < h; j++) { l[j] += l[j + h]; }
        }
        parts[p] = l[0];
    }
    double total = 0.0;
    for (int p = 0; p < 64; p++) { total += parts[p]; }
    return total;
}

// The norm of the full averaged gradient (slices summed over the shard group only).
static float host_dp_grad_norm(HostDP* dp) {
    const DpPlan* p = &dp->plan;
    double sq;
    if (p->zero_stage == 0) {
        size_t n = p->num_parameters;
        OP_TIMED(OP_GRAD_NORM, 0.0, 4.0 * (double)n, sq = host_sum_of_squares(dp->grads, n));
        return (float)sqrt(sq);
    }
    size_t n = p->layout.shard_elements;
    OP_TIMED(OP_GRAD_NORM, 0.0, 4.0 * (double)n, sq = host_sum_of_squares(dp->shard_grads, n));
    if (dp->muon_sharded) { // the owned matrices' gradients (their slices in shard_grads hold 0)
        size_t w = dp->muon_plan.elements;
        double owned_sq;
        OP_TIMED(OP_GRAD_NORM, 0.0, 4.0 * (double)w, owned_sq = host_sum_of_squares(dp->muon_acc, w));
        sq += owned_sq;
    }
    float total;
    COMM_TIMED(total = all_reduce_sum_scalar(&dp->shard, (float)sq));
    return sqrtf(total);
}

// Stages 1, 2: unit u's parameters all-gathered over the shard group from each rank's slice.
static void host_dp_all_gather_unit(HostDP* dp, int u) {
    const ShardUnit* unit = &dp->plan.layout.units[u];
    size_t first;
    size_t count = unit_owned(unit, dp->shard.rank, &first);
    float* p = dp->params + unit->offset;
    float* buf = dp->scratch;
    memset(buf + first, 0, unit->slice * sizeof(float));
    memcpy(buf + first, p + first, count * sizeof(float));
    COMM_TIMED(ring_all_gather(&dp->shard, buf, unit->slice));
    memcpy(p, buf, unit->size * sizeof(float));
}

// -opt muon: Muon's work space, for the model's largest block matrix, and (ZeRO 1, 2) each
// layer's matrices owned whole by one rank of the shard group (llmc/muon_plan.h; with split_qkv,
// -mq 1, a layer's qkvw is three matrices, one owner). ZeRO 0: every rank orthogonalizes every matrix.
static void host_dp_init_muon(HostDP* dp, const GPT2Config* c, int split_qkv) {
    const DpPlan* p = &dp->plan;
    dp->muon = 1;
    dp->muon_model = *c;
    size_t C = (size_t)c->channels;
    muon_work_alloc(&dp->muon_work, 4 * C * C, C);
    if (p->zero_stage == 0) { return; }
    dp->muon_sharded = 1;
    MuonPlan* o = &dp->muon_plan;
    int R = dp->replica.size;
    muon_plan_init(o, &p->layout, c, split_qkv, dp->shard.size, dp->shard.rank, R);
    size_t n = o->elements > 0 ? o->elements : 1;
    if (R > 1) {
        dp->muon_pack = (float*)calloc_check(o->pack_elements, sizeof(float));
        dp->muon_acc = dp->muon_pack + o->others;
        size_t tmp = o->pack_elements / R; // the pack's ring slice
        if (tmp < p->layout.max_padded / dp->shard.size) { tmp = p->layout.max_padded / dp->shard.size; }
        if (tmp < round_up(p->layout.shard_elements, R) / R) { tmp = round_up(p->layout.shard_elements, R) / R; }
        free(dp->ring_tmp);
        dp->ring_tmp = (float*)calloc_check(tmp, sizeof(float));
    } else {
        dp->muon_acc = (float*)calloc_check(n, sizeof(float));
    }
    dp->muon_mom = (float*)calloc_check(n, sizeof(float));
    size_t piece = p->layout.max_padded < ((size_t)1 << 16) ? p->layout.max_padded : ((size_t)1 << 16);
    dp->muon_piece = (float*)calloc_check(piece, sizeof(float));
    o->bytes = ((R > 1 ? o->pack_elements : n) + n + piece) * sizeof(float);
}

// Muon on n elements of parameter tensor `tensor`'s matrices (rows x cols each, whole here): params,
// their gradients (times grad_scale) and momentum.
static void host_dp_muon_matrices(HostDP* dp, int tensor, float* params, const float* grads, float* mom, size_t n,
                                  const MuonConfig* h, float grad_scale) {
    int rows, cols;
    muon_matrix_shape(&dp->muon_model, tensor, h->split_qkv, &rows, &cols);
    size_t per = (size_t)rows * cols;
    for (size_t at = 0; at < n; at += per) {
        OP_TIMED(OP_MUON, muon_ns_flops(rows, cols, h->ns_steps), 4.0 * 6.0 * (double)per,
                 host_muon_update(params + at, grads + at, mom + at, rows, cols, grad_scale, h, &dp->muon_work));
    }
}

// The update (t = 1-based step) of what this rank owns (ZeRO 0: tensor by tensor; -opt muon: each
// layer's block matrices by Muon, the rest by AdamW), then (stages 1, 2) the parameter all-gather;
// a Muon matrix owned whole is stepped on its owner and broadcast from it down the chain.
static void host_dp_optimizer_step(void* ctx, const OptimizerConfig* o, float grad_scale, int t) {
    HostDP* dp = (HostDP*)ctx;
    const DpPlan* p = &dp->plan;
    const AdamWConfig* h = &o->adamw;
    float bias1, bias2;
    adamw_bias_corrections(h, t, &bias1, &bias2);
    if (p->zero_stage == 0) {
        size_t off = 0;
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            size_t n = p->tensor_sizes[i];
            if (o->kind == OPT_MUON && parameter_is_muon[i]) {
                host_dp_muon_matrices(dp, i, dp->params + off, dp->grads + off, dp->opt_m + off, n, &o->muon,
                                      grad_scale);
                off += n;
                continue;
            }
            float wd = adamw_weight_decay(h, i);
            OP_TIMED(OP_ADAMW, 0.0, 4.0 * 7.0 * (double)n,
                     host_adamw_update(dp->params + off, dp->grads + off, dp->opt_m + off, dp->opt_v + off, n,
                                       grad_scale, wd, h, bias1, bias2));
            off += n;
        }
        return;
    }
    int s = dp->shard.rank;
    for (int u = 0; u < p->layout.num_units; u++) {
        const ShardUnit* unit = &p->layout.units[u];
        float* pp = dp->params + unit->offset;
        if (host_dp_owned_whole(dp, u)) {
            size_t at = dp->muon_plan.at[u];
            if (at != SIZE_MAX) {
                host_dp_muon_matrices(dp, unit->tensor, pp, dp->muon_acc + at, dp->muon_mom + at, unit->size, &o->muon,
                                      grad_scale);
            }
            COMM_TIMED(chain_broadcast(&dp->shard, pp, unit->size, dp->muon_plan.owner[u]));
            continue;
        }
        size_t first;
        size_t count = unit_owned(unit, s, &first);
        float wd = adamw_weight_decay(h, unit->tensor);
        OP_TIMED(OP_ADAMW, 0.0, 4.0 * 7.0 * (double)count,
                 host_adamw_update(pp + first, dp->shard_grads + unit->shard_offset, dp->opt_m + unit->shard_offset,
                                   dp->opt_v + unit->shard_offset, count, grad_scale, wd, h, bias1, bias2));
        host_dp_all_gather_unit(dp, u);
    }
}

static void host_dp_zero_shard_grads(HostDP* dp) {
    if (dp->shard_grads) {
        memset(dp->shard_grads, 0, round_up(dp->plan.layout.shard_elements, dp->replica.size) * sizeof(float));
    }
    if (dp->muon_sharded) { memset(dp->muon_acc, 0, dp->muon_plan.elements * sizeof(float)); }
}


// ----------------------------------------------------------------------------
// checkpoints: this rank's arrays of a state file (llmc/ckpt_state_file.h)

// m and v (the owned matrices' momentum first scattered into m's slices, gathered back after a
// read), and the replica sync's arrays (its hooks: -ls, -rq/-rk).
static void host_dp_write_state(void* ctx, const char* path, const TrainState* s) {
    HostDP* dp = (HostDP*)ctx;
    if (dp->muon_sharded) { host_dp_muon_slices(dp, dp->muon_mom, dp->opt_m, 1); }
    StateArrays arrays = {{dp->opt_m, dp->opt_v, NULL}};
    if (dp->hooks.state_arrays) { dp->hooks.state_arrays(dp->hooks.ctx, s, &arrays); }
    state_write_arrays(path, s, &arrays);
    if (dp->hooks.state_done) { dp->hooks.state_done(dp->hooks.ctx, NULL); }
}

static void host_dp_read_state(void* ctx, const char* dir, int step, const StateTarget* target, TrainState* got) {
    HostDP* dp = (HostDP*)ctx;
    StateArrays arrays = {{dp->opt_m, dp->opt_v, NULL}};
    if (dp->hooks.state_arrays) { dp->hooks.state_arrays(dp->hooks.ctx, NULL, &arrays); }
    state_load_arrays(dir, step, target, got, &arrays);
    if (dp->muon_sharded) { host_dp_muon_slices(dp, dp->muon_mom, dp->opt_m, 0); }
    if (dp->hooks.state_done) { dp->hooks.state_done(dp->hooks.ctx, got); }
}

// After the last micro-step: the reduction finished, the norm of the averaged gradient.
static float host_dp_reduce_gradients(void* ctx) {
    host_dp_finish_gradients((HostDP*)ctx);
    return host_dp_grad_norm((HostDP*)ctx);
}


// The training loop's view of this layer (llmc/dp_ops.h).
static DataParallelOps host_dp_ops(HostDP* dp) {
    DataParallelOps ops = {dp, host_dp_reduce_gradients, host_dp_optimizer_step, host_dp_write_state, host_dp_read_state};
    return ops;
}


static void host_dp_free(HostDP* dp) {
    float* bufs[] = {dp->opt_m, dp->opt_v, dp->shard_grads, dp->scratch, dp->ring_tmp};
    for (int i = 0; i < 5; i++) { free(bufs[i]); }
    if (dp->muon) { muon_work_free(&dp->muon_work); }
    if (dp->muon_sharded) {
        free(dp->muon_pack ? dp->muon_pack : dp->muon_acc);
        free(dp->muon_mom);
        free(dp->muon_piece);
        muon_plan_free(&dp->muon_plan);
    }
    free(dp->unit_grads);
    dp_plan_free(&dp->plan);
}

#endif
