// rmsnorm.cuh — RMSNorm on the GPU: out = weight * x / sqrt(mean(x^2) + RMSNORM_EPS).
// CPU reference: rmsnorm.h (RMSNORM_EPS comes from there).
// Shapes: inp (N, C) fp32 (the residual stream), weight (C) fp32 master weights, out (N, C) bf16
// (it feeds a GEMM), rstd (N) fp32.
// Conventions: forward writes out and rstd (=). Backward accumulates (+=) into dinp (fp32, the
// residual-stream gradient) and dweight (fp32), as rmsnorm_backward_cpu; when dinp_bf16 is not
// NULL it also writes (=) a bf16 copy of the updated dinp. That copy is the fused part: every
// norm backward in the model is followed by a GEMM that consumes the residual gradient in bf16,
// so the cast rides on the pass that produced the value. (The forward residual add is fused into
// the proj / fc2 GEMM epilogue instead: matmul_forward_fp32.)
// Precision: fp32 loads, sums and math; one rounding to bf16 on the outputs that feed GEMMs.
// Determinism: one warp per row with a fixed shuffle tree. dweight in two passes: blocks of
// RMSNORM_DW_SLAB rows by 32 columns write one partial sum per (slab, column) (each thread walks
// its rows in a fixed stride, then a fixed shared-memory tree), and a second kernel adds each
// column's partials in slab order: no atomics, the same bits whatever order the blocks run in.
// The slabs are what fill the GPU: one block per 32 columns alone is 32 blocks at C = 1024.
// Scratch: rmsnorm_backward takes a (ceil(N / RMSNORM_DW_SLAB), C) fp32 buffer for the partials
// (rmsnorm_dweight_scratch_floats), which the caller allocates once.
// Stream: the stream argument.
#pragma once
#include "cuda_common.cuh"
#include "rmsnorm.h"

static const int RMSNORM_WARPS = 8;          // rows per block in the row-wise kernels
static const int RMSNORM_DW_ROWS = 8;        // rows of threads in a dweight block (32 columns each)
static const int RMSNORM_DW_SLAB = 128;      // rows summed into one partial by a dweight block

// fp32 elements of the dweight partials that rmsnorm_backward needs for N rows of C
static inline size_t rmsnorm_dweight_scratch_floats(int N, int C) {
    return (size_t)cuda_ceil_div(N, RMSNORM_DW_SLAB) * C;
}

// out (N, C) bf16, rstd (N), inp (N, C), weight (C); one warp per row
__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const float* inp, const float* weight, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    ss = cuda_warp_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)C + RMSNORM_EPS);
    bf16* y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) y[c] = __float2bfloat16(weight[c] * (x[c] * r));
    if (lane == 0) rstd[row] = r;
}

static inline void rmsnorm_forward(bf16* out,            // (N, C)
                                   float* rstd,          // (N)
                                   const float* inp,     // (N, C)
                                   const float* weight,  // (C)
                                   int N, int C, cudaStream_t stream) {
    rmsnorm_forward_kernel<<<cuda_ceil_div(N, RMSNORM_WARPS), RMSNORM_WARPS * 32, 0, stream>>>(out, rstd, inp, weight, N, C);
    KERNEL_CHECK();
}

// With y = x * r and g = weight * dout:  dx = r * (g - y * mean(g * y)).
// dinp (N, C) +=, dinp_bf16 (N, C) or NULL, dout (N, C), inp (N, C), weight (C), rstd (N); one warp per row
__global__ void rmsnorm_backward_kernel(float* dinp, bf16* dinp_bf16, const bf16* dout, const float* inp,
                                        const float* weight, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float r = rstd[row];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += (weight[c] * __bfloat162float(dout[base + c])) * (inp[base + c] * r);
    dot = cuda_warp_sum(dot);
    float m = dot / (float)C;
    for (int c = lane; c < C; c += 32) {
        float g = weight[c] * __bfloat162float(dout[base + c]);
        float v = dinp[base + c] + r * (g - (inp[base + c] * r) * m);
        dinp[base + c] = v;
        if (dinp_bf16 != NULL) dinp_bf16[base + c] = __float2bfloat16(v);
    }
}

// partials[s, c] = sum over the rows n of slab s of dout[n, c] * x[n, c] * rstd[n].
// Block (32 columns, RMSNORM_DW_ROWS rows of threads), grid (ceil(C / 32), slabs).
// partials (slabs, C) =, dout (N, C), inp (N, C), rstd (N)
__global__ void rmsnorm_backward_dweight_kernel(float* partials, const bf16* dout, const float* inp,
                                                const float* rstd, int N, int C) {
    __shared__ float part[RMSNORM_DW_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int n0 = blockIdx.y * RMSNORM_DW_SLAB, n1 = n0 + RMSNORM_DW_SLAB < N ? n0 + RMSNORM_DW_SLAB : N;
    float acc = 0.0f;
    if (c < C) {
        for (int n = n0 + threadIdx.y; n < n1; n += RMSNORM_DW_ROWS) {
            size_t i = (size_t)n * C + c;
            acc += __bfloat162float(dout[i]) * (inp[i] * rstd[n]);
        }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int s = RMSNORM_DW_ROWS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < C) partials[(size_t)blockIdx.y * C + c] = part[0][threadIdx.x];
}

// dweight[c] += the partials of column c, added in slab order; one thread per column.
// dweight (C) +=, partials (slabs, C)
__global__ void rmsnorm_backward_dweight_finish_kernel(float* dweight, const float* partials, int slabs, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int s = 0; s < slabs; s++) acc += partials[(size_t)s * C + c];
    dweight[c] += acc;
}

// dweight (C) += sum_n dout[n, c] * x[n, c] * rstd[n], through the partials in scratch
static inline void rmsnorm_backward_dweight(float* dweight,      // (C) fp32, +=
                                            float* scratch,      // (rmsnorm_dweight_scratch_floats(N, C))
                                            const bf16* dout,    // (N, C)
                                            const float* inp,    // (N, C)
                                            const float* rstd,   // (N)
                                            int N, int C, cudaStream_t stream) {
    int slabs = cuda_ceil_div(N, RMSNORM_DW_SLAB);
    dim3 grid(cuda_ceil_div(C, 32), slabs), block(32, RMSNORM_DW_ROWS);
    rmsnorm_backward_dweight_kernel<<<grid, block, 0, stream>>>(scratch, dout, inp, rstd, N, C);
    KERNEL_CHECK();
    rmsnorm_backward_dweight_finish_kernel<<<cuda_ceil_div(C, 256), 256, 0, stream>>>(dweight, scratch, slabs, C);
    KERNEL_CHECK();
}

static inline void rmsnorm_backward(float* dinp,          // (N, C) fp32, +=
                                    bf16* dinp_bf16,      // (N, C) bf16 copy of the new dinp, or NULL
                                    float* dweight,       // (C) fp32, +=
                                    float* scratch,       // (rmsnorm_dweight_scratch_floats(N, C)) dweight partials
                                    const bf16* dout,     // (N, C)
                                    const float* inp,     // (N, C)
                                    const float* weight,  // (C)
                                    const float* rstd,    // (N)
                                    int N, int C, cudaStream_t stream) {
    rmsnorm_backward_kernel<<<cuda_ceil_div(N, RMSNORM_WARPS), RMSNORM_WARPS * 32, 0, stream>>>(
        dinp, dinp_bf16, dout, inp, weight, rstd, N, C);
    KERNEL_CHECK();
    rmsnorm_backward_dweight(dweight, scratch, dout, inp, rstd, N, C, stream);
}
