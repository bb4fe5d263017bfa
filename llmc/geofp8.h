// geofp8.h — the numerical core of GeoFP8 gradient communication (DESIGN §5, §6), host only.
//
// What it defines, in the order a step uses it:
//   1. FP8 scales and quantization (§5.1): geofp8_amax, geofp8_scale_exponent (s = 2^e with
//      e = floor(log2(max/a)) - ceil(log2 N) - 1, max = 448 for E4M3, 57344 for E5M2),
//      geofp8_quantize_ef (q = fp8(s x) in the run's format, optional
//      error-feedback residual x - decode(q)/s), geofp8_dequantize (decode(q_sum)/(s N)), the
//      per-block variants of fp8block (GEOFP8_BLOCK = 512) and the saturation / underflow
//      counts behind the layer-selection score.
//   2. The sketch of A = E[h hᵀ] and the stable Nyström step (§6 "Factor"):
//      geofp8_test_matrix (Ω), geofp8_sketch_accumulate (Y += w hᵀ(hΩ), tr(A) += w Σ‖h‖²),
//      geofp8_nystrom (U, λ, σ² from the all-reduced Y and tr(A)).
//   3. The transform T = U D Uᵀ + c (I - U Uᵀ) (§6 "Transform"): GeoFP8Factor,
//      geofp8_whiten (G T), geofp8_unwhiten (G̃ T⁻¹), geofp8_carry_residual (R T_old⁻¹ T_new);
//      3b. the whitening power: its derivation, geofp8_estimate_q and geofp8_auto_power.
//   4. The two-sided K-FAC ablation: geofp8_kfac_accumulate / _factor / _whiten / _unwhiten.
//   5. The fidelity analysis of the paper's Tables I and II: geofp8_fidelity_roundtrip / _all.
//   6. Layer selection: geofp8_rank_scores, geofp8_select_top.
//
// Shapes: every matrix is row-major fp32 unless said otherwise. A gradient G is (d_out, d_in)
// (the weight layout (out, in)), activations h are (n, d_in), output gradients δ are (n, d_out),
// Ω and Y are (d_in, k) with k = r + GEOFP8_OVERSAMPLE (at most d_in), U is (d_in, r).
//
// The MPI plumbing lives elsewhere. Every function here is a pure function of its arguments
// (no globals, no hidden state), so a caller can: build Ω on every rank from the shared seed,
// accumulate Y and tr(A) locally, SUM all-reduce them, run geofp8_nystrom +
// geofp8_factor_from_nystrom on rank 0, broadcast the packed factor (geofp8_factor_pack), and
// apply the transform on every rank with bitwise the same numbers.
//
// Conventions: outputs are written (=) unless the name says accumulate (+=). Where a function
// takes `float* scratch`, NULL means "allocate internally"; the *_scratch_floats helpers give
// the size for callers that keep a buffer. The whiten / unwhiten / K-FAC transforms may run in
// place (out == G). Precision: large products in fp32 (OpenBLAS sgemm / strsm), every small
// k×k or d×d factorization in double (LAPACKE dpotrf, dsyevd; Ω's QR by hand, see
// geofp8_orthonormalize), reductions in double in a fixed order. Elementwise loops use OpenMP and are deterministic; BLAS results are
// deterministic for a fixed OpenBLAS thread count (1 and 2 threads agree to rounding only).
#pragma once
#include <algorithm>
#include <cassert>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <cblas.h>
#include <lapacke.h>
#include "fp8.h"
#include "rand.h"

// The scalar formulas of the factor (residual variance, coefficients, whitening power) also run
// on the GPU, where geofp8.cuh's Nyström step calls them from a kernel.
#ifdef __CUDACC__
#define GEOFP8_HD __host__ __device__
#else
#define GEOFP8_HD
#endif

// Elements per scale in the fp8block mode (the paper's per-block ablation).
static const int GEOFP8_BLOCK = 512;
// Extra sketch columns beyond the kept rank r: k = r + 8.
static const int GEOFP8_OVERSAMPLE = 8;
// Nyström stabilizing shift ν = 1e-6 ‖Y‖_F: about 10 fp32 ulps of the sketch, so Ωᵀ Y_ν is
// positive definite despite the fp32 rounding of Y, yet far below the eigenvalues we keep.
static constexpr double GEOFP8_NYSTROM_SHIFT = 1e-6;
// Damping ε = 1e-3 tr(A) / d (the low-rank transform and the K-FAC Cholesky factors).
static constexpr double GEOFP8_DAMPING = 1e-3;
// When a Cholesky factorization fails, the shift (Nyström) or damping (K-FAC) is multiplied by
// this much and the factorization retried, at most GEOFP8_MAX_RETRIES times.
static constexpr double GEOFP8_RETRY_GROWTH = 100.0;
static constexpr int GEOFP8_MAX_RETRIES = 3;
// geofp8_scale_exponent's answer for a non-finite amax: every rank skips the step.
static const int GEOFP8_EXP_SKIP = INT_MIN;
// Exponent range of the scale: 2^-149 is the smallest positive float (subnormal), 2^127 the
// largest power of two. Only absurd amax values (> 2^110 or < 2^-118) reach the clamps.
static const int GEOFP8_EXP_MIN = -149;
static const int GEOFP8_EXP_MAX = 127;

// ---------------------------------------------------------------------------------------------
// 1. Scales and quantization (DESIGN §5.1)

// smallest m with 2^m >= n (n >= 1)
static inline int geofp8_ceil_log2(int n) {
    int m = 0;
    while ((1LL << m) < (long long)n) m++;
    return m;
}

// max |x_i| over x (n); +Inf if any element is non-finite (NaN or ±Inf). 0 for n == 0.
static inline float geofp8_amax(const float* x, size_t n) {
    float m = 0.0f;
    int bad = 0;
    #pragma omp parallel for reduction(max : m) reduction(| : bad) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= FLT_MAX)) bad = 1;  // NaN compares false
        else if (a > m) m = a;
    }
    return bad ? INFINITY : m;
}

// Exponent e of the power-of-two scale s = 2^e for a tensor with max magnitude amax that is
// summed over world_size ranks, in format f with largest finite value M (448 E4M3, 57344 E5M2):
//   e = floor(log2(M / amax)) - ceil(log2 N) - 1
// so s·amax <= M/2 / 2^ceil(log2 N) <= M/2 / N and the exact sum of N codes is at most M/2.
// The SUM all-reduce rounds every partial sum back to the format (relative error <= 2^-4 per
// combine in E4M3, 2^-3 in E5M2), so the rounded sum stays <= M/2 (1 + u)^(N-1) <= M (no
// saturation) for N <= 12 in E4M3 and N <= 6 in E5M2; beyond, saturation is possible and must
// be counted.
// floor(log2(M/amax)) is found exactly (ldexp comparisons, no rounded logarithm).
// amax == 0 (the zero tensor) returns 0, so s = 1 and zeros encode to zeros.
// amax non-finite (or negative) returns GEOFP8_EXP_SKIP: the caller skips the step.
// The result is clamped to [GEOFP8_EXP_MIN, GEOFP8_EXP_MAX].
static inline int geofp8_scale_exponent(Fp8Format f, float amax, int world_size) {
    assert(world_size >= 1);
    if (!(amax >= 0.0f) || !(amax <= FLT_MAX)) return GEOFP8_EXP_SKIP;
    if (amax == 0.0f) return 0;
    const double a = (double)amax;  // ldexp of a double is exact over the whole float range
    int e;
    const double top = (double)fp8_format_max(f);
    frexp(top / a, &e);  // M/a in [2^(e-1), 2^e), up to the rounding of the division
    e -= 1;
    while (ldexp(a, e) > top) e--;
    while (ldexp(a, e + 1) <= top) e++;
    e -= geofp8_ceil_log2(world_size) + 1;
    if (e < GEOFP8_EXP_MIN) e = GEOFP8_EXP_MIN;
    if (e > GEOFP8_EXP_MAX) e = GEOFP8_EXP_MAX;
    return e;
}

// s = 2^e (exact; e in [GEOFP8_EXP_MIN, GEOFP8_EXP_MAX])
static inline float geofp8_scale_from_exponent(int e) { return ldexpf(1.0f, e); }

// q (n) = fp8_encode(f, scale * x (n)) (satfinite). If residual is not NULL:
//   residual (n) = x - decode(q) / scale        (the local error-feedback residual)
// x is the error-fed input (G T + R_old for a whitened unit). residual may alias x (each
// element is read before it is written). With a power-of-two scale and no saturation the
// residual is exact (decode(q)/scale is within a factor 2 of x, Sterbenz), so
// decode(q)/scale + residual == x bit for bit; a saturated element rounds once.
static inline void geofp8_quantize_ef(Fp8Format f, uint8_t* q, float* residual, const float* x, size_t n, float scale) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        uint8_t code = fp8_encode(f, scale * v);
        q[i] = code;
        if (residual) residual[i] = v - fp8_decode(f, code) / scale;
    }
}

// out (n) = decode(q (n)) / (scale * world_size): the average of a SUM all-reduce of codes that
// were made with the same scale on every rank. scale * N is exact (power of two times an
// integer < 2^24), so there is one rounding. out is fp32; it may not alias q.
static inline void geofp8_dequantize(Fp8Format f, float* out, const uint8_t* q, size_t n, float scale, int world_size) {
    const float denom = scale * (float)world_size;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = fp8_decode(f, q[i]) / denom;
}

// Number of blocks of `block` elements covering n (the last one may be short).
static inline size_t geofp8_num_blocks(size_t n, int block) { return (n + (size_t)block - 1) / (size_t)block; }

// amax (geofp8_num_blocks(n, block)) = geofp8_amax of each block of x (n).
static inline void geofp8_block_amax(float* amax, const float* x, size_t n, int block) {
    const size_t nb = geofp8_num_blocks(n, block);
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * (size_t)block, i1 = std::min(n, i0 + (size_t)block);
        float m = 0.0f;
        int bad = 0;
        for (size_t i = i0; i < i1; i++) {
            float a = fabsf(x[i]);
            if (!(a <= FLT_MAX)) bad = 1;
            else if (a > m) m = a;
        }
        amax[b] = bad ? INFINITY : m;
    }
}

// scale (nb) = 2^geofp8_scale_exponent(amax (nb), N). Returns the number of blocks whose amax
// is non-finite (their scale is set to 1); a nonzero answer means: skip the step.
static inline size_t geofp8_block_scales(Fp8Format f, float* scale, const float* amax, size_t nb, int world_size) {
    size_t bad = 0;
    for (size_t b = 0; b < nb; b++) {
        int e = geofp8_scale_exponent(f, amax[b], world_size);
        if (e == GEOFP8_EXP_SKIP) { bad++; e = 0; }
        scale[b] = geofp8_scale_from_exponent(e);
    }
    return bad;
}

// geofp8_quantize_ef with one scale per block: scale (geofp8_num_blocks(n, block)).
static inline void geofp8_quantize_ef_block(Fp8Format f, uint8_t* q, float* residual, const float* x, size_t n, int block, const float* scale) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float s = scale[i / (size_t)block];
        float v = x[i];
        uint8_t code = fp8_encode(f, s * v);
        q[i] = code;
        if (residual) residual[i] = v - fp8_decode(f, code) / s;
    }
}

// geofp8_dequantize with one scale per block.
static inline void geofp8_dequantize_block(Fp8Format f, float* out, const uint8_t* q, size_t n, int block, const float* scale, int world_size) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = fp8_decode(f, q[i]) / (scale[i / (size_t)block] * (float)world_size);
}

// Boundary hits of x (n) encoded with `scale`, the raw material of the vulnerability score:
//   *saturated = #{i : |code_i| == max}   (the code sits at the top of the range, 448 or 57344;
//                                           this includes every |scale x| >= max and values
//                                           that round to max)
//   *underflow = #{i : x_i != 0 and code_i == ±0}
//   *nonzero   = #{i : x_i != 0}           (optional, NULL to skip)
// NaN elements count in neither (and as nonzero).
static inline void geofp8_count_saturated_underflow(Fp8Format f, const float* x, size_t n, float scale, long* saturated, long* underflow,
                                                    long* nonzero = NULL) {
    const uint8_t max_code = fp8_format_max_code(f);
    long sat = 0, und = 0, nz = 0;
    #pragma omp parallel for reduction(+ : sat, und, nz) schedule(static)
    for (size_t i = 0; i < n; i++) {
        uint8_t mag = fp8_encode(f, scale * x[i]) & 0x7Fu;
        if (mag == max_code) sat++;
        if (x[i] != 0.0f) {
            nz++;
            if (mag == 0) und++;
        }
    }
    *saturated = sat;
    *underflow = und;
    if (nonzero) *nonzero = nz;
}

// One step's vulnerability of a unit (DESIGN §6 "Layer selection"): the fraction of elements
// whose code saturates plus the fraction of nonzero elements that quantize to zero. The layer
// score is the mean of this over the profiling window.
static inline double geofp8_vulnerability(long saturated, long underflow, long nonzero, size_t n) {
    double v = n ? (double)saturated / (double)n : 0.0;
    if (nonzero > 0) v += (double)underflow / (double)nonzero;
    return v;
}

// ---------------------------------------------------------------------------------------------
// 2. Sketch and Nyström (DESIGN §6 "Factor")

// Sketch width for rank r on a d_in-wide input: k = min(r + 8, d_in).
static inline int geofp8_sketch_width(int r, int d_in) { return std::min(r + GEOFP8_OVERSAMPLE, d_in); }

// x · y (n) in double with four partial sums in a fixed order ((s0 + s1) + (s2 + s3), the tail
// in s0): the same bits whatever the compiler vectorizes, no thread count or BLAS involved.
static inline double geofp8_dot(const double* x, const double* y, int n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i] * y[i];
        s1 += x[i + 1] * y[i + 1];
        s2 += x[i + 2] * y[i + 2];
        s3 += x[i + 3] * y[i + 3];
    }
    for (; i < n; i++) s0 += x[i] * y[i];
    return (s0 + s1) + (s2 + s3);
}

// y (n) -= w x (n)
static inline void geofp8_axpy_neg(double* y, double w, const double* x, int n) {
    for (int i = 0; i < n; i++) y[i] -= w * x[i];
}

// Q of a (m, n) column-major matrix in double (column j at a + j m), m >= n, in place:
// Householder QR with LAPACK's conventions (dgeqr2's reflectors, H_j = I - tau_j v_j v_jᵀ with
// beta = -sign(alpha)·‖x‖, then dorg2r's backward accumulation), so Q equals LAPACKE_dgeqrf +
// dorgqr's up to rounding (test_geofp8 compares them). Every loop runs down a contiguous column
// (geofp8_dot, geofp8_axpy_neg). The norms are plain sums of squares in double, not a scaled
// hypot chain: the entries come from floats (Gaussian draws, a factor's U), |x| <= 3.4e38, so
// their squares (<= 1.2e77, >= 2e-90 for the smallest subnormal) neither overflow nor underflow,
// and reflections keep every entry within its column's norm. No threads, no BLAS: the result
// depends on nothing but the input, so every rank and both engines get bitwise the same Ω
// without a broadcast, and the GPU build needs no LAPACK. Cost 4·m·n² flops: 18 MFLOP at
// (m, n) = (2816, 40).
static inline void geofp8_orthonormalize(double* a, int m, int n) {
    assert(m >= n && n >= 1);
    std::vector<double> tau(n, 0.0);
    auto col = [&](int j) { return a + (size_t)j * m; };
    for (int j = 0; j < n; j++) {  // reflector j zeroes a(j+1:m, j); v = [1; a(j+1:m, j)]
        double* v = col(j) + j + 1;
        const int len = m - j - 1;
        const double alpha = col(j)[j], ss = geofp8_dot(v, v, len);
        if (ss == 0.0) continue;  // tau = 0: H_j = I
        const double beta = -copysign(sqrt(alpha * alpha + ss), alpha);
        tau[j] = (beta - alpha) / beta;
        const double inv = 1.0 / (alpha - beta);
        for (int i = 0; i < len; i++) v[i] *= inv;
        col(j)[j] = beta;
        for (int c = j + 1; c < n; c++) {  // a(j:m, c) -= tau v (vᵀ a(j:m, c))
            double* x = col(c);
            const double w = tau[j] * (x[j] + geofp8_dot(v, x + j + 1, len));
            x[j] -= w;
            geofp8_axpy_neg(x + j + 1, w, v, len);
        }
    }
    for (int j = n - 1; j >= 0; j--) {  // Q = H_0 H_1 ... H_{n-1} applied to I's first n columns
        double* v = col(j) + j + 1;
        const int len = m - j - 1;
        for (int c = j + 1; c < n; c++) {  // a(j, c) is 0 here: v's first entry meets a zero
            double* x = col(c);
            const double w = tau[j] * geofp8_dot(v, x + j + 1, len);
            x[j] = -w;
            geofp8_axpy_neg(x + j + 1, w, v, len);
        }
        for (int i = 0; i < len; i++) v[i] *= -tau[j];
        col(j)[j] = 1.0 - tau[j];
        for (int i = 0; i < j; i++) col(j)[i] = 0.0;
    }
}

// omega (d_in, k) = orthonormal columns (geofp8_orthonormalize):
//   U_prev == NULL: Q of a Gaussian (d_in, k) matrix (first refresh);
//   otherwise:      Q of [U_prev (d_in, r) | Gaussian (d_in, k - r)], whose first r columns
//                   span U_prev exactly, so successive refreshes are a subspace iteration.
// The Gaussian entries come from rand_normal on Rng(seed), drawn row by row (element (i, j) is
// draw i * width + j, width = k or k - r). Requires 1 <= k <= d_in and r <= k when U_prev is
// given. Every rank that passes the same (seed, U_prev) gets bitwise the same Ω. About 4 ms at
// (d_in, k) = (2816, 40) on one core; geofp8_omega.h builds many units' at once, off the step.
static inline void geofp8_test_matrix(float* omega, int d_in, int k, const float* U_prev, int r, uint64_t seed) {
    assert(k >= 1 && k <= d_in);
    const int r0 = U_prev ? r : 0;
    assert(r0 >= 0 && r0 <= k);
    const int w = k - r0;
    std::vector<double> a((size_t)d_in * k);  // column-major: element (i, j) at a[j d_in + i]
    Rng rng;
    rand_init(&rng, seed);
    for (int i = 0; i < d_in; i++) {
        for (int j = 0; j < r0; j++) a[(size_t)j * d_in + i] = (double)U_prev[(size_t)i * r + j];
        for (int j = 0; j < w; j++) a[(size_t)(r0 + j) * d_in + i] = rand_normal(&rng);
    }
    geofp8_orthonormalize(a.data(), d_in, k);
    for (int i = 0; i < d_in; i++)
        for (int j = 0; j < k; j++) omega[(size_t)i * k + j] = (float)a[(size_t)j * d_in + i];
}

// Scratch floats for geofp8_sketch_accumulate: the (n_tokens, k) product hΩ.
static inline size_t geofp8_sketch_scratch_floats(int n_tokens, int k) { return (size_t)n_tokens * k; }

// Accumulates one micro-batch into the sketch of A = E[h hᵀ]:
//   Y (d_in, k) += weight * hᵀ (h Ω)       h (n_tokens, d_in), Ω (d_in, k)
//   *trA        += weight * Σ_t ‖h_t‖²     (double; skipped if trA is NULL)
// weight = 1 / (total tokens of the step over all ranks), so that after the SUM all-reduce
// Y = A Ω and trA = tr(A). The trace sums rows in double, serially in row order.
static inline void geofp8_sketch_accumulate(float* Y, double* trA, const float* h, int n_tokens, int d_in, const float* omega, int k, float weight, float* scratch = NULL) {
    if (n_tokens <= 0) return;
    std::vector<float> own;
    if (!scratch) { own.resize(geofp8_sketch_scratch_floats(n_tokens, k)); scratch = own.data(); }
    float* Z = scratch;  // (n_tokens, k)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n_tokens, k, d_in, 1.0f, h, d_in, omega, k, 0.0f, Z, k);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d_in, k, n_tokens, weight, h, d_in, Z, k, 1.0f, Y, k);
    if (trA) {
        std::vector<double> rows(n_tokens);
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < n_tokens; t++) {
            const float* ht = h + (size_t)t * d_in;
            double s = 0.0;
            for (int j = 0; j < d_in; j++) s += (double)ht[j] * (double)ht[j];
            rows[t] = s;
        }
        double s = 0.0;
        for (int t = 0; t < n_tokens; t++) s += rows[t];
        *trA += (double)weight * s;
    }
}

// σ² = max(trA - Σλ, 0) / (d_in - r); 0 when r == d_in (nothing is left over).
GEOFP8_HD static inline float geofp8_residual_variance(double trA, const float* lambda, int d_in, int r) {
    if (r >= d_in || !std::isfinite(trA)) return 0.0f;
    double s = 0.0;
    for (int i = 0; i < r; i++) s += (double)lambda[i];
    double rest = trA - s;
    return (float)(rest > 0.0 ? rest / (double)(d_in - r) : 0.0);
}

// Stable Nyström approximation A ≈ U diag(λ) Uᵀ from the all-reduced sketch Y = A Ω:
//   ν = 1e-6 ‖Y‖_F;  Y_ν = Y + ν Ω;  C = chol(Ωᵀ Y_ν) (upper, Ωᵀ Y_ν symmetrized first);
//   B = Y_ν C⁻¹ (d_in, k);  BᵀB = V Σ² Vᵀ (dsyevd);  keep the top r:
//   U = B V_r Σ_r⁻¹ (d_in, r),  λ_i = max(σ_i² - ν, 0) (descending),
//   σ² = max(trA - Σλ, 0) / (d_in - r).
// Y, Ω (d_in, k); U (d_in, r), lambda (r), *sigma2 written. All of it in double (the route
// through BᵀB squares B's condition number, but the shift bounds it: U's columns are
// orthonormal to ~1e-10 or better before they are stored as fp32). Requires 1 <= r <= k <= d_in.
// Accuracy: one refresh from a Gaussian Ω, like any one-pass Nyström, underestimates each kept
// λ_i by roughly (the spectral mass beyond the sketch) / k, so the last few of the top r can be
// off by percents on slowly decaying or flat-tailed spectra, and σ² comes out high by the same
// mass. Refreshes with Ω ⊇ U_prev (subspace iteration) remove this: when span(Ω) contains the
// exact top-r eigenvectors, λ is exact and σ² is the mean of the other d_in - r eigenvalues, up
// to rounding and the shift.
// Returns 0 on success; i > 0 if the Cholesky factorization needed i retries, each with the
// shift multiplied by 100 (fp32 noise can make Ωᵀ Y_ν indefinite when A is nearly singular;
// the shift actually used is subtracted from the eigenvalues); -1 if Y or trA is non-finite,
// Y is zero, or every retry failed: then the isotropic model is returned (U = Ω's first r
// columns, λ_i = σ² = max(trA, 0) / d_in), whose transform is a multiple of the identity.
static inline int geofp8_nystrom(float* U, float* lambda, float* sigma2, const float* Y, const float* omega, double trA, int d_in, int k, int r) {
    assert(r >= 1 && r <= k && k <= d_in);
    const size_t dk = (size_t)d_in * k;
    double ss = 0.0;
    for (size_t i = 0; i < dk; i++) ss += (double)Y[i] * (double)Y[i];
    const double normY = sqrt(ss);

    auto fallback = [&]() {
        double iso = std::isfinite(trA) && trA > 0.0 ? trA / d_in : 0.0;
        for (int i = 0; i < d_in; i++)
            for (int j = 0; j < r; j++) U[(size_t)i * r + j] = omega[(size_t)i * k + j];
        for (int j = 0; j < r; j++) lambda[j] = (float)iso;
        *sigma2 = (float)iso;
        return -1;
    };
    if (!std::isfinite(normY) || !std::isfinite(trA) || normY == 0.0) return fallback();

    std::vector<double> Om(dk), Yv(dk), M((size_t)k * k), K((size_t)k * k), w(k);
    for (size_t i = 0; i < dk; i++) Om[i] = (double)omega[i];
    double shift = GEOFP8_NYSTROM_SHIFT * normY;
    int attempt = 0;
    for (;; attempt++) {
        if (attempt > GEOFP8_MAX_RETRIES) return fallback();
        for (size_t i = 0; i < dk; i++) Yv[i] = (double)Y[i] + shift * Om[i];
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, k, d_in, 1.0, Om.data(), k, Yv.data(), k, 0.0, M.data(), k);
        for (int i = 0; i < k; i++)
            for (int j = i + 1; j < k; j++) {
                double s = 0.5 * (M[(size_t)i * k + j] + M[(size_t)j * k + i]);
                M[(size_t)i * k + j] = s;
                M[(size_t)j * k + i] = s;
            }
        if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', k, M.data(), k) == 0) break;
        shift *= GEOFP8_RETRY_GROWTH;
    }
    // B = Y_ν C⁻¹ in place of Y_ν (C upper: M = Cᵀ C, so B Bᵀ = Y_ν M⁻¹ Y_νᵀ)
    cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, d_in, k, 1.0, M.data(), k, Yv.data(), k);
    double* B = Yv.data();
    // BᵀB = V diag(w) Vᵀ, eigenvalues ascending, eigenvectors in the columns of K
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, k, d_in, 1.0, B, k, 0.0, K.data(), k);
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', k, K.data(), k, w.data()) != 0) return fallback();
    // Vs (k, r): the top r eigenvectors, descending, each divided by its singular value, so
    // U = B Vs. A column with σ = 0 (impossible in exact arithmetic: Y_ν has full column rank)
    // becomes 0, which the transform treats as "no special direction".
    std::vector<double> Vs((size_t)k * r), Ud((size_t)d_in * r);
    for (int t = 0; t < r; t++) {
        int j = k - 1 - t;
        double s2 = w[j] > 0.0 ? w[j] : 0.0;
        double inv = s2 > 0.0 ? 1.0 / sqrt(s2) : 0.0;
        for (int i = 0; i < k; i++) Vs[(size_t)i * r + t] = K[(size_t)i * k + j] * inv;
        double lam = s2 - shift;
        lambda[t] = (float)(lam > 0.0 ? lam : 0.0);
    }
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d_in, r, k, 1.0, B, k, Vs.data(), r, 0.0, Ud.data(), r);
    for (size_t i = 0; i < (size_t)d_in * r; i++) U[i] = (float)Ud[i];
    *sigma2 = geofp8_residual_variance(trA, lambda, d_in, r);
    return attempt;
}

// The full eigendecomposition of a symmetric A (d, d) (only its upper triangle is read), in
// double (dsyevd): eigenvalues w ascending, eigenvector j in column j of V (row-major (d, d)),
// and tr = Σ A_ii. The analyses that need several ranks or powers of one A compute it once
// (geofp8_eigen_exact) and take each top r from it (geofp8_eigen_topr). Returns 0, or -1 if
// dsyevd failed.
struct GeoFP8Eigen {
    int d = 0;
    double tr = 0.0;
    std::vector<double> w, V;
};
static inline int geofp8_eigen_exact(GeoFP8Eigen* e, const float* A, int d) {
    e->d = d;
    e->tr = 0.0;
    e->V.assign((size_t)d * d, 0.0);
    e->w.assign(d, 0.0);
    for (int i = 0; i < d; i++) {
        e->tr += (double)A[(size_t)i * d + i];
        for (int j = i; j < d; j++) e->V[(size_t)i * d + j] = (double)A[(size_t)i * d + j];
    }
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', d, e->V.data(), d, e->w.data()) != 0) return -1;
    return 0;
}

// The top r eigenpairs of e, descending (U (d, r), lambda (r), negative rounding clamped to 0)
// and σ² = mean of the other d - r eigenvalues ((tr(A) - Σλ) / (d - r), clamped to 0).
static inline void geofp8_eigen_topr(float* U, float* lambda, float* sigma2, const GeoFP8Eigen& e, int r) {
    const int d = e.d;
    assert(r >= 1 && r <= d);
    for (int t = 0; t < r; t++) {
        int j = d - 1 - t;
        lambda[t] = (float)(e.w[j] > 0.0 ? e.w[j] : 0.0);
        for (int i = 0; i < d; i++) U[(size_t)i * r + t] = (float)e.V[(size_t)i * d + j];
    }
    *sigma2 = geofp8_residual_variance(e.tr, lambda, d, r);
}

// Exact counterpart of geofp8_nystrom from an explicit symmetric A (d, d) (upper triangle): the
// top r eigenpairs and σ² as geofp8_eigen_topr. Used by the fidelity analysis ("exact" low rank)
// and the tests. Returns 0, or -1 if dsyevd failed.
static inline int geofp8_topr_exact(float* U, float* lambda, float* sigma2, const float* A, int d, int r) {
    assert(r >= 1 && r <= d);
    GeoFP8Eigen e;
    if (geofp8_eigen_exact(&e, A, d) != 0) return -1;
    geofp8_eigen_topr(U, lambda, sigma2, e, r);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// 3. The low-rank-plus-isotropic transform (DESIGN §6 "Transform")
//
// T = U D Uᵀ + c (I - U Uᵀ) = A_r^(-1/2) for A_r = U Λ Uᵀ + σ² (I - U Uᵀ), with
// D = diag((λ + ε)^(-1/2)), c = (σ² + ε)^(-1/2), ε = 1e-3 tr(A) / d_in (the defaults; the power
// -1/2 becomes -p/2 and 1e-3 the damping δ with --geofp8-power / --geofp8-damping). T is
// symmetric, so the whitened gradient G T is also G Tᵀ.

struct GeoFP8Factor {
    int d_in = 0, r = 0;
    std::vector<float> U;  // (d_in, r) orthonormal columns (all zero for the identity)
    std::vector<float> D;  // (r) (λ + ε)^(-p/2), p = 1 by default
    float c = 1.0f;        // (σ² + ε)^(-p/2)
    float eps = 0.0f;      // ε = δ tr(A) / d_in (δ = 1e-3 by default)
};

// f = the identity transform (U = 0, D = c = 1): what a unit uses before its first factor.
static inline void geofp8_factor_identity(GeoFP8Factor* f, int d_in, int r) {
    f->d_in = d_in;
    f->r = r;
    f->U.assign((size_t)d_in * r, 0.0f);
    f->D.assign(r, 1.0f);
    f->c = 1.0f;
    f->eps = 0.0f;
}

// (x)^(-p/2) for the transform's coefficients: p = 1 is 1/sqrt(x) exactly as it always was
// (so --geofp8-power 1 is bitwise today's factor), p = 0 is exactly 1 (T = I).
GEOFP8_HD static inline double geofp8_inverse_root(double x, double power) {
    if (power == 1.0) return 1.0 / sqrt(x);
    if (power == 0.0) return 1.0;
    return pow(x, -0.5 * power);
}

// f from a Nyström (or exact) result: U (d_in, r), lambda (r), sigma2 and tr(A), with the
// whitening power p and damping δ (--geofp8-power, --geofp8-damping):
//   ε = δ tr(A) / d_in,  D_i = (λ_i + ε)^(-p/2),  c = (σ² + ε)^(-p/2),
// i.e. T = (A_r + ε I)^(-p/2): p = 1 whitens fully (the paper), p = 0 is the identity (plain
// FP8 with error feedback), p = 1/2 whitens halfway (see geofp8_auto_power). A zero or
// non-finite tr(A) (a unit whose inputs are all zero) gives the identity transform, since
// ε = 0 would make D infinite. Computed in double, stored fp32.
// The coefficients alone: D (r), *c and *eps as above; false (nothing written) for a zero or
// non-finite tr(A), whose transform is the identity.
GEOFP8_HD static inline bool geofp8_factor_coefficients(float* D, float* c, float* eps_out, const float* lambda, float sigma2, double trA, int d_in,
                                                        int r, double power, double damping) {
    if (!(trA > 0.0) || !std::isfinite(trA)) return false;
    const double eps = damping * trA / d_in;
    for (int i = 0; i < r; i++) {
        double l = lambda[i] > 0.0f ? (double)lambda[i] : 0.0;
        D[i] = (float)geofp8_inverse_root(l + eps, power);
    }
    double s2 = sigma2 > 0.0f ? (double)sigma2 : 0.0;
    *c = (float)geofp8_inverse_root(s2 + eps, power);
    *eps_out = (float)eps;
    return true;
}

static inline void geofp8_factor_from_nystrom(GeoFP8Factor* f, const float* U, const float* lambda, float sigma2, double trA, int d_in, int r,
                                              double power = 1.0, double damping = GEOFP8_DAMPING) {
    geofp8_factor_identity(f, d_in, r);
    if (!geofp8_factor_coefficients(f->D.data(), &f->c, &f->eps, lambda, sigma2, trA, d_in, r, power, damping)) return;
    memcpy(f->U.data(), U, (size_t)d_in * r * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// 3b. How strongly to whiten (--geofp8-power auto)
//
// Model. Let A + εI have eigenpairs (μ_j, u_j), j = 1..d (μ_j = λ_j + ε), let the gradient's
// energy along u_j be e_j = ‖G u_j‖², and whiten with T = (A + εI)^(-p/2), so T u_j = μ_j^(-p/2) u_j.
// FP8 with one scale per tensor makes a relative error per element, so the error matrix E of
// the whitened gradient G T has energy κ ‖G T‖² = κ Σ_j e_j μ_j^(-p), and since the error is
// not aligned with A's eigenvectors it spreads evenly over the d input directions. Unwhitening
// multiplies direction j by μ_j^(p/2), so the error that reaches the weights is
//     err(p) = κ (Σ_j e_j μ_j^(-p)) (Σ_j μ_j^p) / d.
// If the gradient's energy follows A's spectrum as e_j ∝ μ_j^q, then err(p) ∝ (Σ a_j)(Σ b_j)
// with a_j = μ_j^(q-p), b_j = μ_j^p, and by Cauchy–Schwarz (Σ a_j)(Σ b_j) >= (Σ sqrt(a_j b_j))² =
// (Σ μ_j^(q/2))², with equality exactly when a_j ∝ b_j, i.e. p = q/2. So:
//   - the best power is p* = q/2 (T = (A + εI)^(-q/4));
//   - full whitening (p = 1) gains over none (p = 0) only when q > 1: at q = 1, err(1) = err(0);
//   - the gain at p* over p = 0 is (Σ μ^(q/2))² / (d Σ μ^q) <= 1, larger the more spread μ is.
// Estimating q. At a refresh we have the top r eigenpairs and σ² (the mean of the other d - r
// eigenvalues) and the gradient G the rank is about to send; e_j = ‖G u_j‖² for the r kept
// directions and e_rest = ‖G‖² - Σ e_j for the other d - r. q is the slope of log e against
// log μ, a least-squares fit over all d directions of the model A_r: the r kept points with
// weight 1 and the residual point (log(σ² + ε), log(e_rest / (d - r))) with weight d - r.
// Then p = clamp(q/2, 0, 1): beyond 1 the transform would amplify the damped small directions
// without bound, and a negative q (energy against the spectrum) means no whitening at all.

// e (r) = ‖G u_j‖² for the columns u_j of U (d_in, r), G (d_out, d_in); *total = ‖G‖². In double
// from an fp32 product P = G U (d_out, r).
static inline void geofp8_direction_energy(double* e, double* total, const float* G, int d_out, int d_in, const float* U, int r) {
    std::vector<float> P((size_t)d_out * r);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d_out, r, d_in, 1.0f, G, d_in, U, r, 0.0f, P.data(), r);
    for (int j = 0; j < r; j++) e[j] = 0.0;
    for (int i = 0; i < d_out; i++)
        for (int j = 0; j < r; j++) e[j] += (double)P[(size_t)i * r + j] * (double)P[(size_t)i * r + j];
    double t = 0.0;
    const size_t n = (size_t)d_out * d_in;
    for (size_t i = 0; i < n; i++) t += (double)G[i] * (double)G[i];
    *total = t;
}

// Point i of geofp8_estimate_q's fit: i < r the kept direction i, i == r the other d_in - r
// directions (energy rest = total - Σ e_j); false when it drops out (log 0).
GEOFP8_HD static inline bool geofp8_q_point(int i, const float* lambda, float sigma2, double eps, const double* e, double rest, int d_in, int r,
                                            double* x, double* y, double* w) {
    if (i < r) {
        const double mu = (double)std::max(lambda[i], 0.0f) + eps;
        if (!(mu > 0.0 && e[i] > 0.0)) return false;
        *x = log(mu), *y = log(e[i]), *w = 1.0;
        return true;
    }
    const double mu_rest = (double)std::max(sigma2, 0.0f) + eps;
    if (!(d_in > r && rest > 0.0 && mu_rest > 0.0)) return false;
    *x = log(mu_rest), *y = log(rest / (d_in - r)), *w = (double)(d_in - r);
    return true;
}

// The exponent q of e_j ∝ μ_j^q (see above) from the kept eigenvalues lambda (r), the residual
// variance sigma2, the damping eps and the energies e (r), total (geofp8_direction_energy).
// Directions with zero energy or eigenvalue drop out of the fit (log 0); with fewer than two
// distinct eigenvalues left, or a non-finite input, q = 0 (whitening cannot help a flat spectrum).
// Two passes over the points (weighted means, then the centred sums), in point order.
GEOFP8_HD static inline double geofp8_estimate_q(const float* lambda, float sigma2, double eps, const double* e, double total, int d_in, int r) {
    double kept = 0.0;
    for (int j = 0; j < r; j++) kept += e[j];
    const double rest = total - kept;
    double sw = 0.0, sx = 0.0, sy = 0.0, x, y, w;
    int points = 0;
    for (int i = 0; i <= r; i++)
        if (geofp8_q_point(i, lambda, sigma2, eps, e, rest, d_in, r, &x, &y, &w)) sw += w, sx += w * x, sy += w * y, points++;
    if (points < 2 || !(sw > 0.0)) return 0.0;
    const double mx = sx / sw, my = sy / sw;
    double sxx = 0.0, sxy = 0.0;
    for (int i = 0; i <= r; i++)
        if (geofp8_q_point(i, lambda, sigma2, eps, e, rest, d_in, r, &x, &y, &w)) sxx += w * (x - mx) * (x - mx), sxy += w * (x - mx) * (y - my);
    // log-eigenvalues closer than 1e-9 (relative 1e-9) are one point: the spectrum is flat
    if (!(sxx > 1e-18 * sw) || !std::isfinite(sxy)) return 0.0;
    return sxy / sxx;
}

// p = clamp(q / 2, 0, 1): the whitening power of --geofp8-power auto.
GEOFP8_HD static inline double geofp8_auto_power(double q) {
    if (!std::isfinite(q)) return 0.0;
    return std::min(1.0, std::max(0.0, 0.5 * q));
}

// --geofp8-power auto for one unit from the gradient's energies e (r) along the factor's
// eigenvectors and its total energy (geofp8_direction_energy), the eigenvalues lambda (r) and
// residual level sigma2 of A, damped by eps = damping tr(A) / d_in: p = clamp(q/2, 0, 1) with q
// from geofp8_estimate_q. Writes q to *q_out if not NULL. Both engines choose through this: the
// CPU from its own energies (geofp8_choose_power), the GPU from the device's.
GEOFP8_HD static inline double geofp8_power_from_energy(const double* e, double total, const float* lambda, float sigma2, int d_in, int r, double eps,
                                              double* q_out) {
    const double q = geofp8_estimate_q(lambda, sigma2, eps, e, total, d_in, r);
    if (q_out) *q_out = q;
    return geofp8_auto_power(q);
}

// The same from the gradient G (d_out, d_in) and the eigenvectors U (d_in, r) on the host.
static inline double geofp8_choose_power(const float* G, int d_out, int d_in, const float* U, const float* lambda, float sigma2, int r,
                                         double eps, double* q_out) {
    std::vector<double> e(r);
    double total = 0.0;
    geofp8_direction_energy(e.data(), &total, G, d_out, d_in, U, r);
    return geofp8_power_from_energy(e.data(), total, lambda, sigma2, d_in, r, eps, q_out);
}

// Packed factor, for the broadcast from rank 0 and for checkpoints:
// [U (d_in*r) | D (r) | c | eps], floats.
static inline size_t geofp8_factor_floats(int d_in, int r) { return (size_t)d_in * r + (size_t)r + 2; }

static inline void geofp8_factor_pack(float* buf, const GeoFP8Factor* f) {
    size_t nu = (size_t)f->d_in * f->r;
    memcpy(buf, f->U.data(), nu * sizeof(float));
    memcpy(buf + nu, f->D.data(), (size_t)f->r * sizeof(float));
    buf[nu + f->r] = f->c;
    buf[nu + f->r + 1] = f->eps;
}

static inline void geofp8_factor_unpack(GeoFP8Factor* f, const float* buf, int d_in, int r) {
    size_t nu = (size_t)d_in * r;
    f->d_in = d_in;
    f->r = r;
    f->U.assign(buf, buf + nu);
    f->D.assign(buf + nu, buf + nu + r);
    f->c = buf[nu + r];
    f->eps = buf[nu + r + 1];
}

// Scratch floats for geofp8_whiten / geofp8_unwhiten on a (d_out, d_in) gradient with rank r:
// the (d_out, r) product G U and the r diagonal coefficients.
static inline size_t geofp8_transform_scratch_floats(int d_out, int r) { return (size_t)d_out * r + (size_t)r; }

// out (d_out, d_in) = alpha G + (G U) diag(beta) Uᵀ, U (d_in, r), beta (r). out may equal G:
// G U is formed first. scratch: at least d_out * r floats.
static inline void geofp8_lowrank_update(float* out, const float* G, int d_out, int d_in, const float* U, int r, float alpha, const float* beta, float* scratch) {
    float* P = scratch;  // (d_out, r)
    if (r > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d_out, r, d_in, 1.0f, G, d_in, U, r, 0.0f, P, r);
    const size_t n = (size_t)d_out * d_in;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = alpha * G[i];
    if (r == 0) return;
    for (int i = 0; i < d_out; i++)
        for (int j = 0; j < r; j++) P[(size_t)i * r + j] *= beta[j];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, d_out, d_in, r, 1.0f, P, r, U, r, 1.0f, out, d_in);
}

// out (d_out, d_in) = G T = c G + (G U)(D - c I) Uᵀ. out may equal G (in place).
// scratch: geofp8_transform_scratch_floats(d_out, f->r) floats, or NULL.
// fp32 note: along U the result c G_U + (D - c) G_U cancels, so the relative rounding error of
// a whiten/unwhiten round trip is about 6e-8 · c / min(D) = 6e-8 · sqrt((λ_1 + ε)/(σ² + ε)),
// at most 6e-8 · sqrt(1000 d_in) because of the damping; far below the FP8 error either way.
static inline void geofp8_whiten(float* out, const float* G, int d_out, int d_in, const GeoFP8Factor* f, float* scratch) {
    assert(f->d_in == d_in);
    const int r = f->r;
    std::vector<float> own;
    if (!scratch) { own.resize(geofp8_transform_scratch_floats(d_out, r)); scratch = own.data(); }
    float* beta = scratch + (size_t)d_out * r;
    for (int j = 0; j < r; j++) beta[j] = (float)((double)f->D[j] - (double)f->c);
    geofp8_lowrank_update(out, G, d_out, d_in, f->U.data(), r, f->c, beta, scratch);
}

// out (d_out, d_in) = Gt T⁻¹ = Gt / c + (Gt U)(D⁻¹ - I / c) Uᵀ. out may equal Gt (in place).
// scratch as for geofp8_whiten.
static inline void geofp8_unwhiten(float* out, const float* Gt, int d_out, int d_in, const GeoFP8Factor* f, float* scratch) {
    assert(f->d_in == d_in);
    const int r = f->r;
    std::vector<float> own;
    if (!scratch) { own.resize(geofp8_transform_scratch_floats(d_out, r)); scratch = own.data(); }
    float* beta = scratch + (size_t)d_out * r;
    const double inv_c = 1.0 / (double)f->c;
    for (int j = 0; j < r; j++) beta[j] = (float)(1.0 / (double)f->D[j] - inv_c);
    geofp8_lowrank_update(out, Gt, d_out, d_in, f->U.data(), r, (float)inv_c, beta, scratch);
}

// At a refresh, carries the error-feedback buffer R (d_out, d_in) into the new coordinates, in
// place: R <- R T_old⁻¹ T_new (the residual is a whitened-space quantity; this keeps the
// Euclidean error R T_old⁻¹ it stands for). scratch: geofp8_transform_scratch_floats(d_out,
// max(r_old, r_new)) floats, or NULL.
static inline void geofp8_carry_residual(float* R, int d_out, int d_in, const GeoFP8Factor* f_old, const GeoFP8Factor* f_new, float* scratch) {
    geofp8_unwhiten(R, R, d_out, d_in, f_old, scratch);
    geofp8_whiten(R, R, d_out, d_in, f_new, scratch);
}

// ---------------------------------------------------------------------------------------------
// 4. Two-sided K-FAC ablation (DESIGN §6 "kfac")
//
// A = E[h hᵀ] (d_in, d_in) and G = E[δ δᵀ] (d_out, d_out); both are accumulated with
// geofp8_kfac_accumulate (h for A, δ for G). Whiten: L_G⁻¹ G L_A⁻ᵀ; unwhiten: L_G X L_Aᵀ.

// Upper triangle (j >= i, row-major) of S (d, d) += weight * xᵀ x, x (n, d). The lower triangle
// is never written or read by the K-FAC functions (ssyrk: half the flops of a full product).
static inline void geofp8_kfac_accumulate(float* S, const float* x, int n, int d, float weight) {
    if (n <= 0) return;
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, n, weight, x, d, 1.0f, S, d);
}

// L (d, d) = block-diagonal lower Cholesky factor of sym(S) + ε I, ε = 1e-3 tr(S) / d, using
// only the diagonal blocks of size `block` (the last one may be short; everything outside the
// blocks, and the upper triangle of L, is 0). block >= d: full Cholesky (K-FAC, input_full);
// block = 1: diag(sqrt(S_ii + ε)) (diag_A). Reads the upper triangle of S. In double.
// Returns 0, i > 0 after i retries of a failed block with ε multiplied by 100, or -1 (and
// L = I, the identity transform) if tr(S) is zero or non-finite or every retry failed.
static inline int geofp8_kfac_factor_block(float* L, const float* S, int d, int block) {
    const size_t dd = (size_t)d * d;
    memset(L, 0, dd * sizeof(float));
    auto identity = [&]() {
        memset(L, 0, dd * sizeof(float));
        for (int i = 0; i < d; i++) L[(size_t)i * d + i] = 1.0f;
        return -1;
    };
    double tr = 0.0;
    for (int i = 0; i < d; i++) tr += (double)S[(size_t)i * d + i];
    if (!(tr > 0.0) || !std::isfinite(tr)) return identity();
    if (block > d) block = d;
    const double eps0 = GEOFP8_DAMPING * tr / d;
    int retries = 0;
    std::vector<double> a((size_t)block * block);
    for (int b0 = 0; b0 < d; b0 += block) {
        const int m = std::min(block, d - b0);
        double eps = eps0;
        for (int attempt = 0;; attempt++) {
            if (attempt > GEOFP8_MAX_RETRIES) return identity();
            // lower triangle of the block from the upper triangle of S
            for (int i = 0; i < m; i++)
                for (int j = 0; j <= i; j++) a[(size_t)i * m + j] = (double)S[(size_t)(b0 + j) * d + (b0 + i)];
            for (int i = 0; i < m; i++) a[(size_t)i * m + i] += eps;
            if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', m, a.data(), m) == 0) break;
            eps *= GEOFP8_RETRY_GROWTH;
            retries++;
        }
        for (int i = 0; i < m; i++)
            for (int j = 0; j <= i; j++) L[(size_t)(b0 + i) * d + (b0 + j)] = (float)a[(size_t)i * m + j];
    }
    return retries;
}

// L (d, d) = chol(sym(S) + ε I), lower; see geofp8_kfac_factor_block.
static inline int geofp8_kfac_factor(float* L, const float* S, int d) { return geofp8_kfac_factor_block(L, S, d, d); }

// out (d_out, d_in) = LG⁻¹ G LA⁻ᵀ; LG (d_out, d_out) and LA (d_in, d_in) lower triangular,
// either may be NULL (that side is skipped: output-side or input-side only). out may equal G.
static inline void geofp8_kfac_whiten(float* out, const float* G, int d_out, int d_in, const float* LG, const float* LA) {
    if (out != G) memcpy(out, G, (size_t)d_out * d_in * sizeof(float));
    if (LG) cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, d_out, d_in, 1.0f, LG, d_out, out, d_in);
    if (LA) cblas_strsm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, d_out, d_in, 1.0f, LA, d_in, out, d_in);
}

// out (d_out, d_in) = LG Gt LAᵀ (the inverse of geofp8_kfac_whiten). out may equal Gt.
static inline void geofp8_kfac_unwhiten(float* out, const float* Gt, int d_out, int d_in, const float* LG, const float* LA) {
    if (out != Gt) memcpy(out, Gt, (size_t)d_out * d_in * sizeof(float));
    if (LG) cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, d_out, d_in, 1.0f, LG, d_out, out, d_in);
    if (LA) cblas_strmm(CblasRowMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, d_out, d_in, 1.0f, LA, d_in, out, d_in);
}

// ---------------------------------------------------------------------------------------------
// 5. Fidelity analysis (the paper's Tables I and II; DESIGN §6 "Fidelity analysis")

typedef struct {
    double rel_l2;   // ‖ĝ - g‖₂ / ‖g‖₂
    double cos;      // <ĝ, g> / (‖ĝ‖₂ ‖g‖₂)
    double max_err;  // ‖ĝ - g‖∞
    double mse;      // ‖ĝ - g‖₂² / n
    double slope;    // <ĝ, g> / ‖g‖₂²: the regression of ĝ onto g through the origin (below 1: ĝ shrinks g)
} GeoFP8Fidelity;

// The methods, in the order of the paper's tables.
static const char* const GEOFP8_FIDELITY_METHODS[] = {
    "euclidean", "output_side", "input_full", "kfac", "diag_A", "block_A_32", "block_A_64",
    "block_A_128", "lowrank_A_8", "lowrank_A_16", "lowrank_A_32"};
static const int GEOFP8_FIDELITY_NUM_METHODS = 11;

// m = the four metrics of ghat against the reference g (n), in double, serially (fixed order).
static inline void geofp8_fidelity_metrics(GeoFP8Fidelity* m, const float* ghat, const float* g, size_t n) {
    double ee = 0.0, gg = 0.0, hh = 0.0, hg = 0.0, mx = 0.0;
    for (size_t i = 0; i < n; i++) {
        double a = ghat[i], b = g[i], e = a - b;
        ee += e * e;
        gg += b * b;
        hh += a * a;
        hg += a * b;
        if (!(fabs(e) <= mx)) mx = fabs(e);  // NaN propagates
    }
    m->rel_l2 = sqrt(ee) / sqrt(gg);
    m->cos = hg / (sqrt(hh) * sqrt(gg));
    m->max_err = mx;
    m->mse = n ? ee / (double)n : 0.0;
    m->slope = hg / gg;
}

// out (n) = decode(encode(s x)) / s in format f with one per-tensor power-of-two scale for one
// rank (geofp8_scale_exponent(f, amax, 1)): a single-rank FP8 round trip. out may equal x. A
// non-finite x gives an all-NaN out.
static inline void geofp8_fp8_roundtrip(Fp8Format f, float* out, const float* x, size_t n) {
    int e = geofp8_scale_exponent(f, geofp8_amax(x, n), 1);
    if (e == GEOFP8_EXP_SKIP) {
        for (size_t i = 0; i < n; i++) out[i] = NAN;
        return;
    }
    const float s = geofp8_scale_from_exponent(e);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = fp8_decode(f, fp8_encode(f, s * x[i])) / s;
}

// A low-rank (or full symmetric) method name of the fidelity analysis:
//   lowrank_A_<r>[_p<p>|_pauto][_d<δ>][_it<K>]    rank r, power p (1), damping δ (1e-3), K sketch
//                                                 refreshes on the batch (1; K > 1: subspace iteration)
//   sym_A[_p<p>|_pauto][_d<δ>]                    the full symmetric (A + εI)^(-p/2): r = d_in, exact
// Returns false for anything else (or r outside [1, d_in], p outside [0, 2], δ <= 0, K < 1).
struct GeoFP8LowrankSpec {
    int r = 0, refreshes = 1;
    bool sym = false;
    double power = 1.0, damping = GEOFP8_DAMPING;  // power < 0: auto
};
static inline bool geofp8_parse_lowrank(const std::string& m, int d_in, GeoFP8LowrankSpec* s) {
    *s = GeoFP8LowrankSpec();
    size_t pos;
    if (m.rfind("sym_A", 0) == 0) {
        s->sym = true;
        s->r = d_in;
        pos = 5;
    } else if (m.rfind("lowrank_A_", 0) == 0) {
        char* end = NULL;
        long r = strtol(m.c_str() + 10, &end, 10);
        if (end == m.c_str() + 10 || r < 1 || r > d_in) return false;
        s->r = (int)r;
        pos = (size_t)(end - m.c_str());
    } else {
        return false;
    }
    while (pos < m.size()) {
        if (m[pos] != '_') return false;
        size_t next = m.find('_', pos + 1);
        std::string tok = m.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
        pos = next == std::string::npos ? m.size() : next;
        char* end = NULL;
        if (tok == "pauto") { s->power = -1.0; continue; }
        if (tok.size() < 2) return false;
        double v = strtod(tok.c_str() + (tok[0] == 'i' ? 2 : 1), &end);
        if (*end != '\0' || !std::isfinite(v)) return false;
        if (tok[0] == 'p' && v >= 0.0 && v <= 2.0) s->power = v;
        else if (tok[0] == 'd' && v > 0.0) s->damping = v;
        else if (tok.rfind("it", 0) == 0 && !s->sym && v >= 1.0 && v == floor(v)) s->refreshes = (int)v;
        else return false;
    }
    return true;
}

// The transform T of a low-rank or symmetric method (spec, geofp8_parse_lowrank) for a unit with
// gradient G (d_out, d_in): from the exact top r eigenpairs of A (d_in, d_in, upper triangle of
// E[hhᵀ]) when exact or spec.sym, else from spec.refreshes sketch refreshes of the activations h
// (n, d_in) (the first from a Gaussian Ω drawn from seed, each further one with Ω ⊇ the previous
// U: subspace iteration, the deployed path); power auto takes q from G (geofp8_choose_power).
// eig, if not NULL, is A's eigendecomposition (geofp8_eigen_exact), used instead of computing it
// again (same result bit for bit).
static inline void geofp8_spec_factor(GeoFP8Factor* f, const GeoFP8LowrankSpec& spec, const float* A, const float* h, int n, int d_in,
                                      const float* G, int d_out, int exact, uint64_t seed, const GeoFP8Eigen* eig = NULL) {
    const int r = spec.r;
    double tr = 0.0;
    for (int i = 0; i < d_in; i++) tr += (double)A[(size_t)i * d_in + i];
    std::vector<float> U((size_t)d_in * r), lam(r);
    float s2 = 0.0f;
    if (exact || spec.sym) {
        if (eig) {
            assert(eig->d == d_in);
            geofp8_eigen_topr(U.data(), lam.data(), &s2, *eig, r);
        } else {
            geofp8_topr_exact(U.data(), lam.data(), &s2, A, d_in, r);
        }
    } else {
        const int k = geofp8_sketch_width(r, d_in);
        for (int it = 0; it < spec.refreshes; it++) {
            std::vector<float> om((size_t)d_in * k), Y((size_t)d_in * k, 0.0f);
            geofp8_test_matrix(om.data(), d_in, k, it ? U.data() : NULL, r, seed + (uint64_t)it);
            double trs = 0.0;
            geofp8_sketch_accumulate(Y.data(), &trs, h, n, d_in, om.data(), k, 1.0f / (float)n);
            geofp8_nystrom(U.data(), lam.data(), &s2, Y.data(), om.data(), trs, d_in, k, r);
            tr = trs;
        }
    }
    double power = spec.power;
    if (power < 0.0) power = geofp8_choose_power(G, d_out, d_in, U.data(), lam.data(), s2, r, spec.damping * tr / d_in, NULL);
    geofp8_factor_from_nystrom(f, U.data(), lam.data(), s2, tr, d_in, r, power, spec.damping);
}

// One method of the fidelity analysis on precomputed statistics:
// A (d_in, d_in) and Gs (d_out, d_out) upper triangles of E[hhᵀ] and E[δδᵀ] (Gs may be NULL
// unless the method is output_side or kfac); eig, if not NULL, A's eigendecomposition for the
// exact low-rank and symmetric methods (geofp8_spec_factor). Returns 0, or -1 for an unknown
// method name.
static inline int geofp8_fidelity_method_stats(GeoFP8Fidelity* out, const char* method, const float* G, int d_out, int d_in,
                                               const float* A, const float* Gs, const float* h, int n, int lowrank_exact, uint64_t seed,
                                               Fp8Format fmt, const GeoFP8Eigen* eig = NULL) {
    const std::string m(method);
    const size_t nn = (size_t)d_out * d_in;
    std::vector<float> x(nn);
    if (m == "euclidean") {
        geofp8_fp8_roundtrip(fmt, x.data(), G, nn);
    } else if (m == "output_side" || m == "kfac" || m == "input_full" || m == "diag_A" || m.rfind("block_A_", 0) == 0) {
        std::vector<float> LA, LG;
        if (m == "output_side" || m == "kfac") {
            if (!Gs) return -1;
            LG.resize((size_t)d_out * d_out);
            geofp8_kfac_factor(LG.data(), Gs, d_out);
        }
        if (m != "output_side") {
            int block = d_in;
            if (m == "diag_A") block = 1;
            else if (m.rfind("block_A_", 0) == 0) block = atoi(m.c_str() + 8);
            if (block < 1) return -1;
            LA.resize((size_t)d_in * d_in);
            geofp8_kfac_factor_block(LA.data(), A, d_in, block);
        }
        const float* lg = LG.empty() ? NULL : LG.data();
        const float* la = LA.empty() ? NULL : LA.data();
        geofp8_kfac_whiten(x.data(), G, d_out, d_in, lg, la);
        geofp8_fp8_roundtrip(fmt, x.data(), x.data(), nn);
        geofp8_kfac_unwhiten(x.data(), x.data(), d_out, d_in, lg, la);
    } else if (m.rfind("lowrank_A_", 0) == 0 || m.rfind("sym_A", 0) == 0) {
        GeoFP8LowrankSpec spec;
        if (!geofp8_parse_lowrank(m, d_in, &spec)) return -1;
        GeoFP8Factor f;
        geofp8_spec_factor(&f, spec, A, h, n, d_in, G, d_out, lowrank_exact, seed, eig);
        geofp8_whiten(x.data(), G, d_out, d_in, &f, NULL);
        geofp8_fp8_roundtrip(fmt, x.data(), x.data(), nn);
        geofp8_unwhiten(x.data(), x.data(), d_out, d_in, &f, NULL);
    } else {
        return -1;
    }
    geofp8_fidelity_metrics(out, x.data(), G, nn);
    return 0;
}

// One-step FP8 round trip of the gradient G (d_out, d_in) in the coordinates of `method` (one
// of GEOFP8_FIDELITY_METHODS), mapped back and compared with G:
//   euclidean    FP8(G)
//   output_side  L_G FP8(L_G⁻¹ G)                  L_G = chol(E[δδᵀ] + ε I)
//   input_full   FP8(G L_A⁻ᵀ) L_Aᵀ                 L_A = chol(E[hhᵀ] + ε I)
//   kfac         L_G FP8(L_G⁻¹ G L_A⁻ᵀ) L_Aᵀ
//   diag_A       as input_full with diag(A); block_A_b with the diagonal b×b blocks of A
//   lowrank_A_r  FP8(G T) T⁻¹ with the rank-r transform of §6: from one sketch refresh of this
//                batch (Ω from `seed`, geofp8_nystrom) or, if lowrank_exact, from the exact top r
//                eigenpairs of A (geofp8_topr_exact); suffixes set the power, damping and number
//                of refreshes (geofp8_parse_lowrank)
//   sym_A        FP8(G T) T⁻¹ with the full symmetric T = (A + εI)^(-p/2) (suffixes as above)
// h (n, d_in) and delta (n, d_out) are the batch's activations and output gradients (delta may
// be NULL unless output_side or kfac); A = hᵀh / n, E[δδᵀ] = δᵀδ / n, ε = 1e-3 tr / d. The FP8
// format is fmt, its scale one per-tensor power of two, geofp8_scale_exponent(fmt, amax, 1).
// Returns 0, or -1 for an
// unknown method. To run every method on one gradient use geofp8_fidelity_all, which forms A
// and E[δδᵀ] once.
static inline int geofp8_fidelity_roundtrip(GeoFP8Fidelity* out, const char* method, const float* G, int d_out, int d_in,
                                            const float* h, const float* delta, int n, int lowrank_exact, uint64_t seed,
                                            Fp8Format fmt) {
    const std::string m(method);
    std::vector<float> A((size_t)d_in * d_in, 0.0f), Gs;
    geofp8_kfac_accumulate(A.data(), h, n, d_in, 1.0f / (float)n);
    if ((m == "output_side" || m == "kfac") && delta) {
        Gs.assign((size_t)d_out * d_out, 0.0f);
        geofp8_kfac_accumulate(Gs.data(), delta, n, d_out, 1.0f / (float)n);
    }
    return geofp8_fidelity_method_stats(out, method, G, d_out, d_in, A.data(), Gs.empty() ? NULL : Gs.data(), h, n, lowrank_exact, seed, fmt);
}

// out (GEOFP8_FIDELITY_NUM_METHODS), in the order of GEOFP8_FIDELITY_METHODS. delta may be NULL:
// then output_side and kfac are NaN. Methods that need more columns than d_in (block_A_128 on a
// narrow unit) degrade gracefully (a block wider than d_in is the full A; lowrank r > d_in is NaN).
static inline void geofp8_fidelity_all(GeoFP8Fidelity* out, const float* G, int d_out, int d_in, const float* h, const float* delta, int n,
                                       int lowrank_exact, uint64_t seed, Fp8Format fmt) {
    std::vector<float> A((size_t)d_in * d_in, 0.0f), Gs;
    geofp8_kfac_accumulate(A.data(), h, n, d_in, 1.0f / (float)n);
    if (delta) {
        Gs.assign((size_t)d_out * d_out, 0.0f);
        geofp8_kfac_accumulate(Gs.data(), delta, n, d_out, 1.0f / (float)n);
    }
    for (int i = 0; i < GEOFP8_FIDELITY_NUM_METHODS; i++) {
        if (geofp8_fidelity_method_stats(&out[i], GEOFP8_FIDELITY_METHODS[i], G, d_out, d_in, A.data(), Gs.empty() ? NULL : Gs.data(), h, n,
                                         lowrank_exact, seed, fmt) != 0)
            out[i].rel_l2 = out[i].cos = out[i].max_err = out[i].mse = NAN;
    }
}

// N-rank reductions of one tensor for the fidelity analysis (./build/fidelity --ranks): G holds
// the N ranks' gradients (N pointers to n floats), out (n) gets the average the mode hands every
// rank, the way gradcomm_finish computes it with N ranks on one step (no residual from earlier
// steps). Partial sums combine in rank order 0, 1, ..., N-1, as the CPU engine's MPI operator
// and dev/emu's NCCL do; NCCL's ring starts each chunk at another rank, which changes which
// partial sums round, not how coarsely. Each returns false (out untouched) if a gradient is not
// finite.

// native fp8: one scale from the amax over ranks with the N-rank headroom
// (geofp8_scale_exponent(f, amax, N)), every rank's codes, the SUM rounding to f at every
// combine (fp8_sum_codes), decode / (s N). With N = 1 this is geofp8_fp8_roundtrip.
static inline bool geofp8_reduce_native_ranks(Fp8Format f, float* out, const float* const* G, int N, size_t n) {
    float amax = 0.0f;
    for (int r = 0; r < N; r++) amax = std::max(amax, geofp8_amax(G[r], n));  // Inf for a non-finite one
    const int e = geofp8_scale_exponent(f, amax, N);
    if (e == GEOFP8_EXP_SKIP) return false;
    const float s = geofp8_scale_from_exponent(e);
    std::vector<uint8_t> acc(n), q(n);
    geofp8_quantize_ef(f, acc.data(), NULL, G[0], n, s);
    for (int r = 1; r < N; r++) {
        geofp8_quantize_ef(f, q.data(), NULL, G[r], n, s);
        for (size_t i = 0; i < n; i++) acc[i] = fp8_sum_codes(f, q[i], acc[i]);
    }
    geofp8_dequantize(f, out, acc.data(), n, s, N);
    return true;
}

// twophase (gradcomm_twophase with the tensor inside one shard): every rank's codes with its own
// one-rank scale, decoded and summed in fp32 in rank order, re-quantized with the sum's one-rank
// scale, decode / (s N).
static inline bool geofp8_reduce_twophase_ranks(Fp8Format f, float* out, const float* const* G, int N, size_t n) {
    std::vector<float> sum(n, 0.0f);
    std::vector<uint8_t> q(n);
    for (int r = 0; r < N; r++) {
        const int e = geofp8_scale_exponent(f, geofp8_amax(G[r], n), 1);
        if (e == GEOFP8_EXP_SKIP) return false;
        const float s = geofp8_scale_from_exponent(e);
        geofp8_quantize_ef(f, q.data(), NULL, G[r], n, s);
        for (size_t i = 0; i < n; i++) sum[i] += fp8_decode(f, q[i]) / s;
    }
    int e = geofp8_scale_exponent(f, geofp8_amax(sum.data(), n), 1);
    if (e == GEOFP8_EXP_SKIP) e = 0;  // cannot happen: every input was finite
    const float s = geofp8_scale_from_exponent(e);
    geofp8_quantize_ef(f, q.data(), NULL, sum.data(), n, s);
    geofp8_dequantize(f, out, q.data(), n, s, N);
    return true;
}

// bf16: every rank's bf16 codes, the SUM rounding to bf16 at every combine, decode / N.
static inline bool geofp8_reduce_bf16_ranks(float* out, const float* const* G, int N, size_t n) {
    for (int r = 0; r < N; r++)
        if (!(geofp8_amax(G[r], n) <= FLT_MAX)) return false;
    std::vector<uint16_t> acc(n);
    for (size_t i = 0; i < n; i++) acc[i] = fp8_bf16_encode(G[0][i]);
    for (int r = 1; r < N; r++)
        for (size_t i = 0; i < n; i++) acc[i] = fp8_bf16_encode(fp8_bf16_decode(fp8_bf16_encode(G[r][i])) + fp8_bf16_decode(acc[i]));
    for (size_t i = 0; i < n; i++) out[i] = fp8_bf16_decode(acc[i]) / (float)N;
    return true;
}

// geofp8 on one unit: X_r = G_r T on every rank, native fp8 of the X_r, the average mapped back
// with T⁻¹ (one step: a zero error-feedback residual).
static inline bool geofp8_reduce_geo_ranks(Fp8Format f, float* out, const float* const* G, int N, int d_out, int d_in,
                                           const GeoFP8Factor* T) {
    const size_t n = (size_t)d_out * d_in;
    std::vector<std::vector<float>> X(N, std::vector<float>(n));
    std::vector<const float*> xp(N);
    for (int r = 0; r < N; r++) {
        geofp8_whiten(X[r].data(), G[r], d_out, d_in, T, NULL);
        xp[r] = X[r].data();
    }
    if (!geofp8_reduce_native_ranks(f, out, xp.data(), N, n)) return false;
    geofp8_unwhiten(out, out, d_out, d_in, T, NULL);
    return true;
}

// ---------------------------------------------------------------------------------------------
// 6. Layer selection (DESIGN §6 "Layer selection")

// All indices of scores, by score descending. Ties keep the lower index first (stable sort);
// NaN scores go last.
static inline std::vector<int> geofp8_rank_scores(const std::vector<double>& scores) {
    std::vector<int> idx(scores.size());
    for (size_t i = 0; i < idx.size(); i++) idx[i] = (int)i;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
        double x = scores[a], y = scores[b];
        if (std::isnan(x)) return false;
        if (std::isnan(y)) return true;
        return x > y;
    });
    return idx;
}

// The selected units: the first k indices of geofp8_rank_scores(scores), where
//   k = min(top_k, n)                    if top_k > 0;
//   k = (position of the largest drop) otherwise: with sorted scores s_0 >= s_1 >= ..., the
//       largest s_i - s_(i+1) over i in [0, n-2] gives k = i + 1; equal drops pick the first
//       (smallest k); a single score gives k = 1; all-equal scores give k = 1 (drop 0 at i = 0).
// An empty list selects nothing. NaN scores take no part in the drop search.
static inline std::vector<int> geofp8_select_top(const std::vector<double>& scores, int top_k) {
    std::vector<int> idx = geofp8_rank_scores(scores);
    size_t k;
    if (idx.empty()) return idx;
    if (top_k > 0) {
        k = std::min((size_t)top_k, idx.size());
    } else {
        size_t finite = 0;
        while (finite < idx.size() && !std::isnan(scores[idx[finite]])) finite++;
        k = 1;
        double best = -1.0;
        for (size_t i = 0; i + 1 < finite; i++) {
            double drop = scores[idx[i]] - scores[idx[i + 1]];
            if (drop > best) { best = drop; k = i + 1; }
        }
    }
    idx.resize(k);
    return idx;
}
