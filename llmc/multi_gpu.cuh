// Multi-GPU plumbing of the CUDA trainer: which rank this process is (Open MPI, or the
// environment under slurm's srun / torchrun-style launchers), the NCCL unique id handed from
// rank 0 to the others (-pi mpi: MPI_Bcast; -pi fs: a file in a shared directory; -pi tcp: a
// rendezvous on rank 0's host and port), the NCCL error checks, a host wait that polls NCCL's
// asynchronous errors with a deadline (a dead peer ends the job instead of hanging it), and the
// small kernels of the sharded gradient path.
#ifndef LLMC_MULTI_GPU_CUH
#define LLMC_MULTI_GPU_CUH

#include <arpa/inet.h>
#include <errno.h>
#include <mpi.h>
#include <nccl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "cuda_common.cuh"

#define ncclCheck(call) nccl_check((call), #call, __FILE__, __LINE__)
static void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess) { fail("NCCL error %s at %s:%d (%s)", ncclGetErrorString(r), file, line, what); }
}

#ifdef ENABLE_FP32
#define ncclFloatX ncclFloat
#else
#define ncclFloatX ncclBfloat16
#endif

// Seconds any rank waits for its peers (start-up rendezvous, a collective) before it gives up:
// TRAIN_GPT2_TIMEOUT, default 600.
static double peer_timeout_s(void) {
    const char* s = getenv("TRAIN_GPT2_TIMEOUT");
    double t = s ? atof(s) : 600.0;
    return t > 0.0 ? t : 600.0;
}

typedef struct {
    int rank, world, local_rank;
    int use_mpi;         // -pi mpi: MPI_Init was called here
    const char* source;  // where rank and world came from
} ProcessInfo;

// The first of the environment variables names[] that is set, as an int; fallback if none is.
static int env_first_int(const char* const* names, int n, int fallback, const char** which) {
    for (int i = 0; i < n; i++) {
        const char* v = getenv(names[i]);
        if (v && *v) {
            if (which) { *which = names[i]; }
            return atoi(v);
        }
    }
    return fallback;
}

// -pi mpi: ranks from MPI (the local rank = the rank among the processes sharing this node).
// -pi fs | tcp: from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, else Open MPI's
// OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK, else RANK / WORLD_SIZE / LOCAL_RANK, else a single
// process.
static void process_info_init(ProcessInfo* p, const char* method, int* argc, char*** argv) {
    p->use_mpi = strcmp(method, "mpi") == 0;
    if (p->use_mpi) {
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &p->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &p->world);
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p->rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &p->local_rank);
        MPI_Comm_free(&node);
        p->source = "MPI";
        return;
    }
    static const char* rank_vars[] = {"SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "RANK"};
    static const char* world_vars[] = {"SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"};
    static const char* local_vars[] = {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"};
    p->source = "no launcher variables (one process)";
    p->rank = env_first_int(rank_vars, 3, 0, &p->source);
    p->world = env_first_int(world_vars, 3, 1, NULL);
    p->local_rank = env_first_int(local_vars, 3, 0, NULL);
    if (p->world < 1 || p->rank < 0 || p->rank >= p->world) {
        fail("-pi %s: rank %d of world %d from %s is not a valid rank", method, p->rank, p->world, p->source);
    }
}

// ----------------------------------------------------------------------------
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
    if (strcmp(method, "mpi") == 0) {
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    } else if (strcmp(method, "fs") == 0) {
        nccl_id_via_fs(&id, p->rank, fs_dir);
    } else {
        if (host[0] == '\0' && p->rank != 0) { fail("-pi tcp: needs rank 0's address (-ps)"); }
        nccl_id_via_tcp(&id, p->rank, p->world, host, port);
    }
    ncclComm_t comm = NULL;
    ncclCheck(ncclCommInitRank(&comm, p->world, id, p->rank));
    if (strcmp(method, "fs") == 0 && p->rank == 0) {
        char path[4096];
        nccl_id_path(path, sizeof(path), fs_dir);
        remove(path);
    }
    return comm;
}

// ----------------------------------------------------------------------------
// waiting for the device without waiting forever

#define MAX_WATCHED_COMMS 3
static ncclComm_t watched_comms[MAX_WATCHED_COMMS];
static int num_watched_comms = 0;

static void watch_comm(ncclComm_t c) {
    if (c && num_watched_comms < MAX_WATCHED_COMMS) { watched_comms[num_watched_comms++] = c; }
}

// fail()'s way of ending every rank: MPI_Abort where MPI is up; otherwise abort the NCCL
// communicators, so that the peers' pending collectives report an error instead of hanging
// (their wait_device then fails too, and the launcher sees the non-zero exits).
static void abort_all_ranks(void) {
    int mpi = 0;
    MPI_Initialized(&mpi);
    if (mpi) { MPI_Abort(MPI_COMM_WORLD, 1); }
    for (int i = 0; i < num_watched_comms; i++) { ncclCommAbort(watched_comms[i]); }
    num_watched_comms = 0;
}

// Blocks until everything issued so far on stream has run. Polls the event and the
// communicators' asynchronous errors; fails (naming what it waited for) on an NCCL error or
// after TRAIN_GPT2_TIMEOUT seconds.
static void wait_device(cudaStream_t stream, cudaEvent_t ev, const char* what) {
    cudaCheck(cudaEventRecord(ev, stream));
    double deadline = now_seconds() + peer_timeout_s();
    for (;;) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess) { return; }
        if (q != cudaErrorNotReady) { cudaCheck(q); }
        for (int i = 0; i < num_watched_comms; i++) {
            ncclResult_t r;
            ncclCheck(ncclCommGetAsyncError(watched_comms[i], &r));
            if (r != ncclSuccess && r != ncclInProgress) {
                fail("NCCL error while waiting for %s: %s", what, ncclGetErrorString(r));
            }
        }
        if (now_seconds() > deadline) {
            fail("waited %.0f s for %s: a peer has died or hangs", peer_timeout_s(), what);
        }
        usleep(50);
    }
}

// ----------------------------------------------------------------------------
// kernels of the sharded gradient path

// acc[i] += x[i]: a reduce-scattered floatX slice into the fp32 shard accumulator.
__global__ void accumulate_kernel(float* acc, const floatX* x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        acc[i] += to_f(x[i]);
    }
}

static void accumulate(float* acc, const floatX* x, size_t n, cudaStream_t stream) {
    unsigned int blocks = ceil_div_u(n, 256);
    accumulate_kernel<<<blocks > 4096 ? 4096 : blocks, 256, 0, stream>>>(acc, x, n);
    cudaLaunchCheck();
}

__global__ void scale_kernel(float* x, size_t n, float s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        x[i] *= s;
    }
}

static void scale(float* x, size_t n, float s, cudaStream_t stream) {
    unsigned int blocks = ceil_div_u(n, 256);
    scale_kernel<<<blocks > 4096 ? 4096 : blocks, 256, 0, stream>>>(x, n, s);
    cudaLaunchCheck();
}

#endif
