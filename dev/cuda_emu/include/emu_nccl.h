// emu_nccl.h: NCCL over MPI. A communicator is an MPI communicator; each collective is a ring
// built from MPI_Sendrecv (reduce-scatter, all-gather; all-reduce = reduce-scatter + all-gather;
// broadcast = a chain from the root), so the reduction order is fixed and every byte handed to MPI
// is counted: emu_nccl_bytes_sent() returns the bytes this rank has passed to MPI_Sendrecv and
// MPI_Send (per all-reduce of N bytes on n ranks: 2 (n-1)/n N, up to rounding of uneven chunks).
// ncclCommInitRank is collective over MPI_COMM_WORLD: every world rank must call it (ranks of other
// communicators with another id at the same time). Calls run eagerly on the calling thread, except
// between ncclGroupStart and ncclGroupEnd (nestable): there they are only recorded, and the
// outermost ncclGroupEnd issues them all, in call order, on their streams, as NCCL launches a
// group's operations at ncclGroupEnd (so stream work issued inside the group runs before them, and
// their buffers must stay untouched until then). bf16 partial sums are rounded to bf16 at each ring step.
#ifndef EMU_NCCL_H
#define EMU_NCCL_H
#include <mpi.h>
#include <climits>
#include <functional>
#include <vector>
#include "emu_cuda.h"
#include "cuda_bf16.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 5
#define NCCL_VERSION_CODE 22105
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1

typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
    ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7,
} ncclResult_t;
typedef enum {
    ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4,
    ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8,
    ncclDouble = 8, ncclBfloat16 = 9,
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking, cgaClusterSize, minCTAs, maxCTAs;
    const char* netName;
    int splitShare;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION_CODE, 1, 4, 1, 32, nullptr, 0}

struct ncclComm { MPI_Comm mpi; int rank, size, device; };
typedef ncclComm* ncclComm_t;

namespace emu {
inline size_t nccl_bytes = 0;
inline int nccl_tag = 7177;

inline void ensure_mpi() {
    int ok;
    MPI_Initialized(&ok);
    if (ok) return;
    MPI_Init(nullptr, nullptr);
    atexit([] {
        int done;
        MPI_Finalized(&done);
        if (!done) MPI_Finalize();
    });
}

inline size_t nccl_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}
inline bool nccl_supported(ncclDataType_t t, ncclRedOp_t op) {
    bool type_ok = t == ncclInt32 || t == ncclUint32 || t == ncclInt64 || t == ncclFloat32 || t == ncclFloat64 ||
                   t == ncclBfloat16;
    return type_ok && (op == ncclSum || op == ncclMax || op == ncclMin || op == ncclAvg || op == ncclProd);
}

template <class T> T reduce_op(T a, T b, ncclRedOp_t op) {
    switch (op) {
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    case ncclProd: return a * b;
    default: return a + b;
    }
}
// acc[i] = op(acc[i], x[i]); bf16 in float, rounded back to bf16.
inline void reduce_into(void* acc, const void* x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
    switch (t) {
    case ncclInt32: for (size_t i = 0; i < n; i++) ((int32_t*)acc)[i] = reduce_op(((int32_t*)acc)[i], ((const int32_t*)x)[i], op); break;
    case ncclUint32: for (size_t i = 0; i < n; i++) ((uint32_t*)acc)[i] = reduce_op(((uint32_t*)acc)[i], ((const uint32_t*)x)[i], op); break;
    case ncclInt64: for (size_t i = 0; i < n; i++) ((int64_t*)acc)[i] = reduce_op(((int64_t*)acc)[i], ((const int64_t*)x)[i], op); break;
    case ncclFloat32: for (size_t i = 0; i < n; i++) ((float*)acc)[i] = reduce_op(((float*)acc)[i], ((const float*)x)[i], op); break;
    case ncclFloat64: for (size_t i = 0; i < n; i++) ((double*)acc)[i] = reduce_op(((double*)acc)[i], ((const double*)x)[i], op); break;
    default:
        for (size_t i = 0; i < n; i++)
            ((__nv_bfloat16*)acc)[i] = __nv_bfloat16(reduce_op((float)((__nv_bfloat16*)acc)[i], (float)((const __nv_bfloat16*)x)[i], op));
    }
}
// ncclAvg: the sum divided by the number of ranks (integer division for integer types).
inline void divide(void* p, size_t n, ncclDataType_t t, int d) {
    switch (t) {
    case ncclInt32: for (size_t i = 0; i < n; i++) ((int32_t*)p)[i] /= d; break;
    case ncclUint32: for (size_t i = 0; i < n; i++) ((uint32_t*)p)[i] /= (uint32_t)d; break;
    case ncclInt64: for (size_t i = 0; i < n; i++) ((int64_t*)p)[i] /= d; break;
    case ncclFloat32: for (size_t i = 0; i < n; i++) ((float*)p)[i] /= (float)d; break;
    case ncclFloat64: for (size_t i = 0; i < n; i++) ((double*)p)[i] /= (double)d; break;
    default: for (size_t i = 0; i < n; i++) ((__nv_bfloat16*)p)[i] = __nv_bfloat16((float)((__nv_bfloat16*)p)[i] / (float)d);
    }
}

inline void sendrecv(const void* sbuf, size_t sbytes, int to, void* rbuf, size_t rbytes, int from, MPI_Comm c) {
    if (sbytes > INT_MAX || rbytes > INT_MAX) die("NCCL emulation: a ring chunk over 2 GiB");
    nccl_bytes += sbytes;
    MPI_Sendrecv(sbuf, (int)sbytes, MPI_BYTE, to, nccl_tag, rbuf, (int)rbytes, MPI_BYTE, from, nccl_tag, c, MPI_STATUS_IGNORE);
}

// Ring reduce-scatter over chunks [off[i], off[i+1]) of `count` elements: rank r ends with chunk r
// fully reduced, written to out. Chunk c's sum is accumulated along the ring starting at rank c+1.
inline void ring_reduce_scatter(const void* in, void* out, const std::vector<size_t>& off, ncclDataType_t t,
                                ncclRedOp_t op, ncclComm_t comm) {
    int n = comm->size, r = comm->rank;
    size_t es = nccl_size(t);
    auto chunk = [&](int c) { c = ((c % n) + n) % n; return std::make_pair(off[c], off[c + 1] - off[c]); };
    auto first = chunk(r - 1);
    std::vector<char> partial((const char*)in + first.first * es, (const char*)in + (first.first + first.second) * es);
    std::vector<char> recv;
    for (int s = 0; s < n - 1; s++) {
        auto rc = chunk(r - 2 - s);
        recv.resize(rc.second * es);
        sendrecv(partial.data(), partial.size(), (r + 1) % n, recv.data(), recv.size(), (r - 1 + n) % n, comm->mpi);
        reduce_into(recv.data(), (const char*)in + rc.first * es, rc.second, t, op);
        partial.swap(recv);
    }
    if (!partial.empty()) memcpy(out, partial.data(), partial.size());
}

// Ring all-gather in place: buf holds every chunk's place; chunk r is already there.
inline void ring_all_gather(void* buf, const std::vector<size_t>& off, ncclDataType_t t, ncclComm_t comm) {
    int n = comm->size, r = comm->rank;
    size_t es = nccl_size(t);
    for (int s = 0; s < n - 1; s++) {
        int sc = ((r - s) % n + n) % n, rc = ((r - s - 1) % n + n) % n;
        char* b = (char*)buf;
        std::vector<char> send(b + off[sc] * es, b + off[sc + 1] * es);
        sendrecv(send.data(), send.size(), (r + 1) % n, b + off[rc] * es, (off[rc + 1] - off[rc]) * es, (r - 1 + n) % n, comm->mpi);
    }
}

inline std::vector<size_t> even_chunks(size_t count, int n) {
    std::vector<size_t> off(n + 1);
    for (int i = 0; i <= n; i++) off[i] = count * i / n;
    return off;
}
}  // namespace emu

inline size_t emu_nccl_bytes_sent(void) { return emu::nccl_bytes; }

inline const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}
inline const char* ncclGetLastError(ncclComm_t) { return ""; }
inline ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    FILE* f = fopen("/dev/urandom", "rb");
    if (!f || fread(id->internal, 1, sizeof(id->internal), f) != sizeof(id->internal)) {
        if (f) fclose(f);
        return ncclSystemError;
    }
    fclose(f);
    return ncclSuccess;
}
// Collective over MPI_COMM_WORLD: world ranks holding the same id form one communicator, ordered by `rank`.
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    emu::ensure_mpi();
    uint32_t h = 2166136261u;  // FNV-1a hash of the id picks the MPI_Comm_split color
    for (char c : id.internal) h = (h ^ (unsigned char)c) * 16777619u;
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, (int)(h & 0x7fffffff), rank, &c);
    int size, r;
    MPI_Comm_size(c, &size);
    MPI_Comm_rank(c, &r);
    if (size != nranks || r != rank) {
        MPI_Comm_free(&c);
        return ncclInvalidUsage;
    }
    int dev;
    cudaGetDevice(&dev);
    *comm = new ncclComm{c, r, size, dev};
    return ncclSuccess;
}
inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
    return ncclCommInitRank(comm, nranks, id, rank);
}
inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out, ncclConfig_t*) {
    MPI_Comm c;
    MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &c);
    if (c == MPI_COMM_NULL) {
        *out = nullptr;
        return ncclSuccess;
    }
    int size, r;
    MPI_Comm_size(c, &size);
    MPI_Comm_rank(c, &r);
    *out = new ncclComm{c, r, size, comm->device};
    return ncclSuccess;
}
#ifdef EMU_CHECK
namespace emu { inline void forget_comm(const void* comm); }
#endif
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
#ifdef EMU_CHECK
    emu::forget_comm(comm);
#endif
    MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}
inline ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
inline ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
inline ncclResult_t ncclCommCount(const ncclComm_t comm, int* n) { *n = comm->size; return ncclSuccess; }
inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* r) { *r = comm->rank; return ncclSuccess; }
inline ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* d) { *d = comm->device; return ncclSuccess; }
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* e) { *e = ncclSuccess; return ncclSuccess; }

namespace emu {
inline int nccl_group_depth = 0;                                // open ncclGroupStart calls
inline std::vector<std::function<ncclResult_t()>> nccl_group;  // the collectives they deferred

// A collective runs as an operation of its stream; under --check after the stream's earlier work,
// with its buffers recorded as read / written for the cross-stream order check. Inside a group it
// is recorded and issued by the outermost ncclGroupEnd.
#ifdef EMU_CHECK
// Collectives on two communicators of one rank must not overlap (NCCL's "Using multiple NCCL
// communicators concurrently": its kernels block, so two that run at once can deadlock across
// ranks): each collective must be ordered after the last one of every other communicator, by a
// stream, an event or a host synchronisation (strict rule; EMU_STRICT=0: unchecked).
struct LastCollective { chk::Op* op; const char* what; int id; };
inline std::map<const void*, LastCollective>& last_collectives() { static std::map<const void*, LastCollective> m; return m; }
inline int next_comm_id = 0;
inline std::map<const void*, int>& comm_ids() { static std::map<const void*, int> m; return m; }
EMU_NOSAN inline int comm_id(const void* comm) {
    auto it = comm_ids().find(comm);
    if (it != comm_ids().end()) return it->second;
    return comm_ids()[comm] = ++next_comm_id;
}
EMU_NOSAN inline void collective_order(const void* comm, const char* what) {
    chk::Op* now = chk::running_op;
    if (!now) return;
    int id = comm_id(comm);
    if (strict()) {
        for (auto& kv : last_collectives()) {
            const LastCollective& p = kv.second;
            if (kv.first == comm || chk::happens_before(p.op, now)) continue;
            chk::report("collectives on two communicators that nothing orders\n  this one:    %s on %s, communicator #%d\n"
                        "  earlier one: %s on %s, communicator #%d\n  NCCL kernels block: collectives of different "
                        "communicators must not overlap (order them by a stream, an event with cudaStreamWaitEvent, or a "
                        "host synchronisation)", what, chk::stream_name(now->stream).c_str(), id, p.what,
                        chk::stream_name(p.op->stream).c_str(), p.id);
        }
    }
    last_collectives()[comm] = LastCollective{now, what, id};
}
EMU_NOSAN inline void forget_comm(const void* comm) {
    last_collectives().erase(comm);
    comm_ids().erase(comm);
}
#endif
template <class F> ncclResult_t nccl_run(ncclComm_t comm, cudaStream_t s, const char* what, const void* in,
                                         size_t in_bytes, void* out, size_t out_bytes, F f) {
    auto issue = [=]() mutable -> ncclResult_t {
#ifdef EMU_CHECK
        ncclResult_t r = ncclSuccess;
        chk::run_now(s, what, [&] {
            collective_order(comm, what);
            chk::range_access(in, in_bytes, false);
            chk::range_access(out, out_bytes, true);
            r = f();
        });
        return r;
#else
        (void)comm; (void)in; (void)in_bytes; (void)out; (void)out_bytes;
        collective_issued(s, what);
        return f();
#endif
    };
    if (nccl_group_depth > 0) {
        nccl_group.push_back(issue);
        return ncclSuccess;
    }
    return issue();
}
}  // namespace emu

inline ncclResult_t ncclGroupStart() {
    emu::nccl_group_depth++;
    return ncclSuccess;
}
// Closes a group; the outermost issues every deferred collective in call order (the first error is
// returned, as NCCL reports a group's errors at ncclGroupEnd).
inline ncclResult_t ncclGroupEnd() {
    if (emu::nccl_group_depth == 0) return ncclInvalidUsage;
    if (--emu::nccl_group_depth > 0) return ncclSuccess;
    std::vector<std::function<ncclResult_t()>> ops;
    ops.swap(emu::nccl_group);
    ncclResult_t result = ncclSuccess;
    for (auto& op : ops) {
        ncclResult_t r = op();
        if (result == ncclSuccess) result = r;
    }
    return result;
}

// recvbuff[i] = op over ranks of sendbuff[i]; sendbuff == recvbuff is allowed.
inline ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t s) {
    if (!comm || !emu::nccl_supported(t, op)) return ncclInvalidArgument;
    size_t es = emu::nccl_size(t);
    return emu::nccl_run(comm, s, "ncclAllReduce", sendbuff, count * es, recvbuff, count * es, [=] {
        auto off = emu::even_chunks(count, comm->size);
        char* own = (char*)recvbuff + off[comm->rank] * es;
        emu::ring_reduce_scatter(sendbuff, own, off, t, op, comm);
        if (op == ncclAvg) emu::divide(own, off[comm->rank + 1] - off[comm->rank], t, comm->size);
        emu::ring_all_gather(recvbuff, off, t, comm);
        return ncclSuccess;
    });
}
// recvbuff = rank's block (recvcount elements) of the reduction of every rank's sendbuff
// (size * recvcount elements); in place when recvbuff == sendbuff + rank * recvcount.
inline ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t t,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
    if (!comm || !emu::nccl_supported(t, op)) return ncclInvalidArgument;
    size_t es = emu::nccl_size(t);
    return emu::nccl_run(comm, s, "ncclReduceScatter", sendbuff, recvcount * comm->size * es, recvbuff, recvcount * es, [=] {
        auto off = emu::even_chunks(recvcount * comm->size, comm->size);
        emu::ring_reduce_scatter(sendbuff, recvbuff, off, t, op, comm);
        if (op == ncclAvg) emu::divide(recvbuff, recvcount, t, comm->size);
        return ncclSuccess;
    });
}
// recvbuff (size * sendcount elements) = every rank's sendbuff in rank order; in place when
// sendbuff == recvbuff + rank * sendcount.
inline ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t t,
                                  ncclComm_t comm, cudaStream_t s) {
    if (!comm) return ncclInvalidArgument;
    size_t es = emu::nccl_size(t);
    return emu::nccl_run(comm, s, "ncclAllGather", sendbuff, sendcount * es, recvbuff, sendcount * comm->size * es, [=] {
        char* own = (char*)recvbuff + comm->rank * sendcount * es;
        if (own != sendbuff) memmove(own, sendbuff, sendcount * es);
        emu::ring_all_gather(recvbuff, emu::even_chunks(sendcount * comm->size, comm->size), t, comm);
        return ncclSuccess;
    });
}
// The root's sendbuff reaches every rank's recvbuff along the ring root, root+1, ...
inline ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t t, int root,
                                  ncclComm_t comm, cudaStream_t s) {
    if (!comm || root < 0 || root >= comm->size) return ncclInvalidArgument;
    size_t bytes = count * emu::nccl_size(t);
    int n = comm->size, pos = (comm->rank - root + n) % n;  // position along the chain
    return emu::nccl_run(comm, s, "ncclBroadcast", pos == 0 ? sendbuff : nullptr, bytes, recvbuff, bytes, [=] {
        if (pos == 0 && recvbuff != sendbuff) memmove(recvbuff, sendbuff, bytes);
        if (bytes > INT_MAX) emu::die("NCCL emulation: a broadcast over 2 GiB");
        if (pos > 0) MPI_Recv(recvbuff, (int)bytes, MPI_BYTE, (comm->rank - 1 + n) % n, emu::nccl_tag, comm->mpi, MPI_STATUS_IGNORE);
        if (pos < n - 1) {
            emu::nccl_bytes += bytes;
            MPI_Send(recvbuff, (int)bytes, MPI_BYTE, (comm->rank + 1) % n, emu::nccl_tag, comm->mpi);
        }
        return ncclSuccess;
    });
}
inline ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(buff, buff, count, t, root, comm, s);
}

#endif
