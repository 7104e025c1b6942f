// Elastic replicas' membership (-le 1): after a collective that spans the replicas fails (a peer
// died, or stayed silent past -wt), the surviving ranks agree through rank 0 on which replicas are
// left. Every rank that saw the failure reports to rank 0 on the -pi tcp rendezvous port, which
// rank 0 keeps listening for this (llmc/rendezvous.h, rendezvous_keep_listening); rank 0 collects
// the reports of the ranks still counted as alive until all have come or the window (-wt seconds)
// has passed since it began collecting, keeps every replica all of whose ranks reported (ZeRO
// inside a replica cannot lose a shard), answers each reporter with that list and closes.
// Anything else on the port (a probe, another job, a stale epoch) is logged and dropped. A rank
// whose replica is not kept, or that cannot reach rank 0 (rank 0's replica is the lost one), gets
// told so and stops. With -pi fs the same exchange goes through files in the -pf directory
// (reports, rank 0's answer, the hellos of ranks starting again and rank 0's _join answer), each
// carrying the nonce of this run's rank that wrote it (llmc/rendezvous.h), so that no file of an
// earlier run counts. Host code, no MPI or CUDA.
#ifndef LLMC_MEMBERSHIP_H
#define LLMC_MEMBERSHIP_H

#include "rendezvous.h"

#define MB_MAGIC 0x314d4754u // "TGM1"
#define MB_MAX_REPLICAS 4096

typedef struct {
    uint32_t magic;
    uint32_t epoch;
    uint64_t job;
    int32_t rank, world, step;
    uint32_t done;             // the reporter's elastic waits that ended well since the last agreement
} MbReport;

typedef struct {
    uint32_t magic, epoch;
    int32_t replicas;          // R, then R bytes: 1 = the replica is kept
} MbAnswer;

typedef struct {
    Rendezvous rdv;            // this rank, the world, the job (the rendezvous's)
    const char* host;          // rank 0's address (-ps)
    int port;                  // -pp
    int R, S;                  // replicas, ranks per replica
    double window_s;           // how long rank 0 waits for the reports (-wt)
    uint32_t epoch;            // agreements so far
    uint8_t* alive;            // R: the replicas still training
    int* pending;              // rank 0, per world rank: the connection of a rank waiting to rejoin, or -1
    const char* dir;           // -pi fs: the -pf directory the exchange goes through (NULL: -pi tcp)
    uint64_t* fresh;           // -pi fs, rank 0, per world rank: the nonce of a new hello waiting to rejoin, or 0
} Membership;

static void membership_init(Membership* m, const Rendezvous* rdv, const char* host, int port, const char* dir, int R,
                            int S, double window_s) {
    memset(m, 0, sizeof(*m));
    m->rdv = *rdv;
    m->host = host;
    m->port = port;
    m->dir = dir;
    m->fresh = (uint64_t*)calloc_check((size_t)R * S, sizeof(uint64_t));
    m->R = R;
    m->S = S;
    m->window_s = window_s;
    m->alive = (uint8_t*)malloc_check((size_t)R);
    memset(m->alive, 1, (size_t)R);
    m->pending = (int*)malloc_check((size_t)R * S * sizeof(int));
    for (int r = 0; r < R * S; r++) { m->pending[r] = -1; }
}

static void membership_free(Membership* m) {
    for (int r = 0; r < m->R * m->S; r++) {
        if (m->pending[r] >= 0) { close(m->pending[r]); }
    }
    free(m->alive);
    free(m->pending);
    free(m->fresh);
}

// ----------------------------------------------------------------------------
// -pi fs: <dir>/train_gpt2_rdv_<job>_mb_<epoch>_<rank> (a report and its rank's nonce), _mbans_<epoch>
// (rank 0's answer, its nonce, then R bytes), written under a temporary name and renamed.

typedef struct {
    MbReport r;
    uint64_t nonce;
} MbFsReport;

static void mb_fs_path(char* out, size_t len, const Membership* m, const char* kind, int rank) {
    char what[64];
    snprintf(what, sizeof(what), "%s_%u", kind, m->epoch);
    rdv_fs_path(out, len, m->dir, &m->rdv, what, rank);
}

// Rank 0, a report in hand: where its rank is (step, done) is not where rank 0 is (a collective
// ended on some ranks and not on others, which then stand at different points of the run): says
// so and returns 1 (that rank's replica is dropped: rank 0's point is the one the survivors share).
static int mb_elsewhere(const Membership* m, const MbReport* r, int step, uint32_t done) {
    if (r->step == step && r->done == done) { return 0; }
    printf("elastic (step %d): rank %d reported from step %d after %u collectives, rank 0 is at step %d after %u (a "
           "collective ended on some ranks only): replica %d is dropped\n", step, r->rank, r->step, r->done, step, done,
           r->rank / m->S);
    fflush(stdout);
    return 1;
}

// Rank 0: collects the report files of the ranks of live replicas until all have come or the
// window has passed (a file that is not this run's rank's report for this agreement is named once
// and ignored); kept as mb_collect's, written as the answer file; this agreement's reports and
// the previous answer go.
static void mb_fs_collect(Membership* m, int step, uint32_t done, uint8_t* kept) {
    int W = m->rdv.world, expected = 0;
    uint8_t* reported = (uint8_t*)calloc_check((size_t)W, 1); // 1: reported, 2: from elsewhere
    uint8_t* named = (uint8_t*)calloc_check((size_t)W, 1);
    for (int r = 1; r < W; r++) { expected += m->alive[r / m->S]; }
    double deadline = now_seconds() + m->window_s;
    char path[4096];
    while (expected > 0 && now_seconds() < deadline) {
        for (int r = 1; r < W; r++) {
            if (reported[r] || !m->alive[r / m->S]) { continue; }
            MbFsReport f;
            mb_fs_path(path, sizeof(path), m, "mb", r);
            if (!rdv_fs_read(path, &f, sizeof(f))) { continue; }
            int ok = f.r.magic == MB_MAGIC && f.r.epoch == m->epoch && f.r.job == m->rdv.job && f.r.world == W &&
                     f.r.rank == r && f.nonce == rdv_fs_nonce[r];
            if (ok) {
                reported[r] = (uint8_t)(1 + mb_elsewhere(m, &f.r, step, done));
                expected--;
            } else if (!named[r]) {
                named[r] = 1;
                printf("elastic (step %d): ignored %s: not this run's rank %d's report for agreement %u\n", step, path, r,
                       m->epoch);
                fflush(stdout);
            }
        }
        usleep(10000);
    }
    for (int q = 0; q < m->R; q++) {
        kept[q] = m->alive[q];
        for (int s = 0; s < m->S; s++) {
            if (q * m->S + s > 0 && reported[q * m->S + s] != 1) { kept[q] = 0; }
        }
    }
    MbAnswer a = {MB_MAGIC, m->epoch, m->R};
    mb_fs_path(path, sizeof(path), m, "mbans", -1);
    uint8_t* body = (uint8_t*)malloc_check(sizeof(uint64_t) + (size_t)m->R);
    memcpy(body, &rdv_fs_nonce[0], sizeof(uint64_t));
    memcpy(body + sizeof(uint64_t), kept, (size_t)m->R);
    rdv_fs_write(path, &a, sizeof(a), body, sizeof(uint64_t) + (size_t)m->R);
    free(body);
    for (int r = 1; r < W; r++) {
        mb_fs_path(path, sizeof(path), m, "mb", r);
        remove(path);
    }
    if (m->epoch > 0) { // every rank read it before reporting for this one
        m->epoch--;
        mb_fs_path(path, sizeof(path), m, "mbans", -1);
        m->epoch++;
        remove(path);
    }
    free(reported);
    free(named);
}

// A rank other than 0: its report file, then rank 0's answer file for this agreement (its nonce
// rank 0's) into kept; returns 0, or 1 with why when none came in time.
static int mb_fs_report(Membership* m, int step, uint32_t done, uint8_t* kept, char* why, size_t len) {
    char path[4096];
    MbFsReport f = {{MB_MAGIC, m->epoch, m->rdv.job, m->rdv.rank, m->rdv.world, step, done}, rdv_fs_nonce[m->rdv.rank]};
    mb_fs_path(path, sizeof(path), m, "mb", m->rdv.rank);
    rdv_fs_write(path, &f, sizeof(f), NULL, 0);
    mb_fs_path(path, sizeof(path), m, "mbans", -1);
    size_t n = sizeof(MbAnswer) + sizeof(uint64_t) + (size_t)m->R;
    uint8_t* got = (uint8_t*)malloc_check(n);
    double wait = 2.0 * m->window_s + RDV_HELLO_S, deadline = now_seconds() + wait;
    int ok = 0;
    while (!ok && now_seconds() < deadline) {
        MbAnswer a;
        uint64_t nonce;
        ok = rdv_fs_read(path, got, n);
        if (ok) {
            memcpy(&a, got, sizeof(a));
            memcpy(&nonce, got + sizeof(a), sizeof(nonce));
            ok = a.magic == MB_MAGIC && a.epoch == m->epoch && a.replicas == m->R && nonce == rdv_fs_nonce[0];
        }
        if (!ok) { usleep(10000); }
    }
    if (ok) { memcpy(kept, got + sizeof(MbAnswer) + sizeof(uint64_t), (size_t)m->R); }
    free(got);
    if (!ok) { snprintf(why, len, "rank 0 did not answer in %s within %.0f s", path, wait); }
    return !ok;
}

// Rank 0, -pi fs: the ranks of missing replicas whose hello file is new (a nonce this run has not
// seen from them) wait to rejoin; joining as membership_poll_joins.
static void mb_fs_poll_joins(Membership* m, uint8_t* joining) {
    for (int r = 1; r < m->R * m->S; r++) {
        if (m->alive[r / m->S] || m->fresh[r]) { continue; }
        uint64_t nonce = rdv_fs_hello_of(&m->rdv, m->dir, r);
        if (nonce != 0 && nonce != rdv_fs_nonce[r]) { m->fresh[r] = nonce; }
    }
    for (int q = 0; q < m->R; q++) {
        joining[q] = !m->alive[q];
        for (int s = 0; s < m->S; s++) { joining[q] &= m->fresh[q * m->S + s] != 0; }
    }
}

// Rank 0, -pi fs: the _join answer for the ranks of the joining replicas (their new nonces, the
// step, the agreements, the replicas alive from here, the blob); their nonces are this run's from
// here.
static void mb_fs_admit(Membership* m, int step, const uint8_t* joining, const void* blob, size_t n) {
    int W = m->rdv.world;
    for (int r = 0; r < W; r++) {
        if (joining[r / m->S] && m->fresh[r]) {
            rdv_fs_nonce[r] = m->fresh[r];
            m->fresh[r] = 0;
        }
    }
    rdv_fs_write_join(&m->rdv, m->dir, RDV_JOIN, step, m->epoch, m->R, rdv_fs_nonce, m->alive, blob, n);
}

static int membership_count(const Membership* m) {
    int n = 0;
    for (int q = 0; q < m->R; q++) { n += m->alive[q]; }
    return n;
}

// Why a report of `got` bytes is not one rank 0 waits for (into why), or 0 where it is.
static int mb_refuse(const Membership* m, const MbReport* r, size_t got, const int* reported, char* why, size_t len) {
    if (got < sizeof(*r)) {
        snprintf(why, len, "it sent %zu of the %zu bytes of a membership report", got, sizeof(*r));
    } else if (r->magic != MB_MAGIC) {
        snprintf(why, len, "not a membership report (magic %08x)", r->magic);
    } else if (r->job != m->rdv.job || r->world != m->rdv.world) {
        snprintf(why, len, "a rank of another job or world (identity %016llx, world %d)", (unsigned long long)r->job,
                 r->world);
    } else if (r->epoch != m->epoch) {
        snprintf(why, len, "rank %d reported for agreement %u, this is agreement %u", r->rank, r->epoch, m->epoch);
    } else if (r->rank < 1 || r->rank >= m->rdv.world || !m->alive[r->rank / m->S]) {
        snprintf(why, len, "rank %d is not a rank of a live replica", r->rank);
    } else if (reported[r->rank] >= 0) {
        snprintf(why, len, "rank %d has already reported", r->rank);
    } else {
        return 0;
    }
    return 1;
}

// Why a hello of `got` bytes is not a rank that may rejoin now (into why), or 0 where it is one.
static int mb_refuse_join(const Membership* m, const RdvHello* h, size_t got, char* why, size_t len) {
    if (got < sizeof(*h)) {
        snprintf(why, len, "it sent %zu of the %zu bytes a rank says who it is with", got, sizeof(*h));
    } else if (h->magic != RDV_MAGIC || h->version != RDV_VERSION) {
        snprintf(why, len, "not a rank rejoining (magic %08x, version %u)", h->magic, h->version);
    } else if (h->job != m->rdv.job || h->world != m->rdv.world) {
        snprintf(why, len, "a rank of another job or world (identity %016llx, world %d)", (unsigned long long)h->job,
                 h->world);
    } else if (h->rank < 1 || h->rank >= m->rdv.world) {
        snprintf(why, len, "rank %d is not one of 1..%d", h->rank, m->rdv.world - 1);
    } else if (m->alive[h->rank / m->S]) {
        snprintf(why, len, "rank %d's replica %d is training", h->rank, h->rank / m->S);
    } else if (m->pending[h->rank] >= 0) {
        snprintf(why, len, "rank %d is already waiting to rejoin", h->rank);
    } else {
        return 0;
    }
    return 1;
}

// A hello that reached rank 0 during an agreement: what came, from where, its connection.
typedef struct {
    RdvHello h;
    size_t got;
    struct sockaddr_in peer;
    int fd;
} MbHello;

// Rank 0: collects reports until every rank of a live replica has reported or the window has
// passed; kept[q] = replica q is alive, all its ranks reported and from where rank 0 is (step and
// done, mb_elsewhere; rank 0 counts as reported).
static void mb_collect(Membership* m, int step, uint32_t done, uint8_t* kept) {
    int W = m->rdv.world, expected = 0, fd = rendezvous_listen_fd, hellos = 0;
    int* reported = (int*)malloc_check(W * sizeof(int)); // the connection of each reporter, -1: none
    uint8_t* elsewhere = (uint8_t*)calloc_check((size_t)W, 1);
    // hellos of ranks starting again meanwhile (strays too): judged once this agreement is made
    MbHello* hello = NULL;
    for (int r = 0; r < W; r++) {
        reported[r] = -1;
        expected += r > 0 && m->alive[r / m->S];
    }
    double deadline = now_seconds() + m->window_s;
    while (expected > 0 && fd >= 0) {
        struct pollfd p = {fd, POLLIN, 0};
        double wait = deadline - now_seconds();
        if (wait <= 0.0) { break; }
        if (poll(&p, 1, (int)(wait * 1000.0) + 1) <= 0) { continue; }
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        int c = accept(fd, (struct sockaddr*)&peer, &plen);
        if (c < 0) { continue; }
        MbReport r;
        memset(&r, 0, sizeof(r));
        double until = now_seconds() + RDV_HELLO_S;
        until = until < deadline ? until : deadline;
        size_t got = rdv_read(c, &r.magic, sizeof(r.magic), until);
        if (got == sizeof(r.magic) && r.magic == RDV_MAGIC) { // a rank starting again: its hello
            hello = (MbHello*)realloc(hello, (hellos + 1) * sizeof(MbHello));
            if (!hello) { fail("out of memory (the hellos rank 0 holds)"); }
            MbHello* h = &hello[hellos++];
            h->h.magic = RDV_MAGIC;
            h->got = got + rdv_read(c, (char*)&h->h + got, sizeof(h->h) - got, until);
            h->peer = peer;
            h->fd = c;
            continue;
        }
        if (got == sizeof(r.magic)) { got += rdv_read(c, (char*)&r + got, sizeof(r) - got, until); }
        char why[RDV_REASON];
        if (mb_refuse(m, &r, got, reported, why, sizeof(why))) {
            printf("elastic (step %d): dropped a connection from %s:%d: %s\n", step, inet_ntoa(peer.sin_addr),
                   ntohs(peer.sin_port), why);
            fflush(stdout);
            close(c);
            continue;
        }
        reported[r.rank] = c;
        elsewhere[r.rank] = (uint8_t)mb_elsewhere(m, &r, step, done);
        expected--;
    }
    for (int q = 0; q < m->R; q++) {
        kept[q] = m->alive[q];
        for (int s = 0; s < m->S; s++) {
            int r = q * m->S + s;
            if (r > 0 && (reported[r] < 0 || elsewhere[r])) { kept[q] = 0; }
        }
    }
    MbAnswer a = {MB_MAGIC, m->epoch, m->R};
    for (int r = 1; r < W; r++) {
        if (reported[r] < 0) { continue; }
        if (send(reported[r], &a, sizeof(a), MSG_NOSIGNAL) == (ssize_t)sizeof(a)) {
            send(reported[r], kept, (size_t)m->R, MSG_NOSIGNAL);
        }
        close(reported[r]);
    }
    free(reported);
    free(elsewhere);
    memcpy(m->alive, kept, (size_t)m->R);
    for (int i = 0; i < hellos; i++) {
        char why[RDV_REASON];
        if (mb_refuse_join(m, &hello[i].h, hello[i].got, why, sizeof(why))) {
            printf("elastic (step %d): dropped a connection from %s:%d: %s\n", step, inet_ntoa(hello[i].peer.sin_addr),
                   ntohs(hello[i].peer.sin_port), why);
            close(hello[i].fd);
        } else {
            m->pending[hello[i].h.rank] = hello[i].fd;
        }
    }
    fflush(stdout);
    free(hello);
}

// A rank other than 0: reports to rank 0 and reads its answer into kept; returns 0, or 1 with
// the reason in why when rank 0 cannot be reached or does not answer in time.
static int mb_report(Membership* m, int step, uint32_t done, uint8_t* kept, char* why, size_t len) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(m->host, NULL, &hints, &res) != 0 || res == NULL) {
        snprintf(why, len, "-ps %s: cannot resolve rank 0's address", m->host);
        return 1;
    }
    struct sockaddr_in addr = *(struct sockaddr_in*)res->ai_addr;
    freeaddrinfo(res);
    addr.sin_port = htons((uint16_t)m->port);
    // rank 0 begins collecting once it sees the failure itself (within -wt), then waits the window
    double deadline = now_seconds() + 2.0 * m->window_s + RDV_HELLO_S;
    MbReport r = {MB_MAGIC, m->epoch, m->rdv.job, m->rdv.rank, m->rdv.world, step, done};
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr*)&addr, sizeof(addr)) != 0) {
        snprintf(why, len, "rank 0 (%s:%d) cannot be reached (%s)", m->host, m->port, strerror(errno));
        if (c >= 0) { close(c); }
        return 1;
    }
    MbAnswer a = {0, 0, 0};
    int ok = send(c, &r, sizeof(r), MSG_NOSIGNAL) == (ssize_t)sizeof(r) &&
             rdv_read(c, &a, sizeof(a), deadline) == sizeof(a) && a.magic == MB_MAGIC && a.epoch == m->epoch &&
             a.replicas == m->R && rdv_read(c, kept, (size_t)m->R, deadline) == (size_t)m->R;
    close(c);
    if (!ok) { snprintf(why, len, "rank 0 did not answer within %.0f s", 2.0 * m->window_s + RDV_HELLO_S); }
    return !ok;
}

// An agreement made: the replicas kept (R bytes) train from here, and the next agreement counts on.
static void membership_take(Membership* m, const uint8_t* kept) {
    memcpy(m->alive, kept, (size_t)m->R);
    m->epoch++;
}

// Every rank that saw a replica-spanning collective fail, at `step` after `done` collectives that
// ended well since the last agreement: the replicas kept after this agreement (kept, R bytes);
// returns 0, or 1 with why when rank 0 could not be asked. m->alive follows.
static int membership_agree(Membership* m, int step, uint32_t done, uint8_t* kept, char* why, size_t len) {
    if (m->rdv.rank == 0) {
        if (m->dir) { mb_fs_collect(m, step, done, kept); }
        else { mb_collect(m, step, done, kept); }
    } else if (m->dir ? mb_fs_report(m, step, done, kept, why, len) : mb_report(m, step, done, kept, why, len)) {
        return 1;
    }
    membership_take(m, kept);
    return 0;
}

// Rank 0 (a replica missing, at an outer sync): takes the connections waiting on the port without
// blocking for them; a valid hello of a rank of a missing replica (llmc/rendezvous.h) waits there
// for the sync that admits its whole replica; anything else is logged and dropped. joining[q] = 1
// for each missing replica all of whose ranks wait.
static void membership_poll_joins(Membership* m, int step, uint8_t* joining) {
    if (m->dir) {
        mb_fs_poll_joins(m, joining);
        return;
    }
    int fd = rendezvous_listen_fd;
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (fd < 0 || poll(&p, 1, 0) <= 0) { break; }
        struct sockaddr_in peer;
        socklen_t plen = sizeof(peer);
        int c = accept(fd, (struct sockaddr*)&peer, &plen);
        if (c < 0) { break; }
        RdvHello h;
        memset(&h, 0, sizeof(h));
        size_t got = rdv_read(c, &h, sizeof(h), now_seconds() + 2.0); // a rank rejoining sent it on connecting
        char why[RDV_REASON];
        if (mb_refuse_join(m, &h, got, why, sizeof(why))) {
            printf("elastic (step %d): dropped a connection from %s:%d: %s\n", step, inet_ntoa(peer.sin_addr),
                   ntohs(peer.sin_port), why);
            fflush(stdout);
            close(c);
            continue;
        }
        m->pending[h.rank] = c;
    }
    for (int q = 0; q < m->R; q++) {
        joining[q] = !m->alive[q];
        for (int s = 0; s < m->S; s++) { joining[q] &= m->pending[q * m->S + s] >= 0; }
    }
}

// Every rank: the joining replicas train from here (one agreement more). Rank 0 first answers
// their waiting ranks (RDV_JOIN: the step, the agreements, the replicas alive from here, the
// blob: the grown communicator's NCCL id) and closes them.
static void membership_admit(Membership* m, int step, const uint8_t* joining, const void* blob, size_t n) {
    for (int q = 0; q < m->R; q++) { m->alive[q] |= joining[q]; }
    m->epoch++;
    if (m->dir) {
        if (m->rdv.rank == 0) { mb_fs_admit(m, step, joining, blob, n); }
        return;
    }
    RdvAnswer a = {RDV_MAGIC, RDV_JOIN};
    RdvJoin head = {step, m->epoch, m->R, NULL};
    for (int r = 0; m->rdv.rank == 0 && r < m->R * m->S; r++) {
        if (!joining[r / m->S] || m->pending[r] < 0) { continue; }
        int c = m->pending[r];
        int ok = send(c, &a, sizeof(a), MSG_NOSIGNAL) == (ssize_t)sizeof(a) &&
                 send(c, &head, 3 * sizeof(int32_t), MSG_NOSIGNAL) == (ssize_t)(3 * sizeof(int32_t)) &&
                 send(c, m->alive, (size_t)m->R, MSG_NOSIGNAL) == (ssize_t)m->R &&
                 send(c, blob, n, MSG_NOSIGNAL) == (ssize_t)n;
        if (!ok) { printf("elastic (step %d): rank %d's answer could not be sent (%s)\n", step, r, strerror(errno)); }
        close(c);
        m->pending[r] = -1;
    }
}

// Every survivor: the replicas admitted (joining) did not make it into the grown communicators (a
// joining rank died or hangs): they count as missing again; a later hello of theirs rejoins as any.
static void membership_unadmit(Membership* m, const uint8_t* joining) {
    for (int q = 0; q < m->R; q++) {
        if (joining[q]) { m->alive[q] = 0; }
    }
}

#endif
