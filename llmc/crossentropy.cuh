// crossentropy.cuh — fused softmax + cross-entropy + dlogits over a padded vocabulary, on the GPU.
// CPU reference: crossentropy.h.
// Shapes: logits (N, Vp) fp32 (the lm_head GEMM writes fp32, so the loss sees unrounded logits);
// targets (N) int32 in [0, V); losses (N) fp32; dlogits (N, Vp) bf16 (it feeds the lm_head
// backward GEMMs).
// Only the first V columns are real tokens: the padded columns [V, Vp) never enter the softmax
// and get dlogits exactly 0, so the padded rows of lm_head stay zero.
// Conventions: losses written (=) per position; the mean is left to the caller (the trainer sums
// the copied-back losses in double in a fixed order, as crossentropy_mean does).
// crossentropy_forward_backward WRITES (=) dlogits = (softmax - onehot) * dloss into its own
// buffer (dloss: the weight of one position, 1/(N * grad_accum)).
// Algorithm: one block per row. Pass 1 is an online softmax (running max and rescaled sum per
// thread, merged by a fixed tree), giving lse = max + log(sum); pass 2 (backward only) re-reads
// the row, usually from L2, and writes exp(x - lse) - onehot. 128-bit loads when Vp % 4 == 0.
// Precision: fp32 math with expf; the row sum is fp32 over ~50k terms each <= 1, split over 1024
// threads (relative error ~1e-6), where the CPU sums in double. Stream: the stream argument.
#pragma once
#include "cuda_common.cuh"

static const int CROSSENTROPY_BLOCK = 1024;

// Merges running (max, sum) pairs of the online softmax; a thread that saw no column has
// (-inf, 0), which must not turn into exp(-inf - -inf) = NaN.
__device__ __forceinline__ void crossentropy_merge(float* m, float* s, float m2, float s2) {
    float mx = fmaxf(*m, m2);
    if (mx == -INFINITY) return;
    float a = *m == -INFINITY ? 0.0f : *s * expf(*m - mx);
    float b = m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mx);
    *m = mx;
    *s = a + b;
}

__device__ __forceinline__ void crossentropy_add(float* m, float* s, float x) {
    if (x > *m) {
        *s = (*m == -INFINITY ? 0.0f : *s * expf(*m - x)) + 1.0f;
        *m = x;
    } else {
        *s += expf(x - *m);
    }
}

// Block-wide merge of (m, s); every thread gets the row's (max, sum).
__device__ inline void crossentropy_block_merge(float* m, float* s) {
    __shared__ float sm[32], ss[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, *m, o), s2 = __shfl_xor_sync(0xffffffffu, *s, o);
        crossentropy_merge(m, s, m2, s2);
    }
    if (lane == 0) { sm[warp] = *m; ss[warp] = *s; }
    __syncthreads();
    *m = lane < nwarps ? sm[lane] : -INFINITY;
    *s = lane < nwarps ? ss[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, *m, o), s2 = __shfl_xor_sync(0xffffffffu, *s, o);
        crossentropy_merge(m, s, m2, s2);
    }
}

// losses (N), dlogits (N, Vp) bf16 (BACKWARD only), logits (N, Vp), targets (N); one block per row
template <bool BACKWARD>
__global__ void crossentropy_forward_backward_kernel(float* losses, bf16* dlogits, const float* logits,
                                                     const int* targets, int N, int V, int Vp, float dloss) {
    int row = blockIdx.x;
    if (row >= N) return;
    const float* x = logits + (size_t)row * Vp;
    bool vec = (Vp % 4 == 0) && (((uintptr_t)logits & 15) == 0);
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        int V4 = V / 4;  // whole float4s below V; the tail is scalar
        for (int j = threadIdx.x; j < V4; j += blockDim.x) {
            float4 f = reinterpret_cast<const float4*>(x)[j];
            crossentropy_add(&m, &s, f.x);
            crossentropy_add(&m, &s, f.y);
            crossentropy_add(&m, &s, f.z);
            crossentropy_add(&m, &s, f.w);
        }
        for (int v = V4 * 4 + threadIdx.x; v < V; v += blockDim.x) crossentropy_add(&m, &s, x[v]);
    } else {
        for (int v = threadIdx.x; v < V; v += blockDim.x) crossentropy_add(&m, &s, x[v]);
    }
    crossentropy_block_merge(&m, &s);
    float lse = m + logf(s);
    int target = targets[row];
    if (threadIdx.x == 0) losses[row] = lse - x[target];
    if (!BACKWARD) return;
    bf16* d = dlogits + (size_t)row * Vp;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float g = 0.0f;
        if (v < V) g = (expf(x[v] - lse) - (v == target ? 1.0f : 0.0f)) * dloss;
        d[v] = __float2bfloat16(g);
    }
}

// losses (N) = lse(row) - row[target] over the first V columns.
static inline void crossentropy_forward(float* losses,        // (N)
                                        const float* logits,  // (N, Vp)
                                        const int* targets,   // (N) device
                                        int N, int V, int Vp, cudaStream_t stream) {
    crossentropy_forward_backward_kernel<false><<<N, CROSSENTROPY_BLOCK, 0, stream>>>(losses, NULL, logits, targets, N, V, Vp, 0.0f);
    KERNEL_CHECK();
}

// losses as above; dlogits (N, Vp) = (softmax - onehot) * dloss, padded columns 0.
static inline void crossentropy_forward_backward(float* losses,        // (N)
                                                 bf16* dlogits,        // (N, Vp), written
                                                 const float* logits,  // (N, Vp)
                                                 const int* targets,   // (N) device
                                                 int N, int V, int Vp, float dloss, cudaStream_t stream) {
    crossentropy_forward_backward_kernel<true><<<N, CROSSENTROPY_BLOCK, 0, stream>>>(losses, dlogits, logits, targets, N, V, Vp, dloss);
    KERNEL_CHECK();
}
