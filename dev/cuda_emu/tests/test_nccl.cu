// test_nccl.cu: every NCCL collective the project uses, on however many ranks mpirun starts
// (1 to 4 in `make test`), against values computed on the host: all-reduce (sum, avg, max; fp32,
// bf16, int32; in place and out of place; counts that do not divide evenly, fewer elements than
// ranks), reduce-scatter (in place too), all-gather (in place too), broadcast from every root,
// ncclCommSplit, group calls, ncclSend/ncclRecv (an all-to-all, a ring shift), and under the emulator the bytes each rank passed to MPI.
// Real CUDA: it also compiles with nvcc (the id is shared over MPI, as multi-GPU programs do).
#include <mpi.h>
#include <nccl.h>
#include <cuda_bf16.h>
#include <vector>
#include <unistd.h>
#include "check.h"

static int rank_, nranks;

// Small integers: every partial sum is exact in fp32 and bf16, so any reduction order agrees.
static double value(int r, size_t i) { return (double)((r + 1) * (int)(i % 5) - 3 + r); }

enum Kind { F32, BF16, I32 };
static size_t elem_size(Kind k) { return k == BF16 ? 2 : 4; }
static ncclDataType_t nccl_type(Kind k) { return k == F32 ? ncclFloat32 : k == BF16 ? ncclBfloat16 : ncclInt32; }

// Device buffer helpers: write/read doubles as the element type.
static void put(void* dev, Kind k, const std::vector<double>& v) {
    std::vector<char> h(v.size() * elem_size(k));
    for (size_t i = 0; i < v.size(); i++) {
        if (k == F32) ((float*)h.data())[i] = (float)v[i];
        else if (k == BF16) ((__nv_bfloat16*)h.data())[i] = __float2bfloat16((float)v[i]);
        else ((int*)h.data())[i] = (int)v[i];
    }
    CUDA_CHECK(cudaMemcpy(dev, h.data(), h.size(), cudaMemcpyHostToDevice));
}
// The collectives run on stream 0: the host polls it until they are done (as the trainer's
// deadline path does) before a blocking copy reads their results.
static void wait_collectives() {
    cudaError_t e;
    while ((e = cudaStreamQuery(0)) == cudaErrorNotReady) {}
    CUDA_CHECK(e);
}
static std::vector<double> get(const void* dev, Kind k, size_t n) {
    std::vector<char> h(n * elem_size(k));
    wait_collectives();
    CUDA_CHECK(cudaMemcpy(h.data(), dev, h.size(), cudaMemcpyDeviceToHost));
    std::vector<double> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = k == F32 ? ((float*)h.data())[i] : k == BF16 ? __bfloat162float(((__nv_bfloat16*)h.data())[i]) : ((int*)h.data())[i];
    return v;
}
static double reduce_ref(ncclRedOp_t op, Kind k, size_t i) {
    double s = 0, mx = -1e30;
    for (int r = 0; r < nranks; r++) { s += value(r, i); mx = value(r, i) > mx ? value(r, i) : mx; }
    if (op == ncclMax) return mx;
    if (op == ncclAvg) return k == BF16 ? __bfloat162float(__float2bfloat16((float)s / nranks)) : (float)s / nranks;
    return s;
}
static const char* kname(Kind k) { return k == F32 ? "fp32" : k == BF16 ? "bf16" : "int32"; }

#ifdef EMU_CUDA
// Bytes this rank hands to MPI in the ring: every chunk but one, in each of the two phases.
static size_t ring_bytes(size_t count, size_t es, int skip_a, int skip_b) {
    size_t total = 0;
    for (int c = 0; c < nranks; c++) {
        size_t len = count * (c + 1) / nranks - count * c / nranks;
        if (c != skip_a) total += len * es;
        if (skip_b >= 0 && c != skip_b) total += len * es;
    }
    return total;
}
#endif

static void all_reduce(ncclComm_t comm, Kind k, ncclRedOp_t op, size_t count, bool in_place) {
    void *send, *recv;
    CUDA_CHECK(cudaMalloc(&send, count * elem_size(k) + 1));
    CUDA_CHECK(cudaMalloc(&recv, count * elem_size(k) + 1));
    std::vector<double> mine(count);
    for (size_t i = 0; i < count; i++) mine[i] = value(rank_, i);
    put(send, k, mine);
    if (in_place) recv = send;
#ifdef EMU_CUDA
    size_t before = emu_nccl_bytes_sent();
#endif
    NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(k), op, comm, 0));
    wait_collectives();
    std::vector<double> got = get(recv, k, count);
    int bad = 0;
    for (size_t i = 0; i < count; i++) bad += !close_to(got[i], reduce_ref(op, k, i), 1e-6);
    EXPECT(bad == 0, "rank %d all-reduce %s op %d count %zu in_place %d: %d wrong", rank_, kname(k), (int)op, count, in_place, bad);
#ifdef EMU_CUDA
    size_t sent = emu_nccl_bytes_sent() - before;
    size_t want = nranks == 1 ? 0 : ring_bytes(count, elem_size(k), rank_, (rank_ + 1) % nranks);
    EXPECT(sent == want, "rank %d all-reduce of %zu elements sent %zu bytes, want %zu", rank_, count, sent, want);
#endif
    cudaFree(send);
    if (!in_place) cudaFree(recv);
}

static void reduce_scatter(ncclComm_t comm, Kind k, ncclRedOp_t op, size_t per_rank, bool in_place) {
    size_t es = elem_size(k), count = per_rank * nranks;
    void *send, *recv;
    CUDA_CHECK(cudaMalloc(&send, count * es));
    CUDA_CHECK(cudaMalloc(&recv, per_rank * es + 1));
    std::vector<double> mine(count);
    for (size_t i = 0; i < count; i++) mine[i] = value(rank_, i);
    put(send, k, mine);
    void* out = in_place ? (char*)send + rank_ * per_rank * es : recv;
#ifdef EMU_CUDA
    size_t before = emu_nccl_bytes_sent();
#endif
    NCCL_CHECK(ncclReduceScatter(send, out, per_rank, nccl_type(k), op, comm, 0));
    std::vector<double> got = get(out, k, per_rank);
    int bad = 0;
    for (size_t i = 0; i < per_rank; i++) bad += !close_to(got[i], reduce_ref(op, k, rank_ * per_rank + i), 1e-6);
    EXPECT(bad == 0, "rank %d reduce-scatter %s op %d per_rank %zu in_place %d: %d wrong", rank_, kname(k), (int)op, per_rank, in_place, bad);
#ifdef EMU_CUDA
    size_t sent = emu_nccl_bytes_sent() - before, want = (size_t)(nranks - 1) * per_rank * es;
    EXPECT(sent == want, "rank %d reduce-scatter sent %zu bytes, want %zu", rank_, sent, want);
#endif
    cudaFree(send);
    cudaFree(recv);
}

static void all_gather(ncclComm_t comm, Kind k, size_t per_rank, bool in_place) {
    size_t es = elem_size(k), count = per_rank * nranks;
    void *send, *recv;
    CUDA_CHECK(cudaMalloc(&send, per_rank * es + 1));
    CUDA_CHECK(cudaMalloc(&recv, count * es));
    std::vector<double> mine(per_rank);
    for (size_t i = 0; i < per_rank; i++) mine[i] = value(rank_, i);
    void* src = in_place ? (char*)recv + rank_ * per_rank * es : send;
    put(src, k, mine);
    NCCL_CHECK(ncclAllGather(src, recv, per_rank, nccl_type(k), comm, 0));
    std::vector<double> got = get(recv, k, count);
    int bad = 0;
    for (size_t i = 0; i < count; i++) bad += got[i] != value((int)(i / per_rank), i % per_rank);
    EXPECT(bad == 0, "rank %d all-gather %s per_rank %zu in_place %d: %d wrong", rank_, kname(k), per_rank, in_place, bad);
    cudaFree(send);
    cudaFree(recv);
}

static void broadcast(ncclComm_t comm, int root, size_t count) {
    float *send, *recv;
    CUDA_CHECK(cudaMalloc(&send, count * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&recv, count * sizeof(float)));
    std::vector<double> mine(count);
    for (size_t i = 0; i < count; i++) mine[i] = value(rank_, i);
    put(send, F32, mine);
    NCCL_CHECK(ncclBroadcast(send, recv, count, ncclFloat32, root, comm, 0));
    NCCL_CHECK(ncclBcast(send, count, ncclFloat32, root, comm, 0));  // in place
    std::vector<double> got = get(recv, F32, count), got2 = get(send, F32, count);
    int bad = 0;
    for (size_t i = 0; i < count; i++) bad += (got[i] != value(root, i)) + (got2[i] != value(root, i));
    EXPECT(bad == 0, "rank %d broadcast from %d: %d wrong", rank_, root, bad);
    cudaFree(send);
    cudaFree(recv);
}

// ncclReduce to each root, in place and not, fp32 and bf16 sums and an fp32 average: the root
// gets the reduction, every other rank's recvbuff is left as it was, and each rank but the root
// sends the count once.
static void reduce_to_root(ncclComm_t comm, Kind k, ncclRedOp_t op, int root, size_t count, bool in_place) {
    void *send, *recv;
    CUDA_CHECK(cudaMalloc(&send, count * elem_size(k)));
    recv = send;
    if (!in_place) CUDA_CHECK(cudaMalloc(&recv, count * elem_size(k)));
    std::vector<double> mine(count), marker(count, 7.0);
    for (size_t i = 0; i < count; i++) mine[i] = value(rank_, i);
    put(send, k, mine);
    if (!in_place) put(recv, k, marker);
#ifdef EMU_CUDA
    size_t before = emu_nccl_bytes_sent();
#endif
    NCCL_CHECK(ncclReduce(send, recv, count, nccl_type(k), op, root, comm, 0));
    wait_collectives();
    std::vector<double> got = get(recv, k, count);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        double want = rank_ == root ? reduce_ref(op, k, i) : in_place ? mine[i] : marker[i];
        bad += !close_to(got[i], want, 1e-6);
    }
    EXPECT(bad == 0, "rank %d reduce %s op %d to %d in_place %d: %d wrong", rank_, kname(k), (int)op, root, in_place, bad);
#ifdef EMU_CUDA
    size_t sent = emu_nccl_bytes_sent() - before, want = rank_ == root ? 0 : count * elem_size(k);
    EXPECT(sent == want, "rank %d reduce to %d sent %zu bytes, want %zu", rank_, root, sent, want);
#endif
    cudaFree(send);
    if (!in_place) cudaFree(recv);
}

// A (nested) group: its collectives are issued at the outermost ncclGroupEnd, so a copy queued on
// the same stream inside the group still sees the buffer before the all-reduce.
static void group_calls(ncclComm_t comm) {
    const size_t n = 9, per = 3;
    float *x, *seen, *g;
    CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&seen, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&g, per * nranks * sizeof(float)));
    std::vector<double> mine(n), sum(n, 0.0), part(per);
    for (size_t i = 0; i < n; i++) {
        mine[i] = value(rank_, i);
        for (int r = 0; r < nranks; r++) sum[i] += value(r, i);
    }
    for (size_t i = 0; i < per; i++) part[i] = value(rank_, i);
    put(x, F32, mine);
    put(g + rank_ * per, F32, part);
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm, 0));
    CUDA_CHECK(cudaMemcpyAsync(seen, x, n * sizeof(float), cudaMemcpyDeviceToDevice, 0));
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclAllGather(g + rank_ * per, g, per, ncclFloat32, comm, 0));
    NCCL_CHECK(ncclGroupEnd());
    NCCL_CHECK(ncclGroupEnd());
    std::vector<double> got_x = get(x, F32, n), got_seen = get(seen, F32, n), got_g = get(g, F32, per * nranks);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += (got_x[i] != sum[i]) + (got_seen[i] != mine[i]);
    for (size_t i = 0; i < per * nranks; i++) bad += got_g[i] != value((int)(i / per), i % per);
    EXPECT(bad == 0, "rank %d group calls: %d wrong", rank_, bad);
    cudaFree(x);
    cudaFree(seen);
    cudaFree(g);
}

// A kernel's arguments are its values at the launch (CUDA copies them then), even when the kernel
// runs later: here it is queued behind an all-reduce that the last rank joins 20 ms late, and its
// argument is read through a pointer into a stack frame that is gone (and overwritten) before the
// kernel runs.
__global__ void store_value(int* out, int v) { *out = v; }
struct LaunchArg { int v; };
__attribute__((noinline)) static void launch_from_frame(int* out, int v) {
    LaunchArg a = {v};
    const LaunchArg* volatile p = &a;
    store_value<<<1, 1, 0, 0>>>(out, p->v);
}
__attribute__((noinline)) static int overwrite_stack() {
    volatile int junk[64];
    for (int i = 0; i < 64; i++) junk[i] = -1000 - i;
    return junk[7];
}
static void launch_args_at_launch(ncclComm_t comm) {
    int *d, *out, got = 0;
    CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    CUDA_CHECK(cudaMalloc(&out, sizeof(int)));
    CUDA_CHECK(cudaMemcpy(d, &rank_, sizeof(int), cudaMemcpyHostToDevice));
    if (rank_ == nranks - 1) usleep(20000);
    NCCL_CHECK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm, 0));
    launch_from_frame(out, 4200 + rank_);
    overwrite_stack();
    wait_collectives();
    CUDA_CHECK(cudaMemcpy(&got, out, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(got == 4200 + rank_, "rank %d: a kernel queued behind a collective got argument %d, launched with %d", rank_,
           got, 4200 + rank_);
    cudaFree(d);
    cudaFree(out);
}

// Point to point: an all-to-all in one group (every rank sends a block of its own length to every
// rank, itself too, sends and receives interleaved in a different order on each rank), then a
// shift along the ring outside a group, each rank on a stream of its own. Expected values come
// from the closed form block(from, to, i); bytes are the sends' payload.
static size_t block_len(int from, int to) { return 1 + (size_t)((3 * from + 5 * to) % 7) * 37; }
static double block(int from, int to, size_t i) { return (double)(from * 1000 + to * 100) + (double)(i % 91); }
static void point_to_point(ncclComm_t comm) {
    std::vector<float*> out(nranks), in(nranks);
    size_t want_sent = 0;
    for (int p = 0; p < nranks; p++) {
        size_t n_out = block_len(rank_, p), n_in = block_len(p, rank_);
        CUDA_CHECK(cudaMalloc(&out[p], n_out * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&in[p], n_in * sizeof(float)));
        std::vector<double> v(n_out);
        for (size_t i = 0; i < n_out; i++) v[i] = block(rank_, p, i);
        put(out[p], F32, v);
        CUDA_CHECK(cudaMemset(in[p], 0xff, n_in * sizeof(float)));
        want_sent += n_out * sizeof(float);
    }
#ifdef EMU_CUDA
    size_t before = emu_nccl_bytes_sent();
#endif
    NCCL_CHECK(ncclGroupStart());
    for (int k = 0; k < nranks; k++) {  // receives first on even ranks, sends first on odd ones
        int p = (rank_ + k) % nranks, q = (rank_ - k + nranks) % nranks;
        if (rank_ % 2 == 0) {
            NCCL_CHECK(ncclRecv(in[q], block_len(q, rank_), ncclFloat32, q, comm, 0));
            NCCL_CHECK(ncclSend(out[p], block_len(rank_, p), ncclFloat32, p, comm, 0));
        } else {
            NCCL_CHECK(ncclSend(out[p], block_len(rank_, p), ncclFloat32, p, comm, 0));
            NCCL_CHECK(ncclRecv(in[q], block_len(q, rank_), ncclFloat32, q, comm, 0));
        }
    }
    NCCL_CHECK(ncclGroupEnd());
#ifdef EMU_CUDA
    size_t sent = emu_nccl_bytes_sent() - before;
    EXPECT(sent == want_sent, "rank %d all-to-all sent %zu bytes, want %zu", rank_, sent, want_sent);
#endif
    int bad = 0;
    for (int p = 0; p < nranks; p++) {
        std::vector<double> got = get(in[p], F32, block_len(p, rank_));
        for (size_t i = 0; i < got.size(); i++) bad += got[i] != block(p, rank_, i);
    }
    EXPECT(bad == 0, "rank %d all-to-all over %d ranks: %d wrong", rank_, nranks, bad);
    // ring shift on a stream of its own, outside a group on even rings (even ranks send first, odd
    // ranks receive first); an odd ring has two even ranks next to each other, so there it is grouped
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int next = (rank_ + 1) % nranks, prev = (rank_ - 1 + nranks) % nranks;
    if (nranks > 1) {
        float* got_dev = in[prev];
        if (nranks % 2 == 1) {
            NCCL_CHECK(ncclGroupStart());
            NCCL_CHECK(ncclSend(out[next], block_len(rank_, next), ncclFloat32, next, comm, st));
            NCCL_CHECK(ncclRecv(got_dev, block_len(prev, rank_), ncclFloat32, prev, comm, st));
            NCCL_CHECK(ncclGroupEnd());
        } else if (rank_ % 2 == 0) {
            NCCL_CHECK(ncclSend(out[next], block_len(rank_, next), ncclFloat32, next, comm, st));
            NCCL_CHECK(ncclRecv(got_dev, block_len(prev, rank_), ncclFloat32, prev, comm, st));
        } else {
            NCCL_CHECK(ncclRecv(got_dev, block_len(prev, rank_), ncclFloat32, prev, comm, st));
            NCCL_CHECK(ncclSend(out[next], block_len(rank_, next), ncclFloat32, next, comm, st));
        }
        while (cudaStreamQuery(st) == cudaErrorNotReady) {}
        std::vector<double> got = get(got_dev, F32, block_len(prev, rank_));
        bad = 0;
        for (size_t i = 0; i < got.size(); i++) bad += got[i] != block(prev, rank_, i);
        EXPECT(bad == 0, "rank %d ring shift: %d wrong", rank_, bad);
    }
    CUDA_CHECK(cudaStreamDestroy(st));
    for (int p = 0; p < nranks; p++) {
        cudaFree(out[p]);
        cudaFree(in[p]);
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int devices;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    CUDA_CHECK(cudaSetDevice(rank_ % devices));
    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, nranks, id, rank_));
    int cr, cn;
    NCCL_CHECK(ncclCommUserRank(comm, &cr));
    NCCL_CHECK(ncclCommCount(comm, &cn));
    EXPECT(cr == rank_ && cn == nranks, "communicator rank %d/%d", cr, cn);

    const size_t counts[] = {1, 2, 7, 12, 1000};  // fewer elements than ranks, uneven and even splits
    for (size_t count : counts)
        for (int in_place = 0; in_place < 2; in_place++) {
            all_reduce(comm, F32, ncclSum, count, in_place);
            all_reduce(comm, F32, ncclAvg, count, in_place);
            all_reduce(comm, F32, ncclMax, count, in_place);
            all_reduce(comm, BF16, ncclSum, count, in_place);
            all_reduce(comm, BF16, ncclAvg, count, in_place);
            all_reduce(comm, I32, ncclSum, count, in_place);
            all_reduce(comm, I32, ncclMax, count, in_place);
        }
    for (size_t per_rank : {1, 5, 64})
        for (int in_place = 0; in_place < 2; in_place++) {
            reduce_scatter(comm, F32, ncclSum, per_rank, in_place);
            reduce_scatter(comm, F32, ncclAvg, per_rank, in_place);
            reduce_scatter(comm, BF16, ncclSum, per_rank, in_place);
            reduce_scatter(comm, I32, ncclMax, per_rank, in_place);
            all_gather(comm, F32, per_rank, in_place);
            all_gather(comm, BF16, per_rank, in_place);
            all_gather(comm, I32, per_rank, in_place);
        }
    for (int root = 0; root < nranks; root++) broadcast(comm, root, 33);
    for (int root = 0; root < nranks; root++)
        for (int in_place = 0; in_place < 2; in_place++) {
            reduce_to_root(comm, F32, ncclSum, root, 33, in_place);
            reduce_to_root(comm, F32, ncclAvg, root, 33, in_place);
            reduce_to_root(comm, BF16, ncclSum, root, 33, in_place);
        }

    group_calls(comm);
    launch_args_at_launch(comm);
    point_to_point(comm);

    // split into even and odd ranks; the last rank opts out when there are 3 or more
    bool opt_out = nranks >= 3 && rank_ == nranks - 1;
    ncclComm_t sub;
    NCCL_CHECK(ncclCommSplit(comm, opt_out ? NCCL_SPLIT_NOCOLOR : rank_ % 2, rank_, &sub, NULL));
    if (opt_out) {
        EXPECT(sub == NULL, "rank %d: NCCL_SPLIT_NOCOLOR gives no communicator", rank_);
    } else {
        int sn, sr, want_n = 0, want_r = 0;
        for (int r = 0; r < nranks; r++)
            if (r % 2 == rank_ % 2 && !(nranks >= 3 && r == nranks - 1)) want_r += r < rank_, want_n++;
        NCCL_CHECK(ncclCommCount(sub, &sn));
        NCCL_CHECK(ncclCommUserRank(sub, &sr));
        EXPECT(sn == want_n && sr == want_r, "rank %d split: size %d rank %d, want %d %d", rank_, sn, sr, want_n, want_r);
        int* d;
        CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
        CUDA_CHECK(cudaMemcpy(d, &rank_, sizeof(int), cudaMemcpyHostToDevice));
        NCCL_CHECK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, sub, 0));
        int got, want = 0;
        wait_collectives();
        CUDA_CHECK(cudaMemcpy(&got, d, sizeof(int), cudaMemcpyDeviceToHost));
        for (int r = 0; r < nranks; r++)
            if (r % 2 == rank_ % 2 && !(nranks >= 3 && r == nranks - 1)) want += r;
        EXPECT(got == want, "rank %d sub-communicator sum %d want %d", rank_, got, want);
        cudaFree(d);
        NCCL_CHECK(ncclCommDestroy(sub));
    }
    NCCL_CHECK(ncclCommDestroy(comm));
    int failed = g_failures, any;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int rc = rank_ == 0 ? finish("test_nccl") : (g_failures != 0);
    if (rank_ == 0 && any && !g_failures) rc = 1;
    MPI_Finalize();
    return rc;
}
