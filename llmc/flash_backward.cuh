// flash_backward.cuh — the fused causal attention backward in one pass, FlashAttention-2's five
// products per tile pair, deterministic. Launched by flash_attention.cuh.
//
// First flash_rowdot_kernel writes each query row's (lse · log2 e, D = rowsum(dO ∘ O)). Then a
// block owns 128 keys of one kv head g and walks the group's q heads and, last first, the query
// tiles at or below its keys (FlashBwdTile: 32 queries at HS = 128, 64 at 32 and 64, 128 at 16).
// Its 8 compute warps (16 key rows each) get Q, dO and the tile's rows' (lse · log2 e, D) double-
// buffered through cp.async (each buffer's copies announced on an mbarrier by
// cp.async.mbarrier.arrive) and compute
//     Pᵀ = exp(scale · K Qᵀ - lse), dV += Pᵀ dO, dPᵀ = V dOᵀ,
//     dSᵀ = scale · Pᵀ ∘ (dPᵀ - D), dK += dSᵀ Q   (dK, dV in registers all along),
//     dQ_part = dS K                          (dSᵀ through shared memory, two buffers),
// with one barrier per tile among themselves (bar.sync 1: every warp's dSᵀ is in; two until now,
// the other where a tile's copies had landed). dQ sums the parts of every key block
// at or below the query tile, in a fixed order, key block 0 first and the diagonal block last:
// the compute warps leave each part (fp32) in one of DQ_STAGES shared stages and go on; the first
// warp of the block's third warpgroup, the dQ writer, takes it (mbarriers "full" / "empty" per
// stage), waits until a counter per (b, h, query tile) says it is this block's turn, adds the part
// to dq_accum (the first part stored, the next ones by red.global.add, which returns nothing to
// wait for), fences and passes the turn on. flash_dq_to_bf16_kernel then writes the sums into dqkv.
// The compute warps never wait on another block; they wait on their writer only when it is
// DQ_STAGES tiles behind. The blocks take their work from a ticket counter (atomicAdd) in the order
// "key block 0 of every (b, g), then key block 1 of every one, ...": the blocks with the most query
// tiles start first and the shortest fill the end of the call (the causal tail). A writer waits
// only for one of a block that took its ticket earlier and is running or done: no deadlock whatever
// order the GPU starts blocks in. Every block walks the same tiles in the same order (the last
// query tile first), so a block that started later finds the earlier ones ahead of it at every tile
// and, in the steady state, does not wait. Every gradient element is summed in one fixed order, and
// the backward is bitwise the same run to run.
// Registers: 12 warps in a block put 3 on each of the SM's 4 schedulers, whose register files
// then cap them at 168 a thread at launch. On sm_90a (the default build) the writer warpgroup
// gives back all but 40 (setmaxnreg.dec) and the compute warps take 232 (setmaxnreg.inc), so the
// HS 64 and 128 kernels, which spilled their dK / dV accumulators at 168 (in the tile loop, 236 to
// 408 bytes a thread a tile of local-memory traffic at HS 128 by its SASS), keep them in registers
// (dev/cuda/ptxas_report.txt: HS 128 spills nothing; HS <= 64 spill a few bytes around the
// register handover, and HS 64 one 4-byte load in the tile loop). Builds without sm_90a code
// keep 168 and the spills (the first design had one writer warp, 9 in all, with the same cap). At HS <= 64 the compute warps also
// keep their K and V rows as A fragments (FlashBwdTile KV_REGS; sm_90a and dev/emu only): Sᵀ and
// dPᵀ read only Q and dO from shared memory (8 of 96 ldmatrix.x4 a warp and tile fewer at HS 64).
// Pᵀ takes an FFMA and flash_exp2 per element, the mask only where a warp's keys pass a query of
// the tile or the tile passes T, and the tile loads are unrolled (flash_load_tile): a warp's tile
// below the diagonal issues 864 instructions at HS 64 and 738 at HS 128, against 1582 and 1278
// before (SASS). Not yet measured on a GPU.
// Measured on an H200 (dev/flash_measured.csv), with the earlier tickets (head by head, the last
// key block first): llama300m (HS 64, T 4096) 2.16 ms, 159 causal TFLOP/s (the one-pass design
// before the writer warp: 3.8 ms); HS 128 at T 4096 4.49 ms, 153. The order above is modelled
// 7.3% and 7.5% faster there (dev/flash_model.py), not yet measured on a GPU.
// Precision: bf16 operands, fp32 accumulation; P and dS rounded to bf16 for their products (as the
// cuBLAS path rounds them in HBM); the dQ sums in fp32 (red.global.add flushes subnormal sums to
// zero, as the PTX ISA says it does on global memory).
#pragma once
#include "flash_common.cuh"

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

// rows (B*NH*T) = (lse · log2 e, D) per (b, h, t), D = rowsum(dO ∘ O): the two numbers the
// backward reads per query, side by side so that one 8-byte copy brings both. HS / 8 lanes per
// row, each one 16-byte load of dO and of O (8 products summed in order), then a shuffle tree
// within the row's lanes. (Until now one warp per row, 2-byte loads: 59 us at llama300m on an
// H200, where its 67 MB take about 15 at the bandwidth; not yet measured on a GPU.)
// lse (B, NH, T), dout, out (B, T, NH*HS), 16-byte aligned; HS a multiple of 8 up to 256
__global__ void flash_rowdot_kernel(float2* rows, const float* lse, const bf16* dout, const bf16* out, int B, int T, int NH, int HS) {
    int lanes = HS / 8;  // per row: 2, 4, 8 or 16 (a power of two)
    long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long r = gid / lanes;
    int part = (int)(gid % lanes);
    bool live = r < (long long)B * NH * T;
    float d = 0.0f;
    if (live) {
        int t = (int)(r % T), h = (int)((r / T) % NH), b = (int)(r / ((long long)T * NH));
        size_t o = ((size_t)b * T + t) * NH * HS + (size_t)h * HS + 8 * part;
        uint4 x = *reinterpret_cast<const uint4*>(dout + o), y = *reinterpret_cast<const uint4*>(out + o);
        uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
        for (int k = 0; k < 4; k++) {  // a bf16 is the top half of its float: the low element, then the high
            d += __uint_as_float(xs[k] << 16) * __uint_as_float(ys[k] << 16);
            d += __uint_as_float(xs[k] & 0xffff0000u) * __uint_as_float(ys[k] & 0xffff0000u);
        }
    }
    for (int s = lanes / 2; s > 0; s >>= 1) d += __shfl_xor_sync(0xffffffffu, d, s);  // stays within the row's lanes
    if (live && part == 0) rows[r] = make_float2(lse[r] * FLASH_LOG2E, d);
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

// the backward's named barriers: the compute warps' (the writer never takes part in it), the
// writer's own where it is more than one warp
static const int FLASH_BAR_COMPUTE = 1, FLASH_BAR_WRITER = 2;

// where a dQ part's element (r, col) lies in its shared stage of BQ rows: rows padded by 8 floats
// (the mma.sync kernel's), or HS floats with the 16-byte chunks of row r XORed with r % 8 (SW:
// the wgmma kernel's, no padding; its compute threads store float2 and the writer reads float4
// without bank conflicts)
template <int HS, bool SW>
__device__ __forceinline__ int flash_dq_stage_offset(int r, int col) {
    return SW ? r * HS + ((col / 4) ^ (r % 8)) * 4 + col % 4 : r * (HS + 8) + col;
}

// The dQ writer: THREADS threads of the block (one warp of the mma.sync kernel, a warpgroup of the
// wgmma kernel). For each query tile the compute warps leave their part of dQ (fp32) in one of
// STAGES shared stages and arrive on its "full" mbarrier; the writer waits for it and for the
// tile's turn, adds the part to dq_accum in the order "key block 0 first, the diagonal key block
// last", passes the turn on and arrives on the stage's "empty" mbarrier (every writer thread),
// while the compute warps go on to the next tile (they wait on "empty" only before they fill the
// stage again). The first part is stored, the next ones are added by red.global.add: no value
// comes back, so nothing waits on L2 but the one fence before the turn passes. After the kernel,
// flash_dq_to_bf16_kernel writes the sums into dqkv.
template <int HS, int BQ, int BK, int STAGES, int THREADS, bool SW>
__device__ __forceinline__ void flash_dq_writer(float* dq_accum, int* turns, const float* sDQ, uint64_t* full, uint64_t* empty,
                                                int b, int kvh, int kb, int total, int per_head, int T, int NH, int NKV) {
    const int CH = HS / 4;
    const int STAGE = SW ? BQ * HS : BQ * (HS + 8);
    int t = threadIdx.x % THREADS, group = NH / NKV, nq = (T + BQ - 1) / BQ;
    auto sync = [] {
        if (THREADS == 32) __syncwarp();
        else bar_sync(FLASH_BAR_WRITER, THREADS);
    };
#pragma unroll 1
    for (int idx = 0; idx < total; idx++) {
        int stage = idx % STAGES, h = kvh * group + idx / per_head, qi = nq - 1 - idx % per_head, q0 = qi * BQ;
        int rows = min(BQ, T - q0), turn = kb;  // key block 0 first, the diagonal block q0 / BK last
        int* turn_p = turns + ((size_t)b * NH + h) * nq + qi;
        const float* part = sDQ + stage * STAGE;
        float* acc = dq_accum + (((size_t)b * NH + h) * T + q0) * HS;
        mbar_wait(full + stage, (idx / STAGES) & 1);  // the compute warps' part is in the stage
        if (turn > 0) {
            if (t == 0) flash_wait_turn(turn_p, turn);
            sync();
        }
        for (int i = t; i < rows * CH; i += THREADS) {
            int r = i / CH, c4 = i % CH;
            float4 x = *(const float4*)(part + flash_dq_stage_offset<HS, SW>(r, 4 * c4));
            if (turn == 0) __stcg((float4*)(acc + (size_t)r * HS + 4 * c4), x);
            else red_add_f32x4(acc + (size_t)r * HS + 4 * c4, x);
        }
        if (kb < q0 / BK) {  // the diagonal block is the last of its tile: nobody waits for it
            __threadfence();  // the part is performed at L2 before the turn passes on
            sync();
            if (t == 0) atomicAdd(turn_p, 1);
        }
        mbar_arrive(empty + stage);  // the stage is drained
    }
}

// dK, dV and dQ: grid (ceil(T/128), NKV, B), WARPS compute warps and the dQ writer warp.
// dq_accum (B, NH, T, HS) fp32 scratch, order: the zeroed counters above, rows: flash_rowdot_kernel's
// (lse · log2 e, D). Shared memory: the block's K and V, two buffers of a query tile (Q, dO and
// its rows' (lse · log2 e, D): the next loading while this one is used, each with an mbarrier its
// copies arrive on), two of dSᵀ, the dQ stages, their full and empty mbarriers and the ticket.
template <int HS>
__global__ void __launch_bounds__((FlashBwdTile<HS>::WARPS + FlashBwdTile<HS>::WRITER_WARPS) * 32, FlashBwdTile<HS>::MIN_BLOCKS)
flash_backward_kernel(bf16* dqkv, float* dq_accum, int* order, const bf16* dout, const bf16* qkv, const float2* rowstats,
                      int T, int NH, int NKV, float scale, float scale_log2) {
    typedef FlashBwdTile<HS> F;
    constexpr bool KV_REGS = F::KV_REGS && MMA_SETMAXNREG;  // K, V fragments in registers: only with the raised budget
    const int BK = F::BK, BQ = F::BQ, THREADS = F::WARPS * 32, P = HS + 8, PS = BQ + 8, PD = HS + 8;
    // the dQ product's warp grid: RG row tiles of 16 queries x CG column slices of DC
    const int RG = BQ / 16, CG = F::WARPS / RG, DC = HS / CG;
    static_assert(RG * CG == F::WARPS && DC % 16 == 0, "dQ warp grid");
    extern __shared__ __align__(16) bf16 flash_smem[];
    // buffer i: Q at sQ + i * QBUF, dO at sdO + i * QBUF, its rows' (lse · log2 e, D) at sR + i * BQ
    const int QBUF = 2 * BQ * P;
    // dSᵀ of tile idx at sdS + (idx % 2) * BK * PS
    bf16 *sK = flash_smem, *sV = sK + BK * P, *sQ = sV + BK * P, *sdO = sQ + BQ * P, *sdS = sQ + 2 * QBUF;
    float2* sR = (float2*)(sdS + 2 * BK * PS);
    float* sDQ = (float*)(sR + 2 * BQ);  // F::DQ_STAGES stages of (BQ, HS + 8) fp32
    uint64_t* sFull = (uint64_t*)(sDQ + F::DQ_STAGES * BQ * PD);  // per stage: all compute threads arrive
    uint64_t* sEmpty = sFull + F::DQ_STAGES;                      // per stage: the writer's 32 lanes arrive
    uint64_t* sLanded = sEmpty + F::DQ_STAGES;                    // per query buffer: every compute thread's copies landed
    int* sTicket = (int*)(sLanded + 2);
    if (threadIdx.x == 0) {
        *sTicket = atomicAdd(order, 1);
        for (int st = 0; st < F::DQ_STAGES; st++) { mbar_init(sFull + st, THREADS); mbar_init(sEmpty + st, 32); }
        for (int i = 0; i < 2; i++) mbar_init(sLanded + i, THREADS);
    }
    __syncthreads();
    // tickets: key block 0 of every (b, kv head), then key block 1 of every one, ...: the longest
    // work first, and a block waits for its turn only on one with an earlier ticket
    int heads = gridDim.y * gridDim.z, ticket = *sTicket;
    int kb = ticket / heads, kvh = ticket % heads % NKV, b = ticket % heads / NKV, group = NH / NKV;
    int ld = (NH + 2 * NKV) * HS, k0 = kb * BK, nq = (T + BQ - 1) / BQ;
    // the work: the group's q heads, each with the query tiles that reach key k0, last tile first
    int it0 = k0 / BQ, per_head = nq - it0, total = group * per_head;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    static_assert(F::WARPS % 4 == 0 && F::WRITER_WARPS == 4, "whole warpgroups: the compute warps', the writer's");
    constexpr int LAUNCH_REGS = 65536 / 4 / ((F::WARPS + F::WRITER_WARPS) / 4 * 32) / 8 * 8;  // 168 a thread
    static_assert(F::WARPS * F::COMPUTE_REGS + F::WRITER_WARPS * F::WRITER_REGS <= LAUNCH_REGS * (F::WARPS + F::WRITER_WARPS),
                  "the registers the warpgroups take: at most what the launch gave the block");
    if (warp >= F::WARPS) {  // the writer warpgroup: its registers to the compute warps, its first warp writes dQ
        warpgroup_registers_dec<F::WRITER_REGS>();
        if (warp == F::WARPS)
            flash_dq_writer<HS, BQ, BK, F::DQ_STAGES, 32, false>(dq_accum, order + 1, sDQ, sFull, sEmpty, b, kvh, kb, total, per_head, T,
                                                                 NH, NKV);
        return;
    }
    warpgroup_registers_inc<F::COMPUTE_REGS>();
    const bf16* k = qkv + (size_t)b * T * ld + (NH + kvh) * HS;
    const bf16* v = qkv + (size_t)b * T * ld + (NH + NKV + kvh) * HS;
    int rk[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    int rg = warp % RG, cg = warp / RG;  // this warp's part of dQ: rows rg*16.., columns cg*DC..
    // loads query tile idx into buffer idx % 2; its sLanded barrier counts this thread in once they land
    auto issue = [&](int idx) {
        int buf = idx % 2, h = kvh * group + idx / per_head, q0 = (nq - 1 - idx % per_head) * BQ;
        flash_load_tile<HS, BQ, THREADS>(sQ + buf * QBUF, qkv + (size_t)b * T * ld + h * HS, ld, q0, T);
        flash_load_tile<HS, BQ, THREADS>(sdO + buf * QBUF, dout + (size_t)b * T * NH * HS + h * HS, NH * HS, q0, T);
        const float2* r = rowstats + ((size_t)b * NH + h) * T + q0;
        for (int i = threadIdx.x; i < BQ; i += THREADS) cp_async8(sR + buf * BQ + i, q0 + i < T ? r + i : r, q0 + i < T);
        cp_async_mbar_arrive(sLanded + buf);
    };

    flash_load_tile<HS, BK, THREADS>(sK, k, ld, k0, T);
    flash_load_tile<HS, BK, THREADS>(sV, v, ld, k0, T);
    issue(0);  // K and V land with query tile 0: sLanded[0] counts their copies too
    if (total > 1) issue(1);
    float dk[1][HS / 8][4], dv[1][HS / 8][4];
    flash_zero<HS / 8>(dk[0]);
    flash_zero<HS / 8>(dv[0]);
    uint32_t kf[KV_REGS ? HS / 16 : 1][1][4], vf[KV_REGS ? HS / 16 : 1][1][4];  // KV_REGS: this warp's K, V rows (k step)
    // One barrier of the compute warps a tile: after it every warp's dSᵀ of tile idx is in (its
    // buffer, idx % 2, was last read by the dQ product of tile idx - 2, which every warp finished
    // before the barrier of tile idx - 1), and every warp is done with tile idx's Q, dO and rows,
    // so their buffer takes tile idx + 2 at once. A warp waits for tile idx's copies on its sLanded
    // barrier (the (idx / 2)-th use of the buffer: parity (idx / 2) & 1).
#pragma unroll 1
    for (int idx = 0; idx < total; idx++) {
        int buf = idx % 2, q0 = (nq - 1 - idx % per_head) * BQ, stage = idx % F::DQ_STAGES;
        mbar_wait(sLanded + buf, (idx / 2) & 1);  // query tile idx (and K, V) is in for every thread
        if (KV_REGS && idx == 0)  // K and V are in: this warp's rows as A fragments, kept for every tile
            for (int kk = 0; kk < HS / 16; kk++) {
                ldmatrix_x4(kf[kk][0], sK + (warp * 16 + lane % 16) * P + kk * 16 + (lane / 16) * 8);
                ldmatrix_x4(vf[kk][0], sV + (warp * 16 + lane % 16) * P + kk * 16 + (lane / 16) * 8);
            }
        const bf16 *q_s = sQ + buf * QBUF, *do_s = sdO + buf * QBUF;
        const float2* r_s = sR + buf * BQ;
        float s[1][BQ / 8][4];  // Pᵀ, then dSᵀ (16 keys x BQ queries)
        flash_zero<BQ / 8>(s[0]);
        if (k0 + warp * 16 <= q0 + BQ - 1) {  // some key of this warp at or below some query
            float dp[1][BQ / 8][4];
            int last = min(BQ, T - q0) - 1;   // the tile's last query column inside T
            if (KV_REGS) flash_mma_abt_regs<HS, BQ, 1>(s, kf, q_s);  // Sᵀ = K Qᵀ
            else flash_mma_abt<HS, BQ, 1>(s, sK, warp * 16, q_s);
            if (k0 + warp * 16 + 15 <= q0 && q0 + BQ <= T)  // every key at or before every query, the tile inside T: no mask
                for (int n = 0; n < BQ / 8; n++)
                    for (int i = 0; i < 4; i++) s[0][n][i] = flash_exp2(fmaf(s[0][n][i], scale_log2, -r_s[n * 8 + 2 * c + i % 2].x));
            else
                for (int n = 0; n < BQ / 8; n++)
                    for (int i = 0; i < 4; i++) {
                        int col = n * 8 + 2 * c + i % 2;
                        s[0][n][i] = rk[i / 2] <= q0 + col && col <= last ? flash_exp2(fmaf(s[0][n][i], scale_log2, -r_s[col].x)) : 0.0f;
                    }
            flash_mma_pv<HS, BQ, 1>(dv, s, do_s);  // dV += Pᵀ dO
            flash_zero<BQ / 8>(dp[0]);
            if (KV_REGS) flash_mma_abt_regs<HS, BQ, 1>(dp, vf, do_s);  // dPᵀ = V dOᵀ
            else flash_mma_abt<HS, BQ, 1>(dp, sV, warp * 16, do_s);
            for (int n = 0; n < BQ / 8; n++)
                for (int i = 0; i < 4; i++) s[0][n][i] = scale * s[0][n][i] * (dp[0][n][i] - r_s[n * 8 + 2 * c + i % 2].y);
            flash_mma_pv<HS, BQ, 1>(dk, s, q_s);  // dK += dSᵀ Q
        }
        bf16* ds_s = sdS + buf * BK * PS;
        for (int n = 0; n < BQ / 8; n++)  // dSᵀ (bf16, as the dK product rounds it) for dQ
            for (int half = 0; half < 2; half++)
                *(uint32_t*)(ds_s + (warp * 16 + g + 8 * half) * PS + n * 8 + 2 * c) = mma_pack_bf16(s[0][n][2 * half], s[0][n][2 * half + 1]);
        bar_sync(FLASH_BAR_COMPUTE, THREADS);  // every warp's dSᵀ is in, and every warp is done with buffer buf
        if (idx + 2 < total) issue(idx + 2);
        float dq[DC / 8][4];
        flash_zero<DC / 8>(dq);
        flash_mma_atb<BK, DC>(dq, ds_s, PS, rg * 16, sK, P, cg * DC);  // this block's part of dQ = dS K
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

// its dynamic shared memory: K, V, two (Q, dO) buffers, two dSᵀ buffers, two row buffers, the dQ
// stages and their mbarriers, the query buffers' mbarriers, the ticket
template <int HS> static inline size_t flash_backward_smem() {
    typedef FlashBwdTile<HS> F;
    return (size_t)(2 * F::BK + 4 * F::BQ) * (HS + 8) * sizeof(bf16) + (size_t)2 * F::BK * (F::BQ + 8) * sizeof(bf16) +
           2 * F::BQ * sizeof(float2) + (size_t)F::DQ_STAGES * (F::BQ * (HS + 8) * sizeof(float) + 2 * sizeof(uint64_t)) +
           2 * sizeof(uint64_t) + 16;
}
