// The data-parallel layer's host backend (the CPU trainer's): ZeRO stages 0, 1, 2 on fp32 host
// buffers (docs/design.md sections 3, 4), the replica sync (-ls, -rq/-rk, -lf, -lo, -rb; section
// 4b) on the owned elements, and the checkpoint arrays of both, over the host transport: the ring
// collectives of llmc/comm_mpi.h (a fixed summation order, every byte counted) and the -lo
// communication thread of llmc/comm_thread.h. The plan (which elements, which fragment, which
// format) is llmc/dp_plan.h's, the outer state llmc/outer_state.h's, the element math
// llmc/outer_sync.h's and the formats llmc/wire_format.h's. The model stays the trainer's: it
// hands over its parameter and gradient blocks and calls host_dp_grads_ready from backward.
#ifndef LLMC_DP_HOST_H
#define LLMC_DP_HOST_H

#include <math.h>
#include "utils.h"
#include "dp_plan.h"
#include "outer_state.h"
#include "comm_mpi.h"
#include "comm_thread.h"
#include "optimizer.h"
#include "cpu_optimizer.h"
#include "op_profile.h"
#include "cpu_memory.h"
#include "dp_ops.h"
#include "faults.h"

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

// The buffers of one compressed or fp32 replica exchange (outer_exchange_buffers' sizes).
typedef struct {
    float* tmp;      // a slice, fp32
    uint8_t* sent;   // R encoded slices (or sums)
    uint8_t* got;    // R encoded slices received
    float* packed;   // error feedback: the fragment's residual packed like its messages, else NULL
} ExchangeBuffers;

// Allocates wb with the sizes b; returns their total bytes.
static size_t exchange_buffers_alloc(ExchangeBuffers* wb, OuterExchangeBuffers b) {
    wb->tmp = (float*)malloc_check(b.tmp);
    wb->sent = b.sent ? (uint8_t*)malloc_check(b.sent) : NULL;
    wb->got = b.got ? (uint8_t*)malloc_check(b.got) : NULL;
    wb->packed = b.packed ? (float*)malloc_check(b.packed) : NULL;
    return b.tmp + b.sent + b.got + b.packed;
}

static void exchange_buffers_free(ExchangeBuffers* wb) {
    free(wb->tmp);
    free(wb->sent);
    free(wb->got);
    free(wb->packed);
}

struct HostDP;

// -lo: one fragment's exchange in flight on the communication thread (its completion: the
// thread's slot of the fragment, llmc/comm_thread.h).
typedef struct {
    struct HostDP* dp;
    OuterCall call;  // the fragment's sync as at its start
    float* msg;      // in: the fragment's packed messages; out: their sums over the replicas
    size_t expect;   // the bytes it sends (counted by the trainer at its start)
} HostExchange;

typedef struct HostDP {
    DpPlan plan;
    CommGroup world, shard, replica;
    CommGroup replica_async; // -lo: the communication thread's duplicate of the replica communicator
    float* params;           // the model's parameters (the trainer's block)
    float* grads;            // the model's gradient block (ZeRO 0, 1: every gradient; 2: the globals and one layer)
    float** unit_grads;      // where each unit's full gradient lives
    int last_micro_step;     // set by the training loop: 1 during the step's last backward
    int replica_reduce;      // 1: gradients averaged over every rank; 0 (-ls): over the shard group only
    OuterConfig grad_wire;   // -ls 0: how the step's gradients cross the replicas (-rq, -rk, after -rqs)
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
    OuterState st;           // -ls: outer parameters, momentum, residual, held sums, snapshots
    ExchangeBuffers sbuf;    // -rq/-rk: the trainer thread's exchange buffers, kept from start-up
    size_t sbuf_bytes;       // their total
    HostExchange* jobs;      // -lo: each fragment's exchange on the communication thread
    CommWorker worker;       // -lo: the communication thread
    ExchangeBuffers wbuf;    // -lo: its exchange buffers, for the largest fragment
    OuterExchangeBuffers wbuf_bytes;
    // -rb: seconds the trainer thread was held by replica exchanges before / after the last step: a
    // blocking exchange whole (its packing, its sums and the modelled link), an -lo one while the
    // trainer waited for it to land
    double link_waited[2];
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
    dp->st.outer = ls ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    dp->st.momentum = ls ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
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
    if (compressed && outer->feedback) { // the residual, zero, one per owned element (padded to R)
        dp->st.residual = (float*)calloc_check(p->sync_padded, sizeof(float));
    }
    if (compressed) { // the trainer thread's exchange buffers (format after -rqs): the largest
        // fragment with -ls, the owned gradient (its residual not packed) with -ls 0
        OuterConfig late = outer_config_at(outer, outer->wire_start + 1);
        OuterExchangeBuffers b = outer_exchange_buffers(&late, mesh->dp_replicate, ls ? p->frag_max : p->owned_padded);
        if (!ls) { b.packed = 0; }
        dp->sbuf_bytes = exchange_buffers_alloc(&dp->sbuf, b);
    }
}

static size_t host_dp_exchange_job(void* arg);

// -lo: the held sums and local snapshots, and the communication thread with its own replica
// communicator and exchange buffers (the largest fragment's, in the format after -rqs). The thread
// calls MPI while the trainer does: the library must provide MPI_THREAD_MULTIPLE.
static void host_dp_init_overlap(HostDP* dp) {
    const DpPlan* p = &dp->plan;
    const OuterConfig* o = p->outer;
    int F = p->num_fragments, R = dp->replica.size, level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (R > 1 && level < MPI_THREAD_MULTIPLE) {
        fail("-lo %d: the MPI library provides thread level %d, the communication thread needs MPI_THREAD_MULTIPLE "
             "(%d); use -lo 0 or an MPI built with thread support", o->overlap, level, MPI_THREAD_MULTIPLE);
    }
    dp->st.held = (float*)calloc_check(p->held_off[F], sizeof(float));
    dp->st.snap = (float*)calloc_check(p->sync_owned, sizeof(float));
    dp->jobs = (HostExchange*)calloc_check(F, sizeof(HostExchange));
    MPI_Comm dup;
    MPI_Comm_dup(dp->replica.comm, &dup);
    comm_group_from(&dp->replica_async, dup);
    OuterConfig late = outer_config_at(o, o->wire_start + 1);
    dp->wbuf_bytes = outer_exchange_buffers(&late, R, p->frag_max);
    exchange_buffers_alloc(&dp->wbuf, dp->wbuf_bytes);
    comm_worker_start(&dp->worker, F, host_dp_exchange_job, o->link_mbps);
}

// The memory of the replica sync beyond the closed forms (the start-up report's memory line): the
// residual, the trainer thread's exchange buffers, and -lo's snapshots, held sums and thread buffers.
static void host_dp_memory(const HostDP* dp, MemoryBytes* mem) {
    const DpPlan* p = &dp->plan;
    mem->residual = dp->st.residual ? p->sync_owned * 4 : 0;
    mem->wire = dp->sbuf_bytes;
    if (dp->st.held) {
        const OuterExchangeBuffers* b = &dp->wbuf_bytes;
        mem->overlap_snap = p->sync_owned * 4;
        mem->overlap_held = p->held_off[p->num_fragments] * 4;
        mem->overlap_wire = b->tmp + b->sent + b->got + b->packed;
        mem->overlap = mem->overlap_snap + mem->overlap_held + mem->overlap_wire;
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

// -rq/-rk: msg (R slices of `slice` elements: this rank's messages) summed over the replicas through
// the wire format of c (llmc/wire_format.h). Every slice is encoded (the residual keeps what that lost,
// where given) and slice j sent to replica j; each replica decodes the R encodings of its own
// slice and sums them in fp32 in replica order 0..R-1, encodes the sum and sends it to every
// replica; msg then holds the decoded sums, the same on every replica.
// Runs over group g (the replicas: the trainer's communicator, or the communication thread's) in the
// buffers wb (NULL: allocated here for the call).
static void host_dp_replica_sum_wire(CommGroup* g, float* msg, size_t slice, const OuterConfig* c, float* residual,
                                     const ExchangeBuffers* wb) {
    int R = g->size, me = g->rank;
    WireSpec mine = outer_wire_spec(c, 0, R), owner = outer_wire_spec(c, 1, R);
    size_t sb = wire_spec_bytes(&mine, slice), ob = wire_spec_bytes(&owner, slice);
    uint8_t* sent = wb ? wb->sent : (uint8_t*)malloc_check((size_t)R * (sb > ob ? sb : ob));
    uint8_t* got = wb ? wb->got : (uint8_t*)malloc_check((size_t)R * sb);
    float* tmp = wb ? wb->tmp : (float*)malloc_check(slice * sizeof(float));
    for (int j = 0; j < R; j++) {
        wire_encode_feedback(&mine, msg + j * slice, slice, sent + j * sb, residual ? residual + j * slice : NULL,
                             tmp);
    }
    memcpy(got + me * sb, sent + me * sb, sb);
    for (int k = 1; k < R; k++) {
        int to = (me + k) % R, from = (me + R - k) % R;
        COMM_TIMED(pair_exchange_bytes(g, sent + to * sb, to, got + from * sb, from, sb));
    }
    float* sum = msg + me * slice;
    wire_spec_decode(&mine, got, slice, sum);
    for (int r = 1; r < R; r++) {
        wire_spec_decode(&mine, got + r * sb, slice, tmp);
        for (size_t i = 0; i < slice; i++) { sum[i] += tmp[i]; }
    }
    wire_spec_encode(&owner, sum, slice, sent + me * ob);
    for (int k = 1; k < R; k++) {
        int to = (me + k) % R, from = (me + R - k) % R;
        COMM_TIMED(pair_exchange_bytes(g, sent + me * ob, to, sent + from * ob, from, ob));
    }
    for (int j = 0; j < R; j++) { wire_spec_decode(&owner, sent + j * ob, slice, msg + j * slice); }
    if (wb) { return; }
    free(sent);
    free(got);
    free(tmp);
}

// -ls 0 with -rq/-rk: the gradient (ZeRO 0: all of it after the shard group's all-reduce; 1, 2:
// the shard accumulator) plus the residual, summed over the replicas by host_dp_replica_sum_wire.
static void host_dp_replica_sum_gradient(HostDP* dp) {
    const DpPlan* p = &dp->plan;
    int R = dp->replica.size;
    float* g = p->zero_stage == 0 ? dp->grads : dp->shard_grads;
    if (p->zero_stage == 0) {
        COMM_TIMED(ring_all_reduce(&dp->shard, g, round_up(p->num_parameters, dp->shard.size), dp->scratch));
    }
    memset(g + p->owned, 0, (p->owned_padded - p->owned) * sizeof(float));
    if (dp->st.residual) {
        for (size_t i = 0; i < p->owned; i++) { g[i] += dp->st.residual[i]; }
    }
    const ExchangeBuffers* wb = dp->sbuf_bytes ? &dp->sbuf : NULL;
    host_dp_replica_sum_wire(&dp->replica, g, p->owned_padded / R, &dp->grad_wire, dp->st.residual, wb);
}

// After the last micro-step: finish the reduction across ranks and average over the world (or,
// with -ls between syncs, over the replica's shard group: the replicas keep their own gradients).
static void host_dp_finish_gradients(HostDP* dp) {
    const DpPlan* p = &dp->plan;
    CommGroup* group = dp->replica_reduce ? &dp->world : &dp->shard;
    if (group->size == 1) { return; } // nothing to reduce, and the average is the gradient itself
    float inv = 1.0f / (float)group->size;
    if (dp->replica_reduce && dp->replica.size > 1 && outer_compressed(&dp->grad_wire)) {
        host_dp_replica_sum_gradient(dp);
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
// matrix's owner in the shard group (muon_owners). ZeRO 0: every rank orthogonalizes every matrix.
static void host_dp_init_muon(HostDP* dp, const GPT2Config* c, int ns_steps) {
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
        matrices += units[u] >= 0;
    }
    dp->muon_owner = (int*)malloc_check(l->num_units * sizeof(int));
    muon_owners(units, l->num_units, c, ns_steps, p->zero_stage == 0 ? 1 : S, dp->muon_owner, load);
    dp->muon_mine = p->zero_stage == 0 ? matrices : 0;
    for (int u = 0; u < l->num_units && p->zero_stage != 0; u++) { dp->muon_mine += dp->muon_owner[u] == dp->shard.rank; }
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

// ZeRO 1, 2: Muon on unit u (one layer's block matrix): each rank blends its slice of the momentum
// and gradient into its slice of U; the slices go to the matrix's owner (muon_owner), which
// orthogonalizes the whole U and steps the whole matrix; the matrix then goes down the chain from
// the owner to the shard group (in place of AdamW's all-gather: the same bytes in all). The
// momentum stays sliced as AdamW's m (the state file's m), so checkpoints re-cut as ever.
static void host_dp_muon_unit(HostDP* dp, int u, const MuonConfig* h, float grad_scale) {
    const ShardUnit* unit = &dp->plan.layout.units[u];
    int S = dp->shard.size, s = dp->shard.rank, owner = dp->muon_owner[u], rows, cols;
    muon_matrix_shape(&dp->muon_model, unit->tensor, &rows, &cols);
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
    if (s == owner) {
        OP_TIMED(OP_MUON, muon_ns_flops(rows, cols, h->ns_steps), 4.0 * 3.0 * (double)unit->size,
                 muon_apply(w, full, rows, cols, h, &dp->muon_work));
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
                muon_matrix_shape(&dp->muon_model, i, &rows, &cols);
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
// -ls: the outer sync of the replicas (llmc/outer_sync.h) on this rank's sync elements (the
// plan's: AdamW's, or with ZeRO 0 its ZeRO-1 slices, every unit all-gathered in the replica after)

// dst (the sync's order) = the parameters of the sync's elements.
static void host_dp_owned_params(const HostDP* dp, float* dst) {
    const DpPlan* p = &dp->plan;
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        memcpy(dst + sp->owned_offset, dp->params + sp->param_offset, sp->count * sizeof(float));
    }
}

// The parameters of the sync's elements = src (the sync's order), then (sync stage 1, 2) every unit
// all-gathered in the shard group, so that the replica's ranks hold the same full parameters again.
static void host_dp_set_owned_params(HostDP* dp, const float* src) {
    const DpPlan* p = &dp->plan;
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        memcpy(dp->params + sp->param_offset, src + sp->owned_offset, sp->count * sizeof(float));
    }
    if (p->sync_stage == 0) { return; }
    for (int u = 0; u < p->layout.num_units; u++) { host_dp_all_gather_unit(dp, u); }
}

// outer = the local parameters of the sync's elements, the outer momentum 0.
static void host_dp_outer_init(void* ctx) {
    HostDP* dp = (HostDP*)ctx;
    memset(dp->st.outer, 0, dp->plan.sync_owned * sizeof(float));
    memset(dp->st.momentum, 0, dp->plan.sync_owned * sizeof(float));
    host_dp_owned_params(dp, dp->st.outer);
}

// -rb: when the modelled link has carried `bytes` sent from t0 on (0 without -rb).
static double link_ready_time(double t0, size_t bytes, float mbps) {
    return mbps > 0.0f ? t0 + (double)bytes / ((double)mbps * 1e6) : 0.0;
}

static void wait_until(double when) {
    for (double now = now_seconds(); now < when; now = now_seconds()) {
        double s = when - now;
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

// The messages of fragment f (outer_message: the pseudo-gradient outer - local, plus the residual
// with -rq and error feedback) packed into msg (zeroed to the fragment's R slices first).
static void host_dp_fragment_messages(const HostDP* dp, int f, int plain, const float* res, float* msg) {
    const DpPlan* p = &dp->plan;
    memset(msg, 0, dp_frag_padded(p, f) * sizeof(float));
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* run = &p->runs[i];
        const float* local = dp->params + run->param;
        const float* outer = dp->st.outer + run->owned;
        float* out = msg + run->packed;
        for (size_t j = 0; j < run->count; j++) {
            float d = outer_message(outer[j], local[j], plain);
            if (res) { d += res[run->owned + j]; }
            out[j] = d;
        }
    }
}

// -fi nan_pg, inf_pg: this rank's messages of the syncs after call->step start with a NaN or an infinity.
static void host_dp_fault_message(const HostDP* dp, const OuterCall* call, float* msg) {
    float bad = fault_pseudo_grad(&run_fault, call->step, dp->world.rank);
    if (bad != 0.0f) { msg[0] = bad; }
}

// Fragment f's residual packed like its messages (into packed, zeroed to its R slices), or (back
// 1) unpacked.
static void host_dp_fragment_residual(HostDP* dp, int f, float* packed, int back) {
    const DpPlan* p = &dp->plan;
    if (!back) { memset(packed, 0, dp_frag_padded(p, f) * sizeof(float)); }
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* run = &p->runs[i];
        float* res = dp->st.residual + run->owned;
        float* at = packed + run->packed;
        memcpy(back ? res : at, back ? at : res, run->count * sizeof(float));
    }
}

// Fragment c->fragment's packed messages msg (padded to the replicas) summed over group g (fp32:
// one ring all-reduce; -rq: host_dp_replica_sum_wire, the residual updated) in buffers wb (NULL:
// the trainer's scratch, or allocated for the call). Only fragment f's residual is touched.
static void host_dp_fragment_sum(HostDP* dp, CommGroup* g, const OuterCall* call, float* msg,
                                 const ExchangeBuffers* wb) {
    const DpPlan* p = &dp->plan;
    int f = call->fragment;
    size_t padded = dp_frag_padded(p, f);
    if (!outer_compressed(&call->c)) {
        float* tmp = wb ? wb->tmp : p->zero_stage == 0 ? dp->scratch : dp->ring_tmp;
        COMM_TIMED(ring_all_reduce(g, msg, padded, tmp));
        return;
    }
    float* packed = !dp->st.residual ? NULL : wb ? wb->packed : (float*)malloc_check(padded * sizeof(float));
    if (packed) { host_dp_fragment_residual(dp, f, packed, 0); }
    host_dp_replica_sum_wire(g, msg, padded / g->size, &call->c, packed, wb);
    if (packed) { host_dp_fragment_residual(dp, f, packed, 1); }
    if (!wb) { free(packed); }
}

// Fragment call->fragment's messages packed into msg (host_dp_fragment_messages, the residual added
// where the link is compressed); returns 1 when every rank's are finite: the flag, one float
// all-reduced over every rank, on which every replica decides alike to skip the sync (nothing is
// exchanged, the residual and the outer state stay as they were).
static int host_dp_pack(HostDP* dp, const OuterCall* call, float* msg) {
    const DpPlan* p = &dp->plan;
    const float* res = outer_compressed(&call->c) ? dp->st.residual : NULL;
    host_dp_fragment_messages(dp, call->fragment, outer_plain_average(&call->c), res, msg);
    host_dp_fault_message(dp, call, msg);
    size_t n = dp_frag_padded(p, call->fragment);
    int bad = 0;
    for (size_t i = 0; i < n; i++) { bad |= !isfinite(msg[i]); }
    float total;
    COMM_TIMED(total = all_reduce_sum_scalar(&dp->world, (float)bad));
    return total == 0.0f;
}

// Fragment call->fragment's exchange on the trainer thread: its messages packed into msg, summed.
// Returns 0 where the sync is skipped (host_dp_pack), else 1 and in *ready when the modelled link
// (-rb) would have carried its bytes (0 without -rb).
static int host_dp_fragment_exchange(HostDP* dp, const OuterCall* call, float* msg, double* ready) {
    double t0 = now_seconds();
    size_t sent0 = comm_bytes_sent;
    if (!host_dp_pack(dp, call, msg)) { return 0; }
    host_dp_fragment_sum(dp, &dp->replica, call, msg, dp->sbuf_bytes ? &dp->sbuf : NULL);
    *ready = link_ready_time(t0, comm_bytes_sent - sent0, call->c.link_mbps);
    return 1;
}

// -lo, on the communication thread: an exchange's sum over the replicas through the thread's
// communicator, its tags the fragment's (a rank that issued the fragments in another order waits
// for a tag that never comes: the watchdog's span ends the job). Returns the bytes it sent, which
// must be those the trainer counted when it started it.
static size_t host_dp_exchange_job(void* arg) {
    HostExchange* job = (HostExchange*)arg;
    HostDP* dp = job->dp;
    CommGroup g = dp->replica_async;
    g.tag = 16 * (job->call.fragment + 1);
    size_t sent0 = comm_bytes_sent; // this thread's own count
    host_dp_fragment_sum(dp, &g, &job->call, job->msg, &dp->wbuf);
    size_t sent = comm_bytes_sent - sent0;
    if (sent != job->expect) {
        fail("-lo: fragment %d's exchange sent %zu bytes, the closed form %zu (a bug)", job->call.fragment, sent,
             job->expect);
    }
    return sent;
}

// The outer step of fragment call->fragment with its summed messages: outer_update on each owned
// element, local = outer (snap NULL) or outer_merge with the local value snap held at the
// exchange's start (-lo), then (sync stage 1, 2) the all-gather of the fragment's units in the replica. Returns the
// fragment's mean pseudo-gradient's squared norm over the whole replica.
static float host_dp_fragment_apply(HostDP* dp, const OuterCall* call, const float* sum, const float* snap) {
    const DpPlan* p = &dp->plan;
    const OuterConfig* c = &call->c;
    int R = dp->replica.size, plain = outer_plain_average(c), f = call->fragment;
    float inv_R = 1.0f / (float)R;
    double sq = 0.0;
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* run = &p->runs[i];
        float* local = dp->params + run->param;
        for (size_t j = 0; j < run->count; j++) {
            size_t o = run->owned + j;
            float delta;
            float now = outer_update(&dp->st.outer[o], &dp->st.momentum[o], sum[run->packed + j], inv_R, c->lr,
                                     c->momentum, plain, &delta);
            local[j] = snap ? outer_merge(now, local[j], snap[o]) : now;
            sq += (double)delta * delta;
        }
    }
    if (p->sync_stage == 0) { return (float)sq; }
    for (int u = 0; u < p->layout.num_units; u++) {
        if (outer_unit_fragment(&p->layout.units[u], p->layout.num_layers, p->num_fragments) == f) {
            host_dp_all_gather_unit(dp, u);
        }
    }
    float total;
    COMM_TIMED(total = all_reduce_sum_scalar(&dp->shard, (float)sq));
    return total;
}

// -lo: fragment f's exchange starts: its owned local values kept, its messages packed into its
// held buffer (the residual added), and the sum handed to the communication thread, behind the
// exchanges started before it. Its bytes count in the step that starts it. Returns 0 where the sync
// is skipped (host_dp_pack: nothing is handed over).
static int host_dp_fragment_start(HostDP* dp, const OuterCall* call) {
    const DpPlan* p = &dp->plan;
    int f = call->fragment, R = dp->replica.size;
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) { // fragment f's owned local values
        const DpRun* run = &p->runs[i];
        memcpy(dp->st.snap + run->owned, dp->params + run->param, run->count * sizeof(float));
    }
    HostExchange* job = &dp->jobs[f];
    job->dp = dp;
    job->call = *call;
    job->msg = dp->st.held + p->held_off[f];
    job->expect = outer_wire_bytes(p->frag_count[f], &call->c, R);
    if (!host_dp_pack(dp, call, job->msg)) { return 0; }
    comm_bytes_sent += job->expect;
    comm_worker_submit(&dp->worker, f, job);
    return 1;
}

// -lo: every exchange in flight has landed (their sums held, not applied): before a checkpoint.
static void host_dp_overlap_drain(HostDP* dp) {
    if (dp->jobs) { comm_worker_drain(&dp->worker); }
}

// The outer step of fragment call->fragment (-lf; the whole model without it) in phase call->phase,
// unless a rank's pseudo-gradients are not finite (then every replica skips it: returns 0):
// OUTER_BLOCKING exchanges in the idle gradient buffer on this thread, waits out the modelled
// link (-rb) and applies at once; OUTER_START (-lo) hands the exchange to the communication thread
// (host_dp_fragment_start); OUTER_FINISH waits for it (unless it landed before a checkpoint this run
// resumed from) and applies the held sum. Returns 1 and the applied squared norm in *sq (0 for
// OUTER_START).
static int host_dp_outer_step(void* ctx, const OuterCall* call, float* sq) {
    HostDP* dp = (HostDP*)ctx;
    const DpPlan* p = &dp->plan;
    int f = call->fragment;
    *sq = 0.0f;
    if (call->phase == OUTER_BLOCKING) {
        float* msg = p->zero_stage == 0 ? dp->grads : dp->shard_grads;
        double t0 = now_seconds(), ready = 0.0;
        int exchanged = host_dp_fragment_exchange(dp, call, msg, &ready);
        wait_until(ready);
        dp->link_waited[call->last] += now_seconds() - t0;
        if (!exchanged) { return 0; }
        *sq = host_dp_fragment_apply(dp, call, msg, NULL);
        return 1;
    }
    if (call->phase == OUTER_START) { return host_dp_fragment_start(dp, call); }
    if (comm_worker_has(&dp->worker, f)) { dp->link_waited[call->last] += comm_worker_wait(&dp->worker, f); }
    *sq = host_dp_fragment_apply(dp, call, dp->st.held + p->held_off[f], dp->st.snap);
    return 1;
}

// The CRC-32C of the owned outer (outer 1) or local parameters, all-gathered over the replicas.
static void host_dp_replica_crcs(void* ctx, int outer, uint32_t* crcs) {
    HostDP* dp = (HostDP*)ctx;
    uint32_t crc = outer ? outer_state_crc(&dp->plan, dp->st.outer) : dp_plan_local_crc(&dp->plan, dp->params, 0);
    int R = dp->replica.size;
    float* all = (float*)calloc_check(2 * (size_t)R, sizeof(float));
    crc_to_floats(crc, all + 2 * dp->replica.rank);
    COMM_TIMED(ring_all_gather(&dp->replica, all, 2));
    for (int r = 0; r < R; r++) { crcs[r] = crc_from_floats(all + 2 * r); }
    free(all);
}

// ----------------------------------------------------------------------------
// checkpoints: this rank's arrays of a state file (llmc/ckpt_state_file.h)

// m, v and, with -ls, the owned local parameters (the replicas differ between syncs) and the
// outer state; with an -lo exchange in flight (s->has_pending), every exchange is first waited for
// and the held sums and local snapshots follow (their fragments merge at the scheduled steps).
static void host_dp_write_state(void* ctx, const char* path, const TrainState* s) {
    HostDP* dp = (HostDP*)ctx;
    const DpPlan* p = &dp->plan;
    float* local = s->has_local ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    if (local) { host_dp_owned_params(dp, local); }
    float* sums = s->has_pending ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    if (sums) {
        host_dp_overlap_drain(dp);
        dp_plan_held_owned(p, dp->st.held, sums, 1);
    }
    StateArrays arrays = {{dp->opt_m, dp->opt_v, NULL}};
    outer_state_arrays(&arrays, s, &dp->st, local, sums);
    state_write_arrays(path, s, &arrays);
    free(local);
    free(sums);
}

static void host_dp_read_state(void* ctx, const char* dir, int step, const StateTarget* target, TrainState* got) {
    HostDP* dp = (HostDP*)ctx;
    const DpPlan* p = &dp->plan;
    float* local = dp->st.outer ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    float* sums = dp->st.held ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    StateArrays arrays = {{dp->opt_m, dp->opt_v, NULL}};
    outer_state_targets(&arrays, &dp->st, local, sums);
    state_load_arrays(dir, step, target, got, &arrays);
    if (got->has_local) { host_dp_set_owned_params(dp, local); }
    if (got->has_pending) { dp_plan_held_owned(p, dp->st.held, sums, 0); }
    free(local);
    free(sums);
}

// After the last micro-step: the reduction finished, the norm of the averaged gradient.
static float host_dp_reduce_gradients(void* ctx) {
    host_dp_finish_gradients((HostDP*)ctx);
    return host_dp_grad_norm((HostDP*)ctx);
}

static void host_dp_set_replica_reduce(void* ctx, int every_step) { ((HostDP*)ctx)->replica_reduce = every_step; }

static void host_dp_set_gradient_wire(void* ctx, const OuterConfig* c) { ((HostDP*)ctx)->grad_wire = *c; }

// The training loop's view of this layer (llmc/dp_ops.h).
static DataParallelOps host_dp_ops(HostDP* dp) {
    DataParallelOps ops = {
        .ctx = dp,
        .reduce_gradients = host_dp_reduce_gradients,
        .update = host_dp_optimizer_step,
        .write_state = host_dp_write_state,
        .read_state = host_dp_read_state,
        .set_replica_reduce = host_dp_set_replica_reduce,
        .set_gradient_wire = host_dp_set_gradient_wire,
        .outer_init = host_dp_outer_init,
        .outer_step = host_dp_outer_step,
        .replica_crcs = host_dp_replica_crcs,
    };
    return ops;
}

static void host_dp_free(HostDP* dp) {
    float* bufs[] = {dp->st.outer, dp->st.momentum, dp->st.residual, dp->st.held, dp->st.snap, dp->opt_m, dp->opt_v,
                     dp->shard_grads, dp->scratch, dp->ring_tmp};
    for (int i = 0; i < 10; i++) { free(bufs[i]); }
    if (dp->muon) {
        muon_work_free(&dp->muon_work);
        free(dp->muon_owner);
    }
    if (dp->jobs) {
        comm_worker_stop(&dp->worker);
        MPI_Comm_free(&dp->replica_async.comm);
        exchange_buffers_free(&dp->wbuf);
    }
    exchange_buffers_free(&dp->sbuf);
    free(dp->jobs);
    free(dp->unit_grads);
    dp_plan_free(&dp->plan);
}

#endif
