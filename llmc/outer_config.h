// The replica sync's settings (-ls -lss -ol -om -rq -ref -rqs -rk -lf -lo -rb) as one struct,
// OuterConfig: the flags write into TrainArgs.outer, the training loop and the data-parallel layer
// read it through a pointer, and a checkpoint's TrainState carries it whole; and OuterCall, what
// one outer step is asked to do (the settings in force at that sync, the fragment, the phase).
// The semantics are llmc/outer_sync.h's and docs/distributed.md's.
#ifndef LLMC_OUTER_CONFIG_H
#define LLMC_OUTER_CONFIG_H

typedef struct {
    int every;       // -ls H: 0 = synchronous training, no outer state
    int start;       // -lss S: synchronous steps before the first window
    float lr;        // -ol
    float momentum;  // -om
    int wire;        // -rq (llmc/wire_format.h's WIRE_*, from TrainArgs.wire_name): the link's format
    int feedback;    // -ref: error feedback (a residual per owned element) on a compressed link
    int wire_start;  // -rqs: syncs after steps <= wire_start send fp32, every value
    float topk;      // -rk: the fraction of each chunk sent (0: all)
    int fragments;   // -lf F (1: the whole model at once)
    int overlap;     // -lo tau: a fragment's exchange starts after its step, merged tau steps later
    float link_mbps; // -rb: the replica link's modelled bandwidth in MB/s (0: unthrottled)
} OuterConfig;

// outer_step's phases: the whole sync at once; -lo: the exchange alone (its result held, the
// fragment's local values kept as they were), or the outer step with the held result.
enum { OUTER_BLOCKING, OUTER_START, OUTER_FINISH };

typedef struct {
    OuterConfig c;  // the settings of this sync (outer_config_at: fp32 while -rqs holds)
    int fragment;   // the fragment it syncs (0..F-1)
    int phase;      // OUTER_BLOCKING, OUTER_START or OUTER_FINISH
    int last;       // 1 after the run's last step (every fragment syncs, whatever is in flight lands)
    int step;       // the step (1-based) after which it runs
} OuterCall;

#endif
