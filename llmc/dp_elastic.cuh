// Elastic replicas on the GPU (-le 1, with -ls H and -pi tcp or fs): when a collective that spans the
// replicas fails (NCCL reports a lost peer, or it stays unfinished past -wt), the ranks that saw it
// agree through rank 0 which replicas are left (llmc/membership.h), shrink the world and replica
// communicators to them with NCCL_SHRINK_ABORT (the stuck collective is abandoned), and redo what
// failed on the survivors. The survivors' live counts (replicas R', ranks W', this replica's index
// among them) replace R and W in the means. A rank whose own replica is lost, or that learns that
// the replica holding world rank 0 is lost, stops with one line naming why. docs/distributed.md,
// "Elastic replicas".
#ifndef LLMC_DP_ELASTIC_CUH
#define LLMC_DP_ELASTIC_CUH

#include "utils.h"
#include "args.h"
#include "mesh.h"
#include "membership.h"
#include "dp_device_link.cuh"

typedef struct {
    int on;                    // -le 1
    int min_replicas;          // -lm
    int sync_steps;            // -lss: steps 1..sync_steps are synchronous (no replica can drop there)
    Membership mb;             // the agreement through rank 0 (its alive[]: the replicas training)
    int live_R, live_W;        // replicas and ranks still training
    int live_me;               // this rank's replica among them (its rank in the replica communicator)
    int changes;               // agreements that dropped or admitted a replica
    uint32_t waits_done;       // elastic waits ended well since the last agreement or admission: with the
                               // step, where this rank is (a collective can end on some ranks only)
    char note[1536];           // the last one, for the logs: "replica k lost at step s: why"
    int32_t* scratch;          // device: R + W ints (which replicas rejoin, padded), then an NCCL id
} Elastic;

// The live counts from the replicas alive (S ranks each): R', W', this replica's place among them.
static void elastic_live(Elastic* e, const Mesh* mesh) {
    e->live_R = 0;
    e->live_me = 0;
    for (int q = 0; q < mesh->dp_replicate; q++) {
        e->live_R += e->mb.alive[q];
        if (q < mesh->replicate_idx) { e->live_me += e->mb.alive[q]; }
    }
    e->live_W = e->live_R * mesh->dp_shard;
}

// join: where this rank rejoined a running job (llmc/rendezvous.h; step -1 or NULL: it did not).
static void elastic_init(Elastic* e, const TrainArgs* a, const Rendezvous* rdv, const Mesh* mesh, const RdvJoin* join) {
    memset(e, 0, sizeof(*e));
    e->on = a->elastic;
    e->live_R = mesh->dp_replicate;
    e->live_W = mesh->world;
    e->live_me = mesh->replicate_idx;
    if (!e->on) { return; }
    if (mesh->dp_replicate < 2) { fail("-le 1: needs at least 2 replicas (world %d, -ds %d)", mesh->world, mesh->dp_shard); }
    if (a->min_replicas > mesh->dp_replicate) {
        fail("-lm %d: more than the %d replicas there are", a->min_replicas, mesh->dp_replicate);
    }
    e->min_replicas = a->min_replicas;
    e->sync_steps = a->outer.start;
    membership_init(&e->mb, rdv, a->server_ip, a->server_port, strcmp(a->init_method, "fs") == 0 ? a->init_path : NULL,
                    mesh->dp_replicate, mesh->dp_shard, a->peer_wait);
    cudaCheck(cudaMalloc((void**)&e->scratch, (mesh->dp_replicate + mesh->world) * sizeof(int32_t) + sizeof(ncclUniqueId)));
    if (join && (join->step >= 0 || join->partial)) { // a rejoin, or (-lw) a start without some replicas
        memcpy(e->mb.alive, join->alive, (size_t)mesh->dp_replicate);
        e->mb.epoch = join->epoch;
        elastic_live(e, mesh);
    }
}

static void elastic_free(Elastic* e) {
    if (!e->on) { return; }
    membership_free(&e->mb);
    cudaCheck(cudaFree(e->scratch));
}

// The communicators that span the replicas: their errors are the elastic waits' (device_wait.cuh).
static void elastic_watch(Elastic* e, DeviceLink* k) {
    if (!e->on) { return; }
    elastic_comms[0] = k->world;
    elastic_comms[1] = k->replica;
}

// Replaces old by c among the watched communicators.
static void elastic_rewatch(ncclComm_t old, ncclComm_t c) {
    for (int i = 0; i < num_watched_comms; i++) {
        if (watched_comms[i] == old) { watched_comms[i] = c; }
    }
}

// comm (its members in the order of the replicas still alive, S ranks each where per_replica is
// 0, one each where 1) shrunk to the kept replicas; the old one aborted.
static ncclComm_t elastic_shrink(ncclComm_t comm, const uint8_t* was, const uint8_t* kept, int R, int S,
                                 int per_replica) {
    int* gone = (int*)malloc_check((size_t)R * S * sizeof(int));
    int n = 0, at = 0;
    for (int q = 0; q < R; q++) {
        if (!was[q]) { continue; }
        for (int s = 0; s < (per_replica ? 1 : S); s++, at++) {
            if (!kept[q]) { gone[n++] = at; }
        }
    }
    ncclComm_t c = NULL;
    char src[96];
    ncclResult_t r = ncclCommShrink(comm, gone, n, &c, NULL, NCCL_SHRINK_ABORT); // (nonblocking, as comm)
    if (r == ncclInProgress) { r = nccl_settle(c, wait_limit_s(src, sizeof(src))); }
    nccl_check(r, "ncclCommShrink", __FILE__, __LINE__);
    free(gone);
    elastic_rewatch(comm, c);
    ncclCommAbort(comm);
    return c;
}

// A replica-spanning wait failed (why): this rank's own replica lost a rank (shard_failed), or the
// survivors agree who is left and shrink k's communicators to them. Fails where this rank cannot
// go on; otherwise the live counts and note follow.
static void elastic_recover(Elastic* e, DeviceLink* k, const Mesh* mesh, const char* why, int shard_failed) {
    int step = (int)preempt_step, R = mesh->dp_replicate, S = mesh->dp_shard;
    if (shard_failed) { fail("%s: a rank of this replica (%d) is lost, so it stops; the other replicas train on", why, mesh->replicate_idx); }
    if (step <= e->sync_steps) { // every replica's gradient is in this step's update: none can be dropped
        fail("%s: a replica was lost in step %d, one of the -lss %d synchronous steps, which need every replica; the "
             "run stops (resume with -y 1)", why, step, e->sync_steps);
    }
    uint8_t* was = (uint8_t*)malloc_check((size_t)R);
    uint8_t* kept = (uint8_t*)malloc_check((size_t)R);
    memcpy(was, e->mb.alive, (size_t)R);
    char asked[256], said[1024];
    snprintf(said, sizeof(said), "%s", why);
    uint32_t at = e->waits_done;
    e->waits_done = 0; // every survivor, from this agreement on
    if (membership_agree(&e->mb, step, at, kept, asked, sizeof(asked))) {
        // rank 0 cannot be asked: its replica is the one taken as lost (where another is lost too, the
        // shrink below fails); the survivors write a checkpoint and stop (llmc/train_loop.h)
        if (mesh->replicate_idx == 0) { fail("%s; asking rank 0 which replicas are left: %s", why, asked); }
        memcpy(kept, was, (size_t)R);
        kept[0] = 0;
        membership_take(&e->mb, kept);
        snprintf(said, sizeof(said), "%s; rank 0 cannot be asked which replicas are left (%s)", why, asked);
    }
    if (!kept[mesh->replicate_idx]) {
        fail("%s: rank 0 says this rank's replica %d is lost (one of its ranks did not report within -wt, or reported "
             "from another point of the run than rank 0's), so it stops", why, mesh->replicate_idx);
    }
    int lost = -1, left = 0;
    for (int q = 0; q < R; q++) {
        if (was[q] && !kept[q] && lost < 0) { lost = q; }
        left += kept[q];
    }
    if (lost < 0) { fail("%s: rank 0 counts every replica as alive, yet the collective failed", why); }
    snprintf(e->note, sizeof(e->note), "replica %d lost at step %d: %s", lost, step, said);
    k->world = elastic_shrink(k->world, was, kept, R, S, 0);
    k->replica = elastic_shrink(k->replica, was, kept, R, S, 1);
    elastic_watch(e, k);
    e->live_R = left;
    e->live_W = left * S;
    e->live_me = 0;
    for (int q = 0; q < mesh->replicate_idx; q++) { e->live_me += kept[q]; }
    e->changes++;
    free(was);
    free(kept);
}

// A wait ended on an NCCL error of `failed` or at its limit (why): where this rank's own replica
// lost a rank it stops, else the survivors recover (elastic_recover).
static void elastic_failed(Elastic* e, DeviceLink* k, const Mesh* mesh, const char* why, ncclComm_t failed) {
    ncclResult_t shard_error = ncclSuccess;
    if (k->shard) { ncclCheck(ncclCommGetAsyncError(k->shard, &shard_error)); }
    int own = failed == k->shard || (shard_error != ncclSuccess && shard_error != ncclInProgress);
    elastic_recover(e, k, mesh, why, own);
}

// Stream 0 up to now has run (the host waits on ev, recorded here); returns 1, or 0 after a failure
// of a replica-spanning collective was recovered from (elastic_recover): the caller redoes its work
// on the shrunk communicators.
static int elastic_wait(Elastic* e, DeviceLink* k, const Mesh* mesh, const char* what) {
    cudaCheck(cudaEventRecord(k->host_event, 0));
    char why[768];
    ncclComm_t failed = NULL;
    WaitEnd end = wait_event_until(k->host_event, what, 1, 1, &failed, why, sizeof(why));
    if (end == WAIT_DONE) {
        e->waits_done++;
        return 1;
    }
    elastic_failed(e, k, mesh, why, failed);
    return 0;
}

// The ints of the list of replicas rejoining: R, padded to a multiple of the W' ranks that
// all-reduce it (each rank's share the same, as the closed form of its bytes counts).
static int elastic_join_list(int R, int live_W) { return (R + live_W - 1) / live_W * live_W; }

// The replicas rejoining after the outer sync of `step` (joining, R bytes): rank 0 takes the ranks
// waiting on its port (membership_poll_joins); every rank of the world learns its list through one
// all-reduce of R ints (padded to a multiple of the W' ranks: elastic_join_list). Returns how many.
static int elastic_joining(Elastic* e, DeviceLink* k, const Mesh* mesh, int step, uint8_t* joining) {
    int R = mesh->dp_replicate, n = 0, count = elastic_join_list(R, e->live_W);
    int32_t* mask = (int32_t*)calloc_check((size_t)count, sizeof(int32_t));
    memset(joining, 0, (size_t)R);
    if (mesh->rank == 0) { membership_poll_joins(&e->mb, step, joining); }
    for (int q = 0; q < R; q++) { mask[q] = joining[q]; }
    cudaCheck(cudaMemcpy(e->scratch, mask, count * sizeof(int32_t), cudaMemcpyHostToDevice));
    device_link_order_on_main(k);
    ncclCheckOn(k->world, ncclAllReduce(e->scratch, e->scratch, count, ncclInt32, ncclSum, k->world, 0));
    wait_device(0, k->host_event, "the list of replicas rejoining (-le 1)");
    cudaCheck(cudaMemcpy(mask, e->scratch, R * sizeof(int32_t), cudaMemcpyDeviceToHost));
    for (int q = 0; q < R; q++) {
        joining[q] = mask[q] > 0;
        n += joining[q];
    }
    free(mask);
    return n;
}

// The grown world of the replicas training from here (rank 0's new id), nonblocking, and its shard
// (blocking) and replica splits, as device_link_init makes them, into now[3]: 1, or 0 with why where
// one failed or was not made in time (the world within -wt of rank 0's answer to the joining ranks,
// the splits within 10 x -wt: the joining ranks build their model first).
static int elastic_grow(Elastic* e, const Mesh* mesh, const ncclUniqueId* id, ncclComm_t* now, char* why, size_t len) {
    double wt = watchdog_timeout_s > 0.0 ? watchdog_timeout_s : peer_timeout_s();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&now[0], e->live_W, *id, e->live_me * mesh->dp_shard + mesh->shard_idx, &config);
    if (r == ncclInProgress) { r = nccl_settle(now[0], wt); }
    const char* what = "the grown world communicator";
    double limit = wt;
    if (r == ncclSuccess) {
        what = "its shard communicator";
        limit = 10.0 * wt;
        r = nccl_split_settled(now[0], mesh->replicate_idx, mesh->shard_idx, &now[1], 1, limit);
    }
    if (r == ncclSuccess) {
        what = "its replica communicator";
        r = nccl_split_settled(now[0], mesh->shard_idx, mesh->replicate_idx, &now[2], 0, limit);
    }
    if (r == ncclSuccess) { return 1; }
    if (r == ncclInProgress) {
        snprintf(why, len, "%s was not made within %g s", what, limit);
    } else {
        snprintf(why, len, "%s failed: NCCL %s", what, ncclGetErrorString(r));
    }
    return 0;
}

// Whether every survivor made its new communicators (grown: this rank's; the minimum over the
// survivors' world, which is whole: a collective ends on all or none of them).
static int elastic_all_grew(Elastic* e, DeviceLink* k, int grown) {
    int32_t v = grown;
    cudaCheck(cudaMemcpy(e->scratch, &v, sizeof(v), cudaMemcpyHostToDevice));
    device_link_order_on_main(k);
    ncclCheckOn(k->world, ncclAllReduce(e->scratch, e->scratch, 1, ncclInt32, ncclMin, k->world, 0));
    wait_device(0, k->host_event, "whether every survivor made the grown communicators (-le 1)");
    cudaCheck(cudaMemcpy(&v, e->scratch, sizeof(v), cudaMemcpyDeviceToHost));
    return v == 1;
}

// After the outer sync of `step`, with a replica missing: the replicas whose ranks wait on rank 0's
// port rejoin. Rank 0's new NCCL id reaches the survivors (a broadcast over the world) and the
// joining ranks (their rendezvous answer, membership_admit); every rank of the replicas training
// from here builds that grown world and splits it as device_link_init does, and the old
// communicators go. Returns how many replicas joined (the state they need: dev_dp_admit).
static int elastic_admit(Elastic* e, DeviceLink* k, const Mesh* mesh, int step) {
    int R = mesh->dp_replicate;
    if (!e->on || e->live_R == R) { return 0; }
    uint8_t* joining = (uint8_t*)malloc_check((size_t)R);
    int n = elastic_joining(e, k, mesh, step, joining);
    if (n == 0) {
        free(joining);
        return 0;
    }
    ncclUniqueId id;
    if (mesh->rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
    uint8_t* id_dev = (uint8_t*)(e->scratch + R + mesh->world);
    cudaCheck(cudaMemcpy(id_dev, &id, sizeof(id), cudaMemcpyHostToDevice));
    device_link_order_on_main(k);
    ncclCheckOn(k->world, ncclBroadcast(id_dev, id_dev, sizeof(id), ncclUint8, 0, k->world, 0));
    wait_device(0, k->host_event, "the grown world's NCCL id (-le 1)");
    cudaCheck(cudaMemcpy(&id, id_dev, sizeof(id), cudaMemcpyDeviceToHost));
    membership_admit(&e->mb, step, joining, &id, sizeof(id));
    int first = -1;
    for (int q = 0; q < R && first < 0; q++) { first = joining[q] ? q : -1; }
    elastic_live(e, mesh);
    ncclComm_t now[3] = {NULL, NULL, NULL};
    char why[256];
    int grown = elastic_grow(e, mesh, &id, now, why, sizeof(why));
    if (!elastic_all_grew(e, k, grown)) { // a joining rank died or hangs: the survivors go on as they were
        for (int i = 0; i < 3; i++) {
            if (now[i]) { ncclCommAbort(now[i]); }
        }
        membership_unadmit(&e->mb, joining);
        elastic_live(e, mesh);
        if (mesh->rank == 0) {
            printf("elastic: replica %d did not rejoin after the outer sync of step %d (%s); %d replicas train on\n",
                   first, step, grown ? "another survivor's new communicators failed" : why, e->live_R);
            fflush(stdout);
        }
        free(joining);
        return 0;
    }
    device_link_host_wait(k, "the collectives on the communicators being replaced (-le 1)"); // none in flight at their end
    ncclComm_t old[3] = {k->world, k->shard, k->replica};
    for (int i = 0; i < 3; i++) {
        elastic_rewatch(old[i], now[i]);
        nccl_destroy(old[i]);
    }
    k->world = now[0];
    k->shard = now[1];
    k->replica = now[2];
    elastic_watch(e, k);
    e->changes++;
    e->waits_done = 0; // as on the joining ranks, which start counting here
    snprintf(e->note, sizeof(e->note), "replica %d rejoined after the outer sync of step %d%s", first, step,
             n > 1 ? " (with others)" : "");
    free(joining);
    return n;
}

#endif
