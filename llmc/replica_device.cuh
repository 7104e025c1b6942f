// The replica sync's device backend (the GPU trainer's -ls, -rq/-rk, -lf, -lo and -le 1; docs/design.md
// section 4b) above the ZeRO core of llmc/dp_device.cuh, the CPU trainer's semantics
// (llmc/replica_host.h): the outer state in device memory (llmc/outer_state.h), each fragment's
// messages packed and exchanged over the replicas on the communication stream (fp32 all-reduce, or
// the wire formats of llmc/wire_kernels.cuh; -lo in chunks across the steps), the outer step
// (llmc/outer_kernels.cuh), the replicas' checksums, the sync's arrays of a state file, and the
// elastic membership (llmc/dp_elastic.cuh: replicas dropped, rejoining). The core knows it only
// through DeviceSyncHooks, the training loop through ReplicaOps (llmc/replica_ops.h).
#ifndef LLMC_REPLICA_DEVICE_CUH
#define LLMC_REPLICA_DEVICE_CUH

#include "dp_device.cuh"
#include "outer_state.h"
#include "outer_kernels.cuh"
#include "wire_kernels.cuh"
#include "replica_ops.h"

// One fragment's exchange over the replicas, issued on the communication stream in `total` chunks
// (-lo tau: tau, one at the start of each of the tau steps after the one it starts after; else 1,
// at once): its packed messages dst (R slices of `slice`), its format w and wire buffers; `next`
// chunks are issued. Its completion is the fragment's own event (DeviceDP.exchanged[f]).
typedef struct {
    int next, total;
    float* dst;
    size_t slice;
    WireSpec w;
    uint8_t* send;
    uint8_t* recv;
    float* tmp;  // -lo tau >= 2, dense fp32: R ranges of a chunk side by side (R * ceil(slice / tau) floats)
    OuterConfig c;  // the sync's settings at its start
    int in_flight;  // -lo: started, not yet applied (-le 1 redoes it where a replica is lost meanwhile)
} DevExchange;


// The sync's state (DeviceDP.sync; allocated zeroed for every run, filled where there is a sync).
typedef struct DeviceReplica {
    OuterConfig grad_wire;     // -ls 0: how this step's gradients cross the replicas (-rq/-rk, -rqs)
    OuterState st;             // -ls: outer parameters, momentum, residual, held sums, snapshots (device)
    // -ls: the outer sync's message in ZeRO 0 (also -ls 0 -rq/-rk's; stages 1, 2 use shard_grads,
    // idle between steps), 2 floats per replica for the CRC all-gather, an event per fragment (its
    // exchange done, communication stream)
    float* outer_msg;
    float* crc_buf;
    float* flag;               // -ls: a sync's finiteness flag, world floats (the ring's padding)
    float* res_keep;           // -le 1 with a residual: each fragment's residual before its exchange, to redo it over fewer replicas
    size_t* held_at;           // -lo: where each fragment's held sum starts in st.held (plan.held_off; -le 1: room for R' slices)
    CommEvent* exchanged;
    // -rq/-rk (llmc/wire_kernels.cuh; NULL without): this rank's encoded message and every replica's
    // (-lo: one pair per fragment, wire_bytes apart; exchanges of several fragments may be in flight)
    uint8_t* wire_send;
    uint8_t* wire_recv;
    size_t wire_send_bytes, wire_recv_bytes;
    DevExchange* xch;          // -ls: each fragment's exchange, issued in chunks (dev_dp_issue_chunk)
} DeviceReplica;

static int dev_dp_elastic_wait(DeviceDP* dp, const char* what);
static void dev_dp_note_bytes(DeviceDP* dp);

static void dev_dp_wire_exchange(DeviceDP* dp, const WireSpec* w, float* dst, size_t slice, cudaStream_t cs,
                                 uint8_t* send, uint8_t* recv);

// -ls 0 with -rq/-rk, the CPU trainer's host_dp_replica_sum_gradient: the owned gradient summed over
// the shard group (ZeRO 0: an all-reduce on stream 0, then copied as fp32 into outer_msg; stages 1,
// 2: shard_grads, the reduce-scattered sums) plus the residual, padded to R slices, encoded (the
// residual keeps what that lost) and summed over the replicas (dev_dp_wire_exchange), then divided by
// the world, all on the communication stream; stream 0 waits for it.
static void dev_dp_compressed_gradients(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    int R = p->mesh.dp_replicate, S = p->mesh.dp_shard;
    size_t padded = p->owned_padded;
    if (p->zero_stage == 0 && S > 1) {
        int span = op_span_begin(OP_COMM, 0);
        device_link_order_on_main(&dp->link);
        size_t n = round_up(p->num_parameters, S);
        ncclCheck(ncclAllReduce(dp->grads, dp->grads, n, ncclFloatX, ncclSum, dp->link.shard, 0));
        op_span_end(span, 0.0, ring_bytes((double)n * sizeof(floatX), S, 1));
    }
    cudaStream_t cs = dp->link.comm_stream;
    device_link_order_on_comm(&dp->link);
    float* msg = p->zero_stage == 0 ? dp->sync->outer_msg : dp->shard_grads;
    DeviceMuonOwned* mo = dp->muon_sharded ? &dp->owned : NULL; // the owned Muon gradients out to the slices it sums
    if (mo) { muon_owned_slices(mo, &p->layout, mo->acc, dp->shard_grads, 1, 0, INT_MAX, dp->link.shard, cs); }
    WireSpec w = outer_wire_spec(&dp->sync->grad_wire, 0, R);
    wire_gradient_message(msg, p->zero_stage == 0 ? dp->grads : NULL, dp->sync->st.residual, p->owned, padded, cs);
    wire_spec_encode_slices(&w, msg, padded / R, R, dp->sync->wire_send, dp->sync->st.residual != NULL, cs);
    if (dp->sync->st.residual) {
        cudaCheck(cudaMemcpyAsync(dp->sync->st.residual, msg, p->owned * sizeof(float), cudaMemcpyDeviceToDevice, cs));
    }
    dev_dp_wire_exchange(dp, &w, msg, padded / R, cs, dp->sync->wire_send, dp->sync->wire_recv);
    float inv = 1.0f / (float)p->mesh.world;
    if (p->zero_stage == 0) {
        wire_gradient_back(dp->grads, msg, p->owned, inv, cs);
    } else {
        scale(dp->shard_grads, p->owned, inv, cs);
    }
    if (mo) { // and back to their owners
        muon_owned_slices(mo, &p->layout, mo->acc, dp->shard_grads, 0, 0, INT_MAX, dp->link.shard, cs);
        muon_owned_zero_slices(mo, &p->layout, dp->shard_grads, cs);
    }
    device_link_record(&dp->link, &dp->link.comm_done);
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.comm_done));
}

// The loop's settings of the next step (llmc/replica_ops.h): whether its gradients are averaged over every
// rank (1) or the replica's shard group (-ls between syncs), and (-ls 0) the link's format.
static void dev_dp_set_gradient_wire(void* ctx, const OuterConfig* c) { ((DeviceDP*)ctx)->sync->grad_wire = *c; }
static void dev_dp_set_replica_reduce(void* ctx, int every_step) { ((DeviceDP*)ctx)->replica_reduce = every_step; }


// ----------------------------------------------------------------------------
// -ls: the outer sync of the replicas (llmc/outer_sync.h) on this rank's sync elements (the plan's:
// AdamW's, or with ZeRO 0 its ZeRO-1 slices, all-gathered in the replica after), the CPU trainer's
// semantics. A rank's local parameters are its elements of the fp32 master weights where the
// optimizer keeps them (master, at dp_span_adam's places), else of the floatX parameters (at the
// sync spans). Everything here waits for the last parameter all-gather first (it writes the
// parameters the spans lie in); outer syncs are rare.

// dst (fp32 host values in the sync's order, padding 0) = the floatX parameters of the sync's elements.
static void dev_dp_download_owned(DeviceDP* dp, float* dst) {
    const DpPlan* p = &dp->plan;
    device_link_host_wait(&dp->link, "the owned parameters");
    memset(dst, 0, p->sync_owned * sizeof(float));
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        download_floatX(dst + sp->owned_offset, dp->params + sp->param_offset, sp->count);
    }
}

// The floatX parameters of the sync's elements = src (the sync's order, fp32 host values), then
// (sync stage 1, 2) the all-gather inside the replica, so that its ranks hold the same full
// parameters again; stream 0 waits for it.
static void dev_dp_upload_owned(DeviceDP* dp, const float* src) {
    const DpPlan* p = &dp->plan;
    device_link_comm_wait(&dp->link);
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        upload_floatX(dp->params + sp->param_offset, src + sp->owned_offset, sp->count);
    }
    if (p->sync_stage == 0) { return; }
    dev_dp_all_gather_units(dp, -1, 1);
    device_link_comm_wait(&dp->link);
    wait_device(0, dp->link.host_event, "the all-gather of the resumed parameters");
}

// outer = the local parameters of the sync's elements (fp32), the outer momentum 0 (stream 0).
static void dev_dp_outer_init(void* ctx) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    device_link_comm_wait(&dp->link);
    cudaCheck(cudaMemsetAsync(dp->sync->st.outer, 0, p->sync_owned * sizeof(float), 0));
    cudaCheck(cudaMemsetAsync(dp->sync->st.momentum, 0, p->sync_owned * sizeof(float), 0));
    dev_dp_muon_master_slices(dp, 1, -1);
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        const float* mw = dp->opt.master ? dp->opt.master + dp_span_adam(p, sp) : NULL;
        outer_local(dp->sync->st.outer + sp->owned_offset, mw, dp->params + sp->param_offset, sp->count);
    }
}

// Fragment f's packed messages zero-padded to equal slices of the replicas training (R, or R' after
// -le 1 dropped some: each survivor then owns one of R' slices, in the old order).
static size_t dev_dp_live_padded(const DeviceDP* dp, int f) {
    return round_up(dp->plan.frag_count[f], dp->el.live_R);
}

// The sum over the replicas of dst (R slices of `slice` values, packed), into dst, on cs; records
// comm_done. Dense fp32: one all-reduce. A format or -rk (w; wire_send: this replica's R slices,
// encoded), as the CPU trainer's owners do (llmc/dp_host.h): slice j goes to replica j (one group of
// ncclSend/ncclRecv; its own by a copy), which decodes the R it holds and sums them in fp32 in
// replica order 0..R-1 and encodes that sum (the owner's spec: -rk keeps R times the values) into
// its place of wire_recv; the owners' encodings are all-gathered and every replica (the owner too)
// decodes all R. Bytes per rank: (R-1) slices in w and (R-1) in the owner's spec, the CPU's closed
// form; wire_recv: R slices of the larger. The -ls 0 path (dev_dp_compressed_gradients) and one
// chunk of a fragment's exchange (dev_dp_issue_chunk). send, recv: the wire buffers.
static void dev_dp_wire_exchange(DeviceDP* dp, const WireSpec* w, float* dst, size_t slice, cudaStream_t cs,
                                 uint8_t* send, uint8_t* recv) {
    int R = dp->el.live_R, me = dp->el.live_me; // -le 1: the replicas still training
    int dense = w->format == WIRE_FP32 && w->density == 0.0f;
    if (dense && R == 1) { return; }
    int span = op_span_begin(OP_COMM, cs);
    if (dense) {
        ncclCheckOn(dp->link.replica, ncclAllReduce(dst, dst, slice * R, ncclFloat, ncclSum, dp->link.replica, cs));
        device_link_carry(&dp->link, ring_bytes((double)slice * R * sizeof(float), R, 1));
        op_span_end(span, 0.0, ring_bytes((double)slice * R * sizeof(float), R, 1));
    } else {
        WireSpec owner = *w;
        owner.mult = R;
        size_t bytes = wire_spec_bytes(w, slice), obytes = wire_spec_bytes(&owner, slice);
        ncclCheck(ncclGroupStart());
        for (int j = 0; j < R; j++) {
            if (j == me) { continue; }
            ncclCheckOn(dp->link.replica, ncclSend(send + j * bytes, bytes, ncclUint8, j, dp->link.replica, cs));
            ncclCheckOn(dp->link.replica, ncclRecv(recv + j * bytes, bytes, ncclUint8, j, dp->link.replica, cs));
        }
        ncclCheckOn(dp->link.replica, ncclGroupEnd());
        cudaCheck(cudaMemcpyAsync(recv + me * bytes, send + me * bytes, bytes, cudaMemcpyDeviceToDevice, cs));
        float* mine = dst + (size_t)me * slice;
        wire_spec_decode_sum(w, mine, recv, slice, 1, R, cs);
        wire_spec_encode_slices(&owner, mine, slice, 1, recv + me * obytes, 0, cs);
        ncclCheckOn(dp->link.replica, ncclAllGather(recv + me * obytes, recv, obytes, ncclUint8, dp->link.replica, cs));
        wire_spec_decode_sum(&owner, dst, recv, slice, R, 1, cs);
        device_link_carry(&dp->link, (double)(R - 1) * (double)(bytes + obytes));
        op_span_end(span, 0.0, (double)(R - 1) * (double)(bytes + obytes));
    }
    device_link_record(&dp->link, &dp->link.comm_done);
}

// Byte (or element) range [*a, *b) of chunk c of n over `total`.
static void dev_dp_chunk_range(size_t total, int c, int n, size_t* a, size_t* b) {
    *a = total * (size_t)c / (size_t)n;
    *b = total * (size_t)(c + 1) / (size_t)n;
}

// The next chunk of fragment f's exchange on the communication stream, after it waits for stream 0's
// work so far (the order of collectives, llmc/dp_device_link.cuh); the last one records the
// fragment's event. One chunk: the whole exchange (dev_dp_wire_exchange). n > 1 chunks move the
// same bytes in pieces: dense fp32, chunk c all-reduces the c-th range of every slice, the R ranges
// side by side (so that each slice's range is the ring's chunk it was in the whole all-reduce, and
// every element is summed in the same order); a format, the first ceil(n/2) chunks move
// ranges of each slice's encoding to its owner, and the others (the first after the owner's decoded
// sum and its encoding) ranges of the owners' encodings to every replica, the last decoding them all.
static void dev_dp_issue_chunk(DeviceDP* dp, int f) {
    DevExchange* x = &dp->sync->xch[f];
    cudaStream_t cs = dp->link.comm_stream;
    int c = x->next++, n = x->total;
    device_link_order_on_comm(&dp->link);
    int R = dp->el.live_R, me = dp->el.live_me, dense = x->w.format == WIRE_FP32 && x->w.density == 0.0f;
    if (n == 1 || R == 1) {
        dev_dp_wire_exchange(dp, &x->w, x->dst, x->slice, cs, x->send, x->recv);
    } else if (dense) { // the same range of each slice side by side: slice j's stays the ring's j-th
        size_t a, b;
        dev_dp_chunk_range(x->slice, c, n, &a, &b);
        size_t len = b - a;
        for (int j = 0; j < R; j++) {
            cudaCheck(cudaMemcpyAsync(x->tmp + j * len, x->dst + j * x->slice + a, len * sizeof(float),
                                      cudaMemcpyDeviceToDevice, cs));
        }
        int span = op_span_begin(OP_COMM, cs);
        ncclCheckOn(dp->link.replica, ncclAllReduce(x->tmp, x->tmp, len * R, ncclFloat, ncclSum, dp->link.replica, cs));
        for (int j = 0; j < R; j++) {
            cudaCheck(cudaMemcpyAsync(x->dst + j * x->slice + a, x->tmp + j * len, len * sizeof(float),
                                      cudaMemcpyDeviceToDevice, cs));
        }
        double moved = ring_bytes((double)len * R * sizeof(float), R, 1);
        device_link_carry(&dp->link, moved);
        op_span_end(span, 0.0, moved);
        device_link_record(&dp->link, &dp->link.comm_done);
    } else {
        WireSpec owner = x->w;
        owner.mult = R;
        size_t bytes = wire_spec_bytes(&x->w, x->slice), obytes = wire_spec_bytes(&owner, x->slice), a, b;
        int first = (n + 1) / 2, phase2 = c >= first;
        size_t len = phase2 ? obytes : bytes;
        dev_dp_chunk_range(len, phase2 ? c - first : c, phase2 ? n - first : first, &a, &b);
        uint8_t *send = x->send, *recv = x->recv;
        float* mine = x->dst + (size_t)me * x->slice;
        if (c == first) { // the owner's sum of the R encodings of its slice, encoded in the owner's spec
            cudaCheck(cudaMemcpyAsync(recv + me * bytes, send + me * bytes, bytes, cudaMemcpyDeviceToDevice, cs));
            wire_spec_decode_sum(&x->w, mine, recv, x->slice, 1, R, cs);
            wire_spec_encode_slices(&owner, mine, x->slice, 1, recv + me * obytes, 0, cs);
        }
        int span = op_span_begin(OP_COMM, cs);
        ncclCheck(ncclGroupStart());
        for (int j = 0; j < R; j++) {
            if (j == me) { continue; }
            const uint8_t* out = phase2 ? recv + me * obytes + a : send + j * bytes + a;
            uint8_t* in = phase2 ? recv + j * obytes + a : recv + j * bytes + a;
            ncclCheckOn(dp->link.replica, ncclSend(out, b - a, ncclUint8, j, dp->link.replica, cs));
            ncclCheckOn(dp->link.replica, ncclRecv(in, b - a, ncclUint8, j, dp->link.replica, cs));
        }
        ncclCheckOn(dp->link.replica, ncclGroupEnd());
        device_link_carry(&dp->link, (double)(R - 1) * (double)(b - a));
        op_span_end(span, 0.0, (double)(R - 1) * (double)(b - a));
        if (c == n - 1) { wire_spec_decode_sum(&owner, x->dst, recv, x->slice, R, 1, cs); }
        device_link_record(&dp->link, &dp->link.comm_done);
    }
    if (x->next == n) { device_link_record(&dp->link, &dp->sync->exchanged[f]); }
}

// -lo: at the start of a step, the next chunk of every fragment's exchange in flight, in fragment
// order on every rank (the order of collectives).
static void dev_dp_pump(DeviceDP* dp) {
    for (int f = 0; dp->sync->xch && f < dp->plan.num_fragments; f++) {
        if (dp->sync->xch[f].next < dp->sync->xch[f].total) { dev_dp_issue_chunk(dp, f); }
    }
}

// Every chunk of fragment f's exchange not yet issued (f < 0: of every fragment, in order), now:
// before its result is applied early (the last step) or a checkpoint holds it.
static void dev_dp_drain(DeviceDP* dp, int f) {
    for (int g = 0; dp->sync->xch && g < dp->plan.num_fragments; g++) {
        while ((f < 0 || g == f) && dp->sync->xch[g].next < dp->sync->xch[g].total) { dev_dp_issue_chunk(dp, g); }
    }
}

// The spec of an exchange under c (fp32, dense, where -rqs has not switched yet).
static WireSpec dev_dp_wire_spec(const OuterConfig* c) {
    WireSpec fp32 = {WIRE_FP32, 0.0f, 1};
    return outer_compressed(c) ? outer_wire_spec(c, 0, 1) : fp32;
}

// Whether every rank's packed messages (x, n values: this rank's) are finite: the flag, one float
// all-reduced over every rank (stream 0), read back with a host wait. Every replica then skips the
// same syncs alike (nothing exchanged, the residual and the outer state as they were). -le 1:
// -1 where a replica was lost in it (the survivors redo the sync, elastic_wait).
static int dev_dp_messages_finite(DeviceDP* dp, const float* x, size_t n) {
    int W = dp->plan.mesh.world;
    cudaCheck(cudaMemsetAsync(dp->sync->flag, 0, W * sizeof(float), 0));
    outer_nonfinite(dp->sync->flag, x, n, 0);
    int span = op_span_begin(OP_COMM, 0);
    device_link_order_on_main(&dp->link);
    int ranks = dp->el.live_W; // W, or the ranks left (-le 1)
    if (ranks > 1) { ncclCheckOn(dp->link.world, ncclAllReduce(dp->sync->flag, dp->sync->flag, ranks, ncclFloat, ncclSum, dp->link.world, 0)); }
    op_span_end(span, 0.0, ring_bytes((double)ranks * sizeof(float), ranks, 1));
    if (!dp->el.on) {
        wait_device(0, dp->link.host_event, "the outer sync's finiteness flag");
    } else if (!dev_dp_elastic_wait(dp, "the outer sync's finiteness flag")) {
        return -1;
    }
    float total;
    cudaCheck(cudaMemcpy(&total, dp->sync->flag, sizeof(float), cudaMemcpyDeviceToHost));
    return total == 0.0f;
}

// Fragment f's messages packed into dst (its owned elements in owned order, zero-padded to the
// slices of the replicas training) on stream 0: each owned element's outer_message from the local
// values (the master weights or parameters; from_snap, -le 1 redoing an exchange: the snapshot
// taken when it started) plus its residual with -rq/-rk and feedback; snap_out (-lo) receives the
// local values. Returns the padded size.
static size_t dev_dp_pack_messages(DeviceDP* dp, int f, const OuterConfig* c, float* dst, const float* from_snap,
                                   float* snap_out) {
    const DpPlan* p = &dp->plan;
    size_t padded = dev_dp_live_padded(dp, f);
    const float* res = outer_compressed(c) ? dp->sync->st.residual : NULL;
    cudaCheck(cudaMemsetAsync(dst, 0, padded * sizeof(float), 0));
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* r = &p->runs[i];
        size_t o = r->owned;
        const float* mw = from_snap ? from_snap + o : dp->opt.master ? dp->opt.master + r->adam : NULL;
        if (snap_out) { outer_local(snap_out + o, mw, dp->params + r->param, r->count); }
        outer_span_message(dst + r->packed, dp->sync->st.outer + o, mw, dp->params + r->param, res ? res + o : NULL, r->count,
                           outer_plain_average(c));
    }
    return padded;
}

// -le 1: fragment f's owned elements of the residual from src to dst on stream s (0, where the
// messages are packed): kept as they were before its exchange, or restored from there (the
// fragments' elements are disjoint, so exchanges of several fragments in flight each keep their own).
static void dev_dp_residual_runs(DeviceDP* dp, int f, float* dst, const float* src, cudaStream_t s) {
    const DpPlan* p = &dp->plan;
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* r = &p->runs[i];
        cudaCheck(cudaMemcpyAsync(dst + r->owned, src + r->owned, r->count * sizeof(float), cudaMemcpyDeviceToDevice, s));
    }
}

// Fragment f's exchange of its packed messages dst: with -rq/-rk every slice encoded on the
// communication stream (after stream 0's messages; the residual keeps what that lost, -le 1 after
// keeping it as it was), then the sum over the replicas in `chunks` chunks (dev_dp_issue_chunk):
// the first now where `now`, else (-lo) one at the start of each of the next steps (dev_dp_pump).
static void dev_dp_exchange_issue(DeviceDP* dp, int f, const OuterConfig* c, float* dst, int chunks, int now) {
    const DpPlan* p = &dp->plan;
    int R = dp->el.live_R;
    float* res = outer_compressed(c) ? dp->sync->st.residual : NULL;
    cudaStream_t cs = dp->link.comm_stream;
    if (dp->sync->res_keep && res) { dev_dp_residual_runs(dp, f, dp->sync->res_keep, res, 0); } // -le 1: should it be redone
    int copy = p->outer->overlap > 0 ? f : 0; // -lo: the fragment's own wire buffers
    DevExchange* x = &dp->sync->xch[f];
    x->next = 0;
    x->total = chunks;
    x->dst = dst;
    x->slice = dev_dp_live_padded(dp, f) / R;
    x->w = dev_dp_wire_spec(c);
    x->c = *c;
    x->send = dp->sync->wire_send ? dp->sync->wire_send + copy * dp->sync->wire_send_bytes : NULL;
    x->recv = dp->sync->wire_recv ? dp->sync->wire_recv + copy * dp->sync->wire_recv_bytes : NULL;
    if (outer_compressed(c)) { // encoded on the communication stream, after stream 0's messages
        device_link_order_on_comm(&dp->link);
        wire_spec_encode_slices(&x->w, dst, x->slice, R, x->send, res != NULL, cs);
        for (int i = p->frag_runs[f]; res && i < p->frag_runs[f + 1]; i++) { // the residual back in owned order
            const DpRun* r = &p->runs[i];
            cudaCheck(cudaMemcpyAsync(res + r->owned, dst + r->packed, r->count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, cs));
        }
    }
    if (now) { dev_dp_issue_chunk(dp, f); }
}

// Fragment call->fragment's exchange (the whole model without -lf), the CPU trainer's: its messages
// packed (dev_dp_pack_messages, after the parameters' last all-gather; snap, -lo: the local values
// kept), then unless the finiteness flag says skip (returns 0) encoded and summed over the replicas
// (dev_dp_exchange_issue): blocking (snap NULL) at once, with -lo one chunk at the start of each of
// the next `chunks` steps; the last records the fragment's event. Nothing of stream 0 waits for the
// exchange but the apply (dev_dp_fragment_apply). Returns 1, 0 (skip), or -1 (-le 1: a replica was
// lost in the flag's all-reduce; redo).
static int dev_dp_fragment_exchange(DeviceDP* dp, const OuterCall* call, float* dst, float* snap, int chunks) {
    const DpPlan* p = &dp->plan;
    int L = p->layout.num_layers;
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.params_ready[L])); // the last all-gather
    dev_dp_muon_master_slices(dp, 1, call->fragment); // the owners' Muon matrices into the slices it reads
    size_t padded = dev_dp_pack_messages(dp, call->fragment, &call->c, dst, NULL, snap);
    fault_die_at(&run_fault, FAULT_DIE_SYNC, call->step, p->mesh.rank, "the outer sync");
    float bad = fault_pseudo_grad(&run_fault, call->step, p->mesh.rank); // -fi nan_pg, inf_pg
    static float bad_value; // outlives the asynchronous copy
    bad_value = bad;
    if (bad != 0.0f) { cudaCheck(cudaMemcpyAsync(dst, &bad_value, sizeof(float), cudaMemcpyHostToDevice, 0)); }
    int finite = dev_dp_messages_finite(dp, dst, padded);
    if (finite <= 0) { return finite; }
    fault_die_at(&run_fault, FAULT_DIE_XCHG, call->step, p->mesh.rank, "the outer sync's exchange");
    dev_dp_exchange_issue(dp, call->fragment, &call->c, dst, chunks, snap == NULL);
    return 1;
}

// -le 1, after the survivors shrank their communicators (a replica lost): every -lo exchange in
// flight is redone over them from its start, at once (the residual as it was then, the messages
// from the snapshot of the local values then, cut into R' slices); its apply stays where it was.
static void dev_dp_redo_in_flight(DeviceDP* dp) {
    int any = 0;
    for (int f = 0; dp->sync->xch && f < dp->plan.num_fragments; f++) { any |= dp->sync->xch[f].in_flight; }
    if (!any) { return; }
    // after every exchange's encoding and chunks so far (the residual, dst), abandoned or not, and
    // before any redone one (-lf: several in flight; stream 0 must not wait for the redone ones)
    device_link_comm_wait(&dp->link);
    for (int f = 0; f < dp->plan.num_fragments; f++) {
        DevExchange* x = &dp->sync->xch[f];
        if (x->in_flight && dp->sync->res_keep && outer_compressed(&x->c)) {
            dev_dp_residual_runs(dp, f, dp->sync->st.residual, dp->sync->res_keep, 0);
        }
    }
    for (int f = 0; f < dp->plan.num_fragments; f++) {
        DevExchange* x = &dp->sync->xch[f];
        if (!x->in_flight) { continue; }
        OuterConfig c = x->c;
        dev_dp_pack_messages(dp, f, &c, x->dst, dp->sync->st.snap, NULL);
        dev_dp_exchange_issue(dp, f, &c, x->dst, 1, 1);
    }
}

// -le 1 -lo, while an exchange is in flight (elastic_wait_hook, llmc/device_wait.cuh): a wait that
// failed recovers as an elastic one does and redoes the exchange; the wait then goes on.
static DeviceDP* dev_dp_hooked = NULL;
static void dev_dp_wait_hook(const char* why, ncclComm_t failed) {
    DeviceDP* dp = dev_dp_hooked;
    elastic_failed(&dp->el, &dp->link, &dp->plan.mesh, why, failed);
    dev_dp_note_bytes(dp);
    dev_dp_redo_in_flight(dp);
}

// -le 1: elastic_wait, and after a recovery from a lost replica the survivors' closed forms noted
// and the exchanges in flight redone (returns 0: the caller redoes its own work too).
static int dev_dp_elastic_wait(DeviceDP* dp, const char* what) {
    if (elastic_wait(&dp->el, &dp->link, &dp->plan.mesh, what)) { return 1; }
    dev_dp_note_bytes(dp);
    dev_dp_redo_in_flight(dp);
    return 0;
}

// The outer step of fragment call->fragment with its summed messages `sum` (packed): outer_update on
// each owned element (the new local value to master and the floatX parameter; snap, -lo: merged with
// the local values held at the exchange's start), the mean pseudo-gradient back into sum and its
// squares summed (over the shard group in sync stages 1, 2), then (sync stages 1, 2) the all-gather of
// the fragment's units inside the replica, which the next forward waits for layer by layer. Returns
// the squared norm (one host wait).
static float dev_dp_fragment_apply(DeviceDP* dp, const OuterCall* call, float* sum, const float* snap) {
    const DpPlan* p = &dp->plan;
    int S = p->mesh.dp_shard, f = call->fragment, L = p->layout.num_layers;
    dev_dp_drain(dp, f); // the last step applies what is in flight early
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->sync->exchanged[f]));
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.params_ready[L])); // the last all-gather
    float inv_R = 1.0f / (float)dp->el.live_R; // -le 1: the mean over the replicas still training
    if (snap) { dev_dp_muon_master_slices(dp, 1, f); } // -lo: the owners' Muon steps since the exchange began
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* r = &p->runs[i];
        size_t o = r->owned;
        outer_span_update(dp->sync->st.outer + o, dp->sync->st.momentum + o, sum + r->packed, dp->opt.master ? dp->opt.master + r->adam : NULL,
                          dp->params + r->param, snap ? snap + o : NULL, r->count, inv_R, &call->c);
    }
    dev_dp_muon_master_slices(dp, 0, f); // and back to their owners
    sum_of_squares(dp->norm, sum, dev_dp_live_padded(dp, f), dp->norm + S);
    if (p->sync_stage != 0) {
        dev_dp_norm_over_shard(dp);
        dev_dp_all_gather_units(dp, p->num_fragments > 1 ? f : -1, 1);
    }
    return dev_dp_norm_read(dp, "the outer sync");
}

// -le 1: whether fragment f's blocking exchange ended (stream 0 waits for it, the host for stream
// 0 through the elastic wait: 0 where a replica was lost in it and the survivors shrank their
// communicators); 1 without -le (the apply waits for it as before).
static int dev_dp_exchange_done(DeviceDP* dp, int f) {
    if (!dp->el.on) { return 1; }
    device_link_wait(&dp->link, &dp->sync->exchanged[f]);
    return dev_dp_elastic_wait(dp, "the outer sync's exchange");
}

// The outer step of fragment call->fragment in phase call->phase (llmc/outer_sync.h): OUTER_BLOCKING
// exchanges in the idle buffer (stages 1, 2: shard_grads; ZeRO 0: outer_msg) and applies at once;
// OUTER_START (-lo) exchanges into the fragment's held sum and keeps its owned local values, without
// waiting (the exchange runs on the communication stream beside the next steps); OUTER_FINISH
// applies the held sum once its `exchanged` event has passed. Returns the applied squared norm (0
// for OUTER_START).
static int dev_dp_outer_step(void* ctx, const OuterCall* call, float* sq) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    int f = call->fragment;
    *sq = 0.0f;
    if (call->last) { dp->link.after_last = 1; } // -rb: waits from here on count after the last step
    if (call->phase == OUTER_BLOCKING) {
        float* buf = p->zero_stage == 0 ? dp->sync->outer_msg : dp->shard_grads;
        for (;;) { // -le 1: a replica lost in the flag or the exchange, the survivors redo it over R'
            int got = dev_dp_fragment_exchange(dp, call, buf, NULL, 1);
            if (got == 0) { return 0; }
            if (got > 0 && dev_dp_exchange_done(dp, f)) { break; }
            if (got > 0 && dp->sync->res_keep && outer_compressed(&call->c)) { // the residual before the encoding
                dev_dp_residual_runs(dp, f, dp->sync->st.residual, dp->sync->res_keep, 0); // (the restore: the messages read it)
            }
        }
        *sq = dev_dp_fragment_apply(dp, call, buf, NULL);
        return 1;
    }
    float* held = dp->sync->st.held + dp->sync->held_at[f];
    DevExchange* x = &dp->sync->xch[f];
    if (call->phase == OUTER_START) {
        int got;
        while ((got = dev_dp_fragment_exchange(dp, call, held, dp->sync->st.snap, p->outer->overlap)) < 0) {}
        x->in_flight = got;
        if (got && dp->el.on) { // any wait may stand behind its chunks now
            dev_dp_hooked = dp;
            elastic_wait_hook = dev_dp_wait_hook;
        }
        return got;
    }
    while (dp->el.on) { // -le 1: a replica lost meanwhile makes the survivors redo it (dev_dp_redo_in_flight)
        dev_dp_drain(dp, f);
        if (dev_dp_exchange_done(dp, f)) { break; }
    }
    x->in_flight = 0;
    int others = 0;
    for (int g = 0; g < p->num_fragments; g++) { others += dp->sync->xch[g].in_flight; }
    if (!others) { elastic_wait_hook = NULL; } // (-lf: another fragment's exchange may still be in flight)
    *sq = dev_dp_fragment_apply(dp, call, held, dp->sync->st.snap);
    return 1;
}

// The CRC-32C of the owned outer parameters (outer 1: all owned elements, padding included) or
// of the owned local parameters as fp32 (0: span by span, no padding), as the CPU trainer computes
// them, all-gathered over the replicas (2 floats each, llmc/outer_sync.h).
static void dev_dp_replica_crcs(void* ctx, int outer, uint32_t* crcs) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    int R = dp->el.live_R, me = dp->el.live_me; // -le 1: the replicas still training
    size_t n = p->owned > p->sync_owned ? p->owned : p->sync_owned;
    float* host = (float*)malloc_check((n > 2 * (size_t)R ? n : 2 * (size_t)R) * sizeof(float));
    uint32_t crc = 0;
    if (outer) { // written on stream 0 (-lo: an exchange may still run on the communication stream)
        wait_device(0, dp->link.host_event, "the outer parameters");
        cudaCheck(cudaMemcpy(host, dp->sync->st.outer, p->sync_owned * sizeof(float), cudaMemcpyDeviceToHost));
        crc = outer_state_crc(p, host);
    } else if (dp->opt.master) { // AdamW's order: the parameters' in ZeRO 0 (dp_span_adam)
        dev_dp_muon_master_slices(dp, 1, -1);
        cudaCheck(cudaMemcpy(host, dp->opt.master, p->owned * sizeof(float), cudaMemcpyDeviceToHost));
        crc = dp_plan_local_crc(p, host, p->zero_stage != 0);
    } else {
        dev_dp_download_owned(dp, host);
        crc = dp_plan_local_crc(p, host, 1);
    }
    float mine[2];
    crc_to_floats(crc, mine);
    cudaCheck(cudaMemcpy(dp->sync->crc_buf + 2 * me, mine, sizeof(mine), cudaMemcpyHostToDevice));
    device_link_order_on_main(&dp->link);
    ncclCheckOn(dp->link.replica, ncclAllGather(dp->sync->crc_buf + 2 * me, dp->sync->crc_buf, 2, ncclFloat, dp->link.replica, 0));
    wait_device(0, dp->link.host_event, "the replicas' CRC-32Cs");
    cudaCheck(cudaMemcpy(host, dp->sync->crc_buf, 2 * (size_t)R * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < R; r++) { crcs[r] = crc_from_floats(host + 2 * r); }
    free(host);
}


// -le 1, a rank whose replica rejoins or is rebuilt from the outer state: its fp32 master weights
// (where kept) of the sync's elements = the outer parameters (stream 0).
static void dev_dp_master_from_outer(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    for (int i = 0; dp->opt.master && i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        cudaCheck(cudaMemcpyAsync(dp->opt.master + dp_span_adam(p, sp), dp->sync->st.outer + sp->owned_offset,
                                  sp->count * sizeof(float), cudaMemcpyDeviceToDevice, 0));
    }
    dev_dp_muon_master_slices(dp, 0, -1); // the owners' whole Muon matrices too
}


// ----------------------------------------------------------------------------
// checkpoints: the sync's arrays of a state file, through the core's host copies at

// DeviceSyncHooks.state_out: with -ls the owned local parameters (the floatX parameters as fp32,
// exact; the replicas differ between syncs), the outer state, the residual (-rq) and, with -lo
// exchanges in flight, the local snapshots and the held sums (once every exchange has landed).
static void dev_replica_state_out(DeviceDP* dp, const TrainState* s, float** at, StateArrays* arrays) {
    const DpPlan* p = &dp->plan;
    size_t ns = p->sync_owned;
    if (p->sync_stage != p->zero_stage) { // a sharded ZeRO 0 sync's all-gather writes the master weights
        device_link_host_wait(&dp->link, "the master weights");
    }
    if (s->has_local) { dev_dp_download_owned(dp, at[STATE_LOCAL]); }
    OuterState h = {at[STATE_OUTER], at[STATE_OUTER_M], at[STATE_RESIDUAL], NULL, at[STATE_PEND_SNAP]};
    if (s->has_outer) {
        cudaCheck(cudaMemcpy(h.outer, dp->sync->st.outer, ns * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(h.momentum, dp->sync->st.momentum, ns * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (s->has_pending) { // every exchange landed first (all its chunks issued, the communication stream)
        dev_dp_drain(dp, -1);
        device_link_host_wait(&dp->link, "the -lo exchanges in flight");
        size_t total = p->held_off[p->num_fragments];
        float* packed = (float*)malloc_check(total * sizeof(float));
        cudaCheck(cudaMemcpy(h.snap, dp->sync->st.snap, ns * sizeof(float), cudaMemcpyDeviceToHost));
        for (int f = 0; f < p->num_fragments; f++) { // (every replica training: R slices each)
            cudaCheck(cudaMemcpy(packed + p->held_off[f], dp->sync->st.held + dp->sync->held_at[f],
                                 (p->held_off[f + 1] - p->held_off[f]) * sizeof(float), cudaMemcpyDeviceToHost));
        }
        dp_plan_held_owned(p, packed, at[STATE_PEND_SUM], 1);
        free(packed);
    }
    if (s->has_residual) {
        device_link_host_wait(&dp->link, "the residual"); // written on stream 0 at an exchange's start
        cudaCheck(cudaMemcpy(h.residual, dp->sync->st.residual, ns * sizeof(float), cudaMemcpyDeviceToHost));
    }
    outer_state_arrays(arrays, s, &h, at[STATE_LOCAL], at[STATE_PEND_SUM]);
}

// DeviceSyncHooks.state_targets: where a resume loads the sync's arrays that this run keeps.
static void dev_replica_state_targets(DeviceDP* dp, float** at, StateArrays* arrays) {
    const OuterState* st = &dp->sync->st;
    OuterState h = {st->outer ? at[STATE_OUTER] : NULL, st->momentum ? at[STATE_OUTER_M] : NULL,
                    st->residual ? at[STATE_RESIDUAL] : NULL, NULL, st->held ? at[STATE_PEND_SNAP] : NULL};
    outer_state_targets(arrays, &h, at[STATE_LOCAL], at[STATE_PEND_SUM]);
}

// DeviceSyncHooks.state_in: the owned local parameters (written into the floatX parameters, then
// all-gathered inside the replica), the outer state, the residual and -lo's held sums and
// snapshots, where the checkpoint holds them.
static void dev_replica_state_in(DeviceDP* dp, const TrainState* got, float** at) {
    const DpPlan* p = &dp->plan;
    size_t ns = p->sync_owned;
    if (got->has_outer) {
        cudaCheck(cudaMemcpy(dp->sync->st.outer, at[STATE_OUTER], ns * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dp->sync->st.momentum, at[STATE_OUTER_M], ns * sizeof(float), cudaMemcpyHostToDevice));
    }
    // the checkpoint lost this replica (-le 1): master weights from the outer parameters, before a
    // sharded ZeRO 0 sync's all-gather below spreads them inside the replica
    if (got->rebuilt) { dev_dp_master_from_outer(dp); }
    if (got->has_local) { dev_dp_upload_owned(dp, at[STATE_LOCAL]); }
    if (dp->sync->st.residual && got->has_residual) {
        cudaCheck(cudaMemcpy(dp->sync->st.residual, at[STATE_RESIDUAL], ns * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (got->has_pending) {
        size_t total = p->held_off[p->num_fragments];
        float* packed = (float*)calloc_check(total, sizeof(float));
        cudaCheck(cudaMemcpy(dp->sync->st.snap, at[STATE_PEND_SNAP], ns * sizeof(float), cudaMemcpyHostToDevice));
        dp_plan_held_owned(p, packed, at[STATE_PEND_SUM], 0);
        for (int f = 0; f < p->num_fragments; f++) {
            cudaCheck(cudaMemcpy(dp->sync->st.held + dp->sync->held_at[f], packed + p->held_off[f],
                                 (p->held_off[f + 1] - p->held_off[f]) * sizeof(float), cudaMemcpyHostToDevice));
        }
        free(packed);
    }
}

// -le 1: the outer parameters and momentum from replica 0 (the replica communicator's rank 0: it
// never leaves a running job) to the replicas that rejoined, with the rest of their ranks'
// replica communicators (stream 0; the survivors send, the joining ranks receive).
static void dev_dp_outer_broadcast(DeviceDP* dp) {
    size_t n = dp->plan.sync_owned;
    device_link_order_on_main(&dp->link);
    ncclCheck(ncclGroupStart());
    ncclCheckOn(dp->link.replica, ncclBroadcast(dp->sync->st.outer, dp->sync->st.outer, n, ncclFloat, 0, dp->link.replica, 0));
    ncclCheckOn(dp->link.replica, ncclBroadcast(dp->sync->st.momentum, dp->sync->st.momentum, n, ncclFloat, 0, dp->link.replica, 0));
    ncclCheckOn(dp->link.replica, ncclGroupEnd());
    watchdog_grace(); // the joining ranks build their model and load their checkpoint first
    wait_device(0, dp->link.host_event, "the outer state for the replicas rejoining (-le 1)");
}

// -le 1, after the outer sync of `step` (llmc/replica_ops.h): replicas waiting to rejoin are admitted
// (elastic_admit) and sent the outer state; returns how many joined.
static int dev_dp_admit(void* ctx, int step) {
    DeviceDP* dp = (DeviceDP*)ctx;
    for (int f = 0; dp->sync->xch && f < dp->plan.num_fragments; f++) {
        if (dp->sync->xch[f].in_flight) { return 0; } // -lo: a replica rejoins once the exchange in flight is applied
    }
    int n = elastic_admit(&dp->el, &dp->link, &dp->plan.mesh, step);
    if (n > 0) {
        dev_dp_note_bytes(dp);
        dev_dp_outer_broadcast(dp);
    }
    return n;
}

// -le 1, a rank that rejoined (its checkpoint loaded, llmc/replica_ops.h): the outer state from replica
// 0, the local parameters (and master weights) set to the outer ones, AdamW's moments and the
// residual zero, as train_gpt2.py --rejoin does.
static void dev_dp_join(void* ctx) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    dev_dp_outer_broadcast(dp);
    dev_dp_master_from_outer(dp);
    float* host = (float*)malloc_check(p->sync_owned * sizeof(float));
    cudaCheck(cudaMemcpy(host, dp->sync->st.outer, p->sync_owned * sizeof(float), cudaMemcpyDeviceToHost));
    dev_dp_upload_owned(dp, host); // and the all-gather inside the replica
    free(host);
    cudaCheck(cudaMemset(dp->opt.m, 0, dp->opt.n * sizeof(float)));
    cudaCheck(cudaMemset(dp->opt.v, 0, dp->opt.n * sizeof(float)));
    if (dp->muon_sharded) { cudaCheck(cudaMemset(dp->owned.mom, 0, dp->owned.plan.elements * sizeof(float))); }
    if (dp->sync->st.residual) { cudaCheck(cudaMemset(dp->sync->st.residual, 0, p->sync_owned * sizeof(float))); }
}

// -le 1: the last drop's or rejoin's note gets the closed forms of the communication per step as
// the start-up report gives them, for the R' replicas training now (llmc/accounting.h on the mesh
// they form), plus, while one is missing, each sync's list of replicas rejoining (R ints
// all-reduced over the W' ranks).
static void dev_dp_note_bytes(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    Mesh m = p->mesh;
    m.dp_replicate = dp->el.live_R;
    m.world = dp->el.live_W;
    CommBytes b = comm_bytes_per_step(&p->layout, &m, p->zero_stage, 1, p->num_parameters, sizeof(floatX),
                                      sizeof(floatX), dp->opt.master ? 4 : 0, p->outer);
    int list = elastic_join_list(p->mesh.dp_replicate, m.world);
    size_t rejoin = dp->el.live_R < p->mesh.dp_replicate ? ring_all_reduce_elements(list, m.world) * 4 : 0;
    size_t n = strlen(dp->el.note);
    snprintf(dp->el.note + n, sizeof(dp->el.note) - n, "\ncommunication per outer sync from here: %zu bytes sent per "
             "rank across replicas, %zu inside the replica, in the finiteness flag and the list of replicas rejoining; "
             "a step without a sync sends %zu", b.sync_replica, b.sync_inner + rejoin, b.step_no_sync);
}

// -le 1: the replicas still training, and the last drop's line (NULL: none yet).
static int dev_dp_live_replicas(void* ctx, const char** note, const uint8_t** alive) {
    DeviceDP* dp = (DeviceDP*)ctx;
    *note = dp->el.changes ? dp->el.note : NULL;
    if (alive) { *alive = dp->el.mb.alive; }
    return dp->el.live_R;
}

// -le 1: a sync's buffers with room for the messages cut into R' < R slices (each up to R' - 1
// elements more of padding; -rq/-rk: R' encoded slices of the larger slices, the owners' sums of R'
// values), and with a residual room to keep it while an exchange runs (one more fp32 array of the
// rank's sync elements: a replica lost in the exchange makes the survivors redo it from there).
static void dev_dp_elastic_room(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    int R = p->mesh.dp_replicate;
    if (p->zero_stage == 0) {
        cudaCheck(cudaFree(dp->sync->outer_msg));
        dp->sync->outer_msg = (float*)device_alloc((p->sync_owned + R) * sizeof(float));
    } else {
        cudaCheck(cudaFree(dp->shard_grads));
        dp->shard_grads = (float*)device_alloc((p->layout.shard_elements + R) * sizeof(float));
    }
    if (dp->sync->st.residual) { dp->sync->res_keep = (float*)device_alloc(p->sync_owned * sizeof(float)); }
    if (dp->sync->st.held) { // -lo: each fragment's held sum cut into R' slices (round_up(count, R') < count + R)
        for (int f = 0; f < p->num_fragments; f++) { dp->sync->held_at[f + 1] = dp->sync->held_at[f] + p->frag_count[f] + R; }
        cudaCheck(cudaFree(dp->sync->st.held));
        dp->sync->st.held = (float*)device_alloc(dp->sync->held_at[p->num_fragments] * sizeof(float));
    }
    for (int f = 0; dp->sync->xch && f < p->num_fragments; f++) { // -lo tau >= 2, dense: R' ranges of a chunk
        if (!dp->sync->xch[f].tmp) { continue; }
        size_t most = 0;
        for (int r = 1; r <= R; r++) {
            size_t n = (size_t)r * ceil_div(ceil_div(p->frag_count[f], r), p->outer->overlap);
            most = n > most ? n : most;
        }
        cudaCheck(cudaFree(dp->sync->xch[f].tmp));
        dp->sync->xch[f].tmp = (float*)device_alloc(most * sizeof(float));
    }
    if (!dp->sync->wire_send) { return; }
    WireSpec w = dev_dp_wire_spec(p->outer), owner = w;
    for (int f = 0; f < p->num_fragments; f++) {
        for (int r = 1; r <= R; r++) {
            size_t slice = ceil_div(p->frag_count[f], r);
            owner.mult = r;
            size_t sent = wire_spec_bytes(&w, slice), gathered = wire_spec_bytes(&owner, slice);
            if (r * sent > dp->sync->wire_send_bytes) { dp->sync->wire_send_bytes = r * sent; }
            if (r * gathered > dp->sync->wire_recv_bytes) { dp->sync->wire_recv_bytes = r * gathered; }
            if (r * sent > dp->sync->wire_recv_bytes) { dp->sync->wire_recv_bytes = r * sent; }
        }
    }
    int copies = p->outer->overlap > 0 ? p->num_fragments : 1; // -lo: one pair per fragment
    cudaCheck(cudaFree(dp->sync->wire_send));
    cudaCheck(cudaFree(dp->sync->wire_recv));
    dp->sync->wire_send = (uint8_t*)device_alloc(copies * dp->sync->wire_send_bytes);
    dp->sync->wire_recv = (uint8_t*)device_alloc(copies * dp->sync->wire_recv_bytes);
}

// -le 1 (after dev_dp_init): the agreement through rank 0 (rdv: this job's rendezvous, whose port
// rank 0 keeps open), room to redo the loss all-reduce and to cut a sync over fewer replicas, the
// replica-spanning communicators.
// join: where this rank rejoined a running job (else step -1).
static void dev_dp_elastic_init(DeviceDP* dp, const TrainArgs* a, const Rendezvous* rdv, const RdvJoin* join) {
    elastic_init(&dp->el, a, rdv, &dp->plan.mesh, join);
    if (!dp->el.on) { return; }
    dp->loss_keep = (float*)device_alloc(dp->plan.mesh.world * sizeof(float));
    dev_dp_elastic_room(dp);
    elastic_watch(&dp->el, &dp->link);
}


// The memory of the replica sync beyond the closed forms (the start-up report's memory line): the
// residual and -lo's snapshots and held sums (the -rq exchange buffers are not in the line).
static void dev_replica_memory(const DeviceDP* dp, MemoryBytes* mem) {
    const DpPlan* p = &dp->plan;
    mem->residual = dp->sync->st.residual ? p->sync_owned * sizeof(float) : 0;
    if (dp->sync->st.held) {
        mem->overlap_snap = p->sync_owned * sizeof(float);
        mem->overlap_held = p->held_off[p->num_fragments] * sizeof(float);
        mem->overlap = mem->overlap_snap + mem->overlap_held;
    }
}

// ----------------------------------------------------------------------------
// start-up, the hooks into the core, the end

// DeviceSyncHooks.sum_gradients: -ls 0 with -rq/-rk this step (dev_dp_compressed_gradients).
static int dev_replica_sum_gradients(DeviceDP* dp) {
    if (!outer_compressed(&dp->sync->grad_wire)) { return 0; }
    dev_dp_compressed_gradients(dp);
    return 1;
}

// The sync of core dp (after dev_dp_init) for the run's settings (the plan's outer): the outer
// state (zeroed; outer_init fills it), ZeRO 0's message buffer, the exchanges' events and wire
// buffers, -lo's held sums and local values, the residual; and the core's hooks. Without a sync
// nothing but the (zeroed) state is allocated and the hooks stay empty.
static void dev_replica_init(DeviceDP* dp) {
    dp->sync = (DeviceReplica*)calloc_check(1, sizeof(DeviceReplica));
    const DpPlan* p = &dp->plan;
    const Mesh* mesh = &p->mesh;
    const OuterConfig* outer = p->outer;
    int zero_stage = p->zero_stage;
    if (!replica_sync_on(outer)) { return; }
    int R = mesh->dp_replicate, F = p->num_fragments;
    WireSpec w = {outer->wire, outer->topk, 1};
    int compressed = outer_compressed(outer);
    if (outer->every > 0) { // the outer state (zeroed; outer_init fills it), ZeRO 0's message buffer
        dp->sync->st.outer = (float*)device_alloc(p->sync_owned * sizeof(float));
        dp->sync->st.momentum = (float*)device_alloc(p->sync_owned * sizeof(float));
        dp->sync->crc_buf = (float*)device_alloc(2 * (size_t)R * sizeof(float));
        dp->sync->flag = (float*)device_alloc(mesh->world * sizeof(float));
        if (zero_stage == 0) { dp->sync->outer_msg = (float*)device_alloc(p->sync_padded * sizeof(float)); }
        dp->sync->exchanged = (CommEvent*)malloc_check(F * sizeof(CommEvent));
        for (int f = 0; f < F; f++) { comm_event_create(&dp->sync->exchanged[f]); }
        if (outer->overlap > 0) { // -lo: the held sums and local values (not in the memory line)
            dp->sync->st.held = (float*)device_alloc(p->held_off[F] * sizeof(float));
            dp->sync->st.snap = (float*)device_alloc(p->sync_owned * sizeof(float));
            dp->sync->held_at = (size_t*)malloc_check((F + 1) * sizeof(size_t));
            memcpy(dp->sync->held_at, p->held_off, (F + 1) * sizeof(size_t));
        }
    } else if (compressed && zero_stage == 0) { // -ls 0's fp32 message of the owned gradient
        dp->sync->outer_msg = (float*)device_alloc(p->owned_padded * sizeof(float));
    }
    if (compressed) { // R slices of this rank's encoding sent, R received (the owners' sums: R times the values)
        size_t slice = outer->every > 0 ? 0 : p->owned_padded / R;
        for (int f = 0; outer->every > 0 && f < F; f++) {
            if (dp_frag_slice(p, f) > slice) { slice = dp_frag_slice(p, f); }
        }
        WireSpec owner = w;
        owner.mult = R;
        size_t sent = wire_spec_bytes(&w, slice), gathered = wire_spec_bytes(&owner, slice);
        int copies = outer->every > 0 && outer->overlap > 0 ? F : 1;
        dp->sync->wire_send_bytes = R * sent;
        dp->sync->wire_recv_bytes = R * (sent > gathered ? sent : gathered);
        dp->sync->wire_send = (uint8_t*)device_alloc(copies * dp->sync->wire_send_bytes);
        dp->sync->wire_recv = (uint8_t*)device_alloc(copies * dp->sync->wire_recv_bytes);
        if (outer->feedback) { dp->sync->st.residual = (float*)device_alloc(p->sync_owned * sizeof(float)); }
    }
    if (outer->every > 0) {
        dp->sync->xch = (DevExchange*)calloc_check(F, sizeof(DevExchange));
        for (int f = 0; outer->overlap > 1 && f < F; f++) {
            dp->sync->xch[f].tmp = (float*)device_alloc(R * ceil_div(dp_frag_slice(p, f), outer->overlap) * sizeof(float));
        }
    }
    DeviceSyncHooks hooks = {dev_dp_pump, dev_replica_sum_gradients, dev_dp_elastic_wait, dev_replica_state_out,
                             dev_replica_state_targets, dev_replica_state_in};
    dp->hooks = hooks;
}

static void dev_replica_free(DeviceDP* dp) {
    DeviceReplica* x = dp->sync;
    void* bufs[] = {x->st.outer, x->st.momentum, x->outer_msg, x->crc_buf, x->st.residual, x->wire_send, x->wire_recv,
                    x->st.held, x->st.snap, x->flag, x->res_keep};
    for (int i = 0; i < (int)(sizeof(bufs) / sizeof(bufs[0])); i++) { if (bufs[i]) { cudaCheck(cudaFree(bufs[i])); } }
    for (int f = 0; x->exchanged && f < dp->plan.num_fragments; f++) { cudaCheck(cudaEventDestroy(x->exchanged[f].ev)); }
    free(x->exchanged);
    for (int f = 0; x->xch && f < dp->plan.num_fragments; f++) { if (x->xch[f].tmp) { cudaCheck(cudaFree(x->xch[f].tmp)); } }
    free(x->xch);
    free(x->held_at);
    free(x);
    dp->sync = NULL;
}

// The replica sync's view of this layer (llmc/replica_ops.h): -le 1 adds the membership.
static ReplicaOps dev_replica_ops(DeviceDP* dp) {
    ReplicaOps ops = {dp, dev_dp_set_replica_reduce, dev_dp_set_gradient_wire, dev_dp_outer_init, dev_dp_outer_step,
                      dev_dp_replica_crcs, dev_dp_live_replicas, dev_dp_admit, dev_dp_join};
    return ops;
}

#endif
