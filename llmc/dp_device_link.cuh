// The data-parallel layer's device transport (the GPU trainer's): the NCCL communicators of the
// mesh (the world, the shard group, the replica group: ncclCommSplits of the world), the
// communication stream beside the default stream 0, the events that order them, and the rule that
// keeps NCCL from deadlocking. NCCL's collectives on different communicators must never overlap on
// a rank (its kernels block; two that run at once can deadlock the job: NCCL's "Using multiple NCCL
// communicators concurrently"), so every collective of a rank is ordered after all of its earlier
// ones, on every rank alike: one on stream 0 is issued after stream 0 waits for comm_done (the
// communication stream's last work, device_link_order_on_main), one on the communication stream
// after it waits for an event recorded on stream 0 (device_link_order_on_comm), and comm_done is
// recorded after every collective the communication stream runs. docs/distributed.md, "The order
// of collectives".
#ifndef LLMC_DP_DEVICE_LINK_CUH
#define LLMC_DP_DEVICE_LINK_CUH

#include "utils.h"
#include "cuda_common.cuh"
#include "mesh.h"
#include "nccl_setup.cuh"
#include "device_wait.cuh"

typedef struct {
    ncclComm_t world, shard, replica;
    cudaStream_t comm_stream;
    cudaEvent_t order;         // stream 0: recorded before the communication stream's next collective
    cudaEvent_t comm_done;     // communication stream: every collective and reduction queued so far
    cudaEvent_t slot_free[2];  // communication stream, stage 2: a layer slot was reduced and cleared
    cudaEvent_t host_event;    // for wait_device
    cudaEvent_t update_done;   // stream 0: the optimizer wrote this rank's slices
    cudaEvent_t* params_ready; // L + 1, communication stream: [0] wte, wpe, lnfw, lnfb, [1 + l] layer l gathered
} DeviceLink;

// The communicators of mesh (the world's split by replica and by shard index), the stream, the events.
static void device_link_init(DeviceLink* k, ncclComm_t world, const Mesh* mesh, int num_layers) {
    k->world = world;
    ncclCheck(ncclCommSplit(world, mesh->replicate_idx, mesh->shard_idx, &k->shard, NULL));
    ncclCheck(ncclCommSplit(world, mesh->shard_idx, mesh->replicate_idx, &k->replica, NULL));
    watch_comm(k->shard);
    watch_comm(k->replica);
    cudaCheck(cudaStreamCreateWithFlags(&k->comm_stream, cudaStreamNonBlocking));
    cudaEvent_t* events[] = {&k->order, &k->comm_done, &k->slot_free[0], &k->slot_free[1], &k->host_event,
                             &k->update_done};
    for (int i = 0; i < 6; i++) { cudaCheck(cudaEventCreateWithFlags(events[i], cudaEventDisableTiming)); }
    k->params_ready = (cudaEvent_t*)malloc_check((num_layers + 1) * sizeof(cudaEvent_t));
    for (int i = 0; i <= num_layers; i++) {
        cudaCheck(cudaEventCreateWithFlags(&k->params_ready[i], cudaEventDisableTiming));
    }
}

static void device_link_free(DeviceLink* k, int num_layers) {
    cudaEvent_t events[] = {k->order, k->comm_done, k->slot_free[0], k->slot_free[1], k->host_event, k->update_done};
    for (int i = 0; i < 6; i++) { cudaCheck(cudaEventDestroy(events[i])); }
    for (int i = 0; i <= num_layers; i++) { cudaCheck(cudaEventDestroy(k->params_ready[i])); }
    free(k->params_ready);
    cudaCheck(cudaStreamDestroy(k->comm_stream));
    ncclCheck(ncclCommDestroy(k->shard));
    ncclCheck(ncclCommDestroy(k->replica));
}

// Before a collective on stream 0: stream 0 waits for the communication stream's collectives.
static void device_link_order_on_main(DeviceLink* k) { cudaCheck(cudaStreamWaitEvent(0, k->comm_done, 0)); }

// Before a collective on the communication stream: it waits for stream 0's work so far (its
// collectives included).
static void device_link_order_on_comm(DeviceLink* k) {
    cudaCheck(cudaEventRecord(k->order, 0));
    cudaCheck(cudaStreamWaitEvent(k->comm_stream, k->order, 0));
}

// Stream 0 waits for everything issued on the communication stream so far (before the parameters are
// read other than by a forward).
static void device_link_comm_wait(DeviceLink* k) { cudaCheck(cudaStreamWaitEvent(0, k->comm_done, 0)); }

// The host waits, with the deadline and NCCL's error checks (wait_device), for every collective
// issued so far and stream 0's work: before a blocking copy of what they write.
static void device_link_host_wait(DeviceLink* k, const char* what) {
    device_link_comm_wait(k);
    wait_device(0, k->host_event, what);
}

// -op 1's bytes of a ring collective (llmc/op_events.cuh): what one of n ranks sends of a buffer of
// `bytes` (every rank's share): 2 (n - 1) / n of it in an all-reduce, (n - 1) / n in a
// reduce-scatter or all-gather.
static double ring_bytes(double bytes, int n, int all_reduce) {
    return n > 1 ? (all_reduce ? 2.0 : 1.0) * (n - 1) / n * bytes : 0.0;
}

#endif
