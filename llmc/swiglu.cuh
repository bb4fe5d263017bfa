// swiglu.cuh — the Llama MLP gate on the GPU: out = silu(gate) * up. CPU reference: swiglu.h.
// Shapes: inp (N, 2*FF) bf16, each row [gate (FF) | up (FF)] as fc1 produces it; out (N, FF) bf16.
// Conventions: forward writes out (=). Backward WRITES (=) dinp (N, 2*FF) bf16, unlike
// swiglu_backward_cpu's +=: dinp is a scratch buffer this kernel alone fills (see matmul.cuh).
// Precision: bf16 in and out, fp32 math; sigmoid as 1 / (1 + expf(-g)), which goes to 0 (never
// NaN) for very negative g, as the CPU reference.
// Vector path: 8 bf16 per 128-bit access when FF % 8 == 0 and the pointers are 16-byte aligned
// (every model shape); otherwise a scalar path. Stream: the stream argument.
#pragma once
#include "cuda_common.cuh"

static const int SWIGLU_BLOCK = 256;

__device__ __forceinline__ float swiglu_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// VEC elements per thread step (8: one Packed128, 1: scalar).
// out (N, FF), inp (N, 2*FF)
template <int VEC>
__global__ void swiglu_forward_kernel(bf16* out, const bf16* inp, int N, int FF) {
    size_t total = (size_t)N * FF / VEC;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; idx < total; idx += stride) {
        size_t e = idx * VEC, n = e / FF, i = e % FF;
        const bf16* gate = inp + n * 2 * FF + i;
        const bf16* up = gate + FF;
        if (VEC == 8) {
            Packed128<bf16> g8 = load128(gate), u8 = load128(up), y8;
            for (int k = 0; k < 8; k++) {
                float g = __bfloat162float(g8[k]);
                y8[k] = __float2bfloat16(g * swiglu_sigmoid(g) * __bfloat162float(u8[k]));
            }
            store128(out + e, y8);
        } else {
            float g = __bfloat162float(gate[0]);
            out[e] = __float2bfloat16(g * swiglu_sigmoid(g) * __bfloat162float(up[0]));
        }
    }
}

static inline bool swiglu_vector_ok(const void* a, const void* b, int FF) {
    return FF % 8 == 0 && cuda_aligned16(a) && cuda_aligned16(b);
}

static inline void swiglu_forward(bf16* out,        // (N, FF)
                                  const bf16* inp,  // (N, 2*FF)
                                  int N, int FF, cudaStream_t stream) {
    size_t total = (size_t)N * FF;
    if (swiglu_vector_ok(out, inp, FF)) {
        swiglu_forward_kernel<8><<<cuda_grid_for(total / 8, SWIGLU_BLOCK), SWIGLU_BLOCK, 0, stream>>>(out, inp, N, FF);
    } else {
        swiglu_forward_kernel<1><<<cuda_grid_for(total, SWIGLU_BLOCK), SWIGLU_BLOCK, 0, stream>>>(out, inp, N, FF);
    }
    KERNEL_CHECK();
}

// d silu(g)/dg = sig * (1 + g * (1 - sig)).
// dinp (N, 2*FF) =, dout (N, FF), inp (N, 2*FF)
template <int VEC>
__global__ void swiglu_backward_kernel(bf16* dinp, const bf16* dout, const bf16* inp, int N, int FF) {
    size_t total = (size_t)N * FF / VEC;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; idx < total; idx += stride) {
        size_t e = idx * VEC, n = e / FF, i = e % FF;
        size_t gi = n * 2 * FF + i;
        if (VEC == 8) {
            Packed128<bf16> g8 = load128(inp + gi), u8 = load128(inp + gi + FF), dy8 = load128(dout + e), dg8, du8;
            for (int k = 0; k < 8; k++) {
                float g = __bfloat162float(g8[k]), u = __bfloat162float(u8[k]), dy = __bfloat162float(dy8[k]);
                float sig = swiglu_sigmoid(g);
                dg8[k] = __float2bfloat16(dy * u * sig * (1.0f + g * (1.0f - sig)));
                du8[k] = __float2bfloat16(dy * g * sig);
            }
            store128(dinp + gi, dg8);
            store128(dinp + gi + FF, du8);
        } else {
            float g = __bfloat162float(inp[gi]), u = __bfloat162float(inp[gi + FF]), dy = __bfloat162float(dout[e]);
            float sig = swiglu_sigmoid(g);
            dinp[gi] = __float2bfloat16(dy * u * sig * (1.0f + g * (1.0f - sig)));
            dinp[gi + FF] = __float2bfloat16(dy * g * sig);
        }
    }
}

static inline void swiglu_backward(bf16* dinp,        // (N, 2*FF), written
                                   const bf16* dout,  // (N, FF)
                                   const bf16* inp,   // (N, 2*FF)
                                   int N, int FF, cudaStream_t stream) {
    size_t total = (size_t)N * FF;
    if (swiglu_vector_ok(dinp, inp, FF) && cuda_aligned16(dout)) {
        swiglu_backward_kernel<8><<<cuda_grid_for(total / 8, SWIGLU_BLOCK), SWIGLU_BLOCK, 0, stream>>>(dinp, dout, inp, N, FF);
    } else {
        swiglu_backward_kernel<1><<<cuda_grid_for(total, SWIGLU_BLOCK), SWIGLU_BLOCK, 0, stream>>>(dinp, dout, inp, N, FF);
    }
    KERNEL_CHECK();
}
