// rand.h — deterministic random numbers for init and sampling (host only).
// A splitmix64 generator: tiny state (one uint64), identical sequences on every platform and
// compiler (unlike std::normal_distribution), cheap to save in a checkpoint.
// rand_normal uses Box–Muller in double: exactly two draws per sample.
// splitmix64 is counter-based: the state after n draws is seed + n·γ (mod 2^64), so rand_skip
// jumps ahead in O(1), and rand_fill_normal fills fixed blocks in parallel (OpenMP, when built
// with it) with the same bits as one sequential pass, whatever the thread count.
#pragma once
#include <cmath>
#include <cstdint>

typedef struct {
    uint64_t state;
} Rng;

static const uint64_t RAND_GAMMA = 0x9E3779B97F4A7C15ull;  // splitmix64's increment (2^64 / golden ratio, odd)

static inline void rand_init(Rng* r, uint64_t seed) { r->state = seed; }

static inline uint64_t rand_u64(Rng* r) {
    uint64_t z = (r->state += RAND_GAMMA);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// uniform in [0, 1) with 53 random bits
static inline double rand_uniform(Rng* r) { return (double)(rand_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

static inline double rand_normal(Rng* r) {
    double u1 = rand_uniform(r), u2 = rand_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;  // log(0) guard
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

// Moves the generator on as n draws of rand_u64 would (unsigned wrap-around is the arithmetic mod 2^64).
static inline void rand_skip(Rng* r, uint64_t n) { r->state += n * RAND_GAMMA; }

// Samples per block of rand_fill_normal: large enough that a block's start-up (one multiply) and
// OpenMP's scheduling vanish next to ~30 ns a sample, small enough to balance 100+ threads on a
// 50M-element tensor.
static const size_t RAND_FILL_BLOCK = (size_t)1 << 16;

// n samples of normal(0, std) into out, leaving r where n sequential rand_normal calls would.
// Block b starts 2·b·RAND_FILL_BLOCK draws past r: the values do not depend on the thread count.
static inline void rand_fill_normal(Rng* r, float* out, size_t n, float std) {
    const Rng start = *r;
    const long long blocks = (long long)((n + RAND_FILL_BLOCK - 1) / RAND_FILL_BLOCK);
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (long long b = 0; b < blocks; b++) {
        size_t lo = (size_t)b * RAND_FILL_BLOCK, hi = lo + RAND_FILL_BLOCK < n ? lo + RAND_FILL_BLOCK : n;
        Rng local = start;
        rand_skip(&local, 2 * (uint64_t)lo);
        for (size_t i = lo; i < hi; i++) out[i] = (float)(rand_normal(&local) * std);
    }
    rand_skip(r, 2 * (uint64_t)n);
}
