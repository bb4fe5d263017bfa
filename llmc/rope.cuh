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

// One thread per (token, q-or-k head, pair); sign = +1 forward, -1 backward (rope_rotate).
// out, inp (N, (NH + 2*NKV) * HS), cos_table, sin_table (T, HS/2)
template <typename Tio>
__global__ void rope_rotate_kernel(Tio* out, const Tio* inp, const float* cos_table, const float* sin_table,
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
        out[base] = rope_cast<Tio>(x1 * c - x2 * s);
        out[base + half] = rope_cast<Tio>(x2 * c + x1 * s);
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

template <typename Tio>
static inline void rope_rotate(Tio* out, const Tio* inp, const float* cos_table, const float* sin_table,
                               int B, int T, int NH, int NKV, int HS, float sign, cudaStream_t stream) {
    int N = B * T;
    size_t total = (size_t)N * (NH + NKV) * (HS / 2);
    rope_rotate_kernel<Tio><<<cuda_grid_for(total, ROPE_BLOCK), ROPE_BLOCK, 0, stream>>>(
        out, inp, cos_table, sin_table, N, T, NH, NKV, HS, sign);
    KERNEL_CHECK();
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
