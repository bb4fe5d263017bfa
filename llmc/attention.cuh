// attention.cuh — causal multi-head attention with grouped-query attention on the GPU: cuBLASLt
// strided-batched GEMMs for the two products, a causal softmax kernel that saves the row
// log-sum-exp, and a backward that recomputes the probabilities from it. CPU reference: attention.h.
//
// Shapes: qkv (B, T, (NH + 2*NKV) * HS) bf16, columns [NH q heads | NKV k heads | NKV v heads],
// q and k already rotated; out (B, T, NH * HS) bf16; lse (B, NH, T) fp32 (log-sum-exp of each
// scaled score row, the only per-row state kept for the backward); dqkv like qkv.
// Conventions: forward writes out and lse (=). Backward WRITES (=) dqkv, every column of it,
// unlike attention_backward_cpu's +=: on the GPU dqkv is a scratch buffer only this call fills.
//
// GQA without copies: q heads are split into a head-major buffer (B, NH, T, HS). Since the q heads
// of one kv head are consecutive, the q rows of kv head g form one (group*T, HS) matrix, group =
// NH/NKV, and all products become B*NKV uniformly strided batches:
//   S  (group*T, T)  = scale · Q Kᵀ          fp32 (softmax input)
//   P  (group*T, T)  = exp(S - lse), causal  bf16 (row r of a batch is query position r % T)
//   O  (group*T, HS) = P V
// backward, with dO split the same way and D_t = dO_t · O_t (row dot, fp32):
//   dV (T, HS) = Pᵀ dO   (sums over the group's q heads inside the GEMM)
//   dP = dO Vᵀ (fp32),  dS = scale · P ⊙ (dP - D)  (bf16, written over P)
//   dQ = dS K,  dK = dSᵀ Q
// Cost: the GEMMs compute the full (T, T) square although only the causal half is needed, and the
// (B, NH, T, T) scores and probabilities go through HBM (fp32 + bf16, one layer at a time, never
// kept). The fused kernels of flash_attention.cuh remove both; this path is their reference and
// the fallback for head sizes they do not cover (--attention cublas|flash|flash_sm90|auto, AttentionKind).
// flash_sm90 asks for the Hopper kernels (flash_forward_sm90.cuh, flash_backward_sm90.cuh: wgmma,
// head sizes 64 and 128, an sm_90a build on a compute-capability-9 GPU); auto does not choose them
// (not yet measured on a GPU).
// Precision: bf16 operands, fp32 GEMM accumulation, fp32 scores and softmax, bf16 probabilities.
// Determinism: fixed GEMM plans and warp-per-row reductions; no atomics. Stream: the stream
// argument (GEMMs share matmul.cuh's workspace).
#pragma once
#include <cmath>
#include "cuda_common.cuh"
#include "matmul.cuh"
#include "flash_attention.cuh"

static const int ATTENTION_WARPS = 8;  // rows per block of the softmax kernels
static const int ATTENTION_BLOCK = 256;

typedef enum { ATTENTION_CUBLAS, ATTENTION_FLASH, ATTENTION_FLASH_SM90 } AttentionKind;

// --attention: auto = flash where the head size is supported, else cublas. Returns false (and
// leaves *kind) for a name it does not know, flash with an unsupported head size, or flash_sm90
// where flash_sm90_available(HS) is not (it asks the device).
static inline bool attention_kind_from_name(const char* name, int HS, AttentionKind* kind) {
    if (strcmp(name, "cublas") == 0) { *kind = ATTENTION_CUBLAS; return true; }
    if (strcmp(name, "flash_sm90") == 0) {
        if (!flash_sm90_available(HS)) return false;
        *kind = ATTENTION_FLASH_SM90;
        return true;
    }
    if (strcmp(name, "flash") == 0 && !flash_attention_supported(HS)) return false;
    if (strcmp(name, "flash") == 0 || strcmp(name, "auto") == 0) {
        *kind = flash_attention_supported(HS) ? ATTENTION_FLASH : ATTENTION_CUBLAS;
        return true;
    }
    return false;
}

static inline const char* attention_kind_name(AttentionKind kind) {
    return kind == ATTENTION_FLASH ? "flash" : kind == ATTENTION_FLASH_SM90 ? "flash_sm90" : "cublas";
}

// Per-call scratch, sized for the largest (B, T) of a run; smaller (B, T) reuse it. The flash path
// needs only the rows' (lse · log2 e, D) (B, NH, T), the fp32 dQ sums and the backward's order counters; the
// others stay NULL.
typedef struct {
    AttentionKind kind;
    bf16* q;        // (B, NH, T, HS)
    bf16* k;        // (B, NKV, T, HS)
    bf16* v;        // (B, NKV, T, HS)
    bf16* o;        // (B, NH, T, HS) forward output, head-major; the backward's dO
    bf16* dq;       // (B, NH, T, HS)
    bf16* dk;       // (B, NKV, T, HS)
    bf16* dv;       // (B, NKV, T, HS)
    float* scores;  // (B, NH, T, T) S, then dP in the backward
    bf16* probs;    // (B, NH, T, T) P, then dS in the backward
    float2* rowstats;  // (B, NH, T) flash: (lse · log2 e, D = rowsum(dO ∘ O)) per query row
    float* dq_accum;  // (B, NH, T, HS) flash: dQ summed over key blocks, fp32
    int* order;       // flash: the backward's ticket and dQ turns (flash_order_ints_hs)
} AttentionScratch;

static inline size_t attention_scratch_bytes(AttentionKind kind, int B, int T, int NH, int NKV, int HS) {
    size_t qh = (size_t)B * NH * T * HS, kh = (size_t)B * NKV * T * HS, tt = (size_t)B * NH * T * T;
    if (kind != ATTENTION_CUBLAS) return 4 * (2 * (size_t)B * NH * T + qh + flash_order_ints_hs(B, T, NH, HS));
    return 2 * (3 * qh + 4 * kh) + 4 * tt + 2 * tt;
}

static inline void attention_scratch_alloc(AttentionScratch* s, AttentionKind kind, int B, int T, int NH, int NKV, int HS) {
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    if (kind != ATTENTION_CUBLAS) {  // both flash paths
        s->rowstats = cuda_malloc<float2>((size_t)B * NH * T);
        s->dq_accum = cuda_malloc<float>((size_t)B * NH * T * HS);
        s->order = cuda_malloc<int>(flash_order_ints_hs(B, T, NH, HS));
        return;
    }
    size_t qh = (size_t)B * NH * T * HS, kh = (size_t)B * NKV * T * HS, tt = (size_t)B * NH * T * T;
    s->q = cuda_malloc<bf16>(qh);
    s->k = cuda_malloc<bf16>(kh);
    s->v = cuda_malloc<bf16>(kh);
    s->o = cuda_malloc<bf16>(qh);
    s->dq = cuda_malloc<bf16>(qh);
    s->dk = cuda_malloc<bf16>(kh);
    s->dv = cuda_malloc<bf16>(kh);
    s->scores = cuda_malloc<float>(tt);
    s->probs = cuda_malloc<bf16>(tt);
}

static inline void attention_scratch_free(AttentionScratch* s) {
    void* bufs[] = {s->q, s->k, s->v, s->o, s->dq, s->dk, s->dv, s->scores, s->probs, s->rowstats, s->dq_accum, s->order};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// ----------------------------------------------------------------------------
// head layout changes: (B, T, row) columns [col0, col0 + H*HS)  <->  (B, H, T, HS)

// out (B, H, T, HS), in (B, T, row) read at columns [col0, col0 + H*HS)
template <int VEC>
__global__ void attention_split_heads_kernel(bf16* out, const bf16* in, int B, int T, int H, int HS, int row, int col0) {
    size_t total = (size_t)B * H * T * HS / VEC;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; idx < total; idx += stride) {
        size_t e = idx * VEC;
        int i = (int)(e % HS);
        int t = (int)((e / HS) % T);
        int h = (int)((e / ((size_t)HS * T)) % H);
        size_t b = e / ((size_t)HS * T * H);
        const bf16* src = in + (b * T + t) * row + col0 + (size_t)h * HS + i;
        if (VEC == 8) store128(out + e, load128(src)); else out[e] = *src;
    }
}

// out (B, T, row) written at columns [col0, col0 + H*HS), in (B, H, T, HS)
template <int VEC>
__global__ void attention_merge_heads_kernel(bf16* out, const bf16* in, int B, int T, int H, int HS, int row, int col0) {
    size_t total = (size_t)B * H * T * HS / VEC;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; idx < total; idx += stride) {
        size_t e = idx * VEC;
        int i = (int)(e % HS);
        int t = (int)((e / HS) % T);
        int h = (int)((e / ((size_t)HS * T)) % H);
        size_t b = e / ((size_t)HS * T * H);
        bf16* dst = out + (b * T + t) * row + col0 + (size_t)h * HS + i;
        if (VEC == 8) store128(dst, load128(in + e)); else *dst = in[e];
    }
}

static inline bool attention_vec_ok(const void* a, const void* b, int HS, int row, int col0) {
    return HS % 8 == 0 && row % 8 == 0 && col0 % 8 == 0 && cuda_aligned16(a) && cuda_aligned16(b);
}

// out (B, H, T, HS) = columns [col0, col0 + H*HS) of in (B, T, row)
static inline void attention_split_heads(bf16* out, const bf16* in, int B, int T, int H, int HS, int row, int col0,
                                         cudaStream_t stream) {
    size_t total = (size_t)B * H * T * HS;
    if (attention_vec_ok(out, in, HS, row, col0)) {
        attention_split_heads_kernel<8><<<cuda_grid_for(total / 8, ATTENTION_BLOCK), ATTENTION_BLOCK, 0, stream>>>(out, in, B, T, H, HS, row, col0);
    } else {
        attention_split_heads_kernel<1><<<cuda_grid_for(total, ATTENTION_BLOCK), ATTENTION_BLOCK, 0, stream>>>(out, in, B, T, H, HS, row, col0);
    }
    KERNEL_CHECK();
}

// columns [col0, col0 + H*HS) of out (B, T, row) = in (B, H, T, HS)
static inline void attention_merge_heads(bf16* out, const bf16* in, int B, int T, int H, int HS, int row, int col0,
                                         cudaStream_t stream) {
    size_t total = (size_t)B * H * T * HS;
    if (attention_vec_ok(out, in, HS, row, col0)) {
        attention_merge_heads_kernel<8><<<cuda_grid_for(total / 8, ATTENTION_BLOCK), ATTENTION_BLOCK, 0, stream>>>(out, in, B, T, H, HS, row, col0);
    } else {
        attention_merge_heads_kernel<1><<<cuda_grid_for(total, ATTENTION_BLOCK), ATTENTION_BLOCK, 0, stream>>>(out, in, B, T, H, HS, row, col0);
    }
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// causal softmax

// Online softmax step: running max m and sum s of exp(x - m); (-inf, 0) means "nothing seen".
__device__ __forceinline__ void attention_online_add(float* m, float* s, float x) {
    if (x > *m) {
        *s = (*m == -INFINITY ? 0.0f : *s * expf(*m - x)) + 1.0f;
        *m = x;
    } else {
        *s += expf(x - *m);
    }
}

__device__ __forceinline__ void attention_online_merge(float* m, float* s, float m2, float s2) {
    float mx = fmaxf(*m, m2);
    if (mx == -INFINITY) return;
    float a = *m == -INFINITY ? 0.0f : *s * expf(*m - mx);
    float b = m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mx);
    *m = mx;
    *s = a + b;
}

// One warp per score row r of the (rows, T) matrix, query position t = r % T, keys j <= t.
// RECOMPUTE = false: find lse[r] = log sum_j exp(S[r, j]) and write it; RECOMPUTE = true: read it.
// Either way P[r, j] = exp(S[r, j] - lse[r]) for j <= t and 0 above the diagonal, so the forward
// and the backward see bitwise the same probabilities.
// probs (rows, T) bf16, lse (rows), scores (rows, T) fp32; rows = B*NH*T
template <bool RECOMPUTE>
__global__ void attention_softmax_forward_kernel(bf16* probs, float* lse, const float* scores, int rows, int T) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    int t = r % T;
    const float* s = scores + (size_t)r * T;
    float l;
    if (RECOMPUTE) {
        l = lse[r];
    } else {
        float m = -INFINITY, sum = 0.0f;
        for (int j = lane; j <= t; j += 32) attention_online_add(&m, &sum, s[j]);
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, sum, o);
            attention_online_merge(&m, &sum, m2, s2);
        }
        l = m + logf(sum);
        if (lane == 0) lse[r] = l;
    }
    bf16* p = probs + (size_t)r * T;
    for (int j = lane; j < T; j += 32) p[j] = __float2bfloat16(j <= t ? expf(s[j] - l) : 0.0f);
}

// dS[r, j] = scale * P[r, j] * (dP[r, j] - D_r), D_r = dO_r · O_r over the head, written over P.
// probs (B*NH*T, T) in: P, out: dS; dscores (B*NH*T, T) fp32 dP; dout, out (B, T, NH*HS)
__global__ void attention_softmax_backward_kernel(bf16* probs, const float* dscores, const bf16* dout, const bf16* out,
                                                  int B, int T, int NH, int HS, float scale) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= B * NH * T) return;
    int t = r % T;
    float D = attention_row_dot(dout, out, r, T, NH, HS);
    bf16* p = probs + (size_t)r * T;
    const float* dp = dscores + (size_t)r * T;
    for (int j = lane; j < T; j += 32) {
        float ds = j <= t ? scale * __bfloat162float(p[j]) * (dp[j] - D) : 0.0f;
        p[j] = __float2bfloat16(ds);
    }
}

// ----------------------------------------------------------------------------
// forward / backward

static inline void attention_forward(bf16* out,          // (B, T, NH * HS)
                                     float* lse,         // (B, NH, T)
                                     const bf16* qkv,    // (B, T, (NH + 2*NKV) * HS)
                                     AttentionScratch* s,
                                     int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    if (s->kind == ATTENTION_FLASH) {
        flash_attention_forward(out, lse, qkv, B, T, NH, NKV, HS, stream);
        return;
    }
    if (s->kind == ATTENTION_FLASH_SM90) {
        flash_attention_forward_sm90(out, lse, qkv, B, T, NH, NKV, HS, stream);
        return;
    }
    int row = (NH + 2 * NKV) * HS, group = NH / NKV, G = group * T;
    float scale = 1.0f / sqrtf((float)HS);
    long long sq = (long long)G * HS, skv = (long long)T * HS, ss = (long long)G * T;
    attention_split_heads(s->q, qkv, B, T, NH, HS, row, 0, stream);
    attention_split_heads(s->k, qkv, B, T, NKV, HS, row, NH * HS, stream);
    attention_split_heads(s->v, qkv, B, T, NKV, HS, row, (NH + NKV) * HS, stream);
    // S = scale · Q Kᵀ
    matmul_cublaslt(s->scores, CUDA_R_32F, NULL, s->q, s->k, G, T, HS, false, true, HS, HS, T, scale, 0.0f,
                    B * NKV, sq, skv, ss, stream);
    int rows = B * NH * T;
    attention_softmax_forward_kernel<false><<<cuda_ceil_div(rows, ATTENTION_WARPS), ATTENTION_WARPS * 32, 0, stream>>>(
        s->probs, lse, s->scores, rows, T);
    KERNEL_CHECK();
    // O = P V
    matmul_cublaslt(s->o, CUDA_R_16BF, NULL, s->probs, s->v, G, HS, T, false, false, T, HS, HS, 1.0f, 0.0f,
                    B * NKV, ss, skv, sq, stream);
    attention_merge_heads(out, s->o, B, T, NH, HS, NH * HS, 0, stream);
}

static inline void attention_backward(bf16* dqkv,          // (B, T, (NH + 2*NKV) * HS), written
                                      const bf16* dout,    // (B, T, NH * HS)
                                      const bf16* qkv,     // (B, T, (NH + 2*NKV) * HS)
                                      const bf16* out,     // (B, T, NH * HS)
                                      const float* lse,    // (B, NH, T)
                                      AttentionScratch* s,
                                      int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    if (s->kind == ATTENTION_FLASH) {
        flash_attention_backward(dqkv, s->rowstats, s->dq_accum, s->order, dout, qkv, out, lse, B, T, NH, NKV, HS, stream);
        return;
    }
    if (s->kind == ATTENTION_FLASH_SM90) {
        flash_attention_backward_sm90(dqkv, s->rowstats, s->dq_accum, s->order, dout, qkv, out, lse, B, T, NH, NKV, HS, stream);
        return;
    }
    int row = (NH + 2 * NKV) * HS, group = NH / NKV, G = group * T;
    float scale = 1.0f / sqrtf((float)HS);
    long long sq = (long long)G * HS, skv = (long long)T * HS, ss = (long long)G * T;
    int nb = B * NKV, rows = B * NH * T;
    attention_split_heads(s->q, qkv, B, T, NH, HS, row, 0, stream);
    attention_split_heads(s->k, qkv, B, T, NKV, HS, row, NH * HS, stream);
    attention_split_heads(s->v, qkv, B, T, NKV, HS, row, (NH + NKV) * HS, stream);
    attention_split_heads(s->o, dout, B, T, NH, HS, NH * HS, 0, stream);  // dO, head-major
    // P, recomputed from the saved lse
    matmul_cublaslt(s->scores, CUDA_R_32F, NULL, s->q, s->k, G, T, HS, false, true, HS, HS, T, scale, 0.0f,
                    nb, sq, skv, ss, stream);
    attention_softmax_forward_kernel<true><<<cuda_ceil_div(rows, ATTENTION_WARPS), ATTENTION_WARPS * 32, 0, stream>>>(
        s->probs, (float*)lse, s->scores, rows, T);
    KERNEL_CHECK();
    // dV = Pᵀ dO
    matmul_cublaslt(s->dv, CUDA_R_16BF, NULL, s->probs, s->o, T, HS, G, true, false, T, HS, HS, 1.0f, 0.0f,
                    nb, ss, sq, skv, stream);
    // dP = dO Vᵀ (fp32, over the scores)
    matmul_cublaslt(s->scores, CUDA_R_32F, NULL, s->o, s->v, G, T, HS, false, true, HS, HS, T, 1.0f, 0.0f,
                    nb, sq, skv, ss, stream);
    // dS = scale · P ⊙ (dP - D), over P
    attention_softmax_backward_kernel<<<cuda_ceil_div(rows, ATTENTION_WARPS), ATTENTION_WARPS * 32, 0, stream>>>(
        s->probs, s->scores, dout, out, B, T, NH, HS, scale);
    KERNEL_CHECK();
    // dQ = dS K, dK = dSᵀ Q
    matmul_cublaslt(s->dq, CUDA_R_16BF, NULL, s->probs, s->k, G, HS, T, false, false, T, HS, HS, 1.0f, 0.0f,
                    nb, ss, skv, sq, stream);
    matmul_cublaslt(s->dk, CUDA_R_16BF, NULL, s->probs, s->q, T, HS, G, true, false, T, HS, HS, 1.0f, 0.0f,
                    nb, ss, sq, skv, stream);
    attention_merge_heads(dqkv, s->dq, B, T, NH, HS, row, 0, stream);
    attention_merge_heads(dqkv, s->dk, B, T, NKV, HS, row, NH * HS, stream);
    attention_merge_heads(dqkv, s->dv, B, T, NKV, HS, row, (NH + NKV) * HS, stream);
}
