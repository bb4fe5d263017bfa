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
// thread, merged by a fixed tree), giving lse = max + log(sum); pass 2 (backward only) writes
// exp(x - lse) - onehot. 128-bit loads when Vp % 4 == 0. The backward keeps the row in shared
// memory where it fits (Vp fp32 within the GPU's opt-in limit: 201 KB of 227 at the GPT-2
// vocabulary on an H100 / H200): every thread's cp.async copies of the row in flight at once,
// then pass 1 over shared memory, then pass 2 from there, 4 bf16 a store. The logits cross HBM
// once: 3.3 GB at llama300m (B 4, T 4096), where re-reading them made it 6.6 (two blocks of 1024
// threads an SM kept 53 MB of rows in flight, about the L2, so pass 2 found little of its row
// there). One block an SM then, against two before. Elsewhere (longer rows, an odd Vp) pass 2
// re-reads the row from global memory. The two give the same bits: the same sums in the same
// order, the same expression per element. Not yet measured on a GPU.
// Precision: fp32 math with expf; the row sum is fp32 over ~50k terms each <= 1, split over 1024
// threads (relative error ~1e-6), where the CPU sums in double. Stream: the stream argument.
#pragma once
#include "cuda_common.cuh"
#include "mma.cuh"  // cp_async16, mma_pack_bf16

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

// losses (N), dlogits (N, Vp) bf16 (BACKWARD only), logits (N, Vp), targets (N); one block per row.
// ROW_SMEM (BACKWARD, Vp % 4 == 0, 16-byte aligned logits): the row kept in dynamic shared memory
// (Vp floats) between the passes.
template <bool BACKWARD, bool ROW_SMEM = false>
__global__ void crossentropy_forward_backward_kernel(float* losses, bf16* dlogits, const float* logits,
                                                     const int* targets, int N, int V, int Vp, float dloss) {
    int row = blockIdx.x;
    if (row >= N) return;
    const float* x = logits + (size_t)row * Vp;
    float* kept = NULL;  // ROW_SMEM: the row
    if (ROW_SMEM) {
        extern __shared__ float4 crossentropy_row[];
        kept = (float*)crossentropy_row;
    }
    bool vec = (Vp % 4 == 0) && (((uintptr_t)logits & 15) == 0);
    int V4 = V / 4;  // whole float4s below V; the tail is scalar
    if (ROW_SMEM) {
        // the row into shared memory, every copy of a thread in flight at once; each thread then
        // reads back what it copied (the block merge's barrier orders the rest before pass 2)
        for (int j = threadIdx.x; j < V4; j += blockDim.x) cp_async16(kept + 4 * j, x + 4 * j, true);
        cp_async_commit();
        for (int v = V4 * 4 + threadIdx.x; v < V; v += blockDim.x) kept[v] = x[v];
        cp_async_wait<0>();
    }
    const float* src = ROW_SMEM ? kept : x;
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        for (int j = threadIdx.x; j < V4; j += blockDim.x) {
            float4 f = reinterpret_cast<const float4*>(src)[j];
            crossentropy_add(&m, &s, f.x);
            crossentropy_add(&m, &s, f.y);
            crossentropy_add(&m, &s, f.z);
            crossentropy_add(&m, &s, f.w);
        }
        for (int v = V4 * 4 + threadIdx.x; v < V; v += blockDim.x) crossentropy_add(&m, &s, src[v]);
    } else {
        for (int v = threadIdx.x; v < V; v += blockDim.x) crossentropy_add(&m, &s, x[v]);
    }
    crossentropy_block_merge(&m, &s);  // its barrier also orders the row's stores before pass 2
    float lse = m + logf(s);
    int target = targets[row];
    if (threadIdx.x == 0) losses[row] = lse - x[target];
    if (!BACKWARD) return;
    bf16* d = dlogits + (size_t)row * Vp;
    if (ROW_SMEM) {
        // 4 columns a thread, one 8-byte store; (V, Vp) written 0 as below (Vp % 4 == 0)
        for (int j = threadIdx.x; j < Vp / 4; j += blockDim.x) {
            float g[4];
            for (int e = 0; e < 4; e++) {
                int v = 4 * j + e;
                g[e] = v < V ? (expf(kept[v] - lse) - (v == target ? 1.0f : 0.0f)) * dloss : 0.0f;
            }
            reinterpret_cast<uint2*>(d)[j] = make_uint2(mma_pack_bf16(g[0], g[1]), mma_pack_bf16(g[2], g[3]));
        }
    } else {
        for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
            float g = 0.0f;
            if (v < V) g = (expf(x[v] - lse) - (v == target ? 1.0f : 0.0f)) * dloss;
            d[v] = __float2bfloat16(g);
        }
    }
}

// The bytes of dynamic shared memory that keep a row of Vp logits in the backward, or 0 where the
// row cannot stay there (Vp % 4, the logits' alignment, or more than the GPU's opt-in limit).
static inline size_t crossentropy_row_smem(const float* logits, int Vp) {
    static int limit = -1;
    if (limit < 0) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        // the block merge's own 256 bytes of static shared memory come out of the same limit
        limit = limit > 1024 ? limit - 1024 : 0;
        if (limit > 0)
            CUDA_CHECK(cudaFuncSetAttribute((const void*)crossentropy_forward_backward_kernel<true, true>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    }
    size_t bytes = (size_t)Vp * sizeof(float);
    return Vp % 4 == 0 && cuda_aligned16(logits) && bytes <= (size_t)limit ? bytes : 0;
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
// row_smem < 0: the row in shared memory where it fits (crossentropy_row_smem); 0 forces the
// re-reading kernel (the checks compare the two).
static inline void crossentropy_forward_backward(float* losses,        // (N)
                                                 bf16* dlogits,        // (N, Vp), written
                                                 const float* logits,  // (N, Vp)
                                                 const int* targets,   // (N) device
                                                 int N, int V, int Vp, float dloss, cudaStream_t stream,
                                                 int row_smem = -1) {
    size_t smem = row_smem == 0 ? 0 : crossentropy_row_smem(logits, Vp);
    if (smem > 0)
        crossentropy_forward_backward_kernel<true, true><<<N, CROSSENTROPY_BLOCK, smem, stream>>>(losses, dlogits, logits, targets, N, V, Vp, dloss);
    else
        crossentropy_forward_backward_kernel<true><<<N, CROSSENTROPY_BLOCK, 0, stream>>>(losses, dlogits, logits, targets, N, V, Vp, dloss);
    KERNEL_CHECK();
}
