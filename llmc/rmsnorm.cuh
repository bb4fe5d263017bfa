// rmsnorm.cuh — RMSNorm on the GPU: out = weight * x / sqrt(mean(x^2) + RMSNORM_EPS).
// CPU reference: rmsnorm.h (RMSNORM_EPS comes from there).
// Shapes: inp (N, C) fp32 (the residual stream), weight (C) fp32 master weights, out (N, C) bf16
// (it feeds a GEMM), rstd (N) fp32.
// Conventions: forward writes out and rstd (=). Backward accumulates (+=) into dinp (fp32, the
// residual-stream gradient) and dweight (fp32), as rmsnorm_backward_cpu; when dinp_bf16 is not
// NULL it also writes (=) a bf16 copy of the updated dinp. That copy is the fused part: every
// norm backward in the model is followed by a GEMM that consumes the residual gradient in bf16,
// so the cast rides on the pass that produced the value. (The forward residual add is fused into
// the proj / fc2 GEMM epilogue instead: matmul_forward_fp32.)
// Precision: fp32 loads, sums and math; one rounding to bf16 on the outputs that feed GEMMs.
// Determinism: one warp per row with a fixed shuffle tree. dweight in two steps, each summing in a
// fixed order: per slab of RMSNORM_DW_SLAB rows one partial sum per column (RMSNORM_DW_ROWS
// running sums, the r-th over the slab's rows r, r + 8, ..., then a fixed shared-memory tree), and
// a second kernel adds each column's partials (RMSNORM_DW_FINISH_ROWS running sums over the
// slabs, then a tree): no atomics, the same bits whatever order the blocks run in.
// One pass: where the 8 running sums of a slab fit in shared memory (8 C floats, C <= 1536),
// rmsnorm_backward_kernel adds them while it has the row's dout and x in hand, so dout and x are
// read from memory once (before, a separate dweight kernel read them again: 96 of the 256 MB the
// backward moved at llama300m). Wider rows take the same sums from rmsnorm_backward_dweight_kernel
// after the row kernel: the same partials, bit for bit.
// Scratch: rmsnorm_backward takes a (ceil(N / RMSNORM_DW_SLAB), C) fp32 buffer for the partials
// (rmsnorm_dweight_scratch_floats), which the caller allocates once.
// Stream: the stream argument.
#pragma once
#include "cuda_common.cuh"
#include "mma.cuh"  // mma_pack_bf16
#include "rmsnorm.h"

static const int RMSNORM_WARPS = 8;          // rows per block in the forward; warps of a backward block
static const int RMSNORM_DW_ROWS = 8;        // running sums of a column in one slab (the backward's warps)
static const int RMSNORM_DW_SLAB = 32;       // rows summed into one partial (one backward block)
static const int RMSNORM_DW_FINISH_ROWS = 32;  // running sums of a column over the slabs
static const int RMSNORM_FUSED_MAX_C = 48 * 1024 / (RMSNORM_DW_ROWS * (int)sizeof(float));  // 1536

// fp32 elements of the dweight partials that rmsnorm_backward needs for N rows of C
static inline size_t rmsnorm_dweight_scratch_floats(int N, int C) {
    return (size_t)cuda_ceil_div(N, RMSNORM_DW_SLAB) * C;
}

// The forward keeps a row in registers where C is a multiple of 128 up to RMSNORM_FWD_MAX_C (every
// preset): lane l holds the 16-byte groups l, l + 32, ... of its warp's row, loaded at once, so
// the row is read from memory once and the loads are all in flight together; the bf16 outputs
// leave 8 bytes a lane. Other rows take rmsnorm_forward_kernel, which reads the row twice (the
// second time from L1), 4 bytes a lane a load. (That kernel was the only one until now: 2.3 TB/s
// at llama300m and 1.9 at llama600m on an H200 (ncu, 5ec15b9), 1.4 and 1.3 ms a step;
// dev/step_model.py models 0.92 and 0.69 ms at the rate Muon's momentum reached; not yet
// measured on a GPU.) The two sum the squares in different orders: rstd may differ in the last bit.
static const int RMSNORM_FWD_MAX_C = 2048;  // 16 groups of 4 floats a lane

// out (N, C) bf16, rstd (N), inp (N, C), weight (C); one warp per row; C % 128 == 0,
// C <= RMSNORM_FWD_MAX_C, inp, out and weight 16-byte aligned
__global__ void rmsnorm_forward_regs_kernel(bf16* out, float* rstd, const float* inp, const float* weight, int N, int C) {
    const int G = RMSNORM_FWD_MAX_C / 128;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32, groups = C / 128;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float v[G][4];
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (j < groups) {
            Packed128<float> a = load128(x + (j * 32 + lane) * 4);
            for (int k = 0; k < 4; k++) v[j][k] = a[k];
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < G; j++)
        if (j < groups)
            for (int k = 0; k < 4; k++) ss += v[j][k] * v[j][k];
    ss = cuda_warp_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)C + RMSNORM_EPS);
    bf16* y = out + (size_t)row * C;
#pragma unroll
    for (int j = 0; j < G; j++) {
        if (j < groups) {
            int c = (j * 32 + lane) * 4;
            Packed128<float> w = load128(weight + c);
            uint2 o = make_uint2(mma_pack_bf16(w[0] * (v[j][0] * r), w[1] * (v[j][1] * r)),
                                 mma_pack_bf16(w[2] * (v[j][2] * r), w[3] * (v[j][3] * r)));
            *reinterpret_cast<uint2*>(y + c) = o;
        }
    }
    if (lane == 0) rstd[row] = r;
}

// out (N, C) bf16, rstd (N), inp (N, C), weight (C); one warp per row
__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const float* inp, const float* weight, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    ss = cuda_warp_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)C + RMSNORM_EPS);
    bf16* y = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) y[c] = __float2bfloat16(weight[c] * (x[c] * r));
    if (lane == 0) rstd[row] = r;
}

static inline void rmsnorm_forward(bf16* out,            // (N, C)
                                   float* rstd,          // (N)
                                   const float* inp,     // (N, C)
                                   const float* weight,  // (C)
                                   int N, int C, cudaStream_t stream) {
    if (C % 128 == 0 && C <= RMSNORM_FWD_MAX_C && cuda_aligned16(out) && cuda_aligned16(inp) && cuda_aligned16(weight))
        rmsnorm_forward_regs_kernel<<<cuda_ceil_div(N, RMSNORM_WARPS), RMSNORM_WARPS * 32, 0, stream>>>(out, rstd, inp, weight, N, C);
    else rmsnorm_forward_kernel<<<cuda_ceil_div(N, RMSNORM_WARPS), RMSNORM_WARPS * 32, 0, stream>>>(out, rstd, inp, weight, N, C);
    KERNEL_CHECK();
}

// With y = x * r and g = weight * dout:  dx = r * (g - y * mean(g * y)).
// One block per slab of RMSNORM_DW_SLAB rows, warp w on its rows w, w + 8, ... (one warp per row
// at a time). With partials (FUSED, C <= RMSNORM_FUSED_MAX_C) the block also writes the slab's
// dweight partial: warp w keeps its running sum of dout * y per column in shared memory, and the
// warps' sums meet in a fixed tree (rmsnorm_backward_dweight_kernel's order).
// dinp (N, C) +=, dinp_bf16 (N, C) or NULL, partials (slabs, C) = (FUSED), dout (N, C), inp (N, C),
// weight (C), rstd (N)
template <bool FUSED>
__global__ void __launch_bounds__(RMSNORM_DW_ROWS * 32)
rmsnorm_backward_kernel(float* dinp, bf16* dinp_bf16, float* partials, const bf16* dout, const float* inp,
                        const float* weight, const float* rstd, int N, int C) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int n0 = blockIdx.x * RMSNORM_DW_SLAB, n1 = min(n0 + RMSNORM_DW_SLAB, N);
    float* acc = NULL;  // FUSED: this warp's running sums, a row of (RMSNORM_DW_ROWS, C) in shared memory
    if (FUSED) {
        extern __shared__ float rmsnorm_acc[];
        acc = rmsnorm_acc + (size_t)warp * C;
        for (int c = lane; c < C; c += 32) acc[c] = 0.0f;
    }
    for (int row = n0 + warp; row < n1; row += RMSNORM_DW_ROWS) {
        size_t base = (size_t)row * C;
        float r = rstd[row];
        float dot = 0.0f;
        for (int c = lane; c < C; c += 32) dot += (weight[c] * __bfloat162float(dout[base + c])) * (inp[base + c] * r);
        dot = cuda_warp_sum(dot);
        float m = dot / (float)C;
        for (int c = lane; c < C; c += 32) {
            float d = __bfloat162float(dout[base + c]), y = inp[base + c] * r;
            float g = weight[c] * d;
            float v = dinp[base + c] + r * (g - y * m);
            dinp[base + c] = v;
            if (dinp_bf16 != NULL) dinp_bf16[base + c] = __float2bfloat16(v);
            if (FUSED) acc[c] += d * y;
        }
    }
    if (FUSED) {
        for (int s = RMSNORM_DW_ROWS / 2; s > 0; s >>= 1) {
            __syncthreads();
            if (warp < s)
                for (int c = lane; c < C; c += 32) acc[c] += acc[(size_t)s * C + c];
        }
        if (warp == 0)
            for (int c = lane; c < C; c += 32) partials[(size_t)blockIdx.x * C + c] = acc[c];
    }
}

// The same partials as rmsnorm_backward_kernel<true>, for rows too wide for its shared memory:
// partials[s, c] = sum over the rows n of slab s of dout[n, c] * x[n, c] * rstd[n], thread row y
// summing the slab's rows y, y + 8, ..., then the same tree.
// Block (32 columns, RMSNORM_DW_ROWS rows of threads), grid (ceil(C / 32), slabs).
// partials (slabs, C) =, dout (N, C), inp (N, C), rstd (N)
__global__ void rmsnorm_backward_dweight_kernel(float* partials, const bf16* dout, const float* inp,
                                                const float* rstd, int N, int C) {
    __shared__ float part[RMSNORM_DW_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int n0 = blockIdx.y * RMSNORM_DW_SLAB, n1 = n0 + RMSNORM_DW_SLAB < N ? n0 + RMSNORM_DW_SLAB : N;
    float acc = 0.0f;
    if (c < C) {
        for (int n = n0 + threadIdx.y; n < n1; n += RMSNORM_DW_ROWS) {
            size_t i = (size_t)n * C + c;
            float y = inp[i] * rstd[n];
            acc += __bfloat162float(dout[i]) * y;
        }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    for (int s = RMSNORM_DW_ROWS / 2; s > 0; s >>= 1) {
        __syncthreads();
        if ((int)threadIdx.y < s) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
    }
    if (threadIdx.y == 0 && c < C) partials[(size_t)blockIdx.y * C + c] = part[0][threadIdx.x];
}

// dweight[c] += the partials of column c: thread row y sums slabs y, y + 32, ..., then a fixed tree.
// Block (32 columns, RMSNORM_DW_FINISH_ROWS rows of threads), grid ceil(C / 32).
// dweight (C) +=, partials (slabs, C)
__global__ void rmsnorm_backward_dweight_finish_kernel(float* dweight, const float* partials, int slabs, int C) {
    __shared__ float part[RMSNORM_DW_FINISH_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C)
        for (int s = threadIdx.y; s < slabs; s += RMSNORM_DW_FINISH_ROWS) acc += partials[(size_t)s * C + c];
    part[threadIdx.y][threadIdx.x] = acc;
    for (int s = RMSNORM_DW_FINISH_ROWS / 2; s > 0; s >>= 1) {
        __syncthreads();
        if ((int)threadIdx.y < s) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
    }
    if (threadIdx.y == 0 && c < C) dweight[c] += part[0][threadIdx.x];
}

// dinp += and dinp_bf16 = as above; dweight (C) += sum_n dout[n, c] * x[n, c] * rstd[n], through
// the partials in scratch. fused < 0: one pass where the row fits (C <= RMSNORM_FUSED_MAX_C); 0 or
// 1 forces the choice (the checks run both; 1 needs the row to fit).
static inline void rmsnorm_backward(float* dinp,          // (N, C) fp32, +=
                                    bf16* dinp_bf16,      // (N, C) bf16 copy of the new dinp, or NULL
                                    float* dweight,       // (C) fp32, +=
                                    float* scratch,       // (rmsnorm_dweight_scratch_floats(N, C)) dweight partials
                                    const bf16* dout,     // (N, C)
                                    const float* inp,     // (N, C)
                                    const float* weight,  // (C)
                                    const float* rstd,    // (N)
                                    int N, int C, cudaStream_t stream, int fused = -1) {
    int slabs = cuda_ceil_div(N, RMSNORM_DW_SLAB);
    if (fused < 0) fused = C <= RMSNORM_FUSED_MAX_C;
    if (fused) {
        if (C > RMSNORM_FUSED_MAX_C) { fprintf(stderr, "rmsnorm_backward: one pass needs C <= %d, got %d\n", RMSNORM_FUSED_MAX_C, C); exit(1); }
        size_t smem = (size_t)RMSNORM_DW_ROWS * C * sizeof(float);
        rmsnorm_backward_kernel<true><<<slabs, RMSNORM_DW_ROWS * 32, smem, stream>>>(dinp, dinp_bf16, scratch, dout, inp, weight, rstd, N, C);
        KERNEL_CHECK();
    } else {
        rmsnorm_backward_kernel<false><<<slabs, RMSNORM_DW_ROWS * 32, 0, stream>>>(dinp, dinp_bf16, NULL, dout, inp, weight, rstd, N, C);
        KERNEL_CHECK();
        dim3 grid(cuda_ceil_div(C, 32), slabs), block(32, RMSNORM_DW_ROWS);
        rmsnorm_backward_dweight_kernel<<<grid, block, 0, stream>>>(scratch, dout, inp, rstd, N, C);
        KERNEL_CHECK();
    }
    rmsnorm_backward_dweight_finish_kernel<<<cuda_ceil_div(C, 32), dim3(32, RMSNORM_DW_FINISH_ROWS), 0, stream>>>(dweight, scratch, slabs, C);
    KERNEL_CHECK();
}
