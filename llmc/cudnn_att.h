// The cuDNN attention path's interface (-at cudnn, make USE_CUDNN=1): SDPA forward and backward
// through the cuDNN frontend graph API. Its one translation unit is llmc/cudnn_att.cpp; the calls
// follow llmc/attention.cuh's contract, BF16 only:
//   qkv  (B, T, 3, NH, HS) bf16: row (b, t) holds q | k | v, head h at columns h*HS .. h*HS+HS-1 of each
//   out  (B, T, NH, HS) bf16;  lse (B, NH, T) fp32, the natural log-sum-exp of each query row's
//        scaled, causally masked scores (cuDNN's softmax "Stats"), all the backward needs
//   dqkv (B, T, 3, NH, HS) bf16, written (not accumulated), from dout (B, T, NH, HS)
// Each returns NULL on success, else a one-line reason; the caller reports it with fail() (so a
// multi-rank run stops every rank). Graphs are built once per shape (B, T, NH, HS) and cached.
#ifndef LLMC_CUDNN_ATT_H
#define LLMC_CUDNN_ATT_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>

const char* cudnn_att_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B, int T, int C, int NH,
                              cudaStream_t stream);
const char* cudnn_att_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const __nv_bfloat16* out, const float* lse, int B, int T, int C, int NH,
                               cudaStream_t stream);
// The cuDNN handle, the cached graphs and the workspace, released (a later call builds them again).
void cudnn_att_free(void);

#endif
