// muon.cuh — Muon on the GPU: momentum, Newton–Schulz orthogonalization and the weight update for
// a batch of same-shape 2-D hidden matrices (one per layer), the three presets of muon.h
// (MuonConfig, muon_lr_scale and the coefficients come from there). CPU reference: muon.h.
//
// Step, per matrix l of the batch, on the (averaged, clipped) gradient G (rows, cols):
//   M <- beta*M + (1-beta)*G;  U = (1-beta)*G + beta*M if nesterov else M          (fp32)
//   X = U / max(‖U‖_F, 1e-7), transposed to the wide (m, n) orientation if rows > cols   (bf16)
//   ns_steps times: S = X Xᵀ;  P = b S + c S S;  X <- a X + P X                       (bf16, fp32 acc)
//   W <- W*(1 - lr*wd) - lr*s*X (transposed back), and the bf16 compute copy of W      (fp32)
// Shapes: W, G, M (batch matrices (rows, cols), matrix l at offset l*batch_stride of the flat
// buffers: per-layer slices of one stacked tensor, or one row block of each layer's qkv);
// W_bf16 likewise in the bf16 copy (or NULL).
// Conventions: W, M (and W_bf16) updated in place (=); G read only, as G * grad_scale (one fp32
// multiply, never fused: the gradient clip's scale, bitwise what an in-place clip leaves; 1 when
// not clipping), so the clip needs no pass of its own. Zero G with zero M gives an
// exactly zero update (U = 0, X = 0 / 1e-7 = 0, every GEMM of zeros is zero): no NaN.
// Batching: the whole Newton–Schulz loop runs on all matrices of the batch at once, each GEMM one
// strided-batched cuBLASLt matmul over the batch (matmul_cublaslt, llmc/matmul.cuh: bf16 A/B/C/D,
// CUBLAS_COMPUTE_32F, the plan and algorithm cached per shape), so L small GEMMs become one
// launch that fills the GPU. cuBLASLt reads C and writes D as two buffers, so the polynomial's
// "+ b S" and "+ a X" terms come in as C and nothing is copied: the iterate ping-pongs between
// two buffers (the first version, on cublasGemmStridedBatchedEx, which accumulates into C itself,
// copied S and X once each per iteration; dev/cuda/muon.cu keeps it as version 1).
// Symmetric products: S = X Xᵀ and P = c S S + b S are symmetric, so where m is a multiple of 128
// each is computed as MUON_GRAM_BLOCKS column blocks of width w = m / 4, block j only from its
// diagonal block down (S[jw:m, jw:jw+w] = X[jw:m] X[jw:jw+w]ᵀ, P's likewise: one batched product
// each, 5/8 of the full product's flops), and the blocks above the diagonal blocks copied from
// their mirror images (what muon.h's cblas_ssyrk does on the CPU). Every element is the same dot
// product the full product computes, though cuBLASLt may sum it in another order for another
// shape: the bits can differ from the one-product way. With 0.75 to 0.80 of the iteration's flops
// left at llama300m's and llama600m's shapes, modelled 1.5 and 5.0 ms a step less there
// (dev/step_model.py: the H200's Newton–Schulz times of c950ed2, 8.5 and 26.9 ms a step, at the
// same rate, plus the copies); not yet measured on a GPU.
// Precision: momentum and the weight update in fp32 (as the CPU); the Frobenius norm in fp64
// with a fixed reduction order; the iteration in bf16 with fp32 accumulation, as Keller Jordan's
// reference runs it. The output's singular values land in roughly [0.7, 1.2] either way, so bf16
// and fp32 orthogonalizations differ by ~1e-2 relative per element (dev/cuda/muon.cu measures it).
// Stream: the stream argument. The GEMMs use matmul.cuh's shared workspace, so a Muon step must
// not run concurrently with other matmul calls on another stream.
#pragma once
#include "cuda_common.cuh"
#include "matmul.cuh"
#include "muon.h"

static const int MUON_BLOCK = 256;
static const int MUON_NORM_CHUNKS = 64;  // partial sums per matrix of the Frobenius norm
static const int MUON_TILE = 32;         // transpose tile (MUON_TILE x MUON_TILE, 8 rows of threads)
static const int MUON_GRAM_BLOCKS = 4;   // column blocks of the Gram matrix (m a multiple of 4 x MUON_TILE)

// Scratch for one batched update; grown on demand (muon_workspace_reserve at setup keeps the
// training loop free of allocations).
typedef struct {
    float* u;           // (batch, rows, cols) fp32 U
    bf16* x0;           // (batch, m, n) Newton–Schulz iterate (m = min(rows, cols), n = max)
    bf16* x1;           // (batch, m, n) the other iterate
    bf16* s;            // (batch, m, m) X Xᵀ
    bf16* p;            // (batch, m, m) b S + c S²
    double* partials;   // (batch, MUON_NORM_CHUNKS)
    float* norms;       // (batch) max(‖U‖_F, 1e-7)
    size_t cap_mn, cap_mm;
    int cap_batch;
} MuonWorkspace;

static inline void muon_workspace_init(MuonWorkspace* ws) {
    memset(ws, 0, sizeof(*ws));
}

static inline void muon_workspace_free(MuonWorkspace* ws) {
    void* bufs[] = {ws->u, ws->x0, ws->x1, ws->s, ws->p, ws->partials, ws->norms};
    for (void* b : bufs) if (b) CUDA_CHECK(cudaFree(b));
    memset(ws, 0, sizeof(*ws));
}

// Makes the workspace large enough for a batch of (rows, cols) matrices.
static inline void muon_workspace_reserve(MuonWorkspace* ws, int rows, int cols, int batch) {
    size_t m = (size_t)std::min(rows, cols), n = (size_t)std::max(rows, cols);
    size_t mn = (size_t)batch * m * n, mm = (size_t)batch * m * m;
    if (mn > ws->cap_mn) {
        void* bufs[] = {ws->u, ws->x0, ws->x1};
        for (void* b : bufs) if (b) CUDA_CHECK(cudaFree(b));
        ws->u = cuda_malloc<float>(mn);
        ws->x0 = cuda_malloc<bf16>(mn);
        ws->x1 = cuda_malloc<bf16>(mn);
        ws->cap_mn = mn;
    }
    if (mm > ws->cap_mm) {
        if (ws->s) CUDA_CHECK(cudaFree(ws->s));
        if (ws->p) CUDA_CHECK(cudaFree(ws->p));
        ws->s = cuda_malloc<bf16>(mm);
        ws->p = cuda_malloc<bf16>(mm);
        ws->cap_mm = mm;
    }
    if (batch > ws->cap_batch) {
        if (ws->partials) CUDA_CHECK(cudaFree(ws->partials));
        if (ws->norms) CUDA_CHECK(cudaFree(ws->norms));
        ws->partials = cuda_malloc<double>((size_t)batch * MUON_NORM_CHUNKS);
        ws->norms = cuda_malloc<float>(batch);
        ws->cap_batch = batch;
    }
}

// ----------------------------------------------------------------------------
// kernels

// u (batch, rows*cols) fp32; M, G: batch matrices of rc elements at batch_stride
__global__ void muon_momentum_kernel(float* u, float* M, const float* G, float grad_scale, size_t rc, int batch,
                                     size_t batch_stride, float beta, int nesterov) {
    size_t total = rc * batch;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    float one_minus_beta = 1.0f - beta;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        size_t off = (idx / rc) * batch_stride + idx % rc;
        float g = __fmul_rn(G[off], grad_scale);  // the clipped gradient, rounded as a stored one
        float m = beta * M[off] + one_minus_beta * g;
        M[off] = m;
        u[idx] = nesterov ? one_minus_beta * g + beta * m : m;
    }
}

// Sum of squares of each matrix of u (batch, rc), as fixed-order fp64 partials (batch, gridDim.x).
__global__ void muon_frobenius_norm_kernel(double* partials, const float* u, size_t rc) {
    int l = blockIdx.y;
    size_t chunk = (rc + gridDim.x - 1) / gridDim.x;
    size_t begin = (size_t)blockIdx.x * chunk, end = begin + chunk < rc ? begin + chunk : rc;
    const float* x = u + (size_t)l * rc;
    double acc = 0.0;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) partials[(size_t)l * gridDim.x + blockIdx.x] = acc;
}

// norms (batch), partials (batch, chunks)
__global__ void muon_frobenius_norm_finish_kernel(float* norms, const double* partials, int chunks) {
    int l = blockIdx.x;
    double acc = 0.0;
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) acc += partials[(size_t)l * chunks + i];
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) {
        float norm = (float)sqrt(acc);
        norms[l] = norm < MUON_NORM_EPS ? MUON_NORM_EPS : norm;
    }
}

// norms (batch) = max(‖U_l‖_F, 1e-7) of U (batch, rows*cols)
static inline void muon_frobenius_norm(float* norms, double* partials, const float* u, size_t rc, int batch,
                                       cudaStream_t stream) {
    dim3 grid(MUON_NORM_CHUNKS, batch);
    muon_frobenius_norm_kernel<<<grid, MUON_BLOCK, 0, stream>>>(partials, u, rc);
    KERNEL_CHECK();
    muon_frobenius_norm_finish_kernel<<<batch, 64, 0, stream>>>(norms, partials, MUON_NORM_CHUNKS);
    KERNEL_CHECK();
}

// x (batch, m, n) bf16 = u (batch, rows, cols) / norms (batch), transposed to (cols, rows) when
// TALL. One 32x32 tile per block, staged in shared memory so the read and the write are coalesced.
template <bool TALL>
__global__ void muon_normalize_kernel(bf16* x, const float* u, const float* norms, int rows, int cols) {
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
            int c = c0 + k, r = r0 + threadIdx.x;  // x[l][c][r]
            if (r < rows && c < cols) x[base + (size_t)c * rows + r] = __float2bfloat16(tile[threadIdx.x][k]);
        } else {
            int r = r0 + k, c = c0 + threadIdx.x;
            if (r < rows && c < cols) x[base + (size_t)r * cols + c] = __float2bfloat16(tile[k][threadIdx.x]);
        }
    }
}

// W <- W*decay - step*X (X read transposed when TALL); W_bf16 gets the rounded result.
// W, W_bf16: batch matrices (rows, cols) at batch_stride; x (batch, m, n) bf16
template <bool TALL>
__global__ void muon_apply_kernel(float* W, bf16* W_bf16, const bf16* x, int rows, int cols, size_t batch_stride,
                                  float decay, float step) {
    __shared__ float tile[MUON_TILE][MUON_TILE + 1];
    int l = blockIdx.z;
    int r0 = blockIdx.y * MUON_TILE, c0 = blockIdx.x * MUON_TILE;
    size_t xbase = (size_t)l * rows * cols, wbase = (size_t)l * batch_stride;
    for (int k = threadIdx.y; k < MUON_TILE; k += blockDim.y) {
        if (TALL) {
            int c = c0 + k, r = r0 + threadIdx.x;  // tile[c - c0][r - r0] = x[l][c][r]
            if (r < rows && c < cols) tile[k][threadIdx.x] = __bfloat162float(x[xbase + (size_t)c * rows + r]);
        } else {
            int r = r0 + k, c = c0 + threadIdx.x;  // tile[r - r0][c - c0]
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

// S (batch, m, m): every MUON_TILE x MUON_TILE tile above the diagonal blocks of width w (block of
// its rows < block of its columns) = the transpose of its mirror tile below. Grid (m / MUON_TILE,
// m / MUON_TILE, batch), block (MUON_TILE, 8); w a multiple of MUON_TILE.
__global__ void muon_gram_mirror_kernel(bf16* S, int m, int w) {
    __shared__ bf16 tile[MUON_TILE][MUON_TILE + 2];
    int r0 = blockIdx.y * MUON_TILE, c0 = blockIdx.x * MUON_TILE;  // the tile written
    if (r0 / w >= c0 / w) return;
    bf16* s = S + (size_t)blockIdx.z * m * m;
    for (int i = threadIdx.y; i < MUON_TILE; i += blockDim.y)  // its mirror: rows c0.., columns r0..
        tile[i][threadIdx.x] = s[(size_t)(c0 + i) * m + r0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < MUON_TILE; i += blockDim.y)
        s[(size_t)(r0 + i) * m + c0 + threadIdx.x] = tile[threadIdx.x][i];
}

// Whether the symmetric products of an (m, m) Newton–Schulz step go by column blocks: m a multiple
// of blocks x MUON_TILE (so every block edge is a tile edge of the mirror), blocks > 1.
static inline bool muon_blocked(int m, int blocks) { return blocks > 1 && m % (blocks * MUON_TILE) == 0; }

// S = X Xᵀ on the batch: X (batch, m, n), S (batch, m, m), both bf16 row-major; in column blocks
// from the diagonal down and mirrored where muon_blocked(m, blocks), one product otherwise
// (blocks = 1 forces it; the checks compare the two).
static inline void muon_gram(bf16* S, const bf16* X, int m, int n, int batch, cudaStream_t stream,
                             int blocks = MUON_GRAM_BLOCKS) {
    const long long smn = (long long)m * n, smm = (long long)m * m;
    if (!muon_blocked(m, blocks)) {
        matmul_cublaslt(S, CUDA_R_16BF, NULL, X, X, m, m, n, false, true, n, n, m, 1.0f, 0.0f, batch, smn, smn, smm, stream);
        return;
    }
    int w = m / blocks;
    for (int j = 0; j < blocks; j++) {
        size_t r = (size_t)j * w;  // rows r.. of X against rows r..r+w: S[r:m, r:r+w]
        matmul_cublaslt(S + r * m + r, CUDA_R_16BF, NULL, X + r * n, X + r * n, m - (int)r, w, n, false, true, n, n, m,
                        1.0f, 0.0f, batch, smn, smn, smm, stream);
    }
    muon_gram_mirror_kernel<<<dim3(m / MUON_TILE, m / MUON_TILE, batch), dim3(MUON_TILE, 8), 0, stream>>>(S, m, w);
    KERNEL_CHECK();
}

// P = c S S + b S on the batch (S (batch, m, m) symmetric, so P is too): by the same column blocks
// from the diagonal down, P[r:m, r:r+w] = c S[r:m, :] S[:, r:r+w] + b S[r:m, r:r+w], then
// mirrored, where muon_blocked(m, blocks); one product otherwise.
// C: where "b S" is read (S, or P itself holding a copy of S: dev/cuda/muon.cu's in-place variant).
static inline void muon_poly(bf16* P, const bf16* S, int m, int batch, float b, float c, cudaStream_t stream,
                             int blocks = MUON_GRAM_BLOCKS, const bf16* C = NULL) {
    const long long smm = (long long)m * m;
    if (C == NULL) C = S;
    if (!muon_blocked(m, blocks)) {
        matmul_cublaslt(P, CUDA_R_16BF, C, S, S, m, m, m, false, false, m, m, m, c, b, batch, smm, smm, smm, stream);
        return;
    }
    int w = m / blocks;
    for (int j = 0; j < blocks; j++) {
        size_t r = (size_t)j * w;
        matmul_cublaslt(P + r * m + r, CUDA_R_16BF, C + r * m + r, S + r * m, S + r, m - (int)r, w, m, false, false, m, m, m,
                        c, b, batch, smm, smm, smm, stream);
    }
    muon_gram_mirror_kernel<<<dim3(m / MUON_TILE, m / MUON_TILE, batch), dim3(MUON_TILE, 8), 0, stream>>>(P, m, w);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// Newton–Schulz and the update

// Orthogonalizes the batch in ws->u (batch, rows, cols) fp32 (left unchanged) and returns the
// bf16 result in the wide orientation (batch, m, n): one of ws->x0 / ws->x1, each matrix stored
// (cols, rows) when rows > cols.
// Each iteration, on the row-major (m, n) iterate X (matmul_cublaslt: D = alpha op(A) op(B) + beta C):
//   S  = X Xᵀ          (m, m)   muon_gram (A = X, B = X read transposed, by column blocks)
//   P  = c S S + b S   (m, m)   muon_poly (A = B = S, C = S, D = P, by column blocks)
//   X' = P X + a X     (m, n)   A = P, B = X, C = X, D = the other iterate
static inline bf16* muon_newton_schulz(MuonWorkspace* ws, int rows, int cols, int batch, const MuonConfig* cfg,
                                       cudaStream_t stream, int gram_blocks = MUON_GRAM_BLOCKS) {
    const bool tall = rows > cols;
    const int m = tall ? cols : rows, n = tall ? rows : cols;
    const size_t rc = (size_t)rows * cols;
    const long long smn = (long long)m * n, smm = (long long)m * m;
    muon_frobenius_norm(ws->norms, ws->partials, ws->u, rc, batch, stream);
    dim3 tgrid(cuda_ceil_div(cols, MUON_TILE), cuda_ceil_div(rows, MUON_TILE), batch), tblock(MUON_TILE, 8);
    if (tall) muon_normalize_kernel<true><<<tgrid, tblock, 0, stream>>>(ws->x0, ws->u, ws->norms, rows, cols);
    else muon_normalize_kernel<false><<<tgrid, tblock, 0, stream>>>(ws->x0, ws->u, ws->norms, rows, cols);
    KERNEL_CHECK();
    bf16* cur = ws->x0;
    bf16* nxt = ws->x1;
    for (int it = 0; it < cfg->ns_steps; it++) {
        muon_gram(ws->s, cur, m, n, batch, stream, gram_blocks);
        muon_poly(ws->p, ws->s, m, batch, cfg->b, cfg->c, stream, gram_blocks);
        matmul_cublaslt(nxt, CUDA_R_16BF, cur, ws->p, cur, m, n, m, false, false, m, n, n, 1.0f, cfg->a, batch, smm, smn, smn, stream);
        bf16* t = cur; cur = nxt; nxt = t;
    }
    return cur;
}

// One Muon step on `batch` matrices (rows, cols); see the header for the math and the layout.
// The parts of muon_update, for the sharded step (train_llama.cu): the momentum of `batch`
// matrices, M <- beta M + (1-beta) G, and U into ws->u; then muon_newton_schulz(ws, ...) gives
// X (bf16, its own layout); muon_apply: W <- W (1 - lr wd) - lr s X (and the bf16 copy).
static inline void muon_momentum(float* M, const float* G, float grad_scale, int rows, int cols, int batch, size_t batch_stride,
                                 const MuonConfig* cfg, MuonWorkspace* ws, cudaStream_t stream) {
    muon_workspace_reserve(ws, rows, cols, batch);
    size_t rc = (size_t)rows * cols;
    muon_momentum_kernel<<<cuda_grid_for(rc * batch, MUON_BLOCK), MUON_BLOCK, 0, stream>>>(
        ws->u, M, G, grad_scale, rc, batch, batch_stride, cfg->beta, cfg->nesterov);
    KERNEL_CHECK();
}

static inline void muon_apply(float* W, bf16* W_bf16, const bf16* x, int rows, int cols, int batch, size_t batch_stride,
                              const MuonConfig* cfg, float lr, float weight_decay, cudaStream_t stream) {
    const float decay = 1.0f - lr * weight_decay;
    const float step = lr * muon_lr_scale(cfg, rows, cols);
    dim3 tgrid(cuda_ceil_div(cols, MUON_TILE), cuda_ceil_div(rows, MUON_TILE), batch), tblock(MUON_TILE, 8);
    if (rows > cols) muon_apply_kernel<true><<<tgrid, tblock, 0, stream>>>(W, W_bf16, x, rows, cols, batch_stride, decay, step);
    else muon_apply_kernel<false><<<tgrid, tblock, 0, stream>>>(W, W_bf16, x, rows, cols, batch_stride, decay, step);
    KERNEL_CHECK();
}

static inline void muon_update(float* W,            // batch x (rows, cols), matrix l at l*batch_stride
                               bf16* W_bf16,        // same layout in the bf16 copy, or NULL
                               const float* G,      // same layout
                               float grad_scale,    // the clip's scale (1: none)
                               float* M,            // same layout
                               int rows, int cols, int batch, size_t batch_stride,
                               const MuonConfig* cfg, float lr, float weight_decay,
                               MuonWorkspace* ws, cudaStream_t stream) {
    muon_momentum(M, G, grad_scale, rows, cols, batch, batch_stride, cfg, ws, stream);
    bf16* x = muon_newton_schulz(ws, rows, cols, batch, cfg, stream);
    muon_apply(W, W_bf16, x, rows, cols, batch, batch_stride, cfg, lr, weight_decay, stream);
}
