// fp8_inputs.h — the generated FP8 test inputs shared by test/test_fp8.cpp (host codec against
// the ml_dtypes fixture) and test/test_fp8_device.cu (the same inputs as kernels): the generator
// documented in test/reference/make_fp8_fixtures.py, draw k from rand_u64 output k+1.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>
#include "../llmc/fp8.h"
#include "../llmc/rand.h"

static inline uint32_t fp8_test_f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float fp8_test_u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

// The exponents of the generated inputs, e0 .. e0 + span - 1: the format's whole range, with
// room for the rounding into and out of its subnormals and past its max (E4M3: -14 .. 10,
// E5M2: -20 .. 17); the fixture generator uses the same.
static inline void fp8_test_exponents(Fp8Format f, int* e0, int* span) {
    *e0 = f == FP8_E5M2 ? -20 : -14;
    *span = f == FP8_E5M2 ? 38 : 25;
}

// x (n): 1 in 16 a raw float32 bit pattern (any value, NaN and Inf included), 1 in 16 a value
// with only 4 leading mantissa bits (exact ties and representable codes), the rest a random sign,
// exponent in e0 .. e0 + span - 1 and mantissa.
static inline void fp8_test_random_inputs(std::vector<float>* x, uint64_t seed, size_t n, int e0, int span) {
    Rng rng;
    rand_init(&rng, seed);
    x->resize(n);
    for (size_t k = 0; k < n; k++) {
        uint64_t r = rand_u64(&rng);
        uint32_t lo = (uint32_t)(r & 15u);
        uint32_t raw = (uint32_t)(r >> 32);
        uint32_t bits;
        if (lo == 0) {
            bits = raw;
        } else {
            uint32_t sign = (uint32_t)((r >> 4) & 1u);
            int e = e0 + (int)(((r >> 8) & 0xFFFFu) % (uint64_t)span);
            uint32_t m = raw & 0x7FFFFFu;
            if (lo == 1) m &= 0x780000u;
            bits = (sign << 31) | ((uint32_t)(e + 127) << 23) | m;
        }
        (*x)[k] = fp8_test_u2f(bits);
    }
}
