// bank_conflicts.cu: shared-memory layouts with known bank conflicts, for `emucc --check`'s count
// (tests/check_banks.sh reads the report): each access below is marked with the n-way it must be
// reported as. A tile of 8 rows x 64 bf16 (128-byte rows) read by ldmatrix.x4 at one 16-byte column
// chunk per matrix puts the 8 rows of each matrix in the same 4 banks (8-way); the same tile stored
// with chunk c of row r at chunk c ^ r (an XOR swizzle) spreads them over all 32 banks (1-way). A
// 32-bit load at a 2-word stride maps lanes l and l + 16 to one bank (2-way); contiguous 128-bit loads
// are conflict-free (1-way). The swizzled reads must also give the same registers as the plain ones.
// Real CUDA: it compiles with nvcc too.
#include <cstdint>
#include <cstdio>
#include "check.h"
#include "../../../llmc/ptx.cuh"

__global__ void layouts(uint32_t* out) {
    __shared__ __align__(16) uint16_t plain[8 * 64], swz[8 * 64];
    __shared__ __align__(16) uint32_t words[128];
    int lane = threadIdx.x;
    for (int i = lane; i < 8 * 64; i += 32) {
        int r = i / 64, c = i % 64;
        plain[i] = (uint16_t)i;
        swz[r * 64 + ((c / 8) ^ r) * 8 + c % 8] = (uint16_t)i;
    }
    for (int i = lane; i < 128; i += 32) words[i] = (uint32_t)i;
    __syncwarp();
    int r = lane % 8, chunk = lane / 8;  // matrix j = lane / 8 reads column chunk j of rows 0..7
    uint32_t a[4], b[4];
    ptx_ldmatrix_x4(a, plain + r * 64 + chunk * 8);              // BANKS 8
    ptx_ldmatrix_x4(b, swz + r * 64 + ((chunk ^ r) * 8));        // BANKS 1
    uint32_t w = ptx_lds32(&words[2 * lane]);                    // BANKS 2
    uint4 v = ptx_lds128(&words[4 * lane]);                      // BANKS 1
    int same = a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
    out[lane] = same && w == 2u * lane && v.x == 4u * lane && v.w == 4u * lane + 3 ? 1u : 0u;
}

int main() {
    uint32_t* d;
    CUDA_CHECK(cudaMalloc(&d, 32 * sizeof(uint32_t)));
    layouts<<<1, 32>>>(d);
    uint32_t h[32];
    CUDA_CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 32; i++) EXPECT(h[i] == 1u, "lane %d: the swizzled tile or a shared load read wrong values", i);
    CUDA_CHECK(cudaFree(d));
    return finish("bank_conflicts");
}
