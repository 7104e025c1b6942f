// The optimizer's settings, the same in both trainers: -opt (AdamW, or Muon on the block matrices
// with AdamW on the rest), the AdamW hyperparameters (beta1 0.9, beta2 0.95, eps 1e-8; decoupled
// weight decay on the 2D weight matrices only), Adam's bias corrections, Muon's (torch.optim.Muon's
// semantics: momentum, Newton-Schulz coefficients, the lr ratio of a matrix's shape), the
// learning-rate schedule built from the flags, and global-norm clipping. The update loops
// themselves are each trainer's own (llmc/cpu_optimizer.h on the CPU, a kernel on the GPU).
#ifndef LLMC_OPTIMIZER_H
#define LLMC_OPTIMIZER_H

#include <math.h>
#include <string.h>
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

typedef enum { OPT_ADAMW, OPT_MUON } OptimizerKind;
static const char* const optimizer_names[] = {"adamw", "muon"};

// Muon on a matrix W (A x B as stored, out x in) with its clipped gradient G and momentum M:
// M = mu M + (1 - mu) G; U = (1 - mu) G + mu M (Nesterov); O = NS(U): X = U / max(|U|_F, eps), its
// wide orientation (transposed when A > B), ns_steps times S = X X^T, X = a X + (b S + c S S) X;
// then W = W (1 - lr wd) - lr sqrt(max(1, A / B)) O.
typedef struct {
    float lr, momentum, weight_decay;
    float a, b, c, eps;
    int ns_steps;
    int split_qkv; // -mq 1: each layer's qkvw is three C x C matrices (q, k, v rows), not one 3C x C
} MuonConfig;
#define MUON_NS_STEPS 5

// The parameter tensors Muon updates: each layer's slice of qkvw, attprojw, fcw and fcprojw is one
// matrix; everything else (wte and the classifier it is, wpe, biases, LayerNorm) stays with AdamW.
static const int parameter_is_muon[NUM_PARAMETER_TENSORS] = {0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// The rows and columns of one matrix of tensor `tensor` (a Muon tensor): one a layer, but with
// split_qkv (-mq 1) qkvw's layer slice is three C x C matrices one after the other (its q, k, v rows).
static void muon_matrix_shape(const GPT2Config* c, int tensor, int split_qkv, int* rows, int* cols) {
    int C = c->channels;
#ifdef MUON_PLANT_QKV_WHOLE // test only: -mq 1 ignored, qkvw orthogonalized whole
    split_qkv = 0;
#endif
    *rows = tensor == 4 ? (split_qkv ? C : 3 * C) : tensor == 10 ? 4 * C : C; // qkvw (3C, C), fcw (4C, C)
    *cols = tensor == 12 ? 4 * C : C;                                           // fcprojw (C, 4C), attprojw (C, C)
}

// How many of those matrices one layer's slice of tensor `tensor` holds (3: qkvw with split_qkv).
static int muon_matrices_per_layer(const GPT2Config* c, int tensor, int split_qkv) {
    int rows, cols, whole_rows, whole_cols;
    muon_matrix_shape(c, tensor, split_qkv, &rows, &cols);
    muon_matrix_shape(c, tensor, 0, &whole_rows, &whole_cols);
    return (int)(((size_t)whole_rows * whole_cols) / ((size_t)rows * cols));
}

// sqrt(max(1, rows / cols)): the step of a tall matrix scaled up (torch.optim.Muon's "original").
static float muon_lr_ratio(int rows, int cols) { return rows > cols ? sqrtf((float)rows / (float)cols) : 1.0f; }

// The FLOPs of one Newton-Schulz orthogonalization of a rows x cols matrix (m = the smaller side,
// n the larger; per step X X^T 2 m m n, S S 2 m^3, (..) X 2 m m n).
static double muon_ns_flops(int rows, int cols, int ns_steps) {
    double m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
    return ns_steps * (4.0 * m * m * n + 2.0 * m * m * m);
}

// ZeRO 1, 2: which of the shard group's S ranks orthogonalizes each Muon matrix. units[u] is unit
// u's parameter tensor (-1: not a Muon matrix, owner -1); the matrices are dealt out largest first
// (by Newton-Schulz FLOPs, ties in unit order), each to the rank with the least work so far (ties:
// the lowest), so no rank has more than an even share plus one matrix. load[S]: each rank's FLOPs.
static void muon_owners(const int* units, int num_units, const GPT2Config* c, int ns_steps, int split_qkv, int S,
                        int* owner, double* load) {
    for (int s = 0; s < S; s++) { load[s] = 0.0; }
    for (int u = 0; u < num_units; u++) { owner[u] = -1; }
    for (;;) {
        int best = -1;
        double best_cost = 0.0;
        for (int u = 0; u < num_units; u++) {
            if (units[u] < 0 || owner[u] >= 0) { continue; }
            int rows, cols;
            muon_matrix_shape(c, units[u], split_qkv, &rows, &cols);
            double cost = muon_matrices_per_layer(c, units[u], split_qkv) * muon_ns_flops(rows, cols, ns_steps);
            if (best < 0 || cost > best_cost) { best = u, best_cost = cost; }
        }
        if (best < 0) { return; }
        int to = 0;
        for (int s = 1; s < S; s++) { to = load[s] < load[to] ? s : to; }
        owner[best] = to;
        load[to] += best_cost;
    }
}

typedef struct {
    OptimizerKind kind;
    AdamWConfig adamw; // every tensor (-opt adamw), or those Muon does not take
    MuonConfig muon;
} OptimizerConfig;

static OptimizerConfig optimizer_config_from_args(const TrainArgs* a) {
    OptimizerConfig o;
    memset(&o, 0, sizeof(o));
    o.kind = strcmp(a->optimizer, "muon") == 0 ? OPT_MUON : OPT_ADAMW;
    o.adamw = adamw_config_from_args(a);
    MuonConfig m = {a->muon_lr, a->muon_momentum, a->weight_decay, 3.4445f, -4.7750f, 2.0315f, 1e-7f, MUON_NS_STEPS,
                    a->muon_split_qkv};
    o.muon = m;
    return o;
}

// The start-up line (no newline): which tensors each optimizer takes and, with Muon, the
// Newton-Schulz work per step and this rank's share: mine matrices of mine_flops (mine < 0: all of
// them, ZeRO 0's; ZeRO 1, 2: its shard group's owners, the most any rank has most_flops).
static void optimizer_describe(const OptimizerConfig* o, const GPT2Config* c, size_t num_parameters, int zero_stage,
                               int mine, double mine_flops, double most_flops, char* out, size_t len) {
    if (o->kind == OPT_ADAMW) {
        snprintf(out, len, "optimizer: adamw on all %zu parameters", num_parameters);
        return;
    }
    size_t L = (size_t)c->num_layers, muon_params = 0;
    double flops = 0.0;
    int matrices = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!parameter_is_muon[i]) { continue; }
        int rows, cols, per = muon_matrices_per_layer(c, i, o->muon.split_qkv);
        muon_matrix_shape(c, i, o->muon.split_qkv, &rows, &cols);
        muon_params += L * per * rows * cols;
        flops += (double)(L * per) * muon_ns_flops(rows, cols, o->muon.ns_steps);
        matrices += (int)L * per;
    }
    if (mine < 0) { mine = matrices, mine_flops = most_flops = flops; }
    char share[160];
    if (zero_stage == 0) { snprintf(share, sizeof(share), "ZeRO 0: every rank all"); }
    else { snprintf(share, sizeof(share), "ZeRO %d: one owner a matrix, the busiest rank %.3g GFLOP", zero_stage,
                    most_flops * 1e-9); }
    snprintf(out, len, "optimizer: muon on %d matrices (%zu parameters, -ml %g -mm %g%s), adamw on the rest (%zu, -l %g); "
             "Newton-Schulz %.3g GFLOP per step, this rank %d matrices (%.3g GFLOP; %s)", matrices, muon_params,
             o->muon.lr, o->muon.momentum, o->muon.split_qkv ? " -mq 1: qkvw as q, k, v" : "",
             num_parameters - muon_params, o->adamw.lr, flops * 1e-9, mine, mine_flops * 1e-9, share);
}

// The learning rates at a step whose scheduled -l is lr: Muon's scaled alike (-ml times lr / -l).
static void optimizer_set_lr(OptimizerConfig* o, const TrainArgs* a, float lr) {
    o->adamw.lr = lr;
    o->muon.lr = a->lr > 0.0f ? a->muon_lr * (lr / a->lr) : 0.0f;
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
