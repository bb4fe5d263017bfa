// test_fp8.cpp — the FP8 E4M3 and BF16 codecs (llmc/fp8.h) on the CPU.
//
// (a) against test/fixtures/fp8.fix (ml_dtypes.float8_e4m3fn / ml_dtypes.bfloat16 with the
//     satfinite and canonical-NaN policy of llmc/fp8.h applied, see
//     test/reference/make_fp8_fixtures.py): all 256 decodes bit for bit, the hand-picked E4M3
//     inputs (every code, every midpoint and its neighbours, the subnormal and saturation edges,
//     both signs, NaN), 2^20 generated inputs whose codes the fixture stores packed 4 per int32,
//     and ~100k BF16 inputs (ties, denormals, Inf, NaN).
// (b) properties that need no oracle: hand-computed codes, encode(decode(c)) == c, monotonicity,
//     sign symmetry, the half-ulp error bound, every BF16 code round trip.
// (c) the scaled bulk helpers against the scalar functions.
// Build: g++ -O2 -march=native -std=c++17 -fopenmp -Wall -Wextra test/test_fp8.cpp
//          -o build/test_fp8 -lm
// Run from the repository root.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../llmc/fp8.h"
#include "../llmc/rand.h"
#include "fixture.h"
#include "test_util.h"

static const char* FIXTURE_PATH = "test/fixtures/fp8.fix";
static const size_t RANDOM_COUNT = (size_t)1 << 20;

static uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }

// The generator documented in test/reference/make_fp8_fixtures.py (draw k uses rand_u64 output k+1).
static void random_inputs(std::vector<float>* x, uint64_t seed, size_t n) {
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
            int e = -14 + (int)(((r >> 8) & 0xFFFFu) % 25u);
            uint32_t m = raw & 0x7FFFFFu;
            if (lo == 1) m &= 0x780000u;
            bits = (sign << 31) | ((uint32_t)(e + 127) << 23) | m;
        }
        (*x)[k] = u2f(bits);
    }
}

// Reports the number of mismatching codes and the first few.
static void check_codes(const char* name, const float* x, const uint8_t* want, size_t n) {
    size_t bad = 0;
    char first[512] = "";
    int len = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t got = fp8_e4m3_encode(x[i]);
        if (got == want[i]) continue;
        if (bad < 4 && len < 400)
            len += snprintf(first + len, sizeof(first) - len, " [x=%a (0x%08x) got 0x%02x want 0x%02x]",
                            (double)x[i], f2u(x[i]), got, want[i]);
        bad++;
    }
    test_check(name, bad == 0, "%zu of %zu mismatch:%s", bad, n, first);
}

static void test_fixture(void) {
    Fixture fx;
    if (!fixture_load(&fx, FIXTURE_PATH)) {
        test_check("fp8.fixture", false, "%s missing or malformed; regenerate it with "
                   "test/reference/make_fp8_fixtures.py", FIXTURE_PATH);
        return;
    }

    // (a1) every decode, bit for bit (covers -0.0); NaN exactly where the oracle has NaN
    {
        const float* want = fx.f("e4m3.decode");
        int bad = 0, first = -1;
        for (int c = 0; c < 256; c++) {
            float got = fp8_e4m3_decode((uint8_t)c);
            bool ok = std::isnan(want[c]) ? std::isnan(got) : f2u(got) == f2u(want[c]);
            if (!ok) { bad++; if (first < 0) first = c; }
        }
        test_check("fp8.e4m3.decode_all_256", fx.get("e4m3.decode").numel() == 256 && bad == 0,
                   "%d codes differ, first 0x%02x", bad, first);
    }

    // (a2) hand-picked inputs
    {
        const FixtureTensor& tx = fx.get("e4m3.special_x");
        const int32_t* code = fx.i("e4m3.special_code");
        std::vector<uint8_t> want(tx.numel());
        for (size_t i = 0; i < want.size(); i++) want[i] = (uint8_t)code[i];
        check_codes("fp8.e4m3.special_cases", tx.f.data(), want.data(), want.size());
    }

    // (a3) 2^20 generated inputs; the codes are packed 4 per int32, little endian
    {
        const FixtureTensor& tc = fx.get("e4m3.random_code");
        uint64_t seed = (uint64_t)fx.i("e4m3.random_seed")[0];
        std::vector<float> x;
        random_inputs(&x, seed, RANDOM_COUNT);
        std::vector<uint8_t> want(RANDOM_COUNT);
        bool size_ok = tc.numel() * 4 == RANDOM_COUNT;
        if (size_ok) {
            for (size_t j = 0; j < tc.numel(); j++) {
                uint32_t w = (uint32_t)tc.i[j];
                for (int b = 0; b < 4; b++) want[4 * j + b] = (uint8_t)(w >> (8 * b));
            }
            check_codes("fp8.e4m3.random_2^20", x.data(), want.data(), RANDOM_COUNT);
        } else {
            test_check("fp8.e4m3.random_2^20", false, "fixture holds %zu packed words, expected %zu",
                       tc.numel(), RANDOM_COUNT / 4);
        }
        // the generator must reach every regime, or the check above proves little
        size_t zero = 0, sub = 0, sat = 0, nan = 0;
        for (size_t i = 0; i < RANDOM_COUNT; i++) {
            uint8_t c = want[i] & 0x7F;
            zero += c == 0;
            sub += c > 0 && c < 8;
            sat += c == 0x7E;
            nan += c == 0x7F;
        }
        test_check("fp8.e4m3.random_covers_regimes", zero > 1000 && sub > 1000 && sat > 1000 && nan > 10,
                   "zero %zu subnormal %zu saturated %zu NaN %zu", zero, sub, sat, nan);
    }

    // (a4) bf16 encode against the oracle, decode as the exact upper half
    {
        const FixtureTensor& tx = fx.get("bf16.x");
        const int32_t* code = fx.i("bf16.code");
        size_t n = tx.numel(), bad = 0, bad_dec = 0;
        char first[512] = "";
        int len = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t got = fp8_bf16_encode(tx.f[i]);
            if (got != (uint16_t)code[i]) {
                if (bad < 4 && len < 400)
                    len += snprintf(first + len, sizeof(first) - len, " [x=0x%08x got 0x%04x want 0x%04x]",
                                    f2u(tx.f[i]), got, (unsigned)code[i]);
                bad++;
            }
            if (f2u(fp8_bf16_decode((uint16_t)code[i])) != (uint32_t)code[i] << 16) bad_dec++;
        }
        test_check("fp8.bf16.encode_fixture", bad == 0, "%zu of %zu mismatch:%s", bad, n, first);
        test_check("fp8.bf16.decode_fixture", bad_dec == 0, "%zu of %zu decodes differ", bad_dec, n);
    }
}

static void test_e4m3_properties(void) {
    // (b1) hand-computed codes, independent of any oracle
    struct Case { float x; uint8_t code; const char* what; };
    const float inf = INFINITY;
    const Case cases[] = {
        {0.0f, 0x00, "+0"}, {-0.0f, 0x80, "-0"}, {1.0f, 0x38, "1"}, {-2.0f, 0xC0, "-2"},
        {1.0625f, 0x38, "tie 1+1/16 -> even 1"}, {1.1875f, 0x3A, "tie 1+3/16 -> even 1.25"},
        {0.001953125f, 0x01, "2^-9 smallest subnormal"}, {0.0009765625f, 0x00, "2^-10 tie -> 0"},
        {nextafterf(0.0009765625f, 1.0f), 0x01, "just above 2^-10"},
        {0.00146484375f, 0x01, "0.75*2^-9"}, {0.0029296875f, 0x02, "1.5*2^-9 tie -> 2"},
        {0.015625f, 0x08, "2^-6 smallest normal"}, {nextafterf(0.015625f, 0.0f), 0x08, "just below 2^-6"},
        {0.0146484375f, 0x08, "7.5*2^-9 tie -> 8 (into the normals)"},
        {447.0f, 0x7E, "447"}, {448.0f, 0x7E, "448"}, {nextafterf(448.0f, inf), 0x7E, "448+ulp"},
        {463.99f, 0x7E, "463.99"}, {464.0f, 0x7E, "464 tie"}, {nextafterf(464.0f, inf), 0x7E, "464+ulp"},
        {465.0f, 0x7E, "465"}, {480.0f, 0x7E, "480"}, {1e6f, 0x7E, "1e6"}, {FLT_MAX, 0x7E, "FLT_MAX"},
        {-FLT_MAX, 0xFE, "-FLT_MAX"}, {inf, 0x7E, "+Inf"}, {-inf, 0xFE, "-Inf"},
        {NAN, 0x7F, "NaN"}, {u2f(0xFFC00000u), 0x7F, "-NaN (canonical, as CUDA)"},
        {u2f(0x7F800001u), 0x7F, "signalling NaN"}, {u2f(1u), 0x00, "float32 denormal"},
        {240.0f, 0x77, "240"}, {-0.5f, 0xB0, "-0.5"},
    };
    int bad = 0;
    for (const Case& c : cases) {
        uint8_t got = fp8_e4m3_encode(c.x);
        if (got != c.code) {
            if (bad < 4) printf("  %s: got 0x%02x want 0x%02x\n", c.what, got, c.code);
            bad++;
        }
    }
    test_check("fp8.e4m3.hand_cases", bad == 0, "%d of %zu wrong", bad, sizeof(cases) / sizeof(cases[0]));

    // (b2) constants and decode landmarks
    test_check("fp8.e4m3.constants",
               fp8_e4m3_decode(E4M3_MAX_CODE) == E4M3_MAX && fp8_e4m3_decode(0x08) == E4M3_MIN_NORMAL &&
               fp8_e4m3_decode(0x01) == E4M3_MIN_SUBNORMAL && E4M3_MAX == 448.0f &&
               std::isnan(fp8_e4m3_decode(0x7F)) && std::isnan(fp8_e4m3_decode(0xFF)) &&
               fp8_e4m3_decode(0xFE) == -448.0f && f2u(fp8_e4m3_decode(0x80)) == 0x80000000u,
               "448 / 2^-6 / 2^-9 / NaN / -0 landmarks differ");

    // (b3) encode(decode(c)) == c for the 254 non-NaN codes (both zeros included)
    int bad_rt = 0, first_rt = -1;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F) continue;
        if (fp8_e4m3_encode(fp8_e4m3_decode((uint8_t)c)) != c) { bad_rt++; if (first_rt < 0) first_rt = c; }
    }
    test_check("fp8.e4m3.roundtrip_codes", bad_rt == 0, "%d codes, first 0x%02x", bad_rt, first_rt);

    // (b4) decode strictly increasing over 0x00..0x7E; encode non-decreasing in x and
    // sign-symmetric, on a strided sweep of every positive float32 bit pattern up to +Inf
    // (positive float order is bit order) plus a dense sweep of [2^-11, 512)
    bool dec_mono = true;
    for (int c = 0; c < 0x7E; c++) dec_mono &= fp8_e4m3_decode((uint8_t)c) < fp8_e4m3_decode((uint8_t)(c + 1));
    size_t bad_mono = 0, bad_sym = 0;
    uint32_t first_mono = 0;
    auto sweep = [&](uint32_t lo, uint32_t hi, uint32_t step) {
        uint8_t prev = fp8_e4m3_encode(u2f(lo));
        for (uint64_t b = (uint64_t)lo + step; b <= hi; b += step) {
            float x = u2f((uint32_t)b);
            uint8_t c = fp8_e4m3_encode(x);
            if (c < prev) { if (!bad_mono) first_mono = (uint32_t)b; bad_mono++; }
            if (fp8_e4m3_encode(-x) != (c | 0x80)) bad_sym++;
            prev = c;
        }
    };
    sweep(0u, 0x7F800000u, 61u);
    sweep(f2u(0x1p-11f), f2u(512.0f), 1u);
    test_check("fp8.e4m3.monotonic_symmetric", dec_mono && bad_mono == 0 && bad_sym == 0,
               "decode increasing %d, %zu order violations (first x bits 0x%08x), %zu sign asymmetries",
               (int)dec_mono, bad_mono, first_mono, bad_sym);

    // (b5) error bound: for |x| in [2^-6, 448] the decoded value is within half an ulp
    // (2^-4 relative); below 2^-6 within half the subnormal spacing (2^-10 absolute)
    Rng rng;
    rand_init(&rng, 77);
    double worst_rel = 0.0, worst_abs = 0.0;
    for (int i = 0; i < 200000; i++) {
        float x = (float)(ldexp(1.0 + rand_uniform(&rng), -12 + (int)(rand_u64(&rng) % 21)));
        if (x > E4M3_MAX) continue;
        double err = fabs((double)fp8_e4m3_decode(fp8_e4m3_encode(x)) - x);
        if (x >= E4M3_MIN_NORMAL) worst_rel = fmax(worst_rel, err / x);
        else worst_abs = fmax(worst_abs, err);
    }
    test_check("fp8.e4m3.half_ulp_bound", worst_rel <= 0.0625 && worst_abs <= 0x1p-10,
               "worst relative %.4g (bound 2^-4), worst subnormal absolute %.4g (bound 2^-10)",
               worst_rel, worst_abs);
}

static void test_bf16_properties(void) {
    // every bf16 code: decode then encode returns it; NaN codes come back as the canonical 0x7FFF
    int bad = 0, first = -1;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = fp8_bf16_decode((uint16_t)h);
        uint16_t want = ((h & 0x7FFFu) > 0x7F80u) ? BF16_NAN_CODE : (uint16_t)h;
        if (fp8_bf16_encode(x) != want || f2u(x) != h << 16) { bad++; if (first < 0) first = (int)h; }
    }
    test_check("fp8.bf16.roundtrip_all_65536", bad == 0, "%d codes, first 0x%04x", bad, first);

    struct Case { uint32_t x; uint16_t code; const char* what; };
    const Case cases[] = {
        {0x3F808000u, 0x3F80, "tie -> even down"}, {0x3F818000u, 0x3F82, "tie -> even up"},
        {0x3F808001u, 0x3F81, "above tie"}, {0x3F807FFFu, 0x3F80, "below tie"},
        {0x7F7F8000u, 0x7F80, "FLT_MAX-ish tie rounds to +Inf"}, {0x7F800000u, 0x7F80, "+Inf"},
        {0xFF800000u, 0xFF80, "-Inf"}, {0xFFC00000u, 0x7FFF, "-NaN canonical"},
        {0x7F800001u, 0x7FFF, "signalling NaN"}, {0x00018000u, 0x0002, "denormal tie -> even"},
        {0x80000000u, 0x8000, "-0"},
    };
    int bad_c = 0;
    for (const Case& c : cases) {
        uint16_t got = fp8_bf16_encode(u2f(c.x));
        if (got != c.code) {
            if (bad_c < 4) printf("  %s: got 0x%04x want 0x%04x\n", c.what, got, c.code);
            bad_c++;
        }
    }
    test_check("fp8.bf16.hand_cases", bad_c == 0, "%d of %zu wrong", bad_c, sizeof(cases) / sizeof(cases[0]));
}

static void test_bulk(void) {
    const size_t n = 100003;  // odd, so no thread gets an even share
    std::vector<float> x(n), dec(n);
    std::vector<uint8_t> q(n);
    Rng rng;
    rand_init(&rng, 4242);
    for (size_t i = 0; i < n; i++) x[i] = (float)(rand_normal(&rng) * 0.05);
    x[7] = NAN;
    x[8] = INFINITY;
    x[9] = -1e30f;
    const float scales[] = {4096.0f, 0x1p-3f, 3.7f};  // two powers of two and one that is not
    bool enc_ok = true, dec_ok = true;
    for (float s : scales) {
        fp8_e4m3_encode_scaled_cpu(q.data(), x.data(), n, s);
        float inv = 1.0f / s;
        fp8_e4m3_decode_scaled_cpu(dec.data(), q.data(), n, inv);
        for (size_t i = 0; i < n; i++) {
            enc_ok &= q[i] == fp8_e4m3_encode(x[i] * s);
            float want = fp8_e4m3_decode(q[i]) * inv;
            dec_ok &= std::isnan(want) ? std::isnan(dec[i]) : f2u(dec[i]) == f2u(want);
        }
    }
    test_check("fp8.bulk.encode_scaled", enc_ok, "differs from fp8_e4m3_encode(x * scale)");
    test_check("fp8.bulk.decode_scaled", dec_ok, "differs from fp8_e4m3_decode(q) * inv_scale");

    // with a power-of-two scale that maps max|x| just under 448, the round trip keeps 2^-4 relative
    // error on every value that lands in the normal range
    float amax = 0.0f;
    for (size_t i = 10; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = exp2f(floorf(log2f(E4M3_MAX / amax)));
    fp8_e4m3_encode_scaled_cpu(q.data() + 10, x.data() + 10, n - 10, s);
    fp8_e4m3_decode_scaled_cpu(dec.data() + 10, q.data() + 10, n - 10, 1.0f / s);
    double worst = 0.0;
    for (size_t i = 10; i < n; i++)
        if (fabsf(x[i]) * s >= E4M3_MIN_NORMAL) worst = fmax(worst, fabs((double)dec[i] - x[i]) / fabs(x[i]));
    test_check("fp8.bulk.scaled_roundtrip", worst <= 0.0625, "worst relative %.4g", worst);
}

int main(void) {
    test_fixture();
    test_e4m3_properties();
    test_bf16_properties();
    test_bulk();
    return test_exit_code();
}
