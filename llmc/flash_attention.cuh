// flash_attention.cuh — fused causal attention with grouped-query heads on tensor cores: the
// launch choice of the kernels in flash_forward.cuh and flash_backward.cuh (their tiles in
// flash_common.cuh), the scratch they need and the checks of their inputs. A kernel for another
// architecture lives beside them in a file of its own and is chosen here: flash_forward_sm90.cuh's
// forward and flash_backward_sm90.cuh's backward on Hopper's wgmma (flash_attention_forward_sm90,
// flash_attention_backward_sm90, HS 64 and 128), not yet the trainer's (not yet measured on a GPU;
// dev_attention validates and times them).
//
// Shapes as attention.cuh: qkv (B, T, (NH + 2*NKV) * HS) bf16 read in place (columns [NH q heads |
// NKV k heads | NKV v heads], q and k already rotated), out and dout (B, T, NH * HS), lse (B, NH, T)
// fp32 natural-log log-sum-exp of each scaled score row (the one attention.cuh's backward reads),
// dqkv written (=), every column. Head sizes 16, 32, 64 and 128 (the presets use 32, 64 and 128; the
// test fixture's model 16); any T (tails zero-filled and masked). dev/flash_model.py models their
// speed. Stream: the last argument.
#pragma once
#include "flash_forward.cuh"
#include "flash_backward.cuh"
#include "flash_forward_sm90.cuh"
#include "flash_backward_sm90.cuh"

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

// the ints of the backward's order counters (its other scratch: the rows' (lse · log2 e, D), and
// dq_accum (B, NH, T, HS) fp32)
static inline size_t flash_order_ints_hs(int B, int T, int NH, int HS) {
    if (HS == 16) return flash_order_ints<16>(B, T, NH);
    if (HS == 32) return flash_order_ints<32>(B, T, NH);
    if (HS == 64) return flash_order_ints<64>(B, T, NH);
    return flash_order_ints<128>(B, T, NH);
}

template <int HS>
static inline void flash_forward_hs(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV, cudaStream_t stream) {
    flash_set_smem_limits<HS>();
    // (b, h) along x, the query tiles along y: the GPU starts blocks in x-fastest order, so every
    // head's longest tile goes first and the short ones fill the end (flash_forward.cuh)
    dim3 grid(NH * B, cuda_ceil_div(T, FlashFwdTile<HS>::BQ));
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
    flash_backward_kernel<HS><<<grid, (FlashBwdTile<HS>::WARPS + FlashBwdTile<HS>::WRITER_WARPS) * 32, flash_backward_smem<HS>(), stream>>>(
        dqkv, dq_accum, order, dout, qkv, rows, T, NH, NKV, scale, scale_log2);
    KERNEL_CHECK();
    size_t chunks = (size_t)B * NH * T * HS / 8;
    flash_dq_to_bf16_kernel<<<cuda_ceil_div(chunks, (size_t)256), 256, 0, stream>>>(dqkv, dq_accum, B, T, NH, NKV, HS);
    KERNEL_CHECK();
}

// Whether flash_forward_sm90 runs here: head size 64 or 128, a GPU of compute capability 9.0 and
// device code with wgmma (an sm_90a build; asked of the device once)
static inline bool flash_sm90_available(int HS) {
    static int has = -1;
    if (has < 0) {
        int dev = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        has = 0;
        if (major == 9) {
            int* d = NULL;
            CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
            flash_sm90_probe_kernel<<<1, 1>>>(d);
            KERNEL_CHECK();
            CUDA_CHECK(cudaMemcpy(&has, d, sizeof(int), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaFree(d));
        }
    }
    return has == 1 && flash_sm90_head_size(HS);
}

template <int HS, int SKIP>
static inline void flash_forward_sm90_hs(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV, cudaStream_t stream) {
    static bool limits = false;
    if (!limits) {
        CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_forward_sm90_kernel<HS, SKIP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)flash_forward_sm90_smem<HS>()));
        limits = true;
    }
    dim3 grid(NH * B, cuda_ceil_div(T, FlashFwdSm90Tile<HS>::BQ));
    float scale_log2 = FLASH_LOG2E / sqrtf((float)HS);
    flash_forward_sm90_kernel<HS, SKIP><<<grid, FlashFwdSm90Tile<HS>::WARPGROUPS * 128, flash_forward_sm90_smem<HS>(), stream>>>(
        out, lse, qkv, T, NH, NKV, scale_log2);
    KERNEL_CHECK();
}

// flash_attention_forward on Hopper's wgmma (flash_forward_sm90.cuh): the same outputs; only where
// flash_sm90_available(HS). SKIP: the parts left out (FlashSkip), 0 but in dev_attention --ablate.
template <int SKIP = 0>
static inline void flash_attention_forward_sm90(bf16* out, float* lse, const bf16* qkv, int B, int T, int NH, int NKV, int HS,
                                                cudaStream_t stream) {
    flash_check(qkv, out, HS);
    if (!flash_sm90_available(HS)) {
        fprintf(stderr, "flash attention (wgmma): needs head size 64 or 128 (got %d), a GPU of compute capability 9.0 and an sm_90a build\n", HS);
        exit(1);
    }
    if (HS == 64) flash_forward_sm90_hs<64, SKIP>(out, lse, qkv, B, T, NH, NKV, stream);
    else flash_forward_sm90_hs<128, SKIP>(out, lse, qkv, B, T, NH, NKV, stream);
}

template <int HS, int SKIP>
static inline void flash_backward_sm90_hs(bf16* dqkv, float* dq_accum, int* order, const bf16* dout, const bf16* qkv,
                                          const float2* rows, int B, int T, int NH, int NKV, cudaStream_t stream) {
    typedef FlashBwdSm90Tile<HS> F;
    static_assert(F::BQ >= FlashBwdTile<HS>::BQ, "its turns fit in flash_order_ints_hs's scratch");
    static bool limits = false;
    if (!limits) {
        CUDA_CHECK(cudaFuncSetAttribute((const void*)flash_backward_sm90_kernel<HS, SKIP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)flash_backward_sm90_smem<HS>()));
        limits = true;
    }
    float scale = 1.0f / sqrtf((float)HS), scale_log2 = FLASH_LOG2E * scale;
    CUDA_CHECK(cudaMemsetAsync(order, 0, (1 + (size_t)B * NH * cuda_ceil_div(T, F::BQ)) * sizeof(int), stream));
    dim3 grid(cuda_ceil_div(T, F::BK), NKV, B);
    flash_backward_sm90_kernel<HS, SKIP><<<grid, (F::COMPUTE_WARPGROUPS + 1) * 128, flash_backward_sm90_smem<HS>(), stream>>>(
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
    long long threads = (long long)B * NH * T * (HS / 8);
    flash_rowdot_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(rows, lse, dout, out, B, T, NH, HS);
    KERNEL_CHECK();
    if (HS == 16) flash_backward_hs<16>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
    else if (HS == 32) flash_backward_hs<32>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
    else if (HS == 64) flash_backward_hs<64>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
    else flash_backward_hs<128>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
}

// flash_attention_backward on Hopper's wgmma (flash_backward_sm90.cuh): the same outputs and
// scratch; only where flash_sm90_available(HS). SKIP as for the forward.
template <int SKIP = 0>
static inline void flash_attention_backward_sm90(bf16* dqkv, float2* rows, float* dq_accum, int* order, const bf16* dout,
                                                 const bf16* qkv, const bf16* out, const float* lse, int B, int T, int NH, int NKV,
                                                 int HS, cudaStream_t stream) {
    flash_check(qkv, dqkv, HS);
    flash_check(dout, out, HS);
    if (!flash_sm90_available(HS)) {
        fprintf(stderr, "flash attention (wgmma): needs head size 64 or 128 (got %d), a GPU of compute capability 9.0 and an sm_90a build\n", HS);
        exit(1);
    }
    long long threads = (long long)B * NH * T * (HS / 8);
    flash_rowdot_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, stream>>>(rows, lse, dout, out, B, T, NH, HS);
    KERNEL_CHECK();
    if (HS == 64) flash_backward_sm90_hs<64, SKIP>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
    else flash_backward_sm90_hs<128, SKIP>(dqkv, dq_accum, order, dout, qkv, rows, B, T, NH, NKV, stream);
}
