// The replica sync's state on one rank, shared by both trainers' data-parallel layer: the outer
// parameters and the outer momentum (-ls), the error-feedback residual (-rq/-rk with -ref 1), and
// the exchanges in flight (-lo): each fragment's held sum and the owned local values taken when
// its exchange started. All in the sync's order (llmc/dp_plan.h), fp32, in host
// memory (the CPU trainer) or device memory (the GPU trainer). The checkpoint part: which state
// file arrays (llmc/ckpt_state_file.h) a checkpoint of a step holds, and the CRC-32C the replica
// agreement check compares (llmc/outer_sync.h). Its elements are the plan's sync elements
// (plan.sync_owned, plan.sync_spans): AdamW's, or with ZeRO 0 and -ls this rank's ZeRO-1 slices.
#ifndef LLMC_OUTER_STATE_H
#define LLMC_OUTER_STATE_H

#include "dp_plan.h"
#include "ckpt_state_file.h"
#include "crc32c.h"

typedef struct {
    float* outer;     // -ls: the outer parameters (plan.sync_owned), else NULL
    float* momentum;  // -ls: the outer Nesterov momentum
    float* residual;  // -rq/-rk with error feedback: what encoding lost (sync elements, padded to R), else NULL
    float* held;      // -lo: each fragment's summed messages while in flight (packed, plan.held_off), else NULL
    float* snap;      // -lo: the local values when their fragment's exchange started
} OuterState;

// The state file's arrays beyond m, v and master, all host memory in the sync's order: the local
// parameters (-ls, local), the outer state (h: host copies or the state itself), and with exchanges
// in flight the snapshots and the held sums (held_owned: dp_plan_held_owned's owned order).
static void outer_state_arrays(StateArrays* a, const TrainState* s, const OuterState* h, float* local,
                               float* held_owned) {
    a->a[STATE_LOCAL] = s->has_local ? local : NULL;
    a->a[STATE_OUTER] = s->has_outer ? h->outer : NULL;
    a->a[STATE_OUTER_M] = s->has_outer ? h->momentum : NULL;
    a->a[STATE_RESIDUAL] = s->has_residual ? h->residual : NULL;
    a->a[STATE_PEND_SNAP] = s->has_pending ? h->snap : NULL;
    a->a[STATE_PEND_SUM] = s->has_pending ? held_owned : NULL;
}

// Where a resume may load them: the arrays of h that exist (host memory: the state itself, or host
// copies), local (plan.sync_owned floats of scratch) where h has an outer state, held_owned where it has
// snapshots (-lo).
static void outer_state_targets(StateArrays* a, const OuterState* h, float* local, float* held_owned) {
    a->a[STATE_LOCAL] = h->outer ? local : NULL;
    a->a[STATE_OUTER] = h->outer;
    a->a[STATE_OUTER_M] = h->momentum;
    a->a[STATE_RESIDUAL] = h->residual;
    a->a[STATE_PEND_SNAP] = h->snap;
    a->a[STATE_PEND_SUM] = h->snap ? held_owned : NULL;
}

// The CRC-32C of the outer parameters (every sync element, padding included), host memory.
static uint32_t outer_state_crc(const DpPlan* p, const float* outer) {
    return crc32c_update(0, outer, p->sync_owned * sizeof(float));
}

// The CRC-32C of the local parameters of the sync's elements, span by span (no padding): owned_order
// 1 reads them in the sync's order (host copies), 0 at their places in the parameters.
static uint32_t dp_plan_local_crc(const DpPlan* p, const float* values, int owned_order) {
    uint32_t crc = 0;
    for (int i = 0; i < p->num_sync_spans; i++) {
        const OwnedSpan* sp = &p->sync_spans[i];
        crc = crc32c_update(crc, values + (owned_order ? sp->owned_offset : sp->param_offset), sp->count * sizeof(float));
    }
    return crc;
}

#endif
