// What the training loop's replica sync (llmc/replica_run.h) asks of a data-parallel backend's
// sync layer (the CPU trainer's llmc/replica_host.h, the GPU trainer's llmc/replica_device.cuh):
// how the gradients cross the replicas, the outer step, the replicas' checksums, and with -le 1
// the membership. The table is empty (every entry NULL) in a run without a replica sync (-ls 0
// and an fp32 link): the loop then never calls into it, and the ZeRO layer (llmc/dp_ops.h) is
// all there is.
#ifndef LLMC_REPLICA_OPS_H
#define LLMC_REPLICA_OPS_H

#include <stdint.h>
#include "outer_config.h"

typedef struct {
    void* ctx;
    // -ls: whether the next steps average their gradients over every rank (1, synchronous) or over
    // the replica's shard group only (0).
    void (*set_replica_reduce)(void* ctx, int every_step);
    // -ls 0 with -rq or -rk: how the next step's gradients cross the replicas (outer_config_at's).
    void (*set_gradient_wire)(void* ctx, const OuterConfig* c);
    // outer = this rank's owned local parameters, the outer momentum 0.
    void (*outer_init)(void* ctx);
    // The outer step call->phase of fragment call->fragment on this rank's owned elements
    // (llmc/outer_sync.h): its messages summed over the replicas, outer_update on each element, the
    // all-gather inside the replica. Returns 1 and the squared norm of the applied mean
    // pseudo-gradient in *sq (0 for OUTER_START), or 0 where every replica skipped the sync.
    int (*outer_step)(void* ctx, const OuterCall* call, float* sq);
    // The CRC-32C of this rank's owned outer (outer 1) or local (0) parameters on every replica:
    // crcs[r] from the rank of replica r with this shard index.
    void (*replica_crcs)(void* ctx, int outer, uint32_t* crcs);
    // -le 1 (NULL where there is none): the replicas still training, in *note the line of the
    // last one lost (NULL: none lost), in *alive (where not NULL) which (R bytes).
    int (*live_replicas)(void* ctx, const char** note, const uint8_t** alive);
    // -le 1 (NULL where there is none): after the outer sync of `step`, the replicas waiting to
    // rejoin are admitted and sent the outer state (returns how many); and, on a rank that rejoined,
    // receiving it (the local parameters become the outer ones, the optimizer's moments zero).
    int (*admit)(void* ctx, int step);
    void (*join)(void* ctx);
} ReplicaOps;

#endif
