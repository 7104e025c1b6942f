// emu_ptx.h: the emulator's mma.sync m16n8k16, ldmatrix, cp.async and explicit shared loads/stores,
// the instructions llmc/ptx.cuh wraps in inline PTX for nvcc (it includes this header under emucc).
// Warp-collective operations (mma, ldmatrix, the shared helpers under --check) post each lane's
// operands by value into a per-warp table and meet at one warp barrier (the __shfl_sync mechanism);
// the table is double-buffered by a per-thread round parity, so no lane can overwrite a round
// another lane has not read yet (a lane reaches round k+2 only after every lane entered round k+1).
// Under --check: cp.async destinations are poisoned until the wait that retires their group, and
// the shared-memory bank conflicts of every warp access are counted per kernel and site (printed at exit).
#ifndef EMU_PTX_H
#define EMU_PTX_H
#include "emu_cuda.h"
#include "cuda_fp16.h"
#include <map>
#include <string>
#include <vector>

namespace emu {
namespace ptx {

struct Post { uint32_t w[8]; uintptr_t addr; };
// the code offset of the caller's caller: the kernel line (llmc/ptx.cuh's wrappers are always inlined)
#ifdef EMU_CHECK
#define EMU_PTX_SITE() chk::pc_off(__builtin_return_address(0))
#else
#define EMU_PTX_SITE() 0u
#endif
inline Post posts[2][32][32];   // [round parity][warp][lane]
inline uint8_t round_of[1024];  // per thread of the block

// Post this lane's payload, meet the warp; returns the table of this round.
inline Post (&meet(const Post& mine))[32] {
    int t = blk.current, w = t / 32;
    if (w >= 32) die("ptx: more than 32 warps in a block");
    int r = round_of[t] ^= 1;
    posts[r][w][t % 32] = mine;
    warp_exchange(0xffffffffu, 0, -1);
    return posts[r][w];
}

// Planted layout bugs (tests only): EMU_PTX_PLANT=1 swaps the A fragments of lanes 1 and 4 in mma,
// EMU_PTX_PLANT=2 swaps what lanes 1 and 4 receive from ldmatrix. A layout test must then fail.
#ifndef EMU_PTX_PLANT
#define EMU_PTX_PLANT 0
#endif
inline int planted(int lane, int which) {
    if (EMU_PTX_PLANT != which) return lane;
    return lane == 1 ? 4 : lane == 4 ? 1 : lane;
}

// ---- bank conflicts (--check): 32 banks of 4 bytes; a request is served in phases (all 32 lanes
// for 4-byte accesses, 16 for 8-byte, 8 for 16-byte, one 8x8 matrix of 8 rows of 16 bytes for
// ldmatrix); a phase takes as many wavefronts as the most distinct 4-byte words one bank holds ----
struct Site { std::string op; uint64_t requests = 0, wavefronts = 0, ideal = 0; int worst = 0; };
inline std::map<std::pair<std::string, uint32_t>, Site>& sites() { static std::map<std::pair<std::string, uint32_t>, Site> m; return m; }

// n-way of one phase: `n` accesses of `bytes` bytes at addrs[0..n)
inline int phase_ways(const uintptr_t* addrs, int n, int bytes) {
    std::vector<uintptr_t> words[32];
    int worst = 1;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < bytes; b += 4) {
            uintptr_t word = (addrs[i] + b) / 4;
            auto& v = words[word % 32];
            bool seen = false;
            for (uintptr_t x : v) seen |= x == word;
            if (!seen) v.push_back(word);
            worst = std::max(worst, (int)v.size());
        }
    return worst;
}

#ifdef EMU_CHECK
inline void print_banks() {
    EMU_RUNTIME;
    for (auto& [key, s] : sites())
        fprintf(stderr, "cuda_emu banks: kernel %s at %s: %s, %llu warp requests, %d-way worst, %.2f-way mean\n",
                key.first.c_str(), chk::where(key.second).c_str(), s.op.c_str(), (unsigned long long)s.requests,
                s.worst, (double)s.wavefronts / (double)s.ideal);
}
// One warp request: `phases` phases of `per` lanes' addresses each (table order).
inline void record(const char* op, uint32_t pc, const uintptr_t* addrs, int phases, int per, int bytes) {
    static bool registered = false;
    Site& s = sites()[{chk::kernel_name, pc}];  // (the map exists before the handler: destroyed after it)
    if (!registered) { atexit(print_banks); registered = true; }
    s.op = op;
    s.requests++;
    int worst = 1;
    for (int p = 0; p < phases; p++) {
        int w = phase_ways(addrs + p * per, per, bytes);
        s.wavefronts += w;
        worst = std::max(worst, w);
    }
    s.ideal += phases;
    s.worst = std::max(s.worst, worst);
}
#endif

// ---- mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 ----
// Lane l, group g = l / 4, t = l % 4. A (16x16, m x k) element i = 0..7 (register i / 2, half i % 2):
// m = g + 8 ((i / 2) % 2), k = 2 t + i % 2 + 8 (i / 4). B (16x8, k x n) element i = 0..3:
// k = 2 t + i % 2 + 8 (i / 2), n = g. C and D (16x8) element i = 0..3: m = g + 8 (i / 2), n = 2 t + i % 2.
inline float half_bits(uint16_t h, bool bf16) {
    if (bf16) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
    __half x; memcpy(&x, &h, 2); return __half2float(x);
}
// D(m, n) = C(m, n) + sum over k = 0..15 in k order of A(m, k) B(k, n), fp32 fused multiply-adds
// (products of bf16/f16 inputs are exact in fp32, so only the sum's order rounds)
inline void mma_16816(float* d, const uint32_t* a, const uint32_t* b, const float* c, bool bf16) {
    EMU_RUNTIME;
    Post mine{};
    memcpy(mine.w, a, 16);
    memcpy(mine.w + 4, b, 8);
    Post cpost{};
    memcpy(cpost.w, c, 16);
    float cin[4];
    memcpy(cin, c, 16);
    Post (&tab)[32] = meet(mine);
    int lane = lane_id(), g = lane / 4, t = lane % 4;
    // this lane's D needs rows g and g + 8 of A, which lanes 4 g .. 4 g + 3 hold, and columns 2 t and
    // 2 t + 1 of B, which lanes 8 t .. 8 t + 7 hold: only those entries are unpacked
    float A[16][16], B[16][8];
    for (int l = 4 * g; l < 4 * g + 4; l++) {
        int tl = l % 4;
        const Post& pa = tab[planted(l, 1)];
        for (int i = 0; i < 8; i++)
            A[g + 8 * ((i / 2) % 2)][2 * tl + i % 2 + 8 * (i / 4)] = half_bits((uint16_t)(pa.w[i / 2] >> (16 * (i % 2))), bf16);
    }
    for (int l = 8 * t; l < 8 * t + 8; l++) {
        int gl = l / 4, tl = l % 4;
        for (int i = 0; i < 4; i++)
            B[2 * tl + i % 2 + 8 * (i / 2)][gl] = half_bits((uint16_t)(tab[l].w[4 + i / 2] >> (16 * (i % 2))), bf16);
    }
    for (int i = 0; i < 4; i++) {
        int m = g + 8 * (i / 2), n = 2 * t + i % 2;
        float acc = cin[i];
        for (int k = 0; k < 16; k++) acc = fmaf(A[m][k], B[k][n], acc);
        d[i] = acc;
    }
}

// ---- ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 ----
// Matrix j (of num) has its 8 rows at the addresses of lanes 8 j .. 8 j + 7 (16 bytes each). Lane l
// receives in register j the pair of 16-bit elements (row l / 4, cols 2 (l % 4), +1) of matrix j;
// with .trans the pair (rows 2 (l % 4), +1; col l / 4), the low half first.
__attribute__((noinline)) inline void ldmatrix(uint32_t* out, int num, bool trans, const void* row) {
    EMU_RUNTIME;
    uint32_t pc = EMU_PTX_SITE();
    int lane = lane_id();
    Post mine{};
    mine.addr = (uintptr_t)row;
    if (lane < 8 * num) {
#ifdef EMU_CHECK
        chk::kernel_access((uintptr_t)row, 16, false, false, true, pc);  // the row's read: bounds, races, in flight
#endif
        memcpy(mine.w, row, 16);
    }
    Post (&tab)[32] = meet(mine);
#ifdef EMU_CHECK
    if (lane == 0) {
        uintptr_t addrs[32];
        for (int i = 0; i < 8 * num; i++) addrs[i] = tab[i].addr;
        record(num == 1 ? (trans ? "ldmatrix.x1.trans" : "ldmatrix.x1") : num == 2 ? (trans ? "ldmatrix.x2.trans" : "ldmatrix.x2")
               : (trans ? "ldmatrix.x4.trans" : "ldmatrix.x4"), pc, addrs, num, 8, 16);
    }
#else
    (void)pc;
#endif
    int l = planted(lane, 2);
    for (int j = 0; j < num; j++) {
        uint16_t lo, hi;
        const uint16_t* rows = nullptr;
        if (!trans) {
            rows = (const uint16_t*)tab[8 * j + l / 4].w;
            lo = rows[2 * (l % 4)];
            hi = rows[2 * (l % 4) + 1];
        } else {
            lo = ((const uint16_t*)tab[8 * j + 2 * (l % 4)].w)[l / 4];
            hi = ((const uint16_t*)tab[8 * j + 2 * (l % 4) + 1].w)[l / 4];
        }
        out[j] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}

// ---- explicit shared loads and stores (ld.shared / st.shared of 4, 8, 16 bytes) ----
// Plain builds: the access. --check: the access is checked as the lane's own, then the warp meets
// (all 32 lanes must call, as for .aligned instructions) and the request's bank conflicts are counted.
__attribute__((noinline)) inline void shared_access(void* p, void* val, int bytes, bool write) {
    EMU_RUNTIME;
    uint32_t pc = EMU_PTX_SITE();
#ifdef EMU_CHECK
    chk::kernel_access((uintptr_t)p, (unsigned)bytes, write, false, true, pc);
#endif
    if (write) memcpy(p, val, bytes);
    else memcpy(val, p, bytes);
#ifdef EMU_CHECK
    Post mine{};
    mine.addr = (uintptr_t)p;
    Post (&tab)[32] = meet(mine);
    if (lane_id() == 0) {
        uintptr_t addrs[32];
        for (int i = 0; i < 32; i++) addrs[i] = tab[i].addr;
        const char* op = write ? (bytes == 4 ? "st.shared.b32" : bytes == 8 ? "st.shared.v2.b32" : "st.shared.v4.b32")
                               : (bytes == 4 ? "ld.shared.b32" : bytes == 8 ? "ld.shared.v2.b32" : "ld.shared.v4.b32");
        record(op, pc, addrs, bytes / 4, 32 / (bytes / 4), bytes);
    }
#else
    (void)pc;
#endif
}

// ---- cp.async.{ca,cg}.shared.global [dst], [src], n; commit_group; wait_group N; wait_all ----
// Plain builds copy at the cp.async (the bytes are there early: a missing wait goes unseen).
// --check copies at the wait that retires the copy's group; until then the destination granules are
// poisoned (any kernel access of them is reported), the source is read at the cp.async, and the
// destination counts as written by the issuing thread at the wait (so other threads need a barrier).
struct Pending { void* dst; const void* src; int bytes; int group; uint32_t pc; };
inline std::vector<Pending> pending[1024];  // per thread of the running block
inline int groups[1024];                     // groups committed by each thread

#ifdef EMU_CHECK
inline void set_flight(void* p, int bytes, bool on) {
    chk::Region* r;
    chk::Shadow* s = chk::shadow_of((uintptr_t)p, r);
    for (int g = 0; g < bytes / 4; g++) {
        uint8_t& st = r->st[s - r->sh + g];
        st = on ? (uint8_t)(st | chk::kInFlight) : (uint8_t)(st & ~chk::kInFlight);
    }
}
// who issued the copy in flight at a: for the report
inline std::string in_flight_who(uintptr_t a) {
    for (int t = 0; t < 1024; t++)
        for (const Pending& q : pending[t])
            if (a >= (uintptr_t)q.dst && a < (uintptr_t)q.dst + q.bytes)
                return "cp.async by " + chk::tid_str((uint32_t)t) + " at " + chk::where(q.pc) +
                       (q.group < 0 ? ", not yet committed" : ", group " + std::to_string(q.group) + " not yet waited for");
    return "a cp.async";
}
// a new block: the copies the last block left in flight are dropped with their poison
inline void new_block() {
    for (int t = 0; t < 1024; t++) {
        for (const Pending& q : pending[t]) set_flight(q.dst, q.bytes, false);
        pending[t].clear();
        groups[t] = 0;
    }
}
#endif

__attribute__((noinline)) inline void cp_async(void* dst, const void* src, int bytes) {
    EMU_RUNTIME;
    uint32_t pc = EMU_PTX_SITE();
    (void)pc;
#ifdef EMU_CHECK
    if (!chk::in_flight_who) { chk::in_flight_who = in_flight_who; chk::block_start_hook = new_block; }
    chk::Region* r;
    chk::shadow_of((uintptr_t)dst, r);
    if (!r || r == &chk::arena)
        chk::report("cp.async in kernel %s at %s: destination %p is not shared memory", chk::kernel_name,
                    chk::where(pc).c_str(), dst);
    chk::kernel_access((uintptr_t)src, (unsigned)bytes, false, false, true, pc);
    chk::kernel_access((uintptr_t)dst, (unsigned)bytes, true, false, true, pc);  // bounds, alignment, races now
    set_flight(dst, bytes, true);
    pending[blk.current].push_back({dst, src, bytes, -1, pc});
#else
    memcpy(dst, src, bytes);
#endif
}
inline void cp_async_commit() {
#ifdef EMU_CHECK
    EMU_RUNTIME;
    int t = blk.current;
    for (Pending& q : pending[t]) if (q.group < 0) q.group = groups[t];
    groups[t]++;
#endif
}
// retire every group but the newest `keep` (keep < 0: everything, uncommitted copies too)
inline void cp_async_wait(int keep) {
#ifdef EMU_CHECK
    EMU_RUNTIME;
    int t = blk.current;
    auto& v = pending[t];
    std::vector<Pending> left;
    for (const Pending& q : v) {
        if (keep >= 0 && (q.group < 0 || q.group >= groups[t] - keep)) { left.push_back(q); continue; }
        set_flight(q.dst, q.bytes, false);
        memcpy(q.dst, q.src, q.bytes);
        chk::kernel_access((uintptr_t)q.dst, (unsigned)q.bytes, true, false, true, q.pc);
    }
    v.swap(left);
#else
    (void)keep;
#endif
}

}  // namespace ptx
}  // namespace emu
#undef EMU_PTX_SITE

#endif
