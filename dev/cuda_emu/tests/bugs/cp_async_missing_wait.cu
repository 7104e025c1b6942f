// Broken: a double-buffered copy loop (cp.async, 16 bytes per thread per tile, one group per tile)
// that always waits with cp.async.wait_group 1, also at the last tile, which is then the newest
// group and still in flight when the block reads it (a GPU may return the shared memory's old bytes). The plain emulator
// copies at the cp.async and passes; --check poisons the destination until the wait that retires
// it. Fixed: the last tile waits with wait_group 0.
#include "common.h"
#include "../../../../llmc/ptx.cuh"
// out[i] = 2 in[i] for 4 tiles of 256 floats; 64 threads, each copies 4 floats per tile
__global__ void scale_tiles(const float* in, float* out) {
    __shared__ __align__(16) float s[2][256];
    int t = threadIdx.x;
    ptx_cp_async_cg16(&s[0][4 * t], in + 4 * t);
    ptx_cp_async_commit();
    for (int tile = 0; tile < 4; tile++) {
        if (tile + 1 < 4) {
            ptx_cp_async_cg16(&s[(tile + 1) % 2][4 * t], in + 256 * (tile + 1) + 4 * t);
            ptx_cp_async_commit();
        }
#ifdef FIXED
        if (tile + 1 < 4) ptx_cp_async_wait<1>(); else ptx_cp_async_wait<0>();
#else
        ptx_cp_async_wait<1>();  // at the last tile its group is the newest: left pending
#endif
        __syncthreads();
        for (int i = t; i < 256; i += 64) out[256 * tile + i] = 2.0f * s[tile % 2][(i + 64) % 256];
        __syncthreads();
    }
}
int main() {
    float h[1024], want[1024];
    for (int i = 0; i < 1024; i++) h[i] = (float)i;
    for (int i = 0; i < 1024; i++) want[i] = 2.0f * h[i / 256 * 256 + (i % 256 + 64) % 256];
    float* din = device_copy(h, 1024);
    float* dout = device_nan(1024);
    scale_tiles<<<1, 64>>>(din, dout);
    return expect_device(dout, want, 1024, "scale_tiles");
}
