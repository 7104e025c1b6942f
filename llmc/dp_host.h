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
    // After the shard group's reduction, with every step's gradients averaged over the world: sums
    // them over the replicas itself (a compressed link, returns 1) or leaves it to the core (0).
    int (*sum_gradients)(void* ctx);
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
    int* muon_owner;         // ZeRO 1, 2: the shard rank that orthogonalizes each unit (-1: not Muon's)
    int muon_mine;           // the matrices this rank orthogonalizes, their FLOPs, the busiest rank's
    double muon_mine_flops, muon_most_flops;
    long long muon_bytes_delta; // ZeRO 1, 2: this rank's bytes per step beyond AdamW's (the slices to the
                                // owners, the chains in place of the all-gathers: may be negative)
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

// Reduce-scatters one unit's gradient over the shard group and adds this rank's slice of the
// sum into shard_grads.
static void host_dp_reduce_scatter_unit(HostDP* dp, int u) {
    const ShardUnit* unit = &dp->plan.layout.units[u];
    float* buf = dp->scratch;
    memcpy(buf, dp->unit_grads[u], unit->size * sizeof(float));
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


// After the last micro-step: finish the reduction across ranks and average over the world (or,
// with -ls between syncs, over the replica's shard group: the replicas keep their own gradients).
static void host_dp_finish_gradients(HostDP* dp) {
    const DpPlan* p = &dp->plan;
    CommGroup* group = dp->replica_reduce ? &dp->world : &dp->shard;
    if (group->size == 1) { return; } // nothing to reduce, and the average is the gradient itself
    float inv = 1.0f / (float)group->size;
    if (dp->replica_reduce && dp->replica.size > 1 && dp->hooks.sum_gradients &&
        dp->hooks.sum_gradients(dp->hooks.ctx)) {
        float* g = p->zero_stage == 0 ? dp->grads : dp->shard_grads;
        for (size_t i = 0; i < p->owned; i++) { g[i] *= inv; }
        return;
    }
    if (p->zero_stage == 0) {
        size_t padded = round_up(p->num_parameters, group->size);
        COMM_TIMED(ring_all_reduce(group, dp->grads, padded, dp->scratch));
        for (size_t i = 0; i < p->num_parameters; i++) { dp->grads[i] *= inv; }
    } else {
        if (dp->replica_reduce) {
            size_t padded = round_up(p->layout.shard_elements, dp->replica.size);
            COMM_TIMED(ring_all_reduce(&dp->replica, dp->shard_grads, padded, dp->ring_tmp));
        }
        for (size_t i = 0; i < p->layout.shard_elements; i++) { dp->shard_grads[i] *= inv; }
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
// layer's matrices' owner in the shard group (muon_owners; with split_qkv, -mq 1, a layer's qkvw is
// three matrices, one owner). ZeRO 0: every rank orthogonalizes every matrix.
static void host_dp_init_muon(HostDP* dp, const GPT2Config* c, int ns_steps, int split_qkv) {
    const DpPlan* p = &dp->plan;
    const ShardLayout* l = &p->layout;
    dp->muon = 1;
    dp->muon_model = *c;
    size_t C = (size_t)c->channels;
    muon_work_alloc(&dp->muon_work, 4 * C * C, C);
    int S = dp->shard.size, matrices = 0;
    int* units = (int*)malloc_check(l->num_units * sizeof(int));
    double* load = (double*)calloc_check(S, sizeof(double));
    for (int u = 0; u < l->num_units; u++) {
        units[u] = parameter_is_muon[l->units[u].tensor] ? l->units[u].tensor : -1;
        matrices += units[u] >= 0 ? muon_matrices_per_layer(c, units[u], split_qkv) : 0;
    }
    dp->muon_owner = (int*)malloc_check(l->num_units * sizeof(int));
    muon_owners(units, l->num_units, c, ns_steps, split_qkv, p->zero_stage == 0 ? 1 : S, dp->muon_owner, load);
    dp->muon_mine = p->zero_stage == 0 ? matrices : 0;
    for (int u = 0; u < l->num_units && p->zero_stage != 0; u++) {
        if (dp->muon_owner[u] == dp->shard.rank) { dp->muon_mine += muon_matrices_per_layer(c, units[u], split_qkv); }
    }
    dp->muon_mine_flops = load[p->zero_stage == 0 ? 0 : dp->shard.rank];
    dp->muon_most_flops = 0.0;
    for (int s = 0; s < (p->zero_stage == 0 ? 1 : S); s++) { dp->muon_most_flops = fmax(dp->muon_most_flops, load[s]); }
    dp->muon_bytes_delta = 0;
    for (int u = 0; u < l->num_units && p->zero_stage != 0 && S > 1; u++) {
        const ShardUnit* unit = &l->units[u];
        int o = dp->muon_owner[u], me = dp->shard.rank;
        if (o < 0) { continue; }
        size_t first, count = unit_owned(unit, me, &first);
        long long sent = me != o ? (long long)count : 0;                    // my slice to the owner
        sent += (me - o + S) % S != S - 1 ? (long long)unit->size : 0;       // the chain, but its last rank
        dp->muon_bytes_delta += 4 * (sent - (long long)(S - 1) * (long long)unit->slice); // AdamW's all-gather
    }
    free(units);
    free(load);
}

// ZeRO 1, 2: Muon on unit u (one layer's block matrix, or -mq 1's three of qkvw): each rank blends
// its slice of the momentum and gradient into its slice of U; the slices go to the unit's owner
// (muon_owner), which orthogonalizes each whole matrix of U and steps it; the matrix then goes down the chain from
// the owner to the shard group (in place of AdamW's all-gather: the same bytes in all). The
// momentum stays sliced as AdamW's m (the state file's m), so checkpoints re-cut as ever.
static void host_dp_muon_unit(HostDP* dp, int u, const MuonConfig* h, float grad_scale) {
    const ShardUnit* unit = &dp->plan.layout.units[u];
    int S = dp->shard.size, s = dp->shard.rank, owner = dp->muon_owner[u], rows, cols;
    muon_matrix_shape(&dp->muon_model, unit->tensor, h->split_qkv, &rows, &cols);
    size_t per = (size_t)rows * cols;
    float* full = dp->muon_work.u;
    size_t first, count = unit_owned(unit, s, &first);
    OP_TIMED(OP_MUON, 0.0, 4.0 * 4.0 * (double)count,
             muon_blend(dp->shard_grads + unit->shard_offset, dp->opt_m + unit->shard_offset, full + first, count,
                        grad_scale, h));
    for (int k = 1; k < S; k++) { // the slices to the owner, one rank after the other
        int from = (owner + k) % S;
        size_t at, n = unit_owned(unit, from, &at);
        if (n == 0) { continue; }
        if (s == from) { COMM_TIMED(comm_transfer(&dp->shard, full + first, owner, NULL, -1, n)); }
        if (s == owner) { COMM_TIMED(comm_transfer(&dp->shard, NULL, -1, full + at, from, n)); }
    }
    float* w = dp->params + unit->offset;
    for (size_t at = 0; s == owner && at < unit->size; at += per) {
        OP_TIMED(OP_MUON, muon_ns_flops(rows, cols, h->ns_steps), 4.0 * 3.0 * (double)per,
                 muon_apply(w + at, full + at, rows, cols, h, &dp->muon_work));
    }
    COMM_TIMED(chain_broadcast(&dp->shard, w, unit->size, owner));
}

// The update (t = 1-based step) of what this rank owns (ZeRO 0: tensor by tensor; -opt muon: each
// layer's block matrices by Muon, the rest by AdamW), then (stages 1, 2) the parameter all-gather.
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
                int rows, cols;
                muon_matrix_shape(&dp->muon_model, i, o->muon.split_qkv, &rows, &cols);
                size_t per = (size_t)rows * cols;
                for (size_t at = off; at < off + n; at += per) {
                    OP_TIMED(OP_MUON, muon_ns_flops(rows, cols, o->muon.ns_steps), 4.0 * 6.0 * (double)per,
                             host_muon_update(dp->params + at, dp->grads + at, dp->opt_m + at, rows, cols, grad_scale,
                                              &o->muon, &dp->muon_work));
                }
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
        if (o->kind == OPT_MUON && dp->muon_owner[u] >= 0) {
            host_dp_muon_unit(dp, u, &o->muon, grad_scale);
            continue;
        }
        size_t first;
        size_t count = unit_owned(unit, s, &first);
        float wd = adamw_weight_decay(h, unit->tensor);
        float* pp = dp->params + unit->offset;
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
}


// ----------------------------------------------------------------------------
// checkpoints: this rank's arrays of a state file (llmc/ckpt_state_file.h)

// m and v, and the replica sync's arrays (its hooks: -ls, -rq/-rk).
static void host_dp_write_state(void* ctx, const char* path, const TrainState* s) {
    HostDP* dp = (HostDP*)ctx;
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
    if (dp->muon) {
        muon_work_free(&dp->muon_work);
        free(dp->muon_owner);
    }
    free(dp->unit_grads);
    dp_plan_free(&dp->plan);
}

#endif
