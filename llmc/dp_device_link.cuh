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
// The modelled link (-rb MB/s, tests): the replica exchanges' bytes occupy the communication stream
// for bytes / bandwidth from when it could start them (host clock, the host first catching up with
// stream 0; the emulator's collectives take no time of their own), each event recorded on that
// stream carries when the modelled stream reaches it, and stream 0's waits on such an event sleep
// until then: `waited` counts that time, the time stream 0 waits on replica exchanges (before /
// after the last step's syncs).
#ifndef LLMC_DP_DEVICE_LINK_CUH
#define LLMC_DP_DEVICE_LINK_CUH

#include "utils.h"
#include "cuda_common.cuh"
#include "mesh.h"
#include "nccl_setup.cuh"
#include "device_wait.cuh"
#include <time.h>

// An event of the communication stream, and when (host clock) the modelled link lets it pass (0: at once).
typedef struct {
    cudaEvent_t ev;
    double ready;
} CommEvent;

static void comm_event_create(CommEvent* e) {
    cudaCheck(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
    e->ready = 0.0;
}

typedef struct {
    ncclComm_t world, shard, replica;
    cudaStream_t comm_stream;
    cudaEvent_t order;         // stream 0: recorded before the communication stream's next collective
    cudaEvent_t host_event;    // for wait_device
    cudaEvent_t update_done;   // stream 0: the optimizer wrote this rank's slices
    CommEvent comm_done;       // communication stream: every collective and reduction queued so far
    CommEvent reduced;         // communication stream: the shard group's reductions queued so far (backward waits)
    CommEvent slot_free[2];    // communication stream, stage 2: a layer slot was reduced and cleared
    CommEvent* params_ready;   // L + 1, communication stream: [0] wte, wpe, lnfw, lnfb, [1 + l] layer l gathered
    float mbps;                // -rb: the modelled link's bandwidth in MB/s (0: off)
    double busy_until;         // -rb: when the communication stream's modelled link work ends
    double waited[2];          // -rb: seconds stream 0 waited on it, before / after the last step's syncs
    int after_last;            // the last step's syncs have begun
} DeviceLink;

// The communicators of mesh (the world's split by replica and by shard index), the stream, the
// events; mbps: -rb (0: no modelled link).
static void device_link_init(DeviceLink* k, ncclComm_t world, const Mesh* mesh, int num_layers, float mbps) {
    memset(k, 0, sizeof(*k));
    k->world = world;
    k->mbps = mbps;
    // the shard communicator blocking; the replica one as the world (-le 1: nonblocking)
    char src[96];
    double limit = wait_limit_s(src, sizeof(src));
    nccl_check(nccl_split_settled(world, mesh->replicate_idx, mesh->shard_idx, &k->shard, 1, limit),
               "ncclCommSplit (the shard communicator)", __FILE__, __LINE__);
    nccl_check(nccl_split_settled(world, mesh->shard_idx, mesh->replicate_idx, &k->replica, 0, limit),
               "ncclCommSplit (the replica communicator)", __FILE__, __LINE__);
    watch_comm(k->shard);
    watch_comm(k->replica);
    cudaCheck(cudaStreamCreateWithFlags(&k->comm_stream, cudaStreamNonBlocking));
    cudaEvent_t* events[] = {&k->order, &k->host_event, &k->update_done};
    for (int i = 0; i < 3; i++) { cudaCheck(cudaEventCreateWithFlags(events[i], cudaEventDisableTiming)); }
    comm_event_create(&k->comm_done);
    comm_event_create(&k->reduced);
    comm_event_create(&k->slot_free[0]);
    comm_event_create(&k->slot_free[1]);
    k->params_ready = (CommEvent*)malloc_check((num_layers + 1) * sizeof(CommEvent));
    for (int i = 0; i <= num_layers; i++) { comm_event_create(&k->params_ready[i]); }
}

static void device_link_free(DeviceLink* k, int num_layers) {
    cudaEvent_t events[] = {k->order, k->host_event, k->update_done, k->comm_done.ev, k->reduced.ev, k->slot_free[0].ev,
                            k->slot_free[1].ev};
    for (int i = 0; i < 7; i++) { cudaCheck(cudaEventDestroy(events[i])); }
    for (int i = 0; i <= num_layers; i++) { cudaCheck(cudaEventDestroy(k->params_ready[i].ev)); }
    free(k->params_ready);
    cudaCheck(cudaStreamDestroy(k->comm_stream));
    nccl_destroy(k->shard);
    nccl_destroy(k->replica);
}

// -rb: the host catches up with stream 0 (the emulator runs queued stream work when the host waits
// for it; a GPU runs ahead of the host): from here on the host clock is stream 0's.
static void device_link_catch_up(DeviceLink* k) { wait_device(0, k->host_event, "stream 0 (the modelled link, -rb)"); }

// -rb: the communication stream's next `bytes` cross the modelled link, from when it could start
// them (after stream 0's work so far, which it waits for: the order of collectives).
static void device_link_carry(DeviceLink* k, double bytes) {
    if (k->mbps <= 0.0f) { return; }
    device_link_catch_up(k);
    double now = now_seconds(), start = k->busy_until > now ? k->busy_until : now;
    k->busy_until = start + bytes / ((double)k->mbps * 1e6);
}

// e recorded on the communication stream (behind the modelled link's work queued so far).
static void device_link_record(DeviceLink* k, CommEvent* e) {
    cudaCheck(cudaEventRecord(e->ev, k->comm_stream));
    e->ready = k->busy_until;
}

// Stream 0 waits for e; with -rb, once stream 0 has reached this point, until the modelled link lets
// it pass, the time counted in waited.
static void device_link_wait(DeviceLink* k, const CommEvent* e) {
    if (k->mbps > 0.0f && e->ready > 0.0) {
        device_link_catch_up(k);
        double now = now_seconds();
        if (e->ready > now) {
            double s = e->ready - now;
            struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
            nanosleep(&ts, NULL);
            k->waited[k->after_last] += now_seconds() - now;
        }
    }
    cudaCheck(cudaStreamWaitEvent(0, e->ev, 0));
}

// Before a collective on stream 0: stream 0 waits for the communication stream's collectives.
static void device_link_order_on_main(DeviceLink* k) { device_link_wait(k, &k->comm_done); }

// Before a collective on the communication stream: it waits for stream 0's work so far (its
// collectives included).
static void device_link_order_on_comm(DeviceLink* k) {
    cudaCheck(cudaEventRecord(k->order, 0));
    cudaCheck(cudaStreamWaitEvent(k->comm_stream, k->order, 0));
}

// Stream 0 waits for everything issued on the communication stream so far (before the parameters are
// read other than by a forward).
static void device_link_comm_wait(DeviceLink* k) { device_link_wait(k, &k->comm_done); }

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
