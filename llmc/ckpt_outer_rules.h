// The replica sync's rules of a resume (-ls, -lss, -rq, -rk, -rqs, -lf, -lo; docs/checkpoints.md):
// which checkpoints a run with its settings may resume, and on which layouts: the same -ls and -lss
// (a checkpoint of synchronous training also serves a run whose windows start later), the same
// link, -lf and (with exchanges in flight) -lo; another layout only with the same dp_replicate
// (each replica has its own local parameters and residual) and where the replicas agreed.
#ifndef LLMC_CKPT_OUTER_RULES_H
#define LLMC_CKPT_OUTER_RULES_H

#include "ckpt_state_file.h"

// The -ls rules of a resume (rank 0's header `old` of checkpoint `path`): the same -ls and -lss
// (a checkpoint of synchronous training also serves a run whose windows start later) and the same
// -rq, -rk, -rqs; another layout only with the same dp_replicate (with -ls or a residual) and where
// the replicas agreed (-ls).
static void state_check_outer(const char* path, const TrainState* old, const StateTarget* t, int same_layout) {
    int old_R = old->world / old->dp_shard, R = t->world / t->dp_shard;
    const OuterConfig *was = &old->outer, *now = t->outer;
    if (was->every != now->every || was->start != now->start) {
        int from_sync = was->every == 0 && old->step <= now->start;
        if (!from_sync) {
            fail("%s: written with -ls %d -lss %d at step %d; this run has -ls %d -lss %d (resume with the same, or "
                 "a checkpoint of synchronous training with -lss at or after its step)", path, was->every,
                 was->start, old->step, now->every, now->start);
        }
    }
    if (was->wire != now->wire || was->wire_start != now->wire_start || old->has_residual != t->has_residual ||
        was->topk != now->topk) {
        fail("%s: written with -rq %s -rk %g -rqs %d and %s residual; this run has -rq %s -rk %g -rqs %d and %s "
             "(resume with the same)", path, wire_format_names[(unsigned)was->wire % WIRE_FORMATS], was->topk,
             was->wire_start, old->has_residual ? "a" : "no", wire_format_names[(unsigned)now->wire % WIRE_FORMATS],
             now->topk, now->wire_start, t->has_residual ? "one" : "none");
    }
    int old_F = was->fragments > 1 ? was->fragments : 1, F = now->fragments > 1 ? now->fragments : 1;
    if (was->every > 0 && old_F != F) {
        fail("%s: written with -lf %d; this run has -lf %d (resume with the same)", path, old_F, F);
    }
    if (old->has_pending && was->overlap != now->overlap) {
        fail("%s: written with -lo %d and exchanges in flight at step %d; this run has -lo %d (resume with the same)",
             path, was->overlap, old->step, now->overlap);
    }
    if (old->has_pending && !same_layout) {
        fail("%s: step %d has -lo exchanges in flight: it resumes only on its own layout (%d ranks, -ds %d, -z %d)",
             path, old->step, old->world, old->dp_shard, old->zero_stage);
    }
    if (same_layout || (was->every == 0 && !old->has_residual)) { return; }
    if (old_R != R) { // each replica has its own local parameters (-ls) or residual (-rq, -rk)
        fail("%s: written by %d replicas (-ls %d -rq %s -rk %g); a resume on another layout needs the same "
             "dp_replicate, this run has %d", path, old_R, was->every,
             wire_format_names[(unsigned)was->wire % WIRE_FORMATS], was->topk, R);
    }
    if (was->every > 0 && !old->in_agreement) {
        fail("%s: step %d is inside an -ls window (the replicas differ): it resumes only on its own layout (%d ranks, "
             "-ds %d, -z %d)", path, old->step, old->world, old->dp_shard, old->zero_stage);
    }
}

#endif
