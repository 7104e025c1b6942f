// The outer synchronization of the replicas every H steps (-ls, DiLoCo), shared by both trainers:
// when it happens, the outer Nesterov step on one element, the pieces of a rank's owned elements,
// the check that the replicas agree, and its bytes. The trainers bring the collectives (through
// TrainerOps) and run the element step on their own memory (a loop, a kernel).
//
// Inside a replica (its dp_shard ranks) every step is today's: gradients reduced over the shard
// group, AdamW on the owned slices, the all-gather. Across replicas nothing travels between syncs.
// After step t with t > S and ((t - S) % H == 0 or t == the last step), on every owned element:
//   delta = outer - local;  delta = mean of delta over the replicas;
//   buf = momentum * buf + delta;  outer = outer - lr * (delta + momentum * buf);  local = outer
// (PyTorch's SGD with nesterov=True, dampening 0; -ol 1 -om 0: outer_plain_average). outer starts as the parameters after step S
// (-lss S; before step 1 when S = 0), buf as 0; AdamW's moments are never reset. Steps 1..S are
// synchronous (the gradients averaged over every rank, as with -ls 0). docs/distributed.md.
#ifndef LLMC_OUTER_SYNC_H
#define LLMC_OUTER_SYNC_H

#include <stdint.h>
#include "utils.h"
#include "mesh.h"
#include "crc32c.h"
#include "wire_format.h"
#include "outer_config.h"

#ifdef __CUDACC__
#define OUTER_HD __host__ __device__
#else
#define OUTER_HD
#endif


// Whether step t (1-based) trains each replica on its own (no gradient traffic across replicas).
static int outer_active(const OuterConfig* o, int t) { return o->every > 0 && t > o->start; }

static int outer_num_fragments(const OuterConfig* o) { return o->fragments > 1 ? o->fragments : 1; }

// -lf F: fragment f's offset in the window, floor(f * H / F) (0 for f = 0: plain -ls's syncs).
static int outer_fragment_offset(const OuterConfig* o, int f) {
    return (int)(((long long)f * o->every) / outer_num_fragments(o));
}

// Whether fragment f syncs after step t (1-based) of a run of last_step steps: t - S - offset_f a
// non-negative multiple of H, or the last step (every fragment then syncs, in order 0..F-1).
static int outer_fragment_due(const OuterConfig* o, int f, int t, int last_step) {
    if (!outer_active(o, t)) { return 0; }
    int d = t - o->start - outer_fragment_offset(o, f);
    return (d >= 0 && d % o->every == 0) || t == last_step;
}

// Whether an outer sync (of any fragment) follows step t (1-based) of a run of last_step steps.
static int outer_sync_due(const OuterConfig* o, int t, int last_step) {
    for (int f = 0; f < outer_num_fragments(o); f++) {
        if (outer_fragment_due(o, f, t, last_step)) { return 1; }
    }
    return 0;
}

// Whether the replicas hold the same parameters after step t (0 = before the first step): a
// synchronous step, a step after which every fragment syncs, or no -ls at all.
static int outer_in_agreement(const OuterConfig* o, int t, int last_step) {
    if (!outer_active(o, t)) { return 1; }
    for (int f = 0; f < outer_num_fragments(o); f++) {
        if (!outer_fragment_due(o, f, t, last_step)) { return 0; }
    }
    return 1;
}

// The fragment of a shard unit (llmc/mesh.h) under -lf F over L layers: layer l in fragment
// floor(l * F / L) (contiguous layers, sizes within one layer of each other); wte and wpe (tensors
// 0, 1) with fragment 0, which holds the first layer they feed; lnfw and lnfb with fragment F - 1,
// which holds the last layer they read.
static int outer_unit_fragment(const ShardUnit* u, int L, int F) {
    if (u->layer >= 0) { return (int)(((long long)u->layer * F) / L); }
    return u->tensor <= 1 ? 0 : F - 1;
}

// Steps since the window began (0 at a sync step, and while synchronous).
static int outer_window_position(const OuterConfig* o, int t) {
    return outer_active(o, t) ? (t - o->start) % o->every : 0;
}

// Whether the replica link is compressed (-rq other than fp32, or -rk).
static int outer_compressed(const OuterConfig* o) { return o->wire != WIRE_FP32 || o->topk > 0.0f; }

// Whether a run with these settings has a replica sync (-ls, or a compressed link across the
// replicas of a synchronous run): its backend's sync layer and ReplicaOps exist.
static int replica_sync_on(const OuterConfig* o) { return o->every > 0 || outer_compressed(o); }

// The config of the sync after step t: -rqs keeps fp32 and every value up to that step.
static OuterConfig outer_config_at(const OuterConfig* o, int t) {
    OuterConfig now = *o;
    if (t <= o->wire_start) {
        now.wire = WIRE_FP32;
        now.topk = 0.0f;
    }
    return now;
}

// Whether the run keeps an error-feedback residual (fp32, one per owned element): of the
// pseudo-gradients (-ls H), or of the gradients (-ls 0).
static int outer_has_residual(const OuterConfig* o) { return outer_compressed(o) && o->feedback; }

// What one replica sends of its message (owner 0), and what an owner sends of the sum (owner 1).
static WireSpec outer_wire_spec(const OuterConfig* o, int owner, int R) {
    WireSpec w = {o->wire, o->topk, owner ? R : 1};
    return w;
}

// -ol 1 -om 0 is plain averaging (outer = the mean of the replicas' local parameters): the
// replicas then send their local values instead of the pseudo-gradients (the same bytes) and the
// mean is formed directly, so that one replica is bitwise its synchronous run. Never with -rq other
// than fp32: the link then carries the pseudo-gradients (small values that quantize well).
static int outer_plain_average(const OuterConfig* o) {
    return o->lr == 1.0f && o->momentum == 0.0f && !outer_compressed(o);
}

// What a rank sends of one owned element: the pseudo-gradient outer - local, or (plain) local.
OUTER_HD static inline float outer_message(float outer, float local, int plain) { return plain ? local : outer - local; }

// The outer step of one owned element. sum: the messages summed over the R replicas; outer and
// buf updated in place; *delta receives the mean pseudo-gradient (for its norm); returns the new
// local value (= outer).
OUTER_HD static inline float outer_update(float* outer, float* buf, float sum, float inv_R, float lr, float momentum,
                                          int plain, float* delta) {
    if (plain) {
        float mean = sum * inv_R;
        *delta = *outer - mean;
        *outer = mean;
        return mean;
    }
    float d = sum * inv_R;
    float b = momentum * *buf + d;
    *buf = b;
    float o = *outer - lr * (d + momentum * b);
    *outer = o;
    *delta = d;
    return o;
}

// -lo: the local value after an overlapped sync: the new outer plus what the local steps since the
// exchange started added (local_now - local_at_start).
OUTER_HD static inline float outer_merge(float outer_new, float local_now, float local_at_start) {
    return outer_new + (local_now - local_at_start);
}

// A run of a rank's owned elements: parameters [param_offset, +count) are owned elements
// [owned_offset, +count) (the order of the AdamW state and of the outer state).
typedef struct {
    size_t param_offset, owned_offset, count;
} OwnedSpan;

// The owned spans of shard rank s: one span of everything in ZeRO 0, else one per unit
// (llmc/mesh.h; empty ones skipped). spans: room for layout->num_units; returns how many.
static int owned_spans(const ShardLayout* layout, int zero_stage, int s, size_t num_parameters, OwnedSpan* spans) {
    if (zero_stage == 0) {
        spans[0].param_offset = 0;
        spans[0].owned_offset = 0;
        spans[0].count = num_parameters;
        return 1;
    }
    int n = 0;
    for (int u = 0; u < layout->num_units; u++) {
        const ShardUnit* unit = &layout->units[u];
        size_t first;
        size_t count = unit_owned(unit, s, &first);
        if (count == 0) { continue; }
        spans[n].param_offset = unit->offset + first;
        spans[n].owned_offset = unit->shard_offset;
        spans[n].count = count;
        n++;
    }
    return n;
}

// The agreement check: crcs[r] is the CRC-32C the rank with this shard index in replica r
// computed of its owned slice of `what`. A mismatch ends the job naming the step and the ranks.
static void outer_check_agreement(const uint32_t* crcs, int R, const Mesh* mesh, int step, const char* what) {
    for (int r = 1; r < R; r++) {
        if (crcs[r] != crcs[0]) {
            int s = mesh->shard_idx, S = mesh->dp_shard;
            fail("step %d: the replicas disagree on %s: rank %d (replica %d) has CRC-32C %08x, rank %d (replica 0) "
                 "%08x; the job stops rather than train diverged replicas", step, what, r * S + s, r, crcs[r], s,
                 crcs[0]);
        }
    }
}

// A CRC-32C as two floats (16-bit halves, exact) for the float collectives, and back.
static void crc_to_floats(uint32_t crc, float* out) {
    out[0] = (float)(crc >> 16);
    out[1] = (float)(crc & 0xffffu);
}
static uint32_t crc_from_floats(const float* in) { return ((uint32_t)in[0] << 16) | (uint32_t)in[1]; }

// ----------------------------------------------------------------------------
// bytes (ring collectives, llmc/accounting.h): per outer sync and rank, the all-reduce of the
// owned pseudo-gradient over the R replicas, the all-gather of the CRC (2 floats) over them,
// and (ZeRO 1, 2) the pseudo-gradient norm's scalar over the shard group (beside the all-gather
// of the synchronized parameter slices inside the replica, which accounting.h adds). The owned
// elements are cut into R slices of ceil(owned / R); fp32 rings send 2 (R - 1) slices, and so do
// the compressed exchanges: R - 1 encoded slices out and R - 1 encoded sums back
// (llmc/wire_format.h's wire_spec_bytes of a slice, each; with -rk a sum keeps R times the values).

// The compressed exchange of `owned` elements over R replicas (also -ls 0's gradients).
static size_t outer_wire_bytes(size_t owned, const OuterConfig* o, int R) {
    if (R == 1) { return 0; }
    WireSpec mine = outer_wire_spec(o, 0, R), sum = outer_wire_spec(o, 1, R);
    size_t slice = ceil_div(owned, R);
    return (size_t)(R - 1) * (wire_spec_bytes(&mine, slice) + wire_spec_bytes(&sum, slice));
}

static size_t outer_sync_replica_bytes(size_t owned, const OuterConfig* o, int R) {
    if (R == 1) { return 0; }
    return outer_wire_bytes(owned, o, R) + (size_t)(R - 1) * 2 * 4;
}

// -lf: the owned elements of fragment f (ZeRO 0: its units; stages 1, 2: its units' slices,
// padding included), the same on every rank of the shard group.
static size_t outer_fragment_owned(const ShardLayout* layout, int zero_stage, int F, int f) {
    size_t n = 0;
    for (int u = 0; u < layout->num_units; u++) {
        const ShardUnit* unit = &layout->units[u];
        if (outer_unit_fragment(unit, layout->num_layers, F) == f) { n += zero_stage == 0 ? unit->size : unit->slice; }
    }
    return n;
}

// -lo: the bytes of the buffers that one fragment exchange of `count` owned elements over R replicas
// uses (train_gpt2.c's communication thread keeps them for the largest fragment): the fp32 scratch
// of a slice of ceil(count / R) (the ring's receive buffer; the compressed exchange's decoded
// slice), and with a compressed link (o: the format after -rqs) the R encoded slices sent and
// received and, with error feedback, the fragment's residual packed like its messages.
typedef struct {
    size_t tmp, sent, got, packed;
} OuterExchangeBuffers;

static OuterExchangeBuffers outer_exchange_buffers(const OuterConfig* o, int R, size_t count) {
    size_t slice = ceil_div(count, R);
    OuterExchangeBuffers b = {slice * 4, 0, 0, 0};
    if (!outer_compressed(o)) { return b; }
    WireSpec mine = outer_wire_spec(o, 0, R), sum = outer_wire_spec(o, 1, R);
    size_t sb = wire_spec_bytes(&mine, slice), ob = wire_spec_bytes(&sum, slice);
    b.sent = (size_t)R * (sb > ob ? sb : ob);
    b.got = (size_t)R * sb;
    b.packed = o->feedback ? (size_t)R * slice * 4 : 0;
    return b;
}

// The finiteness flag of a sync: one float all-reduced over every rank (a ring of W slots) before the
// exchange, so that every replica skips a sync whose pseudo-gradients are not finite somewhere.
static size_t outer_sync_flag_bytes(int W) { return 2 * (size_t)(W - 1) * 4; }

static size_t outer_sync_shard_bytes(int zero_stage, int S) {
    return zero_stage == 0 ? 0 : 2 * (size_t)(S - 1) * 4;
}

#endif
