// flash_forward_sm90.cuh — the fused causal attention forward on Hopper's warpgroup MMA (wgmma,
// sm_90a; llmc/mma.cuh), beside flash_forward.cuh's mma.sync kernel: the same algorithm (key tiles
// up to the causal diagonal, the online softmax in registers: flash_forward_scores and
// flash_forward_rescale), a (K, V) ring of cp.async stages with a full and an empty mbarrier each,
// and the same outputs, but the products read K and V straight from shared memory (no ldmatrix a
// tile) and run asynchronously on a warpgroup's tensor cores. Launched by flash_attention.cuh's
// flash_attention_forward_sm90 for head sizes 64 and 128; not yet the default anywhere (not yet
// measured on a GPU): dev_attention validates and times it beside the mma.sync kernel.
//
// Block: 128 queries of one q head (FlashFwdSm90Tile), two warpgroups of 64 rows; warp w of a
// warpgroup holds rows 16 w .. 16 w + 15 of its 64 (the wgmma D fragment: per n8 block the
// mma.m16n8 C fragment, so flash_forward.cuh's softmax takes it as one row tile). Per key tile
// of 64:
//   S = Q Kᵀ    wgmma m64n64k16, A = the warpgroup's 64 rows of Q, B = K (K-major), HS / 16 steps;
//               at HS 128 RS, Q's A fragments loaded into registers once (Q_REGS), at HS 64 SS
//   softmax     flash_forward_scores on S (the causal mask on the diagonal tiles only): P, the rows'
//               running max and sums, the rescale factors
//   O += P V    wgmma m64nHSk16, A = P in registers (S's fragments packed to bf16, mma_pack_a), B = V
//               (N-major), 4 steps of 16 keys
// in a pipeline (FlashAttention-3's overlap within a warpgroup): tile kt's O += P V is issued right
// after tile kt + 1's S = Q Kᵀ and runs while the warpgroup computes tile kt + 1's softmax; O's
// rescale by tile kt + 1's factors (flash_forward_rescale) waits for it. O sees the same operations
// in the same order as without the pipeline (bitwise the same outputs). A stage is let go a tile
// later (once the P V that reads its V is done), so the ring takes 4 stages for two tiles in
// flight ahead of the one computed (3 without the pipeline).
// Shared memory: Q, K and V as rows of 64 bf16 (128 bytes) in 128-byte-swizzled atoms of 8 rows
// (flash_load_tile's SW128), the layout the descriptors name (mma.cuh's tables: K-major for Q and K,
// N-major for V, the same bytes); a tile of HS 128 is two such column blocks, one after the other.
// The copies land through the mbarriers (generic proxy); each consumer fences to the async proxy
// (fence.proxy.async) after its wait, before the wgmma that reads them: at the end of the tile
// before, ahead of the refill's copies, so that the fence (a MEMBAR.ALL.CTA in the machine code;
// whether that waits for cp.async copies in flight is not documented) finds none of the thread's
// copies in flight. A warpgroup skips the tiles
// whose keys all lie above its 64 rows (the branch is uniform in the warpgroup, as wgmma needs).
// Precision as flash_forward.cuh: bf16 operands, fp32 accumulation and softmax, P rounded to bf16.
#pragma once
#include "flash_forward.cuh"

template <int HS>
struct FlashFwdSm90Tile {
    static const int BQ = 128, WARPGROUPS = 2, BK = 64, STAGES = 4, MIN_BLOCKS = HS == 64 ? 2 : 1;
    static const bool Q_REGS = HS == 128;  // Q as A fragments in registers (at HS 64 they would not fit 2 blocks an SM)
};
static inline bool flash_sm90_head_size(int HS) { return HS == 64 || HS == 128; }

// grid (NH·B, ceil(T/128)), 256 threads; shared memory: 1024 bytes of alignment slack, Q, the
// (K, V) stages, their full and empty barriers. Where the device code has no wgmma (not sm_90a) the
// body is empty: flash_attention_forward_sm90 refuses to launch it there. SKIP: the parts left out
// (FlashSkip: EXP, PV; 0 but in dev_attention --ablate).
template <int HS, int SKIP = 0>
__global__ void __launch_bounds__(FlashFwdSm90Tile<HS>::WARPGROUPS * 128, FlashFwdSm90Tile<HS>::MIN_BLOCKS)
flash_forward_sm90_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, int NKV, float scale_log2) {
#if MMA_WGMMA
    typedef FlashFwdSm90Tile<HS> F;
    const int BQ = F::BQ, BK = F::BK, S = F::STAGES, THREADS = F::WARPGROUPS * 128;
    extern __shared__ __align__(16) bf16 flash_smem[];
    bf16* sQ = flash_smem + (1024 - smem_address(flash_smem) % 1024) % 1024 / sizeof(bf16);  // swizzle atoms on 1024 bytes
    bf16* sKV = sQ + BQ * HS;  // stage i: K at sKV + 2 i BK HS, V at sKV + (2 i + 1) BK HS
    uint64_t* full = (uint64_t*)(sKV + 2 * S * BK * HS);
    uint64_t* empty = full + S;
    int qt = gridDim.y - 1 - blockIdx.y;  // the longest rows first, of every (b, h)
    const FlashFwdHead hd(qkv, T, NH, NKV, HS);
    const int h = hd.h, b = hd.b, ld = hd.ld, q0 = qt * BQ;
    const bf16 *q = hd.q, *k = hd.k, *v = hd.v;
    int wg = threadIdx.x / 128, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    int r0 = q0 + 16 * warp;                   // this warp's first row
    int wg_last = q0 + 64 * wg + 63;           // its warpgroup's last
    int nkt = min((T + BK - 1) / BK, (q0 + BQ) / BK);  // key tiles up to the block's diagonal
    auto issue = [&](int kt) {
        bf16* st = sKV + 2 * (kt % S) * BK * HS;
        flash_load_tile<HS, BK, THREADS, true>(st, k, ld, kt * BK, T);
        flash_load_tile<HS, BK, THREADS, true>(st + BK * HS, v, ld, kt * BK, T);
        cp_async_mbar_arrive(&full[kt % S]);
    };
    if (threadIdx.x == 0)
        for (int st = 0; st < S; st++) { mbar_init(&full[st], THREADS); mbar_init(&empty[st], THREADS); }
    __syncthreads();

    flash_load_tile<HS, BQ, THREADS, true>(sQ, q, ld, q0, T);  // Q lands with key tile 0
    for (int kt = 0; kt < S - 2 && kt < nkt; kt++) issue(kt);
    float o[1][HS / 8][4];
    flash_zero<HS / 8>(o[0]);
    float mrow[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
    uint32_t p[BK / 16][4];  // P of the previous tile, for its O += P V
    // with Q_REGS, this warp's 16 rows of Q as A fragments, loaded once (Q lands with key tile 0)
    uint32_t qf[F::Q_REGS ? HS / 16 : 1][4];
    if (F::Q_REGS) {
        mbar_wait(&full[0], 0);
#pragma unroll
        for (int st = 0; st < HS / 16; st++)
            ldmatrix_x4(qf[st], sQ + flash_sw128<BQ>(16 * warp + lane % 16, 16 * st + (lane / 16) * 8));
    }
    // O += P V of tile kt - 1 (V in stage (kt - 1) % S), issued to run beside tile kt's scores,
    // and the wait for it, after which this thread's reads of tile kt - 1's stage are done
    auto issue_pv = [&](int kt) {
#pragma unroll
        for (int st = 0; st < BK / 16; st++)
            if (!(SKIP & FLASH_SKIP_PV))
                Wgmma<HS>::template rs<1>(&o[0][0][0], p[st], flash_desc_n_major<BK>(sKV + (2 * ((kt - 1) % S) + 1) * BK * HS, st), 1);
        wgmma_commit();  // (an empty group without the product)
    };
    auto finish_pv = [&](int kt) {
        wgmma_wait<0>(&o[0][0][0], HS / 2);
        wgmma_hold(&p[0][0], 4 * BK / 16);
        mbar_arrive(&empty[(kt - 1) % S]);
    };
    // tile kt's copies landed for every thread, then seen by the tensor cores (fence.proxy.async);
    // at the end of tile kt - 1, before the refill's copies (above: no copy of the thread in flight)
    auto land = [&](int kt) {
        mbar_wait(&full[kt % S], (kt / S) & 1);
        wgmma_fence_smem();
    };
    auto issue_s = [&](int kt, float (*s)[BK / 8][4]) {  // S = Q Kᵀ of tile kt, once land(kt)
        wgmma_fence();
#pragma unroll
        for (int st = 0; st < HS / 16; st++) {
            uint64_t kd = flash_desc_k_major<BK>(sKV + 2 * (kt % S) * BK * HS, 0, st);
            if (F::Q_REGS) Wgmma<BK>::template rs<0>(&s[0][0][0], qf[st], kd, st > 0);
            else Wgmma<BK>::template ss<0, 0>(&s[0][0][0], flash_desc_k_major<BQ>(sQ, 64 * wg, st), kd, st > 0);
        }
        wgmma_commit();
    };
    auto softmax = [&](int kt, float (*s)[BK / 8][4], float (*corr)[2]) {  // the mask on the diagonal tiles only
        const bool EXP = !(SKIP & FLASH_SKIP_EXP);
        if (kt * BK + BK - 1 > r0) flash_forward_scores<true, BK, 1, EXP>(s, mrow, l, corr, kt * BK, r0, scale_log2);
        else flash_forward_scores<false, BK, 1, EXP>(s, mrow, l, corr, kt * BK, r0, scale_log2);
    };
    auto pack_p = [&](float (*s)[BK / 8][4]) {
#pragma unroll
        for (int st = 0; st < BK / 16; st++) mma_pack_a(p[st], s[0][2 * st], s[0][2 * st + 1]);
    };
    auto refill = [&](int kt) {  // after tile kt: the stage of tile kt - 2, once every thread let it go
        if (kt + S - 2 < nkt) {
            if (kt >= 2) mbar_wait(&empty[(kt - 2) % S], ((kt - 2) / S) & 1);
            issue(kt + S - 2);
        }
    };
    // the ring as flash_forward.cuh's (tile kt in stage kt % S, the (kt / S)-th use of that stage),
    // but a stage is let go a tile later: tile kt's P V runs beside tile kt + 1's scores. The key
    // tiles this warpgroup computes: 0 .. nact - 1 (the others lie above its rows); tile 0 first
    int nact = min(nkt, wg_last / BK + 1);
    {
        float s[1][BK / 8][4], corr[1][2];
        land(0);
        issue_s(0, s);
        wgmma_wait<0>(&s[0][0][0], BK / 2);
        softmax(0, s, corr);  // O is zero: no rescale
        pack_p(s);
    }
    if (1 < nact) land(1);
    refill(0);
#pragma unroll 1
    for (int kt = 1; kt < nkt; kt++) {
        if (kt < nact) {  // uniform in the warpgroup
            float s[1][BK / 8][4], corr[1][2];
            issue_s(kt, s);
            issue_pv(kt);
            wgmma_wait<1>(&s[0][0][0], BK / 2);  // the scores are in; P V may still run
            softmax(kt, s, corr);
            finish_pv(kt);
            flash_forward_rescale<HS, 1>(o, corr);  // once the product that added into O is done
            pack_p(s);
            if (kt + 1 < nact) land(kt + 1);
        } else {
            mbar_wait(&full[kt % S], (kt / S) & 1);
            if (kt == nact) {  // the warpgroup's last P V
                wgmma_fence();
                issue_pv(kt);
                finish_pv(kt);
            }
            mbar_arrive(&empty[kt % S]);
        }
        refill(kt);
    }
    if (nact == nkt) {
        wgmma_fence();
        issue_pv(nkt);
        finish_pv(nkt);
    }

    float inv[2];
    for (int half = 0; half < 2; half++) {
        int row = r0 + g + 8 * half;
        float sum = flash_row_sum(l[0][half]);
        inv[half] = 1.0f / sum;
        if (c == 0 && row < T) lse[((size_t)b * NH + h) * T + row] = (mrow[0][half] + log2f(sum)) / FLASH_LOG2E;
    }
    flash_store_rows<HS>(out + (size_t)b * T * NH * HS + h * HS, NH * HS, r0, T, o[0], inv[0], inv[1]);
#else
    (void)out; (void)lse; (void)qkv; (void)T; (void)NH; (void)NKV; (void)scale_log2;
#endif
}

// its dynamic shared memory: the alignment slack, Q, the (K, V) stages and their barriers
template <int HS> static inline size_t flash_forward_sm90_smem() {
    typedef FlashFwdSm90Tile<HS> F;
    return 1024 + (size_t)(F::BQ + 2 * F::STAGES * F::BK) * HS * sizeof(bf16) + 2 * F::STAGES * sizeof(uint64_t);
}

// 1 where this build's device code carries the wgmma kernels (an sm_90a build, or dev/emu)
__global__ void flash_sm90_probe_kernel(int* has) { *has = MMA_WGMMA; }
