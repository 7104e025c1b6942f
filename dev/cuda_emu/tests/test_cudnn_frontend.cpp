// test_cudnn_frontend.cpp: the emulator's cuDNN frontend subset (include/cudnn_frontend.h). Numbers:
// SDPA forward (O, Stats) and backward (dQ, dK, dV) against a naive loop in double, with and without
// the causal mask, the scale unset (1) and set, Q/K/V read at interleaved strides (one (B, S, 3, H, D)
// buffer) and O at its own. Checks: each rule of the emulated frontend refuses its planted mistake with
// its message (missing generate_stats, a virtual output, aliasing strides, a D stride other than 1,
// Stats not fp32, a uid used twice, life-cycle order, a pointer missing from the variant pack, a
// misaligned pointer, no or a short workspace for the backward), and the same graph without the
// mistake runs.
// Emulator only: the real frontend is exercised through llmc/cudnn_att.cpp on a GPU.
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
#include <cudnn_frontend.h> // after the standard headers (a .cpp: host code only, see the glue)
#include <cuda_bf16.h>
#include "check.h"

namespace fe = cudnn_frontend;
using Graph = fe::graph::Graph;
using T_t = std::shared_ptr<fe::graph::Tensor_attributes>;

static const int B = 2, H = 3, S = 7, D = 16, C = H * D;
static cudnnHandle_t handle;

// Q, K, V inside one (B, S, 3, H, D) buffer; O and dO (B, S, H, D); Stats (B, H, S, 1)
static std::vector<int64_t> qkv_stride() { return {S * 3 * C, D, 3 * C, 1}; }
static std::vector<int64_t> o_stride() { return {S * C, D, C, 1}; }
static std::vector<int64_t> dims() { return {B, H, S, D}; }

static T_t in(Graph& g, const char* name, int64_t uid, std::vector<int64_t> st) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims()).set_stride(st));
}

// Mistakes a forward graph can be built with (NONE: the correct graph).
enum Plant { NONE, NO_STATS_FLAG, VIRTUAL_O, ALIASING_O, D_STRIDE, STATS_BF16, UID_TWICE };

static std::shared_ptr<Graph> forward_graph(Plant plant, bool causal, float scale) {
    auto g = std::make_shared<Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16).set_compute_data_type(fe::DataType_t::FLOAT);
    auto q = in(*g, "Q", 1, qkv_stride()), k = in(*g, "K", 2, qkv_stride()), v = in(*g, "V", 3, qkv_stride());
    auto a = fe::graph::SDPA_attributes().set_name("f");
    if (plant != NO_STATS_FLAG) { a.set_generate_stats(true); }
    if (causal) { a.set_causal_mask(true); }
    if (scale != 1.0f) { a.set_attn_scale(scale); }
    auto [o, st] = g->sdpa(q, k, v, a);
    std::vector<int64_t> ostride = plant == ALIASING_O ? std::vector<int64_t>{S * C, D, 8, 1} : o_stride();
    if (plant == D_STRIDE) { ostride = {S * C * 2, D * 2, C * 2, 2}; }
    o->set_output(plant != VIRTUAL_O).set_uid(plant == UID_TWICE ? 1 : 4).set_dim(dims()).set_stride(ostride);
    if (st) {
        st->set_output(true).set_uid(5).set_dim({B, H, S, 1}).set_stride({H * S, S, 1, 1});
        st->set_data_type(plant == STATS_BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::FLOAT);
    }
    return g;
}

static std::string build(Graph& g) {
    fe::error_t e = g.validate();
    if (e.is_good()) { e = g.build_operation_graph(handle); }
    if (e.is_good()) { e = g.create_execution_plans({fe::HeurMode_t::A}); }
    if (e.is_good()) { e = g.check_support(); }
    if (e.is_good()) { e = g.build_plans(); }
    return e.is_good() ? "" : e.get_message();
}

static void expect_refusal(const char* what, const std::string& msg, const char* needle) {
    EXPECT(msg.find(needle) != std::string::npos, "%s: wanted an error containing '%s', got '%s'", what, needle,
           msg.c_str());
    if (msg.find(needle) != std::string::npos) { printf("ok   %-34s refused: %s\n", what, msg.c_str()); }
}

static float bf(float x) { return __bfloat162float(__float2bfloat16(x)); }

// naive attention in double on the rounded inputs: o, lse, and (for dout) dq, dk, dv
static void reference(const std::vector<float>& qkv, const std::vector<float>& dout, bool causal, double scale,
                      std::vector<double>& o, std::vector<double>& lse, std::vector<double>& dqkv) {
    o.assign(B * S * C, 0.0); lse.assign(B * H * S, 0.0); dqkv.assign(B * S * 3 * C, 0.0);
    auto at = [&](int b, int s, int part, int h, int d) { return (size_t)((b * S + s) * 3 * C + part * C + h * D + d); };
    for (int b = 0; b < B; b++) for (int h = 0; h < H; h++) for (int i = 0; i < S; i++) {
        int last = causal ? i : S - 1;
        std::vector<double> p(S, 0.0), dp(S, 0.0);
        double m = -1e300, sum = 0.0, delta = 0.0;
        for (int j = 0; j <= last; j++) {
            double s = 0.0;
            for (int d = 0; d < D; d++) { s += (double)qkv[at(b, i, 0, h, d)] * qkv[at(b, j, 1, h, d)]; }
            p[j] = s * scale;
            m = std::max(m, p[j]);
        }
        for (int j = 0; j <= last; j++) { sum += exp(p[j] - m); }
        lse[(b * H + h) * S + i] = m + log(sum);
        for (int j = 0; j <= last; j++) {
            p[j] = exp(p[j] - m) / sum;
            for (int d = 0; d < D; d++) {
                o[(b * S + i) * C + h * D + d] += p[j] * qkv[at(b, j, 2, h, d)];
                dp[j] += (double)dout[(b * S + i) * C + h * D + d] * qkv[at(b, j, 2, h, d)];
            }
            delta += p[j] * dp[j];
        }
        for (int j = 0; j <= last; j++) {
            double ds = p[j] * (dp[j] - delta) * scale;
            for (int d = 0; d < D; d++) {
                dqkv[at(b, i, 0, h, d)] += ds * qkv[at(b, j, 1, h, d)];
                dqkv[at(b, j, 1, h, d)] += ds * qkv[at(b, i, 0, h, d)];
                dqkv[at(b, j, 2, h, d)] += p[j] * dout[(b * S + i) * C + h * D + d];
            }
        }
    }
}

template <class X> static X* device(const std::vector<X>& h) {
    X* d;
    CUDA_CHECK(cudaMalloc((void**)&d, h.size() * sizeof(X)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(X), cudaMemcpyHostToDevice));
    return d;
}
template <class X> static std::vector<X> host(const X* d, size_t n) {
    std::vector<X> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(X), cudaMemcpyDeviceToHost));
    return h;
}
static double max_rel(const std::vector<__nv_bfloat16>& got, const std::vector<double>& want) {
    double err = 0.0, scale = 1e-3;
    for (size_t i = 0; i < want.size(); i++) {
        err = std::max(err, fabs(__bfloat162float(got[i]) - want[i]));
        scale = std::max(scale, fabs(want[i]));
    }
    return err / scale;
}

// forward and backward through the emulated graphs, against the double reference (bf16 outputs: 1e-2)
static void numbers(cudnnHandle_t h, bool causal, float scale) {
    std::vector<float> qkv(B * S * 3 * C), dout(B * S * C);
    unsigned r = 7;
    auto rnd = [&] { r = r * 1664525u + 1013904223u; return bf(((r >> 8) / 16777216.0f) * 4.0f - 2.0f); };
    for (auto& x : qkv) { x = rnd(); }
    for (auto& x : dout) { x = rnd(); }
    std::vector<__nv_bfloat16> qkv16(qkv.size()), dout16(dout.size());
    for (size_t i = 0; i < qkv.size(); i++) { qkv16[i] = __float2bfloat16(qkv[i]); }
    for (size_t i = 0; i < dout.size(); i++) { dout16[i] = __float2bfloat16(dout[i]); }
    __nv_bfloat16 *d_qkv = device(qkv16), *d_dout = device(dout16), *d_o, *d_dqkv;
    float* d_lse;
    CUDA_CHECK(cudaMalloc((void**)&d_o, dout.size() * 2));
    CUDA_CHECK(cudaMalloc((void**)&d_dqkv, qkv.size() * 2));
    CUDA_CHECK(cudaMalloc((void**)&d_lse, B * H * S * 4));

    auto f = forward_graph(NONE, causal, scale);
    EXPECT(build(*f) == "", "forward graph");
    std::unordered_map<int64_t, void*> pack = {{1, d_qkv}, {2, d_qkv + C}, {3, d_qkv + 2 * C}, {4, d_o}, {5, d_lse}};
    EXPECT(f->execute(h, pack, nullptr).is_good(), "forward execute");

    auto g = std::make_shared<Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16).set_compute_data_type(fe::DataType_t::FLOAT);
    auto q = in(*g, "Q", 1, qkv_stride()), k = in(*g, "K", 2, qkv_stride()), v = in(*g, "V", 3, qkv_stride());
    auto o = in(*g, "O", 4, o_stride()), dO = in(*g, "dO", 6, o_stride());
    auto st = g->tensor(fe::graph::Tensor_attributes().set_name("S").set_uid(5).set_dim({B, H, S, 1})
                            .set_stride({H * S, S, 1, 1}).set_data_type(fe::DataType_t::FLOAT));
    auto a = fe::graph::SDPA_backward_attributes().set_name("b");
    if (causal) { a.set_causal_mask(true); }
    if (scale != 1.0f) { a.set_attn_scale(scale); }
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dO, st, a);
    dq->set_output(true).set_uid(7).set_dim(dims()).set_stride(qkv_stride());
    dk->set_output(true).set_uid(8).set_dim(dims()).set_stride(qkv_stride());
    dv->set_output(true).set_uid(9).set_dim(dims()).set_stride(qkv_stride());
    EXPECT(build(*g) == "", "backward graph");
    int64_t ws_bytes = 0;
    EXPECT(g->get_workspace_size(ws_bytes).is_good() && ws_bytes == B * H * S * 4, "workspace %lld", (long long)ws_bytes);
    void* ws;
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    std::unordered_map<int64_t, void*> bpack = {{1, d_qkv}, {2, d_qkv + C}, {3, d_qkv + 2 * C}, {4, d_o}, {5, d_lse},
                                                {6, d_dout}, {7, d_dqkv}, {8, d_dqkv + C}, {9, d_dqkv + 2 * C}};
    std::string no_ws = g->execute(h, bpack, nullptr).get_message();
    expect_refusal("backward without its workspace", no_ws, "needs a workspace");
    void* short_ws;
    CUDA_CHECK(cudaMalloc(&short_ws, ws_bytes - 4));
    expect_refusal("a short workspace", g->execute(h, bpack, short_ws).get_message(), "is not");
    cudaFree(short_ws);
    EXPECT(g->execute(h, bpack, ws).is_good(), "backward execute");

    std::vector<double> ro, rlse, rdqkv;
    reference(qkv, dout, causal, scale, ro, rlse, rdqkv);
    std::vector<float> lse = host(d_lse, B * H * S);
    double lse_err = 0.0;
    for (size_t i = 0; i < lse.size(); i++) { lse_err = std::max(lse_err, fabs(lse[i] - rlse[i]) / std::max(1.0, fabs(rlse[i]))); }
    double o_err = max_rel(host(d_o, dout.size()), ro), g_err = max_rel(host(d_dqkv, qkv.size()), rdqkv);
    printf("%-4s %s, scale %g: O %.2e, Stats %.2e, dQKV %.2e (tolerances 1e-2, 1e-5, 1e-2)\n",
           o_err <= 1e-2 && lse_err <= 1e-5 && g_err <= 1e-2 ? "ok" : "FAIL", causal ? "causal" : "no mask", scale,
           o_err, lse_err, g_err);
    EXPECT(o_err <= 1e-2 && lse_err <= 1e-5 && g_err <= 1e-2, "numbers");

    // the variant pack and the life cycle
    std::unordered_map<int64_t, void*> missing = pack;
    missing.erase(2);
    expect_refusal("a tensor missing from the pack", f->execute(h, missing, nullptr).get_message(), "no pointer for tensor 'K'");
    std::unordered_map<int64_t, void*> odd = pack;
    odd[4] = (char*)d_o + 2;
    expect_refusal("a misaligned pointer", f->execute(h, odd, nullptr).get_message(), "16-byte aligned");
    auto fresh = forward_graph(NONE, causal, scale);
    EXPECT(fresh->validate().is_good(), "validate");
    expect_refusal("execute before build_plans", fresh->execute(h, pack, nullptr).get_message(), "before build_plans");
    cudaFree(d_qkv); cudaFree(d_dout); cudaFree(d_o); cudaFree(d_dqkv); cudaFree(d_lse); cudaFree(ws);
}

int main() {
    cudnnHandle_t& h = handle;
    EXPECT(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS, "cudnnCreate");
    numbers(h, true, 0.25f);
    numbers(h, false, 1.0f);
    expect_refusal("generate_stats not set", build(*forward_graph(NO_STATS_FLAG, true, 1.0f)), "generate_stats");
    expect_refusal("O not an output", build(*forward_graph(VIRTUAL_O, true, 1.0f)), "is virtual");
    expect_refusal("O's strides alias", build(*forward_graph(ALIASING_O, true, 1.0f)), "share one address");
    expect_refusal("O's D stride 2", build(*forward_graph(D_STRIDE, true, 1.0f)), "stride must be 1");
    expect_refusal("Stats in bf16", build(*forward_graph(STATS_BF16, true, 1.0f)), "must be FLOAT");
    expect_refusal("a uid used twice", build(*forward_graph(UID_TWICE, true, 1.0f)), "used twice");
    cudnnDestroy(h);
    return finish("test_cudnn_frontend");
}
