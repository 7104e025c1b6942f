// cudnn_frontend.h (emulator): the subset of the cuDNN frontend graph API (nvidia-cudnn-frontend 1.32,
// namespace cudnn_frontend::graph) that llmc/cudnn_att.cpp calls: tensors, SDPA forward (sdpa) and
// backward (sdpa_backward), the graph's life cycle, and execute() with a variant pack, computed on the
// CPU with fp32 accumulation from the bf16/fp16/fp32 tensors at the dims and strides the graph gives,
// so a wrong stride, scale, mask or stats layout in the glue gives wrong numbers.
// Attribute semantics (as the frontend documents them):
//   Tensor_attributes: dim and stride are 4-D (B, H, S, D) in elements; data type NOT_SET means the
//     graph's io type; uid names the tensor in the variant pack (unset: assigned by validate()).
//   SDPA: O = softmax(attn_scale Q K^T + mask) V per (b, h); attn_scale unset means 1 (no scaling);
//     set_causal_mask(true) = right bound 0, top-left diagonal: key j is visible to query i iff
//     j <= i (bottom-right: j <= i + S_kv - S_q); generate_stats(true) outputs Stats (B, H, S_q, 1)
//     fp32, the natural-log log-sum-exp of each row's scaled masked scores (max + ln sum exp).
//   SDPA backward: dQ, dK, dV from Q, K, V, O, dO and Stats: P = exp(scale Q K^T - Stats),
//     delta = rowsum(dO * O), dS = P (dO V^T - delta), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
// Checked where a GPU would fail or silently differ (each an error_t, never a crash):
//   life cycle in order (validate, build_operation_graph, create_execution_plans, check_support,
//   build_plans, then get_workspace_size/execute); every tensor 4-D with dims and strides set (the
//   real frontend infers an output's dims and strides when they are not set; here they must be),
//   positive, the D stride 1, 16-bit tensors' other strides multiples of 8 elements; no two elements
//   of one tensor at one address; Q/K/V/O/dO in bf16 or fp16, Stats fp32, compute fp32; batch and
//   heads equal across Q, K, V (no grouped-query attention here), D a multiple of 8 up to 256;
//   generate_stats set on the forward; uids unique; execute: a non-null pointer in the pack for every
//   tensor, 16-bit tensors 16-byte aligned, and the workspace when get_workspace_size asked for one.
// What it cannot know: which engine cuDNN picks, its speed, its own rounding (it sums in its own
// order and keeps P in bf16 for the tensor-core products; here P and dS stay fp32), and limits of
// real engines beyond these checks (architecture, sequence-length or layout support). The backward
// asks for B H S_q floats of workspace (delta) and uses them; plain builds refuse a workspace that does
// not lie inside one cudaMalloc allocation of at least that size (cuDNN would write past it); cuDNN's
// own size differs. Execute runs on the handle's stream (under
// --check after the stream's earlier work, as cuBLAS does here).
#ifndef EMU_CUDNN_FRONTEND_H
#define EMU_CUDNN_FRONTEND_H
#include <array>  // the standard headers first: emu_cuda.h defines CUDA keywords (__noinline__) as macros
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>
#include "cudnn.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

namespace cudnn_frontend {

enum class DataType_t { NOT_SET, FLOAT, DOUBLE, HALF, INT8, INT32, INT8x4, UINT8, UINT8x4, INT8x32, BFLOAT16, INT64 };
enum class HeurMode_t { A, B, FALLBACK, OPENSOURCE };
enum class BuildPlanPolicy_t { HEURISTICS_CHOICE, ALL };
enum class DiagonalAlignment_t { TOP_LEFT, BOTTOM_RIGHT };
enum class error_code_t {
    OK, ATTRIBUTE_NOT_SET, SHAPE_DEDUCTION_FAILED, INVALID_TENSOR_NAME, INVALID_VARIANT_PACK, GRAPH_NOT_SUPPORTED,
    GRAPH_EXECUTION_PLAN_CREATION_FAILED, GRAPH_EXECUTION_FAILED, HEURISTIC_QUERY_FAILED, UNSUPPORTED_GRAPH_FORMAT,
    CUDA_API_FAILED, CUDNN_BACKEND_API_FAILED, INVALID_CUDA_DEVICE, HANDLE_ERROR, INVALID_VALUE,
};

typedef struct [[nodiscard]] error_object {
    error_code_t code;
    std::string err_msg;
    error_object() : code(error_code_t::OK) {}
    error_object(error_code_t c, std::string m) : code(c), err_msg(std::move(m)) {}
    error_code_t get_code() { return code; }
    std::string get_message() { return err_msg; }
    bool is_good() const { return code == error_code_t::OK; }
    bool is_bad() const { return !is_good(); }
} error_t;

namespace graph {

class Tensor_attributes {
   public:
    using uid_t = int64_t;
    std::string name;
    std::vector<int64_t> dim, stride;
    DataType_t data_type = DataType_t::NOT_SET;
    int64_t uid = 0;
    bool uid_assigned = false, is_output = false, is_virtual = false;

    Tensor_attributes& set_name(std::string const& v) { name = v; return *this; }
    Tensor_attributes& set_dim(std::vector<int64_t> const& v) { dim = v; return *this; }
    Tensor_attributes& set_stride(std::vector<int64_t> const& v) { stride = v; return *this; }
    Tensor_attributes& set_data_type(DataType_t v) { data_type = v; return *this; }
    Tensor_attributes& set_uid(uid_t v) { uid = v; uid_assigned = true; return *this; }
    Tensor_attributes& set_output(bool v) { is_output = v; is_virtual = !v; return *this; }
    Tensor_attributes& set_is_virtual(bool v) { is_virtual = v; return *this; }
    std::vector<int64_t> const& get_dim() const { return dim; }
    std::vector<int64_t> const& get_stride() const { return stride; }
    uid_t get_uid() const { return uid; }
    DataType_t get_data_type() const { return data_type; }
    std::string const& get_name() const { return name; }
};
using Tensor_t = std::shared_ptr<Tensor_attributes>;

// the mask and scale attributes both SDPA directions share
template <class Self> class SDPA_common {
   public:
    std::string name;
    std::optional<float> attn_scale_value;
    std::optional<int64_t> left_bound, right_bound;
    DiagonalAlignment_t diagonal_alignment = DiagonalAlignment_t::TOP_LEFT;
    Self& self() { return static_cast<Self&>(*this); }
    Self& set_name(std::string const& v) { name = v; return self(); }
    Self& set_attn_scale(float v) { attn_scale_value = v; return self(); }
    Self& set_diagonal_alignment(DiagonalAlignment_t v) { diagonal_alignment = v; return self(); }
    Self& set_diagonal_band_left_bound(int v) { left_bound = v; return self(); }
    Self& set_diagonal_band_right_bound(int v) { right_bound = v; return self(); }
    Self& set_causal_mask(bool v) {
        if (v) { diagonal_alignment = DiagonalAlignment_t::TOP_LEFT; right_bound = 0; }
        return self();
    }
    Self& set_causal_mask_bottom_right(bool v) {
        if (v) { diagonal_alignment = DiagonalAlignment_t::BOTTOM_RIGHT; right_bound = 0; }
        return self();
    }
};

class SDPA_attributes : public SDPA_common<SDPA_attributes> {
   public:
    std::optional<bool> generate_stats;
    SDPA_attributes& set_generate_stats(bool v) { generate_stats = v; return *this; }
};

class SDPA_backward_attributes : public SDPA_common<SDPA_backward_attributes> {
   public:
    bool deterministic = false;
    SDPA_backward_attributes& set_deterministic_algorithm(bool v) { deterministic = v; return *this; }
};

namespace emu_sdpa {
// slots of a graph's tensors: Q K V O Stats (forward) and dO dQ dK dV (backward)
enum Slot { Q, K, V, O, STATS, DO, DQ, DK, DV, NSLOTS };
inline const char* slot_name(int s) {
    static const char* n[NSLOTS] = {"Q", "K", "V", "O", "Stats", "dO", "dQ", "dK", "dV"};
    return n[s];
}
inline error_t err(error_code_t c, std::string m) { return error_t(c, "cuda_emu cuDNN frontend: " + m); }

// A view of a tensor in device memory: element (b, h, s, d) at p + the dot product with stride.
struct View {
    const void* p;
    DataType_t t;
    int64_t st[4];
};
EMU_UNCHECKED inline float load(const View& v, int64_t b, int64_t h, int64_t s, int64_t d) {
    int64_t i = b * v.st[0] + h * v.st[1] + s * v.st[2] + d * v.st[3];
    if (v.t == DataType_t::FLOAT) return ((const float*)v.p)[i];
    if (v.t == DataType_t::HALF) return __half2float(((const __half*)v.p)[i]);
    return __bfloat162float(((const __nv_bfloat16*)v.p)[i]);
}
EMU_UNCHECKED inline void store(const View& v, int64_t b, int64_t h, int64_t s, int64_t d, float x) {
    int64_t i = b * v.st[0] + h * v.st[1] + s * v.st[2] + d * v.st[3];
    if (v.t == DataType_t::FLOAT) ((float*)v.p)[i] = x;
    else if (v.t == DataType_t::HALF) ((__half*)v.p)[i] = __float2half(x);
    else ((__nv_bfloat16*)v.p)[i] = __float2bfloat16(x);
}

struct Problem {
    int64_t B, H, Sq, Skv, D;
    float scale;
    int64_t right_bound;  // key j visible to query i iff j <= i + shift, shift = right bound (+ Skv - Sq)
    bool has_mask;
    int64_t last_key(int64_t i) const { return has_mask ? std::min(Skv - 1, i + right_bound) : Skv - 1; }
};

// One head's rows of a tensor, loaded as fp32 (rows x D).
EMU_UNCHECKED inline std::vector<float> rows(const View& v, int64_t b, int64_t h, int64_t n, int64_t D) {
    std::vector<float> x((size_t)(n * D));
    for (int64_t s = 0; s < n; s++)
        for (int64_t d = 0; d < D; d++) x[(size_t)(s * D + d)] = load(v, b, h, s, d);
    return x;
}
inline float dot(const float* a, const float* b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

EMU_UNCHECKED inline void forward(const Problem& P, const View* v) {
    EMU_RUNTIME;
    std::vector<float> sc((size_t)P.Skv), o((size_t)P.D);
    for (int64_t b = 0; b < P.B; b++)
        for (int64_t h = 0; h < P.H; h++) {
            std::vector<float> q = rows(v[Q], b, h, P.Sq, P.D), k = rows(v[K], b, h, P.Skv, P.D);
            std::vector<float> vv = rows(v[V], b, h, P.Skv, P.D);
            for (int64_t i = 0; i < P.Sq; i++) {
                int64_t last = P.last_key(i);
                float m = -INFINITY, l = 0.0f;
                for (int64_t j = 0; j <= last; j++) {
                    sc[(size_t)j] = P.scale * dot(&q[(size_t)(i * P.D)], &k[(size_t)(j * P.D)], P.D);
                    m = std::max(m, sc[(size_t)j]);
                }
                for (int64_t j = 0; j <= last; j++) l += expf(sc[(size_t)j] - m);
                float lse = last >= 0 ? m + logf(l) : -INFINITY;
                std::fill(o.begin(), o.end(), 0.0f);
                for (int64_t j = 0; j <= last; j++) {
                    float p = expf(sc[(size_t)j] - lse);
                    for (int64_t d = 0; d < P.D; d++) o[(size_t)d] += p * vv[(size_t)(j * P.D + d)];
                }
                for (int64_t d = 0; d < P.D; d++) store(v[O], b, h, i, d, o[(size_t)d]);
                if (v[STATS].p) store(v[STATS], b, h, i, 0, lse);
            }
        }
}

// ws: B H Sq floats (delta = rowsum(dO * O)), in the caller's workspace
EMU_UNCHECKED inline void backward(const Problem& P, const View* v, float* ws) {
    EMU_RUNTIME;
    View delta{ws, DataType_t::FLOAT, {P.H * P.Sq, P.Sq, 1, 1}};
    for (int64_t b = 0; b < P.B; b++)
        for (int64_t h = 0; h < P.H; h++) {
            std::vector<float> q = rows(v[Q], b, h, P.Sq, P.D), k = rows(v[K], b, h, P.Skv, P.D);
            std::vector<float> vv = rows(v[V], b, h, P.Skv, P.D), o = rows(v[O], b, h, P.Sq, P.D);
            std::vector<float> dout = rows(v[DO], b, h, P.Sq, P.D);
            std::vector<float> dq((size_t)(P.Sq * P.D)), dk((size_t)(P.Skv * P.D)), dv((size_t)(P.Skv * P.D));
            for (int64_t i = 0; i < P.Sq; i++)
                store(delta, b, h, i, 0, dot(&dout[(size_t)(i * P.D)], &o[(size_t)(i * P.D)], P.D));
            for (int64_t i = 0; i < P.Sq; i++) {
                float lse = load(v[STATS], b, h, i, 0), di = load(delta, b, h, i, 0);
                const float *qi = &q[(size_t)(i * P.D)], *doi = &dout[(size_t)(i * P.D)];
                for (int64_t j = 0; j <= P.last_key(i); j++) {
                    const float *kj = &k[(size_t)(j * P.D)], *vj = &vv[(size_t)(j * P.D)];
                    float p = expf(P.scale * dot(qi, kj, P.D) - lse);
                    float ds = p * (dot(doi, vj, P.D) - di) * P.scale;
                    for (int64_t d = 0; d < P.D; d++) {
                        dq[(size_t)(i * P.D + d)] += ds * kj[d];
                        dk[(size_t)(j * P.D + d)] += ds * qi[d];
                        dv[(size_t)(j * P.D + d)] += p * doi[d];
                    }
                }
            }
            for (int64_t s = 0; s < P.Sq; s++)
                for (int64_t d = 0; d < P.D; d++) store(v[DQ], b, h, s, d, dq[(size_t)(s * P.D + d)]);
            for (int64_t s = 0; s < P.Skv; s++)
                for (int64_t d = 0; d < P.D; d++) {
                    store(v[DK], b, h, s, d, dk[(size_t)(s * P.D + d)]);
                    store(v[DV], b, h, s, d, dv[(size_t)(s * P.D + d)]);
                }
        }
}

// [p, p + n) inside one live cudaMalloc allocation (plain builds keep the table; --check builds trust it)
inline bool workspace_fits(const void* p, int64_t n) {
#ifdef EMU_CHECK
    (void)p; (void)n;
    return true;
#else
    auto& a = emu::allocations();
    auto it = a.upper_bound((void*)p);
    if (it == a.begin()) return false;
    --it;
    return (const char*)p + n <= (const char*)it->first + it->second;
#endif
}

inline bool is16(DataType_t t) { return t == DataType_t::BFLOAT16 || t == DataType_t::HALF; }

// dims and strides set, 4-D, positive, D stride 1, 16-bit strides multiples of 8, no aliasing
inline error_t check_layout(const Tensor_attributes& t, bool stats) {
    std::string n = "tensor '" + t.name + "'";
    if (t.dim.size() != 4 || t.stride.size() != 4)
        return err(error_code_t::ATTRIBUTE_NOT_SET, n + ": dims and strides must both be set, 4-D (B, H, S, D)");
    for (int i = 0; i < 4; i++)
        if (t.dim[i] <= 0 || t.stride[i] <= 0) return err(error_code_t::INVALID_VALUE, n + ": dims and strides must be positive");
    if (!stats && t.stride[3] != 1) return err(error_code_t::GRAPH_NOT_SUPPORTED, n + ": the D (last) stride must be 1");
    if (is16(t.data_type))
        for (int i = 0; i < 3; i++)
            if (t.stride[i] % 8) return err(error_code_t::GRAPH_NOT_SUPPORTED, n + ": 16-bit strides must be multiples of 8 elements");
    int ord[4] = {0, 1, 2, 3};  // dims by increasing stride: each must step past the whole of the smaller ones
    std::sort(ord, ord + 4, [&](int a, int b) { return t.stride[a] < t.stride[b]; });
    int64_t span = 1;
    for (int i = 0; i < 4; i++) {
        int d = ord[i];
        if (t.dim[d] > 1 && t.stride[d] < span)
            return err(error_code_t::INVALID_VALUE, n + ": strides make two elements share one address");
        if (t.dim[d] > 1) span = t.stride[d] * t.dim[d];
    }
    return {};
}
}  // namespace emu_sdpa

class Graph {
    enum Stage { NEW, VALIDATED, BUILT, PLANNED, SUPPORTED, READY };
    Stage stage = NEW;
    DataType_t io = DataType_t::NOT_SET, intermediate = DataType_t::NOT_SET, compute = DataType_t::NOT_SET;
    bool backward_op = false, has_op = false;
    float scale = 1.0f;
    std::optional<bool> stats_wanted;
    std::optional<int64_t> left_bound, right_bound;
    DiagonalAlignment_t alignment = DiagonalAlignment_t::TOP_LEFT;
    Tensor_t slot[emu_sdpa::NSLOTS];
    emu_sdpa::Problem problem{};

    error_t order(Stage need, const char* call) {
        if (stage != need) return emu_sdpa::err(error_code_t::INVALID_VALUE, std::string(call) + " called out of order");
        stage = (Stage)(need + 1);
        return {};
    }
    template <class A> void take(A const& a) {
        scale = a.attn_scale_value.value_or(1.0f);
        left_bound = a.left_bound;
        right_bound = a.right_bound;
        alignment = a.diagonal_alignment;
        has_op = true;
    }
    Tensor_t output(std::string const& name) {
        auto t = std::make_shared<Tensor_attributes>();
        t->name = name;
        t->is_virtual = true;
        return t;
    }
    error_t check_tensors();
    error_t check_shapes();

   public:
    Graph& set_io_data_type(DataType_t t) { io = t; return *this; }
    Graph& set_intermediate_data_type(DataType_t t) { intermediate = t; return *this; }
    Graph& set_compute_data_type(DataType_t t) { compute = t; return *this; }

    Tensor_t tensor(Tensor_attributes const& t) { return std::make_shared<Tensor_attributes>(t); }

    std::array<Tensor_t, 2> sdpa(Tensor_t q, Tensor_t k, Tensor_t v, SDPA_attributes a) {
        using namespace emu_sdpa;
        take(a);
        stats_wanted = a.generate_stats;
        slot[Q] = q; slot[K] = k; slot[V] = v;
        slot[O] = output(a.name + "::O");
        slot[STATS] = a.generate_stats.value_or(false) ? output(a.name + "::Stats") : nullptr;
        return {slot[O], slot[STATS]};
    }
    std::array<Tensor_t, 3> sdpa_backward(Tensor_t q, Tensor_t k, Tensor_t v, Tensor_t o, Tensor_t dO, Tensor_t stats,
                                          SDPA_backward_attributes a) {
        using namespace emu_sdpa;
        take(a);
        backward_op = true;
        slot[Q] = q; slot[K] = k; slot[V] = v; slot[O] = o; slot[DO] = dO; slot[STATS] = stats;
        slot[DQ] = output(a.name + "::dQ"); slot[DK] = output(a.name + "::dK"); slot[DV] = output(a.name + "::dV");
        return {slot[DQ], slot[DK], slot[DV]};
    }

    error_t validate() {
        if (auto e = order(NEW, "validate()"); e.is_bad()) return e;
        if (!has_op) return emu_sdpa::err(error_code_t::INVALID_VALUE, "the graph has no SDPA operation");
        if (auto e = check_tensors(); e.is_bad()) return e;
        return check_shapes();
    }
    error_t build_operation_graph(cudnnHandle_t h) {
        if (!h) return emu_sdpa::err(error_code_t::HANDLE_ERROR, "build_operation_graph: null cuDNN handle");
        return order(VALIDATED, "build_operation_graph()");
    }
    error_t create_execution_plans(std::vector<HeurMode_t> const& modes) {
        if (modes.empty()) return emu_sdpa::err(error_code_t::HEURISTIC_QUERY_FAILED, "no heuristics mode given");
        return order(BUILT, "create_execution_plans()");
    }
    error_t check_support(cudnnHandle_t) { return order(PLANNED, "check_support()"); }
    error_t check_support() { return order(PLANNED, "check_support()"); }
    error_t build_plans(cudnnHandle_t, BuildPlanPolicy_t = BuildPlanPolicy_t::HEURISTICS_CHOICE, bool = false) {
        return order(SUPPORTED, "build_plans()");
    }
    error_t build_plans(BuildPlanPolicy_t = BuildPlanPolicy_t::HEURISTICS_CHOICE, bool = false) {
        return order(SUPPORTED, "build_plans()");
    }
    int64_t workspace_bytes() const { return backward_op ? problem.B * problem.H * problem.Sq * (int64_t)sizeof(float) : 0; }
    error_t get_workspace_size(int64_t& bytes) const {
        if (stage != READY) return emu_sdpa::err(error_code_t::INVALID_VALUE, "get_workspace_size() before build_plans()");
        bytes = workspace_bytes();
        return {};
    }
    error_t execute(cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, void* workspace) const;
    error_t execute(cudnnHandle_t h, std::unordered_map<Tensor_t, void*>& pack, void* workspace) const {
        std::unordered_map<int64_t, void*> by_uid;
        for (auto const& [t, p] : pack) by_uid.emplace(t->uid, p);
        return execute(h, by_uid, workspace);
    }
};

// types, uids (unset: assigned), outputs non-virtual, layouts
inline error_t Graph::check_tensors() {
    using namespace emu_sdpa;
    if (compute != DataType_t::FLOAT) return err(error_code_t::GRAPH_NOT_SUPPORTED, "SDPA needs compute data type FLOAT");
    int64_t next_uid = 1000000;
    std::vector<int64_t> seen;
    for (int s = 0; s < NSLOTS; s++) {
        Tensor_t t = slot[s];
        if (!t) {
            if (s == STATS && (backward_op || stats_wanted.value_or(false))) return err(error_code_t::ATTRIBUTE_NOT_SET, "Stats missing");
            continue;
        }
        if (t->name.empty()) t->name = slot_name(s);
        if (t->data_type == DataType_t::NOT_SET) t->data_type = io;
        bool is_out = backward_op ? s >= DQ : (s == O || s == STATS);
        if (is_out && t->is_virtual)
            return err(error_code_t::INVALID_VALUE, "output '" + t->name + "' is virtual: call set_output(true)");
        if (s == STATS ? t->data_type != DataType_t::FLOAT : !is16(t->data_type))
            return err(error_code_t::GRAPH_NOT_SUPPORTED, "tensor '" + t->name + (s == STATS ? "' must be FLOAT" : "' must be BFLOAT16 or HALF"));
        if (!t->uid_assigned) t->set_uid(next_uid++);
        if (std::find(seen.begin(), seen.end(), t->uid) != seen.end())
            return err(error_code_t::INVALID_VALUE, "uid " + std::to_string(t->uid) + " used twice");
        seen.push_back(t->uid);
        if (auto e = check_layout(*t, s == STATS); e.is_bad()) return e;
    }
    return {};
}

inline error_t Graph::check_shapes() {
    using namespace emu_sdpa;
    if (!backward_op && !stats_wanted.has_value())
        return err(error_code_t::ATTRIBUTE_NOT_SET, "SDPA: generate_stats (is_inference) not set");
    if (left_bound.has_value()) return err(error_code_t::GRAPH_NOT_SUPPORTED, "a left bound (sliding window) is not emulated");
    auto& q = slot[Q]->dim;
    auto& k = slot[K]->dim;
    auto& v = slot[V]->dim;
    int64_t B = q[0], H = q[1], Sq = q[2], Skv = k[2], D = q[3];
    if (k[0] != B || v[0] != B || k[1] != H || v[1] != H || v[2] != Skv || k[3] != D || v[3] != D)
        return err(error_code_t::SHAPE_DEDUCTION_FAILED, "Q, K, V dims disagree (batch, heads, kv length, head size)");
    if (D % 8 || D > 256) return err(error_code_t::GRAPH_NOT_SUPPORTED, "head size D must be a multiple of 8 up to 256");
    std::vector<int64_t> qshape = {B, H, Sq, D}, kshape = {B, H, Skv, D}, sshape = {B, H, Sq, 1};
    const std::vector<int64_t>* want[NSLOTS] = {&qshape, &kshape, &kshape, &qshape, &sshape, &qshape, &qshape, &kshape, &kshape};
    for (int s = 0; s < NSLOTS; s++)
        if (slot[s] && slot[s]->dim != *want[s])
            return err(error_code_t::SHAPE_DEDUCTION_FAILED, "tensor '" + slot[s]->name + "' has the wrong dims for this SDPA");
    problem = Problem{B, H, Sq, Skv, D, scale, 0, right_bound.has_value()};
    if (right_bound)
        problem.right_bound = *right_bound + (alignment == DiagonalAlignment_t::BOTTOM_RIGHT ? Skv - Sq : 0);
    return {};
}

inline error_t Graph::execute(cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, void* workspace) const {
    using namespace emu_sdpa;
    if (stage != READY) return err(error_code_t::INVALID_VALUE, "execute() before build_plans()");
    if (!h) return err(error_code_t::HANDLE_ERROR, "execute: null cuDNN handle");
    View view[NSLOTS] = {};
    for (int s = 0; s < NSLOTS; s++) {
        Tensor_t t = slot[s];
        if (!t) continue;
        auto it = pack.find(t->uid);
        if (it == pack.end() || !it->second)
            return err(error_code_t::INVALID_VARIANT_PACK, "no pointer for tensor '" + t->name + "' (uid " + std::to_string(t->uid) + ")");
        if (is16(t->data_type) && (uintptr_t)it->second % 16)
            return err(error_code_t::GRAPH_EXECUTION_FAILED, "tensor '" + t->name + "' is not 16-byte aligned");
        view[s] = View{it->second, t->data_type, {t->stride[0], t->stride[1], t->stride[2], t->stride[3]}};
    }
    if (workspace_bytes() > 0 && !workspace) return err(error_code_t::INVALID_VALUE, "execute: the graph needs a workspace");
    if (workspace_bytes() > 0 && !workspace_fits(workspace, workspace_bytes()))
        return err(error_code_t::INVALID_VALUE, "execute: the workspace is not " + std::to_string(workspace_bytes()) +
                                                    " bytes of one cudaMalloc allocation");
    Problem p = problem;
    bool bwd = backward_op;
#ifdef EMU_CHECK
    auto run = [&] {
        if (bwd) backward(p, view, (float*)workspace);
        else forward(p, view);
    };
    emu::chk::run_now(h->stream, "a cuDNN SDPA graph", run);
#else
    // plain builds: behind whatever the stream still owes (a collective still running), as on a GPU
    emu::enqueue(h->stream, [p, view, bwd, workspace] {
        if (bwd) backward(p, view, (float*)workspace);
        else forward(p, view);
    });
#endif
    return {};
}

}  // namespace graph
}  // namespace cudnn_frontend
#endif
