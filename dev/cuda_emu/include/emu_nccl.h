// emu_nccl.h: the emulated NCCL (API of nccl.h 2.28: init, split, shrink, revoke, abort, destroy,
// the collectives, ncclSend/ncclRecv, groups), one process per GPU, over a transport of its own.
// Each collective is a ring of send/receive pairs (reduce-scatter, all-gather; all-reduce =
// reduce-scatter + all-gather; broadcast = a chain from the root), so the reduction order is fixed.
// emu_nccl_bytes_sent() returns the bytes this rank's collectives hand to the transport, counted when
// each is issued (per all-reduce of N bytes on n ranks: 2 (n-1)/n N, up to rounding of uneven
// chunks), so a count read between two steps does not depend on whether the last collective has run.
// A call returns at once: in plain builds the collective runs on the rank's progress thread when its
// stream reaches it (emu_async.h), in issue order; under --check it runs inside the call, after its
// stream's earlier work. Between ncclGroupStart and ncclGroupEnd (nestable) calls are only recorded,
// and the outermost ncclGroupEnd issues them all, in call order, on their streams, as NCCL launches a
// group's operations at ncclGroupEnd (so stream work issued inside the group runs before them, and
// their buffers must stay untouched until then). bf16 partial sums are rounded to bf16 at each ring
// step. ncclSend/ncclRecv: see "point to point" below.
//
// Transport (no MPI): one Unix-domain stream socket per pair of processes, in Linux's abstract
// namespace (nothing to clean up), shared by every communicator between them. A message is a frame
// (communicator uid, tag, length, payload); each process's reader thread drains all its sockets
// into per-(communicator, peer, tag) queues, so a send never waits for the receiver to post (two
// big sends cannot deadlock) and communicators never mix. ncclCommInitRank is collective only over
// the nranks processes that call it with the id (as in NCCL; no launcher needed): each listens at
// "emu_nccl.<hash of id>.<rank>", connects to the lower ranks and accepts the higher ones (retrying
// until TRAIN_GPT2_TIMEOUT, default 60 s, else ncclSystemError); a pair that is already connected
// keeps its first socket. A communicator's uid is the id's hash; a split's or a shrink's is derived
// from its parent's uid, the parent's count of derived communicators and the split colour, so that
// the members agree on it without talking (a split all-gathers (colour, key) on the parent).
//
// Peers that stop: a rank that calls emu_nccl_stop_answering() (the trainer's -fi hang_* faults)
// stops answering and tells the others; a process that dies (its socket ends: EOF, ECONNRESET,
// EPIPE, e.g. after SIGKILL) is treated the same way. After EMU_NCCL_DETECT_S seconds (default 0.5;
// "off": a stop notice is never detected, as NCCL cannot tell a live but hung peer; an ended socket
// still is, after 0.5 s) every communicator with that peer (and not destroyed by it: ncclCommDestroy
// tells the members) reports ncclRemoteError, emu_nccl_stopped_peer() names the peer's rank in the
// root communicator (the one ncclCommInitRank made, which the communicator descends from), and a
// collective with it never ends unless the communicator is revoked (ncclCommRevoke, ncclCommShrink
// with NCCL_SHRINK_ABORT): then it is abandoned. Writes to a dead peer never raise SIGPIPE.
// Exit: the reader and progress threads, and what they use, are never destroyed, so a frozen one
// does not hold up exit().
#ifndef EMU_NCCL_H
#define EMU_NCCL_H
#include <climits>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "emu_cuda.h"
#include "cuda_bf16.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
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

namespace emu { struct Conn; }
struct ncclComm {
    uint64_t uid;                         // names its messages (the same on every member)
    int rank, size, device;
    std::vector<emu::Conn*> peers;        // each member's connection (this rank's: the loopback)
    std::vector<int> root_rank;           // each member's rank in the root communicator
    uint32_t derived = 0;                 // communicators split or shrunk from this one so far
    std::atomic<int> async_error{0};      // ncclResult_t, set by the reader thread
    std::atomic<int> stopped_peer{-1};    // the root rank whose stop it reports
    std::atomic<bool> by_notice{true};    // that peer said it stopped (else its connection ended)
    std::atomic<bool> revoked{false};     // ncclCommRevoke or ncclCommShrink(NCCL_SHRINK_ABORT): its
                                          // collectives in flight are abandoned, new ones refused
    // nonblocking communicators (config->blocking 0; "nonblocking" below):
    bool nonblocking = false;
    std::atomic<int> job{0};              // ncclResult_t of its creation on a thread (init, split)
    std::atomic<int> polls_due{0};        // polls that still see ncclInProgress after a call returned it
    std::atomic<bool> owes_poll{false};   // a call returned ncclInProgress; not yet polled out of it
    std::atomic<bool> cancel{false};      // aborted while its creation runs
    ncclComm* creating = nullptr;         // a split of this one still being created
};
typedef ncclComm* ncclComm_t;

namespace emu {
inline std::atomic<size_t> nccl_bytes{0};

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

// ---- peers that stop ----
inline std::atomic<bool> answering{true};   // false: this rank stopped answering
inline double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
inline double detect_s() {  // the delay before a stop notice is reported (< 0: never)
    static double d = [] {
        const char* e = getenv("EMU_NCCL_DETECT_S");
        if (!e) return 0.5;
        return strcmp(e, "off") == 0 ? -1.0 : atof(e);
    }();
    return d;
}
inline std::mutex& comms_mutex() { static std::mutex* m = new std::mutex; return *m; }  // never destroyed: threads outlive exit()
inline std::vector<ncclComm*>& live_comms() { static auto* v = new std::vector<ncclComm*>; return *v; }
[[noreturn]] inline void freeze() {  // a collective that never ends
    for (;;) sleep(1000);
}
// Thrown out of a collective on a revoked communicator (caught by the progress thread, which then
// goes on with the next collective: the revoked one's results are left as they are).
struct Abandoned {};
// A collective on `current` that cannot end (a stopped peer): it waits until the communicator is
// revoked, then is abandoned; never, where nobody revokes it. A --check build runs a collective on
// the host thread, inside the call, where it cannot wait for a revoke that only that thread can
// issue: there it is abandoned at once (its outputs as they are; the communicator reports
// ncclRemoteError, which a caller's wait must look at: NCCL's kernel would wait for the abort).
// EMU_NCCL_PLANT=1 (tests/check_nccl_shrink.sh only): never abandoned, a revoke changes nothing.
[[noreturn]] inline void freeze_until_revoked(ncclComm_t current) {
#if defined(EMU_NCCL_PLANT) && EMU_NCCL_PLANT == 1
    freeze();
#endif
#ifdef EMU_CHECK
    throw Abandoned{};
#endif
    while (!current->revoked.load()) usleep(10000);
    throw Abandoned{};
}

// ---- the transport: one socket per pair of processes, frames demultiplexed into queues ----
constexpr uint32_t kTagRing = 1, kTagP2pSize = 2, kTagP2pData = 3, kTagSplit = 4;  // a communicator's messages
constexpr uint32_t kTagStop = 100, kTagLeft = 101;  // control: "I stopped answering", "I destroyed communicator uid"
struct Frame { uint64_t uid; uint32_t tag, spare; uint64_t bytes; };  // followed by `bytes` bytes
struct Msg { std::unique_ptr<char[]> data; size_t bytes = 0; };
struct Conn {
    int fd;                   // -1: this process (its messages go straight to its queues)
    uint64_t puid;            // the process at the other end
    std::mutex write_mutex;   // one frame at a time
    // guarded by net().m:
    bool reading = true;      // the reader thread still polls it
    double down_at = 0.0;     // when it stopped answering or its connection ended (0: never)
    bool by_notice = false;   // it said it stopped (else its connection ended)
    std::set<uint64_t> left;  // communicators it destroyed
    Conn(int f, uint64_t p) : fd(f), puid(p) {}
};
typedef std::tuple<uint64_t, const Conn*, uint32_t> InboxKey;  // (communicator uid, from, tag)
struct Net {
    std::mutex m;
    std::condition_variable arrived;                // a message reached the inbox
    std::vector<Conn*> conns;                       // every connection, never freed (not the loopback)
    std::map<InboxKey, std::deque<Msg>> inbox;
    Conn* self = nullptr;
    uint64_t puid = 0;                              // this process, random
    bool reader = false;                            // the reader thread runs
    std::atomic<int> downs{0};                      // connections marked down
};
inline uint64_t random_u64() {
    uint64_t x = 0;
    FILE* f = fopen("/dev/urandom", "rb");
    if (!f || fread(&x, sizeof(x), 1, f) != 1) x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(now_s() * 1e9);
    if (f) fclose(f);
    return x ? x : 1;
}
inline Net& net() {  // never destroyed: the reader thread outlives exit()
    static Net* n = [] {
        Net* x = new Net;
        x->puid = random_u64();
        x->self = new Conn(-1, x->puid);
        return x;
    }();
    return *n;
}
inline uint64_t fnv1a(const void* p, size_t n, uint64_t h = 14695981039346656037ull) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ull;
    return h;
}
// The uid of the k-th communicator derived from `parent` (kind: 0 a split of colour `color`, 1 a shrink).
inline uint64_t derived_uid(uint64_t parent, uint32_t k, int32_t kind, int32_t color) {
    uint64_t h = fnv1a(&parent, sizeof(parent));  // field by field: no padding bytes hashed
    h = fnv1a(&k, sizeof(k), h);
    h = fnv1a(&kind, sizeof(kind), h);
    return fnv1a(&color, sizeof(color), h);
}

inline void deliver(const Conn* from, uint64_t uid, uint32_t tag, Msg m) {
    Net& n = net();
    {
        std::lock_guard<std::mutex> g(n.m);
        n.inbox[InboxKey{uid, from, tag}].push_back(std::move(m));
    }
    n.arrived.notify_all();
}
// EMU_NCCL_PLANT=2 (tests/check_nccl_elastic.sh only): an ended connection is never marked.
inline void mark_down(Conn* c, bool by_notice) {
#if defined(EMU_NCCL_PLANT) && EMU_NCCL_PLANT == 2
    if (!by_notice) return;
#endif
    Net& n = net();
    std::lock_guard<std::mutex> g(n.m);
    if (c->down_at > 0.0) return;  // the first cause stays
    c->down_at = now_s();
    c->by_notice = by_notice;
    n.downs++;
}
inline bool send_all(int fd, const void* p, size_t bytes, int flags) {
    for (size_t done = 0; done < bytes;) {
        ssize_t k = send(fd, (const char*)p + done, bytes - done, flags | MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        done += (size_t)k;
    }
    return true;
}
inline bool recv_all(int fd, void* p, size_t bytes) {
    for (size_t done = 0; done < bytes;) {
        ssize_t k = recv(fd, (char*)p + done, bytes - done, MSG_WAITALL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        done += (size_t)k;
    }
    return true;
}
// Sends one message (to a dead peer: lost, and the peer marked down). A rank that stopped answering
// freezes here instead (control messages still go).
inline void send_msg(Conn* c, uint64_t uid, uint32_t tag, const void* p, size_t bytes) {
    if (tag < kTagStop && !answering.load()) freeze();
    if (c->fd < 0) {
        Msg m;
        m.bytes = bytes;
        if (bytes) m.data.reset(new char[bytes]);
        if (bytes) memcpy(m.data.get(), p, bytes);
        deliver(c, uid, tag, std::move(m));
        return;
    }
    Frame h{uid, tag, 0, bytes};
    std::lock_guard<std::mutex> g(c->write_mutex);
    if (!send_all(c->fd, &h, sizeof(h), bytes ? MSG_MORE : 0) || !send_all(c->fd, p, bytes, 0)) mark_down(c, false);
}

// Every communicator with a peer that stopped, or whose connection ended, the delay ago (and that the
// peer did not destroy) reports ncclRemoteError naming the peer's root rank. Called by the reader thread.
inline void report_down_peers() {
    Net& n = net();
    if (n.downs.load() == 0) return;
    double t = now_s(), d = detect_s();
    std::lock_guard<std::mutex> a(n.m);
    std::lock_guard<std::mutex> b(comms_mutex());
    for (Conn* c : n.conns) {
        double delay = c->by_notice ? d : (d < 0 ? 0.5 : d);
        if (c->down_at == 0.0 || delay < 0 || t - c->down_at < delay) continue;
        for (ncclComm* comm : live_comms()) {
            if (comm->async_error.load() != ncclSuccess || c->left.count(comm->uid)) continue;
            for (int i = 0; i < comm->size; i++)
                if (comm->peers[i] == c) {
                    comm->stopped_peer = comm->root_rank[i];
                    comm->by_notice = c->by_notice;
                    comm->async_error = ncclRemoteError;
                }
        }
    }
}
// One frame from c into the inbox (a stop notice or a destroy notice into c's state); false when the
// connection ended.
inline bool read_frame(Conn* c) {
    Frame h;
    if (!recv_all(c->fd, &h, sizeof(h))) return false;
    Msg m;
    m.bytes = h.bytes;
    if (h.bytes) m.data.reset(new char[h.bytes]);
    if (h.bytes && !recv_all(c->fd, m.data.get(), h.bytes)) return false;
    if (h.tag == kTagStop) {
        mark_down(c, true);
    } else if (h.tag == kTagLeft) {
        std::lock_guard<std::mutex> g(net().m);
        c->left.insert(h.uid);
    } else {
        deliver(c, h.uid, h.tag, std::move(m));
    }
    return true;
}
// The reader thread: drains every socket (a frame at a time) and reports peers that went down.
inline void reader_main() {
    Net& n = net();
    std::vector<pollfd> fds;
    std::vector<Conn*> who;
    for (;;) {
        fds.clear();
        who.clear();
        {
            std::lock_guard<std::mutex> g(n.m);
            for (Conn* c : n.conns)
                if (c->reading) { fds.push_back(pollfd{c->fd, POLLIN, 0}); who.push_back(c); }
        }
        poll(fds.data(), fds.size(), 10);  // 10 ms: new connections and the detection delay
        for (size_t i = 0; i < fds.size(); i++) {
            if (!fds[i].revents || read_frame(who[i])) continue;
            {
                std::lock_guard<std::mutex> g(n.m);
                who[i]->reading = false;  // the fd stays open (never reused), so that a send fails with EPIPE
            }
            mark_down(who[i], false);
        }
        report_down_peers();
    }
}
// The connection for socket fd to process puid: the existing one if the pair is already connected
// (both ends see it, so both drop the new socket), else a new one that the reader thread polls.
inline Conn* adopt(int fd, uint64_t puid) {
    Net& n = net();
    std::lock_guard<std::mutex> g(n.m);
    for (Conn* c : n.conns)
        if (c->puid == puid) { close(fd); return c; }
    int buf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    Conn* c = new Conn(fd, puid);
    n.conns.push_back(c);
    if (!n.reader) {
        n.reader = true;
        std::thread(reader_main).detach();
    }
    return c;
}
// Waits for the next message (uid, tag) from c. 0: it came (*m); 1: comm was revoked; 2: comm
// reports a peer that stopped. A rank that stopped answering freezes here.
inline int wait_msg(const Conn* c, uint64_t uid, uint32_t tag, ncclComm_t comm, Msg* m) {
    Net& n = net();
    if (!answering.load()) freeze();
    std::unique_lock<std::mutex> l(n.m);
    for (;;) {
        auto it = n.inbox.find(InboxKey{uid, c, tag});
        if (it != n.inbox.end() && !it->second.empty()) {
            *m = std::move(it->second.front());
            it->second.pop_front();
            if (it->second.empty()) n.inbox.erase(it);
            return 0;
        }
#if !(defined(EMU_NCCL_PLANT) && EMU_NCCL_PLANT == 1) // the plant: a revoke abandons nothing, here either
        if (comm && comm->revoked.load()) return 1;
#endif
        if (comm && comm->async_error.load() != ncclSuccess) return 2;
        n.arrived.wait_for(l, std::chrono::milliseconds(10));
    }
}
// A collective's receive of exactly `bytes` bytes: a revoked communicator abandons it, a stopped
// peer freezes it (until revoked).
inline void recv_into(void* buf, size_t bytes, int from, uint32_t tag, ncclComm_t comm) {
    Msg m;
    for (int w; (w = wait_msg(comm->peers[from], comm->uid, tag, comm, &m)) != 0;) {
        if (w == 1) throw Abandoned{};
        freeze_until_revoked(comm);
    }
    if (m.bytes != bytes) {
        fprintf(stderr, "cuda_emu: NCCL emulation: rank %d got %zu bytes from rank %d where %zu were due\n", comm->rank,
                m.bytes, from, bytes);
        abort();
    }
    if (bytes) memcpy(buf, m.data.get(), bytes);
}
// Drops the messages still queued for a destroyed communicator.
inline void purge_inbox(uint64_t uid) {
    Net& n = net();
    std::lock_guard<std::mutex> g(n.m);
    auto lo = n.inbox.lower_bound(InboxKey{uid, nullptr, 0});
    auto hi = lo;
    while (hi != n.inbox.end() && std::get<0>(hi->first) == uid) ++hi;
    n.inbox.erase(lo, hi);
}

// ---- ncclCommInitRank's rendezvous: rank r listens at a name of (id, r) ----
struct Hello { uint64_t magic, id, puid; int32_t nranks, rank; };
constexpr uint64_t kHelloMagic = 0x656d755f6e63636cull;  // "emu_nccl"
inline socklen_t rank_address(sockaddr_un* a, uint64_t id, int rank) {
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;  // abstract namespace: sun_path starts with a 0 byte
    int len = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "emu_nccl.%016llx.%d", (unsigned long long)id, rank);
    return (socklen_t)(offsetof(sockaddr_un, sun_path) + 1 + len);
}
inline double init_timeout_s() {
    const char* e = getenv("TRAIN_GPT2_TIMEOUT");
    double t = e ? atof(e) : 0.0;
    return t > 0.0 ? t : 60.0;
}
inline int listen_at(uint64_t id, int rank, int backlog) {
    sockaddr_un a;
    socklen_t len = rank_address(&a, id, rank);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (bind(fd, (sockaddr*)&a, len) != 0 || listen(fd, backlog) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}
// cancel (a nonblocking communicator's creation, NULL otherwise): ncclCommAbort ends the waits.
inline bool cancelled(const std::atomic<bool>* cancel) { return cancel && cancel->load(); }
inline int connect_until(uint64_t id, int rank, double deadline, const std::atomic<bool>* cancel) {
    sockaddr_un a;
    socklen_t len = rank_address(&a, id, rank);
    do {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        if (connect(fd, (sockaddr*)&a, len) == 0) return fd;
        close(fd);
        usleep(10000);  // not listening yet
    } while (now_s() < deadline && !cancelled(cancel));
    return -1;
}
inline bool wait_readable(int fd, double deadline, const std::atomic<bool>* cancel) {
    for (;;) {
        int ms = (int)((deadline - now_s()) * 1000.0);
        if (ms <= 0 || cancelled(cancel)) return false;
        pollfd p{fd, POLLIN, 0};
        int r = poll(&p, 1, ms < 20 ? ms : 20);
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
}
inline bool read_hello(int fd, Hello* h, double deadline, const std::atomic<bool>* cancel) {
    return wait_readable(fd, deadline, cancel) && recv_all(fd, h, sizeof(*h)) && h->magic == kHelloMagic;
}
inline ncclResult_t init_fail(ncclResult_t r, int rank, int nranks, const char* what, int peer) {
    fprintf(stderr, "cuda_emu: ncclCommInitRank, rank %d of %d: %s rank %d\n", rank, nranks, what, peer);
    return r;
}
// Connects rank `rank` of nranks to every other (the lower ranks by connecting, the higher ones by
// accepting), filling peers[].
inline ncclResult_t rendezvous(uint64_t id, int nranks, int rank, std::vector<Conn*>& peers,
                               const std::atomic<bool>* cancel = nullptr) {
    Net& n = net();
    double deadline = now_s() + init_timeout_s();
    int lfd = listen_at(id, rank, nranks);
    if (lfd < 0) return init_fail(ncclInvalidUsage, rank, nranks, "cannot listen (this id is taken) as", rank);
    Hello mine{kHelloMagic, id, n.puid, nranks, rank}, theirs;
    ncclResult_t r = ncclSuccess;
    for (int q = 0; q < rank && r == ncclSuccess; q++) {
        int fd = connect_until(id, q, deadline, cancel);
        if (fd < 0) { r = cancelled(cancel) ? ncclInvalidUsage : init_fail(ncclSystemError, rank, nranks, "timed out connecting to", q); break; }
        if (!send_all(fd, &mine, sizeof(mine), 0) || !read_hello(fd, &theirs, deadline, cancel) || theirs.id != id ||
            theirs.nranks != nranks || theirs.rank != q) {
            close(fd);
            r = init_fail(ncclSystemError, rank, nranks, "no valid answer from", q);
            break;
        }
        peers[q] = adopt(fd, theirs.puid);
    }
    for (int k = rank + 1; k < nranks && r == ncclSuccess; k++) {
        int fd = wait_readable(lfd, deadline, cancel) ? accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC) : -1;
        if (fd < 0) {
            r = cancelled(cancel) ? ncclInvalidUsage : init_fail(ncclSystemError, rank, nranks, "timed out waiting for a higher rank, e.g.", k);
            break;
        }
        if (!read_hello(fd, &theirs, deadline, cancel) || theirs.id != id || theirs.nranks != nranks || theirs.rank <= rank ||
            theirs.rank >= nranks || peers[theirs.rank] || !send_all(fd, &mine, sizeof(mine), 0)) {
            close(fd);
            r = init_fail(ncclInvalidUsage, rank, nranks, "a connection that is not a higher rank of this id, e.g.", k);
            break;
        }
        peers[theirs.rank] = adopt(fd, theirs.puid);
    }
    close(lfd);
    return r;
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
            p.cv.wait(l, [&] { return !p.q.empty() || p.quit; });
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
// Every collective issued so far has completed (before destroying a communicator, or stopping).
inline void quiesce() {
#ifndef EMU_CHECK
    wait_ticket(coll_tickets);
#endif
}
// Fills comm in and makes it live (its peers' stops reported on it), unless it was aborted while
// its creation ran (nonblocking); returns whether it is live.
inline bool fill_comm(ncclComm_t comm, uint64_t uid, int rank, int device, std::vector<Conn*> peers,
                      std::vector<int> root_rank) {
    std::lock_guard<std::mutex> l(comms_mutex());
    if (comm->cancel.load()) return false;
    comm->uid = uid;
    comm->rank = rank;
    comm->size = (int)peers.size();
    comm->device = device;
    comm->peers = std::move(peers);
    comm->root_rank = std::move(root_rank);
    live_comms().push_back(comm);
    return true;
}
inline ncclComm_t new_comm(uint64_t uid, int rank, int device, std::vector<Conn*> peers, std::vector<int> root_rank) {
    ncclComm_t comm = new ncclComm;
    fill_comm(comm, uid, rank, device, std::move(peers), std::move(root_rank));
    return comm;
}

// ---- nonblocking communicators (ncclConfig_t blocking 0) ----
// As NCCL documents them: a call may return ncclInProgress, and then the caller must poll
// ncclCommGetAsyncError until the state leaves ncclInProgress before any other call on that
// communicator (and before work on the streams it uses). The emulator returns ncclInProgress
// wherever NCCL may: ncclCommInitRankConfig and a nonblocking split run their rendezvous on a thread
// of their own (the communicator is in progress until it ends; ncclCommAbort stops it), a shrink,
// a collective, a send or receive outside a group and a group's ncclGroupEnd leave their
// communicators in progress for 1 to 3 polls (in turn). A call on a communicator that still owes its
// poll is reported (exit 66; NCCL's behaviour is undefined there): nonblocking_owed.
inline std::atomic<unsigned> nb_turn{0};
// The state ncclCommGetAsyncError reports (one poll of a call's polls_due spent).
inline int nb_state(ncclComm_t comm) {
    int e = comm->async_error.load();
    if (e != ncclSuccess) return e;
    int j = comm->job.load();
    if (j != ncclSuccess) return j;
    if (comm->creating && comm->creating->job.load() == ncclInProgress) return ncclInProgress;
    int due = comm->polls_due.load();
    while (due > 0 && !comm->polls_due.compare_exchange_weak(due, due - 1)) {}
    return due > 0 ? ncclInProgress : ncclSuccess;
}
// A call on a nonblocking communicator returned r: ncclInProgress where it may (it owes a poll).
inline ncclResult_t nb_returned(ncclComm_t comm, ncclResult_t r) {
    if (!comm || !comm->nonblocking || r != ncclSuccess) return r;
    comm->polls_due = 1 + (int)(nb_turn++ % 3);
    comm->owes_poll = true;
    return ncclInProgress;
}
// `call` on comm while an earlier call's ncclInProgress was never polled out of: reported.
inline void nonblocking_owed(ncclComm_t comm, const char* call) {
    if (!comm || !comm->owes_poll.load()) return;
    fprintf(stderr, "cuda_emu: %s on a nonblocking communicator whose last call returned ncclInProgress, not yet "
            "polled out of it (NCCL: call ncclCommGetAsyncError until it reports ncclSuccess before any other call on "
            "that communicator)\n", call);
    report_exit();
}
inline void drop_comm(ncclComm_t comm) {
    std::lock_guard<std::mutex> l(comms_mutex());
    auto& v = live_comms();
    v.erase(std::remove(v.begin(), v.end(), comm), v.end());
}

// A ring step: sends to rank `to`, receives from rank `from` (a send never waits for its receiver).
inline void sendrecv(const void* sbuf, size_t sbytes, int to, void* rbuf, size_t rbytes, int from, ncclComm_t comm) {
    send_msg(comm->peers[to], comm->uid, kTagRing, sbuf, sbytes);
    recv_into(rbuf, rbytes, from, kTagRing, comm);
}
// One of send / receive (to or from: a rank, the other -1).
inline void send_or_recv(void* buf, size_t bytes, int to, int from, ncclComm_t comm) {
    if (to >= 0) send_msg(comm->peers[to], comm->uid, kTagRing, buf, bytes);
    else recv_into(buf, bytes, from, kTagRing, comm);
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

inline std::atomic<bool> die_in_ring{false};  // emu_nccl_die_in_next_ring was called

// Ring all-gather in place: buf holds every chunk's place; chunk r is already there.
inline void ring_all_gather(void* buf, const std::vector<size_t>& off, ncclDataType_t t, ncclComm_t comm) {
    int n = comm->size, r = comm->rank;
    size_t es = nccl_size(t);
    for (int s = 0; s < n - 1; s++) {
        if (s == n - 2 && n >= 3 && die_in_ring.load()) raise(SIGKILL);
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
    snprintf(msg, sizeof(msg), "emulated NCCL: rank %d %s", p,
             comm->by_notice.load() ? "stopped answering" : "is gone (its connection ended)");
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
// Collective over the nranks processes that call it with this id (rank: this one's place): they
// connect to each other (emu::rendezvous; a pair already connected keeps its socket) within
// TRAIN_GPT2_TIMEOUT (default 60 s), else ncclSystemError and a line on stderr.
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    EMU_RUNTIME;
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    uint64_t uid = emu::fnv1a(id.internal, sizeof(id.internal));
    std::vector<emu::Conn*> peers(nranks, nullptr);
    peers[rank] = emu::net().self;
    ncclResult_t r = nranks > 1 ? emu::rendezvous(uid, nranks, rank, peers) : ncclSuccess;
    if (r != ncclSuccess) return r;
    std::vector<int> root(nranks);
    for (int i = 0; i < nranks; i++) root[i] = i;
    int dev;
    cudaGetDevice(&dev);
    *comm = emu::new_comm(uid, rank, dev, std::move(peers), std::move(root));
    return ncclSuccess;
}
// config->blocking 0: a nonblocking communicator, returned at once in progress while its
// rendezvous runs on a thread of its own (ncclCommGetAsyncError: ncclInProgress, then ncclSuccess
// or why it failed; ncclCommAbort stops it).
inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
    if (!config || config->blocking) return ncclCommInitRank(comm, nranks, id, rank);
    EMU_RUNTIME;
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    uint64_t uid = emu::fnv1a(id.internal, sizeof(id.internal));
    int dev;
    cudaGetDevice(&dev);
    ncclComm_t c = new ncclComm;  // never freed while its thread may run (ncclCommAbort leaves it)
    c->nonblocking = true;
    c->job = ncclInProgress;
    c->owes_poll = true;
    *comm = c;
    std::thread([c, uid, nranks, rank, dev] {
        EMU_RUNTIME;
        std::vector<emu::Conn*> peers(nranks, nullptr);
        peers[rank] = emu::net().self;
        ncclResult_t r = nranks > 1 ? emu::rendezvous(uid, nranks, rank, peers, &c->cancel) : ncclSuccess;
        std::vector<int> root(nranks);
        for (int i = 0; i < nranks; i++) root[i] = i;
        if (r == ncclSuccess && !emu::fill_comm(c, uid, rank, dev, std::move(peers), std::move(root))) r = ncclInvalidUsage;
        c->job = r;
    }).detach();
    return ncclInProgress;
}
namespace emu {
// All-gathers (colour, key) over comm (tag kTagSplit): ncclSuccess, or why not (revoked, a stopped peer).
inline ncclResult_t split_gather(ncclComm_t comm, int color, int key, std::vector<std::pair<int, int>>& all) {
    int32_t mine[2] = {color, key};
    for (int p = 0; p < comm->size; p++)
        if (p != comm->rank) send_msg(comm->peers[p], comm->uid, kTagSplit, mine, sizeof(mine));
    all.assign(comm->size, std::make_pair(color, key));
    for (int p = 0; p < comm->size; p++) {
        if (p == comm->rank) continue;
        Msg m;
        int w = wait_msg(comm->peers[p], comm->uid, kTagSplit, comm, &m);
        if (w != 0) return w == 1 ? ncclInvalidUsage : ncclRemoteError;
        if (m.bytes != sizeof(mine)) return ncclInternalError;
        memcpy(mine, m.data.get(), sizeof(mine));
        all[p] = std::make_pair(mine[0], mine[1]);
    }
    return ncclSuccess;
}
// c filled in as the communicator of the parent's members `keep` (parent ranks, in their new order)
// with this uid; whether it is live (fill_comm).
inline bool child_fill(ncclComm_t c, ncclComm_t parent, uint64_t uid, const std::vector<int>& keep) {
    std::vector<Conn*> peers;
    std::vector<int> root;
    int rank = -1;
    for (int p : keep) {
        if (p == parent->rank) rank = (int)peers.size();
        peers.push_back(parent->peers[p]);
        root.push_back(parent->root_rank[p]);
    }
    return fill_comm(c, uid, rank, parent->device, std::move(peers), std::move(root));
}
inline ncclComm_t child_comm(ncclComm_t parent, uint64_t uid, const std::vector<int>& keep) {
    ncclComm_t c = new ncclComm;
    child_fill(c, parent, uid, keep);
    return c;
}
// The members of colour `color` in the order of their keys (then of their parent ranks).
inline std::vector<int> split_members(const std::vector<std::pair<int, int>>& all, int color) {
    std::vector<int> keep;
    for (int p = 0; p < (int)all.size(); p++)
        if (all[p].first == color) keep.push_back(p);
    std::stable_sort(keep.begin(), keep.end(), [&](int a, int b) { return all[a].second < all[b].second; });
    return keep;
}
}  // namespace emu
// Collective over the parent: members of one colour form a communicator, ranked by key, then by
// parent rank; NCCL_SPLIT_NOCOLOR gives NULL. A stopped member fails it (ncclRemoteError). The child
// is nonblocking where config says so, or (config NULL) where the parent is: then its (colour, key)
// exchange runs on a thread of its own, the child (and a nonblocking parent) in progress until it ends.
inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out, ncclConfig_t* config) {
    EMU_RUNTIME;
    if (!comm || !out || (color < 0 && color != NCCL_SPLIT_NOCOLOR)) return ncclInvalidArgument;
    emu::nonblocking_owed(comm, "ncclCommSplit");
    bool nonblocking = config ? config->blocking == 0 : comm->nonblocking;
    uint32_t k = ++comm->derived;
    *out = nullptr;
    if (nonblocking && color != NCCL_SPLIT_NOCOLOR) {
        ncclComm_t c = new ncclComm;  // never freed while its thread may run
        c->nonblocking = true;
        c->job = ncclInProgress;
        c->owes_poll = true;
        comm->creating = c;
        if (comm->nonblocking) comm->owes_poll = true;
        *out = c;
        std::thread([comm, c, color, key, k] {
            EMU_RUNTIME;
            std::vector<std::pair<int, int>> all;
            ncclResult_t r = emu::split_gather(comm, color, key, all);
            if (r == ncclSuccess && !emu::child_fill(c, comm, emu::derived_uid(comm->uid, k, 0, color),
                                                     emu::split_members(all, color)))
                r = ncclInvalidUsage;
            c->job = r;
        }).detach();
        return ncclInProgress;
    }
    std::vector<std::pair<int, int>> all;
    ncclResult_t r = emu::split_gather(comm, color, key, all);
    if (r != ncclSuccess || color == NCCL_SPLIT_NOCOLOR) return r;
    *out = emu::child_comm(comm, emu::derived_uid(comm->uid, k, 0, color), emu::split_members(all, color));
    return ncclSuccess;
}
#ifdef EMU_CHECK
namespace emu { inline void forget_comm(const void* comm); }
#endif
// Waits for the communicator's collectives, tells its members (so that this process ending later is
// not reported on it) and frees it.
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    EMU_RUNTIME;
    if (!comm) return ncclInvalidArgument;
    emu::nonblocking_owed(comm, "ncclCommDestroy");
#ifdef EMU_CHECK
    emu::forget_comm(comm);
#endif
    emu::quiesce();
    emu::drop_comm(comm);
    for (int p = 0; p < comm->size; p++)
        if (p != comm->rank) emu::send_msg(comm->peers[p], comm->uid, emu::kTagLeft, nullptr, 0);
    emu::purge_inbox(comm->uid);
    bool last;
    {
        std::lock_guard<std::mutex> l(emu::comms_mutex());
        last = emu::live_comms().empty();
    }
    if (last) emu::progress_stop();  // nothing pending
    delete comm;
    return ncclSuccess;
}
// Nothing to flush (a destroy waits for the collectives); a nonblocking communicator is in progress.
inline ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    emu::nonblocking_owed(comm, "ncclCommFinalize");
    return emu::nb_returned(comm, ncclSuccess);
}
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
// its operations in flight abandoned (a collective stuck on a stopped peer ends unfinished). No
// message is exchanged: the members derive the same uid from the parent's. The child is nonblocking
// where config says so, or (config NULL) where the parent is: then it is returned in progress. (The
// parent's owed poll is not asked for: a shrink with NCCL_SHRINK_ABORT is how a caller leaves a
// communicator stuck in progress.)
inline ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* out,
                                   ncclConfig_t* config, int shrinkFlags) {
    EMU_RUNTIME;
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
    std::vector<int> keep;
    for (int p = 0; p < comm->size; p++)
        if (!seen[p]) keep.push_back(p);
    if (shrinkFlags != NCCL_SHRINK_ABORT) emu::nonblocking_owed(comm, "ncclCommShrink");
    *out = emu::child_comm(comm, emu::derived_uid(comm->uid, ++comm->derived, 1, 0), keep);
    (*out)->nonblocking = config ? config->blocking == 0 : comm->nonblocking;
    return emu::nb_returned(*out, ncclSuccess);
}
// Leaves the communicator's pending collectives where they are (they may never end) and forgets it.
inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    {
        std::lock_guard<std::mutex> l(emu::comms_mutex());
        comm->cancel = true;  // a creation still running stops (fill_comm)
    }
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
    int s = emu::nb_state(comm);
    if (s != ncclInProgress) comm->owes_poll = false;
    *e = (ncclResult_t)s;
    return ncclSuccess;
}
// Emulator extensions (guard with #ifdef EMU_CUDA): the root-communicator rank whose stop this
// communicator reports (-1: none), and the `peer stops` fault itself: once the collectives already
// issued have completed, this rank stops answering (its progress thread freezes) and tells every
// process it is connected to, which then see ncclRemoteError after the delay.
inline int emu_nccl_stopped_peer(ncclComm_t comm) { return comm ? comm->stopped_peer.load() : -1; }
// The `dies inside a collective` fault: the next all-gather phase (of an all-reduce or an
// all-gather) on a communicator of 3 or more ranks kills this process (SIGKILL) just before its last
// ring send. The rank after it then never gets its last chunk, while the one before it gets its own
// from the other side of the ring: the collective ends on some survivors and not on others.
inline void emu_nccl_die_in_next_ring(void) { emu::die_in_ring = true; }
inline void emu_nccl_stop_answering(void) {
    EMU_RUNTIME;
    emu::quiesce();  // what was issued still runs (a hung host's GPU finishes its queue); nothing after
    emu::answering = false;
    emu::Net& n = emu::net();
    std::vector<emu::Conn*> conns;
    {
        std::lock_guard<std::mutex> g(n.m);
        conns = n.conns;
    }
    for (emu::Conn* c : conns) emu::send_msg(c, 0, emu::kTagStop, nullptr, 0);
}

namespace emu {
inline int nccl_group_depth = 0;                                // open ncclGroupStart calls
inline std::vector<std::function<ncclResult_t()>> nccl_group;  // the collectives they deferred
inline std::vector<ncclComm_t> nccl_group_nonblocking;         // their nonblocking communicators

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
// sent: the bytes this rank's part will hand to the transport (counted at issue).
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
            try {
                r = f();
            } catch (const Abandoned&) {
                // a stopped peer (freeze_until_revoked): the call returns, the communicator in error
            }
        });
        return r;
#else
        (void)comm; (void)in; (void)in_bytes; (void)out; (void)out_bytes;
        enqueue_collective(s, what, [f](uint64_t ticket) { progress_submit(ticket, [f]() mutable { f(); }); });
        return ncclSuccess;
#endif
    };
    nonblocking_owed(comm, what);
    if (nccl_group_depth > 0) {
        nccl_group.push_back(issue);
        if (comm->nonblocking) nccl_group_nonblocking.push_back(comm);
        return ncclSuccess;
    }
    return nb_returned(comm, issue());
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
    std::vector<ncclComm_t> nonblocking;
    nonblocking.swap(emu::nccl_group_nonblocking);
    emu::group_p2p_clear();
    ncclResult_t result = ncclSuccess;
    for (auto& op : ops) {
        ncclResult_t r = op();
        if (result == ncclSuccess) result = r;
    }
    if (result != ncclSuccess || nonblocking.empty()) return result;
    for (ncclComm_t c : nonblocking) emu::nb_returned(c, ncclSuccess);  // each owes its poll
    return ncclInProgress;
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
        if (pos > 0) emu::send_or_recv(recvbuff, bytes, -1, (comm->rank - 1 + n) % n, comm);
        if (pos < n - 1) emu::send_or_recv(recvbuff, bytes, (comm->rank + 1) % n, -1, comm);
        return ncclSuccess;
    });
}
// The reduction of every rank's sendbuff lands in the root's recvbuff (recvbuff is not touched
// elsewhere): a chain root+1, root+2, ..., root, each rank adding its own to what it receives and
// handing the partial on, so every rank but the root sends count elements once.
inline ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               int root, ncclComm_t comm, cudaStream_t s) {
    if (!comm || root < 0 || root >= comm->size || !emu::nccl_supported(t, op)) return ncclInvalidArgument;
    size_t es = emu::nccl_size(t), bytes = count * es;
    int n = comm->size, pos = (comm->rank - root - 1 + 2 * n) % n;  // position along the chain; the root's is n - 1
    bool is_root = comm->rank == root;
    return emu::nccl_run(comm, s, "ncclReduce", sendbuff, bytes, is_root ? recvbuff : nullptr, is_root ? bytes : 0,
                         is_root ? 0 : bytes, [=] {
        std::vector<char> partial((const char*)sendbuff, (const char*)sendbuff + bytes);
        if (pos > 0) {
            std::vector<char> got(bytes);
            emu::send_or_recv(got.data(), bytes, -1, (comm->rank - 1 + n) % n, comm);
            emu::reduce_into(got.data(), sendbuff, count, t, op);
            partial.swap(got);
        }
        if (!is_root) {
            emu::send_or_recv(partial.data(), bytes, (comm->rank + 1) % n, -1, comm);
        } else {
            if (op == ncclAvg) emu::divide(partial.data(), count, t, n);
            memcpy(recvbuff, partial.data(), bytes);
        }
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
struct P2p { bool send; void* buf; size_t bytes; int peer; ncclComm_t comm; };
typedef std::shared_ptr<std::vector<P2p>> P2pList;
inline std::vector<std::pair<cudaStream_t, P2pList>> group_p2p;  // an open group's p2p operation per stream

// Sends every transfer's size, checks the sizes received, then sends every payload and receives
// them (sends never wait for their receivers, so any order of peers works).
inline void p2p_exchange(const std::vector<P2p>& ops) {
    for (const P2p& o : ops) {
        unsigned long long size = o.bytes;
        if (o.send) send_msg(o.comm->peers[o.peer], o.comm->uid, kTagP2pSize, &size, sizeof(size));
    }
    for (const P2p& o : ops) {
        unsigned long long told = 0;
        if (o.send) continue;
        recv_into(&told, sizeof(told), o.peer, kTagP2pSize, o.comm);
        if (told == o.bytes) continue;
        fprintf(stderr, "cuda_emu: ncclRecv on rank %d expects %llu bytes from rank %d, whose matching ncclSend "
                "sends %llu (a send and its receive must have the same count and type)\n",
                o.comm->rank, (unsigned long long)o.bytes, o.peer, told);
        abort();
    }
    for (const P2p& o : ops)
        if (o.send) send_msg(o.comm->peers[o.peer], o.comm->uid, kTagP2pData, o.buf, o.bytes);
    for (const P2p& o : ops)
        if (!o.send) recv_into(o.buf, o.bytes, o.peer, kTagP2pData, o.comm);
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
        try {
            p2p_exchange(*ops);
        } catch (const Abandoned&) {
            // as in nccl_run
        }
    });
#else
    enqueue_collective(s, what, [ops](uint64_t ticket) { progress_submit(ticket, [ops]() { p2p_exchange(*ops); }); });
#endif
    return ncclSuccess;
}
inline ncclResult_t p2p_call(bool send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                             cudaStream_t s) {
    if (!comm || peer < 0 || peer >= comm->size) return ncclInvalidArgument;
    nonblocking_owed(comm, send ? "ncclSend" : "ncclRecv");
    P2p o{send, (void*)buf, count * nccl_size(t), peer, comm};
    if (nccl_group_depth == 0) return nb_returned(comm, p2p_issue(s, std::make_shared<std::vector<P2p>>(1, o)));
    if (comm->nonblocking) nccl_group_nonblocking.push_back(comm);
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
