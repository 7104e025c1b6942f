// cudnn.h (emulator): the cuDNN handle calls the project makes: a handle remembers its stream,
// which the emulated frontend's execute() runs on (cudnn_frontend.h).
#ifndef EMU_CUDNN_H
#define EMU_CUDNN_H
#include "emu_cuda.h"

#define CUDNN_MAJOR 9
#define CUDNN_MINOR 19
#define CUDNN_PATCHLEVEL 0
#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

enum cudnnStatus_t {
    CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_NOT_INITIALIZED = 1001, CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_NOT_SUPPORTED = 3000, CUDNN_STATUS_EXECUTION_FAILED = 5000,
};
struct cudnnContext { cudaStream_t stream; };
typedef cudnnContext* cudnnHandle_t;

inline cudnnStatus_t cudnnCreate(cudnnHandle_t* h) { *h = new cudnnContext{nullptr}; return CUDNN_STATUS_SUCCESS; }
inline cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { delete h; return CUDNN_STATUS_SUCCESS; }
inline cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    if (!h) return CUDNN_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}
inline cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t* s) { *s = h->stream; return CUDNN_STATUS_SUCCESS; }
inline size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
inline const char* cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
    }
}
#endif
