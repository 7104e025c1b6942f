// The GPU trainer's buffers and collectives for Muon's matrices owned whole under ZeRO 1 and 2 (the
// plan, shared with the CPU trainer: llmc/muon_plan.h): the owners' whole fp32 gradients, momentum
// and master weights; a unit's gradient reduced to its owner (ncclReduce) in place of its
// reduce-scatter, the stepped matrix broadcast from it (ncclBroadcast) in place of its all-gather;
// their whole buffers scattered to the slices of the shard layout and gathered back (the state
// files' arrays; the replica sync, which works on slices).
#ifndef LLMC_MUON_OWNED_CUH
#define LLMC_MUON_OWNED_CUH

#include <stdint.h>
#include "cuda_common.cuh"
#include "mesh.h"
#include "optimizer.h"
#include "muon.cuh"
#include "shard_kernels.cuh"
#include "nccl_setup.cuh"
#include "op_events.cuh"
#include "muon_plan.h"
#include "dp_device_link.cuh"

typedef struct {
    MuonPlan plan;         // the owners, where this rank's units start in the whole buffers, the pack's runs
    float* acc;            // the owned gradients reduced over the shard group (fp32; micro-steps, replicas summed in)
    float* pack;           // R > 1: the replicas' all-reduce (llmc/muon_plan.h), acc its tail
    float* mom;            // their momentum
    float* master;         // their fp32 master weights (NULL: none kept)
    floatX* recv;          // where a reduce lands (floatX) before it is added into acc
    float* scratch;        // the norm's: NORM_BLOCKS floats, then the sum
} DeviceMuonOwned;

// The plan of layout l over a shard group of S ranks and R replicas, this rank (me) its whole
// buffers; master: keep fp32 master weights, initialised from init (the model's fp32 values,
// parameter order).
static void muon_owned_init(DeviceMuonOwned* o, const ShardLayout* l, const GPT2Config* c, int split_qkv, int S, int me,
                            int R, int master, const float* init) {
    memset(o, 0, sizeof(*o));
    MuonPlan* pl = &o->plan;
    muon_plan_init(pl, l, c, split_qkv, S, me, R);
    size_t n = pl->elements > 0 ? pl->elements : 1;
    if (R > 1) {
        o->pack = (float*)device_alloc(pl->pack_elements * sizeof(float));
        cudaCheck(cudaMemset(o->pack, 0, pl->pack_elements * sizeof(float)));
        o->acc = o->pack + pl->others;
    } else {
        o->acc = (float*)device_alloc(n * sizeof(float));
    }
    o->mom = (float*)device_alloc(n * sizeof(float));
    o->recv = (floatX*)device_alloc(n * sizeof(floatX));
    o->scratch = (float*)device_alloc((NORM_BLOCKS + 1) * sizeof(float));
    pl->bytes = ((R > 1 ? pl->pack_elements : n) + n + NORM_BLOCKS + 1) * sizeof(float) + n * sizeof(floatX);
    cudaCheck(cudaMemset(o->mom, 0, n * sizeof(float)));
    if (master && sizeof(floatX) != sizeof(float)) {
        o->master = (float*)device_alloc(n * sizeof(float));
        pl->bytes += n * sizeof(float);
        for (int u = 0; u < l->num_units; u++) {
            if (pl->at[u] == SIZE_MAX) { continue; }
            cudaCheck(cudaMemcpy(o->master + pl->at[u], init + l->units[u].offset, l->units[u].size * sizeof(float),
                                 cudaMemcpyHostToDevice));
        }
    }
}

static void muon_owned_free(DeviceMuonOwned* o) {
    void* bufs[] = {o->pack ? o->pack : o->acc, o->mom, o->master, o->recv, o->scratch};
    for (int i = 0; i < 5; i++) { if (bufs[i]) { cudaCheck(cudaFree(bufs[i])); } }
    muon_plan_free(&o->plan);
}

// Inside an open NCCL group on cs: unit u's gradient (floatX, whole on every rank) reduced to its
// owner's landing place.
static void muon_owned_reduce(DeviceMuonOwned* o, const ShardUnit* unit, int u, const floatX* grad, ncclComm_t shard,
                              cudaStream_t cs) {
    floatX* to = o->plan.at[u] != SIZE_MAX ? o->recv + o->plan.at[u] : NULL;
    ncclCheck(ncclReduce(grad, to, unit->size, ncclFloatX, ncclSum, o->plan.owner[u], shard, cs));
}

// After the group: the owned units among units [first, first + count) added from their landing
// place into acc, each run of them (consecutive in the whole buffers) in one launch.
static void muon_owned_accumulate(DeviceMuonOwned* o, const ShardLayout* l, int first, int count, cudaStream_t cs) {
    for (int u = first; u < first + count;) {
        if (o->plan.at[u] == SIZE_MAX) { u++; continue; }
        size_t start = o->plan.at[u], n = 0;
        for (; u < first + count && o->plan.at[u] == start + n; u++) { n += l->units[u].size; }
        accumulate(o->acc + start, o->recv + start, n, cs);
    }
}

// With R > 1 replicas, on cs inside the replica group's turn: the shard's other slices (from
// shard_grads) and the owned gradients summed over the replicas in one all-reduce. Returns its bytes.
static double muon_owned_replica_sum(DeviceMuonOwned* o, float* shard_grads, int R, ncclComm_t replica, cudaStream_t cs) {
    size_t k = 0;
    for (size_t r = 0; r < o->plan.num_runs; k += o->plan.run_n[r++]) {
        cudaCheck(cudaMemcpyAsync(o->pack + k, shard_grads + o->plan.run_at[r], o->plan.run_n[r] * sizeof(float),
                                  cudaMemcpyDeviceToDevice, cs));
    }
    ncclCheckOn(replica, ncclAllReduce(o->pack, o->pack, o->plan.pack_elements, ncclFloat, ncclSum, replica, cs));
    k = 0;
    for (size_t r = 0; r < o->plan.num_runs; k += o->plan.run_n[r++]) {
        cudaCheck(cudaMemcpyAsync(shard_grads + o->plan.run_at[r], o->pack + k, o->plan.run_n[r] * sizeof(float),
                                  cudaMemcpyDeviceToDevice, cs));
    }
    return ring_bytes((double)o->plan.pack_elements * sizeof(float), R, 1);
}

__global__ void muon_owned_add_kernel(float* __restrict__ out, const float* __restrict__ x) { out[0] += x[0]; }

// out[0] (a rank's partial squared gradient norm, on the device) += the owned gradients' squares.
static void muon_owned_norm(DeviceMuonOwned* o, float* out) {
    if (o->plan.elements == 0) { return; }
    sum_of_squares(o->scratch + NORM_BLOCKS, o->acc, o->plan.elements, o->scratch);
    muon_owned_add_kernel<<<1, 1>>>(out, o->scratch + NORM_BLOCKS);
    cudaLaunchCheck();
}

// Unit u's matrices stepped by Muon on its owner (stream 0): its whole fp32 gradient times grad_scale,
// each matrix's rounding bits those of its place in the whole tensor (seed_base + tensor, as ZeRO 0 draws them).
static void muon_owned_update(DeviceMuonOwned* o, DeviceMuon* work, const GPT2Config* c, const ShardUnit* unit, int u,
                              floatX* params, const MuonConfig* h, float grad_scale, uint32_t seed_base) {
    if (o->plan.at[u] == SIZE_MAX) { return; }
    int rows, cols;
    muon_matrix_shape(c, unit->tensor, h->split_qkv, &rows, &cols);
    size_t per = (size_t)rows * cols, base = o->plan.at[u];
    for (size_t at = 0; at < unit->size; at += per) {
        float* master = o->master ? o->master + base + at : NULL;
        OP_SPAN(OP_MUON, 0, muon_ns_flops(rows, cols, h->ns_steps), (double)per * (2.0 * sizeof(floatX) + 16.0),
                device_muon_update(work, params + unit->offset + at, master, o->acc + base + at, o->mom + base + at,
                                   rows, cols, grad_scale, h, seed_base + (uint32_t)unit->tensor,
                                   (size_t)unit->layer * unit->size + at));
    }
}

// The owners' whole buffers and the slices of a shard-layout array (every rank of the shard group
// calls it), for the owned units of layers [lo, hi), point to point on cs in one NCCL group:
// to_slices 1 sends each owner's whole unit (at whole_buf: acc, mom or master) out as every rank's
// slice of `slices` (shard_grads, m, the master weights); 0 gathers the slices back into the owner's
// whole unit. A rank sends the elements muon_plan_init counts as MUON_EXTRA_WIRE (each way).
static void muon_owned_slices(DeviceMuonOwned* o, const ShardLayout* l, float* whole_buf, float* slices, int to_slices,
                              int lo, int hi, ncclComm_t shard, cudaStream_t cs) {
    int S = o->plan.S, me = o->plan.me;
    ncclCheck(ncclGroupStart());
    for (int u = 0; u < l->num_units; u++) {
        const ShardUnit* unit = &l->units[u];
        int owner = o->plan.owner[u];
        if (owner < 0 || unit->layer < lo || unit->layer >= hi) { continue; }
        for (int r = 0; r < S; r++) {
            size_t first, n = unit_owned(unit, r, &first);
            if (n == 0 || (me != owner && me != r)) { continue; }
            float* w = me == owner ? whole_buf + o->plan.at[u] + first : NULL;
            float* mine = slices + unit->shard_offset;
            if (r == owner) { // the owner's own slice
                cudaCheck(cudaMemcpyAsync(to_slices ? mine : w, to_slices ? w : mine, n * sizeof(float),
                                          cudaMemcpyDeviceToDevice, cs));
            } else if (me == owner) {
                ncclCheck(to_slices ? ncclSend(w, n, ncclFloat, r, shard, cs) : ncclRecv(w, n, ncclFloat, r, shard, cs));
            } else {
                ncclCheck(to_slices ? ncclRecv(mine, n, ncclFloat, owner, shard, cs)
                                    : ncclSend(mine, n, ncclFloat, owner, shard, cs));
            }
        }
    }
    ncclCheck(ncclGroupEnd());
}

// The owned units' slices of a shard-layout array set to 0 on cs (shard_grads: their gradients live in acc).
static void muon_owned_zero_slices(const DeviceMuonOwned* o, const ShardLayout* l, float* slices, cudaStream_t cs) {
    for (int u = 0; u < l->num_units; u++) {
        if (o->plan.owner[u] < 0) { continue; }
        cudaCheck(cudaMemsetAsync(slices + l->units[u].shard_offset, 0, l->units[u].slice * sizeof(float), cs));
    }
}

#endif
