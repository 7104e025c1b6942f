// NCCL set-up of the CUDA trainer: the error check, the floatX wire type, and the world
// communicator, whose unique id rank 0 creates and hands to the others (-pi mpi: MPI_Bcast; -pi fs:
// a file in a shared directory; -pi tcp: a rendezvous on rank 0's host and port).
#ifndef LLMC_NCCL_SETUP_CUH
#define LLMC_NCCL_SETUP_CUH

#include <arpa/inet.h>
#include <errno.h>
#include <nccl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "cuda_common.cuh"
#include "process_info.h" // <mpi.h>, or llmc/mpi_single.h in a -DNO_MPI build
#include "watchdog.h"

// Every NCCL call is watched (llmc/watchdog.h): in the emulator's --check builds a collective
// blocks inside the call until the peers join, and a dead or hung peer must not keep it there. A grace
// (watchdog_grace) lasts until the next completed host wait, where a real GPU blocks.
#define ncclCheck(call)                                      \
    do {                                                     \
        watchdog_arm("an NCCL call");                        \
        ncclResult_t nccl_result_ = (call);                  \
        watchdog_disarm_after(0);                            \
        nccl_check(nccl_result_, #call, __FILE__, __LINE__); \
    } while (0)
static void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess) { fail("NCCL error %s at %s:%d (%s)", ncclGetErrorString(r), file, line, what); }
}

#ifdef ENABLE_FP32
#define ncclFloatX ncclFloat
#else
#define ncclFloatX ncclBfloat16
#endif

// the NCCL id: rank 0 creates it, every other rank receives it

// -pi fs: <dir>/nccl_id_<job>, written under a temporary name and renamed, so a reader never sees
// a partial id. <job> is SLURM_JOB_ID.SLURM_STEP_ID, or Open MPI's PMIX_NAMESPACE, so that a
// stale file of an earlier job is not read; rank 0 removes the file once NCCL is up.
static void nccl_id_path(char* out, size_t len, const char* dir) {
    const char* job = getenv("SLURM_JOB_ID");
    const char* step = getenv("SLURM_STEP_ID");
    const char* ns = getenv("PMIX_NAMESPACE");
    if (job) { snprintf(out, len, "%s/nccl_id_%s.%s", dir, job, step ? step : "0"); }
    else { snprintf(out, len, "%s/nccl_id_%s", dir, ns ? ns : "job"); }
}

static void nccl_id_via_fs(ncclUniqueId* id, int rank, const char* dir) {
    char path[4096], tmp[4200];
    nccl_id_path(path, sizeof(path), dir);
    if (rank == 0) {
        FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
        fwrite_check(id, sizeof(*id), 1, f, tmp);
        commit_tmp(f, tmp, path);
        return;
    }
    double deadline = now_seconds() + peer_timeout_s();
    for (;;) {
        FILE* f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (got == 1) { return; }
        }
        if (now_seconds() > deadline) {
            fail("-pi fs: no NCCL id from rank 0 at %s within %.0f s", path, peer_timeout_s());
        }
        usleep(10000);
    }
}

// Resolves host (a name or an IPv4 address) and port.
static struct sockaddr_in tcp_address(const char* host, int port) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL) { fail("-ps %s: cannot resolve the address", host); }
    struct sockaddr_in a = *(struct sockaddr_in*)res->ai_addr;
    freeaddrinfo(res);
    a.sin_port = htons((uint16_t)port);
    return a;
}

// Waits until fd is ready for events or the deadline passes (then fails with what).
static void poll_until(int fd, short events, double deadline, const char* what) {
    for (;;) {
        double left = deadline - now_seconds();
        if (left <= 0.0) { fail("%s: timed out after %.0f s", what, peer_timeout_s()); }
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, (int)(left * 1000.0) + 1);
        if (r > 0) { return; }
        if (r < 0 && errno != EINTR) { fail("%s: poll failed (%s)", what, strerror(errno)); }
    }
}

// -pi tcp: rank 0 listens on -pp (every interface) and sends the id to world-1 connections; the
// others connect to -ps:-pp (retrying until rank 0 listens) and read it.
static void nccl_id_via_tcp(ncclUniqueId* id, int rank, int world, const char* host, int port) {
    double deadline = now_seconds() + peer_timeout_s();
    char what[512];
    snprintf(what, sizeof(what), "-pi tcp: rendezvous on %s:%d", host, port);
    if (rank == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)port);
        if (s < 0 || bind(s, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(s, world) != 0) {
            fail("%s: cannot listen on port %d (%s)", what, port, strerror(errno));
        }
        for (int i = 1; i < world; i++) {
            poll_until(s, POLLIN, deadline, what);
            int c = accept(s, NULL, NULL);
            if (c < 0) { fail("%s: accept failed (%s)", what, strerror(errno)); }
            if (send(c, id, sizeof(*id), MSG_NOSIGNAL) != (ssize_t)sizeof(*id)) { fail("%s: send failed", what); }
            close(c);
        }
        close(s);
        return;
    }
    struct sockaddr_in a = tcp_address(host, port);
    for (;;) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c >= 0 && connect(c, (struct sockaddr*)&a, sizeof(a)) == 0) {
            size_t got = 0;
            while (got < sizeof(*id)) {
                poll_until(c, POLLIN, deadline, what);
                ssize_t r = recv(c, (char*)id + got, sizeof(*id) - got, 0);
                if (r <= 0) { fail("%s: connection closed after %zu of %zu bytes", what, got, sizeof(*id)); }
                got += (size_t)r;
            }
            close(c);
            return;
        }
        if (c >= 0) { close(c); }
        if (now_seconds() > deadline) { fail("%s: rank 0 did not answer within %.0f s", what, peer_timeout_s()); }
        usleep(50000);
    }
}

// The world communicator: rank 0's id reaches every rank through the chosen method.
static ncclComm_t nccl_world_init(const ProcessInfo* p, const char* method, const char* fs_dir, const char* host,
                                  int port) {
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (p->rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
    if (p->world == 1) {
        // one process: nobody to hand the id to (no file for -pi fs, no port for -pi tcp)
    } else if (strcmp(method, "mpi") == 0) {
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    } else if (strcmp(method, "fs") == 0) {
        nccl_id_via_fs(&id, p->rank, fs_dir);
    } else {
        if (host[0] == '\0' && p->rank != 0) { fail("-pi tcp: needs rank 0's address (-ps)"); }
        nccl_id_via_tcp(&id, p->rank, p->world, host, port);
    }
    ncclComm_t comm = NULL;
    ncclCheck(ncclCommInitRank(&comm, p->world, id, p->rank));
    if (strcmp(method, "fs") == 0 && p->rank == 0 && p->world > 1) {
        char path[4096];
        nccl_id_path(path, sizeof(path), fs_dir);
        remove(path);
    }
    return comm;
}

#endif
