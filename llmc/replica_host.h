// The replica sync's host backend (the CPU trainer's -ls, -rq/-rk, -lf, -lo, -rb; docs/design.md
// section 4b) above the ZeRO core of llmc/dp_host.h: the outer state of the rank's sync elements
// (llmc/outer_state.h), the fragments' messages packed, summed over the replicas (fp32 ring, or the
// wire formats of llmc/wire_format.h with the error-feedback residual) on the trainer thread or
// (-lo) on the communication thread of llmc/comm_thread.h, the outer step applied, the replicas'
// checksums, and the sync's arrays of a state file. The core knows it only through HostSyncHooks
// (the compressed gradient sum of -ls 0, the state arrays); the training loop through ReplicaOps
// (llmc/replica_ops.h). The element math is llmc/outer_sync.h's, the plan llmc/dp_plan.h's.
#ifndef LLMC_REPLICA_HOST_H
#define LLMC_REPLICA_HOST_H

#include <math.h>
#include "dp_host.h"
#include "outer_state.h"
#include "comm_thread.h"
#include "replica_ops.h"
#include "faults.h"

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

struct HostReplica;

// -lo: one fragment's exchange in flight on the communication thread (its completion: the
// thread's slot of the fragment, llmc/comm_thread.h).
typedef struct {
    struct HostReplica* x;
    OuterCall call;  // the fragment's sync as at its start
    float* msg;      // in: the fragment's packed messages; out: their sums over the replicas
    size_t expect;   // the bytes it sends (counted by the trainer at its start)
} HostExchange;


typedef struct HostReplica {
    HostDP* dp;              // the ZeRO core it syncs (its plan, parameters, groups and idle buffers)
    CommGroup replica_async; // -lo: the communication thread's duplicate of the replica communicator
    OuterConfig grad_wire;   // -ls 0: how the step's gradients cross the replicas (-rq, -rk, after -rqs)
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
    float* state_local;      // a state file's owned local parameters and held sums, while one is written or read
    float* state_sums;
} HostReplica;

static size_t host_replica_exchange_job(void* arg);

// -lo: the held sums and local snapshots, and the communication thread with its own replica
// communicator and exchange buffers (the largest fragment's, in the format after -rqs). The thread
// calls MPI while the trainer does: the library must provide MPI_THREAD_MULTIPLE.
static void host_replica_init_overlap(HostReplica* x) {
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    const OuterConfig* o = p->outer;
    int F = p->num_fragments, R = dp->replica.size, level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (R > 1 && level < MPI_THREAD_MULTIPLE) {
        fail("-lo %d: the MPI library provides thread level %d, the communication thread needs MPI_THREAD_MULTIPLE "
             "(%d); use -lo 0 or an MPI built with thread support", o->overlap, level, MPI_THREAD_MULTIPLE);
    }
    x->st.held = (float*)calloc_check(p->held_off[F], sizeof(float));
    x->st.snap = (float*)calloc_check(p->sync_owned, sizeof(float));
    x->jobs = (HostExchange*)calloc_check(F, sizeof(HostExchange));
    MPI_Comm dup;
    MPI_Comm_dup(dp->replica.comm, &dup);
    comm_group_from(&x->replica_async, dup);
    OuterConfig late = outer_config_at(o, o->wire_start + 1);
    x->wbuf_bytes = outer_exchange_buffers(&late, R, p->frag_max);
    exchange_buffers_alloc(&x->wbuf, x->wbuf_bytes);
    comm_worker_start(&x->worker, F, host_replica_exchange_job, o->link_mbps);
}

// The memory of the replica sync beyond the closed forms (the start-up report's memory line): the
// residual, the trainer thread's exchange buffers, and -lo's snapshots, held sums and thread buffers.
static void host_replica_memory(const HostReplica* x, MemoryBytes* mem) {
    const HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    mem->residual = x->st.residual ? p->sync_owned * 4 : 0;
    mem->wire = x->sbuf_bytes;
    if (x->st.held) {
        const OuterExchangeBuffers* b = &x->wbuf_bytes;
        mem->overlap_snap = p->sync_owned * 4;
        mem->overlap_held = p->held_off[p->num_fragments] * 4;
        mem->overlap_wire = b->tmp + b->sent + b->got + b->packed;
        mem->overlap = mem->overlap_snap + mem->overlap_held + mem->overlap_wire;
    }
}

// -rq/-rk: msg (R slices of `slice` elements: this rank's messages) summed over the replicas through
// the wire format of c (llmc/wire_format.h). Every slice is encoded (the residual keeps what that lost,
// where given) and slice j sent to replica j; each replica decodes the R encodings of its own
// slice and sums them in fp32 in replica order 0..R-1, encodes the sum and sends it to every
// replica; msg then holds the decoded sums, the same on every replica.
// Runs over group g (the replicas: the trainer's communicator, or the communication thread's) in the
// buffers wb (NULL: allocated here for the call).
static void host_replica_sum_wire(CommGroup* g, float* msg, size_t slice, const OuterConfig* c, float* residual,
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
// the shard accumulator) plus the residual, summed over the replicas by host_replica_sum_wire.
static void host_replica_sum_gradient(HostReplica* x) {
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    int R = dp->replica.size;
    float* g = p->zero_stage == 0 ? dp->grads : dp->shard_grads;
    if (p->zero_stage == 0) {
        COMM_TIMED(ring_all_reduce(&dp->shard, g, round_up(p->num_parameters, dp->shard.size), dp->scratch));
    }
    memset(g + p->owned, 0, (p->owned_padded - p->owned) * sizeof(float));
    if (x->st.residual) {
        for (size_t i = 0; i < p->owned; i++) { g[i] += x->st.residual[i]; }
    }
    const ExchangeBuffers* wb = x->sbuf_bytes ? &x->sbuf : NULL;
    host_replica_sum_wire(&dp->replica, g, p->owned_padded / R, &x->grad_wire, x->st.residual, wb);
}

// ----------------------------------------------------------------------------
// -ls: the outer sync of the replicas (llmc/outer_sync.h) on this rank's sync elements (the
// plan's: AdamW's, or with ZeRO 0 its ZeRO-1 slices, every unit all-gathered in the replica after)

// dst (the sync's order) = the parameters of the sync's elements.
static void host_replica_owned_params(const HostReplica* x, float* dst) {
    const HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        memcpy(dst + sp->owned_offset, dp->params + sp->param_offset, sp->count * sizeof(float));
    }
}

// The parameters of the sync's elements = src (the sync's order), then (sync stage 1, 2) every unit
// all-gathered in the shard group, so that the replica's ranks hold the same full parameters again.
static void host_replica_set_owned_params(HostReplica* x, const float* src) {
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        memcpy(dp->params + sp->param_offset, src + sp->owned_offset, sp->count * sizeof(float));
    }
    if (p->sync_stage == 0) { return; }
    for (int u = 0; u < p->layout.num_units; u++) { host_dp_all_gather_unit(dp, u); }
}

// outer = the local parameters of the sync's elements, the outer momentum 0.
static void host_replica_outer_init(void* ctx) {
    HostReplica* x = (HostReplica*)ctx;
    HostDP* dp = x->dp;
    memset(x->st.outer, 0, dp->plan.sync_owned * sizeof(float));
    memset(x->st.momentum, 0, dp->plan.sync_owned * sizeof(float));
    host_replica_owned_params(x, x->st.outer);
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
static void host_replica_fragment_messages(const HostReplica* x, int f, int plain, const float* res, float* msg) {
    const HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    memset(msg, 0, dp_frag_padded(p, f) * sizeof(float));
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* run = &p->runs[i];
        const float* local = dp->params + run->param;
        const float* outer = x->st.outer + run->owned;
        float* out = msg + run->packed;
        for (size_t j = 0; j < run->count; j++) {
            float d = outer_message(outer[j], local[j], plain);
            if (res) { d += res[run->owned + j]; }
            out[j] = d;
        }
    }
}

// -fi nan_pg, inf_pg: this rank's messages of the syncs after call->step start with a NaN or an infinity.
static void host_replica_fault_message(const HostReplica* x, const OuterCall* call, float* msg) {
    const HostDP* dp = x->dp;
    float bad = fault_pseudo_grad(&run_fault, call->step, dp->world.rank);
    if (bad != 0.0f) { msg[0] = bad; }
}

// Fragment f's residual packed like its messages (into packed, zeroed to its R slices), or (back
// 1) unpacked.
static void host_replica_fragment_residual(HostReplica* x, int f, float* packed, int back) {
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    if (!back) { memset(packed, 0, dp_frag_padded(p, f) * sizeof(float)); }
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* run = &p->runs[i];
        float* res = x->st.residual + run->owned;
        float* at = packed + run->packed;
        memcpy(back ? res : at, back ? at : res, run->count * sizeof(float));
    }
}

// Fragment c->fragment's packed messages msg (padded to the replicas) summed over group g (fp32:
// one ring all-reduce; -rq: host_replica_sum_wire, the residual updated) in buffers wb (NULL:
// the trainer's scratch, or allocated for the call). Only fragment f's residual is touched.
static void host_replica_fragment_sum(HostReplica* x, CommGroup* g, const OuterCall* call, float* msg,
                                      const ExchangeBuffers* wb) {
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    int f = call->fragment;
    size_t padded = dp_frag_padded(p, f);
    if (!outer_compressed(&call->c)) {
        float* tmp = wb ? wb->tmp : p->zero_stage == 0 ? dp->scratch : dp->ring_tmp;
        COMM_TIMED(ring_all_reduce(g, msg, padded, tmp));
        return;
    }
    float* packed = !x->st.residual ? NULL : wb ? wb->packed : (float*)malloc_check(padded * sizeof(float));
    if (packed) { host_replica_fragment_residual(x, f, packed, 0); }
    host_replica_sum_wire(g, msg, padded / g->size, &call->c, packed, wb);
    if (packed) { host_replica_fragment_residual(x, f, packed, 1); }
    if (!wb) { free(packed); }
}

// Fragment call->fragment's messages packed into msg (host_replica_fragment_messages, the residual added
// where the link is compressed); returns 1 when every rank's are finite: the flag, one float
// all-reduced over every rank, on which every replica decides alike to skip the sync (nothing is
// exchanged, the residual and the outer state stay as they were).
static int host_replica_pack(HostReplica* x, const OuterCall* call, float* msg) {
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    const float* res = outer_compressed(&call->c) ? x->st.residual : NULL;
    host_replica_fragment_messages(x, call->fragment, outer_plain_average(&call->c), res, msg);
    host_replica_fault_message(x, call, msg);
    size_t n = dp_frag_padded(p, call->fragment);
    int bad = 0;
    for (size_t i = 0; i < n; i++) { bad |= !isfinite(msg[i]); }
    float total;
    COMM_TIMED(total = all_reduce_sum_scalar(&dp->world, (float)bad));
    return total == 0.0f;
}

// Fragment call->fragment's exchange on the trainer thread: its messages packed into msg, summed.
// Returns 0 where the sync is skipped (host_replica_pack), else 1 and in *ready when the modelled link
// (-rb) would have carried its bytes (0 without -rb).
static int host_replica_fragment_exchange(HostReplica* x, const OuterCall* call, float* msg, double* ready) {
    HostDP* dp = x->dp;
    double t0 = now_seconds();
    size_t sent0 = comm_bytes_sent;
    if (!host_replica_pack(x, call, msg)) { return 0; }
    host_replica_fragment_sum(x, &dp->replica, call, msg, x->sbuf_bytes ? &x->sbuf : NULL);
    *ready = link_ready_time(t0, comm_bytes_sent - sent0, call->c.link_mbps);
    return 1;
}

// -lo, on the communication thread: an exchange's sum over the replicas through the thread's
// communicator, its tags the fragment's (a rank that issued the fragments in another order waits
// for a tag that never comes: the watchdog's span ends the job). Returns the bytes it sent, which
// must be those the trainer counted when it started it.
static size_t host_replica_exchange_job(void* arg) {
    HostExchange* job = (HostExchange*)arg;
    HostReplica* x = job->x;
    CommGroup g = x->replica_async;
    g.tag = 16 * (job->call.fragment + 1);
    size_t sent0 = comm_bytes_sent; // this thread's own count
    host_replica_fragment_sum(x, &g, &job->call, job->msg, &x->wbuf);
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
static float host_replica_fragment_apply(HostReplica* x, const OuterCall* call, const float* sum, const float* snap) {
    HostDP* dp = x->dp;
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
            float now = outer_update(&x->st.outer[o], &x->st.momentum[o], sum[run->packed + j], inv_R, c->lr,
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
// is skipped (host_replica_pack: nothing is handed over).
static int host_replica_fragment_start(HostReplica* x, const OuterCall* call) {
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    int f = call->fragment, R = dp->replica.size;
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) { // fragment f's owned local values
        const DpRun* run = &p->runs[i];
        memcpy(x->st.snap + run->owned, dp->params + run->param, run->count * sizeof(float));
    }
    HostExchange* job = &x->jobs[f];
    job->x = x;
    job->call = *call;
    job->msg = x->st.held + p->held_off[f];
    job->expect = outer_wire_bytes(p->frag_count[f], &call->c, R);
    if (!host_replica_pack(x, call, job->msg)) { return 0; }
    comm_bytes_sent += job->expect;
    comm_worker_submit(&x->worker, f, job);
    return 1;
}

// -lo: every exchange in flight has landed (their sums held, not applied): before a checkpoint.
static void host_replica_overlap_drain(HostReplica* x) {
    if (x->jobs) { comm_worker_drain(&x->worker); }
}

// The outer step of fragment call->fragment (-lf; the whole model without it) in phase call->phase,
// unless a rank's pseudo-gradients are not finite (then every replica skips it: returns 0):
// OUTER_BLOCKING exchanges in the idle gradient buffer on this thread, waits out the modelled
// link (-rb) and applies at once; OUTER_START (-lo) hands the exchange to the communication thread
// (host_replica_fragment_start); OUTER_FINISH waits for it (unless it landed before a checkpoint this run
// resumed from) and applies the held sum. Returns 1 and the applied squared norm in *sq (0 for
// OUTER_START).
static int host_replica_outer_step(void* ctx, const OuterCall* call, float* sq) {
    HostReplica* x = (HostReplica*)ctx;
    HostDP* dp = x->dp;
    const DpPlan* p = &dp->plan;
    int f = call->fragment;
    *sq = 0.0f;
    if (call->phase == OUTER_BLOCKING) {
        float* msg = p->zero_stage == 0 ? dp->grads : dp->shard_grads;
        double t0 = now_seconds(), ready = 0.0;
        int exchanged = host_replica_fragment_exchange(x, call, msg, &ready);
        wait_until(ready);
        x->link_waited[call->last] += now_seconds() - t0;
        if (!exchanged) { return 0; }
        *sq = host_replica_fragment_apply(x, call, msg, NULL);
        return 1;
    }
    if (call->phase == OUTER_START) { return host_replica_fragment_start(x, call); }
    if (comm_worker_has(&x->worker, f)) { x->link_waited[call->last] += comm_worker_wait(&x->worker, f); }
    *sq = host_replica_fragment_apply(x, call, x->st.held + p->held_off[f], x->st.snap);
    return 1;
}

// The CRC-32C of the owned outer (outer 1) or local parameters, all-gathered over the replicas.
static void host_replica_crcs(void* ctx, int outer, uint32_t* crcs) {
    HostReplica* x = (HostReplica*)ctx;
    HostDP* dp = x->dp;
    uint32_t crc = outer ? outer_state_crc(&dp->plan, x->st.outer) : dp_plan_local_crc(&dp->plan, dp->params, 0);
    int R = dp->replica.size;
    float* all = (float*)calloc_check(2 * (size_t)R, sizeof(float));
    crc_to_floats(crc, all + 2 * dp->replica.rank);
    COMM_TIMED(ring_all_gather(&dp->replica, all, 2));
    for (int r = 0; r < R; r++) { crcs[r] = crc_from_floats(all + 2 * r); }
    free(all);
}

static void host_replica_set_reduce(void* ctx, int every_step) { ((HostReplica*)ctx)->dp->replica_reduce = every_step; }

static void host_replica_set_gradient_wire(void* ctx, const OuterConfig* c) { ((HostReplica*)ctx)->grad_wire = *c; }

// The training loop's view of the sync (llmc/replica_ops.h; -le is the GPU trainer's).
static ReplicaOps host_replica_ops(HostReplica* x) {
    ReplicaOps ops = {x, host_replica_set_reduce, host_replica_set_gradient_wire, host_replica_outer_init,
                      host_replica_outer_step, host_replica_crcs, NULL, NULL, NULL};
    return ops;
}

// ----------------------------------------------------------------------------
// the hooks into the core, start-up and the end

// HostSyncHooks.wire_sums and sum_gradients: -ls 0 with -rq/-rk, the step's gradients (every rank's
// reduction finished but the replicas') summed over the replicas through the wire; not where the
// link is fp32 this step (the core's all-reduce does it).
static int host_replica_wire_sums_hook(void* ctx) { return outer_compressed(&((HostReplica*)ctx)->grad_wire); }

static void host_replica_sum_gradients_hook(void* ctx) { host_replica_sum_gradient((HostReplica*)ctx); }

// HostSyncHooks.state_arrays: the sync's arrays of a state file s (writing: the owned local
// parameters, the outer state, and with an -lo exchange in flight, every exchange first waited for,
// the held sums and local snapshots) or (reading, s NULL) where a resume loads them.
static void host_replica_state_arrays(void* ctx, const TrainState* s, StateArrays* arrays) {
    HostReplica* x = (HostReplica*)ctx;
    const DpPlan* p = &x->dp->plan;
    if (s) {
        x->state_local = s->has_local ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
        if (x->state_local) { host_replica_owned_params(x, x->state_local); }
        x->state_sums = s->has_pending ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
        if (x->state_sums) {
            host_replica_overlap_drain(x);
            dp_plan_held_owned(p, x->st.held, x->state_sums, 1);
        }
        outer_state_arrays(arrays, s, &x->st, x->state_local, x->state_sums);
        return;
    }
    x->state_local = x->st.outer ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    x->state_sums = x->st.held ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    outer_state_targets(arrays, &x->st, x->state_local, x->state_sums);
}

// HostSyncHooks.state_done: after a state file was written, or (got not NULL) read: what it
// loaded put in place (the local parameters, -lo's held sums).
static void host_replica_state_done(void* ctx, const TrainState* got) {
    HostReplica* x = (HostReplica*)ctx;
    if (got && got->has_local) { host_replica_set_owned_params(x, x->state_local); }
    if (got && got->has_pending) { dp_plan_held_owned(&x->dp->plan, x->st.held, x->state_sums, 0); }
    free(x->state_local);
    free(x->state_sums);
    x->state_local = x->state_sums = NULL;
}

// The sync of core dp (after host_dp_init) for the run's settings: the outer parameters and
// momentum (-ls), the residual (-ref 1 on a compressed link), the trainer thread's exchange
// buffers (-rq/-rk: the largest fragment with -ls, the owned gradient with -ls 0), and the core's
// hooks. Nothing is allocated, and the hooks stay empty, without a replica sync.
static void host_replica_init(HostReplica* x, HostDP* dp) {
    memset(x, 0, sizeof(*x));
    x->dp = dp;
    const DpPlan* p = &dp->plan;
    const OuterConfig* outer = p->outer;
    if (!replica_sync_on(outer)) { return; }
    int ls = outer->every > 0, compressed = outer_compressed(outer);
    x->st.outer = ls ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    x->st.momentum = ls ? (float*)calloc_check(p->sync_owned, sizeof(float)) : NULL;
    if (compressed && outer->feedback) { // the residual, zero, one per owned element (padded to R)
        x->st.residual = (float*)calloc_check(p->sync_padded, sizeof(float));
    }
    if (compressed) {
        OuterConfig late = outer_config_at(outer, outer->wire_start + 1);
        OuterExchangeBuffers b = outer_exchange_buffers(&late, p->mesh.dp_replicate, ls ? p->frag_max : p->owned_padded);
        if (!ls) { b.packed = 0; }
        x->sbuf_bytes = exchange_buffers_alloc(&x->sbuf, b);
    }
    HostSyncHooks hooks = {x, host_replica_wire_sums_hook, host_replica_sum_gradients_hook, host_replica_state_arrays, host_replica_state_done};
    dp->hooks = hooks;
}

static void host_replica_free(HostReplica* x) {
    float* bufs[] = {x->st.outer, x->st.momentum, x->st.residual, x->st.held, x->st.snap};
    for (int i = 0; i < 5; i++) { free(bufs[i]); }
    if (x->jobs) {
        comm_worker_stop(&x->worker);
        MPI_Comm_free(&x->replica_async.comm);
        exchange_buffers_free(&x->wbuf);
    }
    exchange_buffers_free(&x->sbuf);
    free(x->jobs);
}

#endif
