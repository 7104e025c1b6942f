// ptx.cuh: device functions wrapping the tensor-core and async-copy PTX instructions (mma.sync
// m16n8k16, ldmatrix, cp.async) and explicit shared loads/stores, with their per-thread layouts.
// nvcc: inline PTX (sm_80 and later). emucc: the emulator's implementations (dev/cuda_emu/include/
// emu_ptx.h), which follow the same layouts and, under --check, poison cp.async destinations until
// their wait and count shared-memory bank conflicts (docs/emulator.md).
//
// Notation for the layouts, from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
// type", "ldmatrix"), restated: lane = threadIdx.x % 32, g = lane / 4 (the lane's group, 0..7),
// t = lane % 4 (its place in the group). A 32-bit register holding two 16-bit elements holds the
// lower-indexed one in its low half.
#pragma once
#include <cstdint>
#ifdef EMU_CUDA
#include "emu_ptx.h"
// always inlined, so that the emulator's report names the calling kernel line
#define PTX_FN inline __attribute__((always_inline))
#else
#define PTX_FN __device__ __forceinline__
// the 32-bit shared-window address that PTX's .shared state space takes
PTX_FN uint32_t ptx_smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
#endif

// ---- mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: D (16x8) = A (16x16) B (16x8) + C ----
// Warp-collective: all 32 lanes call it with their fragments (shape of the warp's tile: m16 n8 k16).
//   a[4]: A (m x k), 8 elements per lane: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//         a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   b[2]: B (k x n), 4 elements per lane: b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
//   c[4], d[4]: fp32, c[0], c[1] = C[g][2t, 2t+1]; c[2], c[3] = C[g+8][2t, 2t+1]; d likewise (may alias c)
PTX_FN void ptx_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#ifdef EMU_CUDA
    emu::ptx::mma_16816(d, a, b, c, true);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}
// the same with f16 inputs (same layouts)
PTX_FN void ptx_mma_f16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#ifdef EMU_CUDA
    emu::ptx::mma_16816(d, a, b, c, false);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// ---- ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 ----
// Warp-collective. Loads 1, 2 or 4 matrices of 8x8 16-bit elements from shared memory: lanes
// 8j..8j+7 give the addresses of rows 0..7 of matrix j (16 bytes each, 16-byte aligned; the other
// lanes' addresses are ignored). r[j] receives from matrix j the pair (row g; cols 2t, 2t+1), with
// .trans the pair (rows 2t, 2t+1; col g). So .x4 of a row-major 16x16 tile (lanes 0-15: rows 0-15 at
// col 0, lanes 16-31: rows 0-15 at col 8) gives the mma A fragment, and .x2.trans of a row-major
// 16x8 k x n tile (lanes 0-15: rows k = 0..15) the B fragment.
PTX_FN void ptx_ldmatrix_x1(uint32_t r[1], const void* row) {
#ifdef EMU_CUDA
    emu::ptx::ldmatrix(r, 1, false, row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(ptx_smem(row)));
#endif
}
PTX_FN void ptx_ldmatrix_x2(uint32_t r[2], const void* row) {
#ifdef EMU_CUDA
    emu::ptx::ldmatrix(r, 2, false, row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(ptx_smem(row)));
#endif
}
PTX_FN void ptx_ldmatrix_x4(uint32_t r[4], const void* row) {
#ifdef EMU_CUDA
    emu::ptx::ldmatrix(r, 4, false, row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ptx_smem(row)));
#endif
}
PTX_FN void ptx_ldmatrix_x1_trans(uint32_t r[1], const void* row) {
#ifdef EMU_CUDA
    emu::ptx::ldmatrix(r, 1, true, row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(ptx_smem(row)));
#endif
}
PTX_FN void ptx_ldmatrix_x2_trans(uint32_t r[2], const void* row) {
#ifdef EMU_CUDA
    emu::ptx::ldmatrix(r, 2, true, row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(ptx_smem(row)));
#endif
}
PTX_FN void ptx_ldmatrix_x4_trans(uint32_t r[4], const void* row) {
#ifdef EMU_CUDA
    emu::ptx::ldmatrix(r, 4, true, row);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(ptx_smem(row)));
#endif
}

// ---- cp.async: global -> shared copies that complete asynchronously ----
// ptx_cp_async_cg16: 16 bytes, cached in L2 only (.cg); ptx_cp_async_ca<N>: N = 4, 8 or 16 bytes
// through L1 (.ca). Both addresses N-byte aligned. The copy is complete (for the issuing thread) only
// after a ptx_cp_async_wait that retires its group; other threads need a __syncthreads after that.
PTX_FN void ptx_cp_async_cg16(void* smem_dst, const void* gmem_src) {
#ifdef EMU_CUDA
    emu::ptx::cp_async(smem_dst, gmem_src, 16);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(ptx_smem(smem_dst)), "l"(gmem_src) : "memory");
#endif
}
template <int N> PTX_FN void ptx_cp_async_ca(void* smem_dst, const void* gmem_src) {
    static_assert(N == 4 || N == 8 || N == 16, "cp.async.ca copies 4, 8 or 16 bytes");
#ifdef EMU_CUDA
    emu::ptx::cp_async(smem_dst, gmem_src, N);
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" :: "r"(ptx_smem(smem_dst)), "l"(gmem_src), "n"(N) : "memory");
#endif
}
// cp.async.commit_group: the thread's cp.async issued since the last commit form one group
PTX_FN void ptx_cp_async_commit() {
#ifdef EMU_CUDA
    emu::ptx::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// cp.async.wait_group N: wait until at most N of the thread's most recent groups are still pending
template <int N> PTX_FN void ptx_cp_async_wait() {
#ifdef EMU_CUDA
    emu::ptx::cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}
// cp.async.wait_all: every cp.async of the thread, committed or not, is complete
PTX_FN void ptx_cp_async_wait_all() {
#ifdef EMU_CUDA
    emu::ptx::cp_async_wait(-1);
#else
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// ---- explicit shared loads and stores (ld/st.shared of 4, 8, 16 bytes) ----
// Plain accesses; written through these helpers, the emulator's --check build sees them as one warp
// request and counts their bank conflicts (all 32 lanes must call them together).
PTX_FN uint32_t ptx_lds32(const void* p) {
#ifdef EMU_CUDA
    uint32_t v; emu::ptx::shared_access((void*)p, &v, 4, false); return v;
#else
    uint32_t v; asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(ptx_smem(p))); return v;
#endif
}
PTX_FN uint2 ptx_lds64(const void* p) {
#ifdef EMU_CUDA
    uint2 v; emu::ptx::shared_access((void*)p, &v, 8, false); return v;
#else
    uint2 v; asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(ptx_smem(p))); return v;
#endif
}
PTX_FN uint4 ptx_lds128(const void* p) {
#ifdef EMU_CUDA
    uint4 v; emu::ptx::shared_access((void*)p, &v, 16, false); return v;
#else
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(ptx_smem(p)));
    return v;
#endif
}
PTX_FN void ptx_sts32(void* p, uint32_t v) {
#ifdef EMU_CUDA
    emu::ptx::shared_access(p, &v, 4, true);
#else
    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(ptx_smem(p)), "r"(v) : "memory");
#endif
}
PTX_FN void ptx_sts128(void* p, uint4 v) {
#ifdef EMU_CUDA
    emu::ptx::shared_access(p, &v, 16, true);
#else
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" :: "r"(ptx_smem(p)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
#endif
}
