// emu_nccl.h: NCCL over MPI. A communicator is an MPI communicator; each collective is a ring
// of MPI send/receive pairs (reduce-scatter, all-gather; all-reduce = reduce-scatter + all-gather;
// broadcast = a chain from the root), so the reduction order is fixed. emu_nccl_bytes_sent() returns
// the bytes this rank's collectives hand to MPI, counted when each is issued (per all-reduce of N
// bytes on n ranks: 2 (n-1)/n N, up to rounding of uneven chunks), so a count read between two
// steps does not depend on whether the last collective has run yet.
// ncclCommInitRank is collective over MPI_COMM_WORLD: every world rank must call it (ranks of other
// communicators with another id at the same time). A call returns at once: in plain builds the
// collective runs on the rank's progress thread when its stream reaches it (emu_async.h), in issue
// order; under --check it runs inside the call, after its stream's earlier work. Between
// ncclGroupStart and ncclGroupEnd (nestable) calls are only recorded, and the outermost ncclGroupEnd
// issues them all, in call order, on their streams, as NCCL launches a group's operations at
// ncclGroupEnd (so stream work issued inside the group runs before them, and their buffers must stay
// untouched until then). bf16 partial sums are rounded to bf16 at each ring step. ncclSend/ncclRecv:
// see "point to point" below.
// Peer stops: a rank that calls emu_nccl_stop_answering() (the trainer's -fi hang_* faults) stops
// answering and tells the others; after EMU_NCCL_DETECT_S seconds (default 0.5; "off": never, as
// NCCL cannot tell a live but hung peer) their ncclCommGetAsyncError reports ncclRemoteError on every
// communicator with that rank, emu_nccl_stopped_peer() names it, and a collective with it never ends.
#ifndef EMU_NCCL_H
#define EMU_NCCL_H
#include <mpi.h>
#include <climits>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include "emu_cuda.h"
#include "cuda_bf16.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 21
#define NCCL_PATCH 5
#define NCCL_VERSION_CODE 22105
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_SHRINK_DEFAULT 0x00  // ncclCommShrink: the parent must have nothing in flight
#define NCCL_SHRINK_ABORT 0x01    // ncclCommShrink: the parent's operations in flight are abandoned first
#define NCCL_REVOKE_DEFAULT 0x00

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

struct ncclComm {
    MPI_Comm mpi;
    int rank, size, device;
    std::vector<int> world;               // each member's rank in MPI_COMM_WORLD
    std::atomic<int> async_error{0};      // ncclResult_t, set by the progress thread
    std::atomic<int> stopped_peer{-1};    // the world rank whose stop it reports
    std::atomic<bool> revoked{false};     // ncclCommRevoke or ncclCommShrink(NCCL_SHRINK_ABORT): its
                                          // collectives in flight are abandoned, new ones refused
};
typedef ncclComm* ncclComm_t;

namespace emu {
inline std::atomic<size_t> nccl_bytes{0};
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

// ---- MPI from two threads (the host's and the progress thread), one call at a time ----
inline std::mutex& mpi_mutex() { static std::mutex* m = new std::mutex; return *m; }  // never destroyed: threads outlive exit()
typedef std::lock_guard<std::mutex> MpiLock;

// ---- peer stops ----
constexpr int kStopTag = 7178;
constexpr int kShrinkTag = 7179;
inline MPI_Comm ctl = MPI_COMM_NULL;        // a copy of MPI_COMM_WORLD for stop notices
inline std::atomic<bool> answering{true};   // false: this rank stopped answering
inline int stopped_peer = -1;               // the first world rank that said it stopped
inline double stopped_at = 0.0;
inline std::mutex& comms_mutex() { static std::mutex* m = new std::mutex; return *m; }
inline std::vector<ncclComm*>& live_comms() { static std::vector<ncclComm*> v; return v; }
inline double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
inline double detect_s() {
    const char* e = getenv("EMU_NCCL_DETECT_S");
    if (!e) return 0.5;
    return strcmp(e, "off") == 0 ? -1.0 : atof(e);
}
inline bool has_member(const ncclComm* c, int world_rank) {
    return std::find(c->world.begin(), c->world.end(), world_rank) != c->world.end();
}
[[noreturn]] inline void freeze() {  // a collective that never ends
    for (;;) sleep(1000);
}
// Thrown out of a collective on a revoked communicator (caught by the progress thread, which then
// goes on with the next collective: the revoked one's results are left as they are).
struct Abandoned {};
// A collective on `current` that cannot end (a stopped peer): it waits until the communicator is
// revoked, then is abandoned; never, where nobody revokes it.
// EMU_NCCL_PLANT=1 (tests/check_nccl_shrink.sh only): never abandoned, a revoke changes nothing.
[[noreturn]] inline void freeze_until_revoked(ncclComm_t current) {
#if defined(EMU_NCCL_PLANT) && EMU_NCCL_PLANT == 1
    freeze();
#endif
    while (!current->revoked.load()) usleep(10000);
    throw Abandoned{};
}
// Reads stop notices; once the detection delay has passed, every communicator with the stopped rank
// reports ncclRemoteError, and a collective on one (current) never ends. A rank that stopped
// answering freezes here.
inline void watch_peers(ncclComm_t current) {
    if (!answering.load()) freeze();
    if (ctl == MPI_COMM_NULL) return;
    {
        MpiLock g(mpi_mutex());
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, kStopTag, ctl, &flag, &st);
        if (flag) {
            int who;
            MPI_Recv(&who, 1, MPI_INT, st.MPI_SOURCE, kStopTag, ctl, MPI_STATUS_IGNORE);
            if (stopped_peer < 0) { stopped_peer = who; stopped_at = now_s(); }
        }
    }
    double d = detect_s();
    if (stopped_peer < 0 || d < 0 || now_s() - stopped_at < d) return;
    {
        std::lock_guard<std::mutex> g(comms_mutex());
        for (ncclComm* c : live_comms())
            if (has_member(c, stopped_peer)) {
                c->stopped_peer = stopped_peer;
                c->async_error = ncclRemoteError;
            }
    }
    if (current && has_member(current, stopped_peer)) freeze_until_revoked(current);
}

// Waits for n requests, watching the peers.
inline void wait_requests(MPI_Request* r, int n, ncclComm_t comm) {
    for (int spins = 0;; spins++) {
        int flag = 0;
        {
            MpiLock g(mpi_mutex());
            MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
        }
        if (flag) return;
        if (comm && comm->revoked.load()) throw Abandoned{};  // a live but silent peer: revoked by the caller
        if (spins % 64 == 0) watch_peers(comm);
        if (spins > 2000) usleep(30);
        else sched_yield();
    }
}
inline void sendrecv(const void* sbuf, size_t sbytes, int to, void* rbuf, size_t rbytes, int from, ncclComm_t comm) {
    if (sbytes > INT_MAX || rbytes > INT_MAX) die("NCCL emulation: a ring chunk over 2 GiB");
    MPI_Request r[2];
    {
        MpiLock g(mpi_mutex());
        MPI_Irecv(rbuf, (int)rbytes, MPI_BYTE, from, nccl_tag, comm->mpi, &r[0]);
        MPI_Isend(sbuf, (int)sbytes, MPI_BYTE, to, nccl_tag, comm->mpi, &r[1]);
    }
    wait_requests(r, 2, comm);
}
// One of send / receive (to or from: a rank, the other -1).
inline void send_or_recv(void* buf, size_t bytes, int to, int from, ncclComm_t comm) {
    MPI_Request r;
    {
        MpiLock g(mpi_mutex());
        if (to >= 0) MPI_Isend(buf, (int)bytes, MPI_BYTE, to, nccl_tag, comm->mpi, &r);
        else MPI_Irecv(buf, (int)bytes, MPI_BYTE, from, nccl_tag, comm->mpi, &r);
    }
    wait_requests(&r, 1, comm);
}

// ---- the progress thread (plain builds): runs the collectives handed over, in ticket order ----
struct Progress {
    std::mutex m;
    std::condition_variable cv;
    std::deque<std::pair<uint64_t, std::function<void()>>> q;
    std::thread th;
    bool running = false, quit = false;
};
inline Progress& progress() { static Progress* p = new Progress; return *p; }  // a frozen thread outlives exit()
inline void progress_main() {
    Progress& p = progress();
    for (;;) {
        std::pair<uint64_t, std::function<void()>> job;
        {
            std::unique_lock<std::mutex> l(p.m);
            while (p.q.empty() && !p.quit) {
                if (p.cv.wait_for(l, std::chrono::milliseconds(10)) == std::cv_status::timeout) {
                    l.unlock();
                    watch_peers(nullptr);
                    l.lock();
                }
            }
            if (p.q.empty()) return;
            job = std::move(p.q.front());
            p.q.pop_front();
        }
        try {
            job.second();
        } catch (const Abandoned&) {
            // its communicator was revoked: the collective ends unfinished
        }
#ifndef EMU_CHECK
        coll_done.store(job.first, std::memory_order_release);
#endif
    }
}
inline void progress_submit(uint64_t ticket, std::function<void()> f) {
    Progress& p = progress();
    {
        std::lock_guard<std::mutex> l(p.m);
        if (!p.running) {
            p.running = true;
            p.quit = false;
            p.th = std::thread(progress_main);
        }
        p.q.emplace_back(ticket, std::move(f));
    }
    p.cv.notify_one();
}
// Ends the progress thread (nothing pending: the last communicator is gone).
inline void progress_stop() {
    Progress& p = progress();
    {
        std::lock_guard<std::mutex> l(p.m);
        if (!p.running) return;
        p.quit = true;
    }
    p.cv.notify_one();
    p.th.join();
    p.running = false;
}
// Before a call that is collective over MPI itself: every collective issued so far has completed.
inline void quiesce() {
#ifndef EMU_CHECK
    wait_ticket(coll_tickets);
#endif
}
inline ncclComm_t new_comm(MPI_Comm c, int device) {
    ncclComm_t comm = new ncclComm;
    comm->mpi = c;
    MPI_Comm_size(c, &comm->size);
    MPI_Comm_rank(c, &comm->rank);
    comm->device = device;
    MPI_Group g, wg;
    MPI_Comm_group(c, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    std::vector<int> mine(comm->size);
    for (int i = 0; i < comm->size; i++) mine[i] = i;
    comm->world.resize(comm->size);
    MPI_Group_translate_ranks(g, comm->size, mine.data(), wg, comm->world.data());
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    std::lock_guard<std::mutex> l(comms_mutex());
    live_comms().push_back(comm);
    return comm;
}
inline void drop_comm(ncclComm_t comm) {
    std::lock_guard<std::mutex> l(comms_mutex());
    auto& v = live_comms();
    v.erase(std::remove(v.begin(), v.end(), comm), v.end());
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
        sendrecv(partial.data(), partial.size(), (r + 1) % n, recv.data(), recv.size(), (r - 1 + n) % n, comm);
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
        sendrecv(send.data(), send.size(), (r + 1) % n, b + off[rc] * es, (off[rc + 1] - off[rc]) * es, (r - 1 + n) % n, comm);
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
inline const char* ncclGetLastError(ncclComm_t comm) {
    static char msg[128];
    int p = comm ? comm->stopped_peer.load() : -1;
    if (p < 0) return "";
    snprintf(msg, sizeof(msg), "emulated NCCL: rank %d stopped answering", p);
    return msg;
}
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
    emu::quiesce();
    emu::MpiLock g(emu::mpi_mutex());
    if (emu::ctl == MPI_COMM_NULL) MPI_Comm_dup(MPI_COMM_WORLD, &emu::ctl);
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
    *comm = emu::new_comm(c, dev);
    return ncclSuccess;
}
inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
    return ncclCommInitRank(comm, nranks, id, rank);
}
inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out, ncclConfig_t*) {
    emu::quiesce();
    emu::MpiLock g(emu::mpi_mutex());
    MPI_Comm c;
    MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &c);
    if (c == MPI_COMM_NULL) {
        *out = nullptr;
        return ncclSuccess;
    }
    *out = emu::new_comm(c, comm->device);
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
    emu::quiesce();
    emu::drop_comm(comm);
    bool last;
    {
        std::lock_guard<std::mutex> l(emu::comms_mutex());
        last = emu::live_comms().empty();
    }
    if (last) emu::progress_stop();  // nothing pending; MPI is the host's alone again
    MPI_Comm_free(&comm->mpi);
    if (last && emu::ctl != MPI_COMM_NULL) MPI_Comm_free(&emu::ctl);
    delete comm;
    return ncclSuccess;
}
inline ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
// NCCL 2.27's revoke (nccl.h 2.28): the communicator's operations in flight stop (the emulator
// abandons them: a collective waiting on a peer ends unfinished) and it takes no new ones; it can
// still be shrunk, split or destroyed. revokeFlags must be NCCL_REVOKE_DEFAULT.
inline ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
    if (!comm || revokeFlags != NCCL_REVOKE_DEFAULT) return ncclInvalidArgument;
    comm->revoked = true;
    return ncclSuccess;
}
// NCCL 2.27's shrink (nccl.h 2.28): the ranks not in excludeRanksList (every remaining rank passes
// the same list; the excluded ones do not call it) get a communicator of themselves, ranked in their
// old order with the gaps closed. NCCL_SHRINK_DEFAULT: the parent must have nothing in flight (the
// emulator waits for it, as a GPU's stream would); NCCL_SHRINK_ABORT: the parent is revoked first,
// its operations in flight abandoned (a collective stuck on a stopped peer ends unfinished). Built
// over MPI_Comm_create_group, collective over the remaining ranks only.
inline ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* out,
                                   ncclConfig_t*, int shrinkFlags) {
    if (!comm || !out || excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList)) return ncclInvalidArgument;
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) return ncclInvalidArgument;
    std::vector<int> seen(comm->size, 0);
    for (int i = 0; i < excludeRanksCount; i++) {
        int r = excludeRanksList[i];
        if (r < 0 || r >= comm->size || seen[r] || r == comm->rank) return ncclInvalidArgument;
        seen[r] = 1;
    }
    if (shrinkFlags == NCCL_SHRINK_ABORT) comm->revoked = true;
    else emu::quiesce();
    emu::MpiLock g(emu::mpi_mutex());
    MPI_Group parent, kept;
    MPI_Comm_group(comm->mpi, &parent);
    MPI_Group_excl(parent, excludeRanksCount, excludeRanksList, &kept);
    MPI_Comm c;
    MPI_Comm_create_group(comm->mpi, kept, emu::kShrinkTag, &c);
    MPI_Group_free(&parent);
    MPI_Group_free(&kept);
    *out = emu::new_comm(c, comm->device);
    return ncclSuccess;
}
// Leaves the communicator's pending collectives where they are (they may never end) and forgets it.
inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
#ifdef EMU_CHECK
    emu::forget_comm(comm);
#endif
    emu::drop_comm(comm);
    return ncclSuccess;
}
inline ncclResult_t ncclCommCount(const ncclComm_t comm, int* n) { *n = comm->size; return ncclSuccess; }
inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* r) { *r = comm->rank; return ncclSuccess; }
inline ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* d) { *d = comm->device; return ncclSuccess; }
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* e) {
    if (!comm) return ncclInvalidArgument;
    *e = (ncclResult_t)comm->async_error.load();
    return ncclSuccess;
}
// Emulator extensions (guard with #ifdef EMU_CUDA): the world rank whose stop this communicator
// reports (-1: none), and the `peer stops` fault itself: once the collectives already issued have
// completed, this rank stops answering (its progress thread freezes) and tells every other rank,
// which then see ncclRemoteError after the delay.
inline int emu_nccl_stopped_peer(ncclComm_t comm) { return comm ? comm->stopped_peer.load() : -1; }
inline void emu_nccl_stop_answering(void) {
    emu::quiesce();  // what was issued still runs (a hung host's GPU finishes its queue); nothing after
    emu::answering = false;
    if (emu::ctl == MPI_COMM_NULL) return;
    static int me;
    int n;
    std::vector<MPI_Request> r;
    {
        emu::MpiLock g(emu::mpi_mutex());
        MPI_Comm_rank(emu::ctl, &me);
        MPI_Comm_size(emu::ctl, &n);
        r.resize(n > 1 ? n - 1 : 0);
        for (int p = 0, i = 0; p < n; p++)
            if (p != me) MPI_Isend(&me, 1, MPI_INT, p, emu::kStopTag, emu::ctl, &r[i++]);
    }
    double until = emu::now_s() + 2.0;  // one int each: they leave at once, but give MPI a moment
    for (int flag = 0; !flag && emu::now_s() < until; usleep(1000)) {
        emu::MpiLock g(emu::mpi_mutex());
        MPI_Testall((int)r.size(), r.data(), &flag, MPI_STATUSES_IGNORE);
    }
}

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
// The bytes a ring step s = 0 .. n-2 sends, chunk first - s each step (reduce-scatter: first = rank - 1,
// all-gather: first = rank).
inline size_t ring_sent(const std::vector<size_t>& off, int first, int n, size_t es) {
    size_t b = 0;
    for (int s = 0; s < n - 1; s++) {
        int c = ((first - s) % n + n) % n;
        b += (off[c + 1] - off[c]) * es;
    }
    return b;
}
// sent: the bytes this rank's part will hand to MPI (counted at issue).
template <class F> ncclResult_t nccl_run(ncclComm_t comm, cudaStream_t s, const char* what, const void* in,
                                         size_t in_bytes, void* out, size_t out_bytes, size_t sent, F f) {
    auto issue = [=]() mutable -> ncclResult_t {
        if (comm->revoked.load()) return ncclInvalidUsage;  // revoked or shrunk with NCCL_SHRINK_ABORT
        nccl_bytes += sent;
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
        enqueue_collective(s, what, [f](uint64_t ticket) { progress_submit(ticket, [f]() mutable { f(); }); });
        return ncclSuccess;
#endif
    };
    if (nccl_group_depth > 0) {
        nccl_group.push_back(issue);
        return ncclSuccess;
    }
    return issue();
}
}  // namespace emu

namespace emu { inline void group_p2p_clear(); }
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
    emu::group_p2p_clear();
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
    auto chunks = emu::even_chunks(count, comm->size);
    size_t sent = emu::ring_sent(chunks, comm->rank - 1, comm->size, es) + emu::ring_sent(chunks, comm->rank, comm->size, es);
    return emu::nccl_run(comm, s, "ncclAllReduce", sendbuff, count * es, recvbuff, count * es, sent, [=] {
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
    size_t sent = emu::ring_sent(emu::even_chunks(recvcount * comm->size, comm->size), comm->rank - 1, comm->size, es);
    return emu::nccl_run(comm, s, "ncclReduceScatter", sendbuff, recvcount * comm->size * es, recvbuff, recvcount * es,
                         sent, [=] {
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
    size_t sent = emu::ring_sent(emu::even_chunks(sendcount * comm->size, comm->size), comm->rank, comm->size, es);
    return emu::nccl_run(comm, s, "ncclAllGather", sendbuff, sendcount * es, recvbuff, sendcount * comm->size * es, sent,
                         [=] {
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
    return emu::nccl_run(comm, s, "ncclBroadcast", pos == 0 ? sendbuff : nullptr, bytes, recvbuff, bytes,
                         pos < n - 1 ? bytes : 0, [=] {
        if (pos == 0 && recvbuff != sendbuff) memmove(recvbuff, sendbuff, bytes);
        if (bytes > INT_MAX) emu::die("NCCL emulation: a broadcast over 2 GiB");
        if (pos > 0) emu::send_or_recv(recvbuff, bytes, -1, (comm->rank - 1 + n) % n, comm);
        if (pos < n - 1) emu::send_or_recv(recvbuff, bytes, (comm->rank + 1) % n, -1, comm);
        return ncclSuccess;
    });
}
inline ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(buff, buff, count, t, root, comm, s);
}

// ---- point to point: ncclSend / ncclRecv ----
// A send and a receive match per (communicator, peer) in issue order, as NCCL's do. The sends and
// receives of one group on one stream run as one operation that posts them all at once, so a group
// may send to and receive from several peers (itself too) in any order without deadlock. Outside a
// group each call is an operation of its own that ends when its peer's matching call has run (two
// ranks that both send first may hang, as on a GPU: put such exchanges in a group). Each transfer first
// exchanges its byte count: a count or type that differs from the peer's ends the program with a
// message naming both (NCCL's behaviour is undefined there). A peer that never posts the match hangs
// the call, as NCCL does (the trainer's watchdog reports it). Bytes: the sends' payload.
namespace emu {
constexpr int kP2pSizeTag = 7179, kP2pDataTag = 7180;
struct P2p { bool send; void* buf; size_t bytes; int peer; ncclComm_t comm; };
typedef std::shared_ptr<std::vector<P2p>> P2pList;
inline std::vector<std::pair<cudaStream_t, P2pList>> group_p2p;  // an open group's p2p operation per stream

// Posts every transfer's size, checks them, then posts every payload; waits for all of each phase.
inline void p2p_exchange(const std::vector<P2p>& ops) {
    size_t n = ops.size();
    std::vector<unsigned long long> sizes(n), told(n);
    std::vector<MPI_Request> r(n);
    for (size_t i = 0; i < n; i++) {
        const P2p& o = ops[i];
        if (o.bytes > INT_MAX) die("NCCL emulation: a send or receive over 2 GiB");
        sizes[i] = o.bytes;
        MpiLock g(mpi_mutex());
        if (o.send) MPI_Isend(&sizes[i], 1, MPI_UNSIGNED_LONG_LONG, o.peer, kP2pSizeTag, o.comm->mpi, &r[i]);
        else MPI_Irecv(&told[i], 1, MPI_UNSIGNED_LONG_LONG, o.peer, kP2pSizeTag, o.comm->mpi, &r[i]);
    }
    for (size_t i = 0; i < n; i++) wait_requests(&r[i], 1, ops[i].comm);
    for (size_t i = 0; i < n; i++)
        if (!ops[i].send && told[i] != sizes[i]) {
            fprintf(stderr, "cuda_emu: ncclRecv on rank %d expects %llu bytes from rank %d, whose matching ncclSend "
                    "sends %llu (a send and its receive must have the same count and type)\n",
                    ops[i].comm->rank, sizes[i], ops[i].peer, told[i]);
            abort();
        }
    for (size_t i = 0; i < n; i++) {
        const P2p& o = ops[i];
        MpiLock g(mpi_mutex());
        if (o.send) MPI_Isend(o.buf, (int)o.bytes, MPI_BYTE, o.peer, kP2pDataTag, o.comm->mpi, &r[i]);
        else MPI_Irecv(o.buf, (int)o.bytes, MPI_BYTE, o.peer, kP2pDataTag, o.comm->mpi, &r[i]);
    }
    for (size_t i = 0; i < n; i++) wait_requests(&r[i], 1, ops[i].comm);
}
// Issues the transfers as one operation of stream s; under --check the send buffers are read and
// the receive buffers written by it.
inline ncclResult_t p2p_issue(cudaStream_t s, P2pList ops) {
    const char* what = ops->size() == 1 ? ((*ops)[0].send ? "ncclSend" : "ncclRecv") : "ncclSend/ncclRecv group";
    for (const P2p& o : *ops)
        if (o.send) nccl_bytes += o.bytes;
#ifdef EMU_CHECK
    chk::run_now(s, what, [&] {
        for (const P2p& o : *ops) {
            collective_order(o.comm, what);
            chk::range_access(o.buf, o.bytes, !o.send);
        }
        p2p_exchange(*ops);
    });
#else
    enqueue_collective(s, what, [ops](uint64_t ticket) { progress_submit(ticket, [ops]() { p2p_exchange(*ops); }); });
#endif
    return ncclSuccess;
}
inline ncclResult_t p2p_call(bool send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                             cudaStream_t s) {
    if (!comm || peer < 0 || peer >= comm->size) return ncclInvalidArgument;
    P2p o{send, (void*)buf, count * nccl_size(t), peer, comm};
    if (nccl_group_depth == 0) return p2p_issue(s, std::make_shared<std::vector<P2p>>(1, o));
    for (auto& sp : group_p2p)
        if (sp.first == s) {
            sp.second->push_back(o);
            return ncclSuccess;
        }
    P2pList ops = std::make_shared<std::vector<P2p>>(1, o);
    group_p2p.emplace_back(s, ops);
    nccl_group.push_back([s, ops]() { return p2p_issue(s, ops); });  // at the group's first p2p call on s
    return ncclSuccess;
}
inline void group_p2p_clear() { group_p2p.clear(); }
}  // namespace emu

// count elements of type t from sendbuff to rank peer of comm (its matching ncclRecv).
inline ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                             cudaStream_t s) {
    return emu::p2p_call(true, sendbuff, count, t, peer, comm, s);
}
// count elements of type t into recvbuff from rank peer of comm (its matching ncclSend).
inline ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
    return emu::p2p_call(false, recvbuff, count, t, peer, comm, s);
}

#endif
