// The data-parallel layer's device backend (the GPU trainer's): ZeRO stages 0, 1, 2 and the
// sharded AdamW state (docs/design.md sections 3-5), the replica sync (-ls, -rq/-rk, -lf, -lo; section
// 4b) and their checkpoint arrays, over NCCL on device buffers. The plan is llmc/dp_plan.h's, the
// outer state llmc/outer_state.h's (in device memory), the element kernels llmc/outer_kernels.cuh's
// and llmc/wire_kernels.cuh's, the collectives' order and the streams llmc/dp_device_link.cuh's.
// The model stays the trainer's: it hands over its parameter and gradient blocks, where each unit's
// gradient lives, calls dev_dp_grads_ready from backward and dev_dp_params_wait from forward.
//
// Compute (forward, backward, optimizer) runs on the legacy default stream 0. Stages 1 and 2
// reduce-scatter each layer's gradients on the communication stream (non-blocking, so it overlaps
// stream 0) as soon as backward reports the layer, ordered after it by an event: the layer's units
// in one NCCL group, then one add of their slices into an fp32 shard accumulator. Stage 2 keeps two
// layer slots of gradients: layer l's slot is cleared on the communication stream once reduced, and
// backward waits for that before layer l-2 reuses it. After the last micro-step the replicas
// all-reduce the shard (communication stream), stream 0 waits for it (the norm needs every slice)
// and updates this rank's slices; the communication stream then all-gathers the parameters, one
// NCCL group and one event per layer (wte, wpe, lnf first), and the next forward waits for layer
// l's event just before it uses layer l's weights, so the gathers overlap the next step's start.
// The host waits for the device twice a step (the grad norm, the loss). Stage 0 all-reduces the
// full gradient after backward.
#ifndef LLMC_DP_DEVICE_CUH
#define LLMC_DP_DEVICE_CUH

#include "utils.h"
#include "cuda_common.cuh"
#include "device_copy.cuh"
#include "dp_plan.h"
#include "outer_state.h"
#include "optimizer.h"
#include "adamw.cuh"
#include "muon.cuh"
#include "nccl_setup.cuh"
#include "device_wait.cuh"
#include "shard_kernels.cuh"
#include "outer_kernels.cuh"
#include "wire_kernels.cuh"
#include "op_events.cuh"
#include "dp_device_link.cuh"
#include "dp_elastic.cuh"
#include "accounting.h"
#include "dp_ops.h"
#include "faults.h"

// AdamW's state of n owned elements on the device: m, v, fp32 master weights (BF16 with -w 1,
// else NULL), and the table of what one launch updates (every tensor, or this rank's slices).
typedef struct {
    size_t n;
    float* m;
    float* v;
    float* master;
    AdamWMulti table;
    int table_built;
} DeviceAdamW;

// master: keep fp32 master weights (ignored in FP32, where the parameters are fp32 already),
// initialised from init (n fp32 host values, owned order).
static void device_adamw_init(DeviceAdamW* o, size_t n, int master, const float* init) {
    memset(o, 0, sizeof(*o));
    o->n = n;
    o->m = (float*)device_alloc(n * sizeof(float));
    o->v = (float*)device_alloc(n * sizeof(float));
    if (master && sizeof(floatX) != sizeof(float)) {
        o->master = (float*)device_alloc(n * sizeof(float));
        cudaCheck(cudaMemcpy(o->master, init, n * sizeof(float), cudaMemcpyHostToDevice));
    }
}

static void device_adamw_free(DeviceAdamW* o) {
    cudaCheck(cudaFree(o->m));
    cudaCheck(cudaFree(o->v));
    if (o->master) { cudaCheck(cudaFree(o->master)); }
    if (o->table_built) { adamw_multi_free(&o->table); }
}

// One launch of AdamW (t = 1-based step) over o's table, gradients grads (floatX or fp32 by G);
// the stochastic rounding is seeded by seed, t and the tensor.
template <typename G>
static void device_adamw_update(DeviceAdamW* o, floatX* params, const G* grads, const AdamWConfig* h, float grad_scale,
                                int t, uint32_t seed) {
    float bias1, bias2;
    adamw_bias_corrections(h, t, &bias1, &bias2);
    adamw_multi_update(&o->table, params, o->master, grads, o->m, o->v, h->lr, h->beta1, h->beta2, h->eps,
                       h->weight_decay, grad_scale, bias1, bias2, seed + (uint32_t)t * NUM_PARAMETER_TENSORS);
}

// The table of every tensor whole (sizes: the 16 tensors', file order; without those `skip` marks,
// NULL: none), once.
static void device_adamw_tensors(DeviceAdamW* o, const size_t* sizes, const int* skip) {
    if (o->table_built) { return; }
    adamw_multi_init(&o->table, NUM_PARAMETER_TENSORS);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!(skip && skip[i])) { adamw_multi_add(&o->table, off, off, sizes[i], 0, i, parameter_is_matrix[i]); }
        off += sizes[i];
    }
    adamw_multi_upload(&o->table);
    o->table_built = 1;
}

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

typedef struct {
    DpPlan plan;
    DeviceLink link;           // communicators, the communication stream, the order of collectives
    floatX* params;            // the model's parameters
    floatX* grads;             // the model's gradient block (grads_elements, padded)
    size_t grads_elements;
    floatX** unit_grads;       // where each unit's full gradient lives (stage 2: its layer slot)
    int grad_slots;            // stage 2: layer slots of gradients used in turn
    int last_micro_step;       // set by the training loop: 1 during the step's last backward
    int replica_reduce;        // 1: gradients averaged over every rank; 0 (-ls): over the shard group only
    OuterConfig grad_wire;     // -ls 0: how this step's gradients cross the replicas (-rq/-rk, -rqs)
    DeviceAdamW opt;           // AdamW's state of the owned elements (-opt muon: m holds Muon's momentum of its matrices)
    int muon;                  // -opt muon (ZeRO 0: every rank orthogonalizes every matrix)
    DeviceMuon muon_work;
    GPT2Config muon_model;     // the shapes of its matrices
    uint32_t seed;             // the stochastic rounding's seed (-sd)
    float* shard_grads;        // stages 1, 2: reduced fp32 slices, padded to a multiple of dp_replicate
    floatX* group_pad;         // a bucket's units S does not divide, each padded to S slices (or NULL)
    float* master_pad;         // the same for the master weights (a sharded ZeRO 0 sync gathers them too)
    floatX* group_recv;        // a bucket's reduce-scattered slices, in shard order
    float* loss;               // world floats: [0] the loss being summed, the rest 0 (ring padding)
    float* norm;               // dp_shard floats ([0] the squared norm), then NORM_BLOCKS of scratch
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
    Elastic el;                // -le 1: the replicas still training (llmc/dp_elastic.cuh); else R and W
    float* loss_keep;          // -le 1: the loss slots before their all-reduce, to redo it on the survivors
} DeviceDP;

// The plan and buffers of rank `rank` of the world communicator `world` for model c, -ds dp_shard,
// -z zero_stage and the replica sync `outer` (kept by pointer); params, grads: the model's blocks
// (grads_elements long); unit_grads: where each of the plan's units' gradients lives (taken over);
// grad_slots: stage 2's layer slots; master: keep fp32 master weights (BF16), initialised from the
// model's fp32 host values init.
static void dev_dp_init(DeviceDP* dp, ncclComm_t world, int rank, int world_size, const GPT2Config* c, int dp_shard,
                        int zero_stage, const OuterConfig* outer, floatX* params, floatX* grads, size_t grads_elements,
                        floatX** unit_grads, int grad_slots, int master, const float* init) {
    memset(dp, 0, sizeof(*dp));
    DpPlan* p = &dp->plan;
    dp_plan_init(p, c, world_size, rank, dp_shard, zero_stage, outer);
    const Mesh* mesh = &p->mesh;
    device_link_init(&dp->link, world, mesh, c->num_layers, outer->link_mbps);
    dp->el.live_R = mesh->dp_replicate; // every replica trains (-le 1 may drop some: dev_dp_elastic_init)
    dp->el.live_W = mesh->world;
    dp->el.live_me = mesh->replicate_idx;
    dp->params = params;
    dp->grads = grads;
    dp->grads_elements = grads_elements;
    dp->unit_grads = unit_grads;
    dp->grad_slots = grad_slots;
    dp->replica_reduce = 1;
    if (zero_stage != 0) {
        dp->shard_grads = (float*)device_alloc(round_up(p->layout.shard_elements, mesh->dp_replicate) * sizeof(float));
        dp->group_recv = (floatX*)device_alloc(p->bucket_slices_max * sizeof(floatX));
    }
    dp->loss = (float*)device_alloc(mesh->world * sizeof(float));
    dp->norm = (float*)device_alloc((mesh->dp_shard + NORM_BLOCKS) * sizeof(float));
    float* owned = (float*)calloc_check(p->owned, sizeof(float)); // init's owned elements, owned order
    for (int i = 0; i < p->num_spans; i++) {
        const OwnedSpan* sp = &p->spans[i];
        memcpy(owned + sp->owned_offset, init + sp->param_offset, sp->count * sizeof(float));
    }
    device_adamw_init(&dp->opt, p->owned, master, owned);
    free(owned);
    if (p->sync_stage != 0 && p->bucket_padded_max > 0) {
        dp->group_pad = (floatX*)device_alloc(p->bucket_padded_max * sizeof(floatX));
        if (zero_stage == 0 && dp->opt.master) {
            dp->master_pad = (float*)device_alloc(p->bucket_padded_max * sizeof(float));
        }
    }
    int R = mesh->dp_replicate, F = p->num_fragments;
    WireSpec w = {outer->wire, outer->topk, 1};
    int compressed = outer_compressed(outer);
    if (outer->every > 0) { // the outer state (zeroed; outer_init fills it), ZeRO 0's message buffer
        dp->st.outer = (float*)device_alloc(p->sync_owned * sizeof(float));
        dp->st.momentum = (float*)device_alloc(p->sync_owned * sizeof(float));
        dp->crc_buf = (float*)device_alloc(2 * (size_t)R * sizeof(float));
        dp->flag = (float*)device_alloc(mesh->world * sizeof(float));
        if (zero_stage == 0) { dp->outer_msg = (float*)device_alloc(p->sync_padded * sizeof(float)); }
        dp->exchanged = (CommEvent*)malloc_check(F * sizeof(CommEvent));
        for (int f = 0; f < F; f++) { comm_event_create(&dp->exchanged[f]); }
        if (outer->overlap > 0) { // -lo: the held sums and local values (not in the memory line)
            dp->st.held = (float*)device_alloc(p->held_off[F] * sizeof(float));
            dp->st.snap = (float*)device_alloc(p->sync_owned * sizeof(float));
            dp->held_at = (size_t*)malloc_check((F + 1) * sizeof(size_t));
            memcpy(dp->held_at, p->held_off, (F + 1) * sizeof(size_t));
        }
    } else if (compressed && zero_stage == 0) { // -ls 0's fp32 message of the owned gradient
        dp->outer_msg = (float*)device_alloc(p->owned_padded * sizeof(float));
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
        dp->wire_send_bytes = R * sent;
        dp->wire_recv_bytes = R * (sent > gathered ? sent : gathered);
        dp->wire_send = (uint8_t*)device_alloc(copies * dp->wire_send_bytes);
        dp->wire_recv = (uint8_t*)device_alloc(copies * dp->wire_recv_bytes);
        if (outer->feedback) { dp->st.residual = (float*)device_alloc(p->sync_owned * sizeof(float)); }
    }
    if (outer->every > 0) {
        dp->xch = (DevExchange*)calloc_check(F, sizeof(DevExchange));
        for (int f = 0; outer->overlap > 1 && f < F; f++) {
            dp->xch[f].tmp = (float*)device_alloc(R * ceil_div(dp_frag_slice(p, f), outer->overlap) * sizeof(float));
        }
    }
}

// The memory of the replica sync beyond the closed forms (the start-up report's memory line): the
// residual and -lo's snapshots and held sums (the -rq exchange buffers are not in the line).
static void dev_dp_memory(const DeviceDP* dp, MemoryBytes* mem) {
    const DpPlan* p = &dp->plan;
    mem->residual = dp->st.residual ? p->sync_owned * sizeof(float) : 0;
    if (dp->st.held) {
        mem->overlap_snap = p->sync_owned * sizeof(float);
        mem->overlap_held = p->held_off[p->num_fragments] * sizeof(float);
        mem->overlap = mem->overlap_snap + mem->overlap_held;
    }
}

static void dev_dp_free(DeviceDP* dp) {
    void* bufs[] = {dp->shard_grads, dp->group_pad, dp->group_recv, dp->loss, dp->norm, dp->st.outer, dp->st.momentum,
                    dp->outer_msg, dp->crc_buf, dp->st.residual, dp->wire_send, dp->wire_recv, dp->st.held,
                    dp->st.snap, dp->flag, dp->master_pad, dp->loss_keep, dp->res_keep};
    for (int i = 0; i < (int)(sizeof(bufs) / sizeof(bufs[0])); i++) { if (bufs[i]) { cudaCheck(cudaFree(bufs[i])); } }
    device_adamw_free(&dp->opt);
    if (dp->muon) { device_muon_free(&dp->muon_work); }
    for (int f = 0; dp->exchanged && f < dp->plan.num_fragments; f++) { cudaCheck(cudaEventDestroy(dp->exchanged[f].ev)); }
    free(dp->exchanged);
    for (int f = 0; dp->xch && f < dp->plan.num_fragments; f++) { if (dp->xch[f].tmp) { cudaCheck(cudaFree(dp->xch[f].tmp)); } }
    free(dp->xch);
    free(dp->held_at);
    free(dp->unit_grads);
    elastic_free(&dp->el);
    device_link_free(&dp->link, dp->plan.layout.num_layers);
    dp_plan_free(&dp->plan);
}

// ----------------------------------------------------------------------------
// the ZeRO step

// On the communication stream: reduce-scatters bucket b's units over the shard group (in floatX) in
// one NCCL group, then adds this rank's slices of the sums (contiguous in the shard layout, as in
// group_recv) into the fp32 shard accumulator in one launch. A group's collectives start at
// ncclGroupEnd, so each unit has its own send and receive space. Returns the slices' elements.
static size_t dev_dp_reduce_scatter_bucket(DeviceDP* dp, const DpBucket* b) {
    const DpPlan* p = &dp->plan;
    int S = p->mesh.dp_shard;
    cudaStream_t cs = dp->link.comm_stream;
    floatX* pad = dp->group_pad;
    ncclCheck(ncclGroupStart());
    size_t received = 0;
    for (int u = b->first; u < b->first + b->count; u++) {
        const ShardUnit* unit = &p->layout.units[u];
        const floatX* send = dp->unit_grads[u];
        if (unit->size != unit->slice * S) { // issued before the group's collectives run
            cudaCheck(cudaMemcpyAsync(pad, send, unit->size * sizeof(floatX), cudaMemcpyDeviceToDevice, cs));
            cudaCheck(cudaMemsetAsync(pad + unit->size, 0, (unit->slice * S - unit->size) * sizeof(floatX), cs));
            send = pad;
            pad += unit->slice * S;
        }
        ncclCheck(ncclReduceScatter(send, dp->group_recv + received, unit->slice, ncclFloatX, ncclSum, dp->link.shard,
                                    cs));
        received += unit->slice;
    }
    ncclCheck(ncclGroupEnd());
    accumulate(dp->shard_grads + p->layout.units[b->first].shard_offset, dp->group_recv, received, cs);
    return received;
}

// One unit of an array in the parameters' order (elements of `es` bytes, NCCL type t) all-gathered
// over the shard group from each rank's slice, inside an open NCCL group on cs: in place where S
// divides the unit, else through a zero-padded copy at *pad (advanced; copied back by
// dev_dp_gather_unpad once the group has ended).
static void dev_dp_gather_unit(DeviceDP* dp, const ShardUnit* unit, char* base, size_t es, ncclDataType_t t,
                               char** pad, cudaStream_t cs) {
    int S = dp->plan.mesh.dp_shard;
    size_t mine;
    size_t owned = unit_owned(unit, dp->plan.mesh.shard_idx, &mine);
    char* at = base + unit->offset * es;
    if (unit->size == unit->slice * S) {
        ncclCheck(ncclAllGather(at + mine * es, at, unit->slice, t, dp->link.shard, cs));
        return;
    }
    char* p = *pad;
    cudaCheck(cudaMemcpyAsync(p + mine * es, at + mine * es, owned * es, cudaMemcpyDeviceToDevice, cs));
    cudaCheck(cudaMemsetAsync(p + (mine + owned) * es, 0, (unit->slice - owned) * es, cs));
    ncclCheck(ncclAllGather(p + mine * es, p, unit->slice, t, dp->link.shard, cs));
    *pad += unit->slice * S * es;
}

static void dev_dp_gather_unpad(DeviceDP* dp, const ShardUnit* unit, char* base, size_t es, char** pad,
                                cudaStream_t cs) {
    int S = dp->plan.mesh.dp_shard;
    if (unit->size == unit->slice * S) { return; }
    cudaCheck(cudaMemcpyAsync(base + unit->offset * es, *pad, unit->size * es, cudaMemcpyDeviceToDevice, cs));
    *pad += unit->slice * S * es;
}

// On the communication stream, after the update (stages 1, 2) or a sharded sync: the parameters
// all-gathered from every rank's slices (with ZeRO 0's master weights too, which a sharded sync
// updated in slices), one NCCL group per bucket (wte, wpe, lnfw, lnfb first: the forward needs them
// first), each followed by its params_ready event. Units S does not divide go through zero-padded
// copies. fragment >= 0 (-lf): that fragment's units only.
static void dev_dp_all_gather_units(DeviceDP* dp, int fragment) {
    const DpPlan* p = &dp->plan;
    int S = p->mesh.dp_shard, L = p->layout.num_layers, F = p->num_fragments;
    cudaStream_t cs = dp->link.comm_stream;
    char* master = p->zero_stage == 0 && dp->opt.master ? (char*)dp->opt.master : NULL; // a sharded ZeRO 0 sync
    cudaCheck(cudaEventRecord(dp->link.update_done, 0));
    cudaCheck(cudaStreamWaitEvent(cs, dp->link.update_done, 0));
    int span = op_span_begin(OP_COMM, cs);
    size_t gathered = 0;
    for (int layer = -1; layer < L; layer++) {
        const DpBucket* b = &p->buckets[layer >= 0 ? layer : L];
        char *pad = (char*)dp->group_pad, *mpad = (char*)dp->master_pad;
        ncclCheck(ncclGroupStart());
        for (int u = b->first; u < b->first + b->count; u++) {
            const ShardUnit* unit = &p->layout.units[u];
            if (fragment >= 0 && outer_unit_fragment(unit, L, F) != fragment) { continue; }
            gathered += unit->slice;
            dev_dp_gather_unit(dp, unit, (char*)dp->params, sizeof(floatX), ncclFloatX, &pad, cs);
            if (master) { dev_dp_gather_unit(dp, unit, master, sizeof(float), ncclFloat, &mpad, cs); }
        }
        ncclCheck(ncclGroupEnd());
        pad = (char*)dp->group_pad;
        mpad = (char*)dp->master_pad;
        for (int u = b->first; u < b->first + b->count; u++) {
            const ShardUnit* unit = &p->layout.units[u];
            if (fragment >= 0 && outer_unit_fragment(unit, L, F) != fragment) { continue; }
            dev_dp_gather_unpad(dp, unit, (char*)dp->params, sizeof(floatX), &pad, cs);
            if (master) { dev_dp_gather_unpad(dp, unit, master, sizeof(float), &mpad, cs); }
        }
        device_link_record(&dp->link, &dp->link.params_ready[layer + 1]);
    }
    size_t es = sizeof(floatX) + (master ? sizeof(float) : 0);
    op_span_end(span, 0.0, ring_bytes((double)gathered * S * es, S, 0));
    device_link_record(&dp->link, &dp->link.comm_done);
}

// The forward's hook (ParamsWaitFn): stream 0 waits for layer's gathered weights (stages 1, 2, and
// ZeRO 0 after a sharded sync).
static void dev_dp_params_wait(void* ctx, int layer) {
    DeviceDP* dp = (DeviceDP*)ctx;
    if (dp->plan.sync_stage != 0) {
        OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.params_ready[layer + 1]));
    }
}

// Before a micro-step's backward writes gradients: stream 0 waits for the shard group's reductions
// still reading (and, in stage 2, clearing) them, and for nothing else of the communication stream
// (not for a replica exchange in flight). The forward before it overlaps them.
static void dev_dp_backward_begin(DeviceDP* dp) {
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.reduced));
}

// Backward's hook: the layer's reduce-scatters go onto the communication stream when this stage
// reduces in this micro-step (llmc/mesh.h).
static void dev_dp_grads_ready(DeviceDP* dp, int layer) {
    const DpPlan* p = &dp->plan;
    if (!zero_reduces_in_micro_step(p->zero_stage, dp->last_micro_step)) { return; }
    cudaStream_t cs = dp->link.comm_stream;
    device_link_order_on_comm(&dp->link); // after the layer's gradients (and stream 0's collectives)
    const DpBucket* b = &p->buckets[layer >= 0 ? layer : p->layout.num_layers];
    int span = op_span_begin(OP_COMM, cs);
    size_t slices = dev_dp_reduce_scatter_bucket(dp, b);
    if (p->zero_stage == 2) {
        for (int u = b->first; u < b->first + b->count; u++) {
            const ShardUnit* unit = &p->layout.units[u];
            cudaCheck(cudaMemsetAsync(dp->unit_grads[u], 0, unit->size * sizeof(floatX), cs));
        }
    }
    int S = p->mesh.dp_shard;
    op_span_end(span, 0.0, ring_bytes((double)slices * S * sizeof(floatX), S, 0));
    device_link_record(&dp->link, &dp->link.reduced);
    if (p->zero_stage == 2 && layer >= 0) {
        device_link_record(&dp->link, &dp->link.slot_free[layer % dp->grad_slots]);
        // the next layer down reuses the slot of the layer above this one
        if (layer > 0) {
            OP_SPAN(OP_COMM, 0, 0.0, 0.0,
                    device_link_wait(&dp->link, &dp->link.slot_free[(layer - 1) % dp->grad_slots]));
        }
    }
    device_link_record(&dp->link, &dp->link.comm_done);
}

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
    float* msg = p->zero_stage == 0 ? dp->outer_msg : dp->shard_grads;
    WireSpec w = outer_wire_spec(&dp->grad_wire, 0, R);
    wire_gradient_message(msg, p->zero_stage == 0 ? dp->grads : NULL, dp->st.residual, p->owned, padded, cs);
    wire_spec_encode_slices(&w, msg, padded / R, R, dp->wire_send, dp->st.residual != NULL, cs);
    if (dp->st.residual) {
        cudaCheck(cudaMemcpyAsync(dp->st.residual, msg, p->owned * sizeof(float), cudaMemcpyDeviceToDevice, cs));
    }
    dev_dp_wire_exchange(dp, &w, msg, padded / R, cs, dp->wire_send, dp->wire_recv);
    float inv = 1.0f / (float)p->mesh.world;
    if (p->zero_stage == 0) {
        wire_gradient_back(dp->grads, msg, p->owned, inv, cs);
    } else {
        scale(dp->shard_grads, p->owned, inv, cs);
    }
    device_link_record(&dp->link, &dp->link.comm_done);
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.comm_done));
}

// The loop's settings of the next step (llmc/dp_ops.h): whether its gradients are averaged over every
// rank (1) or the replica's shard group (-ls between syncs), and (-ls 0) the link's format.
static void dev_dp_set_gradient_wire(void* ctx, const OuterConfig* c) { ((DeviceDP*)ctx)->grad_wire = *c; }
static void dev_dp_set_replica_reduce(void* ctx, int every_step) { ((DeviceDP*)ctx)->replica_reduce = every_step; }

// After the last micro-step: the reduction finished across ranks and averaged over the world (or,
// with -ls between syncs, over the replica's shard group: the replicas keep their own gradients;
// -ls 0 with -rq/-rk: dev_dp_compressed_gradients).
static void dev_dp_finish_gradients(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    int W = p->mesh.world, S = p->mesh.dp_shard, R = p->mesh.dp_replicate;
    if (dp->replica_reduce && R > 1 && outer_compressed(&dp->grad_wire)) {
        dev_dp_compressed_gradients(dp);
        return;
    }
    if (p->zero_stage == 0) {
        int span = op_span_begin(OP_COMM, 0);
        device_link_order_on_main(&dp->link);
        double bytes = 0.0;
        if (dp->replica_reduce && W > 1) {
            ncclCheckOn(dp->link.world, ncclAllReduce(dp->grads, dp->grads, dp->grads_elements, ncclFloatX, ncclAvg, dp->link.world, 0));
            bytes = ring_bytes((double)dp->grads_elements * sizeof(floatX), W, 1);
        } else if (!dp->replica_reduce && S > 1) {
            size_t padded = round_up(p->num_parameters, S);
            ncclCheck(ncclAllReduce(dp->grads, dp->grads, padded, ncclFloatX, ncclAvg, dp->link.shard, 0));
            bytes = ring_bytes((double)padded * sizeof(floatX), S, 1);
        }
        op_span_end(span, 0.0, bytes);
        return;
    }
    cudaStream_t cs = dp->link.comm_stream;
    device_link_order_on_comm(&dp->link);
    int span = op_span_begin(OP_COMM, cs);
    double bytes = 0.0;
    if (dp->replica_reduce && R > 1) {
        size_t padded = round_up(p->layout.shard_elements, R);
        ncclCheckOn(dp->link.replica, ncclAllReduce(dp->shard_grads, dp->shard_grads, padded, ncclFloat, ncclSum, dp->link.replica, cs));
        bytes = ring_bytes((double)padded * sizeof(float), R, 1);
    }
    scale(dp->shard_grads, p->layout.shard_elements, 1.0f / (float)(dp->replica_reduce ? W : S), cs);
    op_span_end(span, 0.0, bytes);
    device_link_record(&dp->link, &dp->link.comm_done);
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.comm_done));
}

// dp->norm[0], a rank's partial squared norm, summed over the shard group (stream 0, an all-reduce
// after the communication stream's work: the order of collectives).
static void dev_dp_norm_over_shard(DeviceDP* dp) {
    int S = dp->plan.mesh.dp_shard;
    int span = op_span_begin(OP_COMM, 0);
    device_link_order_on_main(&dp->link);
    if (S > 1) { ncclCheck(ncclAllReduce(dp->norm, dp->norm, S, ncclFloat, ncclSum, dp->link.shard, 0)); }
    op_span_end(span, 0.0, ring_bytes((double)S * sizeof(float), S, 1));
}

// dp->norm[0] read back once stream 0 has reached here (one host wait, named `what` in a timeout).
static float dev_dp_norm_read(DeviceDP* dp, const char* what) {
    wait_device(0, dp->link.host_event, what);
    float sq;
    cudaCheck(cudaMemcpy(&sq, dp->norm, sizeof(float), cudaMemcpyDeviceToHost));
    return sq;
}

// The norm of the full averaged gradient (stages 1, 2: the slices' squares summed over the
// shard group only; the replicas hold copies, or under -ls between syncs each its own gradient,
// whose norm this is). The step's one host wait before the update.
static float dev_dp_grad_norm(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    int S = p->mesh.dp_shard;
    if (p->zero_stage == 0) {
        OP_SPAN(OP_GRAD_NORM, 0, 0.0, (double)p->num_parameters * sizeof(floatX),
                sum_of_squares(dp->norm, dp->grads, p->num_parameters, dp->norm + S));
    } else {
        OP_SPAN(OP_GRAD_NORM, 0, 0.0, (double)p->layout.shard_elements * sizeof(float),
                sum_of_squares(dp->norm, dp->shard_grads, p->layout.shard_elements, dp->norm + S));
        dev_dp_norm_over_shard(dp);
    }
    return sqrtf(dev_dp_norm_read(dp, "the gradient norm"));
}

// After the last micro-step (llmc/dp_ops.h): the reduction finished, the norm of the averaged gradient.
static float dev_dp_reduce_gradients(void* ctx) {
    dev_dp_finish_gradients((DeviceDP*)ctx);
    return dev_dp_grad_norm((DeviceDP*)ctx);
}

// -op 1's bytes of an AdamW update with gradients of grad_size bytes: the parameters (floatX), m, v
// (and master weights) read and written, the gradients read.
static double dev_dp_adamw_bytes(const DeviceDP* dp, size_t grad_size) {
    double per = 2.0 * sizeof(floatX) + (double)grad_size + 4.0 * sizeof(float);
    if (dp->opt.master) { per += 2.0 * sizeof(float); }
    return per * (double)dp->plan.owned;
}

// -opt muon: the work space for the model's largest block matrix (ZeRO 0 only, for now: args.h).
static void dev_dp_init_muon(DeviceDP* dp, const GPT2Config* c) {
    dp->muon = 1;
    dp->muon_model = *c;
    size_t C = (size_t)c->channels;
    device_muon_alloc(&dp->muon_work, 4 * C * C, C);
}

// ZeRO 0, -opt muon: every layer's block matrices, one after the other on stream 0 (seed_base +
// tensor seeds a tensor's rounding, each layer's slice drawing the bits its place in the tensor gives).
static void dev_dp_muon_update(DeviceDP* dp, const MuonConfig* h, float grad_scale, uint32_t seed_base) {
    const DpPlan* p = &dp->plan;
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = p->tensor_sizes[i];
        if (parameter_is_muon[i]) {
            int rows, cols;
            muon_matrix_shape(&dp->muon_model, i, &rows, &cols);
            size_t per = (size_t)rows * cols;
            for (size_t at = 0; at < n; at += per) {
                float* master = dp->opt.master ? dp->opt.master + off + at : NULL;
                OP_SPAN(OP_MUON, 0, muon_ns_flops(rows, cols, h->ns_steps), (double)per * (3.0 * sizeof(floatX) + 12.0),
                        device_muon_update(&dp->muon_work, dp->params + off + at, master, dp->grads + off + at,
                                           dp->opt.m + off + at, rows, cols, grad_scale, h, seed_base + (uint32_t)i, at));
            }
        }
        off += n;
    }
}

// AdamW (t = 1-based step) on what this rank owns (one launch, stream 0; every tensor in ZeRO 0,
// this rank's slice of every unit in stages 1, 2, each slice drawing the stochastic-rounding bits its
// whole tensor would), then (stages 1, 2) the parameter all-gathers on the communication stream.
static void dev_dp_update(void* ctx, const OptimizerConfig* oc, float grad_scale, int t) {
    const AdamWConfig* h = &oc->adamw; // -opt muon is refused at start-up (llmc/args.h)
    DeviceDP* dp = (DeviceDP*)ctx;
    uint32_t seed = dp->seed;
    const DpPlan* p = &dp->plan;
    DeviceAdamW* o = &dp->opt;
    if (p->zero_stage == 0) {
        int muon = oc->kind == OPT_MUON;
        device_adamw_tensors(o, p->tensor_sizes, muon ? parameter_is_muon : NULL);
        OP_SPAN(OP_ADAMW, 0, 0.0, dev_dp_adamw_bytes(dp, sizeof(floatX)),
                device_adamw_update(o, dp->params, dp->grads, h, grad_scale, t, seed));
        if (muon) { dev_dp_muon_update(dp, &oc->muon, grad_scale, seed + (uint32_t)t * NUM_PARAMETER_TENSORS); }
        return;
    }
    if (!o->table_built) { // this rank's slice of every unit, one segment each
        adamw_multi_init(&o->table, p->layout.num_units);
        for (int u = 0; u < p->layout.num_units; u++) {
            const ShardUnit* unit = &p->layout.units[u];
            size_t first;
            size_t count = unit_owned(unit, p->mesh.shard_idx, &first);
            size_t in_tensor = (unit->layer >= 0 ? unit->layer * unit->size : 0) + first;
            adamw_multi_add(&o->table, unit->offset + first, unit->shard_offset, count, in_tensor, unit->tensor,
                            parameter_is_matrix[unit->tensor]);
        }
        adamw_multi_upload(&o->table);
        o->table_built = 1;
    }
    OP_SPAN(OP_ADAMW, 0, 0.0, dev_dp_adamw_bytes(dp, sizeof(float)),
            device_adamw_update(o, dp->params, dp->shard_grads, h, grad_scale, t, seed));
    dev_dp_all_gather_units(dp, -1);
}

static void dev_dp_pump(DeviceDP* dp);

static void dev_dp_begin_step(DeviceDP* dp) {
    dev_dp_pump(dp); // -lo: the exchanges in flight move on, before the step's own collectives
    if (dp->shard_grads) {
        size_t n = round_up(dp->plan.layout.shard_elements, dp->plan.mesh.dp_replicate);
        cudaCheck(cudaMemsetAsync(dp->shard_grads, 0, n * sizeof(float), 0));
    }
    cudaCheck(cudaMemsetAsync(dp->loss, 0, dp->plan.mesh.world * sizeof(float), 0));
}

static void dev_dp_note_bytes(DeviceDP* dp);
static int dev_dp_elastic_wait(DeviceDP* dp, const char* what);

// The mean of the per-rank values summed into dp->loss[0], over every rank: one all-reduce and
// one host wait. -le 1: a failure of the all-reduce is recovered from (llmc/dp_elastic.cuh) and it
// is redone from the kept slots on the surviving ranks, whose mean it then is.
static float dev_dp_mean_over_world(DeviceDP* dp, const char* what) {
    int W = dp->plan.mesh.world;
    if (dp->el.on) { cudaCheck(cudaMemcpyAsync(dp->loss_keep, dp->loss, W * sizeof(float), cudaMemcpyDeviceToDevice, 0)); }
    for (;;) {
        int span = op_span_begin(OP_COMM, 0);
        device_link_order_on_main(&dp->link); // e.g. after the shard group's parameter all-gathers, on every rank
        int n = dp->el.live_W; // W, or the ranks left (-le 1): one slot each, as the closed form counts
        if (n > 1) { ncclCheckOn(dp->link.world, ncclAllReduce(dp->loss, dp->loss, n, ncclFloat, ncclSum, dp->link.world, 0)); }
        op_span_end(span, 0.0, ring_bytes((double)n * sizeof(float), n, 1));
        if (!dp->el.on) {
            wait_device(0, dp->link.host_event, what);
            break;
        }
        if (dev_dp_elastic_wait(dp, what)) { break; }
        cudaCheck(cudaMemcpyAsync(dp->loss, dp->loss_keep, W * sizeof(float), cudaMemcpyDeviceToDevice, 0));
    }
    float sum;
    cudaCheck(cudaMemcpy(&sum, dp->loss, sizeof(float), cudaMemcpyDeviceToHost));
    return sum / (float)dp->el.live_W;
}

// The loss (slot 0 of dp->loss, times loss_factor) and the preemption vote (slot 1) in the one
// all-reduce of the loss slots; returns the mean loss, *votes the sum of the votes.
static float dev_dp_agree(DeviceDP* dp, float loss_factor, float vote, float* votes) {
    static float host_vote; // outlives the asynchronous copy
    host_vote = vote;
    int W = dp->plan.mesh.world;
    if (loss_factor != 1.0f) { scale(dp->loss, 1, loss_factor, 0); }
    if (W > 1) { cudaCheck(cudaMemcpyAsync(dp->loss + 1, &host_vote, sizeof(float), cudaMemcpyHostToDevice, 0)); }
    float mean = dev_dp_mean_over_world(dp, "the step's loss");
    float got[2] = {0.0f, vote};
    if (W > 1) { cudaCheck(cudaMemcpy(got, dp->loss, 2 * sizeof(float), cudaMemcpyDeviceToHost)); }
    *votes = got[1];
    return mean;
}

// The sum over every rank of one count per rank (exact below 2^24), through the loss slots.
static int dev_dp_sum_count(DeviceDP* dp, int count, const char* what) {
    float v = (float)count;
    cudaCheck(cudaMemsetAsync(dp->loss, 0, dp->plan.mesh.world * sizeof(float), 0));
    cudaCheck(cudaMemcpy(dp->loss, &v, sizeof(float), cudaMemcpyHostToDevice));
    return (int)lroundf(dev_dp_mean_over_world(dp, what) * (float)dp->el.live_W);
}

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
    dev_dp_all_gather_units(dp, -1);
    device_link_comm_wait(&dp->link);
    wait_device(0, dp->link.host_event, "the all-gather of the resumed parameters");
}

// outer = the local parameters of the sync's elements (fp32), the outer momentum 0 (stream 0).
static void dev_dp_outer_init(void* ctx) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    device_link_comm_wait(&dp->link);
    cudaCheck(cudaMemsetAsync(dp->st.outer, 0, p->sync_owned * sizeof(float), 0));
    cudaCheck(cudaMemsetAsync(dp->st.momentum, 0, p->sync_owned * sizeof(float), 0));
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        const float* mw = dp->opt.master ? dp->opt.master + dp_span_adam(p, sp) : NULL;
        outer_local(dp->st.outer + sp->owned_offset, mw, dp->params + sp->param_offset, sp->count);
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
    DevExchange* x = &dp->xch[f];
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
    if (x->next == n) { device_link_record(&dp->link, &dp->exchanged[f]); }
}

// -lo: at the start of a step, the next chunk of every fragment's exchange in flight, in fragment
// order on every rank (the order of collectives).
static void dev_dp_pump(DeviceDP* dp) {
    for (int f = 0; dp->xch && f < dp->plan.num_fragments; f++) {
        if (dp->xch[f].next < dp->xch[f].total) { dev_dp_issue_chunk(dp, f); }
    }
}

// Every chunk of fragment f's exchange not yet issued (f < 0: of every fragment, in order), now:
// before its result is applied early (the last step) or a checkpoint holds it.
static void dev_dp_drain(DeviceDP* dp, int f) {
    for (int g = 0; dp->xch && g < dp->plan.num_fragments; g++) {
        while ((f < 0 || g == f) && dp->xch[g].next < dp->xch[g].total) { dev_dp_issue_chunk(dp, g); }
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
    cudaCheck(cudaMemsetAsync(dp->flag, 0, W * sizeof(float), 0));
    outer_nonfinite(dp->flag, x, n, 0);
    int span = op_span_begin(OP_COMM, 0);
    device_link_order_on_main(&dp->link);
    int ranks = dp->el.live_W; // W, or the ranks left (-le 1)
    if (ranks > 1) { ncclCheckOn(dp->link.world, ncclAllReduce(dp->flag, dp->flag, ranks, ncclFloat, ncclSum, dp->link.world, 0)); }
    op_span_end(span, 0.0, ring_bytes((double)ranks * sizeof(float), ranks, 1));
    if (!dp->el.on) {
        wait_device(0, dp->link.host_event, "the outer sync's finiteness flag");
    } else if (!dev_dp_elastic_wait(dp, "the outer sync's finiteness flag")) {
        return -1;
    }
    float total;
    cudaCheck(cudaMemcpy(&total, dp->flag, sizeof(float), cudaMemcpyDeviceToHost));
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
    const float* res = outer_compressed(c) ? dp->st.residual : NULL;
    cudaCheck(cudaMemsetAsync(dst, 0, padded * sizeof(float), 0));
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* r = &p->runs[i];
        size_t o = r->owned;
        const float* mw = from_snap ? from_snap + o : dp->opt.master ? dp->opt.master + r->adam : NULL;
        if (snap_out) { outer_local(snap_out + o, mw, dp->params + r->param, r->count); }
        outer_span_message(dst + r->packed, dp->st.outer + o, mw, dp->params + r->param, res ? res + o : NULL, r->count,
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
    float* res = outer_compressed(c) ? dp->st.residual : NULL;
    cudaStream_t cs = dp->link.comm_stream;
    if (dp->res_keep && res) { dev_dp_residual_runs(dp, f, dp->res_keep, res, 0); } // -le 1: should it be redone
    int copy = p->outer->overlap > 0 ? f : 0; // -lo: the fragment's own wire buffers
    DevExchange* x = &dp->xch[f];
    x->next = 0;
    x->total = chunks;
    x->dst = dst;
    x->slice = dev_dp_live_padded(dp, f) / R;
    x->w = dev_dp_wire_spec(c);
    x->c = *c;
    x->send = dp->wire_send ? dp->wire_send + copy * dp->wire_send_bytes : NULL;
    x->recv = dp->wire_recv ? dp->wire_recv + copy * dp->wire_recv_bytes : NULL;
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
    for (int f = 0; dp->xch && f < dp->plan.num_fragments; f++) { any |= dp->xch[f].in_flight; }
    if (!any) { return; }
    // after every exchange's encoding and chunks so far (the residual, dst), abandoned or not, and
    // before any redone one (-lf: several in flight; stream 0 must not wait for the redone ones)
    device_link_comm_wait(&dp->link);
    for (int f = 0; f < dp->plan.num_fragments; f++) {
        DevExchange* x = &dp->xch[f];
        if (x->in_flight && dp->res_keep && outer_compressed(&x->c)) {
            dev_dp_residual_runs(dp, f, dp->st.residual, dp->res_keep, 0);
        }
    }
    for (int f = 0; f < dp->plan.num_fragments; f++) {
        DevExchange* x = &dp->xch[f];
        if (!x->in_flight) { continue; }
        OuterConfig c = x->c;
        dev_dp_pack_messages(dp, f, &c, x->dst, dp->st.snap, NULL);
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
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->exchanged[f]));
    OP_SPAN(OP_COMM, 0, 0.0, 0.0, device_link_wait(&dp->link, &dp->link.params_ready[L])); // the last all-gather
    float inv_R = 1.0f / (float)dp->el.live_R; // -le 1: the mean over the replicas still training
    for (int i = p->frag_runs[f]; i < p->frag_runs[f + 1]; i++) {
        const DpRun* r = &p->runs[i];
        size_t o = r->owned;
        outer_span_update(dp->st.outer + o, dp->st.momentum + o, sum + r->packed, dp->opt.master ? dp->opt.master + r->adam : NULL,
                          dp->params + r->param, snap ? snap + o : NULL, r->count, inv_R, &call->c);
    }
    sum_of_squares(dp->norm, sum, dev_dp_live_padded(dp, f), dp->norm + S);
    if (p->sync_stage != 0) {
        dev_dp_norm_over_shard(dp);
        dev_dp_all_gather_units(dp, p->num_fragments > 1 ? f : -1);
    }
    return dev_dp_norm_read(dp, "the outer sync");
}

// -le 1: whether fragment f's blocking exchange ended (stream 0 waits for it, the host for stream
// 0 through the elastic wait: 0 where a replica was lost in it and the survivors shrank their
// communicators); 1 without -le (the apply waits for it as before).
static int dev_dp_exchange_done(DeviceDP* dp, int f) {
    if (!dp->el.on) { return 1; }
    device_link_wait(&dp->link, &dp->exchanged[f]);
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
        float* buf = p->zero_stage == 0 ? dp->outer_msg : dp->shard_grads;
        for (;;) { // -le 1: a replica lost in the flag or the exchange, the survivors redo it over R'
            int got = dev_dp_fragment_exchange(dp, call, buf, NULL, 1);
            if (got == 0) { return 0; }
            if (got > 0 && dev_dp_exchange_done(dp, f)) { break; }
            if (got > 0 && dp->res_keep && outer_compressed(&call->c)) { // the residual before the encoding
                dev_dp_residual_runs(dp, f, dp->st.residual, dp->res_keep, 0); // (the restore: the messages read it)
            }
        }
        *sq = dev_dp_fragment_apply(dp, call, buf, NULL);
        return 1;
    }
    float* held = dp->st.held + dp->held_at[f];
    DevExchange* x = &dp->xch[f];
    if (call->phase == OUTER_START) {
        int got;
        while ((got = dev_dp_fragment_exchange(dp, call, held, dp->st.snap, p->outer->overlap)) < 0) {}
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
    for (int g = 0; g < p->num_fragments; g++) { others += dp->xch[g].in_flight; }
    if (!others) { elastic_wait_hook = NULL; } // (-lf: another fragment's exchange may still be in flight)
    *sq = dev_dp_fragment_apply(dp, call, held, dp->st.snap);
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
        cudaCheck(cudaMemcpy(host, dp->st.outer, p->sync_owned * sizeof(float), cudaMemcpyDeviceToHost));
        crc = outer_state_crc(p, host);
    } else if (dp->opt.master) { // AdamW's order: the parameters' in ZeRO 0 (dp_span_adam)
        cudaCheck(cudaMemcpy(host, dp->opt.master, p->owned * sizeof(float), cudaMemcpyDeviceToHost));
        crc = dp_plan_local_crc(p, host, p->zero_stage != 0);
    } else {
        dev_dp_download_owned(dp, host);
        crc = dp_plan_local_crc(p, host, 1);
    }
    float mine[2];
    crc_to_floats(crc, mine);
    cudaCheck(cudaMemcpy(dp->crc_buf + 2 * me, mine, sizeof(mine), cudaMemcpyHostToDevice));
    device_link_order_on_main(&dp->link);
    ncclCheckOn(dp->link.replica, ncclAllGather(dp->crc_buf + 2 * me, dp->crc_buf, 2, ncclFloat, dp->link.replica, 0));
    wait_device(0, dp->link.host_event, "the replicas' CRC-32Cs");
    cudaCheck(cudaMemcpy(host, dp->crc_buf, 2 * (size_t)R * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < R; r++) { crcs[r] = crc_from_floats(host + 2 * r); }
    free(host);
}

// ----------------------------------------------------------------------------
// checkpoints: this rank's arrays of a state file (llmc/ckpt_state_file.h), through host copies

// m, v (and master weights); with -ls also the owned local parameters (the floatX parameters as
// fp32, exact; the replicas differ between syncs), the outer state, the residual (-rq) and, with -lo
// exchanges in flight, the local snapshots and the held sums (once every exchange has landed).
// Host room for every state array (AdamW's of plan.owned elements, the sync's of plan.sync_owned).
static float* dev_dp_state_host(const DpPlan* p, float** at) {
    float* host = (float*)malloc_check((STATE_LOCAL * p->owned + (STATE_ARRAYS - STATE_LOCAL) * p->sync_owned) *
                                       sizeof(float));
    for (int k = 0; k < STATE_ARRAYS; k++) {
        at[k] = host + (k < STATE_LOCAL ? k * p->owned : STATE_LOCAL * p->owned + (k - STATE_LOCAL) * p->sync_owned);
    }
    return host;
}

static void dev_dp_write_state(void* ctx, const char* path, const TrainState* s) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    size_t n = p->owned, ns = p->sync_owned;
    float* at[STATE_ARRAYS];
    float* host = dev_dp_state_host(p, at);
    if (p->sync_stage != p->zero_stage) { // a sharded ZeRO 0 sync's all-gather writes the master weights
        device_link_host_wait(&dp->link, "the master weights");
    }
    cudaCheck(cudaMemcpy(at[STATE_M], dp->opt.m, n * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(at[STATE_V], dp->opt.v, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (dp->opt.master) { cudaCheck(cudaMemcpy(at[STATE_MASTER], dp->opt.master, n * sizeof(float), cudaMemcpyDeviceToHost)); }
    if (s->has_local) { dev_dp_download_owned(dp, at[STATE_LOCAL]); }
    OuterState h = {at[STATE_OUTER], at[STATE_OUTER_M], at[STATE_RESIDUAL], NULL, at[STATE_PEND_SNAP]};
    if (s->has_outer) {
        cudaCheck(cudaMemcpy(h.outer, dp->st.outer, ns * sizeof(float), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(h.momentum, dp->st.momentum, ns * sizeof(float), cudaMemcpyDeviceToHost));
    }
    if (s->has_pending) { // every exchange landed first (all its chunks issued, the communication stream)
        dev_dp_drain(dp, -1);
        device_link_host_wait(&dp->link, "the -lo exchanges in flight");
        size_t total = p->held_off[p->num_fragments];
        float* packed = (float*)malloc_check(total * sizeof(float));
        cudaCheck(cudaMemcpy(h.snap, dp->st.snap, ns * sizeof(float), cudaMemcpyDeviceToHost));
        for (int f = 0; f < p->num_fragments; f++) { // (every replica training: R slices each)
            cudaCheck(cudaMemcpy(packed + p->held_off[f], dp->st.held + dp->held_at[f],
                                 (p->held_off[f + 1] - p->held_off[f]) * sizeof(float), cudaMemcpyDeviceToHost));
        }
        dp_plan_held_owned(p, packed, at[STATE_PEND_SUM], 1);
        free(packed);
    }
    if (s->has_residual) {
        device_link_host_wait(&dp->link, "the residual"); // written on stream 0 at an exchange's start
        cudaCheck(cudaMemcpy(h.residual, dp->st.residual, ns * sizeof(float), cudaMemcpyDeviceToHost));
    }
    StateArrays arrays = {{at[STATE_M], at[STATE_V], dp->opt.master ? at[STATE_MASTER] : NULL}};
    outer_state_arrays(&arrays, s, &h, at[STATE_LOCAL], at[STATE_PEND_SUM]);
    state_write_arrays(path, s, &arrays);
    free(host);
}

// -le 1, a rank whose replica rejoins or is rebuilt from the outer state: its fp32 master weights
// (where kept) of the sync's elements = the outer parameters (stream 0).
static void dev_dp_master_from_outer(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    for (int i = 0; dp->opt.master && i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        cudaCheck(cudaMemcpyAsync(dp->opt.master + dp_span_adam(p, sp), dp->st.outer + sp->owned_offset,
                                  sp->count * sizeof(float), cudaMemcpyDeviceToDevice, 0));
    }
}

// m, v (and master weights); with -ls the owned local parameters (written into the floatX
// parameters, then all-gathered inside the replica) and the outer state, where the checkpoint
// holds them.
static void dev_dp_read_state(void* ctx, const char* dir, int step, const StateTarget* target, TrainState* got) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    size_t n = p->owned, ns = p->sync_owned;
    float* at[STATE_ARRAYS];
    float* host = dev_dp_state_host(p, at);
    OuterState h = {dp->st.outer ? at[STATE_OUTER] : NULL, dp->st.momentum ? at[STATE_OUTER_M] : NULL,
                    dp->st.residual ? at[STATE_RESIDUAL] : NULL, NULL, dp->st.held ? at[STATE_PEND_SNAP] : NULL};
    StateArrays arrays = {{at[STATE_M], at[STATE_V], dp->opt.master ? at[STATE_MASTER] : NULL}};
    outer_state_targets(&arrays, &h, at[STATE_LOCAL], at[STATE_PEND_SUM]);
    state_load_arrays(dir, step, target, got, &arrays);
    cudaCheck(cudaMemcpy(dp->opt.m, at[STATE_M], n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dp->opt.v, at[STATE_V], n * sizeof(float), cudaMemcpyHostToDevice));
    if (dp->opt.master && got->has_master) {
        cudaCheck(cudaMemcpy(dp->opt.master, at[STATE_MASTER], n * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (got->has_outer) {
        cudaCheck(cudaMemcpy(dp->st.outer, h.outer, ns * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dp->st.momentum, h.momentum, ns * sizeof(float), cudaMemcpyHostToDevice));
    }
    // the checkpoint lost this replica (-le 1): master weights from the outer parameters, before a
    // sharded ZeRO 0 sync's all-gather below spreads them inside the replica
    if (got->rebuilt) { dev_dp_master_from_outer(dp); }
    if (got->has_local) { dev_dp_upload_owned(dp, at[STATE_LOCAL]); }
    if (dp->st.residual && got->has_residual) {
        cudaCheck(cudaMemcpy(dp->st.residual, h.residual, ns * sizeof(float), cudaMemcpyHostToDevice));
    }
    if (got->has_pending) {
        size_t total = p->held_off[p->num_fragments];
        float* packed = (float*)calloc_check(total, sizeof(float));
        cudaCheck(cudaMemcpy(dp->st.snap, at[STATE_PEND_SNAP], ns * sizeof(float), cudaMemcpyHostToDevice));
        dp_plan_held_owned(p, packed, at[STATE_PEND_SUM], 0);
        for (int f = 0; f < p->num_fragments; f++) {
            cudaCheck(cudaMemcpy(dp->st.held + dp->held_at[f], packed + p->held_off[f],
                                 (p->held_off[f + 1] - p->held_off[f]) * sizeof(float), cudaMemcpyHostToDevice));
        }
        free(packed);
    }
    free(host);
}

// The training loop's view of this layer (llmc/dp_ops.h).
// -le 1: the outer parameters and momentum from replica 0 (the replica communicator's rank 0: it
// never leaves a running job) to the replicas that rejoined, with the rest of their ranks'
// replica communicators (stream 0; the survivors send, the joining ranks receive).
static void dev_dp_outer_broadcast(DeviceDP* dp) {
    size_t n = dp->plan.sync_owned;
    device_link_order_on_main(&dp->link);
    ncclCheck(ncclGroupStart());
    ncclCheckOn(dp->link.replica, ncclBroadcast(dp->st.outer, dp->st.outer, n, ncclFloat, 0, dp->link.replica, 0));
    ncclCheckOn(dp->link.replica, ncclBroadcast(dp->st.momentum, dp->st.momentum, n, ncclFloat, 0, dp->link.replica, 0));
    ncclCheckOn(dp->link.replica, ncclGroupEnd());
    watchdog_grace(); // the joining ranks build their model and load their checkpoint first
    wait_device(0, dp->link.host_event, "the outer state for the replicas rejoining (-le 1)");
}

// -le 1, after the outer sync of `step` (llmc/dp_ops.h): replicas waiting to rejoin are admitted
// (elastic_admit) and sent the outer state; returns how many joined.
static int dev_dp_admit(void* ctx, int step) {
    DeviceDP* dp = (DeviceDP*)ctx;
    for (int f = 0; dp->xch && f < dp->plan.num_fragments; f++) {
        if (dp->xch[f].in_flight) { return 0; } // -lo: a replica rejoins once the exchange in flight is applied
    }
    int n = elastic_admit(&dp->el, &dp->link, &dp->plan.mesh, step);
    if (n > 0) {
        dev_dp_note_bytes(dp);
        dev_dp_outer_broadcast(dp);
    }
    return n;
}

// -le 1, a rank that rejoined (its checkpoint loaded, llmc/dp_ops.h): the outer state from replica
// 0, the local parameters (and master weights) set to the outer ones, AdamW's moments and the
// residual zero, as train_gpt2.py --rejoin does.
static void dev_dp_join(void* ctx) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    dev_dp_outer_broadcast(dp);
    dev_dp_master_from_outer(dp);
    float* host = (float*)malloc_check(p->sync_owned * sizeof(float));
    cudaCheck(cudaMemcpy(host, dp->st.outer, p->sync_owned * sizeof(float), cudaMemcpyDeviceToHost));
    dev_dp_upload_owned(dp, host); // and the all-gather inside the replica
    free(host);
    cudaCheck(cudaMemset(dp->opt.m, 0, dp->opt.n * sizeof(float)));
    cudaCheck(cudaMemset(dp->opt.v, 0, dp->opt.n * sizeof(float)));
    if (dp->st.residual) { cudaCheck(cudaMemset(dp->st.residual, 0, p->sync_owned * sizeof(float))); }
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
        cudaCheck(cudaFree(dp->outer_msg));
        dp->outer_msg = (float*)device_alloc((p->sync_owned + R) * sizeof(float));
    } else {
        cudaCheck(cudaFree(dp->shard_grads));
        dp->shard_grads = (float*)device_alloc((p->layout.shard_elements + R) * sizeof(float));
    }
    if (dp->st.residual) { dp->res_keep = (float*)device_alloc(p->sync_owned * sizeof(float)); }
    if (dp->st.held) { // -lo: each fragment's held sum cut into R' slices (round_up(count, R') < count + R)
        for (int f = 0; f < p->num_fragments; f++) { dp->held_at[f + 1] = dp->held_at[f] + p->frag_count[f] + R; }
        cudaCheck(cudaFree(dp->st.held));
        dp->st.held = (float*)device_alloc(dp->held_at[p->num_fragments] * sizeof(float));
    }
    for (int f = 0; dp->xch && f < p->num_fragments; f++) { // -lo tau >= 2, dense: R' ranges of a chunk
        if (!dp->xch[f].tmp) { continue; }
        size_t most = 0;
        for (int r = 1; r <= R; r++) {
            size_t n = (size_t)r * ceil_div(ceil_div(p->frag_count[f], r), p->outer->overlap);
            most = n > most ? n : most;
        }
        cudaCheck(cudaFree(dp->xch[f].tmp));
        dp->xch[f].tmp = (float*)device_alloc(most * sizeof(float));
    }
    if (!dp->wire_send) { return; }
    WireSpec w = dev_dp_wire_spec(p->outer), owner = w;
    for (int f = 0; f < p->num_fragments; f++) {
        for (int r = 1; r <= R; r++) {
            size_t slice = ceil_div(p->frag_count[f], r);
            owner.mult = r;
            size_t sent = wire_spec_bytes(&w, slice), gathered = wire_spec_bytes(&owner, slice);
            if (r * sent > dp->wire_send_bytes) { dp->wire_send_bytes = r * sent; }
            if (r * gathered > dp->wire_recv_bytes) { dp->wire_recv_bytes = r * gathered; }
            if (r * sent > dp->wire_recv_bytes) { dp->wire_recv_bytes = r * sent; }
        }
    }
    int copies = p->outer->overlap > 0 ? p->num_fragments : 1; // -lo: one pair per fragment
    cudaCheck(cudaFree(dp->wire_send));
    cudaCheck(cudaFree(dp->wire_recv));
    dp->wire_send = (uint8_t*)device_alloc(copies * dp->wire_send_bytes);
    dp->wire_recv = (uint8_t*)device_alloc(copies * dp->wire_recv_bytes);
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

static DataParallelOps dev_dp_ops(DeviceDP* dp) {
    DataParallelOps ops = {
        .ctx = dp,
        .reduce_gradients = dev_dp_reduce_gradients,
        .update = dev_dp_update,
        .write_state = dev_dp_write_state,
        .read_state = dev_dp_read_state,
        .set_replica_reduce = dev_dp_set_replica_reduce,
        .set_gradient_wire = dev_dp_set_gradient_wire,
        .outer_init = dev_dp_outer_init,
        .outer_step = dev_dp_outer_step,
        .replica_crcs = dev_dp_replica_crcs,
        .live_replicas = dev_dp_live_replicas,
        .admit = dev_dp_admit,
        .join = dev_dp_join,
    };
    return ops;
}

#endif
