// flash_backward_sm90.cuh — the fused causal attention backward on Hopper's warpgroup MMA (wgmma,
// sm_90a; llmc/mma.cuh), beside flash_backward.cuh's mma.sync kernel: the same algorithm, order and
// outputs (flash_rowdot_kernel's rows first, dK and dV of a block's 128 keys in registers, dQ
// summed in dq_accum in the fixed order "key block 0 first, the diagonal block last" through the
// same tickets and turns, then flash_dq_to_bf16_kernel), bitwise the same run to run. Launched by
// flash_attention.cuh's flash_attention_backward_sm90 for head sizes 64 and 128; not yet the
// default anywhere (not yet measured on a GPU): dev_attention validates and times it.
//
// Block: 128 keys of one kv head (FlashBwdSm90Tile), three warpgroups. The two compute warpgroups
// own 64 keys each (warp w of one holds rows 16 w .. 16 w + 15 of its 64, the wgmma D fragment);
// per query tile (BQ queries: 128 at HS 64, 64 at HS 128; Q, dO and their rows' (lse · log2 e, D)
// double-buffered by cp.async on an mbarrier each, as flash_backward.cuh), 64 queries at a time:
//   Sᵀ = K Qᵀ       wgmma m64n64k16, A = the warpgroup's K rows, B = Q (both K-major); at HS 64
//                   RS, K's A fragments loaded into registers once (KV_REGS), at HS 128 SS
//   dPᵀ = V dOᵀ     the same with V and dO (in flight while Pᵀ is computed)
//   Pᵀ = exp2(Sᵀ scale log2 e - lse log2 e)   in registers, the causal mask on the diagonal tiles
//   dV += Pᵀ dO     wgmma m64nHSk16 RS, A = Pᵀ packed to bf16, B = dO (N-major)
//   dSᵀ = scale Pᵀ ∘ (dPᵀ - D)                 (at HS 64 while dV runs: DV_OVERLAP)
//   dK += dSᵀ Q     as dV, with dSᵀ and Q
// then leave dSᵀ (bf16) in one of two shared buffers, meet once (a named barrier: both halves of
// dSᵀ are in, and both are done with the query buffer, which takes the tile after next), and
//   dQ_part = dS K  wgmma m64n64k16 SS over the block's 128 keys, A = dSᵀ read M-major (TRANS_A),
//                   B = K (N-major); warpgroup w the w-th 64 x 64 block of the BQ x HS part (the
//                   query tile after next's copies issued while it runs)
// into a shared stage for the dQ writer (flash_backward.cuh's flash_dq_writer, here the third
// warpgroup's 128 threads), which adds it to dq_accum in the fixed order. The compute warpgroups
// never wait on another block; they wait on the writer only when it is DQ_STAGES tiles behind.
// Shared memory: K, V, Q, dO and dSᵀ as SW128 tiles (flash_load_tile's, the descriptors of
// flash_common.cuh); each reader of landed copies or stored dSᵀ fences to the async proxy
// (fence.proxy.async) between the barrier and its wgmma: one fence a tile, before the barrier, for
// the tile's dSᵀ and the next query tile's landed copies, ahead of the copies after next (so that
// it finds none of the thread's copies in flight). Registers: the launch gives 168 a thread;
// the writer keeps WRITER_REGS and the compute warpgroups take COMPUTE_REGS (setmaxnreg): Sᵀ, dPᵀ,
// dK and dV (128 a thread at HS 64, 192 at HS 128) and at HS 64 K's and V's fragments (32) stay
// in registers.
// Precision as flash_backward.cuh: bf16 operands, fp32 accumulation, P and dS rounded to bf16 for
// their products, the dQ sums in fp32 (flushing subnormal sums to zero).
#pragma once
#include "flash_backward.cuh"

template <int HS>
struct FlashBwdSm90Tile {
    static const int BK = 128, BQ = HS == 64 ? 128 : 64, COMPUTE_WARPGROUPS = 2, COMPUTE_REGS = 232, WRITER_REGS = 40;
    static const int DQ_STAGES = HS == 64 ? 1 : 2;  // two at HS 64 would pass the 227 KB of shared memory by 64 bytes
    static const bool DV_OVERLAP = HS == 64;        // dSᵀ computed while dV runs: where the registers allow it
    static const bool KV_REGS = HS == 64;           // K and V as A fragments in registers (at HS 128 they would spill)
};

// dK, dV and dQ: grid (ceil(T/128), NKV, B), 384 threads; arguments as flash_backward_kernel's.
// Shared memory: 1024 bytes of alignment slack, K, V, two (Q, dO) buffers, two dSᵀ buffers, the
// dQ stages, two row buffers, the mbarriers (per query buffer: landed; per stage: full, empty),
// the ticket. Where the device code has no wgmma (not sm_90a) the body is empty:
// flash_attention_backward_sm90 refuses to launch it there. SKIP: the parts left out (FlashSkip:
// EXP, DQ, DQ_SUM; 0 but in dev_attention --ablate).
template <int HS, int SKIP = 0>
__global__ void __launch_bounds__(384, 1)
flash_backward_sm90_kernel(bf16* dqkv, float* dq_accum, int* order, const bf16* dout, const bf16* qkv, const float2* rowstats,
                           int T, int NH, int NKV, float scale, float scale_log2) {
#if MMA_WGMMA
    typedef FlashBwdSm90Tile<HS> F;
    const int BK = F::BK, BQ = F::BQ, S = F::DQ_STAGES, THREADS = F::COMPUTE_WARPGROUPS * 128;
    extern __shared__ __align__(16) bf16 flash_smem[];
    bf16* sK = flash_smem + (1024 - smem_address(flash_smem) % 1024) % 1024 / sizeof(bf16);  // swizzle atoms on 1024 bytes
    bf16 *sV = sK + BK * HS, *sQ = sV + BK * HS;  // buffer i: Q at sQ + i QBUF, dO at sdO + i QBUF
    const int QBUF = 2 * BQ * HS;
    bf16 *sdO = sQ + BQ * HS, *sdS = sQ + 2 * QBUF;  // dSᵀ buffer i at sdS + i BK BQ
    float* sDQ = (float*)(sdS + 2 * BK * BQ);        // stage i at sDQ + i BQ HS (flash_dq_stage_offset)
    float2* sR = (float2*)(sDQ + S * BQ * HS);       // buffer i's rows at sR + i BQ
    uint64_t* sLanded = (uint64_t*)(sR + 2 * BQ);    // per query buffer: every compute thread's copies landed
    uint64_t* sFull = sLanded + 2;                   // per stage: every compute thread stored its part
    uint64_t* sEmpty = sFull + S;                    // per stage: the writer's 128 threads drained it
    int* sTicket = (int*)(sEmpty + S);
    if (threadIdx.x == 0) {
        *sTicket = atomicAdd(order, 1);
        for (int i = 0; i < 2; i++) mbar_init(sLanded + i, THREADS);
        for (int i = 0; i < S; i++) { mbar_init(sFull + i, THREADS); mbar_init(sEmpty + i, 128); }
    }
    __syncthreads();
    // the tickets as flash_backward_kernel's: key block 0 of every (b, kv head), then key block 1, ...
    int heads = gridDim.y * gridDim.z, ticket = *sTicket;
    int kb = ticket / heads, kvh = ticket % heads % NKV, b = ticket % heads / NKV, group = NH / NKV;
    int ld = (NH + 2 * NKV) * HS, k0 = kb * BK, nq = (T + BQ - 1) / BQ;
    int per_head = nq - k0 / BQ, total = group * per_head;  // the group's q heads, the query tiles that reach key k0, last first
    int wg = threadIdx.x / 128;
    static_assert(2 * F::COMPUTE_REGS + F::WRITER_REGS <= 3 * 168, "the registers the warpgroups take: at most the launch's 168 a thread");
    if (wg == F::COMPUTE_WARPGROUPS) {  // the dQ writer
        warpgroup_registers_dec<F::WRITER_REGS>();
        if (SKIP & FLASH_SKIP_DQ_SUM) {  // only hand each stage back
            for (int idx = 0; idx < total; idx++) {
                mbar_wait(sFull + idx % S, (idx / S) & 1);
                mbar_arrive(sEmpty + idx % S);
            }
        } else {
            flash_dq_writer<HS, BQ, BK, S, 128, true>(dq_accum, order + 1, sDQ, sFull, sEmpty, b, kvh, kb, total, per_head, T, NH, NKV);
        }
        return;
    }
    warpgroup_registers_inc<F::COMPUTE_REGS>();
    const bf16* k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
    const bf16* v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    int warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    int key0 = k0 + 64 * wg;                                       // this warpgroup's first key
    int rk[2] = {key0 + 16 * warp + g, key0 + 16 * warp + g + 8};  // this thread's two key rows
    // this warpgroup's 64 x 64 block of the dQ part: its query rows and HS columns, 64 from
    int dq_r0 = BQ == 128 ? 64 * wg : 0, dq_c0 = HS == 128 ? 64 * wg : 0;
    auto issue = [&](int idx) {  // query tile idx into buffer idx % 2, counted on its sLanded barrier
        int buf = idx % 2, h = kvh * group + idx / per_head, q0 = (nq - 1 - idx % per_head) * BQ;
        flash_load_tile<HS, BQ, THREADS, true>(sQ + buf * QBUF, qkv + (size_t)b * T * ld + h * HS, ld, q0, T);
        flash_load_tile<HS, BQ, THREADS, true>(sdO + buf * QBUF, dout + (size_t)b * T * NH * HS + h * HS, NH * HS, q0, T);
        const float2* r = rowstats + ((size_t)b * NH + h) * T + q0;
        for (int i = threadIdx.x; i < BQ; i += THREADS) cp_async8(sR + buf * BQ + i, q0 + i < T ? r + i : r, q0 + i < T);
        cp_async_mbar_arrive(sLanded + buf);
    };
    flash_load_tile<HS, BK, THREADS, true>(sK, k, ld, k0, T);
    flash_load_tile<HS, BK, THREADS, true>(sV, v, ld, k0, T);
    issue(0);  // K and V land with query tile 0
    if (total > 1) issue(1);
    // with KV_REGS, this warp's 16 K and V rows as A fragments, loaded once (they land with query
    // tile 0): Sᵀ and dPᵀ then read only Q and dO from shared memory
    uint32_t kf[F::KV_REGS ? HS / 16 : 1][4], vf[F::KV_REGS ? HS / 16 : 1][4];
    if (F::KV_REGS) {
        mbar_wait(sLanded, 0);
#pragma unroll
        for (int st = 0; st < HS / 16; st++) {
            int at = flash_sw128<BK>(64 * wg + 16 * warp + lane % 16, 16 * st + (lane / 16) * 8);
            ldmatrix_x4(kf[st], sK + at);
            ldmatrix_x4(vf[st], sV + at);
        }
    }
    // d = X Yᵀ, one group: X this warpgroup's 64 K or V rows (its fragments xf with KV_REGS, else
    // the tile xs), Y the 64 rows of Q or dO from row y0 of the query tile ys (Sᵀ = K Qᵀ, dPᵀ = V dOᵀ)
    auto key_product = [&](float* d, const uint32_t (*xf)[4], const bf16* xs, const bf16* ys, int y0) {
#pragma unroll
        for (int st = 0; st < HS / 16; st++) {
            uint64_t yd = flash_desc_k_major<BQ>(ys, y0, st);
            if (F::KV_REGS) Wgmma<64>::template rs<0>(d, xf[st], yd, st > 0);
            else Wgmma<64>::template ss<0, 0>(d, flash_desc_k_major<BK>(xs, 64 * wg, st), yd, st > 0);
        }
        wgmma_commit();
    };
    auto pexp = [](float x) { return SKIP & FLASH_SKIP_EXP ? x : flash_exp2(x); };
    float dk[HS / 2], dv[HS / 2];
#pragma unroll
    for (int i = 0; i < HS / 2; i++) dk[i] = dv[i] = 0.0f;
#pragma unroll 1
    for (int idx = 0; idx < total; idx++) {
        int buf = idx % 2, q0 = (nq - 1 - idx % per_head) * BQ, stage = idx % S;
        const bf16 *q_s = sQ + buf * QBUF, *do_s = sdO + buf * QBUF;
        const float2* r_s = sR + buf * BQ;
        bf16* ds_s = sdS + buf * BK * BQ;
        if (idx == 0) {  // query tile 0 (and K, V) is in for every thread, seen by the tensor cores
            mbar_wait(sLanded, 0);
            wgmma_fence_smem();
        }  // (tile idx > 0: before the barrier of tile idx - 1)
        // the tile's queries 64 at a time (two sub-tiles at HS 64, one at HS 128)
#pragma unroll 1
        for (int sub = 0; sub < BQ / 64; sub++) {
            int qs = q0 + 64 * sub;  // the sub-tile's first query
            const bf16 *q_sub = q_s + 64 * sub * 64, *do_sub = do_s + 64 * sub * 64;  // its rows (one column block at HS 64)
            const float2* r_sub = r_s + 64 * sub;
            float s[8][4];  // Sᵀ, Pᵀ, then dSᵀ (the warp's 16 keys x the sub-tile's 64 queries)
            // dSᵀ (bf16, as the dK product rounds it) into buffer buf (last read by the dQ product
            // of tile idx - 2, which both warpgroups finished before the barrier of tile idx - 1)
            auto store_ds = [&]() {
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int half = 0; half < 2; half++)
                        *(uint32_t*)(ds_s + flash_sw128<BK>(64 * wg + 16 * warp + g + 8 * half, 64 * sub + n * 8 + 2 * c)) =
                            mma_pack_bf16(s[n][2 * half], s[n][2 * half + 1]);
            };
            if (key0 <= qs + 63) {  // some key of this warpgroup at or below some query (uniform in it)
                float dp[8][4];                // dPᵀ
                uint32_t p[4][4], ds[4][4];    // Pᵀ and dSᵀ as bf16 A fragments (read by dV's and dK's wgmma)
                wgmma_fence();
                key_product(&s[0][0], kf, sK, q_s, 64 * sub);
                key_product(&dp[0][0], vf, sV, do_s, 64 * sub);
                wgmma_wait<1>(&s[0][0], 32);  // Sᵀ is in; dPᵀ may still run
                int last = min(64, T - qs) - 1;  // the sub-tile's last query column inside T
                if (key0 + 63 <= qs && qs + 64 <= T) {  // every key at or before every query, inside T: no mask
#pragma unroll
                    for (int n = 0; n < 8; n++)
#pragma unroll
                        for (int i = 0; i < 4; i++) s[n][i] = pexp(fmaf(s[n][i], scale_log2, -r_sub[n * 8 + 2 * c + i % 2].x));
                } else {
#pragma unroll
                    for (int n = 0; n < 8; n++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            int col = n * 8 + 2 * c + i % 2;
                            s[n][i] = rk[i / 2] <= qs + col && col <= last ? pexp(fmaf(s[n][i], scale_log2, -r_sub[col].x)) : 0.0f;
                        }
                }
#pragma unroll
                for (int st = 0; st < 4; st++) mma_pack_a(p[st], s[2 * st], s[2 * st + 1]);
                wgmma_fence();
#pragma unroll
                for (int st = 0; st < 4; st++) Wgmma<HS>::template rs<1>(dv, p[st], flash_desc_n_major<BQ>(do_sub, st), 1);  // dV += Pᵀ dO
                wgmma_commit();
                if (!F::DV_OVERLAP) {  // dV done before dSᵀ: its Pᵀ registers are free for it
                    wgmma_wait<0>(dv, HS / 2);
                    wgmma_hold(&p[0][0], 16);
                }
                wgmma_wait<F::DV_OVERLAP ? 1 : 0>(&dp[0][0], 32);  // dPᵀ is in; dV may still run
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++) s[n][i] = scale * s[n][i] * (dp[n][i] - r_sub[n * 8 + 2 * c + i % 2].y);
#pragma unroll
                for (int st = 0; st < 4; st++) mma_pack_a(ds[st], s[2 * st], s[2 * st + 1]);
                wgmma_fence();
#pragma unroll
                for (int st = 0; st < 4; st++) Wgmma<HS>::template rs<1>(dk, ds[st], flash_desc_n_major<BQ>(q_sub, st), 1);  // dK += dSᵀ Q
                wgmma_commit();
                store_ds();  // while dK (and dV) run
                wgmma_wait<F::DV_OVERLAP ? 1 : 0>(dv, HS / 2);  // dV is done: its Pᵀ registers are free
                wgmma_hold(&p[0][0], 16);
                wgmma_wait<0>(dk, HS / 2);  // dK is done: its dSᵀ registers and the query rows are free
                wgmma_hold(&ds[0][0], 16);
            } else {  // every key above every query: dSᵀ is zero
#pragma unroll
                for (int n = 0; n < 8; n++)
#pragma unroll
                    for (int i = 0; i < 4; i++) s[n][i] = 0.0f;
                store_ds();
            }
        }
        // query tile idx + 1 is in for every thread (its copies were issued after the barrier of tile
        // idx - 1); one fence then makes it and the dSᵀ stores seen by the tensor cores of both
        // warpgroups after the barrier, and finds none of this thread's copies in flight (tile
        // idx + 2's go out after it; the fence is a MEMBAR.ALL.CTA in the machine code, and whether
        // that waits for cp.async copies in flight is not documented)
        if (idx + 1 < total) mbar_wait(sLanded + (idx + 1) % 2, ((idx + 1) / 2) & 1);
        wgmma_fence_smem();
        bar_sync(FLASH_BAR_COMPUTE, THREADS);  // all of dSᵀ is in; every compute thread is done with query buffer buf
        float dq[32];  // this warpgroup's block of dQ_part = dS K
        if (!(SKIP & FLASH_SKIP_DQ)) {
            wgmma_fence();
#pragma unroll
            for (int st = 0; st < BK / 16; st++)
                Wgmma<64>::template ss<1, 1>(dq, flash_desc_n_major<BK>(ds_s + dq_r0 * BK, st), flash_desc_n_major<BK>(sK + dq_c0 * BK, st), st > 0);
            wgmma_commit();
        }
        if (idx + 2 < total) issue(idx + 2);  // the copies issued while the product runs (it reads dSᵀ and K, not buffer buf)
        if (!(SKIP & FLASH_SKIP_DQ)) wgmma_wait<0>(dq, 32);
        if (idx >= S) mbar_wait(sEmpty + stage, (idx / S - 1) & 1);  // the writer drained the stage
        float* part = sDQ + stage * BQ * HS;
        if (!(SKIP & FLASH_SKIP_DQ))
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    int r = dq_r0 + 16 * warp + g + 8 * half, col = dq_c0 + 8 * j + 2 * c;
                    *(float2*)(part + flash_dq_stage_offset<HS, true>(r, col)) = make_float2(dq[4 * j + 2 * half], dq[4 * j + 2 * half + 1]);
                }
        mbar_arrive(sFull + stage);  // the part is in: the writer takes it
    }
    int row0 = key0 + 16 * warp;
    flash_store_rows<HS>(dqkv + (size_t)b * T * ld + (NH + kvh) * HS, ld, row0, T, (const float(*)[4])dk, 1.0f, 1.0f);
    flash_store_rows<HS>(dqkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS, ld, row0, T, (const float(*)[4])dv, 1.0f, 1.0f);
#else
    (void)dqkv; (void)dq_accum; (void)order; (void)dout; (void)qkv; (void)rowstats; (void)T; (void)NH; (void)NKV; (void)scale;
    (void)scale_log2;
#endif
}

// its dynamic shared memory: the alignment slack, K, V, the query buffers, the dSᵀ buffers, the dQ
// stages, the row buffers, the mbarriers and the ticket
template <int HS> static inline size_t flash_backward_sm90_smem() {
    typedef FlashBwdSm90Tile<HS> F;
    return 1024 + (size_t)(2 * F::BK * HS + 4 * F::BQ * HS + 2 * F::BK * F::BQ) * sizeof(bf16) +
           (size_t)F::DQ_STAGES * F::BQ * HS * sizeof(float) + 2 * F::BQ * sizeof(float2) + (2 + 2 * F::DQ_STAGES) * sizeof(uint64_t) + 16;
}
