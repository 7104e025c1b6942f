// world.h: the start of the strict rules' MPI programs: MPI up, this process's rank and the world's
// size, and one NCCL communicator over every rank (rank 0's id broadcast over MPI); CK and NK end
// the program with exit 1 on a CUDA or an NCCL error.
#pragma once
#include <cstdio>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#define CK(call) do { if ((call) != cudaSuccess) { printf("CUDA error at %d\n", __LINE__); return 1; } } while (0)
#define NK(call) do { if ((call) != ncclSuccess) { printf("NCCL error at %d\n", __LINE__); return 1; } } while (0)

static ncclResult_t strict_world(int* argc, char*** argv, int* rank, int* world, ncclComm_t* comm) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    ncclUniqueId id;
    if (*rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    return ncclCommInitRank(comm, *world, id, *rank);
}
