// fp8.h — the FP8 E4M3 and E5M2 and the BF16 codecs used by gradient communication (DESIGN §5), one
// definition for the CPU engine and the CUDA kernels (every scalar function is __host__ __device__
// under nvcc; no CUDA header is needed on the host path).
//
// E4M3 ("e4m3fn", as in CUDA's __NV_E4M3 and ml_dtypes.float8_e4m3fn): 1 sign bit, 4 exponent
// bits with bias 7, 3 mantissa bits. Normal values (exponent field 1..15) are
// 2^(e-7) * (1 + m/8); subnormals (exponent field 0) are m * 2^-9. Largest finite value 448
// (0x7E = S.1111.110), smallest normal 2^-6, smallest subnormal 2^-9. There is no Inf; the only
// NaN codes are S.1111.111 (0x7F, 0xFF).
//
// fp8_e4m3_encode follows CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) (host
// implementation in cuda_fp8.hpp; cvt.rn.satfinite.e4m3x2.f32 on sm_89+ devices). It was checked
// bit for bit against that host implementation on all 2^32 float32 inputs; test/test_fp8_device.cu
// repeats the sweep against the device instruction.
//   - round to nearest, ties to even, subnormals included; |x| <= 2^-10 (half the smallest
//     subnormal, a tie with the even 0) becomes a signed zero, -0.0 -> 0x80;
//   - satfinite: |x| > 448 after rounding becomes ±448 (0x7E / 0xFE). Under plain RNE everything
//     in (448, 464] already rounds to 448 (464 is the tie between 448 and the would-be 480, and
//     448's mantissa 110 is even); everything above 464, ±FLT_MAX and ±Inf clamp to ±448;
//   - NaN of either sign -> 0x7F. The sign of a NaN is not kept: CUDA's conversion canonicalizes
//     NaN (its host path rewrites the input to 0x7FFFFFFF first), so -NaN also gives 0x7F.
//     ml_dtypes would give 0xFF for -NaN and, not saturating, 0x7F (NaN) for |x| > 464; the fixture
//     script applies this policy on top of it.
// The encoder works on the float's bit pattern only (no float arithmetic), so it is exact under
// the device's flush-to-zero modes and for float32 denormal inputs.
//
// E5M2 (as in CUDA's __NV_E5M2 and ml_dtypes.float8_e5m2): 1 sign bit, 5 exponent bits with
// bias 15, 2 mantissa bits, IEEE-like: normal values (exponent field 1..30) are
// 2^(e-15) * (1 + m/4), subnormals m * 2^-16; 0x7C is +Inf, 0x7D..0x7F are NaN. Largest finite
// value 57344 (0x7B = S.11110.11), smallest normal 2^-14, smallest subnormal 2^-16: a range
// 2^7 times wider than E4M3's at half its precision (relative rounding error <= 2^-3, E4M3's
// 2^-4). fp8_e5m2_encode follows __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)
// (cvt.rn.satfinite.e5m2x2.f32 on the device) with the same rules as E4M3: round to nearest
// even, |x| <= 2^-17 becomes a signed zero, everything that rounds past 57344 (|x| >= 61440,
// the tie between 57344 and the would-be 65536 going to the even 65536) and ±Inf become ±57344
// (0x7B / 0xFB), every NaN becomes 0x7F. ml_dtypes would give ±Inf past 61440 and keep the
// sign of NaN; the fixture script applies the engine's policy on top of it, as for E4M3.
// Fp8Format picks one of the two for a whole run (--fp8-format); fp8_encode / fp8_decode /
// fp8_format_max / fp8_format_max_code dispatch on it.
//
// BF16: the upper 16 bits of a float32. fp8_bf16_encode rounds to nearest even (finite values
// beyond the bf16 range become ±Inf, as in IEEE rounding), keeps ±Inf and float32 denormals
// (rounded, not flushed), and turns every NaN into the canonical quiet NaN 0x7FFF, as CUDA's
// __float2bfloat16_rn / cvt.rn.bf16.f32 does (ml_dtypes keeps the sign: 0x7FC0 / 0xFFC0).
//
// Bulk helpers (host only, OpenMP): out (n) = encode(x (n) * scale), out (n) = decode(q (n)) *
// inv_scale; both write (=). With a power-of-two scale (DESIGN §5.1) the scaling is exact.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define FP8_HD __host__ __device__
#else
#define FP8_HD
#endif

// constexpr so that device code can use them too
static constexpr float E4M3_MAX = 448.0f;
static constexpr float E4M3_MIN_NORMAL = 0.015625f;        // 2^-6
static constexpr float E4M3_MIN_SUBNORMAL = 0.001953125f;  // 2^-9
static constexpr uint8_t E4M3_MAX_CODE = 0x7E;             // +448
static constexpr uint8_t E4M3_NAN_CODE = 0x7F;
static constexpr uint16_t BF16_NAN_CODE = 0x7FFF;
static constexpr float E5M2_MAX = 57344.0f;
static constexpr float E5M2_MIN_NORMAL = 6.103515625e-05f;      // 2^-14
static constexpr float E5M2_MIN_SUBNORMAL = 1.52587890625e-05f; // 2^-16
static constexpr uint8_t E5M2_MAX_CODE = 0x7B;                  // +57344
static constexpr uint8_t E5M2_INF_CODE = 0x7C;
static constexpr uint8_t E5M2_NAN_CODE = 0x7F;

// The FP8 format of a run's gradient codes (--fp8-format).
enum Fp8Format { FP8_E4M3 = 0, FP8_E5M2 = 1 };

FP8_HD static inline uint32_t fp8_float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

FP8_HD static inline float fp8_bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// Keeps sig >> shift rounded to nearest even (shift in [1, 31]).
FP8_HD static inline uint32_t fp8_shift_rne(uint32_t sig, uint32_t shift) {
    uint32_t q = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

FP8_HD static inline uint8_t fp8_e4m3_encode(float x) {
    const uint32_t bits_464 = 0x43E80000u;    // 464.0f: the largest |x| that rounds to 448
    const uint32_t bits_min_normal = 0x3C800000u;  // 2^-6
    uint32_t u = fp8_float_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)E4M3_NAN_CODE;  // NaN, sign dropped (CUDA canonical)
    if (a > bits_464) return (uint8_t)(sign | E4M3_MAX_CODE);  // satfinite, Inf included
    uint32_t e = a >> 23;             // float32 biased exponent
    uint32_t mant = a & 0x7FFFFFu;
    uint32_t q;
    if (a >= bits_min_normal) {
        // e in [121, 135]: E4M3 exponent field e - 120; a mantissa carry moves into the exponent,
        // which is the correct next code (and never reaches 0x7F because |x| <= 464)
        q = fp8_shift_rne(((e - 120u) << 23) | mant, 20u);
    } else {
        // subnormal target: code = round(|x| * 2^9) = round(sig * 2^(e - 141)); a float32
        // denormal has e = 0 and no hidden bit but the scale of e = 1
        uint32_t sig = e ? (mant | 0x800000u) : mant;
        uint32_t shift = e ? 141u - e : 140u;
        // shift >= 26 means |x| < 2^-10 (shift 25 is [2^-11, 2^-10), handled by the rounding)
        q = shift > 25u ? 0u : fp8_shift_rne(sig, shift);
    }
    return (uint8_t)(sign | q);
}

FP8_HD static inline float fp8_e4m3_decode(uint8_t code) {
    uint32_t sign = (uint32_t)(code & 0x80u) << 24;
    uint32_t e = (code >> 3) & 0xFu;
    uint32_t m = code & 0x7u;
    if (e == 0xFu && m == 0x7u) return fp8_bits_float(sign | 0x7FC00000u);  // NaN
    if (e == 0u) {
        // m * 2^-9 is a normal float32 (or zero): exact
        float v = (float)m * E4M3_MIN_SUBNORMAL;
        return fp8_bits_float(sign | fp8_float_bits(v));
    }
    return fp8_bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

FP8_HD static inline uint8_t fp8_e5m2_encode(float x) {
    const uint32_t bits_61440 = 0x47700000u;      // 61440.0f: the smallest |x| that rounds past 57344
    const uint32_t bits_min_normal = 0x38800000u; // 2^-14
    uint32_t u = fp8_float_bits(x);
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint8_t)E5M2_NAN_CODE;   // NaN, sign dropped (CUDA canonical)
    if (a >= bits_61440) return (uint8_t)(sign | E5M2_MAX_CODE);  // satfinite, Inf included
    uint32_t e = a >> 23;
    uint32_t mant = a & 0x7FFFFFu;
    uint32_t q;
    if (a >= bits_min_normal) {
        // e in [113, 142]: E5M2 exponent field e - 112; a mantissa carry moves into the exponent
        // and stops at 0x7B because |x| < 61440
        q = fp8_shift_rne(((e - 112u) << 23) | mant, 21u);
    } else {
        // subnormal target: code = round(|x| * 2^16) = round(sig * 2^(e - 134))
        uint32_t sig = e ? (mant | 0x800000u) : mant;
        uint32_t shift = e ? 134u - e : 133u;
        q = shift > 25u ? 0u : fp8_shift_rne(sig, shift);  // shift >= 25: below half of 2^-16
    }
    return (uint8_t)(sign | q);
}

FP8_HD static inline float fp8_e5m2_decode(uint8_t code) {
    uint32_t sign = (uint32_t)(code & 0x80u) << 24;
    uint32_t e = (code >> 2) & 0x1Fu;
    uint32_t m = code & 0x3u;
    if (e == 0x1Fu) return fp8_bits_float(sign | (m ? 0x7FC00000u : 0x7F800000u));  // NaN / Inf
    if (e == 0u) {
        float v = (float)m * E5M2_MIN_SUBNORMAL;  // exact
        return fp8_bits_float(sign | fp8_float_bits(v));
    }
    return fp8_bits_float(sign | ((e + 112u) << 23) | (m << 21));
}

FP8_HD static inline uint8_t fp8_encode(Fp8Format f, float x) { return f == FP8_E5M2 ? fp8_e5m2_encode(x) : fp8_e4m3_encode(x); }
FP8_HD static inline float fp8_decode(Fp8Format f, uint8_t code) { return f == FP8_E5M2 ? fp8_e5m2_decode(code) : fp8_e4m3_decode(code); }
FP8_HD static inline float fp8_format_max(Fp8Format f) { return f == FP8_E5M2 ? E5M2_MAX : E4M3_MAX; }
FP8_HD static inline uint8_t fp8_format_max_code(Fp8Format f) { return f == FP8_E5M2 ? E5M2_MAX_CODE : E4M3_MAX_CODE; }
static inline const char* fp8_format_name(Fp8Format f) { return f == FP8_E5M2 ? "e5m2" : "e4m3"; }

// One combine of a native FP8 SUM reduction: the two codes decoded, added in float32 and rounded
// back to the format (satfinite). NCCL's ncclFloat8e4m3 / ncclFloat8e5m2 + ncclSum round this way
// at every step of its ring or tree; the CPU engine's MPI operator (llmc/comm.h) and dev/emu's
// NCCL apply it in their reduction orders.
FP8_HD static inline uint8_t fp8_sum_codes(Fp8Format f, uint8_t a, uint8_t b) {
    return fp8_encode(f, fp8_decode(f, a) + fp8_decode(f, b));
}

FP8_HD static inline uint16_t fp8_bf16_encode(float x) {
    uint32_t u = fp8_float_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)BF16_NAN_CODE;
    // round to nearest even on the low 16 bits; a carry into the exponent is the right answer
    // (up to Inf for finite values past the bf16 maximum); Inf itself has zero low bits
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

FP8_HD static inline float fp8_bf16_decode(uint16_t h) { return fp8_bits_float((uint32_t)h << 16); }

#ifndef __CUDA_ARCH__
// out (n) = fp8_encode(f, x (n) * scale)
static inline void fp8_encode_scaled_cpu(Fp8Format f, uint8_t* out, const float* x, size_t n, float scale) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = fp8_encode(f, x[i] * scale);
}

// out (n) = fp8_decode(f, q (n)) * inv_scale
static inline void fp8_decode_scaled_cpu(Fp8Format f, float* out, const uint8_t* q, size_t n, float inv_scale) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = fp8_decode(f, q[i]) * inv_scale;
}
#endif
