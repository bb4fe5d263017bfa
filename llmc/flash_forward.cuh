// flash_forward.cuh — the fused causal attention forward (FlashAttention-2's algorithm): the scores
// live in registers one key tile at a time, so no (T, T) buffer exists, and tiles above the causal
// diagonal are never loaded. Launched by flash_attention.cuh.
//
// Block: 128 queries of one q head h (FlashFwdTile). At HS >= 64, 4 warps of 32 query rows (two
// rows of mma.m16n8k16 tiles, so every K and V fragment read from shared memory feeds two
// products) over 64-key tiles at HS 64, 32-key tiles at HS 128; at HS <= 32, 8 warps of 16 rows
// over 64-key tiles. Q is held in registers as A fragments except at HS 128 (read from shared
// memory at each tile: its fragments would not fit beside the accumulators). For each key tile
// j <= diagonal, S = scale·Q Kⱼᵀ in registers, online softmax (running max and sum per row, in
// log2 units: flash_forward_softmax, the causal mask on the diagonal tiles only), O += P Vⱼ. K
// and V come through a ring of 4 cp.async stages, each with a full and an empty mbarrier in place
// of a barrier of the block at every tile: a thread loads tile j + 3 once it is done with tile j
// (and every thread with tile j - 1), so each tile has two tiles' compute to land, and a warp may
// run a tile ahead of another. A warp skips the tiles whose keys all lie above its rows. The
// blocks of every (b, h) at the last query tile come first, the first query tile's last: the
// longest work starts first and the shortest fills the end of the call (the causal tail;
// dev/flash_model.py modelled 8.0% off llama300m's forward and 24% off llama600m's against the
// earlier order, head by head; not yet measured on a GPU).
// __launch_bounds__ hold every head size to 2 blocks per SM (8 warps at HS >= 64, 16 below).
// Measured on an H200 (dev/flash_measured.csv): llama300m (HS 64, T 4096) 0.675 ms, 204 causal
// TFLOP/s; HS 128 at T 4096 1.21 ms, 226 TFLOP/s. Since then a tile below the diagonal issues
// about half the instructions (SASS, a warp's tile at HS 64: 1411 -> 694, HS 128: 1181 -> 637):
// one FFMA, max, exp (flash_exp2) and add per score, the mask on the diagonal only, the tile loads
// unrolled (flash_load_tile); not yet measured on a GPU.
// Precision: bf16 operands, fp32 accumulation, fp32 softmax; P rounded to bf16 for P V.
#pragma once
#include "flash_common.cuh"

// The online softmax of one key tile for a warp's M row tiles, in log2 units: s holds the raw
// scores Q Kᵀ (keys key0 + column, rows r0 + row) and leaves with P = 2^(scale s - m), m the rows'
// running max (scaled); O and the running sums are rescaled by 2^(m_old - m). The max is taken of
// the raw scores and then scaled, which gives the max of the scaled ones (rounding is monotone and
// scale > 0), so each score costs one fma, a max, an exp and an add. MASK: keys above the row are
// -inf (P 0); a row's max is finite from key tile 0 on (key 0 <= row). O's rescale, an FMUL per
// output element (at HS 128 a fifth of the tile's instructions), is skipped by a row tile none of
// whose 16 rows' max rose (all factors exactly 1, which changes no bit but a NaN's): a warp vote,
// so the branch is uniform. How often it skips depends on the data: on i.i.d. scores 38% of the
// tiles below the diagonal at llama300m's and llama600m's T; more where a few keys hold a row's
// largest scores. In two parts: flash_forward_scores (P, the running max and sums, the factors)
// and flash_forward_rescale (O), which the wgmma forward runs apart, once the product still
// adding into O is done. EXP false: P is the exponent itself (FLASH_SKIP_EXP, timing only).
template <bool MASK, int BK, int M, bool EXP = true>
__device__ __forceinline__ void flash_forward_scores(float (*s)[BK / 8][4], float (*mrow)[2], float (*l)[2], float (*corr)[2],
                                                     int key0, int r0, float scale_log2) {
    int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    for (int m = 0; m < M; m++)
        for (int half = 0; half < 2; half++) {
            int row = r0 + 16 * m + g + 8 * half;
            float mx = -INFINITY;
            for (int n = 0; n < BK / 8; n++)
                for (int e = 0; e < 2; e++) {
                    float& x = s[m][n][2 * half + e];
                    if (MASK && key0 + n * 8 + 2 * c + e > row) x = -INFINITY;
                    mx = fmaxf(mx, x);
                }
            mx = fmaxf(mrow[m][half], flash_row_max(mx) * scale_log2);
            corr[m][half] = flash_exp2(mrow[m][half] - mx);
            mrow[m][half] = mx;
            float sum = 0.0f;
            for (int n = 0; n < BK / 8; n++)
                for (int e = 0; e < 2; e++) {
                    float x = fmaf(s[m][n][2 * half + e], scale_log2, -mx), p = EXP ? flash_exp2(x) : x;
                    s[m][n][2 * half + e] = p;
                    sum += p;
                }
            l[m][half] = l[m][half] * corr[m][half] + sum;
        }
}
// O's rescale by the factors flash_forward_scores left in corr
template <int HS, int M>
__device__ __forceinline__ void flash_forward_rescale(float (*o)[HS / 8][4], const float (*corr)[2]) {
    for (int m = 0; m < M; m++)
        if (__reduce_max_sync(0xffffffffu, corr[m][0] != 1.0f || corr[m][1] != 1.0f))
            for (int n = 0; n < HS / 8; n++)
                for (int e = 0; e < 4; e++) o[m][n][e] *= corr[m][e / 2];
}
template <bool MASK, int HS, int BK, int M>
__device__ __forceinline__ void flash_forward_softmax(float (*s)[BK / 8][4], float (*o)[HS / 8][4], float (*mrow)[2], float (*l)[2],
                                                      int key0, int r0, float scale_log2) {
    float corr[M][2];
    flash_forward_scores<MASK, BK, M>(s, mrow, l, corr, key0, r0, scale_log2);
    flash_forward_rescale<HS, M>(o, corr);
}

// forward: grid (NH·B, ceil(T/128)), 128 threads; shared memory: Q and the (K, V) stages

template <int HS>
__global__ void __launch_bounds__(FlashFwdTile<HS>::WARPS * 32, FlashFwdTile<HS>::MIN_BLOCKS)
flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int NKV, float scale_log2) {
    typedef FlashFwdTile<HS> F;
    const int BQ = F::BQ, BK = F::BK, S = F::STAGES, THREADS = F::WARPS * 32, M = BQ / F::WARPS / 16, P = HS + 8;
    extern __shared__ __align__(16) bf16 flash_smem[];
    bf16* sQ = flash_smem;  // stage i: K at sKV + 2 i BK P, V at sKV + (2 i + 1) BK P
    bf16* sKV = sQ + BQ * P;
    uint64_t* full = (uint64_t*)(sKV + 2 * S * BK * P);  // per stage: its tile's copies have landed (every thread's)
    uint64_t* empty = full + S;                           // per stage: every thread is done with its tile
    int qt = gridDim.y - 1 - blockIdx.y;  // the longest rows first, of every (b, h)
    const FlashFwdHead hd(qkv, T, NH, NKV, HS);
    const int h = hd.h, b = hd.b, ld = hd.ld, q0 = qt * BQ;
    const bf16 *q = hd.q, *k = hd.k, *v = hd.v;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    int r0 = q0 + warp * (BQ / F::WARPS);            // this warp's first row
    int nkt = min((T + BK - 1) / BK, (q0 + BQ) / BK);  // key tiles up to the block's diagonal
    // K and V of key tile kt into its stage; the stage's full barrier counts this thread in once they land
    auto issue = [&](int kt) {
        bf16* st = sKV + 2 * (kt % S) * BK * P;
        flash_load_tile<HS, BK, THREADS>(st, k, ld, kt * BK, T);
        flash_load_tile<HS, BK, THREADS>(st + BK * P, v, ld, kt * BK, T);
        cp_async_mbar_arrive(&full[kt % S]);
    };
    if (threadIdx.x == 0)
        for (int st = 0; st < S; st++) { mbar_init(&full[st], THREADS); mbar_init(&empty[st], THREADS); }
    __syncthreads();

    flash_load_tile<HS, BQ, THREADS>(sQ, q, ld, q0, T);  // Q lands with key tile 0: full[0] counts its copies too
    for (int kt = 0; kt < S - 1 && kt < nkt; kt++) issue(kt);
    uint32_t qf[F::Q_REGS ? HS / 16 : 1][M][4];  // with Q_REGS: Q's A fragments (k step, row tile)
    if (F::Q_REGS) {
        mbar_wait(&full[0], 0);  // Q and key tile 0 are in
        for (int kk = 0; kk < HS / 16; kk++)
            for (int m = 0; m < M; m++)
                ldmatrix_x4(qf[kk][m], sQ + (warp * (BQ / F::WARPS) + 16 * m + lane % 16) * P + kk * 16 + (lane / 16) * 8);
    }
    float o[M][HS / 8][4];
    for (int m = 0; m < M; m++) flash_zero<HS / 8>(o[m]);
    float mrow[M][2], l[M][2];  // row tiles m, rows g and g + 8: running max and this lane's sum
    for (int m = 0; m < M; m++) for (int half = 0; half < 2; half++) { mrow[m][half] = -INFINITY; l[m][half] = 0.0f; }
    // Key tile kt is used from stage kt % S, the (kt / S)-th use of that stage: a warp waits for its
    // full barrier (phase parity (kt / S) & 1), computes and arrives on its empty barrier (each
    // thread, so that the arrival releases its own reads); then each thread refills the stage that
    // tile kt - 1 used, with tile kt + S - 1, once every thread has arrived there. No barrier of
    // the whole block: a warp runs up to a tile ahead of the slowest, so one warp's exponentials
    // overlap another's products.
#pragma unroll 1
    for (int kt = 0; kt < nkt; kt++) {
        const bf16* sK = sKV + 2 * (kt % S) * BK * P;
        mbar_wait(&full[kt % S], (kt / S) & 1);
        if (kt * BK <= r0 + BQ / F::WARPS - 1) {  // else every key lies above this warp's rows
            float s[M][BK / 8][4];
            for (int m = 0; m < M; m++) flash_zero<BK / 8>(s[m]);
            if (F::Q_REGS) flash_mma_abt_regs<HS, BK, M>(s, qf, sK);
            else flash_mma_abt<HS, BK, M>(s, sQ, warp * (BQ / F::WARPS), sK);
            // the causal mask only where some key lies above some row of this warp (its diagonal tiles)
            if (kt * BK + BK - 1 > r0) flash_forward_softmax<true, HS, BK, M>(s, o, mrow, l, kt * BK, r0, scale_log2);
            else flash_forward_softmax<false, HS, BK, M>(s, o, mrow, l, kt * BK, r0, scale_log2);
            flash_mma_pv<HS, BK, M>(o, s, sK + BK * P);  // O += P V
        }
        mbar_arrive(&empty[kt % S]);  // this thread's reads of the stage are done
        if (kt + S - 1 < nkt) {
            if (kt >= 1) mbar_wait(&empty[(kt - 1) % S], ((kt - 1) / S) & 1);
            issue(kt + S - 1);
        }
    }

    for (int m = 0; m < M; m++) {
        float inv[2];
        for (int half = 0; half < 2; half++) {
            int row = r0 + 16 * m + g + 8 * half;
            float sum = flash_row_sum(l[m][half]);
            inv[half] = 1.0f / sum;
            if (c == 0 && row < T) lse[((size_t)b * NH + h) * T + row] = (mrow[m][half] + log2f(sum)) / FLASH_LOG2E;
        }
        flash_store_rows<HS>(out + (size_t)b * T * NH * HS + h * HS, NH * HS, r0 + 16 * m, T, o[m], inv[0], inv[1]);
    }
}

// its dynamic shared memory: Q, the (K, V) stages and their full and empty barriers
template <int HS> static inline size_t flash_forward_smem() {
    typedef FlashFwdTile<HS> F;
    return (size_t)(F::BQ + 2 * F::STAGES * F::BK) * (HS + 8) * sizeof(bf16) + 2 * F::STAGES * sizeof(uint64_t);
}
