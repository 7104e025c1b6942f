// The start-up rendezvous without MPI (-pi tcp, -pi fs): rank 0 hands a blob (the NCCL unique id)
// to the other ranks of its job, and only to them. Every rank says who it is (a magic, the job's
// identity, its rank and the world size); rank 0 answers only valid, distinct ranks of its own job,
// logs and drops anything else (a port probe, garbage, another job, a duplicate rank) and keeps
// waiting for the real ones until the deadline. The job's identity is -pj, else the launcher's job
// id (slurm, Open MPI, torchrun), else the command line (ranks started by hand run the same one).
// -pi tcp: a hello and an answer on rank 0's port; -pi fs: files in a shared directory, where each
// rank's hello carries a fresh random nonce and it takes only an id file that names its nonce, so
// a file left by an earlier run is never read. Host code, no MPI or CUDA (llmc/nccl_setup.cuh
// calls it; dev/rendezvous_tool.c drives it alone in the tests).
#ifndef LLMC_RENDEZVOUS_H
#define LLMC_RENDEZVOUS_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "utils.h"

#define RDV_MAGIC 0x32524754u // "TGR2"
#define RDV_VERSION 1
#define RDV_HELLO_S 10.0      // seconds rank 0 gives a connection to say who it is (a real rank sends at once; load can delay it)
#define RDV_REASON 256        // bytes of a refusal's reason

typedef struct {
    uint64_t job;       // the job's identity, hashed (rendezvous_job)
    char job_name[160]; // where it came from, for messages
    int rank, world;
    double timeout_s;   // how long any rank waits for the others
    int keep_listening; // -le 1 (llmc/membership.h): -pi tcp, rank 0's port stays open after the start-up;
                        // -pi fs, the ranks' nonces are kept (rdv_fs_nonce)
    double start_wait;  // -lw (-pi tcp): start without the replicas not all there after this long (0: all)
    int shard, min_replicas; // -lw: ranks per replica (-ds), -lm
} Rendezvous;

static int rendezvous_listen_fd = -1; // rank 0's listening socket, kept by keep_listening
// -pi fs with keep_listening: this run's nonce of each world rank (rank 0 knows every rank's, the
// others rank 0's and their own; 0: unknown), which the membership files carry.
static uint64_t* rdv_fs_nonce = NULL;

// FNV-1a, 64 bits.
static uint64_t rdv_hash(uint64_t h, const char* s) {
    for (; *s; s++) { h = (h ^ (uint8_t)*s) * 0x100000001b3ull; }
    return h;
}

// The job's identity: the -pj token, else the launcher's job id, else the command line argv[1..]
// (but -y).
static void rendezvous_job(Rendezvous* r, const char* token, int argc, char** argv) {
    const char* slurm = getenv("SLURM_JOB_ID");
    const char* step = getenv("SLURM_STEP_ID");
    const char* vars[] = {"PMIX_NAMESPACE", "TORCHELASTIC_RUN_ID"};
    uint64_t h = 0xcbf29ce484222325ull;
    if (token && token[0]) {
        snprintf(r->job_name, sizeof(r->job_name), "-pj %s", token);
    } else if (slurm) {
        snprintf(r->job_name, sizeof(r->job_name), "slurm job %s.%s", slurm, step ? step : "0");
    } else {
        r->job_name[0] = '\0';
        for (int i = 0; i < 2 && !r->job_name[0]; i++) {
            const char* v = getenv(vars[i]);
            if (v && v[0]) { snprintf(r->job_name, sizeof(r->job_name), "%s %s", vars[i], v); }
        }
    }
    if (r->job_name[0]) {
        h = rdv_hash(h, r->job_name);
    } else {
        for (int i = 1; i < argc; i++) { // -y N left out: a rank started again to resume or rejoin adds -y 1
            if (strcmp(argv[i], "-y") == 0) {
                i++;
                continue;
            }
            h = rdv_hash(rdv_hash(h, argv[i]), " ");
        }
        snprintf(r->job_name, sizeof(r->job_name), "the command line (hash %016llx; give every rank the same -pj "
                 "to start ranks with other flags)", (unsigned long long)h);
    }
    r->job = h;
}

static uint64_t rdv_nonce(void) {
    uint64_t x = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &x, sizeof(x)) != (ssize_t)sizeof(x)) { x = 0; }
        close(fd);
    }
    return x ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(now_seconds() * 1e9);
}

// ----------------------------------------------------------------------------
// -pi tcp

typedef struct {
    uint32_t magic, version;
    uint64_t job;
    int32_t rank, world;
} RdvHello;

typedef struct {
    uint32_t magic;
    int32_t status; // 0: accepted, the blob follows; RDV_JOIN: an RdvJoin, R bytes and the blob follow
                    // (-le 1, a replica rejoining a running job); else a reason of RDV_REASON bytes
} RdvAnswer;

#define RDV_JOIN 2
#define RDV_START 3 // -lw: an RdvJoin (step -1), R bytes and the blob follow: the replicas starting the run

// -le 1: what a rank that rejoins a running job learns from rank 0 (llmc/membership.h): the step
// the survivors have finished (an outer sync's), the agreements so far, and which of the R
// replicas train from there (alive, malloc'd; this rank's among them); step -1: a plain start.
typedef struct {
    int32_t step;
    uint32_t epoch;
    int32_t replicas;
    uint8_t* alive;
    int partial; // -lw: the run starts without some replicas (alive names those starting; step -1)
} RdvJoin;

// Reads n bytes from fd before the deadline; returns how many came (fewer: closed or timed out).
static size_t rdv_read(int fd, void* dst, size_t n, double deadline) {
    size_t got = 0;
    while (got < n) {
        double left = deadline - now_seconds();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0.0 || poll(&p, 1, (int)(left * 1000.0) + 1) <= 0) { break; }
        ssize_t r = recv(fd, (char*)dst + got, n - got, 0);
        if (r <= 0) { break; }
        got += (size_t)r;
    }
    return got;
}

// Why a hello of `got` bytes is not a rank of this job (into why), or 0 where it is.
static int rdv_refuse(const Rendezvous* me, const RdvHello* h, size_t got, const int* joined, char* why, size_t len) {
    if (got < sizeof(*h)) {
        snprintf(why, len, "it sent %zu of the %zu bytes a rank says who it is with", got, sizeof(*h));
    } else if (h->magic != RDV_MAGIC || h->version != RDV_VERSION) {
        snprintf(why, len, "not a train_gpt2 rank (magic %08x, version %u)", h->magic, h->version);
    } else if (h->job != me->job) {
        snprintf(why, len, "a rank of another job (identity %016llx; this job's is %016llx, %s)",
                 (unsigned long long)h->job, (unsigned long long)me->job, me->job_name);
    } else if (h->world != me->world) {
        snprintf(why, len, "world size %d, this job's is %d", h->world, me->world);
    } else if (h->rank < 1 || h->rank >= me->world) {
        snprintf(why, len, "rank %d is not one of 1..%d", h->rank, me->world - 1);
    } else if (joined[h->rank]) {
        snprintf(why, len, "rank %d has already joined", h->rank);
    } else {
        return 0;
    }
    return 1;
}

// -lw: which replicas start (alive, R bytes) from the ranks that came (joined, rank 0's own set):
// those all of whose S ranks came; 1 where that is at least -lm of them with replica 0 among them.
static int rdv_startable(const Rendezvous* me, const int* joined, uint8_t* alive) {
    int R = me->world / me->shard, n = 0;
    for (int q = 0; q < R; q++) {
        alive[q] = 1;
        for (int s = 0; s < me->shard; s++) { alive[q] &= (uint8_t)(joined[q * me->shard + s] != 0); }
        n += alive[q];
    }
    return alive[0] && n >= me->min_replicas;
}

// Rank 0, -lw: the ranks whose hello it holds (fds, -1: none) answered: the replicas that start
// (alive) with RDV_START, the list and the blob; the others refused, naming why.
static void rdv_tcp_start(const Rendezvous* me, const void* blob, size_t n, int* fds, const uint8_t* alive,
                          const char* what) {
    int R = me->world / me->shard, whole = 1;
    for (int q = 0; q < R; q++) { whole &= alive[q]; }
    RdvJoin head = {-1, 0, R, NULL, 1};
    for (int r = 1; r < me->world; r++) {
        if (fds[r] < 0) { continue; }
        int c = fds[r];
        if (alive[r / me->shard]) { // (every replica there: the plain answer)
            RdvAnswer a = {RDV_MAGIC, whole ? 0 : RDV_START};
            int ok = send(c, &a, sizeof(a), MSG_NOSIGNAL) == (ssize_t)sizeof(a) &&
                     (whole || (send(c, &head, 3 * sizeof(int32_t), MSG_NOSIGNAL) == (ssize_t)(3 * sizeof(int32_t)) &&
                                send(c, alive, (size_t)R, MSG_NOSIGNAL) == (ssize_t)R)) &&
                     send(c, blob, n, MSG_NOSIGNAL) == (ssize_t)n;
            if (!ok) { printf("%s: rank %d's start could not be sent (%s)\n", what, r, strerror(errno)); }
        } else {
            RdvAnswer a = {RDV_MAGIC, 1};
            char reason[RDV_REASON];
            memset(reason, 0, sizeof(reason));
            snprintf(reason, sizeof(reason), "-lw: replica %d was not whole when the run started without it; start its "
                     "ranks again (all of them) to rejoin at an outer sync", r / me->shard);
            if (send(c, &a, sizeof(a), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(a)) {
                send(c, reason, sizeof(reason), MSG_NOSIGNAL | MSG_DONTWAIT);
            }
        }
        close(c);
    }
}

// Rank 0: listens on port and answers world - 1 valid, distinct ranks with the blob. -lw (start,
// rank 0's RdvJoin: NULL without): holds them instead until every rank came, or -lw seconds have
// passed and the replicas all there can start (rdv_startable; until then it waits on), then
// answers as rdv_tcp_start does; start->partial says whether some replica is left out.
static void rdv_tcp_serve(const Rendezvous* me, const void* blob, size_t n, int port, const char* what, RdvJoin* start) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    if (s < 0 || bind(s, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(s, me->world + 8) != 0) {
        fail("%s: cannot listen on port %d (%s)", what, port, strerror(errno));
    }
    int* joined = (int*)calloc_check(me->world, sizeof(int));
    int hold = start != NULL && me->start_wait > 0.0;
    int* fds = (int*)malloc_check(me->world * sizeof(int));
    for (int r = 0; r < me->world; r++) { fds[r] = -1; }
    uint8_t* alive = hold ? (uint8_t*)malloc_check((size_t)(me->world / me->shard)) : NULL;
    joined[0] = 1;
    double deadline = now_seconds() + me->timeout_s, start_at = now_seconds() + me->start_wait;
    for (int left = me->world - 1; left > 0;) {
        if (hold && now_seconds() >= start_at && rdv_startable(me, joined, alive)) { break; }
        struct pollfd p = {s, POLLIN, 0};
        double wait = deadline - now_seconds();
        if (hold && start_at - now_seconds() < wait) { wait = start_at > now_seconds() ? start_at - now_seconds() : 0.05; }
        if (wait <= 0.0 || poll(&p, 1, (int)(wait * 1000.0) + 1) <= 0) {
            if (now_seconds() < deadline) { continue; }
            fail("%s: %d of %d ranks did not join within %.0f s%s", what, left, me->world - 1, me->timeout_s,
                 hold ? " (-lw: nor did at least -lm whole replicas, replica 0 among them)" : "");
        }
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        int c = accept(s, (struct sockaddr*)&peer, &plen);
        if (c < 0) { continue; }
        RdvHello h;
        memset(&h, 0, sizeof(h));
        double until = now_seconds() + RDV_HELLO_S;
        size_t got = rdv_read(c, &h, sizeof(h), until < deadline ? until : deadline);
        char why[RDV_REASON];
        RdvAnswer ans = {RDV_MAGIC, rdv_refuse(me, &h, got, joined, why, sizeof(why))};
        if (ans.status == 0 && hold) { // answered once the run starts
            joined[h.rank] = 1;
            fds[h.rank] = c;
            left--;
            continue;
        }
        if (ans.status == 0) {
            int ok = send(c, &ans, sizeof(ans), MSG_NOSIGNAL) == (ssize_t)sizeof(ans) &&
                     send(c, blob, n, MSG_NOSIGNAL) == (ssize_t)n;
            if (ok) {
                joined[h.rank] = 1;
                left--;
            } else {
                printf("%s: rank %d joined but the id could not be sent; waiting for it again\n", what, h.rank);
            }
        } else {
            printf("%s: dropped a connection from %s:%d: %s\n", what, inet_ntoa(peer.sin_addr), ntohs(peer.sin_port),
                   why);
            char reason[RDV_REASON];
            memset(reason, 0, sizeof(reason));
            snprintf(reason, sizeof(reason), "%s", why);
            if (send(c, &ans, sizeof(ans), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(ans)) {
                send(c, reason, sizeof(reason), MSG_NOSIGNAL | MSG_DONTWAIT);
            }
        }
        fflush(stdout);
        close(c);
    }
    if (hold) {
        int R = me->world / me->shard, n_alive = 0;
        if (!rdv_startable(me, joined, alive)) { fail("%s: internal: the start's replicas", what); }
        for (int q = 0; q < R; q++) { n_alive += alive[q]; }
        rdv_tcp_start(me, blob, n, fds, alive, what);
        start->partial = n_alive < R;
        start->replicas = R;
        start->alive = alive;
        if (start->partial) {
            printf("%s: -lw %g: the run starts with %d of %d replicas (missing:", what, me->start_wait, n_alive, R);
            for (int q = 0; q < R; q++) {
                if (!alive[q]) { printf(" %d", q); }
            }
            printf(")\n");
            fflush(stdout);
        }
    }
    free(fds);
    free(joined);
    if (me->keep_listening) { rendezvous_listen_fd = s; }
    else { close(s); }
}

// A join's header and alive list (into join) after RDV_JOIN; 1 when all of it came.
static int rdv_read_join(int c, RdvJoin* join, double deadline) {
    RdvJoin h;
    if (rdv_read(c, &h, 3 * sizeof(int32_t), deadline) != 3 * sizeof(int32_t) || h.replicas < 1 || h.replicas > 1 << 20) {
        return 0;
    }
    join->step = h.step;
    join->epoch = h.epoch;
    join->replicas = h.replicas;
    join->alive = (uint8_t*)malloc_check((size_t)h.replicas);
    return rdv_read(c, join->alive, (size_t)h.replicas, deadline) == (size_t)h.replicas;
}

// A rank other than 0: connects to host:port (retrying until rank 0 listens), says who it is and
// reads the blob, or fails with rank 0's reason. join (may be NULL: no -le): filled when rank 0
// answers that this rank rejoins a running job (its step stays -1 otherwise).
static void rdv_tcp_join(const Rendezvous* me, void* blob, size_t n, const char* host, int port, const char* what,
                         RdvJoin* join) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL) { fail("-ps %s: cannot resolve the address", host); }
    struct sockaddr_in a = *(struct sockaddr_in*)res->ai_addr;
    freeaddrinfo(res);
    a.sin_port = htons((uint16_t)port);
    double deadline = now_seconds() + me->timeout_s;
    RdvHello h = {RDV_MAGIC, RDV_VERSION, me->job, me->rank, me->world};
    for (;;) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c >= 0 && connect(c, (struct sockaddr*)&a, sizeof(a)) == 0) {
            RdvAnswer ans = {0, -1};
            if (send(c, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
                rdv_read(c, &ans, sizeof(ans), deadline) != sizeof(ans) || ans.magic != RDV_MAGIC) {
                fail("%s: rank 0 closed the connection without an answer (is another program on that port?)", what);
            }
            if ((ans.status == RDV_JOIN || ans.status == RDV_START) && join) {
                if (!rdv_read_join(c, join, deadline)) { fail("%s: rank 0's answer to a rejoin was cut short", what); }
                join->partial = ans.status == RDV_START;
            } else if (ans.status != 0) {
                char reason[RDV_REASON + 1];
                memset(reason, 0, sizeof(reason));
                rdv_read(c, reason, RDV_REASON, deadline);
                fail("%s: rank 0 refused this rank: %s", what, reason);
            }
            size_t got = rdv_read(c, blob, n, deadline);
            if (got != n) { fail("%s: connection closed after %zu of %zu bytes", what, got, n); }
            close(c);
            return;
        }
        if (c >= 0) { close(c); }
        if (now_seconds() > deadline) { fail("%s: rank 0 did not answer within %.0f s", what, me->timeout_s); }
        usleep(50000);
    }
}

// -pi tcp: rank 0 listens on -pp (every interface); the others connect to -ps:-pp. join: see
// rdv_tcp_join (NULL where the job is not elastic).
static void rendezvous_tcp(const Rendezvous* me, void* blob, size_t n, const char* host, int port, RdvJoin* join) {
    char what[512];
    snprintf(what, sizeof(what), "-pi tcp: rendezvous on %s:%d", host, port);
    if (join) {
        join->step = -1;
        join->partial = 0;
    }
    if (me->rank == 0) { rdv_tcp_serve(me, blob, n, port, what, join); }
    else { rdv_tcp_join(me, blob, n, host, port, what, join); }
}

// ----------------------------------------------------------------------------
// -pi fs: <dir>/train_gpt2_rdv_<job>_hello_<rank> (each rank's nonce), _id (rank 0's blob with
// every rank's nonce, rank 0's own in slot 0), _ack_<rank> (the nonce it took the blob with), each
// written under a temporary name and renamed. Rank 0 rewrites the id whenever a hello changes (a
// stale hello of an earlier run, replaced by the real rank's) until every rank has acknowledged
// this id. -le 1: _join, rank 0's answer to the ranks of replicas rejoining a running job (the
// nonces of their new hellos, an RdvJoin, the blob; llmc/membership.h writes it).

typedef struct {
    uint32_t magic, version;
    uint64_t job;
    int32_t rank, world;
    uint64_t nonce;
} RdvFsHello;

static void rdv_fs_path(char* out, size_t len, const char* dir, const Rendezvous* me, const char* kind, int rank) {
    if (rank >= 0) { snprintf(out, len, "%s/train_gpt2_rdv_%016llx_%s_%d", dir, (unsigned long long)me->job, kind, rank); }
    else { snprintf(out, len, "%s/train_gpt2_rdv_%016llx_%s", dir, (unsigned long long)me->job, kind); }
}

static void rdv_fs_write(const char* path, const void* a, size_t na, const void* b, size_t nb) {
    char tmp[4200];
    FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
    fwrite_check(a, 1, na, f, tmp);
    if (nb) { fwrite_check(b, 1, nb, f, tmp); }
    commit_tmp(f, tmp, path);
}

// Reads exactly n bytes of path into dst; returns 1, or 0 (missing or another size).
static int rdv_fs_read(const char* path, void* dst, size_t n) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) { return 0; }
    size_t got = fread(dst, 1, n, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    return got == n && !extra;
}

// The nonce of rank r's valid hello, or 0.
static uint64_t rdv_fs_hello_of(const Rendezvous* me, const char* dir, int r) {
    char path[4096];
    RdvFsHello h;
    rdv_fs_path(path, sizeof(path), dir, me, "hello", r);
    if (!rdv_fs_read(path, &h, sizeof(h))) { return 0; }
    int ok = h.magic == RDV_MAGIC && h.version == RDV_VERSION && h.job == me->job && h.rank == r && h.world == me->world;
    return ok ? h.nonce : 0;
}

// Rank 0: the _join file (status RDV_JOIN: replicas rejoining a running job after step; RDV_START,
// -lw: the run starts with the replicas alive, step -1): the job, the world, the step, the
// agreements, R, every rank's nonce (those it is for), alive (R bytes), the blob.
static void rdv_fs_write_join(const Rendezvous* me, const char* dir, uint32_t status, int step, uint32_t epoch, int R,
                              const uint64_t* nonces, const uint8_t* alive, const void* blob, size_t n) {
    int W = me->world;
    uint32_t head[2] = {RDV_MAGIC, status};
    int32_t world = W, v[3] = {step, (int32_t)epoch, R};
    size_t bytes = sizeof(head) + 8 + 4 + sizeof(v) + (size_t)W * 8 + (size_t)R + n, at = 0;
    uint8_t* b = (uint8_t*)malloc_check(bytes);
    memcpy(b + at, head, sizeof(head)); at += sizeof(head);
    memcpy(b + at, &me->job, 8); at += 8;
    memcpy(b + at, &world, 4); at += 4;
    memcpy(b + at, v, sizeof(v)); at += sizeof(v);
    memcpy(b + at, nonces, (size_t)W * 8); at += (size_t)W * 8;
    memcpy(b + at, alive, (size_t)R); at += (size_t)R;
    memcpy(b + at, blob, n);
    char path[4096];
    rdv_fs_path(path, sizeof(path), dir, me, "join", -1);
    rdv_fs_write(path, b, bytes, NULL, 0);
    free(b);
}

// -lw (start: rank 0's RdvJoin, NULL without): once -lw seconds have passed with some rank's hello
// missing and the replicas all there can start (rdv_startable), rank 0 answers them with the _join
// file (RDV_START; the ranks of a replica not whole find it not alive and stop) instead of the id.
static int rdv_fs_start(const Rendezvous* me, const void* blob, size_t n, const char* dir, const uint64_t* now,
                        uint64_t* written, RdvJoin* start) {
    int W = me->world, R = W / me->shard;
    int* joined = (int*)calloc_check(W, sizeof(int));
    uint8_t* alive = (uint8_t*)malloc_check((size_t)R);
    for (int r = 0; r < W; r++) { joined[r] = r == 0 || now[r] != 0; }
    int ok = rdv_startable(me, joined, alive);
    free(joined);
    if (!ok) {
        free(alive);
        return 0;
    }
    memcpy(written + 1, now + 1, (W - 1) * sizeof(uint64_t));
    rdv_fs_write_join(me, dir, RDV_START, -1, 0, R, written, alive, blob, n);
    start->partial = 1;
    start->replicas = R;
    start->alive = alive;
    int k = 0;
    for (int q = 0; q < R; q++) { k += alive[q]; }
    printf("-pi fs: -lw %g: the run starts with %d of %d replicas (missing:", me->start_wait, k, R);
    for (int q = 0; q < R; q++) {
        if (!alive[q]) { printf(" %d", q); }
    }
    printf(")\n");
    fflush(stdout);
    return 1;
}

static void rdv_fs_serve(const Rendezvous* me, const void* blob, size_t n, const char* dir, RdvJoin* start) {
    char id_path[4096], path[4096];
    rdv_fs_path(id_path, sizeof(id_path), dir, me, "id", -1);
    remove(id_path); // an earlier run's: nobody can take it (its nonces are not this run's)
    for (int r = 1; r < me->world; r++) { // and its acks (no rank of this run acks before this id)
        rdv_fs_path(path, sizeof(path), dir, me, "ack", r);
        remove(path);
    }
    int W = me->world;
    size_t head = 2 * sizeof(uint32_t) + sizeof(uint64_t) + sizeof(int32_t);
    size_t bytes = head + W * sizeof(uint64_t) + n;
    uint8_t* id = (uint8_t*)calloc_check(bytes, 1);
    uint64_t* written = (uint64_t*)(id + head);
    uint64_t* now = (uint64_t*)calloc_check(W, sizeof(uint64_t));
    uint32_t magic = RDV_MAGIC, version = RDV_VERSION;
    int32_t world = W;
    written[0] = rdv_nonce() | 1; // rank 0's nonce: the membership files' (-le 1)
    memcpy(id, &magic, 4);
    memcpy(id + 4, &version, 4);
    memcpy(id + 8, &me->job, 8);
    memcpy(id + 16, &world, 4);
    memcpy(id + head + W * sizeof(uint64_t), blob, n);
    double deadline = now_seconds() + me->timeout_s, start_at = now_seconds() + me->start_wait;
    for (;;) {
        int missing = 0, acked = 0;
        for (int r = 1; r < W; r++) {
            now[r] = rdv_fs_hello_of(me, dir, r);
            missing += now[r] == 0;
        }
        if (start && me->start_wait > 0.0 && missing > 0 && now_seconds() >= start_at &&
            rdv_fs_start(me, blob, n, dir, now, written, start)) {
            break;
        }
        if (missing == 0 && memcmp(now + 1, written + 1, (W - 1) * sizeof(uint64_t)) != 0) {
            memcpy(written + 1, now + 1, (W - 1) * sizeof(uint64_t));
            rdv_fs_write(id_path, id, bytes, NULL, 0);
        }
        for (int r = 1; r < W && written[r]; r++) {
            RdvFsHello ack;
            rdv_fs_path(path, sizeof(path), dir, me, "ack", r);
            acked += rdv_fs_read(path, &ack, sizeof(ack)) && ack.magic == RDV_MAGIC && ack.job == me->job &&
                     ack.rank == r && ack.nonce == written[r];
        }
        if (acked == W - 1) { break; }
        if (now_seconds() > deadline) {
            fail("-pi fs: %d of %d ranks did not join %s within %.0f s (%s)", missing ? missing : W - 1 - acked, W - 1,
                 dir, me->timeout_s, missing ? "no hello file" : "the id was not taken");
        }
        usleep(10000);
    }
    if (me->keep_listening) {
        rdv_fs_nonce = (uint64_t*)malloc_check(W * sizeof(uint64_t));
        memcpy(rdv_fs_nonce, written, W * sizeof(uint64_t));
    }
    free(id);
    free(now);
}

// -le 1, a rank starting again: rank 0's _join file answers its hello (nonce) when its replica
// rejoins a running job: join and blob filled, the nonces kept; returns 1, else 0.
static int rdv_fs_take_join(const Rendezvous* me, const char* dir, uint64_t nonce, void* blob, size_t n, RdvJoin* join) {
    // (status RDV_START: -lw, the run starts without some replicas; this rank's replica must be among
    // those that start)
    char path[4096];
    rdv_fs_path(path, sizeof(path), dir, me, "join", -1);
    FILE* f = fopen(path, "rb");
    if (f == NULL) { return 0; }
    int W = me->world, ok = 0;
    uint32_t head[2];
    uint64_t job;
    int32_t v[3], world;
    uint64_t* nonces = (uint64_t*)malloc_check(W * sizeof(uint64_t));
    if (fread(head, 4, 2, f) == 2 && fread(&job, 8, 1, f) == 1 && fread(&world, 4, 1, f) == 1 &&
        fread(v, 4, 3, f) == 3 && head[0] == RDV_MAGIC && (head[1] == RDV_JOIN || head[1] == RDV_START) &&
        job == me->job && world == W &&
        v[2] >= 1 && v[2] <= W && fread(nonces, 8, W, f) == (size_t)W && nonces[me->rank] == nonce) {
        uint8_t* alive = (uint8_t*)malloc_check((size_t)v[2]);
        ok = fread(alive, 1, (size_t)v[2], f) == (size_t)v[2] && fread(blob, 1, n, f) == n && fgetc(f) == EOF;
        if (ok && head[1] == RDV_START && !alive[me->rank / me->shard]) {
            fail("-pi fs: rank 0 refused this rank: -lw: replica %d was not whole when the run started without it; "
                 "start its ranks again (all of them) to rejoin at an outer sync", me->rank / me->shard);
        }
        if (ok) {
            join->step = v[0];
            join->epoch = (uint32_t)v[1];
            join->replicas = v[2];
            join->alive = alive;
            join->partial = head[1] == RDV_START;
            rdv_fs_nonce = nonces;
            nonces = NULL;
        } else {
            free(alive);
        }
    }
    fclose(f);
    free(nonces);
    return ok;
}

// A rank other than 0: says hello and takes the id that names its nonce (join, -le 1: or rank
// 0's answer that its replica rejoins a running job, rdv_fs_take_join).
static void rdv_fs_join(const Rendezvous* me, void* blob, size_t n, const char* dir, RdvJoin* join) {
    char path[4096], id_path[4096];
    RdvFsHello h = {RDV_MAGIC, RDV_VERSION, me->job, me->rank, me->world, rdv_nonce()};
    if (h.nonce == 0) { h.nonce = 1; }
    rdv_fs_path(path, sizeof(path), dir, me, "hello", me->rank);
    rdv_fs_write(path, &h, sizeof(h), NULL, 0);
    rdv_fs_path(id_path, sizeof(id_path), dir, me, "id", -1);
    int W = me->world;
    size_t head = 2 * sizeof(uint32_t) + sizeof(uint64_t) + sizeof(int32_t);
    size_t bytes = head + W * sizeof(uint64_t) + n;
    uint8_t* id = (uint8_t*)calloc_check(bytes, 1);
    double deadline = now_seconds() + me->timeout_s;
    for (;;) {
        if (rdv_fs_read(id_path, id, bytes)) {
            uint32_t magic;
            uint64_t job, nonce;
            int32_t world;
            memcpy(&magic, id, 4);
            memcpy(&job, id + 8, 8);
            memcpy(&world, id + 16, 4);
            memcpy(&nonce, id + head + me->rank * sizeof(uint64_t), 8);
            if (magic == RDV_MAGIC && job == me->job && world == W && nonce == h.nonce) { break; }
        }
        if (join && rdv_fs_take_join(me, dir, h.nonce, blob, n, join)) {
            free(id);
            return;
        }
        if (now_seconds() > deadline) {
            fail("-pi fs: no NCCL id from rank 0 at %s within %.0f s (for this rank's hello)", id_path, me->timeout_s);
        }
        usleep(10000);
    }
    memcpy(blob, id + head + W * sizeof(uint64_t), n);
    if (me->keep_listening) {
        rdv_fs_nonce = (uint64_t*)calloc_check(W, sizeof(uint64_t));
        memcpy(&rdv_fs_nonce[0], id + head, 8);
        rdv_fs_nonce[me->rank] = h.nonce;
    }
    free(id);
    rdv_fs_path(path, sizeof(path), dir, me, "ack", me->rank);
    rdv_fs_write(path, &h, sizeof(h), NULL, 0);
}

// -pi fs: the blob through dir (a directory every rank sees). join: see rdv_fs_join (NULL where
// the job is not elastic).
static void rendezvous_fs(const Rendezvous* me, void* blob, size_t n, const char* dir, RdvJoin* join) {
    if (join) {
        join->step = -1;
        join->partial = 0;
    }
    if (me->rank == 0) { rdv_fs_serve(me, blob, n, dir, join); }
    else { rdv_fs_join(me, blob, n, dir, join); }
}

// Rank 0, once every rank holds the blob (after the communicator is up): the files go (-le 1: but
// a hello this run has not taken, of a rank of a missing replica that came after the start, -lw).
static void rendezvous_fs_cleanup(const Rendezvous* me, const char* dir) {
    char path[4096];
    rdv_fs_path(path, sizeof(path), dir, me, "id", -1);
    remove(path);
    for (int r = 1; r < me->world; r++) {
        rdv_fs_path(path, sizeof(path), dir, me, "hello", r);
        if (!rdv_fs_nonce || rdv_fs_hello_of(me, dir, r) == rdv_fs_nonce[r]) { remove(path); }
        rdv_fs_path(path, sizeof(path), dir, me, "ack", r);
        remove(path);
    }
}

#endif
