// rand.h — deterministic random numbers for init and sampling (host only).
// A splitmix64 generator: tiny state (one uint64), identical sequences on every platform and
// compiler (unlike std::normal_distribution), cheap to save in a checkpoint.
// rand_normal uses Box–Muller in double.
#pragma once
#include <cmath>
#include <cstdint>

typedef struct {
    uint64_t state;
} Rng;

static inline void rand_init(Rng* r, uint64_t seed) { r->state = seed; }

static inline uint64_t rand_u64(Rng* r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
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

// n samples of normal(0, std) into out
static inline void rand_fill_normal(Rng* r, float* out, size_t n, float std) {
    for (size_t i = 0; i < n; i++) out[i] = (float)(rand_normal(r) * std);
}
