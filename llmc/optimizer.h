// The optimizer's settings, the same in both trainers: the AdamW hyperparameters (beta1 0.9,
// beta2 0.95, eps 1e-8; decoupled weight decay on the 2D weight matrices only), Adam's bias
// corrections, the learning-rate schedule built from the flags, and global-norm clipping.
// The update loops themselves are each trainer's own (OpenMP on the CPU, a kernel on the GPU).
#ifndef LLMC_OPTIMIZER_H
#define LLMC_OPTIMIZER_H

#include <math.h>
#include "args.h"
#include "gpt2_model.h"
#include "schedulers.h"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
} AdamWConfig;

static AdamWConfig adamw_config_from_args(const TrainArgs* a) {
    AdamWConfig h = {a->lr, 0.9f, 0.95f, 1e-8f, a->weight_decay};
    return h;
}

// Adam's bias corrections 1 - beta^t for the 1-based step t: m_hat = m / bias1, v_hat = v / bias2.
static void adamw_bias_corrections(const AdamWConfig* h, int t, float* bias1, float* bias2) {
    *bias1 = 1.0f - powf(h->beta1, (float)t);
    *bias2 = 1.0f - powf(h->beta2, (float)t);
}

// The weight decay of parameter tensor `tensor`: matrices decay, biases, LayerNorm and others do not.
static float adamw_weight_decay(const AdamWConfig* h, int tensor) {
    return parameter_is_matrix[tensor] ? h->weight_decay : 0.0f;
}

// The factor the gradients are multiplied by so that their global norm is at most max_norm
// (max_norm <= 0: no clipping).
static float clip_scale(float norm, float max_norm) {
    return (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
}

static LRSchedule schedule_from_args(const TrainArgs* a, int max_steps) {
    LRSchedule s = {schedule_kind_from_name(a->schedule), a->lr, a->warmup, max_steps, a->final_fraction};
    return s;
}

#endif
