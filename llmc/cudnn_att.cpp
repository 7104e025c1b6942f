// The cuDNN SDPA glue (llmc/cudnn_att.h): forward and backward graphs over our qkv layout, built
// once per shape and cached, one shared workspace, one cuDNN handle. The only file that includes the
// cuDNN frontend (slow to compile: one translation unit, built once). nvcc compiles it against the
// real frontend (PyPI nvidia-cudnn-frontend, make deps) and emucc against the emulator's
// (dev/cuda_emu/include/cudnn_frontend.h), so the dims and strides below are checked by numbers.
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>
#include <cudnn_frontend.h>
#include "cudnn_att.h"

namespace fe = cudnn_frontend;

namespace {

// tensor uids: the variant pack of execute() names each tensor by these
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct Shape {
    int64_t B, T, NH, HS;
    bool operator<(const Shape& o) const { return std::tie(B, T, NH, HS) < std::tie(o.B, o.T, o.NH, o.HS); }
};

struct Plans { // either may still be null: built on first use
    std::shared_ptr<fe::graph::Graph> forward, backward;
};

cudnnHandle_t handle = nullptr;
std::map<Shape, Plans> cache;
void* workspace = nullptr;
int64_t workspace_bytes = 0;
std::string message; // the last error, returned as a C string

const char* error(const std::string& what) {
    message = what;
    return message.c_str();
}

// Strides of q, k and v (dims B, NH, T, HS) inside qkv (B, T, 3, NH, HS): one token row is 3 C wide.
std::vector<int64_t> qkv_stride(const Shape& s) {
    int64_t C = s.NH * s.HS;
    return {s.T * 3 * C, s.HS, 3 * C, 1};
}
// out and dout (B, T, NH, HS), seen as (B, NH, T, HS)
std::vector<int64_t> out_stride(const Shape& s) {
    int64_t C = s.NH * s.HS;
    return {s.T * C, s.HS, C, 1};
}
// lse (B, NH, T), seen as (B, NH, T, 1)
std::vector<int64_t> stats_stride(const Shape& s) { return {s.NH * s.T, s.T, 1, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, int64_t uid,
                                                    const Shape& s, std::vector<int64_t> stride) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({s.B, s.NH, s.T, s.HS})
                        .set_stride(stride));
}

// A graph over our qkv layout (BF16 in and out, fp32 inside) and its inputs Q, K, V.
struct QkvGraph {
    std::shared_ptr<fe::graph::Graph> g;
    std::shared_ptr<fe::graph::Tensor_attributes> Q, K, V;
};

QkvGraph new_graph(const Shape& s) {
    QkvGraph q;
    q.g = std::make_shared<fe::graph::Graph>();
    q.g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    q.Q = input(*q.g, "Q", UID_Q, s, qkv_stride(s));
    q.K = input(*q.g, "K", UID_K, s, qkv_stride(s));
    q.V = input(*q.g, "V", UID_V, s, qkv_stride(s));
    return q;
}

// validate, lower, pick a plan (heuristics mode A), build it; grows the workspace to its need.
const char* finish(fe::graph::Graph& g, const char* which) {
    fe::error_t e = g.validate();
    if (e.is_good()) { e = g.build_operation_graph(handle); }
    if (e.is_good()) { e = g.create_execution_plans({fe::HeurMode_t::A}); }
    if (e.is_good()) { e = g.check_support(handle); }
    if (e.is_good()) { e = g.build_plans(handle); }
    int64_t need = 0;
    if (e.is_good()) { e = g.get_workspace_size(need); }
    if (e.is_bad()) { return error(std::string("cuDNN ") + which + " graph: " + e.get_message()); }
    if (need > workspace_bytes) {
        // stream-ordered: cudaFree would wait for the whole device (a pending collective included)
        // outside the -wt deadline; the handle's stream orders the swap after the old workspace's users
        cudaStream_t stream = nullptr;
        cudnnGetStream(handle, &stream);
        if (workspace) { cudaFreeAsync(workspace, stream); }
        workspace = nullptr;
        if (cudaMallocAsync(&workspace, (size_t)need, stream) != cudaSuccess) {
            workspace_bytes = 0;
            return error("cuDNN workspace: cudaMalloc of " + std::to_string(need) + " bytes failed");
        }
        workspace_bytes = need;
    }
    return nullptr;
}

// Forward: O = softmax(scale Q K^T, causal) V and the stats (log-sum-exp) per query row.
const char* build_forward(const Shape& s, std::shared_ptr<fe::graph::Graph>& out) {
    auto [g, Q, K, V] = new_graph(s);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("attention_forward")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(1.0f / sqrtf((float)s.HS));
    auto [O, stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(UID_O).set_dim({s.B, s.NH, s.T, s.HS}).set_stride(out_stride(s));
    stats->set_output(true).set_uid(UID_STATS).set_data_type(fe::DataType_t::FLOAT)
        .set_dim({s.B, s.NH, s.T, 1}).set_stride(stats_stride(s));
    if (const char* err = finish(*g, "SDPA forward")) { return err; }
    out = g;
    return nullptr;
}

// Backward: dQ, dK, dV from Q, K, V, O, dO and the forward's stats.
const char* build_backward(const Shape& s, std::shared_ptr<fe::graph::Graph>& out) {
    auto [g, Q, K, V] = new_graph(s);
    auto O = input(*g, "O", UID_O, s, out_stride(s));
    auto dO = input(*g, "dO", UID_DO, s, out_stride(s));
    auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(UID_STATS)
                               .set_dim({s.B, s.NH, s.T, 1}).set_stride(stats_stride(s))
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("attention_backward")
                    .set_causal_mask(true)
                    .set_attn_scale(1.0f / sqrtf((float)s.HS));
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
    dQ->set_output(true).set_uid(UID_DQ).set_dim({s.B, s.NH, s.T, s.HS}).set_stride(qkv_stride(s));
    dK->set_output(true).set_uid(UID_DK).set_dim({s.B, s.NH, s.T, s.HS}).set_stride(qkv_stride(s));
    dV->set_output(true).set_uid(UID_DV).set_dim({s.B, s.NH, s.T, s.HS}).set_stride(qkv_stride(s));
    if (const char* err = finish(*g, "SDPA backward")) { return err; }
    out = g;
    return nullptr;
}

// The shape's forward or backward graph (each built on its first use: sampling's forward-only shapes
// never build a backward) on the handle, bound to `stream`.
const char* graph_for(const Shape& s, bool backward, cudaStream_t stream, fe::graph::Graph** graph) {
    if (!handle) {
        cudnnStatus_t st = cudnnCreate(&handle);
        if (st != CUDNN_STATUS_SUCCESS) { return error(std::string("cudnnCreate: ") + cudnnGetErrorString(st)); }
    }
    cudnnStatus_t st = cudnnSetStream(handle, stream);
    if (st != CUDNN_STATUS_SUCCESS) { return error(std::string("cudnnSetStream: ") + cudnnGetErrorString(st)); }
    Plans& p = cache[s];
    std::shared_ptr<fe::graph::Graph>& g = backward ? p.backward : p.forward;
    if (!g) {
        if (const char* err = backward ? build_backward(s, g) : build_forward(s, g)) { return err; }
    }
    *graph = g.get();
    return nullptr;
}

const char* run(const fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, const char* which) {
    fe::error_t e = g.execute(handle, pack, workspace);
    if (e.is_bad()) { return error(std::string("cuDNN ") + which + " execute: " + e.get_message()); }
    return nullptr;
}

Shape shape_of(int B, int T, int C, int NH) { return {B, T, NH, C / NH}; }

} // namespace

const char* cudnn_att_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int C, int NH,
                              cudaStream_t stream) {
    fe::graph::Graph* g = nullptr;
    if (const char* err = graph_for(shape_of(B, T, C, NH), false, stream, &g)) { return err; }
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, (void*)qkv}, {UID_K, (void*)(qkv + C)}, {UID_V, (void*)(qkv + 2 * C)}, {UID_O, out}, {UID_STATS, lse}};
    return run(*g, pack, "SDPA forward");
}

const char* cudnn_att_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const __nv_bfloat16* out, const float* lse, int B, int T, int C, int NH,
                               cudaStream_t stream) {
    fe::graph::Graph* g = nullptr;
    if (const char* err = graph_for(shape_of(B, T, C, NH), true, stream, &g)) { return err; }
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, (void*)qkv},         {UID_K, (void*)(qkv + C)},  {UID_V, (void*)(qkv + 2 * C)},
        {UID_O, (void*)out},         {UID_DO, (void*)dout},      {UID_STATS, (void*)lse},
        {UID_DQ, (void*)dqkv},       {UID_DK, (void*)(dqkv + C)}, {UID_DV, (void*)(dqkv + 2 * C)}};
    return run(*g, pack, "SDPA backward");
}

void cudnn_att_free(void) {
    cache.clear();
    if (workspace) { cudaFree(workspace); }
    workspace = nullptr;
    workspace_bytes = 0;
    if (handle) { cudnnDestroy(handle); }
    handle = nullptr;
}
