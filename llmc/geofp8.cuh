// geofp8.cuh — GeoFP8 gradient communication on the GPU (DESIGN §5, §6): every kernel and every
// cuBLAS / cuSOLVER step between the collectives. The collectives themselves (NCCL) are
// llmc/comm.cuh; the CPU reference of every function here is llmc/geofp8.h (and the
// orchestration it mirrors is llmc/gradcomm.h).
//
// What it defines, in the order a step uses it:
//   1. GeoFP8UnitTable: the units (one layer's one tensor) of the flat fp32 gradient buffer as
//      device arrays of offsets and sizes, cut into chunks of GEOFP8_CHUNK elements (a chunk never
//      crosses a unit), so one launch covers every unit ("multi-tensor" kernels).
//   2. FP8 core (§5.1): geofp8_amax_units (one amax per unit) and geofp8_block_amax_units (one
//      per 512-element block, fp8block); geofp8_block_scales (s = 2^e, e exactly as
//      geofp8_scale_exponent, frexp/ldexp in double); geofp8_quantize_ef_units (q = fp8(s x) in
//      the run's format, E4M3 or E5M2,
//      error feedback R = x - decode(q)/s on the units that have a residual buffer, saturation /
//      underflow / nonzero counts per unit); geofp8_dequantize_units (decode(q)/(s N), codes at
//      the format's max after the sum). Two-phase reduction (§5.2): geofp8_twophase_sum (decode and sum
//      every rank's shard in rank order) and geofp8_twophase_dequantize.
//   3. The low-rank transform (§6): geofp8_whiten / geofp8_unwhiten in place on a unit of the
//      flat buffer (cuBLAS sgemm), geofp8_residual_add, geofp8_carry_residual.
//   4. The factor: geofp8_sketch_accumulate (Y += w hᵀ(hΩ), tr(A) += w Σ‖h‖², fp32 or bf16
//      activations), geofp8_nystrom on the device (cuBLAS dgemm/dtrsm/dsyrk, cuSOLVER dpotrf
//      and dsyevd, all in double).
//   5. K-FAC ablation: geofp8_kfac_accumulate (ssyrk), geofp8_kfac_factor (dpotrf in double),
//      geofp8_kfac_whiten / geofp8_kfac_unwhiten (strsm / strmm).
//   6. GeoFP8Device: every buffer and handle of the above for one run, and the step phases the
//      trainer calls between its collectives (geofp8_device_begin ... geofp8_device_finish).
//
// Shapes: the flat buffer x (num_params) fp32 in llama.h's layout; a unit on the geometry path
// is a row-major (d_out, d_in) matrix inside it; U (d_in, r), Ω and Y (d_in, k), h (n, d_in),
// δ (n, d_out), all row-major as in geofp8.h. A packed factor is geofp8_factor_pack's layout,
// [U (d_in*r) | D (r) | c | eps] floats, on the device.
//
// Row-major on cuBLAS (column-major): a row-major (a, b) buffer with leading dimension b is,
// read column-major, its transpose (b × a) with ld b. So every product is taken transposed:
// row-major C = A B becomes column-major Cᵀ = Bᵀ Aᵀ, i.e. gemm(m = cols of C, n = rows of C) with
// the operands swapped and no data moved. Each call below states its mapping.
//
// Determinism: every max is taken by atomicMax on the float's bit pattern (non-negative floats
// order like their bits), every count by integer atomicAdd: both are order-independent, so
// amax, scales, codes, residuals and counts are bitwise the same as the CPU's and identical run to
// run. Double sums (tr(A), ‖Y‖_F) use fixed trees (no atomics). cuBLAS / cuSOLVER are
// deterministic for a fixed GPU model and library version; they are not bitwise equal to OpenBLAS
// (tolerances in dev/cuda/geofp8.cu). The factor is computed on rank 0 and broadcast, so every
// rank applies bitwise the same transform.
// Elementwise arithmetic that must match the CPU bit for bit uses __fmul_rn / __fdiv_rn /
// __fadd_rn / __fsub_rn, which are never contracted into FMAs; division and the double
// math of the scale exponent are IEEE (nvcc's defaults, no --use_fast_math).
// Conventions: outputs are written (=) unless the name says accumulate or add (+=). Launchers
// take the stream last. Functions that need a host decision (geofp8_nystrom, geofp8_kfac_factor:
// a failed Cholesky retries with a larger shift) synchronize the stream; they run at a refresh
// only (every K steps). Everything else is asynchronous.
#pragma once
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cusolverDn.h>
#include "cuda_common.cuh"
#include "fp8.h"
#include "geofp8.h"
#include "geofp8_omega.h"

static inline const char* geofp8_cusolver_status_name(cusolverStatus_t s) {
    switch (s) {
        case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
        case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
        case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
        case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
        case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
        case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
        case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
        case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
        default: return "unknown cuSOLVER status";
    }
}

#define CUSOLVER_CHECK(call) do { cusolverStatus_t st_ = (call); if (st_ != CUSOLVER_STATUS_SUCCESS) { \
    fprintf(stderr, "cuSOLVER error %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #call, geofp8_cusolver_status_name(st_), (int)st_); \
    exit(1); } } while (0)

// Elements per thread block of the multi-unit kernels: a multiple of GEOFP8_BLOCK, so a 512-block
// of fp8block never straddles two chunks.
static const int GEOFP8_CHUNK = 16384;
static const int GEOFP8_THREADS = 256;
static_assert(GEOFP8_CHUNK % GEOFP8_BLOCK == 0, "a chunk holds whole scale blocks");
// +Inf as a bit pattern: the amax of a unit with a non-finite element
static const unsigned int GEOFP8_INF_BITS = 0x7F800000u;

// ---------------------------------------------------------------------------------------------
// 1. Unit tables

// What the kernels see (passed by value): device arrays only.
typedef struct {
    int num_units;
    int num_chunks;
    int count_stride;           // units between the rows of the (3, ·) counts (num_units, or the
                                // whole table's for a range of it: geofp8_units_create_range)
    const size_t* offset;       // (num_units) first element of each unit in the buffer
    const size_t* size;         // (num_units) elements
    const int* first_block;     // (num_units) index of the unit's first 512-block (fp8block scales)
    const int* chunk_unit;      // (num_chunks) the unit a chunk belongs to
    const size_t* chunk_begin;  // (num_chunks) a chunk's first element in the buffer
} GeoFP8Units;

typedef struct {
    GeoFP8Units dev;
    int num_blocks;                  // 512-blocks over all units (the fp8block scale groups)
    std::vector<size_t> offset, size;
    std::vector<int> first_block;    // (num_units + 1)
} GeoFP8UnitTable;

// A new device copy of host (n) (n may be 0: a 1-element allocation, nothing copied).
template <typename T>
static inline T* geofp8_upload(const T* host, size_t n) {
    T* p = cuda_malloc<T>(n);
    if (n) CUDA_CHECK(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

// Units (offset, size) of a buffer; they must not overlap, gaps between them are left alone.
// Chunks start at offset + j * GEOFP8_CHUNK inside each unit.
static inline void geofp8_units_create(GeoFP8UnitTable* t, const std::vector<size_t>& offset, const std::vector<size_t>& size) {
    const int U = (int)offset.size();
    t->offset = offset;
    t->size = size;
    t->first_block.assign(U + 1, 0);
    std::vector<int> chunk_unit;
    std::vector<size_t> chunk_begin;
    for (int u = 0; u < U; u++) {
        size_t nb = geofp8_num_blocks(size[u], GEOFP8_BLOCK);
        if ((size_t)t->first_block[u] + nb > (size_t)INT_MAX) { fprintf(stderr, "geofp8_units_create: too many scale blocks\n"); exit(1); }
        t->first_block[u + 1] = t->first_block[u] + (int)nb;
        for (size_t b = 0; b < size[u]; b += GEOFP8_CHUNK) {
            chunk_unit.push_back(u);
            chunk_begin.push_back(offset[u] + b);
        }
    }
    t->num_blocks = t->first_block[U];
    t->dev.num_units = U;
    t->dev.num_chunks = (int)chunk_unit.size();
    t->dev.count_stride = U;
    t->dev.offset = geofp8_upload(offset.data(), offset.size());
    t->dev.size = geofp8_upload(size.data(), size.size());
    t->dev.first_block = geofp8_upload(t->first_block.data(), t->first_block.size());
    t->dev.chunk_unit = geofp8_upload(chunk_unit.data(), chunk_unit.size());
    t->dev.chunk_begin = geofp8_upload(chunk_begin.data(), chunk_begin.size());
}

// Units [lo, hi) of `all` as a table of their own (unit lo becomes 0), for kernels that work on
// part of the buffer: pass the per-unit arrays from entry lo (per-block arrays from
// all->first_block[lo]) and the counts from column lo; their rows keep all's stride.
static inline void geofp8_units_create_range(GeoFP8UnitTable* t, const GeoFP8UnitTable* all, int lo, int hi) {
    std::vector<size_t> off(all->offset.begin() + lo, all->offset.begin() + hi), size(all->size.begin() + lo, all->size.begin() + hi);
    geofp8_units_create(t, off, size);
    t->dev.count_stride = all->dev.num_units;
}

static inline void geofp8_units_free(GeoFP8UnitTable* t) {
    const void* bufs[] = {t->dev.offset, t->dev.size, t->dev.first_block, t->dev.chunk_unit, t->dev.chunk_begin};
    for (const void* b : bufs) if (b) CUDA_CHECK(cudaFree((void*)b));
    t->dev = GeoFP8Units{0, 0, 0, NULL, NULL, NULL, NULL, NULL};
    t->offset.clear(); t->size.clear(); t->first_block.clear();
    t->num_blocks = 0;
}

// ---------------------------------------------------------------------------------------------
// 2. FP8 core

// |x| as a bit pattern, +Inf for NaN and ±Inf (geofp8_amax's rule)
__device__ __forceinline__ unsigned int geofp8_abs_bits(float x) {
    unsigned int a = __float_as_uint(x) & 0x7FFFFFFFu;
    return a >= GEOFP8_INF_BITS ? GEOFP8_INF_BITS : a;
}

// Max / sum over the block, returned to every thread (blockDim.x a multiple of 32, every thread calls).
__device__ inline unsigned int geofp8_block_max_u32(unsigned int v) {
    __shared__ unsigned int part_max[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = __reduce_max_sync(0xffffffffu, v);
    __syncthreads();
    if (lane == 0) part_max[warp] = v;
    __syncthreads();
    v = lane < nwarps ? part_max[lane] : 0u;
    return __reduce_max_sync(0xffffffffu, v);
}

__device__ inline unsigned int geofp8_block_sum_u32(unsigned int v) {
    __shared__ unsigned int part_sum[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = __reduce_add_sync(0xffffffffu, v);
    __syncthreads();
    if (lane == 0) part_sum[warp] = v;
    __syncthreads();
    v = lane < nwarps ? part_sum[lane] : 0u;
    return __reduce_add_sync(0xffffffffu, v);
}

// [begin, end) of chunk c and its unit
__device__ __forceinline__ void geofp8_chunk_range(const GeoFP8Units& t, int c, int* unit, size_t* begin, size_t* end) {
    int u = t.chunk_unit[c];
    size_t b = t.chunk_begin[c], unit_end = t.offset[u] + t.size[u];
    *unit = u;
    *begin = b;
    *end = b + (size_t)GEOFP8_CHUNK < unit_end ? b + (size_t)GEOFP8_CHUNK : unit_end;
}

// amax must hold zeros on entry; every chunk max-combines into its unit's entry.
__global__ void geofp8_amax_units_kernel(float* __restrict__ amax, const float* __restrict__ x, GeoFP8Units t) {
    int u;
    size_t begin, end;
    geofp8_chunk_range(t, blockIdx.x, &u, &begin, &end);
    unsigned int m = 0u;
    const size_t bd = blockDim.x;
    size_t i = begin + threadIdx.x;
    for (; i + 3 * bd < end; i += 4 * bd) {  // four independent loads in flight per thread
        unsigned int a0 = geofp8_abs_bits(x[i]), a1 = geofp8_abs_bits(x[i + bd]);
        unsigned int a2 = geofp8_abs_bits(x[i + 2 * bd]), a3 = geofp8_abs_bits(x[i + 3 * bd]);
        m = max(m, max(max(a0, a1), max(a2, a3)));
    }
    for (; i < end; i += bd) m = max(m, geofp8_abs_bits(x[i]));
    m = geofp8_block_max_u32(m);
    if (threadIdx.x == 0 && m > 0u) atomicMax(reinterpret_cast<unsigned int*>(amax) + u, m);
}

// amax (t->dev.num_units) = geofp8_amax of every unit of x (+Inf for a unit with a non-finite
// element, 0 for an empty unit); bitwise the CPU's answer.
static inline void geofp8_amax_units(float* amax, const float* x, const GeoFP8UnitTable* t, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(amax, 0, (size_t)t->dev.num_units * sizeof(float), stream));
    if (t->dev.num_chunks == 0) return;
    geofp8_amax_units_kernel<<<t->dev.num_chunks, GEOFP8_THREADS, 0, stream>>>(amax, x, t->dev);
    KERNEL_CHECK();
}

// One warp per 512-block: 16 coalesced 128-byte loads, a warp max, one store (no atomics).
__global__ void geofp8_block_amax_units_kernel(float* __restrict__ amax, const float* __restrict__ x, GeoFP8Units t) {
    int u;
    size_t begin, end;
    geofp8_chunk_range(t, blockIdx.x, &u, &begin, &end);
    const int first = t.first_block[u] + (int)((begin - t.offset[u]) / GEOFP8_BLOCK);
    const int nb = (int)((end - begin + GEOFP8_BLOCK - 1) / GEOFP8_BLOCK);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int b = warp; b < nb; b += nwarps) {
        size_t i0 = begin + (size_t)b * GEOFP8_BLOCK;
        size_t i1 = i0 + GEOFP8_BLOCK < end ? i0 + GEOFP8_BLOCK : end;
        unsigned int m = 0u;
        for (size_t i = i0 + lane; i < i1; i += 32) m = max(m, geofp8_abs_bits(x[i]));
        m = __reduce_max_sync(0xffffffffu, m);
        if (lane == 0) amax[first + b] = __uint_as_float(m);
    }
}

// amax (t->num_blocks) = geofp8_block_amax of every unit, blocks of GEOFP8_BLOCK from each unit's
// start, unit after unit (block b of unit u at t->first_block[u] + b).
static inline void geofp8_block_amax_units(float* amax, const float* x, const GeoFP8UnitTable* t, cudaStream_t stream) {
    if (t->dev.num_chunks == 0) return;
    geofp8_block_amax_units_kernel<<<t->dev.num_chunks, GEOFP8_THREADS, 0, stream>>>(amax, x, t->dev);
    KERNEL_CHECK();
}

// geofp8_scale_exponent on the device, the same steps in double (frexp and ldexp are exact, the
// division is IEEE): bitwise the CPU's exponent. ceil_log2_n = geofp8_ceil_log2(world_size).
__device__ inline int geofp8_scale_exponent_device(Fp8Format f, float amax, int ceil_log2_n) {
    if (!(amax >= 0.0f) || !(amax <= FLT_MAX)) return GEOFP8_EXP_SKIP;
    if (amax == 0.0f) return 0;
    const double a = (double)amax;
    const double top = (double)fp8_format_max(f);
    int e;
    frexp(top / a, &e);
    e -= 1;
    while (ldexp(a, e) > top) e--;
    while (ldexp(a, e + 1) <= top) e++;
    e -= ceil_log2_n + 1;
    if (e < GEOFP8_EXP_MIN) e = GEOFP8_EXP_MIN;
    if (e > GEOFP8_EXP_MAX) e = GEOFP8_EXP_MAX;
    return e;
}

// 2^e for e in [GEOFP8_EXP_MIN, GEOFP8_EXP_MAX], built from its bits (subnormals included), so no
// flush-to-zero mode can change it; equals the CPU's ldexpf(1, e).
__host__ __device__ __forceinline__ float geofp8_scale_from_exponent_bits(int e) {
    unsigned int bits = e >= -126 ? (unsigned int)(e + 127) << 23 : 1u << (e + 149);
#ifdef __CUDA_ARCH__
    return __uint_as_float(bits);
#else
    return fp8_bits_float(bits);
#endif
}

__global__ void geofp8_block_scales_kernel(Fp8Format f, float* __restrict__ scale, int* __restrict__ exps, float* __restrict__ skip,
                                           const float* __restrict__ amax, size_t n, int ceil_log2_n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int e = geofp8_scale_exponent_device(f, amax[i], ceil_log2_n);
    if (e == GEOFP8_EXP_SKIP) {
        *skip = 1.0f;  // every writer stores the same value: no race on the result
        e = 0;
    }
    scale[i] = geofp8_scale_from_exponent_bits(e);
    if (exps) exps[i] = e;
}

// scale (n) = 2^e, exps (n) = e (or NULL) with e = geofp8_scale_exponent(f, amax (n), world_size);
// *skip (device, 1 float) = 1.0f if any amax is non-finite (those groups get e = 0, s = 1), else
// 0.0f: the step must then be skipped by every rank. A float, so that the two-phase reduction
// can MAX all-reduce it to agree. As geofp8_block_scales on the CPU.
static inline void geofp8_block_scales_more(Fp8Format f, float* scale, int* exps, float* skip, const float* amax, size_t n, int world_size,
                                            cudaStream_t stream);
static inline void geofp8_block_scales(Fp8Format f, float* scale, int* exps, float* skip, const float* amax, size_t n, int world_size,
                                       cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(skip, 0, sizeof(float), stream));
    geofp8_block_scales_more(f, scale, exps, skip, amax, n, world_size, stream);
}

// geofp8_block_scales without clearing *skip first: scales made range by range within one step
// (bucketed communication), where one non-finite range must skip the whole step.
static inline void geofp8_block_scales_more(Fp8Format f, float* scale, int* exps, float* skip, const float* amax, size_t n, int world_size,
                                            cudaStream_t stream) {
    if (n == 0) return;
    geofp8_block_scales_kernel<<<cuda_ceil_div((long long)n, 256), 256, 0, stream>>>(f, scale, exps, skip, amax, n,
                                                                                     geofp8_ceil_log2(world_size));
    KERNEL_CHECK();
}

// q and the counts of one element (geofp8_quantize_ef + geofp8_count_saturated_underflow)
__device__ __forceinline__ uint8_t geofp8_quantize_one(Fp8Format f, float v, float s, float* res, unsigned int* sat, unsigned int* und,
                                                       unsigned int* nz) {
    uint8_t code = fp8_encode(f, __fmul_rn(s, v));
    if (res) *res = __fsub_rn(v, __fdiv_rn(fp8_decode(f, code), s));
    unsigned int mag = code & 0x7Fu;
    *sat += mag == fp8_format_max_code(f);
    if (v != 0.0f) {  // NaN counts as nonzero, as on the CPU
        *nz += 1u;
        *und += mag == 0u;
    }
    return code;
}

__global__ void geofp8_quantize_ef_units_kernel(Fp8Format f, uint8_t* __restrict__ q, float* const* __restrict__ residual,
                                                const float* __restrict__ x, const float* __restrict__ scale, int block_mode,
                                                GeoFP8Units t, unsigned long long* __restrict__ counts,
                                                const float* __restrict__ skip) {
    if (skip && *skip != 0.0f) return;  // a skipped step keeps its residuals (block-uniform exit)
    int u;
    size_t begin, end;
    geofp8_chunk_range(t, blockIdx.x, &u, &begin, &end);
    const size_t unit_begin = t.offset[u];
    float* res = residual ? residual[u] : NULL;  // (unit size), indexed from the unit's start
    const float* sblock = scale + t.first_block[u];
    const float s_unit = block_mode ? 1.0f : scale[u];
    unsigned int sat = 0u, und = 0u, nz = 0u;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        size_t j = i - unit_begin;
        float s = block_mode ? sblock[j / GEOFP8_BLOCK] : s_unit;
        q[i] = geofp8_quantize_one(f, x[i], s, res ? res + j : NULL, &sat, &und, &nz);
    }
    if (!counts) return;
    sat = geofp8_block_sum_u32(sat);
    und = geofp8_block_sum_u32(und);
    nz = geofp8_block_sum_u32(nz);
    if (threadIdx.x == 0) {
        const size_t U = (size_t)t.count_stride;
        if (sat) atomicAdd(counts + u, (unsigned long long)sat);
        if (und) atomicAdd(counts + U + u, (unsigned long long)und);
        if (nz) atomicAdd(counts + 2 * U + u, (unsigned long long)nz);
    }
}

// q (buffer) = fp8_encode(f, s x) (satfinite) on every unit of x, s = scale[u] (block_mode 0) or
// scale[t->first_block[u] + j / 512] (block_mode 1, fp8block). Error feedback: if residual (device
// array of num_units pointers, or NULL) has a non-NULL entry for unit u, residual[u][j] =
// x - decode(q)/s for the unit's elements j (the unit's own buffer, indexed from its start).
// counts (3, t->dev.count_stride) u64 (or NULL) += per unit: codes at ± the format's max | nonzero x that became ±0 |
// nonzero x. skip (device, or NULL): when *skip != 0 nothing is written at all.
// Bitwise geofp8_quantize_ef(_block) and geofp8_count_saturated_underflow.
static inline void geofp8_quantize_ef_units(Fp8Format f, uint8_t* q, float* const* residual, const float* x, const float* scale, int block_mode,
                                            const GeoFP8UnitTable* t, unsigned long long* counts, const float* skip,
                                            cudaStream_t stream) {
    if (t->dev.num_chunks == 0) return;
    geofp8_quantize_ef_units_kernel<<<t->dev.num_chunks, GEOFP8_THREADS, 0, stream>>>(f, q, residual, x, scale, block_mode, t->dev,
                                                                                      counts, skip);
    KERNEL_CHECK();
}

__global__ void geofp8_dequantize_units_kernel(Fp8Format f, float* __restrict__ out, const uint8_t* __restrict__ q, const float* __restrict__ scale,
                                               int block_mode, float world, GeoFP8Units t,
                                               unsigned long long* __restrict__ sum_saturated) {
    int u;
    size_t begin, end;
    geofp8_chunk_range(t, blockIdx.x, &u, &begin, &end);
    const size_t unit_begin = t.offset[u];
    const float* sblock = scale + t.first_block[u];
    const float denom_unit = block_mode ? 1.0f : __fmul_rn(scale[u], world);
    unsigned int top = 0u;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        uint8_t code = q[i];
        float denom = block_mode ? __fmul_rn(sblock[(i - unit_begin) / GEOFP8_BLOCK], world) : denom_unit;
        out[i] = __fdiv_rn(fp8_decode(f, code), denom);
        top += (code & 0x7Fu) == fp8_format_max_code(f);
    }
    if (!sum_saturated) return;
    top = geofp8_block_sum_u32(top);
    if (threadIdx.x == 0 && top) atomicAdd(sum_saturated + u, (unsigned long long)top);
}

// out (buffer) = decode(q) / (s N) on every unit (s per unit or per block as in the quantizer):
// the average after the SUM all-reduce of codes made with the same scales on every rank. out
// may not alias q. sum_saturated (num_units) u64 (or NULL) += codes at ± the format's max per unit. Bitwise
// geofp8_dequantize(_block).
static inline void geofp8_dequantize_units(Fp8Format f, float* out, const uint8_t* q, const float* scale, int block_mode, int world_size,
                                           const GeoFP8UnitTable* t, unsigned long long* sum_saturated, cudaStream_t stream) {
    if (t->dev.num_chunks == 0) return;
    geofp8_dequantize_units_kernel<<<t->dev.num_chunks, GEOFP8_THREADS, 0, stream>>>(f, out, q, scale, block_mode, (float)world_size,
                                                                                     t->dev, sum_saturated);
    KERNEL_CHECK();
}

// Two-phase server sum over this rank's shard. `shard` is the table of the shard's segments (a
// segment = one unit clipped to the shard; offsets relative to the shard's start), seg_unit
// (segments) the unit of each segment.
__global__ void geofp8_twophase_sum_kernel(Fp8Format f, float* __restrict__ sum, const uint8_t* __restrict__ recv, size_t stride,
                                           const int* __restrict__ all_exps, int world_size, int num_units,
                                           const float* __restrict__ server_residual, GeoFP8Units shard,
                                           const int* __restrict__ seg_unit) {
    int sg;
    size_t begin, end;
    geofp8_chunk_range(shard, blockIdx.x, &sg, &begin, &end);
    const int u = seg_unit[sg];
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        float acc = 0.0f;
        for (int r = 0; r < world_size; r++) {
            float s = geofp8_scale_from_exponent_bits(all_exps[(size_t)r * num_units + u]);
            acc = __fadd_rn(acc, __fdiv_rn(fp8_decode(f, recv[(size_t)r * stride + i]), s));
        }
        sum[i] = __fadd_rn(acc, server_residual[i]);
    }
}

// sum (shard) = Σ_r decode(recv[r*stride + i]) / 2^all_exps[r][u] in rank order, plus
// server_residual: rank j's step of gradcomm_twophase after the all-to-all. recv (N, stride)
// codes of every rank's copy of this shard; all_exps (N, num_units) every rank's local exponents.
static inline void geofp8_twophase_sum(Fp8Format f, float* sum, const uint8_t* recv, size_t stride, const int* all_exps, int world_size,
                                       int num_units, const float* server_residual, const GeoFP8UnitTable* shard,
                                       const int* seg_unit, cudaStream_t stream) {
    if (shard->dev.num_chunks == 0) return;
    geofp8_twophase_sum_kernel<<<shard->dev.num_chunks, GEOFP8_THREADS, 0, stream>>>(f, sum, recv, stride, all_exps, world_size,
                                                                                     num_units, server_residual, shard->dev,
                                                                                     seg_unit);
    KERNEL_CHECK();
}

__global__ void geofp8_twophase_dequantize_kernel(Fp8Format f, float* __restrict__ out, const uint8_t* __restrict__ q,
                                                  const int* __restrict__ all_server_exps, size_t shard_size, int world_size,
                                                  GeoFP8Units t) {
    int u;
    size_t begin, end;
    geofp8_chunk_range(t, blockIdx.x, &u, &begin, &end);
    const float world = (float)world_size;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        size_t j = i / shard_size;  // the rank whose server quantized element i
        float s = geofp8_scale_from_exponent_bits(all_server_exps[j * (size_t)t.num_units + u]);
        out[i] = __fdiv_rn(fp8_decode(f, q[i]), __fmul_rn(s, world));
    }
}

// out (buffer) = decode(q) / (2^e N) on every unit, e = all_server_exps[j][u] of the rank j that
// re-quantized element i (j = i / shard_size): the end of gradcomm_twophase after the all-gathers.
static inline void geofp8_twophase_dequantize(Fp8Format f, float* out, const uint8_t* q, const int* all_server_exps, size_t shard_size,
                                              int world_size, const GeoFP8UnitTable* t, cudaStream_t stream) {
    if (t->dev.num_chunks == 0) return;
    geofp8_twophase_dequantize_kernel<<<t->dev.num_chunks, GEOFP8_THREADS, 0, stream>>>(f, out, q, all_server_exps, shard_size,
                                                                                        world_size, t->dev);
    KERNEL_CHECK();
}

__global__ void geofp8_scatter_exps_kernel(int* __restrict__ out, const int* __restrict__ seg_exps, const int* __restrict__ seg_unit,
                                           int num_segments) {
    int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s < num_segments) out[seg_unit[s]] = seg_exps[s];
}

// out (num_units) = 0, then out[seg_unit[s]] = seg_exps[s]: the server exponents of gradcomm_twophase.
static inline void geofp8_scatter_exps(int* out, int num_units, const int* seg_exps, const int* seg_unit, int num_segments,
                                       cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)num_units * sizeof(int), stream));
    if (num_segments == 0) return;
    geofp8_scatter_exps_kernel<<<cuda_ceil_div(num_segments, 256), 256, 0, stream>>>(out, seg_exps, seg_unit, num_segments);
    KERNEL_CHECK();
}

// fp32 and bf16 modes: the divisions of gradcomm_finish, bitwise.
__global__ void geofp8_average_kernel(float* x, size_t n, float world) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = __fdiv_rn(x[i], world);
}

// x (n) /= N after an fp32 SUM all-reduce
static inline void geofp8_average(float* x, size_t n, int world_size, cudaStream_t stream) {
    if (n == 0 || world_size == 1) return;
    geofp8_average_kernel<<<cuda_grid_for(n, 256), 256, 0, stream>>>(x, n, (float)world_size);
    KERNEL_CHECK();
}

__global__ void geofp8_bf16_encode_kernel(uint16_t* out, const float* in, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = fp8_bf16_encode(in[i]);
}

// out (n) bf16 bits = fp8_bf16_encode(in (n)): round to nearest even, NaN -> 0x7FFF
static inline void geofp8_bf16_encode(bf16* out, const float* in, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    geofp8_bf16_encode_kernel<<<cuda_grid_for(n, 256), 256, 0, stream>>>(reinterpret_cast<uint16_t*>(out), in, n);
    KERNEL_CHECK();
}

__global__ void geofp8_bf16_decode_average_kernel(float* out, const uint16_t* in, size_t n, float world) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = __fdiv_rn(fp8_bf16_decode(in[i]), world);
}

// out (n) fp32 = decode(in (n)) / N after a bf16 SUM all-reduce
static inline void geofp8_bf16_decode_average(float* out, const bf16* in, size_t n, int world_size, cudaStream_t stream) {
    if (n == 0) return;
    geofp8_bf16_decode_average_kernel<<<cuda_grid_for(n, 256), 256, 0, stream>>>(out, reinterpret_cast<const uint16_t*>(in), n,
                                                                                (float)world_size);
    KERNEL_CHECK();
}

// Fidelity (--fidelity-every): per chunk of the unit table, in double, Σ (got - ref)², Σ ref²,
// Σ got², Σ got·ref -> out (4, num_chunks); fixed reduction order, so run to run the same.
__global__ void geofp8_fidelity_sums_kernel(double* __restrict__ out, const float* __restrict__ got, const float* __restrict__ ref,
                                            GeoFP8Units t) {
    int u;
    size_t begin, end;
    geofp8_chunk_range(t, blockIdx.x, &u, &begin, &end);
    double e2 = 0.0, g2 = 0.0, h2 = 0.0, d = 0.0;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        double a = got[i], b = ref[i];
        e2 += (a - b) * (a - b); g2 += b * b; h2 += a * a; d += a * b;
    }
    e2 = cuda_block_sum_double(e2);
    g2 = cuda_block_sum_double(g2);
    h2 = cuda_block_sum_double(h2);
    d = cuda_block_sum_double(d);
    if (threadIdx.x == 0) {
        const size_t c = blockIdx.x, C = gridDim.x;
        out[c] = e2; out[C + c] = g2; out[2 * C + c] = h2; out[3 * C + c] = d;
    }
}

// The four sums per unit, (4, num_units) on the host (chunks added in order); scratch holds
// 4 num_chunks doubles. Synchronizes. What gradcomm_fidelity_finish (llmc/gradcomm_common.h) takes.
static inline std::vector<double> geofp8_fidelity_sums(double* scratch, const float* got, const float* ref, const GeoFP8UnitTable* t,
                                                       cudaStream_t stream) {
    const int U = t->dev.num_units, C = t->dev.num_chunks;
    std::vector<double> sums(4 * (size_t)U, 0.0);
    if (C == 0) return sums;
    geofp8_fidelity_sums_kernel<<<C, GEOFP8_THREADS, 0, stream>>>(scratch, got, ref, t->dev);
    KERNEL_CHECK();
    std::vector<double> part(4 * (size_t)C);
    CUDA_CHECK(cudaMemcpyAsync(part.data(), scratch, part.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<int> chunk_unit(C);
    CUDA_CHECK(cudaMemcpy(chunk_unit.data(), t->dev.chunk_unit, C * sizeof(int), cudaMemcpyDeviceToHost));
    for (int c = 0; c < C; c++)
        for (int k = 0; k < 4; k++) sums[(size_t)k * U + chunk_unit[c]] += part[(size_t)k * C + c];
    return sums;
}

// ---------------------------------------------------------------------------------------------
// 6 (first part). GeoFP8Device: handles, scratch and per-unit state. Defined before the GEMM
// paths, which take their handles and scratch from it.

// What rank 0's refresh of one unit found, kept on the device until the refresh's one download
// (geofp8_refresh.cuh): every decision of geofp8_nystrom is taken by the kernels below from it.
struct GeoFP8RefreshReport {
    double ss;                 // ‖Y‖²_F
    double trA;                // tr(A) as the step summed it
    double shift;              // ν of the attempt that succeeded (0 with the fallback)
    double sigma2;             // σ² of the factor
    double power, q;           // the whitening power used; with auto, the q it came from
    double total;              // auto: ‖G‖² of rank 0's gradient of the unit
    int info[GEOFP8_MAX_RETRIES + 1];  // each attempt's Cholesky status (cuSOLVER's devInfo)
    int eig_info;              // the eigensolver's
    int status;                // geofp8_nystrom's answer: the retries used, or -1 (the isotropic fallback)
};

// A unit on the geometry path.
typedef struct {
    int unit;              // index into the unit table
    int d_out, d_in;
    int r, k;              // rank min(r, d_in) and sketch width geofp8_sketch_width(r, d_in)
    int kfac;              // 1: two-sided K-FAC transform (LA, LG); 0: low-rank factor
    float* factor;         // (geofp8_factor_floats(d_in, r)) packed T in use (identity at first)
    float* factor_next;    // same, the factor being computed at a refresh (broadcast buffer)
    float* residual;       // (d_out, d_in) error feedback in whitened coordinates, zero at start
    float* residual_next;  // (d_out, d_in) with geofp8_device_double_buffer: where the quantizer of a
                           // bucketed step writes the new residual (swapped in once the step is kept)
    float* omega;          // (d_in, k) test matrix of the current refresh
    float* Y;              // (d_in, k) sketch accumulator (SUM all-reduced)
    double* trA;           // (1) tr(A) accumulator (SUM all-reduced)
    float* A;              // kfac: (d_in, d_in) upper triangle (row-major) of E[h hᵀ]
    float* Gs;             // kfac: (d_out, d_out) upper triangle of E[δ δᵀ]
    float* LA;             // kfac: (d_in, d_in) lower Cholesky factor in use (identity at first)
    float* LG;             // kfac: (d_out, d_out)
    float* LA_next;        // kfac: the factors being computed at a refresh (broadcast buffers)
    float* LG_next;
    float* Y_ema;          // --geofp8-ema: (d_in, k) average of the window's sketches (NULL until the first window)
    double* trA_ema;       // (1)
    int ema_steps;         // steps averaged (bias correction 1 / (1 - β^n))
    // the next refresh's Ω, built on the host ahead of it (geofp8_refresh.cuh)
    float* omega_host;     // (d_in, k) pinned: the builder's output, uploaded when the refresh begins
    float* U_host;         // (d_in, r) pinned: the factor's U as the last refresh left it
    long long factor_version;  // counts every change of `factor` (refresh, undo, load)
    long long U_host_version;  // the factor_version U_host holds (-1: none)
} GeoFP8DeviceUnit;

typedef struct GeoFP8Device {
    cublasHandle_t blas;         // host pointer mode, default (fp32, no TF32) math
    cusolverDnHandle_t solver;
    GeoFP8UnitTable units;       // every unit of the flat buffer
    size_t num_params;
    int world_size, rank;
    int block_mode;              // fp8block: one scale per 512-block
    int twophase;                // --fp8-reduce twophase
    Fp8Format fmt;               // --fp8-format
    int num_groups;              // scale groups: units, or 512-blocks in block mode
    uint8_t* q;                  // (num_params, padded to world_size * shard_size in twophase) codes
    float* amax;                 // (num_groups)
    float* scale;                // (num_groups)
    int* exps;                   // (num_groups)
    float* skip;                 // (1) 1.0f: a non-finite amax, every rank skips the step
    unsigned long long* counts;  // (4, num_units) saturated | underflow | nonzero | sum_saturated
    float** residual_table;      // (num_units) device array: the geometry units' residual buffers, else NULL
    float** residual_next_table; // (num_units) the same for residual_next (geofp8_device_double_buffer), or NULL
    std::vector<int> unit_to_geo;     // (num_units) index into geo, or -1
    std::vector<GeoFP8DeviceUnit> geo;
    // scratch of the GEMM paths (grown on demand; geofp8_device_add_unit reserves what it can)
    float* P; size_t cap_P;          // (d_out, r) G U
    float* coef;                     // (GEOFP8_MAX_RANK + 1) transform coefficients
    float* widen; size_t cap_widen;  // (n, d) bf16 activations widened to fp32
    float* Z; size_t cap_Z;          // (n, k) h Ω
    double* rows; size_t cap_rows;   // (n) row sums of squares
    double* dsum;                    // (1)
    double* dwork; size_t cap_dwork; // double matrices of the Nyström step / the K-FAC factorization
    double* solver_work; int cap_solver;
    int* info;                       // (1) cuSOLVER status
    // the refresh (geofp8_refresh.cuh)
    GeoFP8RefreshReport* reports;    // (geometry units + 1) what each unit's Nyström step found (the last: geofp8_nystrom's own)
    GeoFP8RefreshReport* reports_host;  // pinned mirror, read once per refresh
    size_t cap_reports;
    float* lambda;                   // (GEOFP8_MAX_RANK) λ of the unit being refreshed
    GeoFP8OmegaBuilder* omega;       // the next refresh's Ω (geofp8_omega.h)
    const struct GeoFP8Device* omega_from;  // --virtual-ranks: logical rank 0's device, whose Ω every other
                                     // logical rank copies (the same seed and factors: the same Ω), or NULL
    cudaEvent_t pinned_done;         // after the last transfer of the pinned buffers (Ω's upload, U's download)
    // twophase (§5.2)
    size_t shard_size;               // ceil(num_params / N); shard j = [j*shard_size, (j+1)*shard_size)
    GeoFP8UnitTable shard;           // this rank's shard: segments (unit ∩ shard), offsets from the shard start
    int* seg_unit;                   // (segments)
    std::vector<int> h_seg_unit;
    uint8_t* recv;                   // (N, shard_size) every rank's codes of this shard
    float* server_sum;               // (shard_size)
    float* server_residual;          // (shard_size) error feedback of the re-quantization, zero at start
    float** server_residual_table;   // (segments) pointers into server_residual
    uint8_t* mine;                   // (shard_size) the re-quantized shard
    float* seg_amax; float* seg_scale; int* seg_exps;  // (segments)
    float* server_skip;              // (1)
    int* exps_all;                   // (N, num_units) every rank's local exponents
    int* server_exps;                // (num_units) this rank's server exponents (0 outside the shard)
    int* server_exps_all;            // (N, num_units)
} GeoFP8Device;

// Largest rank r a unit may ask for (the coefficient scratch).
static const int GEOFP8_MAX_RANK = 4096;

template <typename T>
static inline void geofp8_reserve(T** buf, size_t* cap, size_t n) {
    if (n <= *cap) return;
    if (*buf) CUDA_CHECK(cudaFree(*buf));
    *buf = cuda_malloc<T>(n);
    *cap = n;
}

// ---------------------------------------------------------------------------------------------
// 3. The low-rank transform on a unit of the flat buffer

__global__ void geofp8_transform_coef_kernel(float* coef, const float* factor, int d_in, int r, int inverse) {
    const float* D = factor + (size_t)d_in * r;
    const float c = D[r];
    const double inv_c = 1.0 / (double)c;
    for (int j = threadIdx.x; j < r; j += blockDim.x)
        coef[j] = inverse ? (float)(1.0 / (double)D[j] - inv_c) : (float)((double)D[j] - (double)c);
    if (threadIdx.x == 0) coef[r] = inverse ? (float)inv_c : c;
}

__global__ void geofp8_scale_columns_kernel(float* P, const float* coef, size_t rows, int r) {
    size_t n = rows * (size_t)r, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) P[i] = __fmul_rn(P[i], coef[i % r]);
}

__global__ void geofp8_scale_by_kernel(float* x, size_t n, const float* alpha) {
    const float a = *alpha;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = __fmul_rn(a, x[i]);
}

// G (d_out, d_in) <- alpha G + (G U) diag(beta) Uᵀ in place, (beta, alpha) = coef[0..r), coef[r]
// on the device: geofp8_lowrank_update. Row-major -> cuBLAS:
//   P = G U (d_out, r):        Pᵀ (r × d_out) = Uᵀ Gᵀ   -> sgemm(N, N, m=r, n=d_out, k=d_in, U ld r, G ld d_in)
//   P <- P diag(beta); G <- alpha G  (elementwise, as the CPU)
//   G += P Uᵀ (d_out, d_in):   Gᵀ (d_in × d_out) += U Pᵀ -> sgemm(T, N, m=d_in, n=d_out, k=r, U ld r, P ld r, beta 1)
static inline void geofp8_lowrank_update(GeoFP8Device* g, float* G, int d_out, int d_in, const float* U, int r, const float* coef,
                                         cudaStream_t stream) {
    const size_t n = (size_t)d_out * d_in;
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSetStream(g->blas, stream));
    if (r > 0) {
        geofp8_reserve(&g->P, &g->cap_P, (size_t)d_out * r);
        CUBLAS_CHECK(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, r, d_out, d_in, &one, U, r, G, d_in, &zero, g->P, r));
        geofp8_scale_columns_kernel<<<cuda_grid_for((size_t)d_out * r, 256), 256, 0, stream>>>(g->P, coef, (size_t)d_out, r);
        KERNEL_CHECK();
    }
    geofp8_scale_by_kernel<<<cuda_grid_for(n, 256), 256, 0, stream>>>(G, n, coef + r);
    KERNEL_CHECK();
    if (r > 0) CUBLAS_CHECK(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, d_in, d_out, r, &one, U, r, g->P, r, &one, G, d_in));
}

// G (d_out, d_in) <- G T = c G + (G U)(D - c I) Uᵀ in place; factor packed on the device with rank r.
static inline void geofp8_whiten(GeoFP8Device* g, float* G, int d_out, int d_in, const float* factor, int r, cudaStream_t stream) {
    if (r > GEOFP8_MAX_RANK) { fprintf(stderr, "geofp8_whiten: rank %d above %d\n", r, GEOFP8_MAX_RANK); exit(1); }
    geofp8_transform_coef_kernel<<<1, 256, 0, stream>>>(g->coef, factor, d_in, r, 0);
    KERNEL_CHECK();
    geofp8_lowrank_update(g, G, d_out, d_in, factor, r, g->coef, stream);
}

// G̃ (d_out, d_in) <- G̃ T⁻¹ = G̃ / c + (G̃ U)(D⁻¹ - I / c) Uᵀ in place.
static inline void geofp8_unwhiten(GeoFP8Device* g, float* Gt, int d_out, int d_in, const float* factor, int r, cudaStream_t stream) {
    if (r > GEOFP8_MAX_RANK) { fprintf(stderr, "geofp8_unwhiten: rank %d above %d\n", r, GEOFP8_MAX_RANK); exit(1); }
    geofp8_transform_coef_kernel<<<1, 256, 0, stream>>>(g->coef, factor, d_in, r, 1);
    KERNEL_CHECK();
    geofp8_lowrank_update(g, Gt, d_out, d_in, factor, r, g->coef, stream);
}

__global__ void geofp8_residual_add_kernel(float* __restrict__ x, const float* __restrict__ R, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] = __fadd_rn(x[i], R[i]);
}

// x (n) += R (n): X = G T + R on the geometry path (bitwise the CPU's loop)
static inline void geofp8_residual_add(float* x, const float* R, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    geofp8_residual_add_kernel<<<cuda_grid_for(n, 256), 256, 0, stream>>>(x, R, n);
    KERNEL_CHECK();
}

// R (d_out, d_in) <- R T_old⁻¹ T_new in place (at a refresh), both factors packed with rank r.
static inline void geofp8_carry_residual(GeoFP8Device* g, float* R, int d_out, int d_in, const float* f_old, const float* f_new, int r,
                                         cudaStream_t stream) {
    geofp8_unwhiten(g, R, d_out, d_in, f_old, r, stream);
    geofp8_whiten(g, R, d_out, d_in, f_new, r, stream);
}

// ---------------------------------------------------------------------------------------------
// 4. Sketch and Nyström on the device

// rows (n) = Σ_j h[t][j]² in double, one block per row, fixed tree
__global__ void geofp8_row_sumsq_kernel(double* rows, const float* h, int d) {
    const float* ht = h + (size_t)blockIdx.x * d;
    double acc = 0.0;
    for (int j = threadIdx.x; j < d; j += blockDim.x) acc += (double)ht[j] * (double)ht[j];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) rows[blockIdx.x] = acc;
}

// *trA += weight * Σ_t rows[t], one block, fixed tree
__global__ void geofp8_trace_add_kernel(double* trA, const double* rows, int n, double weight) {
    double acc = 0.0;
    for (int t = threadIdx.x; t < n; t += blockDim.x) acc += rows[t];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) *trA += weight * acc;
}

// *out = Σ x² in double, one block, fixed tree
__global__ void geofp8_sum_squares_kernel(double* out, const float* x, size_t n) {
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) *out = acc;
}

// Y (d_in, k) += weight hᵀ (h Ω), *trA += weight Σ_t ‖h_t‖² (trA device double, or NULL).
// h (n, d_in) fp32, Ω (d_in, k). Row-major -> cuBLAS:
//   Z = h Ω (n, k):        Zᵀ (k × n) = Ωᵀ hᵀ          -> sgemm(N, N, m=k, n=n, k=d_in, Ω ld k, h ld d_in)
//   Y += w hᵀ Z (d_in, k): Yᵀ (k × d_in) += w Zᵀ h     -> sgemm(N, T, m=k, n=d_in, k=n, Z ld k, h ld d_in, beta 1)
// The trace: per-row double sums, then a fixed-tree sum (the CPU sums rows serially: equal to
// ~1e-15 relative).
static inline void geofp8_sketch_accumulate(GeoFP8Device* g, float* Y, double* trA, const float* h, int n, int d_in, const float* omega,
                                            int k, float weight, cudaStream_t stream) {
    if (n <= 0) return;
    const float one = 1.0f, zero = 0.0f;
    geofp8_reserve(&g->Z, &g->cap_Z, (size_t)n * k);
    CUBLAS_CHECK(cublasSetStream(g->blas, stream));
    CUBLAS_CHECK(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, k, n, d_in, &one, omega, k, h, d_in, &zero, g->Z, k));
    CUBLAS_CHECK(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, k, d_in, n, &weight, g->Z, k, h, d_in, &one, Y, k));
    if (trA) {
        geofp8_reserve(&g->rows, &g->cap_rows, (size_t)n);
        geofp8_row_sumsq_kernel<<<n, 128, 0, stream>>>(g->rows, h, d_in);
        KERNEL_CHECK();
        geofp8_trace_add_kernel<<<1, 1024, 0, stream>>>(trA, g->rows, n, (double)weight);
        KERNEL_CHECK();
    }
}

// The same from bf16 activations h (n, d_in), as the CUDA engine stores them. The activations are
// widened to fp32 first (exact) and the fp32 path runs: a bf16 GEMM would need Ω or hΩ in bf16,
// and then Y would no longer be exactly A Ω for the Ω the Nyström step uses (a 2^-9 relative
// perturbation that the 1e-6 ‖Y‖ shift cannot absorb; Ωᵀ Y would stop being positive definite).
static inline void geofp8_sketch_accumulate(GeoFP8Device* g, float* Y, double* trA, const bf16* h, int n, int d_in, const float* omega,
                                            int k, float weight, cudaStream_t stream) {
    if (n <= 0) return;
    const size_t nd = (size_t)n * d_in;
    geofp8_reserve(&g->widen, &g->cap_widen, nd);
    cuda_cast_to_float(g->widen, h, nd, stream);
    geofp8_sketch_accumulate(g, Y, trA, g->widen, n, d_in, omega, k, weight, stream);
}

__global__ void geofp8_to_double_kernel(double* out, const float* in, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = (double)in[i];
}

// ν of attempt `attempt`: 1e-6 ‖Y‖_F, times 100 per retry, multiplied in the CPU's order.
__device__ inline double geofp8_attempt_shift(double ss, int attempt) {
    double shift = GEOFP8_NYSTROM_SHIFT * sqrt(ss);
    for (int a = 0; a < attempt; a++) shift *= GEOFP8_RETRY_GROWTH;
    return shift;
}

// Yv (n) = (double)Y + ν Ω, as the CPU: ν of attempt `attempt`, or (attempt < 0) of the one that
// succeeded; with the fallback Yv = Ω, so that what follows stays finite (its results are unused).
__global__ void geofp8_nystrom_shift_kernel(double* Yv, const float* Y, const double* Om, size_t n, const GeoFP8RefreshReport* rep, int attempt) {
    const bool fallback = attempt < 0 && rep->status < 0;
    const double shift = attempt < 0 ? rep->shift : geofp8_attempt_shift(rep->ss, attempt);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) Yv[i] = fallback ? Om[i] : (double)Y[i] + shift * Om[i];
}

// M (k, k) <- (M + Mᵀ) / 2
__global__ void geofp8_symmetrize_kernel(double* M, int k) {
    int i = blockIdx.y * blockDim.y + threadIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= k || j >= k || j <= i) return;
    double s = 0.5 * (M[(size_t)i * k + j] + M[(size_t)j * k + i]);
    M[(size_t)i * k + j] = s;
    M[(size_t)j * k + i] = s;
}

// After every attempt's Cholesky factorization of M_a = Ωᵀ Y_ν(a) (Ma: attempt a's (k, k) at
// a k²): the first attempt that succeeded, as the CPU's retry loop takes it. Its factor goes to Mc,
// its ν and index to rep; with a non-finite or zero ‖Y‖, a non-finite tr(A) or no success, the
// status is -1 (the fallback) and Mc = I. One block.
__global__ void geofp8_nystrom_select_kernel(double* Mc, const double* Ma, int k, GeoFP8RefreshReport* rep, const double* trA) {
    __shared__ int chosen;
    if (threadIdx.x == 0) {
        const double normY = sqrt(rep->ss), tr = *trA;
        int status = -1;
        if (isfinite(normY) && isfinite(tr) && normY != 0.0)
            for (int a = 0; a <= GEOFP8_MAX_RETRIES && status < 0; a++) if (rep->info[a] == 0) status = a;
        rep->trA = tr;
        rep->status = status;
        rep->shift = status >= 0 ? geofp8_attempt_shift(rep->ss, status) : 0.0;
        chosen = status;
    }
    __syncthreads();
    const size_t kk = (size_t)k * k;
    for (size_t i = threadIdx.x; i < kk; i += blockDim.x) Mc[i] = chosen >= 0 ? Ma[(size_t)chosen * kk + i] : (i / k == i % k ? 1.0 : 0.0);
}

// After the eigensolver (K (k, k) column-major eigenvectors, w ascending): Vs (k × r, column-major)
// = the top r eigenvectors, descending, each over its σ, and λ (r) = max(σ² - ν, 0), as the CPU.
// A failed eigensolver makes it the fallback; the fallback's Vs is 0 and λ_i = max(tr A, 0) / d_in.
// One block.
__global__ void geofp8_nystrom_top_kernel(double* Vs, float* lambda, const double* K, const double* w, int k, int r, int d_in,
                                          GeoFP8RefreshReport* rep) {
    __shared__ int status;
    if (threadIdx.x == 0) {
        if (rep->eig_info != 0) rep->status = -1;
        status = rep->status;
    }
    __syncthreads();
    const double tr = rep->trA, iso = isfinite(tr) && tr > 0.0 ? tr / d_in : 0.0;
    for (int t = threadIdx.x; t < r; t += blockDim.x) {
        if (status < 0) {
            for (int i = 0; i < k; i++) Vs[(size_t)t * k + i] = 0.0;
            lambda[t] = (float)iso;
            continue;
        }
        const int j = k - 1 - t;
        const double sq = w[j] > 0.0 ? w[j] : 0.0;
        const double inv = sq > 0.0 ? 1.0 / sqrt(sq) : 0.0;
        for (int i = 0; i < k; i++) Vs[(size_t)t * k + i] = K[(size_t)j * k + i] * inv;
        const double l = sq - rep->shift;
        lambda[t] = (float)(l > 0.0 ? l : 0.0);
    }
}

// The factor's U (d_in, r) row-major: (float) Ud, or with the fallback Ω's first r columns.
__global__ void geofp8_nystrom_u_kernel(float* U, const double* Ud, const float* omega, int d_in, int k, int r, const GeoFP8RefreshReport* rep) {
    const bool fallback = rep->status < 0;
    const size_t n = (size_t)d_in * r, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        U[i] = fallback ? omega[(i / r) * k + i % r] : (float)Ud[i];
}

// The rest of the packed factor [U | D | c | ε] from λ (r): σ² (the fallback's is its λ), the
// power (power < 0: auto, from the energies e (r) along U and rep->total), then geofp8.h's
// coefficients; a zero or non-finite tr(A) gives the identity (U = 0, D = c = 1, ε = 0), as
// geofp8_factor_from_nystrom. One block; the scalars on thread 0.
__global__ void geofp8_nystrom_coef_kernel(float* factor, const float* lambda, const double* e, int d_in, int r, double power, double damping,
                                           GeoFP8RefreshReport* rep) {
    __shared__ bool identity;
    const size_t nu = (size_t)d_in * r;
    if (threadIdx.x == 0) {
        const double tr = rep->trA;
        const float s2 = rep->status < 0 ? lambda[0] : geofp8_residual_variance(tr, lambda, d_in, r);
        double p = power, q = 0.0;
        if (power < 0.0) p = geofp8_power_from_energy(e, rep->total, lambda, s2, d_in, r, damping * tr / d_in, &q);
        identity = !geofp8_factor_coefficients(factor + nu, factor + nu + r, factor + nu + r + 1, lambda, s2, tr, d_in, r, p, damping);
        if (identity) factor[nu + r] = 1.0f, factor[nu + r + 1] = 0.0f;
        rep->sigma2 = s2;
        rep->power = p;
        rep->q = q;
    }
    __syncthreads();
    if (!identity) return;
    for (size_t i = threadIdx.x; i < nu; i += blockDim.x) factor[i] = 0.0f;
    for (int i = threadIdx.x; i < r; i += blockDim.x) factor[nu + i] = 1.0f;
}

// S (n) <- b S + a Y in fp32 as the CPU writes it; with trA: *trS <- b *trS + a *trA in double.
__global__ void geofp8_ema_kernel(float* S, const float* Y, size_t n, float b, float a, double* trS, const double* trA) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) S[i] = __fadd_rn(__fmul_rn(b, S[i]), __fmul_rn(a, Y[i]));
    if (i == 0 && trS) *trS = (double)b * *trS + (double)a * *trA;
}

// Y (n) <- (float)(S · c) in double, *trA <- *trS · c: the bias-corrected average as the step's sketch.
__global__ void geofp8_ema_to_sketch_kernel(float* Y, const float* S, size_t n, double c, double* trA, const double* trS) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) Y[i] = (float)((double)S[i] * c);
    if (i == 0) *trA = *trS * c;
}

// cuSOLVER workspace for a (n, n) double matrix at A: dpotrf, and dsyevd when `eig`.
static inline void geofp8_reserve_solver(GeoFP8Device* g, double* A, int n, int eig) {
    int lwork = 0, lw2 = 0;
    CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(g->solver, CUBLAS_FILL_MODE_UPPER, n, A, n, &lwork));
    if (eig) {
        CUSOLVER_CHECK(cusolverDnDsyevd_bufferSize(g->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n, A, n, A, &lw2));
        lwork = std::max(lwork, lw2);
    }
    if (lwork > g->cap_solver) {
        if (g->solver_work) CUDA_CHECK(cudaFree(g->solver_work));
        g->solver_work = cuda_malloc<double>((size_t)lwork);
        g->cap_solver = lwork;
    }
}

// Doubles of geofp8_nystrom's scratch: Ω and Y_ν (d_in, k), every attempt's M and the chosen
// one's (k, k), the eigenvectors (k, k) and values (k), Vs (k, r), U (d_in, r).
static inline size_t geofp8_nystrom_doubles(int d_in, int k, int r) {
    return 2 * (size_t)d_in * k + (GEOFP8_MAX_RETRIES + 3) * (size_t)k * k + (size_t)k + (size_t)k * r + (size_t)d_in * r;
}

// e[j] (r) = Σ_i P[i, j]² over the rows of P (rows, r), in double: one block per column, fixed tree.
__global__ void geofp8_column_energy_kernel(double* e, const float* P, int rows, int r) {
    const int j = blockIdx.x;
    double acc = 0.0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) acc += (double)P[(size_t)i * r + j] * (double)P[(size_t)i * r + j];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) e[j] = acc;
}

// ---------------------------------------------------------------------------------------------
// 5. Two-sided K-FAC ablation

// Upper triangle (row-major, j >= i) of S (d, d) += weight xᵀ x, x (n, d) fp32; the lower
// triangle is not touched. Row-major upper = column-major lower of the same buffer, and x read
// column-major is xᵀ (d × n): ssyrk(LOWER, N, d, n) computes xᵀ x there.
static inline void geofp8_kfac_accumulate(GeoFP8Device* g, float* S, const float* x, int n, int d, float weight, cudaStream_t stream) {
    if (n <= 0) return;
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSetStream(g->blas, stream));
    CUBLAS_CHECK(cublasSsyrk(g->blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, d, n, &weight, x, d, &one, S, d));
}

// The same from bf16 x (n, d), widened to fp32 first (exact).
static inline void geofp8_kfac_accumulate(GeoFP8Device* g, float* S, const bf16* x, int n, int d, float weight, cudaStream_t stream) {
    if (n <= 0) return;
    const size_t nd = (size_t)n * d;
    geofp8_reserve(&g->widen, &g->cap_widen, nd);
    cuda_cast_to_float(g->widen, x, nd, stream);
    geofp8_kfac_accumulate(g, S, g->widen, n, d, weight, stream);
}

// a (d, d) double = sym(S) + eps I from S's upper triangle (row-major); symmetric, so the same
// array in either order
__global__ void geofp8_kfac_fill_kernel(double* a, const float* S, int d, double eps) {
    size_t n = (size_t)d * d, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        size_t i = idx / d, j = idx % d;
        size_t lo = i < j ? i : j, hi = i < j ? j : i;
        double v = (double)S[lo * d + hi];
        a[idx] = i == j ? v + eps : v;
    }
}

// L (row-major lower) from dpotrf(UPPER) of a column-major a: the column-major upper R (Sd = RᵀR)
// read row-major is Rᵀ = L (Sd = L Lᵀ); the other triangle still holds Sd and becomes 0.
__global__ void geofp8_kfac_lower_kernel(float* L, const double* a, int d) {
    size_t n = (size_t)d * d, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) {
        size_t i = idx / d, j = idx % d;
        L[idx] = i >= j ? (float)a[idx] : 0.0f;
    }
}

__global__ void geofp8_identity_kernel(float* L, int d) {
    size_t n = (size_t)d * d, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += stride) L[idx] = idx / d == idx % d ? 1.0f : 0.0f;
}

// L (d, d) row-major lower = chol(sym(S) + ε I), ε = 1e-3 tr(S)/d, from S's upper triangle, in
// double on cuSOLVER (dpotrf); as geofp8_kfac_factor: returns 0, the number of retries (ε × 100
// each), or -1 with L = I (tr(S) zero or non-finite, or every retry failed). tr(S) is summed on
// the host in index order, so ε is bitwise the CPU's. Run on rank 0, then broadcast L.
// Synchronizes the stream.
static inline int geofp8_kfac_factor(GeoFP8Device* g, float* L, const float* S, int d, cudaStream_t stream) {
    const size_t dd = (size_t)d * d;
    std::vector<float> diag(d);
    CUDA_CHECK(cudaMemcpy2DAsync(diag.data(), sizeof(float), S, (size_t)(d + 1) * sizeof(float), sizeof(float), (size_t)d,
                                 cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    double tr = 0.0;
    for (int i = 0; i < d; i++) tr += (double)diag[i];
    auto identity = [&]() {
        geofp8_identity_kernel<<<cuda_grid_for(dd, 256), 256, 0, stream>>>(L, d);
        KERNEL_CHECK();
        return -1;
    };
    if (!(tr > 0.0) || !std::isfinite(tr)) return identity();
    geofp8_reserve(&g->dwork, &g->cap_dwork, dd);
    geofp8_reserve_solver(g, g->dwork, d, 0);
    CUSOLVER_CHECK(cusolverDnSetStream(g->solver, stream));
    double eps = GEOFP8_DAMPING * tr / d;
    int retries = 0;
    for (int attempt = 0;; attempt++) {
        if (attempt > GEOFP8_MAX_RETRIES) return identity();
        geofp8_kfac_fill_kernel<<<cuda_grid_for(dd, 256), 256, 0, stream>>>(g->dwork, S, d, eps);
        KERNEL_CHECK();
        CUSOLVER_CHECK(cusolverDnDpotrf(g->solver, CUBLAS_FILL_MODE_UPPER, d, g->dwork, d, g->solver_work, g->cap_solver, g->info));
        int info = 0;
        CUDA_CHECK(cudaMemcpyAsync(&info, g->info, sizeof(int), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        if (info == 0) break;
        eps *= GEOFP8_RETRY_GROWTH;
        retries++;
    }
    geofp8_kfac_lower_kernel<<<cuda_grid_for(dd, 256), 256, 0, stream>>>(L, g->dwork, d);
    KERNEL_CHECK();
    return retries;
}

// G (d_out, d_in) <- LG⁻¹ G LA⁻ᵀ in place; LG (d_out, d_out), LA (d_in, d_in) row-major lower, either
// may be NULL (that side skipped). Read column-major, G is Gᵀ (d_in × d_out) and a row-major
// lower L is the upper Lᵀ:
//   G <- LG⁻¹ G    ⇔  Gᵀ <- Gᵀ LG⁻ᵀ = Gᵀ (LGᵀ)⁻¹  -> strsm(RIGHT, UPPER, N, m=d_in, n=d_out, LG ld d_out)
//   G <- G LA⁻ᵀ    ⇔  Gᵀ <- LA⁻¹ Gᵀ = ((LAᵀ)ᵀ)⁻¹ Gᵀ -> strsm(LEFT, UPPER, T, m=d_in, n=d_out, LA ld d_in)
static inline void geofp8_kfac_whiten(GeoFP8Device* g, float* G, int d_out, int d_in, const float* LG, const float* LA,
                                      cudaStream_t stream) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSetStream(g->blas, stream));
    if (LG)
        CUBLAS_CHECK(cublasStrsm(g->blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, d_in, d_out, &one,
                                 LG, d_out, G, d_in));
    if (LA)
        CUBLAS_CHECK(cublasStrsm(g->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, d_in, d_out, &one,
                                 LA, d_in, G, d_in));
}

// G̃ (d_out, d_in) <- LG G̃ LAᵀ in place (the inverse of geofp8_kfac_whiten), strmm with C = B:
//   G <- LG G      ⇔  Gᵀ <- Gᵀ LGᵀ   -> strmm(RIGHT, UPPER, N, m=d_in, n=d_out, LG ld d_out)
//   G <- G LAᵀ     ⇔  Gᵀ <- LA Gᵀ    -> strmm(LEFT, UPPER, T, m=d_in, n=d_out, LA ld d_in)
static inline void geofp8_kfac_unwhiten(GeoFP8Device* g, float* Gt, int d_out, int d_in, const float* LG, const float* LA,
                                        cudaStream_t stream) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSetStream(g->blas, stream));
    if (LG)
        CUBLAS_CHECK(cublasStrmm(g->blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, d_in, d_out, &one,
                                 LG, d_out, Gt, d_in, Gt, d_in));
    if (LA)
        CUBLAS_CHECK(cublasStrmm(g->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, d_in, d_out, &one,
                                 LA, d_in, Gt, d_in, Gt, d_in));
}

// ---------------------------------------------------------------------------------------------
// 6. GeoFP8Device: setup, the refresh, and the step phases
//
// A step of -c fp8 / fp8block / geofp8 / kfac, native reduction (gradcomm_launch, gradcomm_fp8_send, gradcomm_finish):
//   geofp8_device_begin(g, grads, geometry, s)          = geofp8_device_whiten (geometry units: X = G T + R,
//                                                          when geometry) + geofp8_device_amax
//   comm_gpu_allreduce_f32_max(grid, g->amax, g->amax, g->num_groups)
//   geofp8_device_scales(g, s)                           scales; g->skip
//   geofp8_device_quantize(g, grads, geometry, s)        codes into g->q, residuals, counts
//   comm_gpu_allreduce_fp8_sum(grid, g->q, g->q, g->num_params, g->fmt)
//   geofp8_device_finish(g, grads, geometry, s)          = geofp8_device_dequantize (decode / (s N),
//                                                          sum_saturated) + geofp8_device_unwhiten (when geometry)
// (the trainer, llmc/gradcomm.cuh, calls the four parts itself, one timer span each)
//   comm_gpu_allreduce_u64_sum(grid, g->counts, g->counts, 3 * num_units)   (not sum_saturated)
// twophase (gradcomm_twophase): begin; scales (local, N = 1); comm_gpu_allreduce_f32_max(g->skip, 1);
//   quantize; comm_gpu_allgather_bytes(g->exps -> g->exps_all, 4 U); comm_gpu_alltoall_bytes(g->q ->
//   g->recv, shard_size); geofp8_device_twophase_server; comm_gpu_allgather_bytes(g->mine -> g->q,
//   shard_size) and (g->server_exps -> g->server_exps_all, 4 U); geofp8_device_twophase_finish.
// The refresh (geofp8_device_refresh_*) runs before `begin` on refresh steps.

// Sets up the unit table and the FP8 buffers. offset/size: every unit of the flat buffer (for
// the trainer, llama_units(): unit indices then match the CPU engine's). block_mode: fp8block;
// fmt: the FP8 format of the codes (--fp8-format).
static inline void geofp8_device_init(GeoFP8Device* g, const std::vector<size_t>& offset, const std::vector<size_t>& size,
                                      size_t num_params, int world_size, int rank, int block_mode, int twophase, Fp8Format fmt) {
    if (block_mode && twophase) {  // gradcomm_init refuses it too: per-block scales are synchronized
        fprintf(stderr, "geofp8_device_init: fp8block works with the native reduction only\n");
        exit(1);
    }
    *g = GeoFP8Device();  // value-initialized: every pointer NULL, every count 0
    CUBLAS_CHECK(cublasCreate(&g->blas));
    CUBLAS_CHECK(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH));  // fp32 / fp64 as asked: no TF32
    CUSOLVER_CHECK(cusolverDnCreate(&g->solver));
    geofp8_units_create(&g->units, offset, size);
    const int U = g->units.dev.num_units;
    g->num_params = num_params;
    g->world_size = world_size;
    g->rank = rank;
    g->block_mode = block_mode;
    g->twophase = twophase;
    g->fmt = fmt;
    g->num_groups = block_mode ? g->units.num_blocks : U;
    g->shard_size = (num_params + world_size - 1) / world_size;
    size_t qbytes = twophase ? g->shard_size * world_size : num_params;
    g->q = cuda_malloc<uint8_t>(qbytes);
    CUDA_CHECK(cudaMemset(g->q, 0, std::max<size_t>(qbytes, 1)));
    g->amax = cuda_malloc<float>(g->num_groups);
    g->scale = cuda_malloc<float>(g->num_groups);
    g->exps = cuda_malloc<int>(g->num_groups);
    g->skip = cuda_malloc<float>(1);
    CUDA_CHECK(cudaMemset(g->skip, 0, sizeof(float)));
    g->counts = cuda_malloc<unsigned long long>(4 * (size_t)std::max(U, 1));
    CUDA_CHECK(cudaMemset(g->counts, 0, 4 * (size_t)std::max(U, 1) * sizeof(unsigned long long)));
    g->residual_table = cuda_malloc<float*>(U);
    CUDA_CHECK(cudaMemset(g->residual_table, 0, (size_t)std::max(U, 1) * sizeof(float*)));
    g->unit_to_geo.assign(U, -1);
    g->coef = cuda_malloc<float>(GEOFP8_MAX_RANK + 1);
    g->lambda = cuda_malloc<float>(GEOFP8_MAX_RANK);
    g->omega = new GeoFP8OmegaBuilder();
    CUDA_CHECK(cudaEventCreateWithFlags(&g->pinned_done, cudaEventDisableTiming));
    g->dsum = cuda_malloc<double>(1);
    g->info = cuda_malloc<int>(1);
    if (!twophase) return;
    // this rank's shard and its segments (gradcomm_twophase's shard_off / shard_len)
    const size_t lo = std::min(num_params, (size_t)rank * g->shard_size);
    const size_t hi = std::min(num_params, (size_t)(rank + 1) * g->shard_size);
    std::vector<size_t> so, ss;
    for (int u = 0; u < U; u++) {
        size_t a = std::max(offset[u], lo), b = std::min(offset[u] + size[u], hi);
        if (a >= b) continue;
        so.push_back(a - lo);
        ss.push_back(b - a);
        g->h_seg_unit.push_back(u);
    }
    geofp8_units_create(&g->shard, so, ss);
    const int S = (int)so.size();
    g->seg_unit = geofp8_upload(g->h_seg_unit.data(), g->h_seg_unit.size());
    const size_t N = (size_t)world_size, sh = g->shard_size;
    g->recv = cuda_malloc<uint8_t>(N * sh);
    g->server_sum = cuda_malloc<float>(sh);
    g->server_residual = cuda_malloc<float>(sh);
    CUDA_CHECK(cudaMemset(g->server_residual, 0, std::max<size_t>(sh, 1) * sizeof(float)));
    g->mine = cuda_malloc<uint8_t>(sh);
    CUDA_CHECK(cudaMemset(g->mine, 0, std::max<size_t>(sh, 1)));
    std::vector<float*> table(S);
    for (int s = 0; s < S; s++) table[s] = g->server_residual + so[s];
    g->server_residual_table = geofp8_upload(table.data(), table.size());
    g->seg_amax = cuda_malloc<float>(S);
    g->seg_scale = cuda_malloc<float>(S);
    g->seg_exps = cuda_malloc<int>(S);
    g->server_skip = cuda_malloc<float>(1);
    g->exps_all = cuda_malloc<int>(N * U);
    g->server_exps = cuda_malloc<int>(U);
    g->server_exps_all = cuda_malloc<int>(N * U);
}

// Puts unit `unit` (a (d_out, d_in) matrix) on the geometry path: identity transform, zero
// residual; rank r = min(rank_r, d_in) (low-rank) or two-sided K-FAC (kfac = 1). Returns the
// index into g->geo. Reserves the refresh scratch so the step itself never allocates.
static inline int geofp8_device_add_unit(GeoFP8Device* g, int unit, int d_out, int d_in, int rank_r, int kfac) {
    if (unit < 0 || unit >= g->units.dev.num_units || (size_t)d_out * d_in != g->units.size[unit] || g->unit_to_geo[unit] >= 0) {
        fprintf(stderr, "geofp8_device_add_unit: unit %d (%d x %d) does not match the unit table or is already added\n", unit, d_out, d_in);
        exit(1);
    }
    GeoFP8DeviceUnit gu;
    memset(&gu, 0, sizeof(gu));
    gu.unit = unit;
    gu.d_out = d_out;
    gu.d_in = d_in;
    gu.kfac = kfac;
    const size_t n = (size_t)d_out * d_in;
    gu.residual = cuda_malloc<float>(n);
    CUDA_CHECK(cudaMemset(gu.residual, 0, n * sizeof(float)));
    if (kfac) {
        const size_t nin = (size_t)d_in * d_in, nout = (size_t)d_out * d_out;
        gu.A = cuda_malloc<float>(nin);
        gu.Gs = cuda_malloc<float>(nout);
        gu.LA = cuda_malloc<float>(nin);
        gu.LG = cuda_malloc<float>(nout);
        gu.LA_next = cuda_malloc<float>(nin);
        gu.LG_next = cuda_malloc<float>(nout);
        geofp8_identity_kernel<<<cuda_grid_for(nin, 256), 256>>>(gu.LA, d_in);
        KERNEL_CHECK();
        geofp8_identity_kernel<<<cuda_grid_for(nout, 256), 256>>>(gu.LG, d_out);
        KERNEL_CHECK();
        const int dmax = std::max(d_in, d_out);
        geofp8_reserve(&g->dwork, &g->cap_dwork, (size_t)dmax * dmax);
        geofp8_reserve_solver(g, g->dwork, dmax, 0);
    } else {
        gu.r = std::min(rank_r, d_in);
        gu.k = geofp8_sketch_width(gu.r, d_in);
        if (gu.r < 1 || gu.r > GEOFP8_MAX_RANK) { fprintf(stderr, "geofp8_device_add_unit: rank %d out of [1, %d]\n", gu.r, GEOFP8_MAX_RANK); exit(1); }
        const size_t nf = geofp8_factor_floats(d_in, gu.r), dk = (size_t)d_in * gu.k;
        GeoFP8Factor f;
        geofp8_factor_identity(&f, d_in, gu.r);
        std::vector<float> packed(nf);
        geofp8_factor_pack(packed.data(), &f);
        gu.factor = cuda_upload(packed.data(), nf);
        gu.factor_next = cuda_upload(packed.data(), nf);
        gu.omega = cuda_malloc<float>(dk);
        gu.Y = cuda_malloc<float>(dk);
        gu.trA = cuda_malloc<double>(1);
        CUDA_CHECK(cudaMemset(gu.Y, 0, dk * sizeof(float)));
        CUDA_CHECK(cudaMemset(gu.trA, 0, sizeof(double)));
        geofp8_reserve(&g->P, &g->cap_P, (size_t)d_out * gu.r);
        geofp8_reserve(&g->dwork, &g->cap_dwork, geofp8_nystrom_doubles(d_in, gu.k, gu.r));
        geofp8_reserve_solver(g, g->dwork, gu.k, 1);
        CUDA_CHECK(cudaMallocHost((void**)&gu.omega_host, dk * sizeof(float)));
        CUDA_CHECK(cudaMallocHost((void**)&gu.U_host, (size_t)d_in * gu.r * sizeof(float)));
        gu.U_host_version = -1;
    }
    if (g->residual_next_table) {
        gu.residual_next = cuda_malloc<float>(n);
        CUDA_CHECK(cudaMemset(gu.residual_next, 0, n * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(g->residual_next_table + unit, &gu.residual_next, sizeof(float*), cudaMemcpyHostToDevice));
    }
    g->unit_to_geo[unit] = (int)g->geo.size();
    g->geo.push_back(gu);
    if (g->geo.size() + 1 > g->cap_reports) {  // one report per unit and geofp8_nystrom's own
        if (g->reports) {
            CUDA_CHECK(cudaFree(g->reports));
            CUDA_CHECK(cudaFreeHost(g->reports_host));
        }
        g->cap_reports = 2 * g->geo.size() + 1;
        g->reports = cuda_malloc<GeoFP8RefreshReport>(g->cap_reports);
        CUDA_CHECK(cudaMallocHost((void**)&g->reports_host, g->cap_reports * sizeof(GeoFP8RefreshReport)));
    }
    CUDA_CHECK(cudaMemcpy(g->residual_table + unit, &gu.residual, sizeof(float*), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
    return (int)g->geo.size() - 1;
}

// Activation scratch for micro-batches of n tokens at most (optional: the refresh grows it on
// demand otherwise).
static inline void geofp8_device_reserve_tokens(GeoFP8Device* g, int n) {
    int dmax = 0, kmax = 0;
    for (const GeoFP8DeviceUnit& gu : g->geo) {
        dmax = std::max(dmax, std::max(gu.d_in, gu.kfac ? gu.d_out : 0));
        kmax = std::max(kmax, gu.k);
    }
    geofp8_reserve(&g->widen, &g->cap_widen, (size_t)n * dmax);
    geofp8_reserve(&g->Z, &g->cap_Z, (size_t)n * kmax);
    geofp8_reserve(&g->rows, &g->cap_rows, (size_t)n);
}

static inline void geofp8_device_free(GeoFP8Device* g) {
    delete g->omega;  // waits for a build in flight, which writes omega_host
    for (GeoFP8DeviceUnit& gu : g->geo) {
        if (gu.omega_host) CUDA_CHECK(cudaFreeHost(gu.omega_host));
        if (gu.U_host) CUDA_CHECK(cudaFreeHost(gu.U_host));
        void* bufs[] = {gu.factor, gu.factor_next, gu.residual, gu.residual_next, gu.omega, gu.Y, gu.trA, gu.A, gu.Gs, gu.LA, gu.LG, gu.LA_next, gu.LG_next,
                        gu.Y_ema, gu.trA_ema};
        for (void* b : bufs) if (b) CUDA_CHECK(cudaFree(b));
    }
    g->geo.clear();
    void* bufs[] = {g->q, g->amax, g->scale, g->exps, g->skip, g->counts, g->residual_table, g->residual_next_table, g->P, g->coef, g->widen, g->Z, g->rows,
                    g->dsum, g->dwork, g->solver_work, g->info, g->seg_unit, g->recv, g->server_sum, g->server_residual,
                    g->server_residual_table, g->mine, g->seg_amax, g->seg_scale, g->seg_exps, g->server_skip, g->exps_all, g->server_exps,
                    g->server_exps_all, g->reports, g->lambda};
    for (void* b : bufs) if (b) CUDA_CHECK(cudaFree(b));
    if (g->reports_host) CUDA_CHECK(cudaFreeHost(g->reports_host));
    if (g->pinned_done) CUDA_CHECK(cudaEventDestroy(g->pinned_done));
    geofp8_units_free(&g->units);
    if (g->twophase) geofp8_units_free(&g->shard);
    if (g->blas) CUBLAS_CHECK(cublasDestroy(g->blas));
    if (g->solver) CUSOLVER_CHECK(cusolverDnDestroy(g->solver));
    *g = GeoFP8Device();
}

// --- the step phases ---

static inline float* geofp8_device_unit_ptr(GeoFP8Device* g, float* x, const GeoFP8DeviceUnit& gu) {
    return x + g->units.offset[gu.unit];
}

// x (num_params): with `geometry`, every geometry unit becomes X = G T + R in place; then the
// counters are zeroed and g->amax (num_groups) gets the local amax of every scale group.
// X = G T + R, one geometry unit; R = gu.residual, or residual_next after a refresh into it
static inline void geofp8_device_whiten_unit(GeoFP8Device* g, int gi, float* x, cudaStream_t stream, int residual_next = 0) {
    const GeoFP8DeviceUnit& gu = g->geo[gi];
    float* xu = geofp8_device_unit_ptr(g, x, gu);
    if (gu.kfac) geofp8_kfac_whiten(g, xu, gu.d_out, gu.d_in, gu.LG, gu.LA, stream);
    else geofp8_whiten(g, xu, gu.d_out, gu.d_in, gu.factor, gu.r, stream);
    geofp8_residual_add(xu, residual_next ? gu.residual_next : gu.residual, (size_t)gu.d_out * gu.d_in, stream);
}

static inline void geofp8_device_unwhiten_unit(GeoFP8Device* g, int gi, float* x, cudaStream_t stream) {  // G = X T⁻¹, one geometry unit
    const GeoFP8DeviceUnit& gu = g->geo[gi];
    float* xu = geofp8_device_unit_ptr(g, x, gu);
    if (gu.kfac) geofp8_kfac_unwhiten(g, xu, gu.d_out, gu.d_in, gu.LG, gu.LA, stream);
    else geofp8_unwhiten(g, xu, gu.d_out, gu.d_in, gu.factor, gu.r, stream);
}

static inline void geofp8_device_whiten(GeoFP8Device* g, float* x, cudaStream_t stream) {  // every geometry unit
    for (size_t gi = 0; gi < g->geo.size(); gi++) geofp8_device_whiten_unit(g, (int)gi, x, stream);
}

static inline void geofp8_device_amax(GeoFP8Device* g, const float* x, cudaStream_t stream) {  // g->amax, counts zeroed
    CUDA_CHECK(cudaMemsetAsync(g->counts, 0, 4 * (size_t)g->units.dev.num_units * sizeof(unsigned long long), stream));
    if (g->block_mode) geofp8_block_amax_units(g->amax, x, &g->units, stream);
    else geofp8_amax_units(g->amax, x, &g->units, stream);
}

static inline void geofp8_device_begin(GeoFP8Device* g, float* x, int geometry, cudaStream_t stream) {
    if (geometry) geofp8_device_whiten(g, x, stream);
    geofp8_device_amax(g, x, stream);
}

// g->scale, g->exps, g->skip from g->amax: with N = world_size after the MAX all-reduce (native),
// with N = 1 on the local amax (twophase).
static inline void geofp8_device_scales(GeoFP8Device* g, cudaStream_t stream) {
    geofp8_block_scales(g->fmt, g->scale, g->exps, g->skip, g->amax, (size_t)g->num_groups, g->twophase ? 1 : g->world_size, stream);
}

// g->q = codes of x; with error_feedback, the geometry units' residuals are rewritten; the
// counts (saturated, underflow, nonzero) accumulate. Nothing happens when *g->skip != 0.
static inline void geofp8_device_quantize(GeoFP8Device* g, const float* x, int error_feedback, cudaStream_t stream) {
    geofp8_quantize_ef_units(g->fmt, g->q, error_feedback ? g->residual_table : NULL, x, g->scale, g->block_mode, &g->units, g->counts, g->skip,
                             stream);
}

// After the FP8 SUM all-reduce of g->q: x = decode(q) / (s N), sum_saturated counts; with
// `geometry`, every geometry unit is mapped back with T⁻¹.
static inline void geofp8_device_dequantize(GeoFP8Device* g, float* x, cudaStream_t stream) {
    geofp8_dequantize_units(g->fmt, x, g->q, g->scale, g->block_mode, g->world_size, &g->units, g->counts + 3 * (size_t)g->units.dev.num_units,
                            stream);
}

static inline void geofp8_device_unwhiten(GeoFP8Device* g, float* x, cudaStream_t stream) {  // every geometry unit
    for (size_t gi = 0; gi < g->geo.size(); gi++) geofp8_device_unwhiten_unit(g, (int)gi, x, stream);
}

static inline void geofp8_device_finish(GeoFP8Device* g, float* x, int geometry, cudaStream_t stream) {
    geofp8_device_dequantize(g, x, stream);
    if (geometry) geofp8_device_unwhiten(g, x, stream);
}

// twophase, after the all-to-all (g->recv) and the all-gather of the local exponents
// (g->exps_all): sum this rank's shard in rank order (+ server residual), re-quantize each
// segment with its own scale (N = 1) into g->mine, keep the new server residual, and write the
// server exponents (g->server_exps, 0 for units outside the shard).
static inline void geofp8_device_twophase_server(GeoFP8Device* g, cudaStream_t stream) {
    const int U = g->units.dev.num_units, S = g->shard.dev.num_units;
    geofp8_twophase_sum(g->fmt, g->server_sum, g->recv, g->shard_size, g->exps_all, g->world_size, U, g->server_residual, &g->shard, g->seg_unit,
                        stream);
    geofp8_amax_units(g->seg_amax, g->server_sum, &g->shard, stream);
    // every input is finite (the local amax were), so server_skip stays 0 (gradcomm_twophase's
    // "cannot happen"); it has its own slot so that g->skip keeps the step's decision
    geofp8_block_scales(g->fmt, g->seg_scale, g->seg_exps, g->server_skip, g->seg_amax, (size_t)S, 1, stream);
    geofp8_quantize_ef_units(g->fmt, g->mine, g->server_residual_table, g->server_sum, g->seg_scale, 0, &g->shard, NULL, NULL, stream);
    geofp8_scatter_exps(g->server_exps, U, g->seg_exps, g->seg_unit, S, stream);
}

// twophase, after the all-gathers of g->mine into g->q and g->server_exps into
// g->server_exps_all: x = decode(q) / (s N) with the server scales; unwhiten as in finish.
static inline void geofp8_device_twophase_finish(GeoFP8Device* g, float* x, int geometry, cudaStream_t stream) {
    geofp8_twophase_dequantize(g->fmt, x, g->q, g->server_exps_all, g->shard_size, g->world_size, &g->units, stream);
    if (geometry) geofp8_device_unwhiten(g, x, stream);
}

// --- the step phases on a range of units [lo, hi) (bucketed communication, native sum) ---
// A step: geofp8_device_step_begin, then per range (`r` = geofp8_units_create_range(&g->units,
// lo, hi), ranges in any order): [whiten its geometry units] | geofp8_device_amax_range |
// comm_gpu_allreduce_f32_max of its groups (geofp8_device_first_group, _num_groups) |
// geofp8_device_scales_range | geofp8_device_quantize_range | FP8 SUM of its units' codes |
// geofp8_device_dequantize_range | [unwhiten]; then the u64 SUM of the counts and
// geofp8_device_read_stats, as a whole step. Each range computes exactly what the whole-buffer
// phases compute on its units (bitwise), with one difference: the quantizer writes the new
// residuals into residual_next (geofp8_device_double_buffer), and nothing of this step is kept
// until geofp8_device_swap_residuals, so a step skipped after some ranges went out loses nothing.

// Gives every geometry unit (and every one added later) a second residual buffer.
static inline void geofp8_device_double_buffer(GeoFP8Device* g) {
    if (g->residual_next_table) return;
    const int U = g->units.dev.num_units;
    g->residual_next_table = cuda_malloc<float*>(U);
    CUDA_CHECK(cudaMemset(g->residual_next_table, 0, (size_t)std::max(U, 1) * sizeof(float*)));
    for (GeoFP8DeviceUnit& gu : g->geo) {
        const size_t n = (size_t)gu.d_out * gu.d_in;
        gu.residual_next = cuda_malloc<float>(n);
        CUDA_CHECK(cudaMemset(gu.residual_next, 0, n * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(g->residual_next_table + gu.unit, &gu.residual_next, sizeof(float*), cudaMemcpyHostToDevice));
    }
}

// The residuals the quantizer wrote this step become the ones in use.
static inline void geofp8_device_swap_residuals(GeoFP8Device* g) {
    for (GeoFP8DeviceUnit& gu : g->geo) std::swap(gu.residual, gu.residual_next);
    std::swap(g->residual_table, g->residual_next_table);
}

static inline int geofp8_device_first_group(const GeoFP8Device* g, int lo) { return g->block_mode ? g->units.first_block[lo] : lo; }
static inline int geofp8_device_num_groups(const GeoFP8Device* g, int lo, int hi) {
    return g->block_mode ? g->units.first_block[hi] - g->units.first_block[lo] : hi - lo;
}

static inline void geofp8_device_step_begin(GeoFP8Device* g, cudaStream_t stream) {  // counts and skip zeroed
    CUDA_CHECK(cudaMemsetAsync(g->counts, 0, 4 * (size_t)g->units.dev.num_units * sizeof(unsigned long long), stream));
    CUDA_CHECK(cudaMemsetAsync(g->skip, 0, sizeof(float), stream));
}

static inline void geofp8_device_amax_range(GeoFP8Device* g, const float* x, const GeoFP8UnitTable* r, int lo, cudaStream_t stream) {
    float* amax = g->amax + geofp8_device_first_group(g, lo);
    if (g->block_mode) geofp8_block_amax_units(amax, x, r, stream);
    else geofp8_amax_units(amax, x, r, stream);
}

// after the MAX all-reduce of the range's groups; a non-finite amax sets *g->skip (never clears it)
static inline void geofp8_device_scales_range(GeoFP8Device* g, const GeoFP8UnitTable* r, int lo, cudaStream_t stream) {
    const int first = geofp8_device_first_group(g, lo), n = g->block_mode ? r->num_blocks : r->dev.num_units;
    geofp8_block_scales_more(g->fmt, g->scale + first, g->exps + first, g->skip, g->amax + first, (size_t)n, g->world_size, stream);
}

static inline void geofp8_device_quantize_range(GeoFP8Device* g, const float* x, const GeoFP8UnitTable* r, int lo, int error_feedback,
                                                cudaStream_t stream) {
    float* const* res = error_feedback ? g->residual_next_table + lo : NULL;
    geofp8_quantize_ef_units(g->fmt, g->q, res, x, g->scale + geofp8_device_first_group(g, lo), g->block_mode, r, g->counts + lo, NULL,
                             stream);
}

static inline void geofp8_device_dequantize_range(GeoFP8Device* g, float* x, const GeoFP8UnitTable* r, int lo, cudaStream_t stream) {
    geofp8_dequantize_units(g->fmt, x, g->q, g->scale + geofp8_device_first_group(g, lo), g->block_mode, g->world_size, r,
                            g->counts + 3 * (size_t)g->units.dev.num_units + lo, stream);
}

// Host copies of the step's figures (synchronizes): per unit saturated, underflow, nonzero,
// sum_saturated (any may be NULL), and whether the step must be skipped.
static inline bool geofp8_device_read_stats(GeoFP8Device* g, long* saturated, long* underflow, long* nonzero, long* sum_saturated,
                                            cudaStream_t stream) {
    const size_t U = (size_t)g->units.dev.num_units;
    std::vector<unsigned long long> c(4 * U);
    float skip = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(c.data(), g->counts, c.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(&skip, g->skip, sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    long* outs[4] = {saturated, underflow, nonzero, sum_saturated};
    for (int k = 0; k < 4; k++)
        if (outs[k]) for (size_t u = 0; u < U; u++) outs[k][u] = (long)c[k * U + u];
    return skip != 0.0f;
}
