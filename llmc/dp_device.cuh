// The data-parallel layer's device backend (the GPU trainer's ZeRO core): stages 0, 1, 2 and the
// sharded optimizer state (docs/design.md sections 3-5: AdamW, Muon) and its checkpoint arrays,
// over NCCL on device buffers. The plan is llmc/dp_plan.h's, the collectives' order and the streams
// llmc/dp_device_link.cuh's. The replica sync (-ls, -rq/-rk, -lf, -lo, -le) sits above, in
// llmc/replica_device.cuh, reaching in through DeviceSyncHooks alone.
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
#include "ckpt_layout.h"
#include "optimizer.h"
#include "adamw.cuh"
#include "muon.cuh"
#include "muon_owned.cuh"
#include "nccl_setup.cuh"
#include "device_wait.cuh"
#include "shard_kernels.cuh"
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


// What the replica sync (llmc/replica_device.cuh) adds to the core's step, its world collectives
// and its state files; every entry NULL without one.
struct DeviceDP;
typedef struct {
    // Before a step's own collectives: -lo's exchanges in flight move on (their next chunks issued).
    void (*begin_step)(struct DeviceDP* dp);
    // With every step's gradients averaged over the world: sums them over the replicas itself (a
    // compressed link this step: returns 1, the average done) or leaves it to the core (0).
    int (*sum_gradients)(struct DeviceDP* dp);
    // -le 1, after an all-reduce over the ranks training: 1 where it completed, 0 where a replica
    // was lost in it (the membership shrank: the survivors redo it).
    int (*collective_done)(struct DeviceDP* dp, const char* what);
    // A state file's arrays beyond the optimizer's, in the host copies at (dev_dp_state_host's):
    // gathered for writing s, named as a read's targets, and put in place once read (got).
    void (*state_out)(struct DeviceDP* dp, const TrainState* s, float** at, StateArrays* arrays);
    void (*state_targets)(struct DeviceDP* dp, float** at, StateArrays* arrays);
    void (*state_in)(struct DeviceDP* dp, const TrainState* got, float** at);
} DeviceSyncHooks;

typedef struct DeviceDP {
    DpPlan plan;
    DeviceLink link;           // communicators, the communication stream, the order of collectives
    floatX* params;            // the model's parameters
    floatX* grads;             // the model's gradient block (grads_elements, padded)
    size_t grads_elements;
    floatX** unit_grads;       // where each unit's full gradient lives (stage 2: its layer slot)
    int grad_slots;            // stage 2: layer slots of gradients used in turn
    int last_micro_step;       // set by the training loop: 1 during the step's last backward
    int replica_reduce;        // 1: gradients averaged over every rank; 0 (-ls): over the shard group only
    DeviceAdamW opt;           // AdamW's state of the owned elements (-opt muon: m holds Muon's momentum of its matrices)
    int muon;                  // -opt muon (ZeRO 0: every rank orthogonalizes every matrix)
    DeviceMuon muon_work;
    GPT2Config muon_model;     // the shapes of its matrices
    int muon_sharded;          // ZeRO 1, 2 with -opt muon: its matrices owned whole (llmc/muon_owned.cuh)
    DeviceMuonOwned owned;     // their owners, and this rank's whole buffers
    uint32_t seed;             // the stochastic rounding's seed (-sd)
    float* shard_grads;        // stages 1, 2: reduced fp32 slices, padded to a multiple of dp_replicate
    floatX* group_pad;         // a bucket's units S does not divide, each padded to S slices (or NULL)
    float* master_pad;         // the same for the master weights (a sharded ZeRO 0 sync gathers them too)
    floatX* group_recv;        // a bucket's reduce-scattered slices, in shard order
    float* loss;               // world floats: [0] the loss being summed, the rest 0 (ring padding)
    float* norm;               // dp_shard floats ([0] the squared norm), then NORM_BLOCKS of scratch
    Elastic el;                // -le 1: the replicas still training (llmc/dp_elastic.cuh); else R and W
    float* loss_keep;          // -le 1: the loss slots before their all-reduce, to redo it on the survivors
    struct DeviceReplica* sync; // the replica sync's state (llmc/replica_device.cuh), or NULL
    DeviceSyncHooks hooks;     // its hooks into the core's step and state files (every entry NULL without one)
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
}


static void dev_dp_free(DeviceDP* dp) {
    void* bufs[] = {dp->shard_grads, dp->group_pad, dp->group_recv, dp->loss, dp->norm, dp->master_pad, dp->loss_keep};
    for (int i = 0; i < (int)(sizeof(bufs) / sizeof(bufs[0])); i++) { if (bufs[i]) { cudaCheck(cudaFree(bufs[i])); } }
    device_adamw_free(&dp->opt);
    if (dp->muon) { device_muon_free(&dp->muon_work); }
    if (dp->muon_sharded) { muon_owned_free(&dp->owned); }
    free(dp->unit_grads);
    elastic_free(&dp->el);
    device_link_free(&dp->link, dp->plan.layout.num_layers);
    dp_plan_free(&dp->plan);
}

// ----------------------------------------------------------------------------
// the ZeRO step

// Whether unit u is a Muon matrix owned whole (reduced to its owner, broadcast from it).
static int dev_dp_owned_whole(const DeviceDP* dp, int u) { return dp->muon_sharded && dp->owned.plan.owner[u] >= 0; }

// ZeRO 1, 2 with -opt muon and fp32 master weights, for the replica sync (llmc/replica_device.cuh),
// which reads and writes every rank's slices of them: the owners' whole master weights of the Muon
// matrices in fragment f (-1: all) out to the slices (to_slices 1, before the sync reads them), or
// back to the owners (0, after it wrote them); on stream 0, after the communication stream's
// collectives, the host waiting for them.
static void dev_dp_muon_master_slices(DeviceDP* dp, int to_slices, int f) {
    if (!dp->muon_sharded || !dp->owned.master) { return; }
    const DpPlan* p = &dp->plan;
    int L = p->layout.num_layers, F = p->num_fragments, lo = 0, hi = INT_MAX;
    if (f >= 0 && F > 1) { // fragment f's layers (llmc/outer_sync.h): floor(l F / L) == f
        for (lo = 0; lo < L && (int)((long long)lo * F / L) < f; lo++) {}
        for (hi = lo; hi < L && (int)((long long)hi * F / L) == f; hi++) {}
    }
    device_link_order_on_main(&dp->link);
    muon_owned_slices(&dp->owned, &p->layout, dp->owned.master, dp->opt.master, to_slices, lo, hi, dp->link.shard, 0);
    wait_device(0, dp->link.host_event, "the Muon matrices' master weights for the replica sync"); // (rare: a sync)
}

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
    size_t received = 0, whole = 0;
    for (int u = b->first; u < b->first + b->count; u++) {
        const ShardUnit* unit = &p->layout.units[u];
        const floatX* send = dp->unit_grads[u];
        if (dev_dp_owned_whole(dp, u)) { // a Muon matrix: to its owner
            muon_owned_reduce(&dp->owned, unit, u, send, dp->link.shard, cs);
            whole += unit->slice;
            continue;
        }
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
    size_t added = 0; // each run of reduce-scattered units (consecutive in the shard layout) in one launch
    for (int u = b->first, end = b->first + b->count; u < end;) {
        if (dev_dp_owned_whole(dp, u)) { u++; continue; }
        size_t start = p->layout.units[u].shard_offset, n = 0;
        for (; u < end && !dev_dp_owned_whole(dp, u); u++) { n += p->layout.units[u].slice; }
        accumulate(dp->shard_grads + start, dp->group_recv + added, n, cs);
        added += n;
    }
    if (dp->muon_sharded) { muon_owned_accumulate(&dp->owned, &p->layout, b->first, b->count, cs); }
    return received + whole;
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
// copies. fragment >= 0 (-lf): that fragment's units only. sliced 1 (the replica sync wrote every
// rank's slices): the Muon matrices owned whole (ZeRO 1, 2) all-gathered from their slices too, not
// broadcast from their owners.
static void dev_dp_all_gather_units(DeviceDP* dp, int fragment, int sliced) {
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
            if (!sliced && dev_dp_owned_whole(dp, u)) { // stepped whole by its owner
                floatX* w = dp->params + unit->offset;
                ncclCheck(ncclBroadcast(w, w, unit->size, ncclFloatX, dp->owned.plan.owner[u], dp->link.shard, cs));
                continue;
            }
            dev_dp_gather_unit(dp, unit, (char*)dp->params, sizeof(floatX), ncclFloatX, &pad, cs);
            if (master) { dev_dp_gather_unit(dp, unit, master, sizeof(float), ncclFloat, &mpad, cs); }
        }
        ncclCheck(ncclGroupEnd());
        pad = (char*)dp->group_pad;
        mpad = (char*)dp->master_pad;
        for (int u = b->first; u < b->first + b->count; u++) {
            const ShardUnit* unit = &p->layout.units[u];
            if ((fragment >= 0 && outer_unit_fragment(unit, L, F) != fragment) || (!sliced && dev_dp_owned_whole(dp, u))) {
                continue;
            }
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


// After the last micro-step: the reduction finished across ranks and averaged over the world (or,
// with -ls between syncs, over the replica's shard group: the replicas keep their own gradients;
// -ls 0 with -rq/-rk: the replica sync's hook, llmc/replica_device.cuh).
static void dev_dp_finish_gradients(DeviceDP* dp) {
    const DpPlan* p = &dp->plan;
    int W = p->mesh.world, S = p->mesh.dp_shard, R = p->mesh.dp_replicate;
    if (dp->replica_reduce && R > 1 && dp->hooks.sum_gradients && dp->hooks.sum_gradients(dp)) { return; }
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
    if (dp->replica_reduce && R > 1 && dp->muon_sharded) { // the other slices and the owned matrices, packed
        bytes = muon_owned_replica_sum(&dp->owned, dp->shard_grads, R, dp->link.replica, cs);
    } else if (dp->replica_reduce && R > 1) {
        size_t padded = round_up(p->layout.shard_elements, R);
        ncclCheckOn(dp->link.replica, ncclAllReduce(dp->shard_grads, dp->shard_grads, padded, ncclFloat, ncclSum, dp->link.replica, cs));
        bytes = ring_bytes((double)padded * sizeof(float), R, 1);
    }
    scale(dp->shard_grads, p->layout.shard_elements, 1.0f / (float)(dp->replica_reduce ? W : S), cs);
    if (dp->muon_sharded && dp->owned.plan.elements > 0) {
        scale(dp->owned.acc, dp->owned.plan.elements, 1.0f / (float)(dp->replica_reduce ? W : S), cs);
    }
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
        if (dp->muon_sharded) { // the owned Muon matrices' whole gradients (their slices above are 0)
            OP_SPAN(OP_GRAD_NORM, 0, 0.0, (double)dp->owned.plan.elements * sizeof(float),
                    muon_owned_norm(&dp->owned, dp->norm));
        }
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

// -opt muon: the work space for the model's largest block matrix, and with ZeRO 1, 2 its matrices'
// owners in the shard group, this rank's whole buffers (master weights from init, the model's fp32
// values, where kept; split_qkv: -mq).
static void dev_dp_init_muon(DeviceDP* dp, const GPT2Config* c, int split_qkv, const float* init) {
    const DpPlan* p = &dp->plan;
    dp->muon = 1;
    dp->muon_model = *c;
    size_t C = (size_t)c->channels;
    device_muon_alloc(&dp->muon_work, 4 * C * C, C);
    if (p->zero_stage != 0) {
        dp->muon_sharded = 1;
        muon_owned_init(&dp->owned, &p->layout, c, split_qkv, p->mesh.dp_shard, p->mesh.shard_idx, p->mesh.dp_replicate,
                        dp->opt.master != NULL, init);
    }
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
            muon_matrix_shape(&dp->muon_model, i, h->split_qkv, &rows, &cols);
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
    const AdamWConfig* h = &oc->adamw;
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
            if (dev_dp_owned_whole(dp, u)) { continue; } // Muon's, stepped whole by its owner below
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
    for (int u = 0; dp->muon_sharded && u < p->layout.num_units; u++) {
        muon_owned_update(&dp->owned, &dp->muon_work, &dp->muon_model, &p->layout.units[u], u, dp->params, &oc->muon,
                          grad_scale, seed + (uint32_t)t * NUM_PARAMETER_TENSORS);
    }
    dev_dp_all_gather_units(dp, -1, 0);
}

static void dev_dp_begin_step(DeviceDP* dp) {
    if (dp->hooks.begin_step) { dp->hooks.begin_step(dp); } // -lo: the exchanges in flight move on first
    if (dp->shard_grads) {
        size_t n = round_up(dp->plan.layout.shard_elements, dp->plan.mesh.dp_replicate);
        cudaCheck(cudaMemsetAsync(dp->shard_grads, 0, n * sizeof(float), 0));
    }
    if (dp->muon_sharded) { cudaCheck(cudaMemsetAsync(dp->owned.acc, 0, dp->owned.plan.elements * sizeof(float), 0)); }
    cudaCheck(cudaMemsetAsync(dp->loss, 0, dp->plan.mesh.world * sizeof(float), 0));
}

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
        if (dp->hooks.collective_done(dp, what)) { break; }
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
// checkpoints: this rank's arrays of a state file (llmc/ckpt_state_file.h), through host copies

// m, v (and master weights), and the replica sync's arrays through its hooks. Host room for every
// state array (the optimizer's of plan.owned elements, the sync's of plan.sync_owned).
static float* dev_dp_state_host(const DpPlan* p, float** at) {
    float* host = (float*)malloc_check((STATE_LOCAL * p->owned + (STATE_ARRAYS - STATE_LOCAL) * p->sync_owned) *
                                       sizeof(float));
    for (int k = 0; k < STATE_ARRAYS; k++) {
        at[k] = host + (k < STATE_LOCAL ? k * p->owned : STATE_LOCAL * p->owned + (k - STATE_LOCAL) * p->sync_owned);
    }
    return host;
}

// m, v and (where kept, and where a read found them: master) the master weights between the
// device and their host copies at (to_host 1: downloaded).
static void dev_dp_state_copy(DeviceDP* dp, float** at, int to_host, int master) {
    float* dev[3] = {dp->opt.m, dp->opt.v, dp->opt.master && master ? dp->opt.master : NULL};
    for (int k = STATE_M; k <= STATE_MASTER; k++) {
        if (!dev[k]) { continue; }
        size_t bytes = dp->plan.owned * sizeof(float);
        if (to_host) { cudaCheck(cudaMemcpy(at[k], dev[k], bytes, cudaMemcpyDeviceToHost)); }
        else { cudaCheck(cudaMemcpy(dev[k], at[k], bytes, cudaMemcpyHostToDevice)); }
    }
}

// ZeRO 1, 2 with -opt muon: the owners' whole momentum (and master weights) into every rank's
// slices of m (and of the master weights) before a write (to_slices 1), or back after a read.
static void dev_dp_muon_state(DeviceDP* dp, int to_slices, int master) {
    if (!dp->muon_sharded) { return; }
    const DpPlan* p = &dp->plan;
    device_link_order_on_main(&dp->link); // after the communication stream's collectives
    DeviceMuonOwned* o = &dp->owned;
    muon_owned_slices(o, &p->layout, o->mom, dp->opt.m, to_slices, 0, INT_MAX, dp->link.shard, 0);
    if (master && o->master) {
        muon_owned_slices(o, &p->layout, o->master, dp->opt.master, to_slices, 0, INT_MAX, dp->link.shard, 0);
    }
    wait_device(0, dp->link.host_event, to_slices ? "Muon's state, before the write" : "Muon's state, once read");
}

static void dev_dp_write_state(void* ctx, const char* path, const TrainState* s) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    float* at[STATE_ARRAYS];
    float* host = dev_dp_state_host(p, at);
    StateArrays arrays = {{at[STATE_M], at[STATE_V], dp->opt.master ? at[STATE_MASTER] : NULL}};
    if (dp->hooks.state_out) { dp->hooks.state_out(dp, s, at, &arrays); } // (first: it waits for what writes the master weights)
    dev_dp_muon_state(dp, 1, 1);
    dev_dp_state_copy(dp, at, 1, 1);
    state_write_arrays(path, s, &arrays);
    free(host);
}

static void dev_dp_read_state(void* ctx, const char* dir, int step, const StateTarget* target, TrainState* got) {
    DeviceDP* dp = (DeviceDP*)ctx;
    const DpPlan* p = &dp->plan;
    float* at[STATE_ARRAYS];
    float* host = dev_dp_state_host(p, at);
    StateArrays arrays = {{at[STATE_M], at[STATE_V], dp->opt.master ? at[STATE_MASTER] : NULL}};
    if (dp->hooks.state_targets) { dp->hooks.state_targets(dp, at, &arrays); }
    state_load_arrays(dir, step, target, got, &arrays);
    dev_dp_state_copy(dp, at, 0, got->has_master);
    dev_dp_muon_state(dp, 0, got->has_master);
    if (dp->hooks.state_in) { dp->hooks.state_in(dp, got, at); }
    free(host);
}


// The training loop's view of this layer (llmc/dp_ops.h).
static DataParallelOps dev_dp_ops(DeviceDP* dp) {
    DataParallelOps ops = {dp, dev_dp_reduce_gradients, dev_dp_update, dev_dp_write_state, dev_dp_read_state};
    return ops;
}


#endif
