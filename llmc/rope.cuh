// rope.cuh — rotary position embedding on the GPU, half-split ("rotate_half") convention, theta
// ROPE_THETA. CPU reference: rope.h (the cos/sin tables come from rope_precompute_cpu, in double,
// uploaded once, so both engines rotate by the same fp32 angles).
// For pair i in [0, HS/2) of a q or k head at position t:
//   out[i] = x1*cos - x2*sin;  out[i + HS/2] = x2*cos + x1*sin   (x1 = x[i], x2 = x[i + HS/2])
// Shapes: cos_table, sin_table (T, HS/2) fp32; inp, out, dinp, dout (B, T, (NH + 2*NKV) * HS) in the
// qkv column order (NH q heads, NKV k heads, NKV v heads), bf16 or fp32 (template).
// Conventions: forward and backward both WRITE (=) and may run in place (out == inp): each thread
// reads its pair before writing it. v heads are copied when out != inp. The backward rotates by
// -angle (the transpose).
// Precision: fp32 math, one rounding on the store. Stream: the stream argument.
// Kernels: rope_rotate_kernel gives each thread a run of 16 bytes of x1 (8 bf16 or 4 fp32 pairs)
// and the matching 16 bytes of x2, with the cos / sin runs in 16-byte loads, and splits its index
// with 32-bit divisions where the index fits (every preset's shape: llama300m's B=4, T=4096 has
// 2^21 runs). rope_rotate_scalar_kernel (one pair per thread, 64-bit index math: the kernel as it
// was first written, 2-byte accesses) serves the shapes and pointers the runs do not fit (HS/2
// not a multiple of the run, or a buffer off 16 bytes); both round through rope_pair, so they give
// the same bits (dev/cuda/rope.cu checks it, and times the one against the other).
#pragma once
#include "cuda_common.cuh"
#include "rope.h"

static const int ROPE_BLOCK = 256;

template <typename Tio>
__device__ __forceinline__ float rope_load(const Tio* p) { return (float)*p; }
template <>
__device__ __forceinline__ float rope_load<bf16>(const bf16* p) { return __bfloat162float(*p); }
template <typename Tio>
__device__ __forceinline__ Tio rope_cast(float x) { return (Tio)x; }
template <>
__device__ __forceinline__ bf16 rope_cast<bf16>(float x) { return __float2bfloat16(x); }

// y1 = x1*c - x2*s, y2 = x2*c + x1*s: the one place both kernels round, so they agree bitwise.
// Each is written out as a fused multiply-add onto the other product rounded: left to the
// compiler, which of the two products it fuses differs between the kernels (seen on an H200), and
// so would the bits.
__device__ __forceinline__ void rope_pair(float x1, float x2, float c, float s, float* y1, float* y2) {
    *y1 = __fmaf_rn(x1, c, -__fmul_rn(x2, s));
    *y2 = __fmaf_rn(x2, c, __fmul_rn(x1, s));
}

// One thread per (token, q-or-k head, pair); sign = +1 forward, -1 backward (rope_rotate).
// out, inp (N, (NH + 2*NKV) * HS), cos_table, sin_table (T, HS/2)
template <typename Tio>
__global__ void rope_rotate_scalar_kernel(Tio* out, const Tio* inp, const float* cos_table, const float* sin_table,
                                          int N, int T, int NH, int NKV, int HS, float sign) {
    int half = HS / 2, heads = NH + NKV;
    size_t total = (size_t)N * heads * half;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    for (; idx < total; idx += stride) {
        int i = (int)(idx % half);
        int h = (int)((idx / half) % heads);
        size_t n = idx / ((size_t)half * heads);
        int t = (int)(n % T);
        size_t base = n * row + (size_t)h * HS + i;
        float c = cos_table[(size_t)t * half + i], s = sign * sin_table[(size_t)t * half + i];
        float x1 = rope_load(inp + base), x2 = rope_load(inp + base + half);
        float y1, y2;
        rope_pair(x1, x2, c, s, &y1, &y2);
        out[base] = rope_cast<Tio>(y1);
        out[base + half] = rope_cast<Tio>(y2);
    }
}

// One thread per (token, q-or-k head, run of ROPE_RUN pairs); Idx the index type: uint32_t where
// N * (NH + NKV) * HS/2 / run < 2^31, so the two divisions per run are 32-bit, else size_t.
// Needs HS/2 % run == 0 and 16-byte aligned buffers (rope_rotate checks).
// out, inp (N, (NH + 2*NKV) * HS), cos_table, sin_table (T, HS/2)
template <typename Tio, typename Idx>
__global__ void rope_rotate_kernel(Tio* out, const Tio* inp, const float* cos_table, const float* sin_table,
                                   int N, int T, int NH, int NKV, int HS, float sign) {
    constexpr int RUN = Packed128<Tio>::size;  // pairs per thread: 8 bf16, 4 fp32
    const Idx half = (Idx)(HS / 2), runs = half / RUN, per_token = (Idx)(NH + NKV) * runs;
    const Idx total = (Idx)N * per_token, stride = (Idx)gridDim.x * blockDim.x;
    const size_t row = (size_t)(NH + 2 * NKV) * HS;
    for (Idx idx = (Idx)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        Idx n = idx / per_token, r = idx - n * per_token;
        Idx h = r / runs, i = (r - h * runs) * RUN;
        Idx t = n % (Idx)T;
        size_t base = (size_t)n * row + (size_t)h * HS + i;
        Packed128<Tio> x1 = load128(inp + base), x2 = load128(inp + base + half), y1, y2;
        const float* cp = cos_table + (size_t)t * half + i;
        const float* sp = sin_table + (size_t)t * half + i;
#pragma unroll
        for (int k0 = 0; k0 < RUN; k0 += 4) {
            Packed128<float> c = load128(cp + k0), s = load128(sp + k0);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float a, b;
                rope_pair(rope_load(&x1[k0 + k]), rope_load(&x2[k0 + k]), c[k], sign * s[k], &a, &b);
                y1[k0 + k] = rope_cast<Tio>(a);
                y2[k0 + k] = rope_cast<Tio>(b);
            }
        }
        store128(out + base, y1);
        store128(out + base + half, y2);
    }
}

// out, inp (N, (NH + 2*NKV) * HS): the v heads
template <typename Tio>
__global__ void rope_copy_v_kernel(Tio* out, const Tio* inp, int N, int NH, int NKV, int HS) {
    size_t width = (size_t)NKV * HS, row = (size_t)(NH + 2 * NKV) * HS, v0 = (size_t)(NH + NKV) * HS;
    size_t total = (size_t)N * width;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; idx < total; idx += stride) {
        size_t n = idx / width, j = idx % width;
        out[n * row + v0 + j] = inp[n * row + v0 + j];
    }
}

// Whether rope_rotate_kernel can serve these buffers: HS/2 a multiple of the run, 16-byte aligned
template <typename Tio>
static inline bool rope_runs_fit(const Tio* out, const Tio* inp, const float* cos_table, const float* sin_table, int HS) {
    return HS % 2 == 0 && (HS / 2) % Packed128<Tio>::size == 0 && cuda_aligned16(out) && cuda_aligned16(inp) &&
           cuda_aligned16(cos_table) && cuda_aligned16(sin_table);
}

// One pair per thread, for any shape (rope_rotate's fallback; dev/cuda/rope.cu's version 1)
template <typename Tio>
static inline void rope_rotate_scalar(Tio* out, const Tio* inp, const float* cos_table, const float* sin_table,
                                      int B, int T, int NH, int NKV, int HS, float sign, cudaStream_t stream) {
    size_t total = (size_t)B * T * (NH + NKV) * (HS / 2);
    rope_rotate_scalar_kernel<Tio><<<cuda_grid_for(total, ROPE_BLOCK), ROPE_BLOCK, 0, stream>>>(
        out, inp, cos_table, sin_table, B * T, T, NH, NKV, HS, sign);
    KERNEL_CHECK();
}

template <typename Tio>
static inline void rope_rotate(Tio* out, const Tio* inp, const float* cos_table, const float* sin_table,
                               int B, int T, int NH, int NKV, int HS, float sign, cudaStream_t stream) {
    int N = B * T;
    if (rope_runs_fit(out, inp, cos_table, sin_table, HS)) {
        size_t total = (size_t)N * (NH + NKV) * (HS / 2 / Packed128<Tio>::size);
        int grid = cuda_grid_for(total, ROPE_BLOCK);
        // 32-bit index math while the index and its grid-stride steps stay below 2^31
        if (total + (size_t)grid * ROPE_BLOCK < ((size_t)1 << 31))
            rope_rotate_kernel<Tio, uint32_t><<<grid, ROPE_BLOCK, 0, stream>>>(out, inp, cos_table, sin_table, N, T, NH, NKV, HS, sign);
        else
            rope_rotate_kernel<Tio, size_t><<<grid, ROPE_BLOCK, 0, stream>>>(out, inp, cos_table, sin_table, N, T, NH, NKV, HS, sign);
        KERNEL_CHECK();
    } else {
        rope_rotate_scalar(out, inp, cos_table, sin_table, B, T, NH, NKV, HS, sign, stream);
    }
    if (out != inp) {
        rope_copy_v_kernel<Tio><<<cuda_grid_for((size_t)N * NKV * HS, ROPE_BLOCK), ROPE_BLOCK, 0, stream>>>(out, inp, N, NH, NKV, HS);
        KERNEL_CHECK();
    }
}

template <typename Tio>
static inline void rope_forward(Tio* out,                // (B, T, (NH + 2*NKV) * HS)
                                const Tio* inp,          // (B, T, (NH + 2*NKV) * HS)
                                const float* cos_table,  // (T, HS/2)
                                const float* sin_table,  // (T, HS/2)
                                int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    rope_rotate(out, inp, cos_table, sin_table, B, T, NH, NKV, HS, 1.0f, stream);
}

// dinp = Rᵀ dout (written, may be in place).
template <typename Tio>
static inline void rope_backward(Tio* dinp,               // (B, T, (NH + 2*NKV) * HS)
                                 const Tio* dout,         // (B, T, (NH + 2*NKV) * HS)
                                 const float* cos_table,  // (T, HS/2)
                                 const float* sin_table,  // (T, HS/2)
                                 int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    rope_rotate(dinp, dout, cos_table, sin_table, B, T, NH, NKV, HS, -1.0f, stream);
}
