// emu_check.h: the checked runtime of `emucc --check` (EMU_CHECK defined). Included by emu_cuda.h.
//
// Mechanism: emucc compiles every C++ unit with -fsanitize=thread but links without the ThreadSanitizer
// runtime; the compiler's instrumentation calls __tsan_readN/__tsan_writeN(addr) before each memory
// access, and this header defines those hooks. A hook costs a call and a test outside kernels and on
// memory the checker does not track; inside kernels it looks up a 32-byte shadow record per 4-byte
// granule of device memory (a reserved arena all cudaMalloc memory comes from), dynamic shared memory
// and the program's static data (static __shared__ variables, __device__ globals).
//   races      two threads of a block touching one granule's bytes in the same barrier interval (at
//              least one writing, not both atomic; lanes of one warp are ordered by warp operations),
//              or two blocks of one launch touching global memory (one writing, not both atomic), or
//              two stream operations that nothing orders (streams, events, host synchronisation)
//   memory     bytes outside a cudaMalloc (exact size, 256-byte aligned, never reused), freed memory,
//              dynamic shared memory past the launch's size, host memory in a kernel, device memory on
//              the host, misaligned 2/4/8/16-byte accesses, cudaMemcpy/cudaMemset out of bounds;
//              fresh cudaMalloc memory is 0xff bytes (NaN as float and bf16)
//   streams    operations run later than issued (kernels, copies, memsets), at the latest when the
//              host waits for them, unordered streams in the order EMU_SCHED picks; the host touching
//              memory an issued async copy reads or writes before it has waited is reported
// A report names both accesses (kernel, source line, thread, block) and ends the process with status
// 66. EMU_SCHED=forward|reverse|random[:SEED] orders threads between barriers, blocks and streams.
#ifndef EMU_CHECK_H
#define EMU_CHECK_H

#include <algorithm>
#include <cstdarg>
#include <deque>
#include <functional>
#include <string>
#include <vector>
#include <sys/mman.h>

extern "C" {
extern char __executable_start[] __attribute__((weak));
extern char __data_start[] __attribute__((weak));
extern char _end[] __attribute__((weak));
}

namespace emu {
namespace chk {

// ---- state ----
struct Shadow {
    uint32_t wint, rint;  // interval ids of the last write / read (0: none)
    uint32_t wpc, rpc;    // code offsets of those accesses
    uint16_t wthr, rthr;  // thread index in the block (rthr: reader of bytes 0-1, rthr2: of bytes 2-3)
    uint16_t wclk, rclk;  // the thread's warp clock (reads: the largest)
    uint8_t wmask, rmask; // bytes of the granule; kAtomic: an atomic access
    uint8_t rflags;       // per 2-byte half h: kMulti << 2h several threads read, kMultiWarp << 2h in several warps
    uint8_t unused;
    uint16_t rthr2, pad;
};
static_assert(sizeof(Shadow) == 32, "shadow record size");
constexpr uint8_t kAtomic = 0x10, kMulti = 1, kMultiWarp = 2;
constexpr uint8_t kDevice = 0x10, kPinned = 0x20, kFreed = 0x40;
// shared memory a cp.async will write (emu_ptx.h): any access before its wait_group is reported
constexpr uint8_t kInFlight = 0x80;
constexpr size_t kArenaBytes = 32ull << 30;
constexpr size_t kSmemBytes = 256 * 1024;

struct Region { uintptr_t lo = 0, hi = 0; Shadow* sh = nullptr; uint8_t* st = nullptr; };  // st: a state byte per granule
inline Region arena, smem, data;  // device memory, dynamic shared memory, static data
inline size_t arena_used = 0;
struct Alloc { size_t size; int kind; bool freed; };  // kind: 1 device, 2 pinned host / managed
inline std::map<uintptr_t, Alloc>& allocs() { static std::map<uintptr_t, Alloc> m; return m; }

inline uint32_t cur_int = 0;      // current interval id (grows at every block start and barrier)
inline uint32_t launch_first = 0; // first interval id of the running operation
// The thread that runs the emulator (the first to call the runtime); other host threads (a
// program's watchdog) are not checked: the checker's state belongs to the emulating thread.
inline thread_local bool emu_thread = false;
inline uint32_t block_first = 0;  // first interval id of the running block
inline bool op_ordered = true;    // every earlier operation happens before the running one
inline uint16_t clk[1024];        // warp clocks of the block's threads
inline const char* kernel_name = "?";
inline uintptr_t stack_lo = 0, stack_hi = 0;  // the running fiber's stack
inline uintptr_t host_stack_lo = 0, host_stack_hi = 0;
struct BlockRec { uint32_t first; uint3 idx; };
inline std::vector<BlockRec>& blocks_run() { static std::vector<BlockRec> v; return v; }

// Ordering between blocks of one launch through a fence and an atomic flag (the "last block
// sums the partials" pattern): a block that has run __threadfence() and then an atomic on address
// X releases its intervals so far; a later atomic on X by another block acquires them, so that
// block's accesses afterwards are ordered after the releasing block's accesses up to its atomic.
// Tracked per block, not per thread (the pattern passes the acquisition on with __syncthreads).
struct Release { uintptr_t addr; uint32_t lo, hi; };
inline std::vector<Release>& releases() { static std::vector<Release> v; return v; }  // this launch's
struct Range { uint32_t lo, hi; };
inline std::vector<Range>& acquired() { static std::vector<Range> v; return v; }  // the running block's
// emu_ptx.h's: who issued the cp.async in flight at an address; what a new block resets
inline std::string (*in_flight_who)(uintptr_t) = nullptr;
inline void (*block_start_hook)() = nullptr;
inline uint32_t fence_int = 0;  // interval of the running block's last __threadfence (0: none yet)
inline bool acquired_interval(uint32_t i) {
    for (const Range& r : acquired()) if (i >= r.lo && i <= r.hi) return true;
    return false;
}

// ---- reports ----
EMU_NOSAN inline std::string where(uint32_t pc) {
    if (!pc) return "(runtime call)";
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "addr2line -C -f -i -e /proc/%d/exe 0x%x 2>/dev/null", (int)getpid(), pc - 1);
    FILE* f = popen(cmd, "r");
    std::string out, first, user;
    if (f) {
        char line[1024], fn[1024] = "";
        bool is_fn = true;
        while (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\n")] = 0;
            if (is_fn) { snprintf(fn, sizeof(fn), "%s", line); }
            else {
                std::string loc = std::string(line) + " (" + fn + ")";
                if (first.empty()) first = loc;
                if (user.empty() && !strstr(line, "cuda_emu/include") && !strstr(line, "llmc/ptx.cuh")) user = loc;
            }
            is_fn = !is_fn;
        }
        pclose(f);
    }
    out = !user.empty() ? user : first;
    if (out.empty() || out[0] == '?') {
        char b[64];
        snprintf(b, sizeof(b), "code offset 0x%x (build with -g for lines)", pc);
        out = b;
    }
    return out;
}
EMU_NOSAN inline uint32_t pc_off(void* ret) {
    return (uint32_t)((uintptr_t)ret - (uintptr_t)__executable_start);
}
EMU_NOSAN inline std::string tid_str(uint32_t t) {
    char b[64];
    unsigned x = blockDim.x, y = blockDim.y;
    snprintf(b, sizeof(b), "thread (%u,%u,%u)", t % x, (t / x) % y, t / (x * y));
    return b;
}
EMU_NOSAN inline std::string block_of(uint32_t interval) {
    auto& v = blocks_run();
    auto it = std::upper_bound(v.begin(), v.end(), interval, [](uint32_t a, const BlockRec& b) { return a < b.first; });
    if (it == v.begin()) return "block ?";
    --it;
    char b[64];
    snprintf(b, sizeof(b), "block (%u,%u,%u)", it->idx.x, it->idx.y, it->idx.z);
    return b;
}
EMU_NOSAN inline std::string describe_addr(uintptr_t a) {
    char b[256];
    if (a >= arena.lo && a < arena.hi) {
        auto& m = allocs();
        auto it = m.upper_bound(a);
        if (it != m.begin()) {
            --it;
            long off = (long)(a - it->first);
            snprintf(b, sizeof(b), "%s memory %p (byte %ld of a %zu-byte %s allocation at %p%s)",
                     it->second.kind == 1 ? "global" : "host-mapped", (void*)a, off, it->second.size,
                     it->second.kind == 1 ? "cudaMalloc" : "cudaMallocHost", (void*)it->first, it->second.freed ? ", freed" : "");
            return b;
        }
    }
    if (a >= smem.lo && a < smem.hi) {
        snprintf(b, sizeof(b), "dynamic shared memory (byte %ld)", (long)(a - smem.lo));
        return b;
    }
    if (a >= data.lo && a < data.hi) {
        snprintf(b, sizeof(b), "static __shared__/__device__ variable at %p", (void*)a);
        return b;
    }
    snprintf(b, sizeof(b), "address %p", (void*)a);
    return b;
}
[[noreturn]] EMU_NOSAN inline void report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] inline void report(const char* fmt, ...) {
    mode = Runtime;
    fflush(stdout);
    fprintf(stderr, "cuda_emu --check: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    report_exit();
}

// ---- regions ----
EMU_NOSAN inline void* reserve(size_t n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) { fprintf(stderr, "cuda_emu --check: cannot reserve %zu bytes of address space\n", n); exit(2); }
    return p;
}
EMU_NOSAN inline void init() {
    if (arena.lo) return;
    emu_thread = true;
    Suspend s;
    arena.lo = (uintptr_t)reserve(kArenaBytes);
    arena.hi = arena.lo + kArenaBytes;
    arena.sh = (Shadow*)reserve(kArenaBytes / 4 * sizeof(Shadow));
    arena.st = (uint8_t*)reserve(kArenaBytes / 4);
    smem.lo = (uintptr_t)reserve(kSmemBytes);
    smem.hi = smem.lo + kSmemBytes;
    smem.sh = (Shadow*)reserve(kSmemBytes / 4 * sizeof(Shadow));
    smem.st = (uint8_t*)reserve(kSmemBytes / 4);
    if (__data_start && _end) {
        data.lo = (uintptr_t)__data_start & ~(uintptr_t)3;
        data.hi = ((uintptr_t)_end + 3) & ~(uintptr_t)3;
        data.sh = (Shadow*)reserve((data.hi - data.lo) / 4 * sizeof(Shadow));
        data.st = (uint8_t*)reserve((data.hi - data.lo) / 4);
        memset(data.st, 0xf, (data.hi - data.lo) / 4);
    }
    char here;
    host_stack_hi = (uintptr_t)&here + (1 << 16);
    host_stack_lo = (uintptr_t)&here - (64u << 20);
}
EMU_NOSAN_INLINE inline Shadow* shadow_of(uintptr_t a, Region*& r) {
    if (a - arena.lo < kArenaBytes) { r = &arena; return arena.sh + (a - arena.lo) / 4; }
    if (a - smem.lo < kSmemBytes) { r = &smem; return smem.sh + (a - smem.lo) / 4; }
    if (a - data.lo < data.hi - data.lo) { r = &data; return data.sh + (a - data.lo) / 4; }
    r = nullptr;
    return nullptr;
}
// Mark [p, p+n) with state bits (allocated bytes and kind), or clear to `st` = 0.
EMU_NOSAN inline void mark(Region& r, uintptr_t p, size_t n, uint8_t kind) {
    if (p % 4 == 0 && n >= 4) {  // whole granules at once
        memset(r.st + (p - r.lo) / 4, kind ? (kind | 0xf) : (kFreed | 0xf), n / 4);
        p += n / 4 * 4;
        n %= 4;
    }
    for (uintptr_t a = p; a < p + n;) {
        uintptr_t g = a & ~(uintptr_t)3;
        uint8_t bits = 0;
        for (int b = 0; b < 4; b++)
            if (g + b >= p && g + b < p + n) bits |= (uint8_t)(1u << b);
        r.st[(g - r.lo) / 4] = kind ? (uint8_t)(kind | bits) : (uint8_t)(kFreed | bits);
        a = g + 4;
    }
}

// ---- stream operations (declared here for the race check's cross-operation test) ----
struct Op {
    uint32_t id = 0, seq = 0, first_int = 0;
    int stream = 0;
    std::string what;
    std::function<void()> fn;
    std::vector<std::pair<int, uint32_t>> deps;
    std::vector<uint32_t> vc;
    bool ordered = true, done = false;
    std::chrono::steady_clock::time_point t;  // when it ran (events)
};
inline std::vector<Op*>& ops() { static std::vector<Op*> v; return v; }
inline std::vector<std::pair<uint32_t, Op*>>& exec_log() { static std::vector<std::pair<uint32_t, Op*>> v; return v; }
inline Op* running_op = nullptr;
EMU_NOSAN inline Op* op_of_interval(uint32_t i) {
    auto& v = exec_log();
    auto it = std::upper_bound(v.begin(), v.end(), i, [](uint32_t a, const std::pair<uint32_t, Op*>& b) { return a < b.first; });
    if (it == v.begin()) return nullptr;
    return (--it)->second;
}
EMU_NOSAN inline bool happens_before(const Op* p, const Op* c) {
    return p == c || ((size_t)p->stream < c->vc.size() && c->vc[p->stream] >= p->seq);
}
EMU_NOSAN inline std::string stream_name(int s) {
    if (s == 0) return "the default stream";
    return "stream #" + std::to_string(s);
}

// ---- the access check ----
[[noreturn]] EMU_NOSAN inline void race(const char* kind, uintptr_t a, bool w_now, uint32_t pc_now, bool w_then,
                                        uint32_t int_then, uint16_t thr_then, uint32_t pc_then, const char* rel) {
    std::string now = std::string(w_now ? "write" : "read") + " by " + tid_str((uint32_t)blk.current) + " " +
                      block_of(cur_int) + " at " + where(pc_now);
    std::string then = std::string(w_then ? "write" : "read") + " by " + tid_str(thr_then) + " " + block_of(int_then) +
                       " at " + where(pc_then);
    report("data race (%s) in kernel %s on %s\n  this access:    %s\n  earlier access: %s\n  (%s)", kind, kernel_name,
           describe_addr(a).c_str(), now.c_str(), then.c_str(), rel);
}
[[noreturn]] EMU_NOSAN inline void cross_op_race(uintptr_t a, bool w_now, uint32_t pc_now, bool w_then, const Op* p, uint32_t pc_then) {
    const Op* c = running_op;
    std::string now = std::string(w_now ? "write" : "read") + " by " + (c ? c->what : std::string("?")) + " on " +
                      stream_name(c ? c->stream : 0);
    if (blk.current >= 0) now += " (" + tid_str((uint32_t)blk.current) + " " + block_of(cur_int) + " at " + where(pc_now) + ")";
    std::string then = std::string(w_then ? "write" : "read") + " by " + p->what + " on " + stream_name(p->stream);
    if (pc_then) then += " (at " + where(pc_then) + ")";
    report("unordered stream operations touch %s\n  this access:    %s\n  earlier access: %s\n"
           "  nothing orders them (same stream, an event with cudaStreamWaitEvent, or a host synchronisation between)",
           describe_addr(a).c_str(), now.c_str(), then.c_str());
}

// Is an earlier access (interval `ri`, thread `rt`, clock `rc`) ordered before the current thread's?
// Returns 0: ordered, 1: same barrier interval, 2: another block of this launch, 3: an unordered earlier
// operation (sets *pop).
EMU_NOSAN_INLINE inline int conflict(uint32_t ri, uint16_t rt, uint16_t rc, bool both_atomic, bool shared_mem, Op** pop) {
    if (ri == cur_int) {
        int t = blk.current;
        if (rt == t || both_atomic) return 0;
        if (rt / 32 == t / 32 && clk[t] > rc) return 0;
        return 1;
    }
    if (ri >= block_first) return 0;
    if (shared_mem) return 0;
    if (ri >= launch_first) return both_atomic || acquired_interval(ri) ? 0 : 2;
    if (op_ordered || !running_op) return 0;
    Op* p = op_of_interval(ri);
    if (!p || happens_before(p, running_op)) return 0;
    *pop = p;
    return 3;
}

[[noreturn]] EMU_NOSAN inline void bad_access(uintptr_t a, unsigned size, bool write, uint32_t pc, uint8_t st) {
    const char* what = (st & kFreed) ? "use of freed device memory" : "out-of-bounds access";
    report("%s in kernel %s: %s of %u bytes at %s by %s %s at %s", what, kernel_name, write ? "write" : "read", size,
           describe_addr(a).c_str(), tid_str((uint32_t)blk.current).c_str(), block_of(cur_int).c_str(), where(pc).c_str());
}

EMU_NOSAN inline void kernel_access(uintptr_t a, unsigned size, bool write, bool atomic, bool aligned, uint32_t pc) {
    if (aligned && size > 1 && (a & (size - 1)))
        report("misaligned %u-byte %s at %p in kernel %s by %s %s at %s (a GPU faults: 'misaligned address')", size,
               write ? "write" : "read", (void*)a, kernel_name, tid_str((uint32_t)blk.current).c_str(),
               block_of(cur_int).c_str(), where(pc).c_str());
    Region* r;
    Shadow* s = shadow_of(a, r);
    if (!s) {
        if ((a >= stack_lo && a < stack_hi) || (a >= host_stack_lo && a < host_stack_hi)) return;
        if (a >= (uintptr_t)__executable_start && a < (uintptr_t)_end) return;
        report("kernel %s %s host memory at %p (not a cudaMalloc/cudaMallocHost pointer) by %s %s at %s", kernel_name,
               write ? "writes" : "reads", (void*)a, tid_str((uint32_t)blk.current).c_str(), block_of(cur_int).c_str(),
               where(pc).c_str());
    }
    bool shared_mem = r != &arena;
    int t = blk.current;
    uintptr_t end = a + size;
    for (uintptr_t g = a & ~(uintptr_t)3; g < end; g += 4, s++) {
        uint8_t m = 0;
        for (int b = 0; b < 4; b++)
            if (g + b >= a && g + b < end) m |= (uint8_t)(1u << b);
        uint8_t st = r->st[s - r->sh];
        if ((st & m) != m || (st & kFreed)) bad_access(a, size, write, pc, st);
        if (st & kInFlight)
            report("%s of bytes in flight in kernel %s: %s by %s %s at %s; they are the destination of %s "
                   "(cp.async.wait_group/wait_all must retire the copy, then a barrier if another thread reads)",
                   write ? "write" : "read", kernel_name, describe_addr(g).c_str(), tid_str((uint32_t)t).c_str(),
                   block_of(cur_int).c_str(), where(pc).c_str(), in_flight_who ? in_flight_who(g).c_str() : "a cp.async");
        Op* p = nullptr;
        // against the last write
        if (s->wint && (s->wmask & m & 0xf)) {
            // an atomic against an atomic, or an atomic write against a plain read (the atomicCAS-loop
            // idiom reads the old value plainly) is not a race
            int c = conflict(s->wint, s->wthr, s->wclk, (s->wmask & kAtomic) && (atomic || !write), shared_mem, &p);
            if (c == 3) cross_op_race(g, write, pc, true, p, s->wpc);
            if (c) race(write ? "write after write" : "read after write", g, write, pc, true, s->wint, s->wthr, s->wpc,
                        c == 1 ? "same barrier interval: no __syncthreads/__syncwarp between them" : "two blocks of one launch");
        }
        if (write && s->rint && (s->rmask & m & 0xf)) {
            int c = 0;
            uint16_t who = s->rthr;
            if (s->rint == cur_int) {
                for (int h = 0; h < 2 && !atomic; h++) {  // readers are kept per 2-byte half (bf16)
                    uint8_t hm = h ? 0xc : 0x3;
                    if (!(s->rmask & m & hm)) continue;
                    uint16_t rt = h ? s->rthr2 : s->rthr;
                    bool multi = s->rflags & (kMulti << (2 * h)), mw = s->rflags & (kMultiWarp << (2 * h));
                    if (!multi && rt == t) continue;
                    if (!mw && rt / 32 == t / 32 && clk[t] > s->rclk) continue;
                    c = 1;
                    who = rt;
                    break;
                }
            } else {
                c = conflict(s->rint, s->rthr, s->rclk, atomic, shared_mem, &p);
            }
            if (c == 3) cross_op_race(g, write, pc, false, p, s->rpc);
            if (c) race("write after read", g, write, pc, false, s->rint, who, s->rpc,
                        c == 1 ? "same barrier interval: no __syncthreads/__syncwarp between them" : "two blocks of one launch");
        }
        uint8_t am = (uint8_t)(m | (atomic ? kAtomic : 0));
        if (write) {
            if (s->wint == cur_int && s->wthr == t) s->wmask |= am;
            else s->wmask = am;
            s->wint = cur_int; s->wthr = (uint16_t)t; s->wclk = clk[t]; s->wpc = pc;
        } else if (s->rint != cur_int) {
            // keep a read by an earlier block of this launch (global memory): any later write from
            // another block races with it
            if (!(s->rint >= launch_first && s->rint < block_first && !shared_mem)) {
                s->rint = cur_int; s->rthr = s->rthr2 = (uint16_t)t; s->rclk = clk[t]; s->rpc = pc; s->rmask = m; s->rflags = 0;
            }
        } else {
            for (int h = 0; h < 2; h++) {
                uint8_t hm = h ? 0xc : 0x3;
                if (!(m & hm)) continue;
                uint16_t& rt = h ? s->rthr2 : s->rthr;
                if (!(s->rmask & hm)) rt = (uint16_t)t;
                else if (rt != t) {
                    s->rflags |= (uint8_t)(kMulti << (2 * h));
                    if (rt / 32 != t / 32) s->rflags |= (uint8_t)(kMultiWarp << (2 * h));
                }
            }
            if (clk[t] > s->rclk) s->rclk = clk[t];
            s->rmask |= m;
        }
    }
}

struct HostRange { uintptr_t lo, hi; Op* op; bool written; };  // memory an issued async copy will touch
inline std::vector<HostRange>& pending_host() { static std::vector<HostRange> v; return v; }
inline size_t npending = 0;

// ---- streams: operations issued, run later in an order the dependencies allow ----
struct StreamState {
    bool blocking = true;           // synchronises with the legacy default stream
    uint32_t issued = 0, done = 0;  // operations issued / run
    std::deque<Op*> q;
    std::vector<uint32_t> vc;       // vector clock after the last issued operation
    std::vector<std::pair<int, uint32_t>> waits;  // cudaStreamWaitEvent for the next operation
};
inline std::vector<StreamState>& streams() { static std::vector<StreamState> v(1); return v; }  // [0]: legacy
inline std::vector<uint32_t> host_vc;  // what the host has waited for

EMU_NOSAN inline void join(std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); i++) a[i] = std::max(a[i], b[i]);
}
EMU_NOSAN inline int sidx(cudaStream_t s) {
    if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread) return 0;
    return s->index;
}

// Issue an operation on stream s: it depends on the stream's previous operation, the events the
// stream waits for, the legacy default stream's implicit synchronisation, and what the host has waited for.
EMU_NOSAN inline Op* enqueue(int s, const std::string& what, std::function<void()> fn) {
    Suspend guard;
    init();
    auto& ss = streams();
    Op* op = new Op;
    op->id = (uint32_t)ops().size();
    ops().push_back(op);
    op->stream = s;
    op->seq = ++ss[s].issued;
    op->what = what;
    op->fn = std::move(fn);
    std::vector<uint32_t> vc = ss[s].vc;
    join(vc, host_vc);
    op->deps = ss[s].waits;
    ss[s].waits.clear();
    if (s == 0) {
        for (size_t b = 1; b < ss.size(); b++)
            if (ss[b].blocking && ss[b].issued) { join(vc, ss[b].vc); op->deps.push_back({(int)b, ss[b].issued}); }
    } else if (ss[s].blocking && ss[0].issued) {
        join(vc, ss[0].vc);
        op->deps.push_back({0, ss[0].issued});
    }
    if (vc.size() <= (size_t)s) vc.resize(s + 1, 0);
    vc[s] = op->seq;
    ss[s].vc = vc;
    op->vc = vc;
    op->ordered = true;
    for (size_t x = 0; x < ss.size(); x++)
        if ((x < vc.size() ? vc[x] : 0) < ss[x].issued) op->ordered = false;
    ss[s].q.push_back(op);
    return op;
}

EMU_NOSAN inline bool runnable(const Op* op) {
    for (auto& d : op->deps)
        if (streams()[d.first].done < d.second) return false;
    return true;
}

EMU_NOSAN inline void execute(Op* op) {
    auto& ss = streams();
    ss[op->stream].q.pop_front();
    running_op = op;
    op_ordered = op->ordered;
    launch_first = block_first = ++cur_int;
    op->first_int = cur_int;
    exec_log().push_back({cur_int, op});
    op->t = std::chrono::steady_clock::now();
    if (op->fn) op->fn();
    op->fn = nullptr;
    running_op = nullptr;
    op_ordered = true;
    op->done = true;
    ss[op->stream].done++;
    if (npending) {
        auto& v = pending_host();
        v.erase(std::remove_if(v.begin(), v.end(), [&](const HostRange& h) { return h.op == op; }), v.end());
        npending = v.size();
    }
}

// Run one runnable operation (the oldest, newest or a random one, as EMU_SCHED says); false if none.
EMU_NOSAN inline bool run_one() {
    Suspend guard;
    std::vector<Op*> cand;
    for (auto& st : streams())
        if (!st.q.empty() && runnable(st.q.front())) cand.push_back(st.q.front());
    if (cand.empty()) return false;
    sched_init();
    Op* pick = cand[0];
    for (Op* o : cand) {
        if (sched_kind == 0 && o->id < pick->id) pick = o;
        if (sched_kind == 1 && o->id > pick->id) pick = o;
    }
    if (sched_kind == 2) pick = cand[sched_rand() % cand.size()];
    execute(pick);
    return true;
}

template <class P> EMU_NOSAN_INLINE void run_until(P done, const char* what) {
    Suspend guard;
    while (!done()) {
        if (!run_one()) report("%s waits for stream work that can never run (a cudaStreamWaitEvent cycle?)", what);
    }
}
EMU_NOSAN inline bool all_done() {
    for (auto& st : streams())
        if (st.done < st.issued) return false;
    return true;
}
EMU_NOSAN inline void sync_all(const char* what) {
    run_until(all_done, what);
    for (auto& st : streams()) join(host_vc, st.vc);
}
// Run `fn` as an operation of stream s now (after what it depends on): cuBLAS and NCCL calls.
template <class F> EMU_NOSAN_INLINE void run_now(cudaStream_t s, const char* what, F&& fn) {
    Op* op = enqueue(sidx(s), what, [&] { fn(); });
    run_until([op] { return op->done; }, what);
}

// ---- kernels ----
EMU_NOSAN inline void launch_prepare(const LaunchConfig& c) {
    (void)c;
}
}  // namespace chk

inline uint16_t& chk_clock(int thread) { return chk::clk[thread]; }
inline void chk_barrier() { ++chk::cur_int; }
inline void chk_fiber_stack(char* stack, size_t size) {
    chk::stack_lo = (uintptr_t)stack;
    chk::stack_hi = (uintptr_t)stack + size;
}
inline size_t chk_smem_marked = 0;
inline void chk_block_start(size_t smem_bytes) {
    chk::Suspend guard;
    chk::block_first = ++chk::cur_int;
    chk::blocks_run().push_back({chk::block_first, blockIdx});
    chk::fence_int = 0;
    chk::acquired().clear();
    if (chk::block_start_hook) chk::block_start_hook();
    memset(chk::clk, 0, sizeof(chk::clk));
    if (smem_bytes) memset((void*)chk::smem.lo, 0xff, smem_bytes);  // fresh shared memory: NaN bytes
    if (smem_bytes != chk_smem_marked) {
        size_t hi = std::max(smem_bytes, chk_smem_marked);
        memset(chk::smem.st, 0, (hi + 3) / 4);
        chk::mark(chk::smem, chk::smem.lo, smem_bytes, chk::kDevice);
        chk_smem_marked = smem_bytes;
    }
}

template <class F> void chk_launch(const void* kid, const LaunchConfig& c, F body) {
    (void)kid;
    chk::Suspend guard;
    chk::init();
    // probe: the kernel's entry reports its name and __launch_bounds__ and returns at once
    probing = true;
    probe_bound = 0;
    probe_name = nullptr;
    body();
    probing = false;
    std::string name = probe_name ? probe_name : "(a kernel built without --check)";
    uint64_t threads = (uint64_t)c.block.x * c.block.y * c.block.z;
    if (probe_bound > 0 && threads > (uint64_t)probe_bound) {
        fprintf(stderr, "cuda_emu --check: launch of kernel %s with %llu threads per block, more than its "
                "__launch_bounds__(%d): the launch fails (cudaErrorLaunchOutOfResources)\n", name.c_str(),
                (unsigned long long)threads, probe_bound);
        fail(cudaErrorLaunchOutOfResources);
        return;
    }
    if (c.smem > chk::kSmemBytes) { fail(cudaErrorInvalidValue); return; }
    LaunchConfig cfg = c;
    bool probed = probe_name != nullptr;
    chk::enqueue(chk::sidx(c.stream), "kernel " + name, [cfg, body, name, probed]() mutable {
        chk::Suspend g;
        chk::kernel_name = name.c_str();
        if (probed) cfg.name = name.c_str();
        chk::blocks_run().clear();
        chk::releases().clear();
        chk::set_mode(chk::Runtime);
        run_grid(cfg, body, (unsigned char*)chk::smem.lo);
        chk::kernel_name = "?";
    });
}
namespace chk {

// ---- host side ----

EMU_NOSAN inline void host_access(uintptr_t a, unsigned size, bool write, uint32_t pc) {
    if (npending) {
        for (auto& h : pending_host())
            if (a < h.hi && a + size > h.lo && (h.written || write) && !h.op->done)
                report("the host %s %p at %s while %s on %s, not yet waited for, %s it (synchronize the stream or "
                       "an event first)", write ? "writes" : "reads", (void*)a, where(pc).c_str(), h.op->what.c_str(),
                       stream_name(h.op->stream).c_str(), h.written ? "writes" : "reads");
    }
    if (a - arena.lo >= kArenaBytes) return;
    uint8_t st = arena.st[(a - arena.lo) / 4];
    if (st & kPinned) return;
    if (st & kDevice)
        report("device memory dereferenced on the host: %s of %u bytes at %s at %s (use cudaMemcpy)",
               write ? "write" : "read", size, describe_addr(a).c_str(), where(pc).c_str());
}

EMU_NOSAN_INLINE inline void access(void* p, unsigned size, bool write, bool aligned, void* ret) {
    if (mode == Runtime || !emu_thread) return;
    uintptr_t a = (uintptr_t)p;
    if (mode == Kernel) {
        mode = Runtime;
        kernel_access(a, size, write, false, aligned, pc_off(ret));
        mode = Kernel;
    } else if (a - arena.lo < kArenaBytes || npending) {
        mode = Runtime;
        host_access(a, size, write, pc_off(ret));
        mode = Host;
    }
}
// atomics call this for their read-modify-write
EMU_NOSAN inline void atomic_access(const void* p, unsigned size) {
    if (mode != Kernel || !emu_thread) return;
    mode = Runtime;
    kernel_access((uintptr_t)p, size, true, true, true, pc_off(__builtin_return_address(0)));
    for (const Release& r : releases())
        if (r.addr == (uintptr_t)p && r.lo != block_first) acquired().push_back({r.lo, r.hi});
    if (fence_int >= block_first) releases().push_back({(uintptr_t)p, block_first, cur_int});
    mode = Kernel;
}
// __ldg(p): a load through the read-only (non-coherent) data path, PTX ld.global.nc, whose data must
// stay read-only for the whole kernel: reading bytes the running launch has already written (any
// thread, this one too) is outside that contract and may return the stale value (strict rule).
// The reverse order (an __ldg, then a write in the same launch) and loads nvcc itself turns into
// the read-only path (const __restrict__ pointers) are not seen here: the SASS shows those.
EMU_NOSAN inline void readonly_load(const void* p, unsigned size, void* ret) {
    if (mode != Kernel || !emu_thread) return;
    Suspend runtime;  // the emulator's own code from here
    if (!strict()) return;
    uintptr_t a = (uintptr_t)p;
    for (uintptr_t g = a & ~(uintptr_t)3; g < a + size; g += 4) {
        Region* r;
        Shadow* s = shadow_of(g, r);
        if (r != &arena) return;
        if (s->wint >= launch_first)
            report("read-only load (__ldg, ld.global.nc) in kernel %s at %s of %s, which this launch wrote at %s "
                   "(thread %u): the read-only path may return the stale value", kernel_name,
                   where(pc_off(ret)).c_str(), describe_addr(g).c_str(), where(s->wpc).c_str(), s->wthr);
    }
}
// __threadfence(): the block's accesses so far are released by its next atomic
EMU_NOSAN inline void thread_fence() {
    if (mode == Kernel) fence_int = cur_int;
}

// A non-kernel stream operation (copy, memset, cuBLAS, NCCL) reads or writes [p, p+n) of device memory:
// bounds and cross-stream order are checked granule by granule (memory outside the arena is not tracked).
EMU_NOSAN inline void range_access(const void* p, size_t n, bool write) {
    uintptr_t a = (uintptr_t)p;
    if (!n || a - arena.lo >= kArenaBytes) return;
    int saved = mode;
    mode = Runtime;
    Shadow* s = arena.sh + (a - arena.lo) / 4;
    for (uintptr_t g = a & ~(uintptr_t)3; g < a + n; g += 4, s++) {
        uint8_t m = 0;
        for (int b = 0; b < 4; b++)
            if (g + b >= a && g + b < a + n) m |= (uint8_t)(1u << b);
        uint8_t st = arena.st[(g - arena.lo) / 4];
        if ((st & m) != m || (st & kFreed))
            report("%s %s %zu bytes at %s: past the end of the allocation or freed",
                   running_op ? running_op->what.c_str() : "a copy", write ? "writes" : "reads", n, describe_addr(a).c_str());
        if (!op_ordered && running_op) {
            Op* q;
            if (s->wint && s->wint < launch_first && (q = op_of_interval(s->wint)) && !happens_before(q, running_op))
                cross_op_race(g, write, 0, true, q, s->wpc);
            if (write && s->rint && s->rint < launch_first && (q = op_of_interval(s->rint)) && !happens_before(q, running_op))
                cross_op_race(g, write, 0, false, q, s->rpc);
        }
        if (write) { s->wint = cur_int; s->wthr = 0; s->wpc = 0; s->wmask = 0xf; }
        else { s->rint = cur_int; s->rthr = 0; s->rpc = 0; s->rmask = 0xf; s->rflags = 0; }
    }
    mode = saved;
}

// The allocation holding [p, p+n), for copies: reports a range that leaves it.
EMU_NOSAN inline void check_range(const void* p, size_t n, const char* what) {
    uintptr_t a = (uintptr_t)p;
    if (!n || a - arena.lo >= kArenaBytes) return;
    auto& m = allocs();
    auto it = m.upper_bound(a);
    if (it == m.begin()) report("%s: %p is not in any allocation", what, p);
    --it;
    if (it->second.freed) report("%s: %s", what, ("freed memory, " + describe_addr(a)).c_str());
    if (a + n > it->first + it->second.size)
        report("%s: %zu bytes at %s run %zu bytes past the end of the allocation", what, n, describe_addr(a).c_str(),
               (size_t)(a + n - it->first - it->second.size));
}

EMU_NOSAN inline void* alloc(size_t n, int kind) {
    init();
    size_t at = (arena_used + 255) & ~(size_t)255;
    size_t need = (n + 255) / 256 * 256 + 256;  // and a gap of at least 256 unallocated bytes
    if (at + need > kArenaBytes) return nullptr;
    arena_used = at + need;
    uintptr_t p = arena.lo + at;
    Suspend s;
    if (n) memset((void*)p, 0xff, n);  // NaN as float and bf16, -1 as integers
    mark(arena, p, n, kind == 1 ? kDevice : kPinned);
    allocs()[p] = Alloc{n, kind, false};
    return (void*)p;
}
EMU_NOSAN inline bool release(void* p, int kind) {
    auto& m = allocs();
    auto it = m.find((uintptr_t)p);
    if (it == m.end() || it->second.freed || it->second.kind != kind) return false;
    it->second.freed = true;
    mark(arena, it->first, it->second.size, 0);
    // give the memory and its race records back to the system (the addresses are never reused)
    uintptr_t lo = (it->first + 4095) & ~(uintptr_t)4095, hi = (it->first + it->second.size) & ~(uintptr_t)4095;
    if (hi > lo) {
        madvise((void*)lo, hi - lo, MADV_DONTNEED);
        uintptr_t slo = (uintptr_t)(arena.sh + (lo - arena.lo) / 4), shi = (uintptr_t)(arena.sh + (hi - arena.lo) / 4);
        madvise((void*)((slo + 4095) & ~(uintptr_t)4095), (shi & ~(uintptr_t)4095) - ((slo + 4095) & ~(uintptr_t)4095), MADV_DONTNEED);
    }
    return true;
}

}  // namespace chk
}  // namespace emu


// ---- the runtime API under --check ----
inline cudaError_t cudaMalloc(void** p, size_t n) {
    *p = emu::chk::alloc(n, 1);
    if (!*p) return emu::fail(cudaErrorMemoryAllocation);
    emu::allocated_bytes += n;
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t n) {
    *p = emu::chk::alloc(n, 2);
    return *p ? cudaSuccess : emu::fail(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) { return cudaMallocHost(p, n); }
inline cudaError_t cudaMallocManaged(void** p, size_t n, unsigned int) { return cudaMallocHost(p, n); }
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    emu::chk::sync_all("cudaFree");  // cudaFree waits for the device
    auto& m = emu::chk::allocs();
    auto it = m.find((uintptr_t)p);
    if (it != m.end() && it->second.kind == 2 && !it->second.freed) {  // managed memory
        emu::chk::release(p, 2);
        return cudaSuccess;
    }
    if (!emu::chk::release(p, 1))
        emu::chk::report("cudaFree(%p): %s", p, it == m.end() ? "not a pointer cudaMalloc returned" : "freed twice");
    emu::allocated_bytes -= it->second.size;
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    emu::chk::sync_all("cudaFreeHost");
    if (!emu::chk::release(p, 2)) emu::chk::report("cudaFreeHost(%p): not a pointer cudaMallocHost returned, or freed twice", p);
    return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }

namespace emu {
namespace chk {
EMU_NOSAN inline bool is_device(const void* p) {  // a cudaMalloc pointer
    uintptr_t a = (uintptr_t)p;
    return a - arena.lo < kArenaBytes && (arena.st[(a - arena.lo) / 4] & kDevice);
}
EMU_NOSAN inline bool is_static(const void* p) {  // a global: a __device__ symbol or a host variable
    return (uintptr_t)p - data.lo < data.hi - data.lo;
}
// A copy issued on stream s; `sync`: the host waits for it (cudaMemcpy).
EMU_NOSAN inline cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s, bool sync) {
    Suspend guard;
    init();
    if ((unsigned)kind > cudaMemcpyDefault) return fail(cudaErrorInvalidMemcpyDirection);
    if (!n) return cudaSuccess;
    const char* what = sync ? "cudaMemcpy" : "cudaMemcpyAsync";
    bool dd = is_device(dst), sd = is_device(src), dh = !dd && !is_static(dst), sh = !sd && !is_static(src);
    if ((kind == cudaMemcpyHostToDevice && (dh || sd)) || (kind == cudaMemcpyDeviceToHost && (dd || sh)) ||
        (kind == cudaMemcpyDeviceToDevice && (dh || sh)))
        report("%s(%p, %p, %zu, %s): a pointer is not on the side the copy kind names", what, dst, src, n,
               kind == cudaMemcpyHostToDevice ? "cudaMemcpyHostToDevice" : kind == cudaMemcpyDeviceToHost ?
               "cudaMemcpyDeviceToHost" : "cudaMemcpyDeviceToDevice");
    check_range(dst, n, what);
    check_range(src, n, what);
    Op* op = enqueue(sidx(s), std::string(what) + (kind == cudaMemcpyDeviceToHost ? " (device to host)" :
                     kind == cudaMemcpyHostToDevice ? " (host to device)" : ""), [=] {
        range_access(src, n, false);
        range_access(dst, n, true);
        memmove(dst, src, n);
    });
    if (sync) {
        run_until([op] { return op->done; }, what);
        join(host_vc, op->vc);
    } else {
        if (!dd && !is_static(dst)) pending_host().push_back({(uintptr_t)dst, (uintptr_t)dst + n, op, true});
        if (!sd && !is_static(src)) pending_host().push_back({(uintptr_t)src, (uintptr_t)src + n, op, false});
        npending = pending_host().size();
    }
    return cudaSuccess;
}
EMU_NOSAN inline cudaError_t set(void* p, int v, size_t n, cudaStream_t s, const char* what) {
    Suspend guard;
    init();
    if (!n) return cudaSuccess;
    if (!is_device(p) && !is_static(p) && !((uintptr_t)p - arena.lo < kArenaBytes)) report("%s(%p): not device memory", what, p);
    check_range(p, n, what);
    enqueue(sidx(s), what, [=] {
        range_access(p, n, true);
        memset(p, v, n);
    });
    return cudaSuccess;
}
}  // namespace chk
}  // namespace emu

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    return emu::chk::copy(dst, src, n, kind, 0, true);
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
    return emu::chk::copy(d, s, n, k, st, false);
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) { return emu::chk::set(p, v, n, 0, "cudaMemset"); }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st) { return emu::chk::set(p, v, n, st, "cudaMemsetAsync"); }

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int f) {
    emu::chk::Suspend guard;
    auto& ss = emu::chk::streams();
    ss.emplace_back();
    ss.back().blocking = !(f & cudaStreamNonBlocking);
    *s = new CUstream_st{(int)f, (int)ss.size() - 1};
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int f, int) { return cudaStreamCreateWithFlags(s, f); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (emu::chk::sidx(s) == 0) return emu::fail(cudaErrorInvalidResourceHandle);
    delete s;  // its issued work still runs
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu::chk::Suspend guard;
    int i = emu::chk::sidx(s);
    auto& ss = emu::chk::streams();
    if (i == 0) {  // the legacy stream: its work waits for every blocking stream's earlier work
        emu::chk::Op* op = emu::chk::enqueue(0, "cudaStreamSynchronize", nullptr);
        emu::chk::run_until([op] { return op->done; }, "cudaStreamSynchronize");
        emu::chk::join(emu::chk::host_vc, op->vc);
        return emu::last_error;
    }
    emu::chk::run_until([&] { return ss[i].done == ss[i].issued; }, "cudaStreamSynchronize");
    emu::chk::join(emu::chk::host_vc, ss[i].vc);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    emu::chk::sync_all("cudaDeviceSynchronize");
    return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    emu::chk::Suspend guard;
    auto& st = emu::chk::streams()[emu::chk::sidx(s)];
    if (st.done == st.issued) {
        emu::chk::join(emu::chk::host_vc, st.vc);
        return cudaSuccess;
    }
    emu::chk::run_one();  // progress, so that a polling loop ends
    return cudaErrorNotReady;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st{{}, false, 0, 0, nullptr}; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    emu::chk::Suspend guard;
    emu::chk::Op* op = emu::chk::enqueue(emu::chk::sidx(s), "cudaEventRecord", nullptr);
    e->recorded = true;
    e->stream = op->stream;
    e->seq = op->seq;
    e->op = op;
    return cudaSuccess;
}
namespace emu { namespace chk {
EMU_NOSAN inline bool event_done(cudaEvent_t e) { return !e->op || ((Op*)e->op)->done; }
}}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu::chk::Suspend guard;
    emu::chk::run_until([e] { return emu::chk::event_done(e); }, "cudaEventSynchronize");
    if (e->op) emu::chk::join(emu::chk::host_vc, ((emu::chk::Op*)e->op)->vc);
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    emu::chk::Suspend guard;
    if (emu::chk::event_done(e)) {
        if (e->op) emu::chk::join(emu::chk::host_vc, ((emu::chk::Op*)e->op)->vc);
        return cudaSuccess;
    }
    emu::chk::run_one();
    return cudaErrorNotReady;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
    emu::chk::Suspend guard;
    if (!e->op) return cudaSuccess;
    emu::chk::Op* ev = (emu::chk::Op*)e->op;
    int i = emu::chk::sidx(s);
    auto& st = emu::chk::streams()[i];
    emu::chk::join(st.vc, ev->vc);
    st.waits.push_back({ev->stream, ev->seq});
    emu::chk::enqueue(i, "cudaStreamWaitEvent", nullptr);
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a->recorded || !b->recorded) return emu::fail(cudaErrorInvalidResourceHandle);
    if (!emu::chk::event_done(a) || !emu::chk::event_done(b)) return cudaErrorNotReady;
    *ms = std::chrono::duration<float, std::milli>(((emu::chk::Op*)b->op)->t - ((emu::chk::Op*)a->op)->t).count();
    return cudaSuccess;
}

// ---- the hooks the compiler's -fsanitize=thread instrumentation calls ----
#define EMU_HOOK(N)                                                                                                     \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_read##N(void* p) {                                     \
        emu::chk::access(p, N, false, true, __builtin_return_address(0));                                               \
    }                                                                                                                   \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_write##N(void* p) {                                    \
        emu::chk::access(p, N, true, true, __builtin_return_address(0));                                                \
    }                                                                                                                   \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_unaligned_read##N(void* p) {                           \
        emu::chk::access(p, N, false, false, __builtin_return_address(0));                                              \
    }                                                                                                                   \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_unaligned_write##N(void* p) {                          \
        emu::chk::access(p, N, true, false, __builtin_return_address(0));                                               \
    }                                                                                                                   \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_volatile_read##N(void* p) {                            \
        emu::chk::access(p, N, false, false, __builtin_return_address(0));                                              \
    }                                                                                                                   \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_volatile_write##N(void* p) {                           \
        emu::chk::access(p, N, true, false, __builtin_return_address(0));                                               \
    }
EMU_HOOK(1) EMU_HOOK(2) EMU_HOOK(4) EMU_HOOK(8) EMU_HOOK(16)
#undef EMU_HOOK
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_read_range(void* p, unsigned long n) {
    emu::chk::access(p, (unsigned)n, false, false, __builtin_return_address(0));
}
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_write_range(void* p, unsigned long n) {
    emu::chk::access(p, (unsigned)n, true, false, __builtin_return_address(0));
}
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_init() {}
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_func_entry(void*) {}
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_func_exit() {}
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_vptr_update(void**, void*) {}
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_vptr_read(void**) {}
// atomics of host code (std::atomic, shared_ptr): done as asked, unchecked
#define EMU_TSAN_ATOMIC(N, T)                                                                                           \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_load(const volatile T* a, int) {             \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST); }                                                                  \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_atomic##N##_store(volatile T* a, T v, int) {          \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }                                                                     \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {          \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }                                                           \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {         \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }                                                            \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {         \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }                                                            \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) {         \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }                                                            \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) {          \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }                                                             \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) {         \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }                                                            \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {        \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); }                                                           \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) int __tsan_atomic##N##_compare_exchange_strong(                   \
        volatile T* a, T* c, T v, int, int) {                                                                           \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); }                       \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) int __tsan_atomic##N##_compare_exchange_weak(                     \
        volatile T* a, T* c, T v, int, int) {                                                                           \
        return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); }                        \
    extern "C" EMU_NOSAN_INLINE __attribute__((weak)) T __tsan_atomic##N##_compare_exchange_val(                        \
        volatile T* a, T c, T v, int, int) {                                                                            \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
EMU_TSAN_ATOMIC(8, char) EMU_TSAN_ATOMIC(16, short) EMU_TSAN_ATOMIC(32, int) EMU_TSAN_ATOMIC(64, long long)
#undef EMU_TSAN_ATOMIC
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" EMU_NOSAN_INLINE __attribute__((weak)) void __tsan_atomic_signal_fence(int) {}

#endif
