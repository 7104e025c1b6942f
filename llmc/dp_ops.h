// What the shared training loop (llmc/train_loop.h) asks of the data-parallel layer, through the
// layer's own state `ctx` (a HostDP of llmc/dp_host.h, a DeviceDP of llmc/dp_device.cuh): finishing
// a step's gradient reduction, the update of the owned elements and the checkpoint arrays. Filled
// by host_dp_ops / dev_dp_ops; the trainer only hands the table over, so the loop reaches the layer
// without passing through the trainer. The replica sync above it has its own table
// (llmc/replica_ops.h).
#ifndef LLMC_DP_OPS_H
#define LLMC_DP_OPS_H

#include <stdint.h>
#include "optimizer.h"
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
} DataParallelOps;

#endif
