// flash_attention.cuh — fused causal attention with grouped-query heads on tensor cores
// (FlashAttention-2's algorithm): the scores live in registers one 64-key tile at a time, so no
// (T, T) buffer exists anywhere, and tiles above the causal diagonal are never loaded.
//
// Shapes as attention.cuh: qkv (B, T, (NH + 2*NKV) * HS) bf16 read in place (columns [NH q heads |
// NKV k heads | NKV v heads], q and k already rotated), out and dout (B, T, NH * HS), lse (B, NH, T)
// fp32 natural-log log-sum-exp of each scaled score row (the one attention.cuh's backward reads),
// dqkv written (=), every column. Head sizes 16, 32, 64 and 128 (the presets use 32, 64 and 128; the
// test fixture's model 16); any T (tails zero-filled and masked).
//
// Work split: a block is 4 warps; each warp owns 16 rows of a 64-row tile (queries in the forward
// and dQ kernels, keys in the dK/dV kernel), so every product is a row of mma.m16n8k16 calls.
//   forward  block (64 queries, q head h): for each key tile j <= diagonal, S = scale·Q Kⱼᵀ in
//            registers, online softmax (running max and sum per row, in log2 units), O += P Vⱼ.
//            Q is kept in registers as A fragments; K and V tiles go through shared memory,
//            K(j+1) loading while P Vⱼ runs and V(j+1) while the next S does (cp.async groups).
//   backward D = rowsum(dO ∘ O) first (flash_rowdot_kernel), then two kernels that each
//            recompute P = exp(S - lse) from the saved lse:
//            dQ    block (64 queries, h): over key tiles, dP = dO Vᵀ, dS = scale·P ∘ (dP - D),
//                  dQ += dS K, accumulated in registers; V(j+1) loads while S, dS and dQ run,
//                  K(j+1) while the next dP does;
//            dK,dV block (64 keys, kv head g): over the group's q heads, then the query tiles at
//                  or below the diagonal, Sᵀ = K Qᵀ, dV += Pᵀ dO, dPᵀ = V dOᵀ, dK += dSᵀ Q; the
//                  query tiles (Q, dO, lse, D) are double-buffered, the next loading while this
//                  one is used.
//            Every gradient element is summed by one thread in a fixed order: no atomics, and the
//            backward is deterministic run to run. The price is that S and dP are computed twice
//            (once per kernel): the backward does 7 tile products instead of FlashAttention-2's 5.
// Tiles: 64 x 64 (queries x keys); the dK/dV kernel takes query tiles of 32 at HS = 128 so its
// two (16, HS) fp32 accumulators, Sᵀ and dPᵀ stay within the register file. Operands that are
// used once per tile (K and V in the dK/dV kernel, dO in the dQ kernel) enter the products from
// shared memory one k step at a time rather than being held in registers: no kernel spills
// (dev/cuda/ptxas_report.txt: at most 241 registers, at HS = 128). Shared memory rows are
// padded by 8 bf16 (16 bytes), so the 8 rows an ldmatrix reads fall in 8 different bank groups.
// Precision: bf16 operands, fp32 accumulation, fp32 softmax; P and dS are rounded to bf16 for their
// products (as the cuBLAS path rounds them in HBM). Stream: the last argument.
#pragma once
#include <cmath>
#include "cuda_common.cuh"
#include "mma.cuh"

static const int FLASH_WARPS = 4;
static const int FLASH_THREADS = FLASH_WARPS * 32;
static const int FLASH_TILE = 64;      // queries per forward / dQ block, keys per tile and per dK/dV block
static const float FLASH_LOG2E = 1.4426950408889634f;

static inline bool flash_attention_supported(int HS) { return HS == 16 || HS == 32 || HS == 64 || HS == 128; }

// query rows per tile of the dK/dV kernel
template <int HS>
struct FlashBwdTile { static const int BQ = HS == 128 ? 32 : 64; };

// s (ROWS, HS + 8) shared = rows [r0, r0 + ROWS) of the (T, ld) matrix at src, zeros from row T on
template <int HS, int ROWS>
__device__ __forceinline__ void flash_load_tile(bf16* s, const bf16* src, int ld, int r0, int T) {
    const int CH = HS / 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < ROWS * CH; i += FLASH_THREADS) {
        int r = i / CH, ch = i % CH;
        bool valid = r0 + r < T;
        cp_async16(s + r * (HS + 8) + ch * 8, valid ? src + (size_t)(r0 + r) * ld + ch * 8 : src, valid);
    }
}

// A fragments (16 x HS) of rows [r, r + 16) of a shared tile
template <int HS>
__device__ __forceinline__ void flash_load_a(uint32_t (*a)[4], const bf16* s, int r) {
    int lane = threadIdx.x % 32;
    for (int kk = 0; kk < HS / 16; kk++) ldmatrix_x4(a[kk], s + (r + lane % 16) * (HS + 8) + kk * 16 + (lane / 16) * 8);
}

// acc (N/8 tiles) += A (16 x 16, fragment a: k step kk) · Bᵀ, B = rows [0, N) of a shared (N, HS)
// tile: one k step of the score-shaped product (Q Kᵀ, dO Vᵀ, K Qᵀ, V dOᵀ)
template <int HS, int N>
__device__ __forceinline__ void flash_mma_abt_step(float (*acc)[4], const uint32_t* a, const bf16* s, int kk) {
    int lane = threadIdx.x % 32;
    for (int n = 0; n < N / 16; n++) {
        uint32_t b[4];  // b[0..1]: n tile 2n, b[2..3]: n tile 2n + 1
        ldmatrix_x4(b, s + (n * 16 + (lane / 16) * 8 + lane % 8) * (HS + 8) + kk * 16 + ((lane / 8) % 2) * 8);
        mma_bf16_16816(acc[2 * n], a, b, acc[2 * n]);
        mma_bf16_16816(acc[2 * n + 1], a, b + 2, acc[2 * n + 1]);
    }
}

// acc += A Bᵀ with A (16 x HS) in registers (fragments a)
template <int HS, int N>
__device__ __forceinline__ void flash_mma_abt(float (*acc)[4], const uint32_t (*a)[4], const bf16* s) {
    for (int kk = 0; kk < HS / 16; kk++) flash_mma_abt_step<HS, N>(acc, a[kk], s, kk);
}

// acc += A Bᵀ with A = rows [r, r + 16) of a shared (., HS) tile, loaded one k step at a time
template <int HS, int N>
__device__ __forceinline__ void flash_mma_abt_shared(float (*acc)[4], const bf16* sa, int r, const bf16* s) {
    int lane = threadIdx.x % 32;
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[4];
        ldmatrix_x4(a, sa + (r + lane % 16) * (HS + 8) + kk * 16 + (lane / 16) * 8);
        flash_mma_abt_step<HS, N>(acc, a, s, kk);
    }
}

// acc (HS/8 tiles) += P (16 x K, fp32 C fragments p, rounded to bf16) · V, V = rows [0, K) of a
// shared (K, HS) tile: the value-shaped product (P V, dS K, Pᵀ dO, dSᵀ Q)
template <int HS, int K>
__device__ __forceinline__ void flash_mma_pv(float (*acc)[4], const float (*p)[4], const bf16* s) {
    int lane = threadIdx.x % 32;
    for (int kt = 0; kt < K / 16; kt++) {
        uint32_t a[4];
        mma_pack_a(a, p[2 * kt], p[2 * kt + 1]);
        for (int n = 0; n < HS / 16; n++) {
            uint32_t b[4];  // b[0..1]: n tile 2n, b[2..3]: n tile 2n + 1
            ldmatrix_x4_trans(b, s + (kt * 16 + ((lane / 8) % 2) * 8 + lane % 8) * (HS + 8) + n * 16 + (lane / 16) * 8);
            mma_bf16_16816(acc[2 * n], a, b, acc[2 * n]);
            mma_bf16_16816(acc[2 * n + 1], a, b + 2, acc[2 * n + 1]);
        }
    }
}

template <int N>
__device__ __forceinline__ void flash_zero(float (*acc)[4]) {
    for (int i = 0; i < N; i++) for (int e = 0; e < 4; e++) acc[i][e] = 0.0f;
}

// the 16 rows of a warp's C fragments as (B, T, ld) rows r0 + row: bf16, rows < T only
template <int HS>
__device__ __forceinline__ void flash_store_rows(bf16* dst, int ld, int r0, int T, const float (*acc)[4], float scale0, float scale1) {
    int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    for (int half = 0; half < 2; half++) {
        int r = r0 + g + 8 * half;
        if (r >= T) continue;
        float sc = half ? scale1 : scale0;
        for (int n = 0; n < HS / 8; n++) {
            __nv_bfloat162 v = __floats2bfloat162_rn(acc[n][2 * half] * sc, acc[n][2 * half + 1] * sc);
            *(__nv_bfloat162*)(dst + (size_t)r * ld + n * 8 + 2 * c) = v;
        }
    }
}

// the group of 4 lanes that holds one fragment row
__device__ __forceinline__ float flash_row_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float flash_row_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ----------------------------------------------------------------------------
// forward: grid (ceil(T/64), NH, B), FLASH_THREADS threads, 3 tiles of shared memory

template <int HS>
__global__ void flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int NKV, float scale_log2) {
    extern __shared__ __align__(16) bf16 flash_smem[];
    const int P = HS + 8;
    bf16 *sQ = flash_smem, *sK = sQ + FLASH_TILE * P, *sV = sK + FLASH_TILE * P;
    int qt = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int ld = (NH + 2 * NKV) * HS, q0 = qt * FLASH_TILE;
    const bf16* q = qkv + (size_t)b * T * ld + h * HS;
    const bf16* k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
    const bf16* v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;

    flash_load_tile<HS, FLASH_TILE>(sQ, q, ld, q0, T);
    cp_async_commit();
    flash_load_tile<HS, FLASH_TILE>(sK, k, ld, 0, T);
    cp_async_commit();
    flash_load_tile<HS, FLASH_TILE>(sV, v, ld, 0, T);
    cp_async_commit();
    cp_async_wait<2>();
    __syncthreads();
    uint32_t qf[HS / 16][4];
    flash_load_a<HS>(qf, sQ, warp * 16);

    float o[HS / 8][4];
    flash_zero<HS / 8>(o);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8: max and this lane's sum
    int rq[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    for (int kt = 0; kt <= qt; kt++) {
        cp_async_wait<1>();  // K of tile kt (V may still be loading)
        __syncthreads();
        float s[FLASH_TILE / 8][4];
        flash_zero<FLASH_TILE / 8>(s);
        flash_mma_abt<HS, FLASH_TILE>(s, qf, sK);
        __syncthreads();  // every warp is done with sK
        if (kt < qt) flash_load_tile<HS, FLASH_TILE>(sK, k, ld, (kt + 1) * FLASH_TILE, T);
        cp_async_commit();

        // online softmax in log2 units; only the diagonal tile has keys above a row's query
        for (int half = 0; half < 2; half++) {
            float mx = m[half];
            for (int n = 0; n < FLASH_TILE / 8; n++)
                for (int e = 0; e < 2; e++) {
                    int key = kt * FLASH_TILE + n * 8 + 2 * c + e;
                    float x = key <= rq[half] ? s[n][2 * half + e] * scale_log2 : -INFINITY;
                    s[n][2 * half + e] = x;
                    mx = fmaxf(mx, x);
                }
            mx = flash_row_max(mx);  // finite: key kt*64 <= every query of this block
            float corr = exp2f(m[half] - mx);
            m[half] = mx;
            float sum = 0.0f;
            for (int n = 0; n < FLASH_TILE / 8; n++)
                for (int e = 0; e < 2; e++) {
                    float p = exp2f(s[n][2 * half + e] - mx);
                    s[n][2 * half + e] = p;
                    sum += p;
                }
            l[half] = l[half] * corr + sum;
            for (int n = 0; n < HS / 8; n++) { o[n][2 * half] *= corr; o[n][2 * half + 1] *= corr; }
        }

        cp_async_wait<1>();  // V of tile kt
        __syncthreads();
        flash_mma_pv<HS, FLASH_TILE>(o, s, sV);
        __syncthreads();  // every warp is done with sV
        if (kt < qt) flash_load_tile<HS, FLASH_TILE>(sV, v, ld, (kt + 1) * FLASH_TILE, T);
        cp_async_commit();
    }

    float inv[2];
    for (int half = 0; half < 2; half++) {
        float sum = flash_row_sum(l[half]);
        inv[half] = 1.0f / sum;
        if (c == 0 && rq[half] < T) lse[((size_t)b * NH + h) * T + rq[half]] = (m[half] + log2f(sum)) / FLASH_LOG2E;
    }
    flash_store_rows<HS>(out + (size_t)b * T * NH * HS + h * HS, NH * HS, q0 + warp * 16, T, o, inv[0], inv[1]);
}

// ----------------------------------------------------------------------------
// backward

// D_r = dO_r · O_r over the head, row r = (b, h, t) of (B, NH, T), dout and out (B, T, NH*HS):
// the softmax backward's row term, summed by one warp (every lane gets it; attention.cuh's
// unfused path uses the same sum)
__device__ __forceinline__ float attention_row_dot(const bf16* dout, const bf16* out, int r, int T, int NH, int HS) {
    int lane = threadIdx.x % 32;
    int t = r % T, h = (r / T) % NH, b = r / (T * NH);
    size_t o = ((size_t)b * T + t) * NH * HS + (size_t)h * HS;
    float d = 0.0f;
    for (int i = lane; i < HS; i += 32) d += __bfloat162float(dout[o + i]) * __bfloat162float(out[o + i]);
    return cuda_warp_sum(d);
}

// D (B*NH*T) = rowsum(dO ∘ O) per (b, h, t), one warp per row; dout, out (B, T, NH*HS)
__global__ void flash_rowdot_kernel(float* D, const bf16* dout, const bf16* out, int B, int T, int NH, int HS) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= B * NH * T) return;
    float d = attention_row_dot(dout, out, r, T, NH, HS);
    if (threadIdx.x % 32 == 0) D[r] = d;
}

// dQ: grid (ceil(T/64), NH, B), FLASH_THREADS threads, 4 tiles of shared memory
template <int HS>
__global__ void flash_backward_dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                                         int T, int NH, int NKV, float scale, float scale_log2) {
    extern __shared__ __align__(16) bf16 flash_smem[];
    const int P = HS + 8;
    bf16 *sQ = flash_smem, *sdO = sQ + FLASH_TILE * P, *sK = sdO + FLASH_TILE * P, *sV = sK + FLASH_TILE * P;
    int qt = gridDim.x - 1 - blockIdx.x;
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int ld = (NH + 2 * NKV) * HS, q0 = qt * FLASH_TILE;
    const bf16* q = qkv + (size_t)b * T * ld + h * HS;
    const bf16* k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
    const bf16* v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    const bf16* dO = dout + (size_t)b * T * NH * HS + h * HS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;

    flash_load_tile<HS, FLASH_TILE>(sQ, q, ld, q0, T);
    flash_load_tile<HS, FLASH_TILE>(sdO, dO, NH * HS, q0, T);
    cp_async_commit();
    flash_load_tile<HS, FLASH_TILE>(sV, v, ld, 0, T);
    cp_async_commit();
    flash_load_tile<HS, FLASH_TILE>(sK, k, ld, 0, T);
    cp_async_commit();
    cp_async_wait<2>();
    __syncthreads();
    uint32_t qf[HS / 16][4];  // Q in registers; dO enters from shared memory (registers for dQ)
    flash_load_a<HS>(qf, sQ, warp * 16);
    int rq[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float lse2[2], d[2];  // rows past T: P = 0
    for (int half = 0; half < 2; half++) {
        size_t i = ((size_t)b * NH + h) * T + rq[half];
        lse2[half] = rq[half] < T ? lse[i] * FLASH_LOG2E : INFINITY;
        d[half] = rq[half] < T ? D[i] : 0.0f;
    }

    float dq[HS / 8][4];
    flash_zero<HS / 8>(dq);
    for (int kt = 0; kt <= qt; kt++) {
        cp_async_wait<1>();  // V of tile kt (K may still be loading)
        __syncthreads();
        float s[FLASH_TILE / 8][4], dp[FLASH_TILE / 8][4];
        flash_zero<FLASH_TILE / 8>(dp);
        flash_mma_abt_shared<HS, FLASH_TILE>(dp, sdO, warp * 16, sV);  // dP = dO Vᵀ
        __syncthreads();  // every warp is done with sV
        if (kt < qt) flash_load_tile<HS, FLASH_TILE>(sV, v, ld, (kt + 1) * FLASH_TILE, T);
        cp_async_commit();
        cp_async_wait<1>();  // K of tile kt
        __syncthreads();
        flash_zero<FLASH_TILE / 8>(s);
        flash_mma_abt<HS, FLASH_TILE>(s, qf, sK);  // S = Q Kᵀ
        // dS = scale · P ∘ (dP - D), P = exp(S - lse) below the diagonal
        for (int n = 0; n < FLASH_TILE / 8; n++)
            for (int i = 0; i < 4; i++) {
                int half = i / 2, key = kt * FLASH_TILE + n * 8 + 2 * c + i % 2;
                float p = key <= rq[half] ? exp2f(s[n][i] * scale_log2 - lse2[half]) : 0.0f;
                s[n][i] = scale * p * (dp[n][i] - d[half]);
            }
        flash_mma_pv<HS, FLASH_TILE>(dq, s, sK);  // dQ += dS K
        __syncthreads();  // every warp is done with sK
        if (kt < qt) flash_load_tile<HS, FLASH_TILE>(sK, k, ld, (kt + 1) * FLASH_TILE, T);
        cp_async_commit();
    }
    flash_store_rows<HS>(dqkv + (size_t)b * T * ld + h * HS, ld, q0 + warp * 16, T, dq, 1.0f, 1.0f);
}

// dK, dV: grid (ceil(T/64), NKV, B), FLASH_THREADS threads; shared memory: the key tile's K and V,
// and two buffers of a query tile (Q, dO, lse, D), the next one loading while this one is used.
// K and V enter the products from shared memory one k step at a time, which leaves the registers
// to the two (16, HS) fp32 accumulators.
template <int HS>
__global__ void flash_backward_dkv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                                          int T, int NH, int NKV, float scale, float scale_log2) {
    const int BQ = FlashBwdTile<HS>::BQ;
    extern __shared__ __align__(16) bf16 flash_smem[];
    const int P = HS + 8;
    // buffer i: Q at sQ + i * QBUF, dO at sdO + i * QBUF; lse at sL + i * LBUF, D at sD + i * LBUF
    const int QBUF = 2 * BQ * P, LBUF = 2 * BQ;
    bf16 *sK = flash_smem, *sV = sK + FLASH_TILE * P, *sQ = sV + FLASH_TILE * P, *sdO = sQ + BQ * P;
    float *sL = (float*)(sQ + 2 * QBUF), *sD = sL + BQ;
    int kt = blockIdx.x;  // the longest columns (earliest keys) first
    int kvh = blockIdx.y, b = blockIdx.z, group = NH / NKV;
    int ld = (NH + 2 * NKV) * HS, k0 = kt * FLASH_TILE;
    const bf16* k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
    const bf16* v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, c = lane % 4;
    int rk[2] = {k0 + warp * 16 + lane / 4, k0 + warp * 16 + lane / 4 + 8};
    // the work: the group's q heads, each with the query tiles that reach key k0
    int it0 = k0 / BQ, per_head = (T + BQ - 1) / BQ - it0, total = group * per_head;
    auto issue = [&](int idx, int buf) {  // loads query tile idx into buffer buf
        int h = kvh * group + idx / per_head, q0 = (it0 + idx % per_head) * BQ;
        flash_load_tile<HS, BQ>(sQ + buf * QBUF, qkv + (size_t)b * T * ld + h * HS, ld, q0, T);
        flash_load_tile<HS, BQ>(sdO + buf * QBUF, dout + (size_t)b * T * NH * HS + h * HS, NH * HS, q0, T);
        for (int i = threadIdx.x; i < BQ; i += FLASH_THREADS) {
            size_t r = ((size_t)b * NH + h) * T + q0 + i;
            sL[buf * LBUF + i] = q0 + i < T ? lse[r] * FLASH_LOG2E : INFINITY;  // rows past T: P = 0
            sD[buf * LBUF + i] = q0 + i < T ? D[r] : 0.0f;
        }
    };

    flash_load_tile<HS, FLASH_TILE>(sK, k, ld, k0, T);
    flash_load_tile<HS, FLASH_TILE>(sV, v, ld, k0, T);
    cp_async_commit();
    issue(0, 0);
    cp_async_commit();
    float dk[HS / 8][4], dv[HS / 8][4];
    flash_zero<HS / 8>(dk);
    flash_zero<HS / 8>(dv);
    for (int idx = 0; idx < total; idx++) {
        int buf = idx % 2, q0 = (it0 + idx % per_head) * BQ;
        if (idx + 1 < total) issue(idx + 1, 1 - buf);  // the other buffer: free since the last iteration's end
        cp_async_commit();
        cp_async_wait<1>();  // everything but the tile just issued
        __syncthreads();
        const bf16 *q_s = sQ + buf * QBUF, *do_s = sdO + buf * QBUF;
        const float *l_s = sL + buf * LBUF, *d_s = sD + buf * LBUF;
        // Pᵀ (16 keys x BQ queries) = exp(scale · K Qᵀ - lse) at or below the diagonal
        float s[BQ / 8][4], dp[BQ / 8][4];
        flash_zero<BQ / 8>(s);
        flash_mma_abt_shared<HS, BQ>(s, sK, warp * 16, q_s);
        for (int n = 0; n < BQ / 8; n++)
            for (int i = 0; i < 4; i++) {
                int col = n * 8 + 2 * c + i % 2;
                s[n][i] = rk[i / 2] <= q0 + col ? exp2f(s[n][i] * scale_log2 - l_s[col]) : 0.0f;
            }
        flash_mma_pv<HS, BQ>(dv, s, do_s);  // dV += Pᵀ dO
        flash_zero<BQ / 8>(dp);
        flash_mma_abt_shared<HS, BQ>(dp, sV, warp * 16, do_s);  // dPᵀ = V dOᵀ
        for (int n = 0; n < BQ / 8; n++)
            for (int i = 0; i < 4; i++) s[n][i] = scale * s[n][i] * (dp[n][i] - d_s[n * 8 + 2 * c + i % 2]);
        flash_mma_pv<HS, BQ>(dk, s, q_s);  // dK += dSᵀ Q
        __syncthreads();  // every warp is done with buffer buf
    }
    flash_store_rows<HS>(dqkv + (size_t)b * T * ld + (NH + kvh) * HS, ld, k0 + warp * 16, T, dk, 1.0f, 1.0f);
    flash_store_rows<HS>(dqkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS, ld, k0 + warp * 16, T, dv, 1.0f, 1.0f);
}

// ----------------------------------------------------------------------------
// launchers

template <int HS> static inline size_t flash_forward_smem() { return (size_t)3 * FLASH_TILE * (HS + 8) * sizeof(bf16); }
template <int HS> static inline size_t flash_dq_smem() { return (size_t)4 * FLASH_TILE * (HS + 8) * sizeof(bf16); }
template <int HS> static inline size_t flash_dkv_smem() {
    const int BQ = FlashBwdTile<HS>::BQ;
    return (size_t)(2 * FLASH_TILE + 4 * BQ) * (HS + 8) * sizeof(bf16) + 4 * BQ * sizeof(float);
}

// Shared memory above 48 KB must be opted into, once per kernel.
template <int HS>
static inline void flash_set_smem_limits(void) {
    static bool done = false;
    if (done) return;
    CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)flash_forward_smem<HS>()));
    CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_backward_dq_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)flash_dq_smem<HS>()));
    CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_backward_dkv_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)flash_dkv_smem<HS>()));
    done = true;
}

static inline void flash_check(const void* qkv, const void* other, int HS) {
    if (!flash_attention_supported(HS) || !cuda_aligned16(qkv) || !cuda_aligned16(other)) {
        fprintf(stderr, "flash attention: head size %d or unaligned buffers (needs 16, 32, 64 or 128 and 16-byte alignment)\n", HS);
        exit(1);
    }
}

template <int HS>
static inline void flash_forward_hs(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV, cudaStream_t stream) {
    flash_set_smem_limits<HS>();
    dim3 grid(cuda_ceil_div(T, FLASH_TILE), NH, B);
    float scale_log2 = FLASH_LOG2E / sqrtf((float)HS);
    flash_forward_kernel<HS><<<grid, FLASH_THREADS, flash_forward_smem<HS>(), stream>>>(out, lse, qkv, T, NH, NKV, scale_log2);
    KERNEL_CHECK();
}

template <int HS>
static inline void flash_backward_hs(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                                     int B, int T, int NH, int NKV, cudaStream_t stream) {
    flash_set_smem_limits<HS>();
    float scale = 1.0f / sqrtf((float)HS), scale_log2 = FLASH_LOG2E * scale;
    dim3 gq(cuda_ceil_div(T, FLASH_TILE), NH, B), gkv(cuda_ceil_div(T, FLASH_TILE), NKV, B);
    flash_backward_dq_kernel<HS><<<gq, FLASH_THREADS, flash_dq_smem<HS>(), stream>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale, scale_log2);
    KERNEL_CHECK();
    flash_backward_dkv_kernel<HS><<<gkv, FLASH_THREADS, flash_dkv_smem<HS>(), stream>>>(dqkv, dout, qkv, lse, D, T, NH, NKV, scale, scale_log2);
    KERNEL_CHECK();
}

// out (B, T, NH*HS), lse (B, NH, T) from qkv (B, T, (NH + 2*NKV)*HS)
static inline void flash_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV, int HS,
                                           cudaStream_t stream) {
    flash_check(qkv, out, HS);
    if (HS == 16) flash_forward_hs<16>(out, lse, qkv, B, T, NH, NKV, stream);
    else if (HS == 32) flash_forward_hs<32>(out, lse, qkv, B, T, NH, NKV, stream);
    else if (HS == 64) flash_forward_hs<64>(out, lse, qkv, B, T, NH, NKV, stream);
    else flash_forward_hs<128>(out, lse, qkv, B, T, NH, NKV, stream);
}

// dqkv (B, T, (NH + 2*NKV)*HS) written; D (B*NH*T) scratch
static inline void flash_attention_backward(bf16* dqkv, float* D, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                                            int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    flash_check(qkv, dqkv, HS);
    flash_check(dout, out, HS);
    int rows = B * NH * T, warps = 8;
    flash_rowdot_kernel<<<cuda_ceil_div(rows, warps), warps * 32, 0, stream>>>(D, dout, out, B, T, NH, HS);
    KERNEL_CHECK();
    if (HS == 16) flash_backward_hs<16>(dqkv, dout, qkv, lse, D, B, T, NH, NKV, stream);
    else if (HS == 32) flash_backward_hs<32>(dqkv, dout, qkv, lse, D, B, T, NH, NKV, stream);
    else if (HS == 64) flash_backward_hs<64>(dqkv, dout, qkv, lse, D, B, T, NH, NKV, stream);
    else flash_backward_hs<128>(dqkv, dout, qkv, lse, D, B, T, NH, NKV, stream);
}
