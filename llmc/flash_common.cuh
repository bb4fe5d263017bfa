// flash_common.cuh — what the fused attention kernels share (flash_forward.cuh, flash_backward.cuh):
// their tiles, the tile loads into padded shared memory and the warp-level products on tensor
// cores (llmc/mma.cuh), written once for every head size.
//
// Tiles (the launch choice, read by dev/flash_model.py): FlashFwdTile and FlashBwdTile per head
// size. Shared memory rows are padded by 8 bf16 (16 bytes), so the 8 rows an ldmatrix reads fall
// in 8 different bank groups. Register counts and spills: dev/cuda/ptxas_report.txt (make
// ptxas-report checks them against the launch bounds).
#pragma once
#include <cmath>
#include "cuda_common.cuh"
#include "mma.cuh"

static const float FLASH_LOG2E = 1.4426950408889634f;

static inline bool flash_attention_supported(int HS) { return HS == 16 || HS == 32 || HS == 64 || HS == 128; }

// Parts a wgmma kernel leaves out (its template argument SKIP, a sum of these): 0 in every launch
// of the engine's; only dev_attention --ablate launches the others, to time a kernel without one
// part (their results are wrong by design). EXP: the exponentials (P = the exponent itself); PV:
// the forward's O += P V; DQ: the backward's dQ product and its stores to the writer's stage; DQ_SUM:
// the writer's turns and sums into dq_accum (it only hands the stages back).
enum FlashSkip { FLASH_SKIP_EXP = 1, FLASH_SKIP_PV = 2, FLASH_SKIP_DQ = 4, FLASH_SKIP_DQ_SUM = 8 };

// forward tiles: BQ queries per block over WARPS warps (BQ / WARPS rows each), BK keys per tile,
// STAGES cp.async stages of (K, V) tiles, MIN_BLOCKS the blocks per SM that __launch_bounds__ asks,
// Q_REGS: Q's A fragments held in registers (else read from shared memory at every key tile)
template <int HS>
struct FlashFwdTile {
    static const int BQ = 128, WARPS = HS >= 64 ? 4 : 8, BK = HS == 128 ? 32 : 64, STAGES = 4, MIN_BLOCKS = 2;
    static const bool Q_REGS = HS != 128;  // Q held in registers as A fragments (else read from shared memory per tile)
};
// backward tiles: BK keys per block over WARPS compute warps (16 key rows each) and a warpgroup of
// WRITER_WARPS whose first warp writes dQ (the other three leave at once), BQ queries per tile,
// DQ_STAGES shared stages of dQ parts between them; MIN_BLOCKS as above. Registers: the launch
// gives every thread 168 (12 warps, 3 on each of the SM's 4 schedulers); on sm_90a the writer
// warpgroup gives back all but WRITER_REGS and the compute warps take COMPUTE_REGS (setmaxnreg),
// the block's 64512 shared out again, so their accumulators need not spill. KV_REGS: a compute
// warp holds its 16 rows of K and V as A fragments in registers for the whole block (else it reads
// them from shared memory at every tile): 4 HS / 8 registers, which fit beside the accumulators
// of HS <= 64 in COMPUTE_REGS; builds without setmaxnreg (MMA_SETMAXNREG 0) read them from shared
// memory, as at 168 registers the fragments would only add spills.
template <int HS>
struct FlashBwdTile {
    static const int BK = 128, WARPS = 8, BQ = HS == 128 ? 32 : HS == 16 ? 128 : 64, MIN_BLOCKS = 1, DQ_STAGES = 2;
    static const int WRITER_WARPS = 4, COMPUTE_REGS = 232, WRITER_REGS = 40;
    static const bool KV_REGS = HS <= 64;
};

// A forward block's head (blockIdx.x = b NH + h): batch b, q head h, the row length ld of qkv, and
// row 0 of q head h and of its kv head's k and v in batch b (the forward kernels' inputs)
struct FlashFwdHead {
    int b, h, ld;
    const bf16 *q, *k, *v;
    __device__ FlashFwdHead(const bf16* qkv, int T, int NH, int NKV, int HS) {
        h = blockIdx.x % NH, b = blockIdx.x / NH, ld = (NH + 2 * NKV) * HS;
        int kvh = h / (NH / NKV);
        q = qkv + (size_t)b * T * ld + h * HS;
        k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
        v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    }
};

// s (ROWS, HS + 8) shared = rows [r0, r0 + ROWS) of the (T, ld) matrix at src, zeros from row T on;
// by threads [0, THREADS), thread t taking the 16-byte chunks t, t + THREADS, ... of the tile. The
// trip count is a constant, so the loop unrolls into its copies (a loop from threadIdx.x compiles
// to a general one, with its remainder and index arithmetic, at every key tile). SW128 (the wgmma
// kernels' layout, flash_forward_sm90.cuh; s 1024-byte aligned): rows of 64 bf16 in 128-byte-
// swizzled atoms instead, column block cb = column / 64 at s + cb ROWS 64, row r at + 64 r, its
// 16-byte chunk c (8 columns) at chunk c ^ (r % 8) of the row: element (r, col) at flash_sw128.
template <int ROWS>
__device__ __forceinline__ int flash_sw128(int r, int col) {
    return (col / 64) * ROWS * 64 + r * 64 + (((col % 64) / 8) ^ (r % 8)) * 8 + col % 8;
}
template <int HS, int ROWS, int THREADS, bool SW128 = false>
__device__ __forceinline__ void flash_load_tile(bf16* s, const bf16* src, int ld, int r0, int T) {
    const int CH = HS / 8, CHUNKS = ROWS * CH;  // 16-byte chunks per row, per tile
#pragma unroll
    for (int it = 0; it < (CHUNKS + THREADS - 1) / THREADS; it++) {
        int i = threadIdx.x + it * THREADS;
        if (CHUNKS % THREADS != 0 && i >= CHUNKS) break;
        int r = i / CH, ch = i % CH;
        bool valid = r0 + r < T;
        bf16* dst = s + (SW128 ? flash_sw128<ROWS>(r, 8 * ch) : r * (HS + 8) + ch * 8);
        cp_async16(dst, valid ? src + (size_t)(r0 + r) * ld + ch * 8 : src, valid);
    }
}

// The wgmma kernels' operands in a SW128 tile of ROWS rows (flash_forward_sm90.cuh,
// flash_backward_sm90.cuh), a k step's offset added to the descriptor of the tile's start (its
// start field, address / 16 in 14 bits, never carries: shared memory ends below 256 KB, so the
// compiler adds a constant instead of building each descriptor). The K-major operand of k step st (columns 16 st ..) for rows row0 ..
// (a multiple of 8): Q (A) or K (B of S = Q Kᵀ), K (A of Sᵀ = K Qᵀ), Q (B of it)
template <int ROWS>
__device__ __forceinline__ uint64_t flash_desc_k_major(const bf16* tile, int row0, int st) {
    return wgmma_desc(tile + row0 * 64, 16, 1024, WGMMA_SWIZZLE_128B) + (((st / 4) * ROWS * 128 + (st % 4) * 32) >> 4);
}
// The N-major (or M-major) operand of k step st (rows 16 st .. 16 st + 15, all columns): V (B of
// O = P V; the next 64 columns ROWS 128 bytes on), dO, Q and K (B of dV, dK, dQ), dSᵀ (A of dQ)
template <int ROWS>
__device__ __forceinline__ uint64_t flash_desc_n_major(const bf16* tile, int st) {
    return wgmma_desc(tile, ROWS * 128, 1024, WGMMA_SWIZZLE_128B) + ((st * 16 * 128) >> 4);
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

// 2^x by the SFU alone (PTX ISA "ex2": ex2.approx.ftz.f32, the approximation exp2f is built on):
// exp2f adds a range check and two multiplies per call so that results under 2^-126 come out
// subnormal; here they flush to +0, as .ftz says. A softmax term under 2^-126 beside the row's
// largest, which is 1, changes neither the row's sum nor its bf16 P. 2^-inf = +0.
// dev/emu: exp2f with the same flush.
__device__ __forceinline__ float flash_exp2(float x) {
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.0f : y;  // FLT_MIN: subnormal results flush to +0
#endif
}
