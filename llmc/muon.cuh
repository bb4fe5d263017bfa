// muon.cuh — Muon on the GPU: momentum, Newton–Schulz orthogonalization and the weight update for
// a batch of same-shape 2-D hidden matrices (one per layer), the three presets of muon.h
// (MuonConfig, muon_lr_scale and the coefficients come from there). CPU reference: muon.h.
//
// Step, per matrix l of the batch, on the (averaged, clipped) gradient G (rows, cols):
//   M <- beta*M + (1-beta)*G;  U = (1-beta)*G + beta*M if nesterov else M          (fp32)
//   X = U / max(‖U‖_F, 1e-7), taken as its wide (m, n) form Xᵀ if rows > cols           (bf16)
//   ns_steps times: S = X Xᵀ;  P = b S + c S S;  X <- a X + P X                       (bf16, fp32 acc)
//   W <- W*(1 - lr*wd) - lr*s*X (in W's orientation), and the bf16 compute copy of W   (fp32)
// Shapes: W, G, M (batch matrices (rows, cols), matrix l at offset l*batch_stride of the flat
// buffers: per-layer slices of one stacked tensor, or one row block of each layer's qkv);
// W_bf16 likewise in the bf16 copy (or NULL).
// Conventions: W, M (and W_bf16) updated in place (=); G read only, as G * grad_scale (one fp32
// multiply, never fused: the gradient clip's scale, bitwise what an in-place clip leaves; 1 when
// not clipping), so the clip needs no pass of its own. Zero G with zero M gives an
// exactly zero update (U = 0, X = 0 / 1e-7 = 0, every GEMM of zeros is zero): no NaN.
// Memory passes: the momentum also sums U² (fp64 partials of fixed chunks, so ‖U‖ needs no pass
// of its own), and U, X and the update keep W's layout: a tall matrix's wide form is its stored
// transpose, which the products read through their transpose flags, so nothing is transposed in
// memory and every pass is elementwise, 16-byte accesses where the sizes allow. (The first
// version read U again for the norm and transposed the tall U into X and X back into the
// update, through 32 x 32 tiles of 2- and 4-byte accesses: on an H200 (ncu, 5ec15b9) those
// passes ran at 1.9-2.4 TB/s against the momentum's 3.6; dev/cuda/muon.cu keeps them as
// version 1 and times both. dev/step_model.py models llama300m's passes at 2.9 -> 1.9 ms a step
// and llama600m's at 6.4 -> 4.3, not yet measured on a GPU.)
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
static const int MUON_NORM_CHUNK = 16384;  // elements of U per fp64 partial sum of ‖U‖² (a multiple of MUON_VEC)
static const int MUON_MAX_BLOCKS = 8192;   // blocks of an elementwise pass, over the batch
static const int MUON_TILE = 32;           // transpose tile of the Gram mirror (MUON_TILE x MUON_TILE, 8 rows of threads)
static const int MUON_GRAM_BLOCKS = 4;   // column blocks of the Gram matrix (m a multiple of 4 x MUON_TILE)

// Scratch for one batched update; grown on demand (muon_workspace_reserve at setup keeps the
// training loop free of allocations).
typedef struct {
    float* u;           // (batch, rows, cols) fp32 U
    bf16* x0;           // (batch, rows, cols) Newton–Schulz iterate, in W's orientation
    bf16* x1;           // (batch, rows, cols) the other iterate
    bf16* s;            // (batch, m, m) X Xᵀ (m = min(rows, cols))
    bf16* p;            // (batch, m, m) b S + c S²
    double* partials;   // (batch, muon_norm_chunks(rows * cols)) sums of U² (muon_momentum_kernel)
    float* norms;       // (batch) max(‖U‖_F, 1e-7)
    size_t cap_mn, cap_mm, cap_partials;
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

// the partial sums of ‖U‖² per matrix of rc elements: one per MUON_NORM_CHUNK elements
static inline size_t muon_norm_chunks(size_t rc) { return std::max<size_t>(1, (rc + MUON_NORM_CHUNK - 1) / MUON_NORM_CHUNK); }

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
    size_t parts = (size_t)batch * muon_norm_chunks((size_t)rows * cols);
    if (parts > ws->cap_partials) {
        if (ws->partials) CUDA_CHECK(cudaFree(ws->partials));
        ws->partials = cuda_malloc<double>(parts);
        ws->cap_partials = parts;
    }
    if (batch > ws->cap_batch) {
        if (ws->norms) CUDA_CHECK(cudaFree(ws->norms));
        ws->norms = cuda_malloc<float>(batch);
        ws->cap_batch = batch;
    }
}

// ----------------------------------------------------------------------------
// kernels

// The elementwise passes move VEC consecutive elements a thread per step: 8 (two 16-byte loads or
// stores of fp32, one of bf16) where the sizes and pointers allow it (the launches check), else 1.
template <int VEC>
__device__ __forceinline__ void muon_load(float* v, const float* p) {
    if constexpr (VEC == 1) {
        v[0] = p[0];
    } else {
        for (int h = 0; h < VEC / 4; h++) {
            Packed128<float> x = load128(p + 4 * h);
            for (int k = 0; k < 4; k++) v[4 * h + k] = x[k];
        }
    }
}
template <int VEC>
__device__ __forceinline__ void muon_store(float* p, const float* v) {
    if constexpr (VEC == 1) {
        p[0] = v[0];
    } else {
        for (int h = 0; h < VEC / 4; h++) {
            Packed128<float> x;
            for (int k = 0; k < 4; k++) x[k] = v[4 * h + k];
            store128(p + 4 * h, x);
        }
    }
}
template <int VEC>
__device__ __forceinline__ void muon_load_bf16(float* v, const bf16* p) {
    if constexpr (VEC == 1) {
        v[0] = __bfloat162float(p[0]);
    } else {
        Packed128<bf16> x = load128(p);
        for (int k = 0; k < 8; k++) v[k] = __bfloat162float(x[k]);
    }
}
template <int VEC>
__device__ __forceinline__ void muon_store_bf16(bf16* p, const float* v) {
    if constexpr (VEC == 1) {
        p[0] = __float2bfloat16(v[0]);
    } else {
        Packed128<bf16> x;
        for (int k = 0; k < 8; k++) x[k] = __float2bfloat16(v[k]);
        store128(p, x);
    }
}
static const int MUON_VEC = 8;

// The momentum and the squares of U, in one pass. Grid (chunks, batch), MUON_BLOCK threads:
// block (j, l) takes chunk j of matrix l (MUON_NORM_CHUNK elements, the last one shorter):
//   M <- beta M + (1 - beta) g,  U = (1 - beta) g + beta M (nesterov) or M,  g = G * grad_scale,
// and writes the fp64 sum of U² over its chunk into partials (batch, chunks): each thread its
// elements in order, then a fixed tree. The chunks depend on rc alone, so a matrix's partials are
// the same whether it comes in a batch or alone (--muon-shard).
// u (batch, rc) fp32; M, G: batch matrices of rc elements at batch_stride; rc a multiple of VEC
template <int VEC>
__global__ void muon_momentum_kernel(float* u, double* partials, float* M, const float* G, float grad_scale, size_t rc,
                                     size_t batch_stride, float beta, int nesterov) {
    int l = blockIdx.y;
    size_t nv = rc / VEC, chunk = (size_t)MUON_NORM_CHUNK / VEC;
    size_t begin = (size_t)blockIdx.x * chunk, end = begin + chunk < nv ? begin + chunk : nv;
    float* Ml = M + (size_t)l * batch_stride;
    const float* Gl = G + (size_t)l * batch_stride;
    float* ul = u + (size_t)l * rc;
    float one_minus_beta = 1.0f - beta;
    double acc = 0.0;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        float g[VEC], m[VEC], x[VEC];
        muon_load<VEC>(g, Gl + i * VEC);
        muon_load<VEC>(m, Ml + i * VEC);
        for (int k = 0; k < VEC; k++) {
            float gk = __fmul_rn(g[k], grad_scale);  // the clipped gradient, rounded as a stored one
            m[k] = beta * m[k] + one_minus_beta * gk;
            x[k] = nesterov ? one_minus_beta * gk + beta * m[k] : m[k];
        }
        muon_store<VEC>(Ml + i * VEC, m);
        muon_store<VEC>(ul + i * VEC, x);
        for (int k = 0; k < VEC; k++) acc += (double)x[k] * (double)x[k];
    }
    acc = cuda_block_sum_double(acc);
    if (threadIdx.x == 0) partials[(size_t)l * gridDim.x + blockIdx.x] = acc;
}

// norms (batch) = max(sqrt(sum of the partials), 1e-7); partials (batch, chunks), summed in a fixed order
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

// x (batch, rc) bf16 = u (batch, rc) / norms[l], in u's own orientation. Grid (., batch).
template <int VEC>
__global__ void muon_normalize_kernel(bf16* x, const float* u, const float* norms, size_t rc) {
    int l = blockIdx.y;
    float norm = norms[l];
    const float* ul = u + (size_t)l * rc;
    bf16* xl = x + (size_t)l * rc;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < rc / VEC; i += (size_t)gridDim.x * blockDim.x) {
        float v[VEC];
        muon_load<VEC>(v, ul + i * VEC);
        for (int k = 0; k < VEC; k++) v[k] = v[k] / norm;
        muon_store_bf16<VEC>(xl + i * VEC, v);
    }
}

// W <- W*decay - step*X; W_bf16 (or NULL) gets the rounded result. W, W_bf16: batch matrices of rc
// elements at batch_stride; x (batch, rc) bf16 in W's orientation. Grid (., batch).
template <int VEC>
__global__ void muon_apply_kernel(float* W, bf16* W_bf16, const bf16* x, size_t rc, size_t batch_stride, float decay, float step) {
    int l = blockIdx.y;
    float* Wl = W + (size_t)l * batch_stride;
    bf16* W16l = W_bf16 != NULL ? W_bf16 + (size_t)l * batch_stride : NULL;
    const bf16* xl = x + (size_t)l * rc;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < rc / VEC; i += (size_t)gridDim.x * blockDim.x) {
        float xv[VEC], w[VEC];
        muon_load_bf16<VEC>(xv, xl + i * VEC);
        muon_load<VEC>(w, Wl + i * VEC);
        for (int k = 0; k < VEC; k++) w[k] = w[k] * decay - step * xv[k];
        muon_store<VEC>(Wl + i * VEC, w);
        if (W16l != NULL) muon_store_bf16<VEC>(W16l + i * VEC, w);
    }
}

// the elementwise passes' grid: (blocks over rc / vec elements, at most MUON_MAX_BLOCKS in all, batch)
static inline dim3 muon_elementwise_grid(size_t rc, int vec, int batch) {
    size_t per = std::max<size_t>(1, MUON_MAX_BLOCKS / (size_t)batch);
    return dim3((unsigned)std::max<size_t>(1, std::min<size_t>(cuda_ceil_div(rc / vec, MUON_BLOCK), per)), batch);
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

// S = X Xᵀ on the batch, X the wide (m, n) iterate: stored row-major (batch, m, n), or, when
// tall, as its transpose (batch, n, m) (W's orientation; then S = Xtᵀ Xt of the stored Xt, the
// first operand read transposed); S (batch, m, m) bf16. In column blocks from the diagonal down
// and mirrored where muon_blocked(m, blocks), one product otherwise (blocks = 1 forces it; the
// checks compare the two).
static inline void muon_gram(bf16* S, const bf16* X, int m, int n, bool tall, int batch, cudaStream_t stream,
                             int blocks = MUON_GRAM_BLOCKS) {
    const long long smn = (long long)m * n, smm = (long long)m * m;
    const int ld = tall ? m : n;  // X's stored row length
    if (!muon_blocked(m, blocks)) {
        matmul_cublaslt(S, CUDA_R_16BF, NULL, X, X, m, m, n, tall, !tall, ld, ld, m, 1.0f, 0.0f, batch, smn, smn, smm, stream);
        return;
    }
    int w = m / blocks;
    for (int j = 0; j < blocks; j++) {
        size_t r = (size_t)j * w;  // rows r.. of the wide X against rows r..r+w: S[r:m, r:r+w]
        const bf16* xr = X + (tall ? r : r * n);  // (columns r.. of the stored Xt when tall)
        matmul_cublaslt(S + r * m + r, CUDA_R_16BF, NULL, xr, xr, m - (int)r, w, n, tall, !tall, ld, ld, m,
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

// ws->x0 (batch, rows, cols) bf16 = ws->u / ws->norms, the iteration's start
static inline void muon_normalize(MuonWorkspace* ws, int rows, int cols, int batch, cudaStream_t stream) {
    size_t rc = (size_t)rows * cols;
    if (rc % MUON_VEC == 0) muon_normalize_kernel<MUON_VEC><<<muon_elementwise_grid(rc, MUON_VEC, batch), MUON_BLOCK, 0, stream>>>(ws->x0, ws->u, ws->norms, rc);
    else muon_normalize_kernel<1><<<muon_elementwise_grid(rc, 1, batch), MUON_BLOCK, 0, stream>>>(ws->x0, ws->u, ws->norms, rc);
    KERNEL_CHECK();
}

// Orthogonalizes the batch in ws->u (batch, rows, cols) fp32 (left unchanged), whose norms
// muon_momentum left in ws->norms, and returns the bf16 result (batch, rows, cols) in W's
// orientation: one of ws->x0 / ws->x1.
// Each iteration, on the wide (m, n) iterate X (matmul_cublaslt: D = alpha op(A) op(B) + beta C),
// stored as it is when rows <= cols, as Xt = Xᵀ (n, m) when tall:
//   S  = X Xᵀ          (m, m)   muon_gram (X's two copies, one read transposed; by column blocks)
//   P  = c S S + b S   (m, m)   muon_poly (A = B = S, C = S, D = P, by column blocks)
//   X' = P X + a X     (m, n)   A = P, B = X, C = X, D = the other iterate;
//                               tall: Xt' = Xt P + a Xt (P symmetric), A = Xt, B = P
// Nothing is transposed in memory: U, X and the update share W's layout, and the products read
// the tall iterate through their operands' transpose flags.
static inline bf16* muon_newton_schulz(MuonWorkspace* ws, int rows, int cols, int batch, const MuonConfig* cfg,
                                       cudaStream_t stream, int gram_blocks = MUON_GRAM_BLOCKS) {
    const bool tall = rows > cols;
    const int m = tall ? cols : rows, n = tall ? rows : cols;
    const long long smn = (long long)m * n, smm = (long long)m * m;
    muon_normalize(ws, rows, cols, batch, stream);
    bf16* cur = ws->x0;
    bf16* nxt = ws->x1;
    for (int it = 0; it < cfg->ns_steps; it++) {
        muon_gram(ws->s, cur, m, n, tall, batch, stream, gram_blocks);
        muon_poly(ws->p, ws->s, m, batch, cfg->b, cfg->c, stream, gram_blocks);
        if (tall) matmul_cublaslt(nxt, CUDA_R_16BF, cur, cur, ws->p, n, m, m, false, false, m, m, m, 1.0f, cfg->a, batch, smn, smm, smn, stream);
        else matmul_cublaslt(nxt, CUDA_R_16BF, cur, ws->p, cur, m, n, m, false, false, m, n, n, 1.0f, cfg->a, batch, smm, smn, smn, stream);
        bf16* t = cur; cur = nxt; nxt = t;
    }
    return cur;
}

// One Muon step on `batch` matrices (rows, cols); see the header for the math and the layout.
// The parts of muon_update, for the sharded step (train_llama.cu): the momentum of `batch`
// matrices, M <- beta M + (1-beta) G, U into ws->u and its norms into ws->norms; then
// muon_newton_schulz(ws, ...) gives X (bf16, W's layout); muon_apply: W <- W (1 - lr wd) - lr s X
// (and the bf16 copy).
// norms = false: the norms are not needed (a rank that does not orthogonalize these matrices,
// --muon-shard), and their finishing kernel is not launched.
static inline void muon_momentum(float* M, const float* G, float grad_scale, int rows, int cols, int batch, size_t batch_stride,
                                 const MuonConfig* cfg, MuonWorkspace* ws, cudaStream_t stream, bool norms = true) {
    muon_workspace_reserve(ws, rows, cols, batch);
    size_t rc = (size_t)rows * cols;
    int chunks = (int)muon_norm_chunks(rc);
    bool vec = rc % MUON_VEC == 0 && (batch == 1 || batch_stride % 4 == 0) && cuda_aligned16(M) && cuda_aligned16(G);
    dim3 grid(chunks, batch);
    if (vec) muon_momentum_kernel<MUON_VEC><<<grid, MUON_BLOCK, 0, stream>>>(ws->u, ws->partials, M, G, grad_scale, rc, batch_stride, cfg->beta, cfg->nesterov);
    else muon_momentum_kernel<1><<<grid, MUON_BLOCK, 0, stream>>>(ws->u, ws->partials, M, G, grad_scale, rc, batch_stride, cfg->beta, cfg->nesterov);
    KERNEL_CHECK();
    if (!norms) return;
    muon_frobenius_norm_finish_kernel<<<batch, 64, 0, stream>>>(ws->norms, ws->partials, chunks);
    KERNEL_CHECK();
}

static inline void muon_apply(float* W, bf16* W_bf16, const bf16* x, int rows, int cols, int batch, size_t batch_stride,
                              const MuonConfig* cfg, float lr, float weight_decay, cudaStream_t stream) {
    const float decay = 1.0f - lr * weight_decay;
    const float step = lr * muon_lr_scale(cfg, rows, cols);
    size_t rc = (size_t)rows * cols;
    bool vec = rc % MUON_VEC == 0 && (batch == 1 || batch_stride % MUON_VEC == 0) && cuda_aligned16(W) &&
               (W_bf16 == NULL || cuda_aligned16(W_bf16)) && cuda_aligned16(x);
    if (vec) muon_apply_kernel<MUON_VEC><<<muon_elementwise_grid(rc, MUON_VEC, batch), MUON_BLOCK, 0, stream>>>(W, W_bf16, x, rc, batch_stride, decay, step);
    else muon_apply_kernel<1><<<muon_elementwise_grid(rc, 1, batch), MUON_BLOCK, 0, stream>>>(W, W_bf16, x, rc, batch_stride, decay, step);
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
