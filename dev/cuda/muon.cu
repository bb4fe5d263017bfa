// dev/cuda/muon.cu — llmc/muon.cuh (momentum, bf16 Newton–Schulz batched over layers with
// strided-batched cuBLASLt matmuls, weight update) against muon_update_cpu (llmc/muon.h, fp32), for the
// three presets, then a benchmark.
// Tolerances:
//   momentum M (fp32)            1e-6 max rel   (same fp32 formula)
//   weight change W - W0         6e-2 max rel, 3e-2 relative L2
//     the orthogonalization runs in bf16 with fp32 accumulation where the reference is fp32; an
//     emulation of exactly these roundings (numpy + ml_dtypes, Gaussian 384x128 ... 4096x768)
//     differs from fp64 by 1.6e-2 .. 2.1e-2 max rel and ~1.0e-2 relative L2
//   zero gradient and momentum   exactly W*(1 - lr*wd), no NaN
// These bounds are not yet measured on a GPU at llama300m's and llama600m's matrices (the
// emulation stopped at 4096x768).
// Shapes: every hidden matrix (rows x cols) of tiny, d12, llama300m and llama600m, i.e. the real
// shapes the trainer updates, wide, square and tall, so both orientations and the transposes are
// exercised:
//   tiny 256x128 (qkv, GQA), 128x128, 768x128, 128x384     d12 2304x768, 768x768, 4096x768, 768x2048
//   llama300m 3072x1024, 1024x1024, 5632x1024, 1024x2816    llama600m 4608x1536, 1536x1536,
//   8192x1536, 1536x4096
// each at batch 2 with a layer stride larger than the matrix for qkv (as megatron_core's q/k/v
// row blocks have), plus a zero gradient and an odd tall 97x33 at batch 3.
// Cost of the reference: muon_update_cpu's Newton–Schulz is 5 x (4 m^2 n + 2 m^3) flops per
// matrix: 0.85 TFLOP for llama600m's fc1 pair, 2.9 TFLOP in all. The GPU build runs its
// cblas_ssyrk / cblas_sgemm on cuBLAS in plain fp32 (dev/cuda/blas_shim): about a second with
// the operand copies; OpenBLAS on 16 cores would take a few seconds (estimated).
// The benchmark runs whole groups (batch L) of d12, llama300m and llama600m.
// Newton–Schulz four ways, on the same U, at every shape above:
//   version 1: the loop as first written, cublasGemmStridedBatchedEx (which accumulates into C
//              itself), so S and X were copied once each per iteration, S one product;
//   copies:    version 1's copies and in-place products on llmc/'s cuBLASLt plans (C = D), S and
//              P as llmc/'s;
//   one:       llmc/'s with S = X Xᵀ and P = c S S + b S each as one product (blocks = 1);
//   llmc/:     the same products with C and D apart, the iterate ping-ponging, nothing copied,
//              S and P in column blocks from the diagonal down, mirrored (where m % 128 == 0).
// llmc/'s must be bitwise the copies' (the same plans, only where C comes from differs); version 1
// and one may differ from it in the last bits on a GPU (cuBLAS's kernel against cuBLASLt's, or
// another shape's sum order for S and P; under dev/emu the GEMMs are OpenBLAS's fp32 sgemm, and
// the ways are bitwise at some of tiny's shapes and up to 2.6e-3 relative L2 apart at others),
// and must stay within 3e-2 relative L2 of llmc/'s (the bf16 bound above). Version 1 iterates on
// the wide X (a tall matrix transposed); llmc/'s on W's orientation (the tall iterate read through
// the products' transpose flags); version 1's X is transposed back before the comparison.
// The memory passes two ways, on the same G, M and W (passes_agree at every validated shape):
//   version 1: the momentum alone, a pass for ‖U‖ (64 blocks a matrix), X and the update through
//              32 x 32 transposing tiles;
//   llmc/:     the norm's partial sums in the momentum, X and the update elementwise in W's
//              orientation, 16-byte accesses where the sizes allow;
// the momentum (M, U) and the update bitwise, X bitwise given the same norms, the norms within
// one fp32 rounding (6e-8: fp64 sums in other orders, then the square root rounded to fp32), and
// llmc/'s 16-byte update bitwise its scalar kernel.
// Usage: build/dev_muon [--validate-only] [--small] [--compare [--small]]
//   --small: the zero gradient, the odd tall shape and tiny's matrices only (what dev/emu runs);
//   --compare: the Newton–Schulz of every group of llama300m and llama600m (batch L), version 1
//   against llmc/'s (COMPARE lines for dev/bench_small_kernels.sh; the copies' time in the note;
//   the bitwise check above, no CPU reference), then each group's memory passes, version 1
//   against llmc/'s (momentum, norm, X and the update; bitwise checked first); with --small, the
//   same at tiny's shapes (what dev/emu runs, its times meaningless);
//   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/muon.h"
#include "../../llmc/muon.cuh"
#include "dev_flags.h"

static const double TOL_M = 1e-6;
static const double TOL_DW_MAX = 6e-2;
static const double TOL_DW_L2 = 3e-2;

// ----------------------------------------------------------------------------
// Version 1 of the memory passes (as llmc/ first had them): the momentum alone, a pass of its own
// for ‖U‖ (MUON_NORM_CHUNKS_V1 blocks a matrix), and the tall matrices transposed into the wide X
// and back into the update through 32 x 32 tiles (2- and 4-byte accesses).
static const int MUON_NORM_CHUNKS_V1 = 64;

__global__ void v1_momentum_kernel(float* u, float* M, const float* G, float grad_scale, size_t rc, int batch,
                                   size_t batch_stride, float beta, int nesterov) {
    size_t total = rc * batch;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float one_minus_beta = 1.0f - beta;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        size_t off = (idx / rc) * batch_stride + idx % rc;
        float g = __fmul_rn(G[off], grad_scale);
        float m = beta * M[off] + one_minus_beta * g;
        M[off] = m;
        u[idx] = nesterov ? one_minus_beta * g + beta * m : m;
    }
}

__global__ void v1_frobenius_norm_kernel(double* partials, const float* u, size_t rc) {
    int l = blockIdx.y;
    size_t chunk = (rc + gridDim.x - 1) / gridDim.x;
    size_t begin = (size_t)blockIdx.x * chunk, end = begin + chunk < rc ? begin + chunk : rc;
    const float* x = u + (size_t)l * rc;
    double acc = 0.0;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) partials[(size_t)l * gridDim.x + blockIdx.x] = acc;
}

// ws->norms from ws->u (batch, rc), version 1's pass (ws->partials holds batch x 64 at any shape
// the checks use: muon_norm_chunks(rc) >= 1 per matrix is reserved, so it is grown here)
static void v1_frobenius_norm(MuonWorkspace* ws, size_t rc, int batch) {
    if ((size_t)batch * MUON_NORM_CHUNKS_V1 > ws->cap_partials) {
        CUDA_CHECK(cudaFree(ws->partials));
        ws->cap_partials = (size_t)batch * MUON_NORM_CHUNKS_V1;
        ws->partials = cuda_malloc<double>(ws->cap_partials);
    }
    v1_frobenius_norm_kernel<<<dim3(MUON_NORM_CHUNKS_V1, batch), MUON_BLOCK>>>(ws->partials, ws->u, rc);
    KERNEL_CHECK();
    muon_frobenius_norm_finish_kernel<<<batch, 64>>>(ws->norms, ws->partials, MUON_NORM_CHUNKS_V1);
    KERNEL_CHECK();
}

// x (batch, m, n) bf16 = u (batch, rows, cols) / norms, transposed to (cols, rows) when TALL
template <bool TALL>
__global__ void v1_normalize_kernel(bf16* x, const float* u, const float* norms, int rows, int cols) {
    __shared__ float tile[MUON_TILE][MUON_TILE + 1];
    int l = blockIdx.z;
    int r0 = blockIdx.y * MUON_TILE, c0 = blockIdx.x * MUON_TILE;
    size_t base = (size_t)l * rows * cols;
    float norm = norms[l];
    for (int k = threadIdx.y; k < MUON_TILE; k += blockDim.y) {
        int r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[k][threadIdx.x] = u[base + (size_t)r * cols + c] / norm;
    }
    __syncthreads();
    for (int k = threadIdx.y; k < MUON_TILE; k += blockDim.y) {
        if (TALL) {
            int c = c0 + k, r = r0 + threadIdx.x;
            if (r < rows && c < cols) x[base + (size_t)c * rows + r] = __float2bfloat16(tile[threadIdx.x][k]);
        } else {
            int r = r0 + k, c = c0 + threadIdx.x;
            if (r < rows && c < cols) x[base + (size_t)r * cols + c] = __float2bfloat16(tile[k][threadIdx.x]);
        }
    }
}

// W <- W*decay - step*X, X read transposed when TALL
template <bool TALL>
__global__ void v1_apply_kernel(float* W, bf16* W_bf16, const bf16* x, int rows, int cols, size_t batch_stride,
                                float decay, float step) {
    __shared__ float tile[MUON_TILE][MUON_TILE + 1];
    int l = blockIdx.z;
    int r0 = blockIdx.y * MUON_TILE, c0 = blockIdx.x * MUON_TILE;
    size_t xbase = (size_t)l * rows * cols, wbase = (size_t)l * batch_stride;
    for (int k = threadIdx.y; k < MUON_TILE; k += blockDim.y) {
        if (TALL) {
            int c = c0 + k, r = r0 + threadIdx.x;
            if (r < rows && c < cols) tile[k][threadIdx.x] = __bfloat162float(x[xbase + (size_t)c * rows + r]);
        } else {
            int r = r0 + k, c = c0 + threadIdx.x;
            if (r < rows && c < cols) tile[k][threadIdx.x] = __bfloat162float(x[xbase + (size_t)r * cols + c]);
        }
    }
    __syncthreads();
    for (int k = threadIdx.y; k < MUON_TILE; k += blockDim.y) {
        int r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols) {
            float xv = TALL ? tile[threadIdx.x][k] : tile[k][threadIdx.x];
            size_t i = wbase + (size_t)r * cols + c;
            float w = W[i] * decay - step * xv;
            W[i] = w;
            if (W_bf16 != NULL) W_bf16[i] = __float2bfloat16(w);
        }
    }
}

// version 1's passes, whole: momentum into ws->u, the norm pass, X (wide) into ws->x0
static void v1_momentum_normalize(float* M, const float* G, int rows, int cols, int batch, size_t stride, const MuonConfig* cfg,
                                  MuonWorkspace* ws, bool norm_pass = true) {
    size_t rc = (size_t)rows * cols;
    if (M != NULL) {
        v1_momentum_kernel<<<cuda_grid_for(rc * batch, MUON_BLOCK), MUON_BLOCK>>>(ws->u, M, G, 1.0f, rc, batch, stride, cfg->beta, cfg->nesterov);
        KERNEL_CHECK();
    }
    if (norm_pass) v1_frobenius_norm(ws, rc, batch);
    dim3 tgrid(cuda_ceil_div(cols, MUON_TILE), cuda_ceil_div(rows, MUON_TILE), batch), tblock(MUON_TILE, 8);
    if (rows > cols) v1_normalize_kernel<true><<<tgrid, tblock>>>(ws->x0, ws->u, ws->norms, rows, cols);
    else v1_normalize_kernel<false><<<tgrid, tblock>>>(ws->x0, ws->u, ws->norms, rows, cols);
    KERNEL_CHECK();
}

static void v1_apply(float* W, bf16* W16, const bf16* x, int rows, int cols, int batch, size_t stride, float decay, float step) {
    dim3 tgrid(cuda_ceil_div(cols, MUON_TILE), cuda_ceil_div(rows, MUON_TILE), batch), tblock(MUON_TILE, 8);
    if (rows > cols) v1_apply_kernel<true><<<tgrid, tblock>>>(W, W16, x, rows, cols, stride, decay, step);
    else v1_apply_kernel<false><<<tgrid, tblock>>>(W, W16, x, rows, cols, stride, decay, step);
    KERNEL_CHECK();
}

// x (batch, rows, cols) = the wide (batch, m, n) xw transposed back where rows > cols (host)
static std::vector<bf16> to_w_orientation(const std::vector<bf16>& xw, int rows, int cols, int batch) {
    if (rows <= cols) return xw;
    std::vector<bf16> x(xw.size());
    size_t rc = (size_t)rows * cols;
#pragma omp parallel for collapse(2) schedule(static)
    for (int l = 0; l < batch; l++)
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) x[l * rc + (size_t)r * cols + c] = xw[l * rc + (size_t)c * rows + r];
    return x;
}

// ----------------------------------------------------------------------------
// Version 1 of muon_newton_schulz (bf16 column-major GEMMs on cuBLAS, which accumulates into C):
// P <- S and X' <- X copied each iteration, then the products in place, on the wide X (version
// 1's transposing passes). Returns X in the wide layout (batch, m, n).
static void ns_gemm_v1(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       const bf16* A, int lda, long long sa, const bf16* B, int ldb, long long sb, float beta, bf16* C, int ldc,
                       long long sc, int batch) {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, sa, B, CUDA_R_16BF, ldb, sb,
                                            &beta, C, CUDA_R_16BF, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// copies_on_lt: the same loop as llmc/'s (its orientation and passes) on matmul_cublaslt, in place
// (C = D), so the copies are the only difference to llmc/'s; returns X in W's orientation.
// Both read the norms in ws->norms.
static bf16* newton_schulz_v1(MuonWorkspace* ws, cublasHandle_t h, int rows, int cols, int batch, const MuonConfig* cfg,
                              bool copies_on_lt) {
    const bool tall = rows > cols;
    const int m = tall ? cols : rows, n = tall ? rows : cols;
    const long long smn = (long long)m * n, smm = (long long)m * m;
    if (copies_on_lt) muon_normalize(ws, rows, cols, batch, 0);
    else v1_momentum_normalize(NULL, NULL, rows, cols, batch, 0, cfg, ws, false);
    bf16* cur = ws->x0;
    bf16* nxt = ws->x1;
    for (int it = 0; it < cfg->ns_steps; it++) {
        if (copies_on_lt) {
            muon_gram(ws->s, cur, m, n, tall, batch, 0);
            CUDA_CHECK(cudaMemcpyAsync(ws->p, ws->s, (size_t)batch * smm * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            muon_poly(ws->p, ws->s, m, batch, cfg->b, cfg->c, 0, MUON_GRAM_BLOCKS, ws->p);
            CUDA_CHECK(cudaMemcpyAsync(nxt, cur, (size_t)batch * smn * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            if (tall) matmul_cublaslt(nxt, CUDA_R_16BF, nxt, cur, ws->p, n, m, m, false, false, m, m, m, 1.0f, cfg->a, batch, smn, smm, smn, 0);
            else matmul_cublaslt(nxt, CUDA_R_16BF, nxt, ws->p, cur, m, n, m, false, false, m, n, n, 1.0f, cfg->a, batch, smm, smn, smn, 0);
        } else {
            ns_gemm_v1(h, CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, 1.0f, cur, n, smn, cur, n, smn, 0.0f, ws->s, m, smm, batch);
            CUDA_CHECK(cudaMemcpyAsync(ws->p, ws->s, (size_t)batch * smm * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            ns_gemm_v1(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, cfg->c, ws->s, m, smm, ws->s, m, smm, cfg->b, ws->p, m, smm, batch);
            CUDA_CHECK(cudaMemcpyAsync(nxt, cur, (size_t)batch * smn * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            ns_gemm_v1(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, 1.0f, cur, n, smn, ws->p, m, smm, cfg->a, nxt, n, smn, batch);
        }
        bf16* t = cur; cur = nxt; nxt = t;
    }
    return cur;
}

static double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / std::max(den, 1e-300));
}

// The three Newton–Schulz versions (see the header) on one random U (batch, rows, cols): llmc/'s
// bitwise the copies', version 1 within TOL_DW_L2 of llmc/'s (bitwise where it is).
static bool ns_versions_agree(const char* tag, MuonPreset preset, int rows, int cols, int batch, uint64_t seed) {
    MuonConfig cfg = muon_config(preset);
    size_t n = (size_t)batch * rows * cols;
    std::vector<float> u = cuda_host_uniform(n, seed, 1e-3f);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_workspace_reserve(&ws, rows, cols, batch);
    CUDA_CHECK(cudaMemcpy(ws.u, u.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    v1_frobenius_norm(&ws, (size_t)rows * cols, batch);  // every way reads these norms
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    std::vector<bf16> x[4];
    for (int v = 0; v < 4; v++) {  // llmc/'s, the copies on cuBLASLt, version 1 (wide X), one product each
        bf16* xv = v == 0 ? muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0)
                 : v == 3 ? muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0, 1)
                          : newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, v == 1);
        x[v] = cuda_download(xv, n);
        if (v == 2) x[v] = to_w_orientation(x[v], rows, cols, batch);
    }
    CUBLAS_CHECK(cublasDestroy(h));
    muon_workspace_free(&ws);
    bool same_copies = memcmp(x[0].data(), x[1].data(), n * sizeof(bf16)) == 0;
    std::vector<float> f0(n), fv(n);
    for (size_t i = 0; i < n; i++) f0[i] = cuda_host_float(x[0][i]);
    printf("%s %s.newton_schulz_bitwise_copies_on_cublaslt\n", same_copies ? "PASS" : "FAIL", tag);
    bool ok = same_copies;
    for (int v : {2, 3}) {
        bool same = memcmp(x[0].data(), x[v].data(), n * sizeof(bf16)) == 0;
        for (size_t i = 0; i < n; i++) fv[i] = cuda_host_float(x[v][i]);
        double l2 = rel_l2(fv, f0);
        printf("%s %s.newton_schulz_%s_near: %s, relative L2 %.3e (tol %.0e)\n", l2 <= TOL_DW_L2 ? "PASS" : "FAIL", tag,
               v == 2 ? "v1" : "one_product_s_and_p", same ? "bitwise" : "not bitwise", l2, TOL_DW_L2);
        ok &= l2 <= TOL_DW_L2;
    }
    return ok;
}

// The memory passes, version 1 against llmc/'s, from the same G and M (batch matrices at stride):
// the momentum (M and U) bitwise; ‖U‖ within one float rounding (fp64 sums in other orders);
// X bitwise once both normalize by the same norms (version 1's X transposed back when tall); the
// update (W and its bf16 copy) bitwise from the same X.
static bool passes_agree(const char* tag, int rows, int cols, int batch, size_t stride, uint64_t seed) {
    MuonConfig cfg = muon_config(MUON_MOONLIGHT);
    size_t total = (size_t)batch * stride, rc = (size_t)rows * cols, n = (size_t)batch * rc;
    std::vector<float> W0 = cuda_host_uniform(total, seed, 0.02f), G = cuda_host_uniform(total, seed + 1, 1e-3f),
                       M0 = cuda_host_uniform(total, seed + 2, 1e-3f);
    float *d_G = cuda_upload(G.data(), total), *d_M1 = cuda_upload(M0.data(), total), *d_M2 = cuda_upload(M0.data(), total);
    float *d_W1 = cuda_upload(W0.data(), total), *d_W2 = cuda_upload(W0.data(), total);
    bf16 *d_W161 = cuda_malloc<bf16>(total), *d_W162 = cuda_malloc<bf16>(total);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_workspace_reserve(&ws, rows, cols, batch);
    // version 1: momentum, norm pass, transposing X
    v1_momentum_normalize(d_M1, d_G, rows, cols, batch, stride, &cfg, &ws);
    std::vector<float> u1 = cuda_download(ws.u, n), nrm1 = cuda_download(ws.norms, batch);
    // llmc/'s: momentum with the norm, X in W's orientation, the update
    muon_momentum(d_M2, d_G, 1.0f, rows, cols, batch, stride, &cfg, &ws, 0);
    std::vector<float> u2 = cuda_download(ws.u, n), nrm2 = cuda_download(ws.norms, batch);
    std::vector<float> m1 = cuda_download(d_M1, total), m2 = cuda_download(d_M2, total);
    bool mom_same = memcmp(m1.data(), m2.data(), total * sizeof(float)) == 0 && memcmp(u1.data(), u2.data(), n * sizeof(float)) == 0;
    double nerr = 0.0;
    for (int l = 0; l < batch; l++) nerr = std::max(nerr, fabs((double)nrm1[l] - nrm2[l]) / nrm2[l]);
    bool norm_ok = nerr <= 6e-8;  // one rounding of the fp64 sum's square root to fp32 (2^-24)
    muon_normalize(&ws, rows, cols, batch, 0);
    std::vector<bf16> x2 = cuda_download(ws.x0, n);
    const float lr = 0.02f, wd = 0.1f, decay = 1.0f - lr * wd, step = lr * muon_lr_scale(&cfg, rows, cols);  // as muon_apply
    muon_apply(d_W2, d_W162, ws.x0, rows, cols, batch, stride, &cfg, lr, wd, 0);
    // the scalar kernel on another copy: the same bits as llmc/'s launch (16-byte where it can)
    float* d_W3 = cuda_upload(W0.data(), total);
    muon_apply_kernel<1><<<muon_elementwise_grid(rc, 1, batch), MUON_BLOCK>>>(d_W3, NULL, ws.x0, rc, stride, decay, step);
    KERNEL_CHECK();
    std::vector<float> w2 = cuda_download(d_W2, total), w3 = cuda_download(d_W3, total);
    bool vec = memcmp(w2.data(), w3.data(), total * sizeof(float)) == 0;
    CUDA_CHECK(cudaFree(d_W3));
    // version 1's X with llmc/'s norms, then its update from that X
    v1_momentum_normalize(NULL, NULL, rows, cols, batch, stride, &cfg, &ws, false);
    std::vector<bf16> x1 = to_w_orientation(cuda_download(ws.x0, n), rows, cols, batch);
    v1_apply(d_W1, d_W161, ws.x0, rows, cols, batch, stride, decay, step);
    bool x_same = memcmp(x1.data(), x2.data(), n * sizeof(bf16)) == 0;
    std::vector<float> w1 = cuda_download(d_W1, total);
    std::vector<bf16> h1 = cuda_download(d_W161, total), h2 = cuda_download(d_W162, total);
    bool w_same = memcmp(w1.data(), w2.data(), total * sizeof(float)) == 0;
    for (int l = 0; l < batch; l++)  // the bf16 copies: the matrices' elements (the gaps are never written)
        w_same &= memcmp(h1.data() + l * stride, h2.data() + l * stride, rc * sizeof(bf16)) == 0;
    printf("%s %s.passes_momentum_bitwise_v1\n", mom_same ? "PASS" : "FAIL", tag);
    printf("%s %s.passes_norm_near_v1: max rel %.2e (tol 6e-8)\n", norm_ok ? "PASS" : "FAIL", tag, nerr);
    printf("%s %s.passes_x_bitwise_v1_transposed\n", x_same ? "PASS" : "FAIL", tag);
    printf("%s %s.passes_update_bitwise_v1\n", w_same ? "PASS" : "FAIL", tag);
    printf("%s %s.passes_update_16_byte_bitwise_scalar\n", vec ? "PASS" : "FAIL", tag);
    void* bufs[] = {d_G, d_M1, d_M2, d_W1, d_W2, d_W161, d_W162};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    muon_workspace_free(&ws);
    return mom_same && norm_ok && x_same && w_same && vec;
}

// batch matrices (rows, cols) at stride `stride` >= rows*cols inside flat buffers of batch*stride
static bool validate(const char* tag, MuonPreset preset, int rows, int cols, int batch, size_t stride, uint64_t seed, bool zero) {
    std::string t = tag;
    MuonConfig cfg = muon_config(preset);
    size_t total = (size_t)batch * stride, rc = (size_t)rows * cols;
    std::vector<float> W0 = cuda_host_uniform(total, seed, 0.02f);
    std::vector<float> G = cuda_host_uniform(total, seed + 1, zero ? 0.0f : 1e-3f);
    std::vector<float> M = cuda_host_uniform(total, seed + 2, zero ? 0.0f : 1e-3f);
    const float lr = 0.02f, wd = 0.1f;
    float* d_W = cuda_upload(W0.data(), total);
    bf16* d_W16 = cuda_malloc<bf16>(total);
    float* d_G = cuda_upload(G.data(), total);
    float* d_M = cuda_upload(M.data(), total);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_update(d_W, d_W16, d_G, 1.0f, d_M, rows, cols, batch, stride, &cfg, lr, wd, &ws, 0);
    std::vector<float> W = W0;
    std::vector<float> scratch(muon_scratch_floats(rows, cols));
    for (int l = 0; l < batch; l++)
        muon_update_cpu(W.data() + l * stride, G.data() + l * stride, M.data() + l * stride, rows, cols, &cfg, lr, wd, scratch.data());
    std::vector<float> gW = cuda_download(d_W, total), gM = cuda_download(d_M, total);
    std::vector<float> g16 = cuda_download_float(d_W16, total);
    bool ok = true;
    // only the matrices' elements: the gap between them (stride > rows*cols) must be untouched
    std::vector<float> dg, dr, mg, mr;
    bool gap_ok = true, copy_ok = true;
    for (int l = 0; l < batch; l++) {
        for (size_t i = 0; i < stride; i++) {
            size_t k = l * stride + i;
            if (i < rc) {
                dg.push_back(gW[k] - W0[k]); dr.push_back(W[k] - W0[k]);
                mg.push_back(gM[k]); mr.push_back(M[k]);
                copy_ok &= g16[k] == cuda_host_float(cuda_host_bf16(gW[k]));
            } else {
                gap_ok &= gW[k] == W0[k] && gM[k] == M[k];
            }
        }
    }
    if (zero) {
        bool exact = true;
        for (size_t i = 0; i < dg.size(); i++) exact &= std::isfinite(dg[i]) && dg[i] == dr[i];
        printf("%s %s.zero_gradient_exact\n", exact ? "PASS" : "FAIL", tag);
        ok &= exact;
    } else {
        ok &= cuda_check_close((t + ".momentum").c_str(), mg.data(), mr.data(), mg.size(), TOL_M);
        ok &= cuda_check_close((t + ".weight_change").c_str(), dg.data(), dr.data(), dg.size(), TOL_DW_MAX);
        double l2 = rel_l2(dg, dr);
        bool l2_ok = l2 <= TOL_DW_L2;
        printf("%s %s.weight_change_l2: relative L2 %.3e (tol %.0e)\n", l2_ok ? "PASS" : "FAIL", tag, l2, TOL_DW_L2);
        ok &= l2_ok;
    }
    if (!zero) ok &= ns_versions_agree(tag, preset, rows, cols, batch, seed + 3);
    if (!zero) ok &= passes_agree(tag, rows, cols, batch, stride, seed + 4);
    printf("%s %s.layer_gap_untouched\n", gap_ok ? "PASS" : "FAIL", tag);
    printf("%s %s.bf16_copy_exact\n", copy_ok ? "PASS" : "FAIL", tag);
    ok &= gap_ok && copy_ok;
    void* bufs[] = {d_W, d_W16, d_G, d_M};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    muon_workspace_free(&ws);
    return ok;
}

static void bench(const char* preset, const char* what_name, int rows, int cols, int batch) {
    size_t total = (size_t)batch * rows * cols;
    float *W = cuda_malloc<float>(total), *G = cuda_malloc<float>(total), *M = cuda_malloc<float>(total);
    bf16* W16 = cuda_malloc<bf16>(total);
    cuda_fill_uniform(W, total, 1, 0.02f);
    cuda_fill_uniform(G, total, 2, 1e-3f);
    cuda_fill_uniform(M, total, 3, 1e-3f);
    MuonConfig cfg = muon_config(MUON_MOONLIGHT);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    float ms = cuda_bench_ms([&] { muon_update(W, W16, G, 1.0f, M, rows, cols, batch, (size_t)rows * cols, &cfg, 1e-3f, 0.1f, &ws, 0); }, 2, 10);
    double m = std::min(rows, cols), n = std::max(rows, cols);
    double flops = (4.0 * m * m * n + 2.0 * m * m * m) * cfg.ns_steps * batch;
    char what[96];
    snprintf(what, sizeof(what), "%s muon_update %s %dx%d x%d", preset, what_name, rows, cols, batch);
    cuda_print_bench(what, ms, 0, flops);
    void* bufs[] = {W, G, M, W16};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    muon_workspace_free(&ws);
}

// Newton–Schulz of one group (batch matrices (rows, cols)), version 1 against llmc/'s
static bool compare(const char* preset, const char* what_name, int rows, int cols, int batch) {
    MuonConfig cfg = muon_config(MUON_MOONLIGHT);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_workspace_reserve(&ws, rows, cols, batch);
    cuda_fill_uniform(ws.u, (size_t)batch * rows * cols, 7, 1e-3f);
    v1_frobenius_norm(&ws, (size_t)rows * cols, batch);
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    size_t n = (size_t)batch * rows * cols;
    std::vector<bf16> x2 = cuda_download(muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0), n);
    std::vector<bf16> xc = cuda_download(newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, true), n);
    bool same = memcmp(x2.data(), xc.data(), n * sizeof(bf16)) == 0;
    printf("%s dev_muon.compare.%s.%s.newton_schulz_bitwise_copies_on_cublaslt\n", same ? "PASS" : "FAIL", preset, what_name);
    float ms1 = cuda_bench_ms([&] { newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, false); }, 2, 10);
    float msc = cuda_bench_ms([&] { newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, true); }, 2, 10);
    float ms2 = cuda_bench_ms([&] { muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0); }, 2, 10);
    float ms_one = cuda_bench_ms([&] { muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0, 1); }, 2, 10);
    matmul_set_tune(MATMUL_TUNE_OFF);  // v2 on the heuristic's first algorithms: the copies' share apart from autotuning's
    float ms_off = cuda_bench_ms([&] { muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0); }, 2, 10);
    matmul_set_tune(MATMUL_TUNE_EXACT);
    char shape[96], note[240];
    snprintf(shape, sizeof(shape), "%s %s %dx%d x%d, %d iterations", preset, what_name, rows, cols, batch, cfg.ns_steps);
    snprintf(note, sizeof(note), "v1 cuBLAS + 2 copies an iteration; v2 cuBLASLt ping-pong, autotuned, S and P in column blocks "
             "(as one product each %.4f ms; untuned %.4f ms; with the copies %.4f ms)", ms_one, ms_off, msc);
    cuda_print_compare("muon_newton_schulz", shape, ms1, ms2, note);
    CUBLAS_CHECK(cublasDestroy(h));
    muon_workspace_free(&ws);
    return same;
}

// The memory passes of one group (momentum, norm, X, update; no Newton–Schulz between), version 1
// against llmc/'s, on the same G, M and W; checked bitwise first (momentum and update, X with the
// same norms), as passes_agree does on the small shapes
static bool compare_passes(const char* preset, const char* what_name, int rows, int cols, int batch) {
    MuonConfig cfg = muon_config(MUON_MOONLIGHT);
    size_t rc = (size_t)rows * cols, total = rc * batch;
    float *G = cuda_malloc<float>(total), *M = cuda_malloc<float>(total), *W = cuda_malloc<float>(total);
    bf16* W16 = cuda_malloc<bf16>(total);
    cuda_fill_uniform(G, total, 11, 1e-3f);
    cuda_fill_uniform(M, total, 12, 1e-3f);
    cuda_fill_uniform(W, total, 13, 0.02f);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_workspace_reserve(&ws, rows, cols, batch);
    const float lr = 1e-3f, wd = 0.1f, decay = 1.0f - lr * wd, step = lr * muon_lr_scale(&cfg, rows, cols);
    // the check: version 1's X (its own norms) transposed back against llmc/'s, M and U alike
    v1_momentum_normalize(M, G, rows, cols, batch, rc, &cfg, &ws);
    std::vector<float> u1 = cuda_download(ws.u, total), n1 = cuda_download(ws.norms, batch);
    std::vector<bf16> x1 = to_w_orientation(cuda_download(ws.x0, total), rows, cols, batch);
    cuda_fill_uniform(M, total, 12, 1e-3f);
    muon_momentum(M, G, 1.0f, rows, cols, batch, rc, &cfg, &ws, 0);
    muon_normalize(&ws, rows, cols, batch, 0);
    std::vector<float> u2 = cuda_download(ws.u, total), n2 = cuda_download(ws.norms, batch);
    std::vector<bf16> x2 = cuda_download(ws.x0, total);
    bool same_norms = memcmp(n1.data(), n2.data(), batch * sizeof(float)) == 0;
    bool same = memcmp(u1.data(), u2.data(), total * sizeof(float)) == 0 && (!same_norms || memcmp(x1.data(), x2.data(), total * sizeof(bf16)) == 0);
    printf("%s dev_muon.compare.%s.%s.passes_bitwise_v1 (norms %s)\n", same ? "PASS" : "FAIL", preset, what_name,
           same_norms ? "bitwise, X compared" : "one rounding apart, X not compared");
    float ms1 = cuda_bench_ms([&] {
        v1_momentum_normalize(M, G, rows, cols, batch, rc, &cfg, &ws);
        v1_apply(W, W16, ws.x0, rows, cols, batch, rc, decay, step);
    }, 2, 10);
    float ms2 = cuda_bench_ms([&] {
        muon_momentum(M, G, 1.0f, rows, cols, batch, rc, &cfg, &ws, 0);
        muon_normalize(&ws, rows, cols, batch, 0);
        muon_apply(W, W16, ws.x0, rows, cols, batch, rc, &cfg, lr, wd, 0);
    }, 2, 10);
    char shape[96], note[200];
    snprintf(shape, sizeof(shape), "%s %s %dx%d x%d (%.0f MB moved by v2)", preset, what_name, rows, cols, batch, total * 34.0 / 1e6);
    snprintf(note, sizeof(note), "v1 a norm pass, tall X transposed through 32x32 tiles; v2 the norm in the momentum, "
             "W's orientation, 16-byte accesses");
    cuda_print_compare("muon memory passes", shape, ms1, ms2, note);
    void* bufs[] = {G, M, W, W16};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    muon_workspace_free(&ws);
    return same;
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_muon", DEV_FLAG_SMALL | DEV_FLAG_COMPARE, &flags)) return 2;
    const bool validate_only = flags.validate_only, small = flags.small, compare_only = flags.compare;
    if (!cuda_device_present()) { printf("SKIP dev_muon: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    const int npresets = 4;
    if (compare_only) {  // llama300m and llama600m (with --small: tiny, for dev/emu)
        bool ok = true;
        const int first = small ? 0 : 2, last = small ? 1 : npresets;
        struct Group { const char* preset; const char* name; int rows, cols, batch; };
        std::vector<Group> groups;  // every group of the presets compared, batch L
        for (int pi = first; pi < last; pi++) {
            LlamaConfig c = {};
            llama_preset(presets[pi], &c);
            int HSNH = llama_head_size(&c) * c.NH, QKV = llama_qkv_channels(&c);
            groups.push_back({presets[pi], "qkv", QKV, c.C, c.L});
            groups.push_back({presets[pi], "proj", c.C, HSNH, c.L});
            groups.push_back({presets[pi], "fc1", 2 * c.FF, c.C, c.L});
            groups.push_back({presets[pi], "fc2", c.C, c.FF, c.L});
        }
        for (const Group& g : groups) ok &= compare(g.preset, g.name, g.rows, g.cols, g.batch);
        for (const Group& g : groups) ok &= compare_passes(g.preset, g.name, g.rows, g.cols, g.batch);
        matmul_free();
        return ok ? 0 : 1;
    }
    const MuonPreset muon_presets[3] = {MUON_MOONLIGHT, MUON_KELLER, MUON_MEGATRON_CORE};
    bool ok = validate("dev_muon.zero_gradient", MUON_MOONLIGHT, 96, 40, 2, 96 * 40, 5, true);
    ok &= validate("dev_muon.odd_tall_97x33", MUON_KELLER, 97, 33, 3, 97 * 33 + 5, 6, false);
    uint64_t seed = 100;
    for (int pi = 0; pi < (small ? 1 : npresets); pi++) {
        LlamaConfig c = {};
        llama_preset(presets[pi], &c);
        int HSNH = llama_head_size(&c) * c.NH, QKV = llama_qkv_channels(&c);
        struct { const char* name; int rows, cols; } mats[4] = {
            {"qkv", QKV, c.C}, {"proj", c.C, HSNH}, {"fc1", 2 * c.FF, c.C}, {"fc2", c.C, c.FF}};
        for (int k = 0; k < 4; k++) {
            MuonPreset mp = muon_presets[(pi + k) % 3];  // every preset on every preset's shapes, in turn
            std::string tag = std::string("dev_muon.") + presets[pi] + "." + mats[k].name + "." + muon_preset_name(mp);
            size_t stride = (size_t)mats[k].rows * mats[k].cols + (k == 0 ? 64 : 0);
            ok &= validate(tag.c_str(), mp, mats[k].rows, mats[k].cols, 2, stride, seed += 10, false);
        }
    }
    if (!validate_only) {
        for (int pi = 1; pi < npresets; pi++) {
            LlamaConfig c = {};
            llama_preset(presets[pi], &c);
            int HSNH = llama_head_size(&c) * c.NH, QKV = llama_qkv_channels(&c);
            bench(presets[pi], "qkv", QKV, c.C, c.L);
            bench(presets[pi], "proj", c.C, HSNH, c.L);
            bench(presets[pi], "fc1", 2 * c.FF, c.C, c.L);
            bench(presets[pi], "fc2", c.C, c.FF, c.L);
        }
    }
    matmul_free();
    return ok ? 0 : 1;
}
