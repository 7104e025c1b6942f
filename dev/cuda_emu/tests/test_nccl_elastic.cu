// test_nccl_elastic.cu DIR start|join: the emulated NCCL without mpirun, with a process that dies
// and one that joins later (issue 36's elastic replicas; run by check_nccl_elastic.sh, which starts
// the processes with RANK and WORLD_SIZE=3 and says what is proven). The ids go through files in DIR.
//   start  ranks 0..2 form a communicator (rank 0 writes DIR/id1) and all-reduce 1 + rank (sum 6).
//          Rank 2 then kills itself (SIGKILL) while ranks 0 and 1 issue an all-reduce it never joins:
//          they poll until ncclCommGetAsyncError reports ncclRemoteError naming rank 2 (at most 5 s),
//          shrink with NCCL_SHRINK_ABORT excluding it, all-reduce 1 + rank on the 2-rank communicator
//          (sum 3), then form a new 3-rank communicator with a newcomer (rank 0 writes DIR/id2; the
//          survivors keep their ranks) and all-reduce 10 + rank (sum 33).
//   join   the newcomer (RANK=2): reads DIR/id2, joins as rank 2 and all-reduces 10 + 2.
// Each process prints "elastic: ok ..." / "elastic: FAIL ..." lines and exits 0 when all passed.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <cuda_runtime.h>
#include <nccl.h>
#include "nccl_poll.h"
#include <unistd.h>

static int rank_ = -1, fails = 0;

static void report(bool ok, const char* what) {
    printf("elastic: rank %d: %s %s\n", rank_, ok ? "ok" : "FAIL", what);
    fflush(stdout);
    fails += !ok;
}

// Rank 0 writes a new id to path (atomically: a rename); the others wait up to 20 s for it.
static bool share_id(ncclUniqueId* id, const std::string& path, bool writer) {
    if (writer) {
        ncclGetUniqueId(id);
        std::string tmp = path + ".tmp";
        FILE* f = fopen(tmp.c_str(), "wb");
        if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0) return false;
        return rename(tmp.c_str(), path.c_str()) == 0;
    }
    for (double end = now() + 20.0; now() < end; usleep(10000)) {
        FILE* f = fopen(path.c_str(), "rb");
        if (!f) continue;
        bool ok = fread(id, sizeof(*id), 1, f) == 1;
        fclose(f);
        if (ok) return true;
    }
    return false;
}

// Joins the 3-rank communicator of the id in DIR/id2 as `rank` and all-reduces 10 + rank (sum 33).
static void join_new(const std::string& dir, int rank) {
    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    bool shared = share_id(&id, dir + "/id2", rank == 0);
    ncclResult_t r = shared ? ncclCommInitRank(&comm, 3, id, rank) : ncclInvalidUsage;
    float sum = r == ncclSuccess ? all_reduce(10.0f + rank, comm) : -1.0f;
    char line[160];
    snprintf(line, sizeof(line), "a new 3-rank communicator (id through a file: %s): %s, all-reduce %g (want 33)",
             shared ? "read" : "none", ncclGetErrorString(r), sum);
    report(r == ncclSuccess && sum == 33.0f, line);
    if (comm) ncclCommDestroy(comm);
}

// Ranks 0 and 1 after rank 2 died: the error naming it, the shrink, the 2-rank all-reduce.
static void survive(ncclComm_t comm) {
    cudaStream_t s;
    float* x;
    double waited;
    ncclResult_t e = stuck_all_reduce(comm, 5.0, &s, &x, &waited); // rank 2 never joins
    char line[256];
    snprintf(line, sizeof(line), "the all-reduce killed rank 2 never joins: %s after %.2f s, naming rank %d (%s)",
             ncclGetErrorString(e), waited, emu_nccl_stopped_peer(comm), ncclGetLastError(comm));
    report(e == ncclRemoteError && emu_nccl_stopped_peer(comm) == 2, line);
    if (e != ncclRemoteError) return;
    int gone = 2;
    ncclComm_t small = nullptr;
    ncclResult_t r = ncclCommShrink(comm, &gone, 1, &small, nullptr, NCCL_SHRINK_ABORT);
    float two = small ? all_reduce(1.0f + rank_, small) : -1.0f;
    snprintf(line, sizeof(line), "NCCL_SHRINK_ABORT excluding rank 2: %s; all-reduce on the 2 ranks left: %g (want 3)",
             ncclGetErrorString(r), two);
    report(r == ncclSuccess && two == 3.0f, line);
    if (small) ncclCommDestroy(small);
}

int main(int argc, char** argv) {
    const char* r = getenv("RANK");
    const char* w = getenv("WORLD_SIZE");
    rank_ = r ? atoi(r) : -1;
    if (argc != 3 || !w || atoi(w) != 3 || rank_ < 0 || rank_ > 2 || (strcmp(argv[2], "start") && strcmp(argv[2], "join"))) {
        fprintf(stderr, "usage: RANK=0..2 WORLD_SIZE=3 %s DIR start|join\n", argv[0]);
        return 2;
    }
    std::string dir = argv[1];
    if (strcmp(argv[2], "join") == 0) {
        join_new(dir, rank_);
        return fails ? 1 : 0;
    }
    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    if (!share_id(&id, dir + "/id1", rank_ == 0)) { report(false, "no id in DIR/id1"); _exit(1); }
    ncclResult_t res = ncclCommInitRank(&comm, 3, id, rank_);
    float six = res == ncclSuccess ? all_reduce(1.0f + rank_, comm) : -1.0f;
    char line[160];
    snprintf(line, sizeof(line), "3 processes without mpirun: %s, all-reduce %g (want 6)", ncclGetErrorString(res), six);
    report(res == ncclSuccess && six == 6.0f, line);
    if (fails) _exit(1);
    if (rank_ == 2) {
        usleep(200000);  // the others' next all-reduce is issued first
        raise(SIGKILL);
    }
    survive(comm);
    if (fails) exit(1);  // with a collective still stuck: exit must not wait for it
    join_new(dir, rank_);
    ncclCommDestroy(comm);
    return fails ? 1 : 0;
}
