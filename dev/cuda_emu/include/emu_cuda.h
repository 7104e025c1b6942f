// emu_cuda.h: entry point of the CUDA emulator (force-included by emucc into every .cu file).
// CUDA keywords as host C++, vector types, dim3, error codes, the runtime API (device memory is host
// memory; streams and events: emu_async.h, --check: emu_check.h), and the emulated device's properties.
#ifndef EMU_CUDA_H
#define EMU_CUDA_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <chrono>
#include <algorithm>
#include <map>
#include <unistd.h>
// before the keywords below (__noinline__ ...): the standard headers of emu_async.h and emu_nccl.h
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <sched.h>
#include <set>
#include <thread>
#include <tuple>
#include <vector>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#define EMU_CUDA 1
#ifndef CUDART_VERSION
#define CUDART_VERSION 12080
#endif

// ---- keywords ----
#if !(defined(EMU_REWRITE_PASS) && defined(EMU_CHECK))  // --check: the rewrite reads these two itself
#define __global__
#define __launch_bounds__(...)
#endif
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __cudart_builtin__
// emucc keeps __shared__ as a token during its rewrite pass and turns it into `static` itself
// (blocks run one at a time, and all threads of a block share static storage).
#ifndef EMU_REWRITE_PASS
#define __shared__ static
#endif

// ---- vector types (sizes and alignments as in CUDA's vector_types.h) ----
#define EMU_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; }; \
    inline N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define EMU_VEC3(T, N) struct N##3 { T x, y, z; }; \
    inline N##3 make_##N##3(T x, T y, T z) { return N##3{x, y, z}; }
#define EMU_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; }; \
    inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
#define EMU_VECS(T, N, A2, A4) EMU_VEC2(T, N, A2) EMU_VEC3(T, N) EMU_VEC4(T, N, A4)
EMU_VECS(float, float, 8, 16)
EMU_VECS(int, int, 8, 16)
EMU_VECS(unsigned int, uint, 8, 16)
EMU_VECS(short, short, 4, 8)
EMU_VECS(unsigned short, ushort, 4, 8)
EMU_VECS(signed char, char, 2, 4)
EMU_VECS(unsigned char, uchar, 2, 4)
EMU_VEC2(double, double, 16)
EMU_VEC2(long long, longlong, 16)
EMU_VEC2(unsigned long long, ulonglong, 16)
#undef EMU_VEC2
#undef EMU_VEC3
#undef EMU_VEC4
#undef EMU_VECS

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---- errors ----
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
};
typedef cudaError_t cudaError;

namespace emu {
inline cudaError_t last_error = cudaSuccess;
inline cudaError_t fail(cudaError_t e) { last_error = e; return e; }
// After a checked-mode report (emucc --check) has been printed: end the process with status 66, without
// atexit handlers (an MPI rank must not wait in MPI_Finalize for ranks that are still running).
inline void report_exit() { fflush(stdout); fflush(stderr); _exit(66); }
}

#ifdef EMU_CHECK
// emucc --check: code of the emulator itself is not checked (EMU_RUNTIME in a function body switches the
// checks off until it returns); the checker's hooks are never instrumented themselves.
#define EMU_NOSAN __attribute__((no_sanitize_thread, noinline))
#define EMU_NOSAN_INLINE __attribute__((no_sanitize_thread))
namespace emu {
namespace chk {
enum Mode : int { Host = 0, Kernel = 1, Runtime = 2 };
inline int mode = Host;  // Runtime: the emulator's own code runs, hooks return at once
EMU_NOSAN inline void set_mode(int m) { mode = m; }
struct Suspend {
    int saved;
    EMU_NOSAN_INLINE Suspend() : saved(mode) { mode = Runtime; }
    EMU_NOSAN_INLINE ~Suspend() { mode = saved; }
};
}  // namespace chk
}  // namespace emu
#define EMU_RUNTIME ::emu::chk::Suspend emu_runtime_scope_
#define EMU_UNCHECKED __attribute__((no_sanitize_thread))  // the emulator's own heavy loops (cuBLAS)
#else
#define EMU_RUNTIME
#define EMU_UNCHECKED
#endif

inline cudaError_t cudaGetLastError() { cudaError_t e = emu::last_error; emu::last_error = cudaSuccess; return e; }
inline cudaError_t cudaPeekAtLastError() { return emu::last_error; }
inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidSymbol: return "cudaErrorInvalidSymbol";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
    }
}
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}

// ---- the emulated device ----
namespace emu {
constexpr size_t kSmemDefault = 48 * 1024;    // dynamic shared memory per block without opt-in
constexpr size_t kSmemOptin = 227 * 1024;     // cudaFuncAttributeMaxDynamicSharedMemorySize limit
constexpr size_t kSmemPerSM = 228 * 1024;
constexpr size_t kGlobalMem = 80ull << 30;
constexpr int kMaxThreads = 1024, kNumSMs = 132, kMaxThreadsPerSM = 2048, kMaxBlocksPerSM = 32;
inline int current_device = 0;
inline size_t allocated_bytes = 0;
inline std::map<void*, size_t>& allocations() { static std::map<void*, size_t> m; return m; }
// The strict rules (default on; EMU_STRICT=0 gives the emulator's earlier leniency, to show what it
// missed): CUDA_VISIBLE_DEVICES, cuBLASLt's alignment and leading-dimension rules, the asynchronous
// NCCL, and numerics that are not shared with the project's kernels (dev/cuda_emu/README.md).
inline bool strict() {
    static int v = -1;
    if (v < 0) {
        const char* s = getenv("EMU_STRICT");
        v = !(s && s[0] == '0');
    }
    return v != 0;
}
// The node's GPUs: one emulated GPU per process, or one per local MPI rank under mpirun (each rank
// may pick its own).
inline int node_devices() {
    const char* s = getenv("EMU_DEVICE_COUNT");
    if (!s) s = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int n = s ? atoi(s) : 1;
    return n > 0 ? n : 1;
}
// The GPUs this process sees: as CUDA does, CUDA_VISIBLE_DEVICES (when set) lists the node's GPUs
// by index, and the list ends at the first entry that is not a valid index ("" or "-1": none).
inline int device_count() {
    int n = node_devices();
    const char* v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v || !strict()) return n;
    int seen = 0;
    bool used[1024] = {};
    const char* p = v;
    while (*p) {
        char* end;
        long i = strtol(p, &end, 10);
        if (end == p || i < 0 || i >= n || i >= 1024 || used[i]) break;
        used[i] = true;
        seen++;
        p = end;
        while (*p == ' ') p++;
        if (*p != ',') break;
        p++;
    }
    return seen;
}
}

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    size_t totalConstMem, memPitch, textureAlignment;
    int regsPerBlock, regsPerMultiprocessor, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int clockRate, memoryClockRate, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize;
    int multiProcessorCount, maxThreadsPerMultiProcessor, maxBlocksPerMultiProcessor;
    int major, minor, integrated, canMapHostMemory, concurrentKernels, ECCEnabled;
    int pciBusID, pciDeviceID, pciDomainID, asyncEngineCount, unifiedAddressing, managedMemory;
    int computeMode, cooperativeLaunch;
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxBlockDimX = 2, cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4, cudaDevAttrMaxGridDimX = 5, cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7, cudaDevAttrMaxSharedMemoryPerBlock = 8, cudaDevAttrWarpSize = 10,
    cudaDevAttrMultiProcessorCount = 16, cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76, cudaDevAttrMaxThreadsPerMultiProcessor = 39,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97, cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrL2CacheSize = 38,
};

inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = emu::device_count();
    return *n > 0 ? cudaSuccess : emu::fail(cudaErrorNoDevice);
}
inline cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= emu::device_count()) return emu::fail(cudaErrorInvalidDevice);
    emu::current_device = d;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) { *d = emu::current_device; return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d < 0 || d >= emu::device_count()) return emu::fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CUDA emulator (CPU)");
    p->totalGlobalMem = emu::kGlobalMem;
    p->sharedMemPerBlock = emu::kSmemDefault;
    p->sharedMemPerBlockOptin = emu::kSmemOptin;
    p->sharedMemPerMultiprocessor = emu::kSmemPerSM;
    p->totalConstMem = 64 * 1024;
    p->memPitch = SIZE_MAX;
    p->textureAlignment = 512;
    p->regsPerBlock = p->regsPerMultiprocessor = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = emu::kMaxThreads;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->clockRate = 1755000; p->memoryClockRate = 2619000; p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->multiProcessorCount = emu::kNumSMs;
    p->maxThreadsPerMultiProcessor = emu::kMaxThreadsPerSM;
    p->maxBlocksPerMultiProcessor = emu::kMaxBlocksPerSM;
    p->major = 9; p->minor = 0;
    p->canMapHostMemory = p->concurrentKernels = p->unifiedAddressing = p->managedMemory = 1;
    p->pciBusID = d;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return cudaErrorInvalidDevice;
    switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *v = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *v = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *v = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *v = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *v = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *v = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
    default: return emu::fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* v) { *v = CUDART_VERSION; return cudaSuccess; }
#ifdef EMU_CHECK
inline cudaError_t cudaDeviceSynchronize();
#else
inline cudaError_t cudaDeviceSynchronize();
#endif
inline cudaError_t cudaDeviceReset() { return cudaSuccess; }

struct CUstream_st { int flags; int index; };
struct CUevent_st { std::chrono::steady_clock::time_point t; bool recorded; int stream; uint32_t seq; void* op; uint64_t ticket = 0;
                    uint32_t rec_seq = 0, done_seq = 0; };  // plain builds: records issued, run
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
#ifndef EMU_CHECK
#include "emu_async.h"
#endif

// ---- memory: host memory underneath, every allocation tracked ----
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4,
};
#define cudaHostAllocDefault 0
#define cudaHostAllocPortable 1
#define cudaHostAllocMapped 2
#define cudaHostAllocWriteCombined 4
#define cudaMemAttachGlobal 1

#ifdef EMU_CHECK  // defined in emu_check.h
inline cudaError_t cudaMalloc(void** p, size_t n);
inline cudaError_t cudaFree(void* p);
inline cudaError_t cudaMallocHost(void** p, size_t n);
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int);
inline cudaError_t cudaMallocManaged(void** p, size_t n, unsigned int = cudaMemAttachGlobal);
inline cudaError_t cudaFreeHost(void* p);
#else
inline cudaError_t cudaMalloc(void** p, size_t n) {
    *p = nullptr;
    void* q = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!q) return emu::fail(cudaErrorMemoryAllocation);
    emu::allocations()[q] = n;
    emu::allocated_bytes += n;
    *p = q;
    return cudaSuccess;
}
inline cudaError_t emu_free_now(void* p) {
    auto it = emu::allocations().find(p);
    if (it == emu::allocations().end()) return emu::fail(cudaErrorInvalidValue);
    emu::allocated_bytes -= it->second;
    emu::allocations().erase(it);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    emu::wait_ticket(emu::coll_tickets);  // synchronises the device, as on a GPU
    return emu_free_now(p);
}
inline cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) { return cudaMalloc(p, n); }
inline cudaError_t cudaMallocManaged(void** p, size_t n, unsigned int = cudaMemAttachGlobal) { return cudaMalloc(p, n); }
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
#endif
template <class T> cudaError_t cudaMalloc(T** p, size_t n) { return cudaMalloc((void**)p, n); }
template <class T> cudaError_t cudaMallocHost(T** p, size_t n) { return cudaMallocHost((void**)p, n); }
template <class T> cudaError_t cudaHostAlloc(T** p, size_t n, unsigned int f) { return cudaHostAlloc((void**)p, n, f); }
template <class T> cudaError_t cudaMallocManaged(T** p, size_t n, unsigned int f = cudaMemAttachGlobal) {
    return cudaMallocManaged((void**)p, n, f);
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    *total = emu::kGlobalMem;
    *free_bytes = emu::kGlobalMem - emu::allocated_bytes;
    return cudaSuccess;
}
#ifdef EMU_CHECK
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind);
inline cudaError_t cudaMemset(void* p, int v, size_t n);
#else
inline cudaError_t emu_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    if ((unsigned)kind > cudaMemcpyDefault) return emu::fail(cudaErrorInvalidMemcpyDirection);
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    uint64_t t = emu::stream_ticket(0);
    emu::host_blocks("cudaMemcpy", t);
    emu::wait_ticket(t);
    return emu_copy(dst, src, n, kind);
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
    if (n) emu::enqueue(0, [=] { memset(p, v, n); });
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    emu::host_blocks("cudaDeviceSynchronize", emu::coll_tickets);
    emu::wait_ticket(emu::coll_tickets);
    return cudaSuccess;
}
#endif
inline cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                size_t height, cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return emu::fail(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = cudaMemcpy((char*)dst + r * dpitch, (const char*)src + r * spitch, width, kind);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
template <class T>
cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n, size_t offset = 0,
                               cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    if (offset + n > sizeof(T)) return emu::fail(cudaErrorInvalidValue);
    return cudaMemcpy((char*)&symbol + offset, src, n, kind);
}
template <class T>
cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t n, size_t offset = 0,
                                 cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
    if (offset + n > sizeof(T)) return emu::fail(cudaErrorInvalidValue);
    return cudaMemcpy(dst, (const char*)&symbol + offset, n, kind);
}
template <class T> cudaError_t cudaGetSymbolAddress(void** p, T& symbol) { *p = (void*)&symbol; return cudaSuccess; }

// ---- streams and events: work runs when issued unless it stands behind a pending collective (emu_async.h;
// --check: emu_check.h) ----
#define cudaStreamDefault 0
#define cudaStreamNonBlocking 1
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaEventDefault 0
#define cudaEventBlockingSync 1
#define cudaEventDisableTiming 2

#ifdef EMU_CHECK
inline cudaError_t cudaStreamCreate(cudaStream_t* s);
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int f);
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int f, int);
inline cudaError_t cudaStreamDestroy(cudaStream_t s);
inline cudaError_t cudaStreamSynchronize(cudaStream_t s);
inline cudaError_t cudaStreamQuery(cudaStream_t s);
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int = 0);
inline cudaError_t cudaEventCreate(cudaEvent_t* e);
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int);
inline cudaError_t cudaEventDestroy(cudaEvent_t e);
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
inline cudaError_t cudaEventSynchronize(cudaEvent_t e);
inline cudaError_t cudaEventQuery(cudaEvent_t e);
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0);
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st = 0);
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t);
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t);
#else
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { *s = new CUstream_st{0, 0}; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int f) { *s = new CUstream_st{(int)f, 0}; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int f, int) { return cudaStreamCreateWithFlags(s, f); }
// Work already issued on s still runs (it is queued by ticket); the stream's own ticket is forgotten.
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (emu::stream_key(s)) emu::stream_tickets().erase(emu::stream_key(s));
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    uint64_t t = emu::stream_ticket(s);
    emu::host_blocks("cudaStreamSynchronize", t);
    emu::wait_ticket(t);
    return cudaSuccess;
}
inline cudaError_t cudaStreamQuery(cudaStream_t s) {
    uint64_t t = emu::stream_ticket(s);
    if (emu::drain() < t) return emu::not_ready();
    emu::host_saw(t);
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int = 0) {
    uint64_t& t = emu::stream_tickets()[emu::stream_key(s)];
    t = std::max(t, e->ticket);
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { *e = new CUevent_st{{}, false, 0, 0, nullptr}; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (e->done_seq == e->rec_seq) delete e;  // else its queued record still needs it (kept)
    return cudaSuccess;
}
// The record runs as stream work: the event completes when the stream's work before it has run.
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0) {
    e->recorded = true;
    e->ticket = emu::stream_ticket(s);
    uint32_t seq = ++e->rec_seq;
    emu::enqueue(s, [e, seq] {
        if (e->rec_seq != seq) return;  // recorded again since
        e->t = std::chrono::steady_clock::now();
        e->done_seq = seq;
    });
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu::host_blocks("cudaEventSynchronize", e->ticket);
    emu::wait_ticket(e->ticket);
    return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    emu::drain();
    if (e->done_seq != e->rec_seq) return emu::not_ready();
    emu::host_saw(e->ticket);
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a->recorded || !b->recorded) return emu::fail(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
    return cudaSuccess;
}
namespace emu {
inline bool allocated(const void* p) {  // device or pinned memory (cudaMalloc*, cudaHostAlloc)
    auto it = allocations().upper_bound((void*)p);
    if (it == allocations().begin()) return false;
    --it;
    return (const char*)p < (const char*)it->first + it->second;
}
}  // namespace emu
// As CUDA does with pageable host memory: a copy into it returns once the copy is done (it waits for
// the stream), one from it once the source has been staged (a snapshot taken at the call).
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st = 0) {
    if ((unsigned)k > cudaMemcpyDefault) return emu::fail(cudaErrorInvalidMemcpyDirection);
    if (!n) return cudaSuccess;
    if (!emu::allocated(d) && emu::allocated(s)) {
        emu::wait_ticket(emu::stream_ticket(st));
        emu::enqueue(st, [=] { memmove(d, s, n); });
    } else if (!emu::allocated(s) && emu::stream_ticket(st) > emu::drain()) {
        std::vector<char> staged((const char*)s, (const char*)s + n);
        emu::enqueue(st, [=] { memmove(d, staged.data(), n); });
    } else {
        emu::enqueue(st, [=] { memmove(d, s, n); });
    }
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t st = 0) {
    if (n) emu::enqueue(st, [=] { memset(p, v, n); });
    return cudaSuccess;
}
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t st) {
    if (p) emu::enqueue(st, [=] { emu_free_now(p); });
    return cudaSuccess;
}
#endif
template <class T> cudaError_t cudaMallocAsync(T** p, size_t n, cudaStream_t s) { return cudaMallocAsync((void**)p, n, s); }
template <class T>
cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t n, size_t offset = 0,
                                    cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t = 0) {
    return cudaMemcpyToSymbol(symbol, src, n, offset, kind);
}

#include "emu_launch.h"
#include "emu_device.h"
#ifdef EMU_CHECK
#include "emu_check.h"
#endif

#endif
