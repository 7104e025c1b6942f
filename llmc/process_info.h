// Which rank this process is and how long it waits for its peers: -pi mpi takes rank, world and
// local rank (the rank among the processes on this node) from Open MPI; -pi fs and tcp take them
// from the launcher's environment (slurm's srun, Open MPI's variables, or torchrun-style ones).
// Built with -DNO_MPI (dev/gpu.mk where mpicc is missing), MPI is llmc/mpi_single.h and -pi mpi is
// refused at start-up: one node, -pi fs or tcp (or one process, the default there: -pi fs).
#ifndef LLMC_PROCESS_INFO_H
#define LLMC_PROCESS_INFO_H

#ifdef NO_MPI
#include "mpi_single.h"
#else
#include <mpi.h>
#endif
#include <stdlib.h>
#include <string.h>
#include "utils.h"

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

// -pi mpi in a build without Open MPI: one line, before anything starts.
static void process_method_check(const char* method) {
#ifdef NO_MPI
    if (strcmp(method, "mpi") == 0) {
        fail("-pi mpi: this train_gpt2 was built without Open MPI (mpicc was missing): use -pi fs or -pi tcp on "
             "one node, or no -pi for one process");
    }
#else
    (void)method;
#endif
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

// The GPU of a rank that sees `devices` GPUs: its local rank where that many are visible (every
// rank of the node sees all of them), GPU 0 where it sees exactly one (CUDA_VISIBLE_DEVICES set per
// task, e.g. srun --gpus-per-task=1); otherwise -1, and why in `why`.
static int process_device(int local_rank, int devices, char* why, size_t why_len) {
    if (devices == 1) { return 0; }
    if (local_rank >= 0 && local_rank < devices) { return local_rank; }
    snprintf(why, why_len, "local rank %d sees %d GPUs: either every rank of a node sees all of its GPUs (one per "
             "local rank, so at least %d) or each rank sees exactly one (CUDA_VISIBLE_DEVICES per task, srun "
             "--gpus-per-task=1)", local_rank, devices, local_rank + 1);
    return -1;
}

#endif
