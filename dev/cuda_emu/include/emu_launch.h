// emu_launch.h: kernel launches. Blocks of a grid run one after another on the calling OS thread;
// inside a block every CUDA thread is a fiber (its own stack; a hand-written context switch on
// x86-64, ucontext elsewhere or with -DEMU_UCONTEXT), switched cooperatively at __syncthreads and
// warp-synchronous operations. Also launch validation (the errors a GPU reports), function
// attributes, occupancy and cudaLaunchKernelEx. Included by emu_cuda.h.
#ifndef EMU_LAUNCH_H
#define EMU_LAUNCH_H

#include <ucontext.h>
#include <sys/mman.h>
#include <unistd.h>
#include <type_traits>
#include <tuple>
#include <utility>
#include <vector>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

inline uint3 threadIdx, blockIdx;  // threadIdx is swapped in by the scheduler for the running fiber
inline dim3 blockDim, gridDim;
inline constexpr int warpSize = 32;

namespace emu {

// ---- context switching ----
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
// emu_ctx_switch(&save, next): push the callee-saved registers and the SSE/x87 control words, store
// the stack pointer in *save, load `next` and pop the same frame from it. Weak: defined by every
// translation unit that includes this header.
extern "C" void emu_ctx_switch(void** save, void* next);
asm(R"(
    .text
    .weak emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch
)");
struct Context { void* sp; };
// A new context's stack holds the frame emu_ctx_switch pops, returning into `entry` (which never
// returns) with the stack aligned as after a call.
inline void ctx_init(Context& c, char* stack, size_t size, void (*entry)()) {
    uint64_t* top = (uint64_t*)(((uintptr_t)stack + size) & ~(uintptr_t)15);
    uint64_t* sp = top - 9;
    memset(sp, 0, 9 * sizeof(uint64_t));
    uint32_t mxcsr;
    uint16_t fcw;
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fcw));
    memcpy(sp, &mxcsr, 4);
    memcpy((char*)sp + 4, &fcw, 2);
    sp[7] = (uint64_t)(uintptr_t)entry;  // popped by ret; top[-1] is the fake return address of entry
    c.sp = sp;
}
inline void ctx_switch(Context& from, Context& to) { emu_ctx_switch(&from.sp, to.sp); }
#else
struct Context { ucontext_t uc; };
inline void ctx_init(Context& c, char* stack, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
inline void ctx_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

#ifdef EMU_CHECK
// the checked runtime's bookkeeping (emu_check.h)
inline uint16_t& chk_clock(int thread);
inline void chk_barrier();
inline void chk_fiber_stack(char* stack, size_t size);
inline void chk_block_start(size_t smem_bytes);
#endif

enum class State { Ready, Blocked, Done };

struct Fiber {
    Context ctx;
    char* stack = nullptr;
    size_t stack_size = 0;
    uint3 tid;
    State state = State::Ready;
    void* asan_fake_stack = nullptr;
};

// Warp-synchronous exchange: each participating lane posts a value and (for shuffles) the lane it
// reads; the last lane to arrive computes every participant's result and releases them together.
struct Warp {
    uint32_t exists = 0;   // lanes present in the block
    uint32_t alive = 0;    // lanes that have not returned from the kernel
    uint32_t waiting = 0;  // lanes blocked in a warp operation
    uint32_t mask[32];
    uint64_t value[32], result[32];
    int src[32];
    uint32_t ballot[32];
};

struct Block {
    std::vector<Fiber> fibers;  // pool, reused across blocks and launches
    std::vector<Warp> warps;
    int nthreads = 0, alive = 0, current = -1;
    int bar_arrived = 0, bar_count = 0, bar_result = 0;
    const std::vector<int>* round = nullptr;  // this round's order of the threads (EMU_SCHED's)
    int round_pos = -1;                       // the position in it of the thread that runs
    Context sched_ctx;
    const void* sched_stack = nullptr;  // scheduler stack bounds, for AddressSanitizer
    size_t sched_stack_size = 0;
    void (*body)(void*) = nullptr;
    void* body_arg = nullptr;
    unsigned char* dyn_smem = nullptr;
};
inline Block blk;

inline size_t stack_bytes() {
    const char* s = getenv("EMU_STACK_KB");
    size_t kb = s ? strtoul(s, nullptr, 10) : 128;
    return kb * 1024;
}

// ---- schedules: EMU_SCHED=forward|reverse|random[:SEED] orders the threads of a block between
// barriers, the blocks of a grid and (under --check) runnable operations of unordered streams ----
inline int sched_kind = -1;  // 0 forward, 1 reverse, 2 random
inline uint64_t sched_state = 1;
inline void sched_init() {
    if (sched_kind >= 0) return;
    const char* s = getenv("EMU_SCHED");
    sched_kind = 0;
    if (!s || !*s || !strcmp(s, "forward")) return;
    if (!strcmp(s, "reverse")) { sched_kind = 1; return; }
    if (!strncmp(s, "random", 6)) {
        sched_kind = 2;
        sched_state = s[6] == ':' ? strtoull(s + 7, nullptr, 10) * 2654435761ull + 1 : 12345;
        return;
    }
    fprintf(stderr, "cuda_emu: EMU_SCHED=%s: use forward, reverse or random:SEED\n", s);
    exit(2);
}
inline uint32_t sched_rand() {
    sched_state = sched_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(sched_state >> 33);
}
// A permutation of 0..n-1 in the order EMU_SCHED asks for.
inline void sched_order(std::vector<int>& order, int n) {
    sched_init();
    order.resize(n);
    for (int i = 0; i < n; i++) order[i] = sched_kind == 1 ? n - 1 - i : i;
    if (sched_kind == 2)
        for (int i = n - 1; i > 0; i--) std::swap(order[i], order[sched_rand() % (uint32_t)(i + 1)]);
}


inline void die(const char* msg) {
    fprintf(stderr, "cuda_emu: %s\n", msg);
    abort();
}

// The next ready thread of this round after the one that runs, in the round's order (-1: none;
// threads made ready during the round run in it when their turn has not passed yet).
inline int next_in_round() {
    const std::vector<int>& order = *blk.round;
    while (++blk.round_pos < (int)order.size())
        if (blk.fibers[order[blk.round_pos]].state == State::Ready) return order[blk.round_pos];
    return -1;
}

// Makes thread i the running one (its switch follows).
inline void enter_fiber(int i) {
    Fiber& f = blk.fibers[i];
    blk.current = i;
    threadIdx = f.tid;
#ifdef EMU_CHECK
    chk_fiber_stack(f.stack, f.stack_size);
#endif
}

// Switch away from the running fiber (`dying` for its final switch): straight to the next ready
// thread of the round, the order the scheduler's loop would take (one switch instead of two),
// else back to the scheduler, which starts the next round. Under AddressSanitizer always through
// the scheduler, whose stack its fiber annotations need.
inline void to_scheduler(bool dying = false) {
    Fiber& f = blk.fibers[blk.current];
#if !EMU_ASAN
    (void)dying;
    int next = next_in_round();
    if (next >= 0) {
        enter_fiber(next);
        ctx_switch(f.ctx, blk.fibers[next].ctx);
        return;
    }
    ctx_switch(f.ctx, blk.sched_ctx);
#else
    __sanitizer_start_switch_fiber(dying ? nullptr : &f.asan_fake_stack, blk.sched_stack, blk.sched_stack_size);
    ctx_switch(f.ctx, blk.sched_ctx);
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, &blk.sched_stack, &blk.sched_stack_size);
#endif
}

inline void block_until_ready() {
    blk.fibers[blk.current].state = State::Blocked;
    to_scheduler();
}

// Whether the lanes of `group` (a synchronisation group: a lane's mask restricted to live lanes)
// have all arrived, each with this same group.
inline bool warp_group_ready(const Warp& w, uint32_t group) {
    if ((w.waiting & group) != group) return false;
    for (uint32_t g = group; g; g &= g - 1)
        if ((w.mask[__builtin_ctz(g)] & w.alive) != group) return false;
    return true;
}

// Releases the lanes of a ready group together: each gets its source lane's value and the group's ballot.
inline void warp_release(Warp& w, uint32_t group) {
    uint32_t ballot = 0;
    for (uint32_t g = group; g; g &= g - 1)
        if (w.value[__builtin_ctz(g)] != 0) ballot |= 1u << __builtin_ctz(g);
    int warp_index = (int)(&w - blk.warps.data());
#ifdef EMU_CHECK
    // lanes that meet in a warp operation are ordered: their warp clocks move past everyone's
    uint16_t top = 0;
    for (uint32_t g = group; g; g &= g - 1)
        if (chk_clock(warp_index * 32 + __builtin_ctz(g)) > top) top = chk_clock(warp_index * 32 + __builtin_ctz(g));
    for (uint32_t g = group; g; g &= g - 1) chk_clock(warp_index * 32 + __builtin_ctz(g)) = (uint16_t)(top + 1);
#endif
    for (uint32_t g = group; g; g &= g - 1) {
        int j = __builtin_ctz(g), s = w.src[j];
        w.result[j] = (s >= 0 && s < 32 && (group >> s & 1)) ? w.value[s] : w.value[j];
        w.ballot[j] = ballot;
        blk.fibers[warp_index * 32 + j].state = State::Ready;
    }
    w.waiting &= ~group;
}

// Release the warp lanes whose synchronisation group has fully arrived, lowest lane first.
inline void warp_try_release(Warp& w) {
    for (uint32_t pending = w.waiting; pending; pending &= pending - 1) {
        int l = __builtin_ctz(pending);
        if (!(w.waiting >> l & 1)) continue;  // released with an earlier lane's group
        uint32_t group = w.mask[l] & w.alive;
        if (warp_group_ready(w, group)) warp_release(w, group);
    }
}

// One warp-synchronous step for the calling lane; returns the value of lane `src` (own value when
// `src` does not take part) and sets *ballot to the lanes of the group whose value was non-zero.
inline uint64_t warp_exchange(uint32_t mask, uint64_t value, int src, uint32_t* ballot = nullptr) {
    EMU_RUNTIME;
    int t = blk.current;
    Warp& w = blk.warps[t / 32];
    int lane = t % 32;
    if (!(mask >> lane & 1)) die("warp operation called by a lane that is not in its mask");
    w.mask[lane] = mask;
    w.value[lane] = value;
    w.src[lane] = src;
    w.waiting |= 1u << lane;
    blk.fibers[t].state = State::Blocked;
    // Only this lane's arrival changed the warp since the last warp_try_release (which left no
    // group that could go), so a group can go now only if it is this lane's.
    uint32_t group = mask & w.alive;
    if (warp_group_ready(w, group)) warp_release(w, group);
    if (blk.fibers[t].state == State::Blocked) to_scheduler();
    if (ballot) *ballot = w.ballot[lane];
    return w.result[lane];
}

// Wake every thread waiting in __syncthreads (threads blocked in a warp operation stay blocked).
inline void release_block_barrier() {
#ifdef EMU_CHECK
    chk_barrier();  // a new barrier interval
#endif
    blk.bar_result = blk.bar_count;
    blk.bar_arrived = blk.bar_count = 0;
    for (int i = 0; i < blk.nthreads; i++)
        if (blk.fibers[i].state == State::Blocked && !(blk.warps[i / 32].waiting >> (i % 32) & 1))
            blk.fibers[i].state = State::Ready;
}

// __syncthreads with a predicate count; threads that returned from the kernel count as arrived.
inline int block_barrier(int pred) {
    EMU_RUNTIME;
    blk.bar_count += pred != 0;
    if (++blk.bar_arrived < blk.alive) {
        block_until_ready();
        return blk.bar_result;
    }
    release_block_barrier();
    return blk.bar_result;
}

inline void fiber_main() {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &blk.sched_stack, &blk.sched_stack_size);
#endif
    blk.body(blk.body_arg);
#ifdef EMU_CHECK
    chk::set_mode(chk::Runtime);
#endif
    int t = blk.current;
    blk.fibers[t].state = State::Done;
    Warp& w = blk.warps[t / 32];
    w.alive &= ~(1u << (t % 32));
    blk.alive--;
    warp_try_release(w);
    if (blk.bar_arrived > 0 && blk.bar_arrived == blk.alive) release_block_barrier();
    to_scheduler(true);
}

inline void run_block(dim3 block) {
    int n = (int)(block.x * block.y * block.z);
    size_t ss = stack_bytes();
    long page = sysconf(_SC_PAGESIZE);
    while ((int)blk.fibers.size() < n) {
        Fiber f;
        // one guard page below each stack turns a fiber stack overflow into a crash
        char* m = (char*)mmap(nullptr, ss + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) die("cannot allocate fiber stacks");
        mprotect(m, page, PROT_NONE);
        f.stack = m + page;
        f.stack_size = ss;
        blk.fibers.push_back(f);
    }
    blk.nthreads = blk.alive = n;
    blk.bar_arrived = blk.bar_count = 0;
    blk.warps.assign((n + 31) / 32, Warp{});
    for (int i = 0; i < n; i++) {
        Warp& w = blk.warps[i / 32];
        w.exists |= 1u << (i % 32);
        w.alive = w.exists;
        Fiber& f = blk.fibers[i];
        f.tid = uint3{i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
        f.state = State::Ready;
#if EMU_ASAN
        // a finished fiber leaves its last frames (fiber_main, to_scheduler) poisoned at the stack top
        size_t top = f.stack_size < 64 * 1024 ? f.stack_size : 64 * 1024;
        __asan_unpoison_memory_region(f.stack + f.stack_size - top, top);
#endif
        ctx_init(f.ctx, f.stack, f.stack_size, fiber_main);
    }
    // Rounds: each runs the ready threads in EMU_SCHED's order, each until it blocks or ends; a
    // thread that stops hands over to the next ready one itself (to_scheduler), and the last of the
    // round comes back here.
    static std::vector<int> order;
    blk.round = &order;
    while (blk.alive > 0) {
        sched_order(order, n);
        blk.round_pos = -1;
#if !EMU_ASAN
        int first = next_in_round();
        if (first < 0) die("deadlock: threads wait in __syncthreads or a warp operation that not all threads reach");
        enter_fiber(first);
        ctx_switch(blk.sched_ctx, blk.fibers[first].ctx);
#else
        bool ran = false;
        for (int i; (i = next_in_round()) >= 0;) {
            Fiber& f = blk.fibers[i];
            ran = true;
            enter_fiber(i);
            void* fake = nullptr;
            __sanitizer_start_switch_fiber(&fake, f.stack, f.stack_size);
            ctx_switch(blk.sched_ctx, f.ctx);
            __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
        }
        if (!ran) die("deadlock: threads wait in __syncthreads or a warp operation that not all threads reach");
#endif
    }
    blk.current = -1;
}

// ---- launch configuration and validation ----
struct LaunchConfig {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char* name = nullptr;  // the launch's text before <<< (emu_rewrite.py), or the kernel's own under --check
    const void* kid = nullptr;   // the kernel's address where known
    LaunchConfig(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0) : grid(g), block(b), smem(s), stream(st) {}
    LaunchConfig named(const char* n) const { LaunchConfig c = *this; c.name = n; return c; }
};

// dyn_set: cudaFuncSetAttribute(MaxDynamicSharedMemorySize) was called for the kernel
struct FuncAttrs { int max_dynamic_smem = (int)kSmemDefault; bool dyn_set = false; int carveout = -1; };
inline std::map<const void*, FuncAttrs>& func_attrs() { static std::map<const void*, FuncAttrs> m; return m; }
inline int max_optin_seen = (int)kSmemDefault;  // limit used for kernels whose address is unknown

// The kernel's address, from what is written before <<<: a kernel, a template-id, or a function
// pointer variable. emucc passes a generic lambda whose return type calls kernel_address with a
// dependent first argument, so a name that picks no single function (a template whose arguments
// are deduced from the call) is a substitution failure and gives nullptr instead of an error.
template <class X, class... P> const void* kernel_address(X, void (*kernel)(P...)) { return (const void*)kernel; }
template <class F> const void* kernel_id(F f) {
    if constexpr (std::is_invocable_v<F, int>) return f(0);
    else return nullptr;
}

inline cudaError_t check_config(const void* kid, const LaunchConfig& c) {
    const dim3 &g = c.grid, &b = c.block;
    if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) return cudaErrorInvalidConfiguration;
    if (b.x > 1024 || b.y > 1024 || b.z > 64 || (uint64_t)b.x * b.y * b.z > (uint64_t)kMaxThreads)
        return cudaErrorInvalidConfiguration;
    if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) return cudaErrorInvalidConfiguration;
    size_t limit = kSmemDefault;
    if (kid) {
        auto it = func_attrs().find(kid);
        if (it != func_attrs().end()) limit = (size_t)it->second.max_dynamic_smem;
    } else {
        limit = (size_t)max_optin_seen;
    }
    if (c.smem > limit) return cudaErrorInvalidValue;
    return cudaSuccess;
}

// ---- static shared memory (a strict rule) ----
// A GPU gives a block 48 KiB of shared memory in all unless the kernel's
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) raised it: the dynamic bytes a launch may ask for are
// 48 KiB minus the kernel's static __shared__ bytes; a raised limit V admits up to V dynamic bytes, and V
// plus the static bytes must stay within the opt-in maximum (kSmemOptin). The static bytes are counted as
// the kernel runs: after each static __shared__ declaration in a function, emu_rewrite.py puts a note that
// the first thread of each launch to reach it counts (static_smem), so a device function's arrays count
// for every kernel that calls it. The first note that takes a launch over its limit ends the run, naming
// the kernel and the numbers (a GPU would have refused the launch, cudaErrorInvalidValue).
struct RunningLaunch {
    const void* kid = nullptr;
    const char* name = nullptr;
    size_t dynamic = 0, statics = 0;
};
inline RunningLaunch running;
inline unsigned long long launch_serial = 0;  // one more at every grid's start; a note's guard
// the note: *seen is the declaration's own guard (the launch it was last counted in)
EMU_UNCHECKED inline void static_smem(unsigned long long* seen, size_t bytes) {
    if (*seen == launch_serial) return;
    EMU_RUNTIME;
    *seen = launch_serial;
    running.statics += bytes;
    if (!strict()) return;
    const RunningLaunch& r = running;
    bool raised = false;
    size_t v = 0;
    if (r.kid) {
        auto it = func_attrs().find(r.kid);
        if (it != func_attrs().end() && it->second.dyn_set) raised = true, v = (size_t)it->second.max_dynamic_smem;
    } else if (max_optin_seen > (int)kSmemDefault) {
        raised = true, v = r.dynamic;  // a kernel whose address is unknown: taken as raised to what it asks
    }
    char why[400];
    // over 48 KiB of static arrays alone is ptxas's refusal, not the launch's: emucc --check's static_assert
    if (r.statics > kSmemDefault) return;
    if (!raised && r.statics + r.dynamic > kSmemDefault)
        snprintf(why, sizeof why, "%zu bytes of static and %zu of dynamic shared memory, over 49152 in all: without "
                 "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) the dynamic limit is 49152 - %zu = %zu bytes",
                 r.statics, r.dynamic, r.statics, kSmemDefault - r.statics);
    else if (raised && r.statics + v > kSmemOptin)
        snprintf(why, sizeof why, "%zu bytes of static shared memory and a dynamic limit raised to %zu, over the "
                 "opt-in maximum %zu in all (at most %zu dynamic bytes may be asked for)", r.statics, v, kSmemOptin,
                 kSmemOptin - r.statics);
    else
        return;
    char msg[600];
    snprintf(msg, sizeof msg, "a GPU refuses this launch (cudaErrorInvalidValue): kernel %s has %s",
             r.name ? r.name : "(launched by cudaLaunchKernelEx)", why);
    die(msg);
}

template <class F> void call_body(void* f) { (*(F*)f)(); }

// Every block of the grid, in EMU_SCHED's order, with `smem` as dynamic shared memory.
template <class F> void run_grid(const LaunchConfig& c, F& body, unsigned char* smem) {
    if (blk.current >= 0) die("kernel launched from device code (dynamic parallelism is not emulated)");
    blk.dyn_smem = smem;
    running.kid = c.kid;
    running.name = c.name;
    running.dynamic = c.smem;
    running.statics = 0;
    launch_serial++;
    blk.body = &call_body<F>;
    blk.body_arg = &body;
    blockDim = c.block;
    gridDim = c.grid;
    sched_init();
    uint64_t nb = (uint64_t)c.grid.x * c.grid.y * c.grid.z;
    std::vector<uint32_t> perm;
    if (sched_kind == 2 && nb < (1u << 26)) {
        perm.resize(nb);
        for (uint32_t i = 0; i < nb; i++) perm[i] = i;
        for (uint64_t i = nb - 1; i > 0; i--) std::swap(perm[i], perm[sched_rand() % (uint32_t)(i + 1)]);
    }
    for (uint64_t k = 0; k < nb; k++) {
        uint64_t lin = !perm.empty() ? perm[k] : sched_kind == 1 ? nb - 1 - k : k;
        blockIdx = uint3{(unsigned)(lin % c.grid.x), (unsigned)(lin / c.grid.x % c.grid.y), (unsigned)(lin / ((uint64_t)c.grid.x * c.grid.y))};
#ifdef EMU_CHECK
        chk_block_start(c.smem);
#endif
        run_block(c.block);
    }
    blk.dyn_smem = nullptr;
}

#ifdef EMU_CHECK
template <class F> void chk_launch(const void* kid, const LaunchConfig& c, F body);  // emu_check.h
#endif

// Run `body` (which calls the kernel) as every thread of every block of the grid.
template <class F> void launch(const void* kid, const LaunchConfig& lc, F body) {
    LaunchConfig c = lc;
    c.kid = kid;
    cudaError_t e = check_config(kid, c);
    if (e != cudaSuccess) { fail(e); return; }
#ifdef EMU_CHECK
    chk_launch(kid, c, body);
#else
    // runs as stream work (emu_async.h: at once, or queued behind a pending collective). Shared memory
    // exact size, so ASan catches out-of-bounds accesses; 0xff bytes (NaN, -1) expose reads before writes
    enqueue(c.stream, [c, body]() mutable {
        std::vector<unsigned char> smem(c.smem, 0xff);
        run_grid(c, body, smem.data());
    });
#endif
}

inline void* dynamic_smem() { return blk.dyn_smem; }

// --check: every kernel body starts with this call (emu_rewrite.py). While the launcher probes a
// kernel it records the kernel's name and __launch_bounds__ limit and the kernel returns at once.
inline bool probing = false;
inline int probe_bound = 0;
inline const char* probe_name = nullptr;
inline bool kernel_entry(int max_threads, const char* name) {
    if (!probing) {
#ifdef EMU_CHECK
        chk::set_mode(chk::Kernel);  // the kernel's own code is checked from here on
#endif
        return false;
    }
    probe_bound = max_threads;
    probe_name = name;
    return true;
}

}  // namespace emu

// ---- function attributes, occupancy, cudaLaunchKernelEx ----
enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2, cudaFuncCachePreferEqual = 3 };
enum cudaSharedMemConfig { cudaSharedMemBankSizeDefault = 0, cudaSharedMemBankSizeFourByte = 1, cudaSharedMemBankSizeEightByte = 2 };
#define cudaSharedmemCarveoutDefault (-1)
#define cudaSharedmemCarveoutMaxShared 100
#define cudaSharedmemCarveoutMaxL1 0

inline cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (!func) return emu::fail(cudaErrorInvalidDeviceFunction);
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > emu::kSmemOptin) return emu::fail(cudaErrorInvalidValue);
        emu::func_attrs()[func].max_dynamic_smem = value;
        emu::func_attrs()[func].dyn_set = true;
        if (value > emu::max_optin_seen) emu::max_optin_seen = value;
    } else if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
        if (value < -1 || value > 100) return emu::fail(cudaErrorInvalidValue);
        emu::func_attrs()[func].carveout = value;
    } else {
        return emu::fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
template <class... P> cudaError_t cudaFuncSetAttribute(void (*func)(P...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)func, attr, value);
}
template <class... P> cudaError_t cudaFuncSetCacheConfig(void (*)(P...), cudaFuncCache) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig) { return cudaSuccess; }

// Resident blocks per SM by the emulated device's thread, block and shared-memory limits.
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int block_size, size_t smem) {
    if (block_size <= 0 || block_size > emu::kMaxThreads) return emu::fail(cudaErrorInvalidValue);
    int by_threads = emu::kMaxThreadsPerSM / block_size;
    int by_smem = smem ? (int)(emu::kSmemPerSM / (smem + 1024)) : emu::kMaxBlocksPerSM;
    int r = by_threads < by_smem ? by_threads : by_smem;
    *n = r < emu::kMaxBlocksPerSM ? r : emu::kMaxBlocksPerSM;
    return cudaSuccess;
}
template <class... P>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, void (*f)(P...), int block_size, size_t smem) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, (const void*)f, block_size, smem);
}

struct cudaLaunchAttribute { int id; int val[16]; };
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute* attrs;
    unsigned int numAttrs;
};
template <class... P, class... A>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* c, void (*kernel)(P...), A&&... args) {
    emu::launch((const void*)kernel, emu::LaunchConfig(c->gridDim, c->blockDim, c->dynamicSmemBytes, c->stream),
                [=] { kernel(args...); });
    return cudaPeekAtLastError();
}

#endif
