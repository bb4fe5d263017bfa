// encoder.cuh — token embedding lookup on the GPU. CPU reference: encoder.h.
// Shapes: tokens (N) int32 in [0, V), wte (Vp, C) fp32 master weights, out (N, C) fp32 (the
// residual stream is fp32, so the lookup reads the master weights and rounds nothing).
// Conventions: encoder_forward writes out (=); encoder_backward accumulates (+=) into dwte.
// Determinism: no atomics. Positions that share a token are grouped on the host into buckets
// (encoder_backward_buckets, a stable counting sort, so each bucket lists its positions in
// increasing n); the kernel gives each (bucket, column) one thread that adds the rows of dout in
// that order onto the existing dwte value: the same additions in the same order as
// encoder_backward_cpu, hence bitwise the same result.
// Precision: fp32 throughout. Stream: the stream argument.
#pragma once
#include <vector>
#include "cuda_common.cuh"

static const int ENCODER_BLOCK = 256;

// out (N, C), tokens (N), wte (Vp, C)
__global__ void encoder_forward_kernel(float* out, const int* tokens, const float* wte, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)N * C;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < total; i += stride) {
        size_t n = i / C, c = i % C;
        out[i] = wte[(size_t)tokens[n] * C + c];
    }
}

// out[n, :] = wte[tokens[n], :]
static inline void encoder_forward(float* out,         // (N, C)
                                   const int* tokens,  // (N) device
                                   const float* wte,   // (Vp, C)
                                   int N, int C, cudaStream_t stream) {
    encoder_forward_kernel<<<cuda_grid_for((size_t)N * C, ENCODER_BLOCK), ENCODER_BLOCK, 0, stream>>>(out, tokens, wte, N, C);
    KERNEL_CHECK();
}

// Host side of the backward: groups the N positions by token. Fills `buckets` (resized to
// 2*U + 1 + N ints) with [U token ids | U+1 start offsets | N positions] and returns U, the number
// of distinct tokens. Upload the whole vector once and pass its device copy to encoder_backward.
static inline int encoder_backward_buckets(std::vector<int>* buckets, const int* tokens, int N, int Vp) {
    std::vector<int> count(Vp, 0);
    for (int n = 0; n < N; n++) count[tokens[n]]++;
    int U = 0;
    for (int v = 0; v < Vp; v++) U += count[v] > 0;
    buckets->assign((size_t)2 * U + 1 + N, 0);
    int* ids = buckets->data();
    int* starts = ids + U;
    int* positions = starts + U + 1;
    std::vector<int> slot(Vp, -1);  // token -> bucket
    int u = 0, off = 0;
    for (int v = 0; v < Vp; v++) {
        if (count[v] == 0) continue;
        ids[u] = v;
        starts[u] = off;
        slot[v] = u;
        off += count[v];
        u++;
    }
    starts[U] = N;
    std::vector<int> fill(starts, starts + U);
    for (int n = 0; n < N; n++) positions[fill[slot[tokens[n]]]++] = n;  // stable: n ascending
    return U;
}

// dwte (Vp, C) +=, dout (N, C), buckets (2*U + 1 + N)
__global__ void encoder_backward_kernel(float* dwte, const float* dout, const int* buckets, int U, int C) {
    int u = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (u >= U || c >= C) return;
    const int* ids = buckets;
    const int* starts = buckets + U;
    const int* positions = starts + U + 1;
    float* dst = dwte + (size_t)ids[u] * C + c;
    float acc = *dst;
    for (int p = starts[u]; p < starts[u + 1]; p++) acc += dout[(size_t)positions[p] * C + c];
    *dst = acc;
}

// dwte[tokens[n], :] += dout[n, :], grouped by encoder_backward_buckets.
static inline void encoder_backward(float* dwte,        // (Vp, C)
                                    const float* dout,  // (N, C)
                                    const int* buckets, // (2*U + 1 + N) device copy of the buckets
                                    int U, int C, cudaStream_t stream) {
    if (U == 0) return;
    dim3 grid(U, cuda_ceil_div(C, ENCODER_BLOCK));
    encoder_backward_kernel<<<grid, ENCODER_BLOCK, 0, stream>>>(dwte, dout, buckets, U, C);
    KERNEL_CHECK();
}
