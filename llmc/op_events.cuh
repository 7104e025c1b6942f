// -op 1 in the GPU trainer: op families' device times from CUDA events (the families, the table and
// the metrics.jsonl record are llmc/op_profile.h's). A span is a pair of events recorded around calls
// on the stream that runs them (OP_SPAN). Stream 0's spans (compute, its collectives, and its waits
// for the communication stream, which count as communication) follow one another on that stream, so
// they add up to no more than its time; the communication stream's spans overlap them and are summed
// beside the rows (op_profile.side_seconds). A step's events are read at the next step's end, after
// that step's last host wait, so they have all completed (the last step's at the end of the run):
// no synchronisation is added inside a step. Spans are kept and their events reused from step to
// step. With -op 0, or outside a step (validation, sampling), OP_SPAN costs one branch and records
// nothing.
#ifndef LLMC_OP_EVENTS_CUH
#define LLMC_OP_EVENTS_CUH

#include "op_profile.h"
#include "cuda_common.cuh"

typedef struct {
    cudaEvent_t begin, end;
    cudaStream_t stream;
    OpFamily family;
    double flops, bytes;
} OpSpan;

typedef struct {
    OpSpan* spans; // n recorded this step, cap with events created
    int n, cap;
    int timed;     // the step counts in the average step time
} OpSpanList;

typedef struct {
    OpSpanList lists[2]; // [cur] this step's spans, [cur ^ 1] the last step's
    int cur;
    int open;            // a span is open: a span inside it would count its time twice
} OpEvents;

static OpEvents op_events;

static OpSpan* op_span_slot(OpSpanList* l) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        l->spans = (OpSpan*)realloc(l->spans, (size_t)cap * sizeof(OpSpan));
        if (!l->spans) { fail("op profile: out of memory for %d event pairs", cap); }
        for (int i = l->cap; i < cap; i++) {
            cudaCheck(cudaEventCreate(&l->spans[i].begin));
            cudaCheck(cudaEventCreate(&l->spans[i].end));
        }
        l->cap = cap;
    }
    return &l->spans[l->n++];
}

// Opens a span of family on stream: its begin event; -1 (nothing recorded) unless -op 1 in a step.
static int op_span_begin(OpFamily family, cudaStream_t stream) {
    if (!op_profile.on || !op_profile.in_step) { return -1; }
    if (op_events.open) { fail("op profile: a timed op inside another one (its time would count twice)"); }
    op_events.open = 1;
    OpSpanList* l = &op_events.lists[op_events.cur];
    OpSpan* s = op_span_slot(l);
    s->stream = stream;
    s->family = family;
    cudaCheck(cudaEventRecord(s->begin, stream));
    return l->n - 1;
}

// Closes span i (op_span_begin's answer) with its FLOPs and bytes.
static void op_span_end(int i, double flops, double bytes) {
    if (i < 0) { return; }
    OpSpan* s = &op_events.lists[op_events.cur].spans[i];
    s->flops = flops;
    s->bytes = bytes;
    cudaCheck(cudaEventRecord(s->end, s->stream));
    op_events.open = 0;
}

// Runs call (work on stream) as a span of family with its FLOPs and bytes under -op 1.
#define OP_SPAN(family, stream, flops, bytes, call)              \
    do {                                                         \
        int op_span_ = op_span_begin(family, stream);            \
        call;                                                    \
        op_span_end(op_span_, flops, bytes);                     \
    } while (0)

// A list's spans into the profile when its step counted (their events have completed, or complete
// now: the host waits through host_wait_event, with the trainer's deadline), then empties the list.
static void op_spans_read(OpSpanList* l) {
    for (int i = 0; i < l->n; i++) {
        OpSpan* s = &l->spans[i];
        host_wait_event(s->end, "an -op 1 timing event");
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, s->begin, s->end));
        if (!l->timed) { continue; }
        if (s->stream == 0) {
            op_profile_add_timed(s->family, ms / 1e3, s->flops, s->bytes);
        } else {
            op_profile.side_seconds += ms / 1e3;
            op_profile.side_bytes += s->bytes;
        }
    }
    l->n = 0;
}

// op_profile's collect hook: at a step's end (timed: it counts), the last step's spans, whose
// events this step's host waits have passed; final (after the last step): the last step's.
static void op_events_collect(int timed, int final) {
    OpSpanList* last = &op_events.lists[op_events.cur ^ 1];
    op_spans_read(last);
    if (final) { return; }
    OpSpanList* now = &op_events.lists[op_events.cur];
    now->timed = timed;
    if (2 * now->n > op_profile.events_per_step) { op_profile.events_per_step = 2 * now->n; }
    op_events.cur ^= 1;
}

// -op 1 for the GPU trainer: the hook, and what the spans on side streams are.
static void op_events_init(const char* side_what) {
    op_profile.collect = op_events_collect;
    op_profile.side_what = side_what;
}

static void op_events_free(void) {
    for (int k = 0; k < 2; k++) {
        OpSpanList* l = &op_events.lists[k];
        for (int i = 0; i < l->cap; i++) {
            cudaCheck(cudaEventDestroy(l->spans[i].begin));
            cudaCheck(cudaEventDestroy(l->spans[i].end));
        }
        free(l->spans);
        l->spans = NULL;
        l->n = l->cap = 0;
    }
}

#endif
