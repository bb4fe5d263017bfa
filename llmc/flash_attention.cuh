// flash_attention.cuh — fused causal attention with grouped-query heads on tensor cores
// (FlashAttention-2's algorithm): the scores live in registers one key tile at a time, so no
// (T, T) buffer exists anywhere, and tiles above the causal diagonal are never loaded.
//
// Shapes as attention.cuh: qkv (B, T, (NH + 2*NKV) * HS) bf16 read in place (columns [NH q heads |
// NKV k heads | NKV v heads], q and k already rotated), out and dout (B, T, NH * HS), lse (B, NH, T)
// fp32 natural-log log-sum-exp of each scaled score row (the one attention.cuh's backward reads),
// dqkv written (=), every column. Head sizes 16, 32, 64 and 128 (the presets use 32, 64 and 128; the
// test fixture's model 16); any T (tails zero-filled and masked).
//
// forward  block: 128 queries of one q head h (FlashFwdTile). At HS = 128, 4 warps of 32 query
//          rows (two rows of mma.m16n8k16 tiles, so every K and V fragment read from shared
//          memory feeds two products; Q read from shared memory at each tile) over 32-key tiles;
//          at HS <= 64, 8 warps of 16 rows with Q held in registers over 64-key tiles. For each
//          key tile j <= diagonal, S = scale·Q Kⱼᵀ in registers, online softmax (running max and
//          sum per row, in log2 units), O += P Vⱼ. K and V come through a ring of 3 cp.async
//          stages, tile j + 2 loading while tile j is used. A warp skips the tiles whose keys
//          all lie above its rows. __launch_bounds__ hold every head size to 2 blocks per SM
//          (16 warps at HS <= 64, 8 at HS = 128).
// backward one pass, FlashAttention-2's five products per tile pair. D = rowsum(dO ∘ O) first
//          (flash_rowdot_kernel); then a block owns 128 keys of one kv head g (8 warps, 16 key
//          rows each) and walks the group's q heads and the query tiles at or below its keys
//          (FlashBwdTile: 32 queries at HS = 128, 64 at 32 and 64, 128 at 16), Q, dO, lse and D
//          double-buffered through shared memory:
//              Pᵀ = exp(scale · K Qᵀ - lse), dV += Pᵀ dO, dPᵀ = V dOᵀ,
//              dSᵀ = scale · Pᵀ ∘ (dPᵀ - D), dK += dSᵀ Q   (dK, dV in registers all along),
//              dQ_part = dS K                          (dSᵀ through shared memory).
//          dQ sums the parts of every key block at or below the query tile. They are added in a
//          fixed order, the diagonal block first and key block 0 last: a counter per (b, h,
//          query tile) says whose turn it is; the first part is stored to an fp32 buffer
//          (dq_accum), the next ones read, add and store it, and block 0 writes the bf16 sum to
//          dqkv. The blocks take their work from a ticket counter (atomicAdd) in the order
//          "the last key block down to block 0 of (b = 0, g = 0), then of (0, 1), ...", so a
//          block waits only for one that took its ticket earlier and is running or done: no
//          deadlock whatever order the GPU starts blocks in, and in the steady state no wait,
//          since block kb + 1 reaches each query tile one iteration before block kb does.
//          Every gradient element is summed in one fixed order: no floating-point atomics, and
//          the backward is deterministic run to run.
// Shared memory rows are padded by 8 bf16 (16 bytes), so the 8 rows an ldmatrix reads fall in 8
// different bank groups. No kernel spills; the register counts are in dev/cuda/ptxas_report.txt
// (make ptxas-report, which checks them against the launch bounds); dev/flash_model.py reads
// these tiles and models their speed.
// Precision: bf16 operands, fp32 accumulation, fp32 softmax; P and dS are rounded to bf16 for their
// products (as the cuBLAS path rounds them in HBM). Stream: the last argument.
#pragma once
#include <cmath>
#include "cuda_common.cuh"
#include "mma.cuh"

static const float FLASH_LOG2E = 1.4426950408889634f;

static inline bool flash_attention_supported(int HS) { return HS == 16 || HS == 32 || HS == 64 || HS == 128; }

// forward tiles: BQ queries per block over WARPS warps (BQ / WARPS rows each), BK keys per tile,
// STAGES cp.async stages of (K, V) tiles, MIN_BLOCKS the blocks per SM that __launch_bounds__ asks
template <int HS>
struct FlashFwdTile {
    static const int BQ = 128, WARPS = HS >= 64 ? 4 : 8, BK = HS == 128 ? 32 : 64, STAGES = 3, MIN_BLOCKS = 2;
    static const bool Q_REGS = HS != 128;  // Q held in registers as A fragments (else read from shared memory per tile)
};
// backward tiles: BK keys per block over WARPS warps (16 key rows each), BQ queries per tile;
// MIN_BLOCKS as above
template <int HS>
struct FlashBwdTile {
    static const int BK = 128, WARPS = 8, BQ = HS == 128 ? 32 : HS == 16 ? 128 : 64, MIN_BLOCKS = 1, DQ_STAGES = 2;
};

// s (ROWS, HS + 8) shared = rows [r0, r0 + ROWS) of the (T, ld) matrix at src, zeros from row T on
template <int HS, int ROWS, int THREADS>
__device__ __forceinline__ void flash_load_tile(bf16* s, const bf16* src, int ld, int r0, int T) {
    const int CH = HS / 8;  // 16-byte chunks per row
    for (int i = threadIdx.x; i < ROWS * CH; i += THREADS) {
        int r = i / CH, ch = i % CH;
        bool valid = r0 + r < T;
        cp_async16(s + r * (HS + 8) + ch * 8, valid ? src + (size_t)(r0 + r) * ld + ch * 8 : src, valid);
    }
}

// acc[m] (N/8 tiles each) += A Bᵀ over k step kk (columns [16 kk, 16 kk + 16)) for the M row
// tiles of 16 of A (fragments a[m]), B = rows [0, N) of a shared (N, HS) tile: the score-shaped
// products (Q Kᵀ, K Qᵀ, V dOᵀ). Each B fragment is read once for the M row tiles.
template <int HS, int N, int M>
__device__ __forceinline__ void flash_mma_abt_step(float (*acc)[N / 8][4], const uint32_t (*a)[4], const bf16* s, int kk) {
    int lane = threadIdx.x % 32;
    for (int n = 0; n < N / 16; n++) {
        uint32_t b[4];  // b[0..1]: n tile 2n, b[2..3]: n tile 2n + 1
        ldmatrix_x4(b, s + (n * 16 + (lane / 16) * 8 + lane % 8) * (HS + 8) + kk * 16 + ((lane / 8) % 2) * 8);
        for (int m = 0; m < M; m++) {
            mma_bf16_16816(acc[m][2 * n], a[m], b, acc[m][2 * n]);
            mma_bf16_16816(acc[m][2 * n + 1], a[m], b + 2, acc[m][2 * n + 1]);
        }
    }
}

// the whole product, A = rows [r, r + 16 M) of a shared (., HS) tile loaded one k step at a time
template <int HS, int N, int M>
__device__ __forceinline__ void flash_mma_abt(float (*acc)[N / 8][4], const bf16* sa, int r, const bf16* s) {
    int lane = threadIdx.x % 32;
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[M][4];
        for (int m = 0; m < M; m++) ldmatrix_x4(a[m], sa + (r + 16 * m + lane % 16) * (HS + 8) + kk * 16 + (lane / 16) * 8);
        flash_mma_abt_step<HS, N, M>(acc, a, s, kk);
    }
}

// the whole product for M row tiles whose A fragments are held in registers (a[kk][m]: k step kk,
// row tile m)
template <int HS, int N, int M>
__device__ __forceinline__ void flash_mma_abt_regs(float (*acc)[N / 8][4], const uint32_t (*a)[M][4], const bf16* s) {
    for (int kk = 0; kk < HS / 16; kk++) flash_mma_abt_step<HS, N, M>(acc, a[kk], s, kk);
}

// acc[m] (HS/8 tiles) += P V for the M row tiles of P (16 x K each, fp32 C fragments p[m], rounded
// to bf16), V = rows [0, K) of a shared (K, HS) tile: the value-shaped products (P V, Pᵀ dO, dSᵀ Q)
template <int HS, int K, int M>
__device__ __forceinline__ void flash_mma_pv(float (*acc)[HS / 8][4], const float (*p)[K / 8][4], const bf16* s) {
    int lane = threadIdx.x % 32;
    for (int kt = 0; kt < K / 16; kt++) {
        uint32_t a[M][4];
        for (int m = 0; m < M; m++) mma_pack_a(a[m], p[m][2 * kt], p[m][2 * kt + 1]);
        for (int n = 0; n < HS / 16; n++) {
            uint32_t b[4];  // b[0..1]: n tile 2n, b[2..3]: n tile 2n + 1
            ldmatrix_x4_trans(b, s + (kt * 16 + ((lane / 8) % 2) * 8 + lane % 8) * (HS + 8) + n * 16 + (lane / 16) * 8);
            for (int m = 0; m < M; m++) {
                mma_bf16_16816(acc[m][2 * n], a[m], b, acc[m][2 * n]);
                mma_bf16_16816(acc[m][2 * n + 1], a[m], b + 2, acc[m][2 * n + 1]);
            }
        }
    }
}

// acc (NC/8 tiles) += Aᵀ B over K rows: A stored transposed as a shared (K, lda) tile whose
// columns [m0, m0 + 16) are this warp's 16 rows of the product, B = columns [n0, n0 + NC) of a
// shared (K, ldb) tile (dQ = dS K with dSᵀ and K in shared memory)
template <int K, int NC>
__device__ __forceinline__ void flash_mma_atb(float (*acc)[4], const bf16* sa, int lda, int m0, const bf16* sb, int ldb, int n0) {
    int lane = threadIdx.x % 32;
    for (int kt = 0; kt < K / 16; kt++) {
        uint32_t a[4];  // matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15), each stored k-major: .trans
        ldmatrix_x4_trans(a, sa + (kt * 16 + (lane / 16) * 8 + lane % 8) * lda + m0 + ((lane / 8) % 2) * 8);
        for (int n = 0; n < NC / 16; n++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, sb + (kt * 16 + ((lane / 8) % 2) * 8 + lane % 8) * ldb + n0 + n * 16 + (lane / 16) * 8);
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
// forward: grid (ceil(T/128), NH, B), 128 threads; shared memory: Q and the (K, V) stages

template <int HS>
__global__ void __launch_bounds__(FlashFwdTile<HS>::WARPS * 32, FlashFwdTile<HS>::MIN_BLOCKS)
flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int NKV, float scale_log2) {
    typedef FlashFwdTile<HS> F;
    const int BQ = F::BQ, BK = F::BK, S = F::STAGES, THREADS = F::WARPS * 32, M = BQ / F::WARPS / 16, P = HS + 8;
    extern __shared__ __align__(16) bf16 flash_smem[];
    bf16* sQ = flash_smem;  // stage i: K at sKV + 2 i BK P, V at sKV + (2 i + 1) BK P
    bf16* sKV = sQ + BQ * P;
    int qt = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    int h = blockIdx.y, b = blockIdx.z, kvh = h / (NH / NKV);
    int ld = (NH + 2 * NKV) * HS, q0 = qt * BQ;
    const bf16* q = qkv + (size_t)b * T * ld + h * HS;
    const bf16* k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
    const bf16* v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    int r0 = q0 + warp * (BQ / F::WARPS);            // this warp's first row
    int nkt = min((T + BK - 1) / BK, (q0 + BQ) / BK);  // key tiles up to the block's diagonal
    auto issue = [&](int kt) {  // K and V of key tile kt into its stage
        bf16* st = sKV + 2 * (kt % S) * BK * P;
        flash_load_tile<HS, BK, THREADS>(st, k, ld, kt * BK, T);
        flash_load_tile<HS, BK, THREADS>(st + BK * P, v, ld, kt * BK, T);
    };

    flash_load_tile<HS, BQ, THREADS>(sQ, q, ld, q0, T);
    issue(0);
    cp_async_commit();
    for (int st = 1; st < S - 1; st++) {
        if (st < nkt) issue(st);
        cp_async_commit();
    }
    uint32_t qf[F::Q_REGS ? HS / 16 : 1][M][4];  // with Q_REGS: Q's A fragments (k step, row tile)
    if (F::Q_REGS) {
        cp_async_wait<S - 2>();  // Q and key tile 0 are in
        __syncthreads();
        for (int kk = 0; kk < HS / 16; kk++)
            for (int m = 0; m < M; m++)
                ldmatrix_x4(qf[kk][m], sQ + (warp * (BQ / F::WARPS) + 16 * m + lane % 16) * P + kk * 16 + (lane / 16) * 8);
    }
    float o[M][HS / 8][4];
    for (int m = 0; m < M; m++) flash_zero<HS / 8>(o[m]);
    float mrow[M][2], l[M][2];  // row tiles m, rows g and g + 8: running max and this lane's sum
    for (int m = 0; m < M; m++) for (int half = 0; half < 2; half++) { mrow[m][half] = -INFINITY; l[m][half] = 0.0f; }
#pragma unroll 1
    for (int kt = 0; kt < nkt; kt++) {
        cp_async_wait<S - 2>();  // key tile kt is in
        __syncthreads();         // ... for every thread, and every warp is done with tile kt - 1's stage
        if (kt + S - 1 < nkt) issue(kt + S - 1);
        cp_async_commit();
        if (kt * BK > r0 + BQ / F::WARPS - 1) continue;  // every key above this warp's rows
        const bf16* sK = sKV + 2 * (kt % S) * BK * P;
        float s[M][BK / 8][4];
        for (int m = 0; m < M; m++) flash_zero<BK / 8>(s[m]);
        if (F::Q_REGS) flash_mma_abt_regs<HS, BK, M>(s, qf, sK);
        else flash_mma_abt<HS, BK, M>(s, sQ, warp * (BQ / F::WARPS), sK);
        bool diagonal = kt * BK + BK - 1 > r0;  // some key above some row of this warp
        // online softmax in log2 units; a row's max is finite from key tile 0 on (key 0 <= row)
        for (int m = 0; m < M; m++)
            for (int half = 0; half < 2; half++) {
                int row = r0 + 16 * m + g + 8 * half;
                float mx = mrow[m][half];
                for (int n = 0; n < BK / 8; n++)
                    for (int e = 0; e < 2; e++) {
                        int key = kt * BK + n * 8 + 2 * c + e;
                        float x = !diagonal || key <= row ? s[m][n][2 * half + e] * scale_log2 : -INFINITY;
                        s[m][n][2 * half + e] = x;
                        mx = fmaxf(mx, x);
                    }
                mx = flash_row_max(mx);
                float corr = exp2f(mrow[m][half] - mx);
                mrow[m][half] = mx;
                float sum = 0.0f;
                for (int n = 0; n < BK / 8; n++)
                    for (int e = 0; e < 2; e++) {
                        float p = exp2f(s[m][n][2 * half + e] - mx);
                        s[m][n][2 * half + e] = p;
                        sum += p;
                    }
                l[m][half] = l[m][half] * corr + sum;
                for (int n = 0; n < HS / 8; n++) { o[m][n][2 * half] *= corr; o[m][n][2 * half + 1] *= corr; }
            }
        flash_mma_pv<HS, BK, M>(o, s, sK + BK * P);  // O += P V
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

// rows (B*NH*T) = (lse · log2 e, D) per (b, h, t), D = rowsum(dO ∘ O), one warp per row: the two
// numbers the backward reads per query, side by side so that one 8-byte copy brings both;
// lse (B, NH, T), dout, out (B, T, NH*HS)
__global__ void flash_rowdot_kernel(float2* rows, const float* lse, const bf16* dout, const bf16* out, int B, int T, int NH, int HS) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= B * NH * T) return;
    float d = attention_row_dot(dout, out, r, T, NH, HS);
    if (threadIdx.x % 32 == 0) rows[r] = make_float2(lse[r] * FLASH_LOG2E, d);
}

// Waits (one thread) until the counter at p reads turn. On a GPU the block it waits for took its
// ticket earlier and is running; dev/emu runs blocks in ticket order, so there the turn must
// already have come, and a wait that would never end stops the program instead.
__device__ __forceinline__ void flash_wait_turn(const int* p, int turn) {
#if defined(__CUDA_ARCH__)
    while (*(const volatile int*)p != turn) __nanosleep(32);
    __threadfence();
#else
    if (*p != turn) { fprintf(stderr, "flash backward: dQ turn %d awaited, counter at %d (the order would deadlock)\n", turn, *p); abort(); }
#endif
}

// the tickets and turns of one backward call: int[1 + B * NH * ceil(T / BQ)], zeroed before it
template <int HS> static inline size_t flash_order_ints(int B, int T, int NH) {
    return 1 + (size_t)B * NH * cuda_ceil_div(T, FlashBwdTile<HS>::BQ);
}

// the compute warps' named barrier in the backward (the writer warp never takes part in it)
static const int FLASH_BAR_COMPUTE = 1;

// The dQ writer: the block's last warp. For each query tile the compute warps leave their part of
// dQ (fp32) in a shared stage and arrive on its "full" mbarrier; the writer waits for it and for
// the tile's turn, adds the part to dq_accum in the order "diagonal key block first, key block 0
// last", passes the turn on and arrives on the stage's "empty" mbarrier, while the compute warps
// go on to the next tile (they wait on "empty" only before they fill the stage again). The first
// part is stored, the next ones are added by red.global.add: no value comes back, so nothing
// waits on L2 but the one fence before the turn passes. After the kernel, flash_dq_to_bf16_kernel
// writes the sums into dqkv.
template <int HS>
__device__ __forceinline__ void flash_backward_dq_writer(float* dq_accum, int* turns, const float* sDQ, uint64_t* full,
                                                         uint64_t* empty, int b, int kvh, int kb, int total, int per_head, int it0,
                                                         int T, int NH, int NKV) {
    typedef FlashBwdTile<HS> F;
    const int BQ = F::BQ, BK = F::BK, S = F::DQ_STAGES, PD = HS + 8, CH = HS / 4;
    int lane = threadIdx.x % 32, group = NH / NKV, nq = (T + BQ - 1) / BQ;
#pragma unroll 1
    for (int idx = 0; idx < total; idx++) {
        int stage = idx % S, h = kvh * group + idx / per_head, qi = it0 + idx % per_head, q0 = qi * BQ;
        int rows = min(BQ, T - q0), turn = q0 / BK - kb;
        int* turn_p = turns + ((size_t)b * NH + h) * nq + qi;
        const float* part = sDQ + stage * BQ * PD;
        float* acc = dq_accum + (((size_t)b * NH + h) * T + q0) * HS;
        mbar_wait(full + stage, (idx / S) & 1);  // the compute warps' part is in the stage
        if (turn > 0) {
            if (lane == 0) flash_wait_turn(turn_p, turn);
            __syncwarp();
        }
        for (int i = lane; i < rows * CH; i += 32) {
            int r = i / CH, c4 = i % CH;
            float4 x = *(const float4*)(part + r * PD + 4 * c4);
            if (turn == 0) __stcg((float4*)(acc + (size_t)r * HS + 4 * c4), x);
            else red_add_f32x4(acc + (size_t)r * HS + 4 * c4, x);
        }
        if (kb > 0) {  // key block 0 is the last of every tile: nobody waits for it
            __threadfence();  // the part is performed at L2 before the turn passes on
            __syncwarp();
            if (lane == 0) atomicAdd(turn_p, 1);
        }
        mbar_arrive(empty + stage);  // the stage is drained
    }
}

// dK, dV and dQ: grid (ceil(T/128), NKV, B), WARPS compute warps and the dQ writer warp.
// dq_accum (B, NH, T, HS) fp32 scratch, order: the zeroed counters above, rows: flash_rowdot_kernel's
// (lse · log2 e, D). Shared memory: the block's K and V, two buffers of a query tile (Q, dO and
// its rows' (lse · log2 e, D): the next loading while this one is used), the tile's dSᵀ, the dQ
// stages, their full and empty mbarriers and the ticket.
template <int HS>
__global__ void __launch_bounds__(FlashBwdTile<HS>::WARPS * 32 + 32, FlashBwdTile<HS>::MIN_BLOCKS)
flash_backward_kernel(bf16* dqkv, float* dq_accum, int* order, const bf16* dout, const bf16* qkv, const float2* rowstats,
                      int T, int NH, int NKV, float scale, float scale_log2) {
    typedef FlashBwdTile<HS> F;
    const int BK = F::BK, BQ = F::BQ, THREADS = F::WARPS * 32, P = HS + 8, PS = BQ + 8, PD = HS + 8;
    // the dQ product's warp grid: RG row tiles of 16 queries x CG column slices of DC
    const int RG = BQ / 16, CG = F::WARPS / RG, DC = HS / CG;
    static_assert(RG * CG == F::WARPS && DC % 16 == 0, "dQ warp grid");
    extern __shared__ __align__(16) bf16 flash_smem[];
    // buffer i: Q at sQ + i * QBUF, dO at sdO + i * QBUF, its rows' (lse · log2 e, D) at sR + i * BQ
    const int QBUF = 2 * BQ * P;
    bf16 *sK = flash_smem, *sV = sK + BK * P, *sQ = sV + BK * P, *sdO = sQ + BQ * P, *sdS = sQ + 2 * QBUF;
    float2* sR = (float2*)(sdS + BK * PS);
    float* sDQ = (float*)(sR + 2 * BQ);  // F::DQ_STAGES stages of (BQ, HS + 8) fp32
    uint64_t* sFull = (uint64_t*)(sDQ + F::DQ_STAGES * BQ * PD);  // per stage: all compute threads arrive
    uint64_t* sEmpty = sFull + F::DQ_STAGES;                      // per stage: the writer's 32 lanes arrive
    int* sTicket = (int*)(sEmpty + F::DQ_STAGES);
    if (threadIdx.x == 0) {
        *sTicket = atomicAdd(order, 1);
        for (int st = 0; st < F::DQ_STAGES; st++) { mbar_init(sFull + st, THREADS); mbar_init(sEmpty + st, 32); }
    }
    __syncthreads();
    int nkb = gridDim.x, ticket = *sTicket;
    int kb = nkb - 1 - ticket % nkb, kvh = ticket / nkb % NKV, b = ticket / nkb / NKV, group = NH / NKV;
    int ld = (NH + 2 * NKV) * HS, k0 = kb * BK, nq = (T + BQ - 1) / BQ;
    // the work: the group's q heads, each with the query tiles that reach key k0
    int it0 = k0 / BQ, per_head = nq - it0, total = group * per_head;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    if (warp == F::WARPS) {
        flash_backward_dq_writer<HS>(dq_accum, order + 1, sDQ, sFull, sEmpty, b, kvh, kb, total, per_head, it0, T, NH, NKV);
        return;
    }
    const bf16* k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
    const bf16* v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    int rk[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    int rg = warp % RG, cg = warp / RG;  // this warp's part of dQ: rows rg*16.., columns cg*DC..
    auto issue = [&](int idx, int buf) {  // loads query tile idx into buffer buf
        int h = kvh * group + idx / per_head, q0 = (it0 + idx % per_head) * BQ;
        flash_load_tile<HS, BQ, THREADS>(sQ + buf * QBUF, qkv + (size_t)b * T * ld + h * HS, ld, q0, T);
        flash_load_tile<HS, BQ, THREADS>(sdO + buf * QBUF, dout + (size_t)b * T * NH * HS + h * HS, NH * HS, q0, T);
        const float2* r = rowstats + ((size_t)b * NH + h) * T + q0;
        for (int i = threadIdx.x; i < BQ; i += THREADS) cp_async8(sR + buf * BQ + i, q0 + i < T ? r + i : r, q0 + i < T);
    };

    flash_load_tile<HS, BK, THREADS>(sK, k, ld, k0, T);
    flash_load_tile<HS, BK, THREADS>(sV, v, ld, k0, T);
    issue(0, 0);
    cp_async_commit();
    float dk[1][HS / 8][4], dv[1][HS / 8][4];
    flash_zero<HS / 8>(dk[0]);
    flash_zero<HS / 8>(dv[0]);
#pragma unroll 1
    for (int idx = 0; idx < total; idx++) {
        int buf = idx % 2, q0 = (it0 + idx % per_head) * BQ, stage = idx % F::DQ_STAGES;
        cp_async_wait<0>();                    // query tile idx (and K, V) is in for this thread
        bar_sync(FLASH_BAR_COMPUTE, THREADS);  // ... for every thread; every warp is done with tile idx - 1
        if (idx + 1 < total) issue(idx + 1, 1 - buf);  // into the buffer tile idx - 1 used
        cp_async_commit();
        const bf16 *q_s = sQ + buf * QBUF, *do_s = sdO + buf * QBUF;
        const float2* r_s = sR + buf * BQ;
        float s[1][BQ / 8][4];  // Pᵀ, then dSᵀ (16 keys x BQ queries)
        flash_zero<BQ / 8>(s[0]);
        if (k0 + warp * 16 <= q0 + BQ - 1) {  // some key of this warp at or below some query
            float dp[1][BQ / 8][4];
            int last = min(BQ, T - q0) - 1;   // the tile's last query column inside T
            flash_mma_abt<HS, BQ, 1>(s, sK, warp * 16, q_s);  // Sᵀ = K Qᵀ
            for (int n = 0; n < BQ / 8; n++)
                for (int i = 0; i < 4; i++) {
                    int col = n * 8 + 2 * c + i % 2;
                    s[0][n][i] = rk[i / 2] <= q0 + col && col <= last ? exp2f(s[0][n][i] * scale_log2 - r_s[col].x) : 0.0f;
                }
            flash_mma_pv<HS, BQ, 1>(dv, s, do_s);  // dV += Pᵀ dO
            flash_zero<BQ / 8>(dp[0]);
            flash_mma_abt<HS, BQ, 1>(dp, sV, warp * 16, do_s);  // dPᵀ = V dOᵀ
            for (int n = 0; n < BQ / 8; n++)
                for (int i = 0; i < 4; i++) s[0][n][i] = scale * s[0][n][i] * (dp[0][n][i] - r_s[n * 8 + 2 * c + i % 2].y);
            flash_mma_pv<HS, BQ, 1>(dk, s, q_s);  // dK += dSᵀ Q
        }
        for (int n = 0; n < BQ / 8; n++)  // dSᵀ (bf16, as the dK product rounds it) for dQ
            for (int half = 0; half < 2; half++)
                *(uint32_t*)(sdS + (warp * 16 + g + 8 * half) * PS + n * 8 + 2 * c) = mma_pack_bf16(s[0][n][2 * half], s[0][n][2 * half + 1]);
        bar_sync(FLASH_BAR_COMPUTE, THREADS);  // every warp's dSᵀ is in
        float dq[DC / 8][4];
        flash_zero<DC / 8>(dq);
        flash_mma_atb<BK, DC>(dq, sdS, PS, rg * 16, sK, P, cg * DC);  // this block's part of dQ = dS K
        if (idx >= F::DQ_STAGES) mbar_wait(sEmpty + stage, (idx / F::DQ_STAGES - 1) & 1);  // the writer drained the stage
        float* part = sDQ + stage * BQ * PD + (rg * 16) * PD + cg * DC;
        for (int half = 0; half < 2; half++)
            for (int n = 0; n < DC / 8; n++)
                *(float2*)(part + (g + 8 * half) * PD + n * 8 + 2 * c) = make_float2(dq[n][2 * half], dq[n][2 * half + 1]);
        mbar_arrive(sFull + stage);  // the part is in: the writer takes it
    }
    flash_store_rows<HS>(dqkv + (size_t)b * T * ld + (NH + kvh) * HS, ld, k0 + warp * 16, T, dk[0], 1.0f, 1.0f);
    flash_store_rows<HS>(dqkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS, ld, k0 + warp * 16, T, dv[0], 1.0f, 1.0f);
}

// dqkv columns [0, NH * HS) (B, T, (NH + 2*NKV) * HS) = dq_accum (B, NH, T, HS) fp32 rounded to
// bf16, 8 elements a thread (HS a multiple of 8)
__global__ void flash_dq_to_bf16_kernel(bf16* dqkv, const float* dq_accum, int B, int T, int NH, int NKV, int HS) {
    size_t e = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (e >= (size_t)B * NH * T * HS) return;
    int i = (int)(e % HS), t = (int)(e / HS % T), h = (int)(e / ((size_t)HS * T) % NH);
    size_t b = e / ((size_t)HS * T * NH);
    float4 x0 = __ldcs((const float4*)(dq_accum + e)), x1 = __ldcs((const float4*)(dq_accum + e + 4));
    uint4 v = make_uint4(mma_pack_bf16(x0.x, x0.y), mma_pack_bf16(x0.z, x0.w), mma_pack_bf16(x1.x, x1.y), mma_pack_bf16(x1.z, x1.w));
    *(uint4*)(dqkv + (b * T + t) * (size_t)(NH + 2 * NKV) * HS + (size_t)h * HS + i) = v;
}

// ----------------------------------------------------------------------------
// launchers

template <int HS> static inline size_t flash_forward_smem() {
    typedef FlashFwdTile<HS> F;
    return (size_t)(F::BQ + 2 * F::STAGES * F::BK) * (HS + 8) * sizeof(bf16);
}
template <int HS> static inline size_t flash_backward_smem() {
    typedef FlashBwdTile<HS> F;
    return (size_t)(2 * F::BK + 4 * F::BQ) * (HS + 8) * sizeof(bf16) + (size_t)F::BK * (F::BQ + 8) * sizeof(bf16) +
           2 * F::BQ * sizeof(float2) + (size_t)F::DQ_STAGES * (F::BQ * (HS + 8) * sizeof(float) + 2 * sizeof(uint64_t)) + 16;
}

// Shared memory above 48 KB must be opted into, once per kernel.
template <int HS>
static inline void flash_set_smem_limits(void) {
    static bool done = false;
    if (done) return;
    CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_forward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)flash_forward_smem<HS>()));
    CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_backward_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)flash_backward_smem<HS>()));
    done = true;
}

static inline void flash_check(const void* qkv, const void* other, int HS) {
    if (!flash_attention_supported(HS) || !cuda_aligned16(qkv) || !cuda_aligned16(other)) {
        fprintf(stderr, "flash attention: head size %d or unaligned buffers (needs 16, 32, 64 or 128 and 16-byte alignment)\n", HS);
        exit(1);
    }
}

// the ints of the backward's order counters (its other scratch: D, and dq_accum (B, NH, T, HS) fp32)
static inline size_t flash_order_ints_hs(int B, int T, int NH, int HS) {
    if (HS == 16) return flash_order_ints<16>(B, T, NH);
    if (HS == 32) return flash_order_ints<32>(B, T, NH);
    if (HS == 64) return flash_order_ints<64>(B, T, NH);
    return flash_order_ints<128>(B, T, NH);
}

template <int HS>
static inline void flash_forward_hs(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV, cudaStream_t stream) {
    flash_set_smem_limits<HS>();
    dim3 grid(cuda_ceil_div(T, FlashFwdTile<HS>::BQ), NH, B);
    float scale_log2 = FLASH_LOG2E / sqrtf((float)HS);
    flash_forward_kernel<HS><<<grid, FlashFwdTile<HS>::WARPS * 32, flash_forward_smem<HS>(), stream>>>(out, lse, qkv, T, NH, NKV, scale_log2);
    KERNEL_CHECK();
}

template <int HS>
static inline void flash_backward_hs(bf16* dqkv, float* dq_accum, int* order, const bf16* dout, const bf16* qkv, const float2* rows,
                                     int B, int T, int NH, int NKV, cudaStream_t stream) {
    flash_set_smem_limits<HS>();
    float scale = 1.0f / sqrtf((float)HS), scale_log2 = FLASH_LOG2E * scale;
    CUDA_CHECK(cudaMemsetAsync(order, 0, flash_order_ints<HS>(B, T, NH) * sizeof(int), stream));
    dim3 grid(cuda_ceil_div(T, FlashBwdTile<HS>::BK), NKV, B);
    flash_backward_kernel<HS><<<grid, FlashBwdTile<HS>::WARPS * 32 + 32, flash_backward_smem<HS>(), stream>>>(
        dqkv, dq_accum, order, dout, qkv, rows, T, NH, NKV, scale, scale_log2);
    KERNEL_CHECK();
    size_t chunks = (size_t)B * NH * T * HS / 8;
    flash_dq_to_bf16_kernel<<<cuda_ceil_div(chunks, (size_t)256), 256, 0, stream>>>(dqkv, dq_accum, B, T, NH, NKV, HS);
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

// dqkv (B, T, (NH + 2*NKV)*HS) written; scratch: rows (B*NH*T float2), dq_accum (B*NH*T*HS) fp32
// and order (flash_order_ints_hs ints)
static inline void flash_attention_backward(bf16* dqkv, float2* rows, float* dq_accum, int* order, const bf16* dout, const bf16* qkv,
                                            const bf16* out, const float* lse, int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    flash_check(qkv, dqkv, HS);
    flash_check(dout, out, HS);
    int n = B * NH * T, warps = 8;
    flash_rowdot_kernel<<<cuda_ceil_div(n, warps), warps * 32, 0, stream>>>(rows, lse, dout, out, B, T, NH, HS);
    KERNEL_CHECK();
    if (HS == 16) flash_backward_hs<16>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
    else if (HS == 32) flash_backward_hs<32>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
    else if (HS == 64) flash_backward_hs<64>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
    else flash_backward_hs<128>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
}
