// emu_async.h: plain builds' streams behind collectives (included by emu_cuda.h; --check builds keep
// their own stream model in emu_check.h). A collective returns at once and runs on the rank's progress
// thread (emu_nccl.h) when its stream reaches it, as on a GPU; collectives are tickets 1, 2, ... and
// complete in ticket order (coll_done). A stream stands behind the last ticket issued on it or reached
// through cudaStreamWaitEvent (a blocking stream also behind the legacy stream, the legacy stream behind
// every blocking stream); an event behind its stream's ticket at record. Stream work (kernels, matmuls,
// async copies and memsets, event records) issued behind a ticket that has not completed is queued and
// runs on the host thread, in issue order, from the first CUDA call that finds the ticket complete.
// Blocking calls wait until their ticket completes: forever if a peer never joins. Each wait is also
// checked by the strict host-wait rule (host_blocks): a blocking call behind a ticket the host has
// not seen complete through a poll (cudaEventQuery / cudaStreamQuery answering cudaSuccess).
#ifndef EMU_ASYNC_H
#define EMU_ASYNC_H
#include <atomic>
#include <deque>
#include <functional>

namespace emu {
inline uint64_t coll_tickets = 0;            // collectives issued
inline std::atomic<uint64_t> coll_done{0};   // the newest complete (set by the progress thread)
inline uint64_t coll_seen = 0;               // the newest the host has seen complete by polling
inline const char* coll_what = "";           // the newest collective's name
inline std::map<const void*, uint64_t>& stream_tickets() { static std::map<const void*, uint64_t> m; return m; }
inline const void* stream_key(cudaStream_t s) {
    return ((uintptr_t)s <= 2) ? nullptr : (const void*)s;  // 0, cudaStreamLegacy, cudaStreamPerThread
}
inline bool stream_blocking(const void* key) { return ((const CUstream_st*)key)->flags == 0; }
inline uint64_t stream_ticket(cudaStream_t s) {
    const void* key = stream_key(s);
    auto& m = stream_tickets();
    auto it = m.find(key);
    uint64_t t = it == m.end() ? 0 : it->second;
    if (key == nullptr) {  // the legacy stream waits for the blocking streams
        for (auto& kv : m)
            if (kv.first && stream_blocking(kv.first) && kv.second > t) t = kv.second;
    } else if (stream_blocking(key)) {  // and they for it
        auto l = m.find(nullptr);
        if (l != m.end() && l->second > t) t = l->second;
    }
    return t;
}

// Stream work waiting for a ticket (gate), and collectives waiting to be handed to the progress thread.
struct Queued { uint64_t gate; std::function<void()> run; };
struct QueuedCollective { uint64_t ticket, gate; std::function<void(uint64_t)> start; };
inline std::deque<Queued>& queued() { static std::deque<Queued> q; return q; }
inline std::deque<QueuedCollective>& queued_collectives() { static std::deque<QueuedCollective> q; return q; }
inline bool draining = false;

// Runs the queued work whose ticket has completed (in issue order; work behind a later ticket stays,
// and nothing that depends on it is behind an earlier one), then hands over the collectives whose
// stream has reached them, in ticket order. Returns the completed ticket it went by.
inline uint64_t drain() {
    uint64_t d = coll_done.load(std::memory_order_acquire);
    if (draining) return d;
    draining = true;
    auto& q = queued();
    for (size_t i = 0; i < q.size();) {
        if (q[i].gate > d) { i++; continue; }
        std::function<void()> f = std::move(q[i].run);
        q.erase(q.begin() + (long)i);
        f();
    }
    auto& c = queued_collectives();
    while (!c.empty() && c.front().gate <= d) {
        QueuedCollective qc = std::move(c.front());
        c.pop_front();
        qc.start(qc.ticket);
    }
    draining = false;
    return d;
}

// Stream work: runs now when nothing it stands behind is pending, else queued.
inline void enqueue(cudaStream_t s, std::function<void()> f) {
    uint64_t gate = stream_ticket(s);
    if (gate <= drain()) { f(); return; }
    queued().push_back(Queued{gate, std::move(f)});
}

// A collective on s: takes the next ticket; start(ticket) hands it to the progress thread once the
// stream's earlier work is done and every earlier collective has been handed over.
inline void enqueue_collective(cudaStream_t s, const char* what, std::function<void(uint64_t)> start) {
    uint64_t gate = stream_ticket(s), ticket = ++coll_tickets;
    stream_tickets()[stream_key(s)] = ticket;
    coll_what = what;
    queued_collectives().push_back(QueuedCollective{ticket, gate, std::move(start)});
    drain();
}

// Blocks until ticket t has completed and the work behind it has run (forever if it never completes).
inline void wait_ticket(uint64_t t) {
    for (int spins = 0;; spins++) {
        if (drain() >= t) return;
        if (spins < 1000) sched_yield();
        else usleep(50);
    }
}

// A poll that finds work pending yields the CPU, so that a host polling in a tight loop leaves the
// progress threads of an oversubscribed machine (ranks > cores) room to run the collective.
inline cudaError_t not_ready() {
    sched_yield();
    return cudaErrorNotReady;
}

inline void host_blocks(const char* call, uint64_t ticket) {
    if (!strict() || ticket <= coll_seen) return;
    fprintf(stderr, "cuda_emu: %s blocks behind a collective (%s) the host has not seen complete: on a GPU it "
            "blocks forever, with no deadline, if a peer died or hangs; poll first (cudaEventQuery with a deadline "
            "and ncclCommGetAsyncError)\n", call, coll_what);
    fflush(stderr);
    _exit(66);
}
// A poll that found ticket t complete.
inline void host_saw(uint64_t t) { coll_seen = std::max(coll_seen, t); }
}  // namespace emu
#endif
