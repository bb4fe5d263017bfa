// test_fp8.cpp — the FP8 E4M3 / E5M2 and BF16 codecs (llmc/fp8.h) on the CPU.
//
// (a) against test/fixtures/fp8.fix (ml_dtypes.float8_e4m3fn / float8_e5m2 / bfloat16 with the
//     satfinite and canonical-NaN policy of llmc/fp8.h applied, see
//     test/reference/make_fp8_fixtures.py), for each FP8 format: all 256 decodes bit for bit,
//     the hand-picked inputs (every code, every midpoint and its neighbours, the subnormal and
//     saturation edges, both signs, NaN), 2^20 generated inputs whose codes the fixture stores
//     packed 4 per int32, and the one-combine sum encode(decode(a) + decode(b)) of all 2^16 code
//     pairs (the rounding of a native FP8 SUM, llmc/comm.h); then ~100k BF16 inputs (ties,
//     denormals, Inf, NaN).
// (b) properties that need no oracle: hand-computed codes, encode(decode(c)) == c, monotonicity,
//     sign symmetry, the half-ulp error bound (both FP8 formats), every BF16 code round trip.
// (c) the scaled bulk helpers against the scalar functions.
// Build: g++ -O2 -march=native -std=c++17 -fopenmp -Wall -Wextra test/test_fp8.cpp
//          -o build/test_fp8 -lm
// Run from the repository root.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../llmc/comm.h"
#include "../llmc/fp8.h"
#include "../llmc/rand.h"
#include "fixture.h"
#include "fp8_inputs.h"
#include "test_util.h"

static const char* FIXTURE_PATH = "test/fixtures/fp8.fix";
static const size_t RANDOM_COUNT = (size_t)1 << 20;

// Reports the number of mismatching codes and the first few.
static void check_codes(const std::string& name, Fp8Format f, const float* x, const uint8_t* want, size_t n) {
    size_t bad = 0;
    char first[512] = "";
    int len = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t got = fp8_encode(f, x[i]);
        if (got == want[i]) continue;
        if (bad < 4 && len < 400)
            len += snprintf(first + len, sizeof(first) - len, " [x=%a (0x%08x) got 0x%02x want 0x%02x]",
                            (double)x[i], fp8_test_f2u(x[i]), got, want[i]);
        bad++;
    }
    test_check(name.c_str(), bad == 0, "%zu of %zu mismatch:%s", bad, n, first);
}

// Unpacks 4 codes per int32 word, little endian; false if the tensor does not hold n codes.
static bool unpack_codes(std::vector<uint8_t>* out, const FixtureTensor& t, size_t n) {
    if (t.numel() * 4 != n) return false;
    out->resize(n);
    for (size_t j = 0; j < t.numel(); j++) {
        uint32_t w = (uint32_t)t.i[j];
        for (int b = 0; b < 4; b++) (*out)[4 * j + b] = (uint8_t)(w >> (8 * b));
    }
    return true;
}

// (a1)-(a3) and the pair sums for one FP8 format.
static void test_fixture_format(const Fixture& fx, Fp8Format f) {
    const std::string p = std::string("fp8.") + fp8_format_name(f) + ".", t = fp8_format_name(f) + std::string(".");
    const uint8_t max_code = fp8_format_max_code(f);

    // (a1) every decode, bit for bit (covers -0.0); NaN exactly where the oracle has NaN
    {
        const float* want = fx.f(t + "decode");
        int bad = 0, first = -1;
        for (int c = 0; c < 256; c++) {
            float got = fp8_decode(f, (uint8_t)c);
            bool ok = std::isnan(want[c]) ? std::isnan(got) : fp8_test_f2u(got) == fp8_test_f2u(want[c]);
            if (!ok) { bad++; if (first < 0) first = c; }
        }
        test_check((p + "decode_all_256").c_str(), fx.get(t + "decode").numel() == 256 && bad == 0,
                   "%d codes differ, first 0x%02x", bad, first);
    }

    // (a2) hand-picked inputs
    {
        const FixtureTensor& tx = fx.get(t + "special_x");
        const int32_t* code = fx.i(t + "special_code");
        std::vector<uint8_t> want(tx.numel());
        for (size_t i = 0; i < want.size(); i++) want[i] = (uint8_t)code[i];
        check_codes(p + "special_cases", f, tx.f.data(), want.data(), want.size());
    }

    // (a3) 2^20 generated inputs
    {
        uint64_t seed = (uint64_t)fx.i(t + "random_seed")[0];
        std::vector<float> x;
        int e0, span;
        fp8_test_exponents(f, &e0, &span);
        fp8_test_random_inputs(&x, seed, RANDOM_COUNT, e0, span);
        std::vector<uint8_t> want;
        if (unpack_codes(&want, fx.get(t + "random_code"), RANDOM_COUNT)) {
            check_codes(p + "random_2^20", f, x.data(), want.data(), RANDOM_COUNT);
            // the generator must reach every regime, or the check above proves little
            size_t zero = 0, sub = 0, sat = 0, nan = 0;
            const uint8_t min_normal_code = f == FP8_E5M2 ? 4 : 8;
            for (size_t i = 0; i < RANDOM_COUNT; i++) {
                uint8_t c = want[i] & 0x7F;
                zero += c == 0;
                sub += c > 0 && c < min_normal_code;
                sat += c == max_code;
                nan += c == 0x7F;
            }
            test_check((p + "random_covers_regimes").c_str(), zero > 1000 && sub > 1000 && sat > 1000 && nan > 10,
                       "zero %zu subnormal %zu saturated %zu NaN %zu", zero, sub, sat, nan);
        } else {
            test_check((p + "random_2^20").c_str(), false, "fixture holds %zu packed words, expected %zu",
                       fx.get(t + "random_code").numel(), RANDOM_COUNT / 4);
        }
    }

    // (a4) one combine of a native FP8 SUM for every pair of codes: fp8_sum_codes
    {
        std::vector<uint8_t> want;
        size_t bad = 0;
        int first = -1;
        if (unpack_codes(&want, fx.get(t + "sum_code"), 1u << 16)) {
            for (int k = 0; k < (1 << 16); k++) {
                if (fp8_sum_codes(f, (uint8_t)(k >> 8), (uint8_t)(k & 255)) != want[k]) { bad++; if (first < 0) first = k; }
            }
        } else {
            bad = 1;
        }
        test_check((p + "sum_all_pairs").c_str(), bad == 0, "%zu of 65536 pairs differ, first (0x%02x, 0x%02x)", bad,
                   first >> 8, first & 255);
        // the CPU engine's MPI operator (a lookup table made from fp8_sum_codes) on the same pairs
        std::vector<uint8_t> in(1 << 16), inout(1 << 16);
        for (int k = 0; k < (1 << 16); k++) { in[k] = (uint8_t)(k >> 8); inout[k] = (uint8_t)(k & 255); }
        int len = 1 << 16;
        if (f == FP8_E5M2) comm_fp8_sum_op<FP8_E5M2>(in.data(), inout.data(), &len, NULL);
        else comm_fp8_sum_op<FP8_E4M3>(in.data(), inout.data(), &len, NULL);
        size_t bad_op = want.size() == inout.size() ? 0 : 1;
        for (size_t k = 0; !bad_op && k < inout.size(); k++) bad_op += inout[k] != want[k];
        test_check((p + "mpi_sum_op_all_pairs").c_str(), bad_op == 0, "%zu of 65536 pairs differ", bad_op);
    }
}

static void test_fixture(void) {
    Fixture fx;
    if (!fixture_load(&fx, FIXTURE_PATH)) {
        test_check("fp8.fixture", false, "%s missing or malformed; regenerate it with "
                   "test/reference/make_fp8_fixtures.py", FIXTURE_PATH);
        return;
    }

    test_fixture_format(fx, FP8_E4M3);
    test_fixture_format(fx, FP8_E5M2);

    // (a5) bf16 encode against the oracle, decode as the exact upper half
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
                                    fp8_test_f2u(tx.f[i]), got, (unsigned)code[i]);
                bad++;
            }
            if (fp8_test_f2u(fp8_bf16_decode((uint16_t)code[i])) != (uint32_t)code[i] << 16) bad_dec++;
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
        {NAN, 0x7F, "NaN"}, {fp8_test_u2f(0xFFC00000u), 0x7F, "-NaN (canonical, as CUDA)"},
        {fp8_test_u2f(0x7F800001u), 0x7F, "signalling NaN"}, {fp8_test_u2f(1u), 0x00, "float32 denormal"},
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
}

// (b3)-(b5) for one FP8 format: landmarks, round trips, monotonicity and symmetry, error bound.
static void test_format_properties(Fp8Format f) {
    const std::string p = std::string("fp8.") + fp8_format_name(f) + ".";
    const float top = fp8_format_max(f);
    const uint8_t max_code = fp8_format_max_code(f);
    const bool e5 = f == FP8_E5M2;
    const float min_normal = e5 ? E5M2_MIN_NORMAL : E4M3_MIN_NORMAL, min_sub = e5 ? E5M2_MIN_SUBNORMAL : E4M3_MIN_SUBNORMAL;
    const int mant_bits = e5 ? 2 : 3;

    // (b2) constants and decode landmarks (E5M2 also: ±Inf at 0x7C / 0xFC, NaN at 0x7D..0x7F)
    bool landmarks = fp8_decode(f, max_code) == top && fp8_decode(f, (uint8_t)(1 << mant_bits)) == min_normal &&
                     fp8_decode(f, 0x01) == min_sub && std::isnan(fp8_decode(f, 0x7F)) && std::isnan(fp8_decode(f, 0xFF)) &&
                     fp8_decode(f, (uint8_t)(max_code | 0x80)) == -top && fp8_test_f2u(fp8_decode(f, 0x80)) == 0x80000000u &&
                     ldexpf(1.0f, -(e5 ? 14 : 6)) == min_normal && ldexpf(1.0f, -(e5 ? 16 : 9)) == min_sub &&
                     top == (e5 ? 57344.0f : 448.0f);
    if (e5) landmarks = landmarks && fp8_decode(f, 0x7C) == INFINITY && fp8_decode(f, 0xFC) == -INFINITY &&
                        std::isnan(fp8_decode(f, 0x7D)) && std::isnan(fp8_decode(f, 0x7E));
    test_check((p + "constants").c_str(), landmarks, "max / min normal / min subnormal / Inf / NaN / -0 landmarks differ");

    // (b3) encode(decode(c)) == c for every finite code (both zeros included)
    int bad_rt = 0, first_rt = -1;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) > max_code) continue;
        if (fp8_encode(f, fp8_decode(f, (uint8_t)c)) != c) { bad_rt++; if (first_rt < 0) first_rt = c; }
    }
    test_check((p + "roundtrip_codes").c_str(), bad_rt == 0, "%d codes, first 0x%02x", bad_rt, first_rt);

    // (b4) decode strictly increasing over 0x00..max; encode non-decreasing in x and
    // sign-symmetric, on a strided sweep of every positive float32 bit pattern up to +Inf
    // (positive float order is bit order) plus a dense sweep from below half the smallest
    // subnormal to past the largest finite value
    bool dec_mono = true;
    for (int c = 0; c < max_code; c++) dec_mono &= fp8_decode(f, (uint8_t)c) < fp8_decode(f, (uint8_t)(c + 1));
    size_t bad_mono = 0, bad_sym = 0;
    uint32_t first_mono = 0;
    auto sweep = [&](uint32_t lo, uint32_t hi, uint32_t step) {
        uint8_t prev = fp8_encode(f, fp8_test_u2f(lo));
        for (uint64_t b = (uint64_t)lo + step; b <= hi; b += step) {
            float x = fp8_test_u2f((uint32_t)b);
            uint8_t c = fp8_encode(f, x);
            if (c < prev) { if (!bad_mono) first_mono = (uint32_t)b; bad_mono++; }
            if (fp8_encode(f, -x) != (c | 0x80)) bad_sym++;
            prev = c;
        }
    };
    sweep(0u, 0x7F800000u, 61u);
    if (e5) sweep(fp8_test_f2u(0x1p-18f), fp8_test_f2u(65536.0f), 3u);  // 31 binades: every third pattern
    else sweep(fp8_test_f2u(0x1p-11f), fp8_test_f2u(512.0f), 1u);
    test_check((p + "monotonic_symmetric").c_str(), dec_mono && bad_mono == 0 && bad_sym == 0,
               "decode increasing %d, %zu order violations (first x bits 0x%08x), %zu sign asymmetries",
               (int)dec_mono, bad_mono, first_mono, bad_sym);

    // (b5) error bound: for |x| in [min normal, max] the decoded value is within half an ulp
    // (2^-4 relative for E4M3, 2^-3 for E5M2); below, within half the subnormal spacing
    Rng rng;
    rand_init(&rng, 77);
    double worst_rel = 0.0, worst_abs = 0.0;
    const int e_lo = e5 ? -19 : -12, e_span = e5 ? 36 : 21;
    for (int i = 0; i < 200000; i++) {
        float x = (float)(ldexp(1.0 + rand_uniform(&rng), e_lo + (int)(rand_u64(&rng) % (uint64_t)e_span)));
        if (x > top) continue;
        double err = fabs((double)fp8_decode(f, fp8_encode(f, x)) - x);
        if (x >= min_normal) worst_rel = fmax(worst_rel, err / x);
        else worst_abs = fmax(worst_abs, err);
    }
    const double rel_bound = ldexp(1.0, -(mant_bits + 1)), abs_bound = 0.5 * min_sub;
    test_check((p + "half_ulp_bound").c_str(), worst_rel <= rel_bound && worst_abs <= abs_bound && worst_rel > 0.5 * rel_bound,
               "worst relative %.4g (bound %.4g), worst subnormal absolute %.4g (bound %.4g)",
               worst_rel, rel_bound, worst_abs, abs_bound);
}

static void test_e5m2_hand_cases(void) {
    struct Case { float x; uint8_t code; const char* what; };
    const float inf = INFINITY;
    const Case cases[] = {
        {0.0f, 0x00, "+0"}, {-0.0f, 0x80, "-0"}, {1.0f, 0x3C, "1"}, {-2.0f, 0xC0, "-2"},
        {1.125f, 0x3C, "tie 1+1/8 -> even 1"}, {1.375f, 0x3E, "tie 1+3/8 -> even 1.5"},
        {0x1p-16f, 0x01, "2^-16 smallest subnormal"}, {0x1p-17f, 0x00, "2^-17 tie -> 0"},
        {nextafterf(0x1p-17f, 1.0f), 0x01, "just above 2^-17"}, {0x1.8p-16f, 0x02, "1.5*2^-16 tie -> 2"},
        {0x1p-14f, 0x04, "2^-14 smallest normal"}, {0x1.cp-15f, 0x04, "3.5*2^-16 tie -> 4 (into the normals)"},
        {448.0f, 0x5F, "448 = 1.75*2^8"}, {49152.0f, 0x7A, "49152"}, {57344.0f, 0x7B, "57344"},
        {61439.0f, 0x7B, "61439"}, {61440.0f, 0x7B, "61440 tie (-> Inf unsaturated)"}, {65536.0f, 0x7B, "65536"},
        {FLT_MAX, 0x7B, "FLT_MAX"}, {inf, 0x7B, "+Inf"}, {-inf, 0xFB, "-Inf"},
        {NAN, 0x7F, "NaN"}, {fp8_test_u2f(0xFFC00000u), 0x7F, "-NaN (canonical, as CUDA)"}, {fp8_test_u2f(1u), 0x00, "float32 denormal"},
        {-0.5f, 0xB8, "-0.5"},
    };
    int bad = 0;
    for (const Case& c : cases) {
        uint8_t got = fp8_e5m2_encode(c.x);
        if (got != c.code) {
            if (bad < 4) printf("  %s: got 0x%02x want 0x%02x\n", c.what, got, c.code);
            bad++;
        }
    }
    test_check("fp8.e5m2.hand_cases", bad == 0, "%d of %zu wrong", bad, sizeof(cases) / sizeof(cases[0]));
}

static void test_bf16_properties(void) {
    // every bf16 code: decode then encode returns it; NaN codes come back as the canonical 0x7FFF
    int bad = 0, first = -1;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = fp8_bf16_decode((uint16_t)h);
        uint16_t want = ((h & 0x7FFFu) > 0x7F80u) ? BF16_NAN_CODE : (uint16_t)h;
        if (fp8_bf16_encode(x) != want || fp8_test_f2u(x) != h << 16) { bad++; if (first < 0) first = (int)h; }
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
        uint16_t got = fp8_bf16_encode(fp8_test_u2f(c.x));
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
        fp8_encode_scaled_cpu(FP8_E4M3, q.data(), x.data(), n, s);
        float inv = 1.0f / s;
        fp8_decode_scaled_cpu(FP8_E4M3, dec.data(), q.data(), n, inv);
        for (size_t i = 0; i < n; i++) {
            enc_ok &= q[i] == fp8_e4m3_encode(x[i] * s);
            float want = fp8_e4m3_decode(q[i]) * inv;
            dec_ok &= std::isnan(want) ? std::isnan(dec[i]) : fp8_test_f2u(dec[i]) == fp8_test_f2u(want);
        }
    }
    test_check("fp8.bulk.encode_scaled", enc_ok, "differs from fp8_e4m3_encode(x * scale)");
    test_check("fp8.bulk.decode_scaled", dec_ok, "differs from fp8_e4m3_decode(q) * inv_scale");

    // with a power-of-two scale that maps max|x| just under 448, the round trip keeps 2^-4 relative
    // error on every value that lands in the normal range
    float amax = 0.0f;
    for (size_t i = 10; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = exp2f(floorf(log2f(E4M3_MAX / amax)));
    fp8_encode_scaled_cpu(FP8_E4M3, q.data() + 10, x.data() + 10, n - 10, s);
    fp8_decode_scaled_cpu(FP8_E4M3, dec.data() + 10, q.data() + 10, n - 10, 1.0f / s);
    double worst = 0.0;
    for (size_t i = 10; i < n; i++)
        if (fabsf(x[i]) * s >= E4M3_MIN_NORMAL) worst = fmax(worst, fabs((double)dec[i] - x[i]) / fabs(x[i]));
    test_check("fp8.bulk.scaled_roundtrip", worst <= 0.0625, "worst relative %.4g", worst);
}

// comm_fold in one process (P = 1, no MPI call): V = 5 logical ranks' contributions summed left to
// right in rank order with the kind's rounding at every combine, against that fold written out
// with the codecs checked above; the right-to-left fold differs, so the order is what is tested.
// Between processes (the all-to-all and the all-gather) test_mpi.sh's --virtual-ranks rows check
// the same fold bitwise against N real ranks.
static void test_fold(void) {
    CommGrid grid = {0, 1, MPI_COMM_WORLD};
    const int V = 5;
    const size_t n = 4099;
    Rng rng;
    rand_init(&rng, 7);
    std::vector<std::vector<float>> x(V, std::vector<float>(n));
    for (auto& r : x) for (float& v : r) v = (float)((rand_uniform(&rng) - 0.5) * ldexp(1.0, (int)(rand_uniform(&rng) * 12) - 6));
    std::vector<const void*> in;
    // fp32 and fp64
    {
        for (int v = 0; v < V; v++) in.push_back(x[v].data());
        std::vector<float> out(n), want(n), back(n);
        comm_fold(&grid, COMM_FOLD_F32, in.data(), V, out.data(), n);
        size_t bad = 0, order = 0;
        for (size_t i = 0; i < n; i++) {
            float a = x[0][i], b = x[V - 1][i];
            for (int v = 1; v < V; v++) a = a + x[v][i];
            for (int v = V - 2; v >= 0; v--) b = b + x[v][i];
            bad += memcmp(&a, &out[i], 4) != 0;
            order += a != b;
        }
        test_check("fp8.fold_f32_left_in_rank_order", bad == 0 && order > 0, "%zu of %zu differ; the other order differs at %zu", bad, n, order);
        std::vector<double> d(V);
        for (int v = 0; v < V; v++) d[v] = x[v][0] * 1e-3 + v;
        std::vector<const void*> dp;
        for (int v = 0; v < V; v++) dp.push_back(&d[v]);
        double got = 0.0, w = d[0];
        comm_fold(&grid, COMM_FOLD_F64, dp.data(), V, &got, 1);
        for (int v = 1; v < V; v++) w = w + d[v];
        test_check("fp8.fold_f64_left_in_rank_order", memcmp(&got, &w, 8) == 0, "%.17g vs %.17g", got, w);
    }
    // bf16 and both FP8 formats: codes of the same values
    for (int kind = 0; kind < 3; kind++) {
        const Fp8Format f = kind == 2 ? FP8_E5M2 : FP8_E4M3;
        const char* name = kind == 0 ? "bf16" : kind == 1 ? "e4m3" : "e5m2";
        size_t bad = 0, order = 0;
        if (kind == 0) {
            std::vector<std::vector<uint16_t>> c(V, std::vector<uint16_t>(n));
            for (int v = 0; v < V; v++) for (size_t i = 0; i < n; i++) c[v][i] = fp8_bf16_encode(x[v][i]);
            std::vector<const void*> p;
            for (auto& r : c) p.push_back(r.data());
            std::vector<uint16_t> out(n);
            comm_fold(&grid, COMM_FOLD_BF16, p.data(), V, out.data(), n);
            for (size_t i = 0; i < n; i++) {
                uint16_t a = c[0][i], b = c[V - 1][i];
                for (int v = 1; v < V; v++) a = fp8_bf16_encode(fp8_bf16_decode(a) + fp8_bf16_decode(c[v][i]));
                for (int v = V - 2; v >= 0; v--) b = fp8_bf16_encode(fp8_bf16_decode(b) + fp8_bf16_decode(c[v][i]));
                bad += a != out[i];
                order += a != b;
            }
        } else {
            std::vector<std::vector<uint8_t>> c(V, std::vector<uint8_t>(n));
            for (int v = 0; v < V; v++) for (size_t i = 0; i < n; i++) c[v][i] = fp8_encode(f, x[v][i] * 16.0f);
            std::vector<const void*> p;
            for (auto& r : c) p.push_back(r.data());
            std::vector<uint8_t> out(n);
            comm_fold(&grid, comm_fold_kind_fp8(f), p.data(), V, out.data(), n);
            for (size_t i = 0; i < n; i++) {
                uint8_t a = c[0][i], b = c[V - 1][i];
                for (int v = 1; v < V; v++) a = fp8_sum_codes(f, a, c[v][i]);
                for (int v = V - 2; v >= 0; v--) b = fp8_sum_codes(f, b, c[v][i]);
                bad += a != out[i];
                order += a != b;
            }
        }
        test_check((std::string("fp8.fold_") + name + "_left_in_rank_order").c_str(), bad == 0 && order > 0,
                   "%zu of %zu differ; the other order differs at %zu", bad, n, order);
    }
}

int main(void) {
    test_fixture();
    test_fold();
    test_e4m3_properties();
    test_e5m2_hand_cases();
    test_format_properties(FP8_E4M3);
    test_format_properties(FP8_E5M2);
    test_bf16_properties();
    test_bulk();
    return test_exit_code();
}
