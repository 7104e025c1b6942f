// Muon's matrices owned whole under the GPU trainer's ZeRO 1 and 2 (docs/design.md, "Muon with
// shards"): each layer's block matrices belong to one rank of the shard group (muon_owners, dealt
// out by their Newton-Schulz FLOPs), which alone keeps their reduced fp32 gradient, momentum and
// (BF16 with master weights) fp32 master weights, whole, and orthogonalizes them. In place of such a
// unit's reduce-scatter its gradient is reduced to the owner (ncclReduce), in place of its parameter
// all-gather the owner broadcasts the stepped matrix (ncclBroadcast): a ring moves the same (S - 1)
// n elements either way, so the step's bytes are AdamW's. The state files keep AdamW's sliced
// layout: a write first scatters the owners' whole buffers into every rank's slices of m and the
// master weights, a read gathers the slices back to the owners.
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
#include "accounting.h"
#include "dp_device_link.cuh"

typedef struct {
    int* owner;            // each unit's owner in the shard group (-1: not a Muon matrix)
    size_t* at;            // where a unit this rank owns starts in the whole buffers (SIZE_MAX: not its)
    size_t elements;       // the elements of the units this rank owns
    float* acc;            // their gradients reduced over the shard group (fp32; micro-steps, replicas summed in)
    // R > 1 replicas: one all-reduce across them of `pack` (padded to R): the shard's slices of the
    // other units (copied in and out, runs of consecutive units: run_at, run_n), then acc itself
    float* pack;
    size_t pack_elements, num_runs, *run_at, *run_n;
    float* mom;            // their momentum
    float* master;         // their fp32 master weights (NULL: none kept)
    floatX* recv;          // where a reduce lands (floatX) before it is added into acc
    float* whole;          // a checkpoint's one unit, padded to S slices (fp32)
    float* scratch;        // the norm's: NORM_BLOCKS floats, then the sum
    int mine;              // the matrices this rank orthogonalizes (-mq 1: a qkvw counts 3)
    double mine_flops, most_flops; // their Newton-Schulz FLOPs, and the busiest rank's
    long long bytes_delta; // this rank's bytes sent per step beyond AdamW's reduce-scatters and all-gathers
} DeviceMuonOwned;

// The owners of layout l's units over a shard group of S ranks, this rank (me) its whole buffers;
// master: keep fp32 master weights, initialised from init (the model's fp32 values, parameter order).
static void muon_owned_init(DeviceMuonOwned* o, const ShardLayout* l, const GPT2Config* c, int split_qkv, int S, int me,
                            int R, int master, const float* init) {
    memset(o, 0, sizeof(*o));
    int* units = (int*)malloc_check(l->num_units * sizeof(int));
    double* load = (double*)calloc_check(S, sizeof(double));
    for (int u = 0; u < l->num_units; u++) { units[u] = parameter_is_muon[l->units[u].tensor] ? l->units[u].tensor : -1; }
    o->owner = (int*)malloc_check(l->num_units * sizeof(int));
    o->at = (size_t*)malloc_check(l->num_units * sizeof(size_t));
    muon_owners(units, l->num_units, c, MUON_NS_STEPS, split_qkv, S, o->owner, load);
    for (int u = 0; u < l->num_units; u++) {
        const ShardUnit* unit = &l->units[u];
        o->at[u] = SIZE_MAX;
        if (o->owner[u] < 0) { continue; }
        if (o->owner[u] == me) {
            o->at[u] = o->elements;
            o->elements += unit->size;
            o->mine += muon_matrices_per_layer(c, unit->tensor, split_qkv);
        }
        // a reduce: every rank but the owner sends the unit once; a broadcast: every rank but the
        // chain's last (the owner's predecessor); AdamW's reduce-scatter and all-gather: S - 1 slices each
        long long sent = (me != o->owner[u] ? 1 : 0) + (me != (o->owner[u] + S - 1) % S ? 1 : 0);
        o->bytes_delta += (long long)sizeof(floatX) *
                          (S > 1 ? sent * (long long)unit->size - 2 * (long long)(S - 1) * (long long)unit->slice : 0);
    }
    o->mine_flops = load[me];
    for (int s = 0; s < S; s++) { o->most_flops = fmax(o->most_flops, load[s]); }
    size_t n = o->elements > 0 ? o->elements : 1, others = 0;
    o->run_at = (size_t*)malloc_check(l->num_units * sizeof(size_t));
    o->run_n = (size_t*)malloc_check(l->num_units * sizeof(size_t));
    for (int u = 0; u < l->num_units;) {
        if (o->owner[u] >= 0) { u++; continue; }
        o->run_at[o->num_runs] = l->units[u].shard_offset;
        o->run_n[o->num_runs] = 0;
        for (; u < l->num_units && o->owner[u] < 0; u++) { o->run_n[o->num_runs] += l->units[u].slice; }
        others += o->run_n[o->num_runs++];
    }
    if (R > 1) { // AdamW's shard all-reduce replaced by the pack's: the bytes it sends beyond
        o->pack_elements = round_up(others + o->elements, R);
        o->pack = (float*)device_alloc(o->pack_elements * sizeof(float));
        cudaCheck(cudaMemset(o->pack, 0, o->pack_elements * sizeof(float)));
        o->acc = o->pack + others;
        o->bytes_delta += 4 * ((long long)ring_all_reduce_elements(o->pack_elements, R) -
                               (long long)ring_all_reduce_elements(round_up(l->shard_elements, R), R));
    } else {
        o->acc = (float*)device_alloc(n * sizeof(float));
    }
    o->mom = (float*)device_alloc(n * sizeof(float));
    o->recv = (floatX*)device_alloc(n * sizeof(floatX));
    o->whole = (float*)device_alloc(l->max_padded * sizeof(float));
    o->scratch = (float*)device_alloc((NORM_BLOCKS + 1) * sizeof(float));
    cudaCheck(cudaMemset(o->mom, 0, n * sizeof(float)));
    if (master && sizeof(floatX) != sizeof(float)) {
        o->master = (float*)device_alloc(n * sizeof(float));
        for (int u = 0; u < l->num_units; u++) {
            if (o->at[u] == SIZE_MAX) { continue; }
            cudaCheck(cudaMemcpy(o->master + o->at[u], init + l->units[u].offset, l->units[u].size * sizeof(float),
                                 cudaMemcpyHostToDevice));
        }
    }
    free(units);
    free(load);
}

static void muon_owned_free(DeviceMuonOwned* o) {
    void* bufs[] = {o->pack ? o->pack : o->acc, o->mom, o->master, o->recv, o->whole, o->scratch};
    for (int i = 0; i < 6; i++) { if (bufs[i]) { cudaCheck(cudaFree(bufs[i])); } }
    free(o->owner);
    free(o->at);
    free(o->run_at);
    free(o->run_n);
}

// Inside an open NCCL group on cs: unit u's gradient (floatX, whole on every rank) reduced to its
// owner's landing place.
static void muon_owned_reduce(DeviceMuonOwned* o, const ShardUnit* unit, int u, const floatX* grad, ncclComm_t shard,
                              cudaStream_t cs) {
    floatX* to = o->at[u] != SIZE_MAX ? o->recv + o->at[u] : NULL;
    ncclCheck(ncclReduce(grad, to, unit->size, ncclFloatX, ncclSum, o->owner[u], shard, cs));
}

// After the group: the owned units among units [first, first + count) added from their landing
// place into acc, each run of them (consecutive in the whole buffers) in one launch.
static void muon_owned_accumulate(DeviceMuonOwned* o, const ShardLayout* l, int first, int count, cudaStream_t cs) {
    for (int u = first; u < first + count;) {
        if (o->at[u] == SIZE_MAX) { u++; continue; }
        size_t start = o->at[u], n = 0;
        for (; u < first + count && o->at[u] == start + n; u++) { n += l->units[u].size; }
        accumulate(o->acc + start, o->recv + start, n, cs);
    }
}

// With R > 1 replicas, on cs inside the replica group's turn: the shard's other slices (from
// shard_grads) and the owned gradients summed over the replicas in one all-reduce. Returns its bytes.
static double muon_owned_replica_sum(DeviceMuonOwned* o, float* shard_grads, int R, ncclComm_t replica, cudaStream_t cs) {
    size_t k = 0;
    for (size_t r = 0; r < o->num_runs; k += o->run_n[r++]) {
        cudaCheck(cudaMemcpyAsync(o->pack + k, shard_grads + o->run_at[r], o->run_n[r] * sizeof(float),
                                  cudaMemcpyDeviceToDevice, cs));
    }
    ncclCheckOn(replica, ncclAllReduce(o->pack, o->pack, o->pack_elements, ncclFloat, ncclSum, replica, cs));
    k = 0;
    for (size_t r = 0; r < o->num_runs; k += o->run_n[r++]) {
        cudaCheck(cudaMemcpyAsync(shard_grads + o->run_at[r], o->pack + k, o->run_n[r] * sizeof(float),
                                  cudaMemcpyDeviceToDevice, cs));
    }
    return ring_bytes((double)o->pack_elements * sizeof(float), R, 1);
}

__global__ void muon_owned_add_kernel(float* __restrict__ out, const float* __restrict__ x) { out[0] += x[0]; }

// out[0] (a rank's partial squared gradient norm, on the device) += the owned gradients' squares.
static void muon_owned_norm(DeviceMuonOwned* o, float* out) {
    if (o->elements == 0) { return; }
    sum_of_squares(o->scratch + NORM_BLOCKS, o->acc, o->elements, o->scratch);
    muon_owned_add_kernel<<<1, 1>>>(out, o->scratch + NORM_BLOCKS);
    cudaLaunchCheck();
}

// Unit u's matrices stepped by Muon on its owner (stream 0): its whole fp32 gradient times grad_scale,
// each matrix's rounding bits those of its place in the whole tensor (seed_base + tensor, as ZeRO 0 draws them).
static void muon_owned_update(DeviceMuonOwned* o, DeviceMuon* work, const GPT2Config* c, const ShardUnit* unit, int u,
                              floatX* params, const MuonConfig* h, float grad_scale, uint32_t seed_base) {
    if (o->at[u] == SIZE_MAX) { return; }
    int rows, cols;
    muon_matrix_shape(c, unit->tensor, h->split_qkv, &rows, &cols);
    size_t per = (size_t)rows * cols, base = o->at[u];
    for (size_t at = 0; at < unit->size; at += per) {
        float* master = o->master ? o->master + base + at : NULL;
        OP_SPAN(OP_MUON, 0, muon_ns_flops(rows, cols, h->ns_steps), (double)per * (2.0 * sizeof(floatX) + 16.0),
                device_muon_update(work, params + unit->offset + at, master, o->acc + base + at, o->mom + base + at,
                                   rows, cols, grad_scale, h, seed_base + (uint32_t)unit->tensor,
                                   (size_t)unit->layer * unit->size + at));
    }
}

// A state file's sliced arrays and the owners' whole ones (stream 0; every rank of the shard group
// calls it, the caller waits): to_slices 1 broadcasts each owner's src (mom or master) and every rank
// copies its slice into slices (a state array in the shard layout); 0 all-gathers the slices and
// the owner keeps the whole unit in dst.
static void muon_owned_state(DeviceMuonOwned* o, const ShardLayout* l, int S, int me, float* whole_buf, float* slices,
                             int to_slices, ncclComm_t shard) {
    for (int u = 0; u < l->num_units; u++) {
        if (o->owner[u] < 0) { continue; }
        const ShardUnit* unit = &l->units[u];
        size_t first, n = unit_owned(unit, me, &first);
        if (to_slices) {
            const float* src = o->at[u] != SIZE_MAX ? whole_buf + o->at[u] : o->whole;
            if (S > 1) { ncclCheck(ncclBroadcast(src, o->whole, unit->size, ncclFloat, o->owner[u], shard, 0)); }
            else { cudaCheck(cudaMemcpyAsync(o->whole, src, unit->size * sizeof(float), cudaMemcpyDeviceToDevice, 0)); }
            cudaCheck(cudaMemcpyAsync(slices + unit->shard_offset, o->whole + first, n * sizeof(float),
                                      cudaMemcpyDeviceToDevice, 0));
        } else {
            float* mine = o->whole + (size_t)me * unit->slice;
            cudaCheck(cudaMemcpyAsync(mine, slices + unit->shard_offset, n * sizeof(float), cudaMemcpyDeviceToDevice, 0));
            cudaCheck(cudaMemsetAsync(mine + n, 0, (unit->slice - n) * sizeof(float), 0));
            if (S > 1) { ncclCheck(ncclAllGather(mine, o->whole, unit->slice, ncclFloat, shard, 0)); }
            if (o->at[u] != SIZE_MAX) {
                cudaCheck(cudaMemcpyAsync(whole_buf + o->at[u], o->whole, unit->size * sizeof(float),
                                          cudaMemcpyDeviceToDevice, 0));
            }
        }
    }
}

#endif
