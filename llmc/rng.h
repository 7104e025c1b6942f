// A small seeded random number generator (xorshift64*), identical on every platform and rank,
// used for weight initialisation, data shuffling and sampling.
#ifndef LLMC_RNG_H
#define LLMC_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} Rng;

static void rng_seed(Rng* rng, uint64_t seed) {
    // splitmix64 of the seed, so that nearby seeds give unrelated streams; never zero
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    rng->state = z ? z : 0x2545F4914F6CDD1Dull;
}

static uint32_t rng_u32(Rng* rng) {
    uint64_t x = rng->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1Dull) >> 32);
}

// uniform in [0, 1) with 24 random bits
static float rng_uniform(Rng* rng) { return (rng_u32(rng) >> 8) * (1.0f / 16777216.0f); }

// uniform integer in [0, n)
static uint32_t rng_below(Rng* rng, uint32_t n) { return (uint32_t)(((uint64_t)rng_u32(rng) * n) >> 32); }

// fills out[0..n) with normal(0, std) samples (Box-Muller in double)
static void rng_normal_fill(Rng* rng, float* out, size_t n, float std) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = (rng_u32(rng) + 1.0) / 4294967297.0;
        double u2 = rng_u32(rng) / 4294967296.0;
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(std * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n) { out[i + 1] = (float)(std * r * sin(2.0 * M_PI * u2)); }
    }
}

// in-place Fisher-Yates shuffle of idx[0..n)
static void rng_shuffle(Rng* rng, int* idx, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(rng, (uint32_t)(i + 1));
        int t = idx[i]; idx[i] = idx[j]; idx[j] = t;
    }
}

#endif
