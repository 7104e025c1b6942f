// mma.h (emulator): nvcuda::wmma, the warp-level matrix multiply-accumulate API, for the 16x16x16
// shape with __nv_bfloat16 or __half inputs (row_major / col_major) and a float accumulator.
// A fragment is spread over the 32 lanes of a warp: each lane's `x[i]` is one element of the 16x16
// tile, at a (row, col) CUDA leaves unspecified. The plain emulator uses a simple order (lane l,
// element i -> flat index 8 l + i, row-major; __half A/B fragments hold 16 elements per lane, lanes l
// and l + 16 the same ones, as sm_80 has them); with EMU_CHECK (emucc --check) the mapping is a fixed
// scrambled permutation, so code that assumes one mapping gets wrong results. load/store touch only
// the calling lane's elements (so a tile written by other lanes needs a barrier first, as on a GPU);
// mma_sync is warp-collective: it exchanges fragments through a warp barrier, computes each D(m, n)
// as C(m, n) plus the products A(m, k) B(k, n) added in k order with fp32 fused multiply-adds.
#ifndef EMU_MMA_H
#define EMU_MMA_H
#include "emu_cuda.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
enum layout_t { mem_row_major, mem_col_major };

template <typename T, int size> struct __align__(8) __frag_base {
    enum { num_elements = size, num_storage_elements = size };
    typedef T element_type;
    typedef T storage_element_type;
    T x[size];
};

template <class Use, int m, int n, int k, class T, class Layout = void> class fragment;
#define EMU_WMMA_AB(T, N) \
    template <> class fragment<matrix_a, 16, 16, 16, T, row_major> : public __frag_base<T, N> {}; \
    template <> class fragment<matrix_a, 16, 16, 16, T, col_major> : public __frag_base<T, N> {}; \
    template <> class fragment<matrix_b, 16, 16, 16, T, row_major> : public __frag_base<T, N> {}; \
    template <> class fragment<matrix_b, 16, 16, 16, T, col_major> : public __frag_base<T, N> {};
EMU_WMMA_AB(__nv_bfloat16, 8)
EMU_WMMA_AB(__half, 16)
#undef EMU_WMMA_AB
template <> class fragment<accumulator, 16, 16, 16, float> : public __frag_base<float, 8> {};

}  // namespace wmma
}  // namespace nvcuda

namespace emu {
namespace wmma_impl {
using namespace nvcuda::wmma;

// kind 0: matrix_a (row m, col k), 1: matrix_b (row k, col n), 2: accumulator (row m, col n).
// flat[kind][s] is the tile position (16 row + col) of storage slot s = 8 lane + i (lanes 0..31,
// 8 elements each); 16-element fragments use slot 8 (lane % 16) + i % 8 + 128 (i / 8)... see slot().
struct Maps {
    unsigned char flat[3][256];
    unsigned char slot_of[3][256];  // inverse
    Maps() {
        for (int kind = 0; kind < 3; kind++) {
            for (int s = 0; s < 256; s++) flat[kind][s] = (unsigned char)s;
#ifdef EMU_CHECK
            uint32_t r = 0x9e3779b9u * (kind + 1);  // fixed scramble, different for A, B and C
            for (int s = 255; s > 0; s--) {
                r = r * 1664525u + 1013904223u;
                int j = (int)((r >> 8) % (uint32_t)(s + 1));
                unsigned char t = flat[kind][s]; flat[kind][s] = flat[kind][j]; flat[kind][j] = t;
            }
#endif
            for (int s = 0; s < 256; s++) slot_of[kind][flat[kind][s]] = (unsigned char)s;
        }
    }
};
inline const Maps& maps() {
    EMU_RUNTIME;
    static Maps m;
    return m;
}

template <class Use> constexpr int kind_of() { return std::is_same<Use, matrix_a>::value ? 0 : std::is_same<Use, matrix_b>::value ? 1 : 2; }

// The storage slot (0..255) of element i of `lane` for a fragment of `n` elements per lane.
inline int slot(int lane, int i, int n) { return n == 8 ? lane * 8 + i : (lane % 16) * 16 + i; }
// The tile position (row * 16 + col) of element i of the calling lane.
inline int pos(int kind, int i, int n) { return maps().flat[kind][slot(lane_id(), i, n)]; }

template <class T> inline void check_ptr(const T* p, unsigned ldm, const char* what) {
#ifdef EMU_CHECK
    if ((uintptr_t)p % 32 != 0 || (ldm * sizeof(T)) % 16 != 0) {
        fprintf(stderr, "cuda_emu: %s: pointer %p must be 32-byte aligned and ldm %u a multiple of %d elements\n",
                what, (const void*)p, ldm, (int)(16 / sizeof(T)));
        ::emu::report_exit();
    }
#else
    (void)p; (void)ldm; (void)what;
#endif
}

// Row-major tile position -> memory offset for a matrix stored row-major (or column-major) with ldm.
inline size_t offset(int p, unsigned ldm, bool row_major_mem) {
    int r = p / 16, c = p % 16;
    return row_major_mem ? (size_t)r * ldm + c : (size_t)c * ldm + r;
}

// mma_sync's exchange: every lane posts its fragments, a warp barrier, each lane computes its own
// D elements from everyone's A, B, C into a temporary, a second barrier (D may be C), then stores.
struct Posted { const void *a, *b, *c; };
inline Posted posted[32][32];  // [warp][lane]

}  // namespace wmma_impl
}  // namespace emu

namespace nvcuda {
namespace wmma {

template <class T> struct helper_traits { typedef T fill_argument_type; };
template <class T, int size>
inline void fill_fragment(__frag_base<T, size>& f, const typename helper_traits<T>::fill_argument_type& v) {
    for (int i = 0; i < size; i++) f.x[i] = v;
}

template <class Use, class T, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
    using F = fragment<Use, 16, 16, 16, T, L>;
    emu::wmma_impl::check_ptr(p, ldm, "wmma::load_matrix_sync");
    constexpr int kind = emu::wmma_impl::kind_of<Use>();
    for (int i = 0; i < (int)F::num_elements; i++)
        f.x[i] = p[emu::wmma_impl::offset(emu::wmma_impl::pos(kind, i, F::num_elements), ldm, std::is_same<L, row_major>::value)];
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t layout) {
    emu::wmma_impl::check_ptr(p, ldm, "wmma::load_matrix_sync");
    for (int i = 0; i < 8; i++) f.x[i] = p[emu::wmma_impl::offset(emu::wmma_impl::pos(2, i, 8), ldm, layout == mem_row_major)];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout) {
    emu::wmma_impl::check_ptr(p, ldm, "wmma::store_matrix_sync");
    for (int i = 0; i < 8; i++) p[emu::wmma_impl::offset(emu::wmma_impl::pos(2, i, 8), ldm, layout == mem_row_major)] = f.x[i];
}

template <class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    using namespace emu::wmma_impl;
    using FA = fragment<matrix_a, 16, 16, 16, T, LA>;
    using FB = fragment<matrix_b, 16, 16, 16, T, LB>;
    using FC = fragment<accumulator, 16, 16, 16, float>;
    int t = emu::blk.current, w = t / 32, lane = t % 32;
    if (w >= 32) emu::die("wmma: more than 32 warps in a block");
    posted[w][lane] = Posted{&a, &b, &c};
    emu::warp_exchange(0xffffffffu, 0, -1);  // every lane has posted
    const Maps& mp = maps();
    float out[8];
    {
    EMU_RUNTIME;  // reading the other lanes' fragments (their registers on a GPU) is not a memory access
    for (int i = 0; i < 8; i++) {
        int p = mp.flat[2][slot(lane, i, 8)], m = p / 16, n = p % 16;
        int sc = mp.slot_of[2][p];
        float acc = ((const FC*)posted[w][sc / 8].c)->x[sc % 8];
        for (int k = 0; k < 16; k++) {
            int sa = mp.slot_of[0][m * 16 + k], sb = mp.slot_of[1][k * 16 + n];
            // a slot s of a 16-element fragment lives in lane s / 16 (and s / 16 + 16), element s % 16
            float av = FA::num_elements == 8 ? (float)((const FA*)posted[w][sa / 8].a)->x[sa % 8]
                                             : (float)((const FA*)posted[w][sa / 16].a)->x[sa % 16];
            float bv = FB::num_elements == 8 ? (float)((const FB*)posted[w][sb / 8].b)->x[sb % 8]
                                             : (float)((const FB*)posted[w][sb / 16].b)->x[sb % 16];
            acc = fmaf(av, bv, acc);
        }
        out[i] = acc;
    }
    }
    emu::warp_exchange(0xffffffffu, 0, -1);  // every lane has read the others' fragments
    for (int i = 0; i < 8; i++) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda

#endif
