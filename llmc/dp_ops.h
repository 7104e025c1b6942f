// What the shared training loop (llmc/train_loop.h) asks of the data-parallel layer, through the
// layer's own state `ctx` (a HostDP of llmc/dp_host.h, a DeviceDP of llmc/dp_device.cuh): finishing
// a step's gradient reduction, the update of the owned elements, the checkpoint arrays, and the
// replica sync (-ls). Filled by host_dp_ops / dev_dp_ops; the trainer only hands the table over, so
// the loop reaches the layer without passing through the trainer.
#ifndef LLMC_DP_OPS_H
#define LLMC_DP_OPS_H

#include <stdint.h>
#include "optimizer.h"
#include "outer_config.h"
#include "ckpt_state_file.h"

typedef struct {
    void* ctx;
    // After the last micro-step: the reduction finished across the ranks; returns the global
    // gradient norm (the replica's between -ls syncs).
    float (*reduce_gradients)(void* ctx);
    // The optimizer (AdamW, or -opt muon) at the 1-based step t on what this rank owns (gradients
    // times grad_scale), then the parameter all-gather of ZeRO 1 and 2.
    void (*update)(void* ctx, const OptimizerConfig* o, float grad_scale, int t);
    // This rank's state file (m, v, master, and the replica sync's arrays), and loading it from
    // checkpoint `step` of dir (any layout: llmc/ckpt_layout.h).
    void (*write_state)(void* ctx, const char* path, const TrainState* s);
    void (*read_state)(void* ctx, const char* dir, int step, const StateTarget* target, TrainState* got);
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
    // receiving it (the local parameters become the outer ones, AdamW's moments zero).
    int (*admit)(void* ctx, int step);
    void (*join)(void* ctx);
} DataParallelOps;

#endif
