// global_norm.cuh — the global L2 norm of the flat fp32 gradient buffer on the GPU. CPU
// reference: llama_grad_norm in train_llama_cpu.cpp.
// The clip (train_llama_cpu's llama_clip_grads: x *= max_norm / (norm + 1e-6) when that is < 1)
// is no pass here: the trainer hands the scale to the optimizer kernels, which read each gradient
// as x * scale (adamw_update, muon_momentum), the same fp32 product an in-place clip stores, so
// the update is bitwise what a clip pass before it gave (dev/cuda/global_norm.cu checks it and
// keeps that pass as version 1) without reading and writing the whole buffer once more.
// Shapes: x (n) fp32; partials (GLOBAL_NORM_BLOCKS) fp64 scratch; out (1) fp64 = sum x².
// Conventions: global_norm_squared writes *out (=).
// Determinism: a fixed grid of GLOBAL_NORM_BLOCKS blocks (independent of the device), each thread
// a grid-stride loop over 4-float groups (16-byte loads, four in flight; block 0 adds the n % 4
// tail) in a fixed order into a fixed tree, then one block sums the partials in a fixed tree:
// bitwise reproducible run to run, no atomics. (The first version loaded one float a step and
// reached 2.5 TB/s on an H200 (ncu, 5ec15b9): 0.49 ms a step at llama300m, 0.95 at llama600m;
// dev/cuda/global_norm.cu keeps it and times both. Modelled at the momentum's 3.6 TB/s:
// 0.34 and 0.67 ms, not yet measured on a GPU.)
// Precision: squares and sums in fp64 (as the CPU), cheap next to the fp32 loads on Hopper.
// Stream: the stream argument.
#pragma once
#include "cuda_common.cuh"

static const int GLOBAL_NORM_BLOCKS = 1024;
static const int GLOBAL_NORM_BLOCK = 512;

// partials (gridDim.x) fp64, x (n): VEC 4 (x 16-byte aligned) or 1
template <int VEC>
__global__ void global_norm_squared_kernel(double* partials, const float* x, size_t n) {
    double acc = 0.0;
    size_t stride = (size_t)gridDim.x * blockDim.x, groups = n / VEC;
#pragma unroll 4
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += stride) {
        if constexpr (VEC == 4) {
            Packed128<float> v = load128(x + 4 * i);
            for (int k = 0; k < 4; k++) acc += (double)v[k] * (double)v[k];
        } else {
            acc += (double)x[i] * (double)x[i];
        }
    }
    if (VEC > 1 && blockIdx.x == 0 && threadIdx.x < n % VEC) acc += (double)x[groups * VEC + threadIdx.x] * (double)x[groups * VEC + threadIdx.x];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// out (1) fp64, partials (count)
__global__ void global_norm_finish_kernel(double* out, const double* partials, int count) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) *out = acc;
}

// *out = sum_i x[i]² (device scalar; read it back when the host needs the norm)
static inline void global_norm_squared(double* out,       // (1)
                                       double* partials,  // (GLOBAL_NORM_BLOCKS)
                                       const float* x,    // (n)
                                       size_t n, cudaStream_t stream) {
    if (cuda_aligned16(x)) global_norm_squared_kernel<4><<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_BLOCK, 0, stream>>>(partials, x, n);
    else global_norm_squared_kernel<1><<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_BLOCK, 0, stream>>>(partials, x, n);
    KERNEL_CHECK();
    global_norm_finish_kernel<<<1, 1024, 0, stream>>>(out, partials, GLOBAL_NORM_BLOCKS);
    KERNEL_CHECK();
}
