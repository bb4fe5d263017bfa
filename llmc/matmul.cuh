// matmul.cuh — the bias-free linear layer on the GPU (cuBLASLt), and the row-major batched GEMM
// the attention and the tests use. CPU reference: matmul.h.
//
// Shapes (row-major, weights (out, in) as everywhere): inp (N, C), weight (OC, C), out (N, OC).
//   matmul_forward       out (N, OC) bf16  = inp · weightᵀ
//   matmul_forward_fp32  out (N, OC) fp32  = [residual +] inp · weightᵀ   (residual fp32 or NULL)
//                        the residual add of each block and the fp32 logits ride on the GEMM's
//                        epilogue (D = A·B + C), so neither needs a pass of its own
//   matmul_backward      dinp (N, C) bf16  = dout · weight       WRITTEN (=), skipped when NULL
//                        dweight (OC, C) fp32 += doutᵀ · inp     ACCUMULATED in fp32
// Unlike matmul_backward_cpu, dinp is written, not accumulated: on the GPU every activation
// gradient is a bf16 scratch buffer that a single producer fills, so += would only add a memset
// and a rounding. dweight accumulates across micro-batches straight into the fp32 gradient buffer
// (cuBLASLt with A/B bf16, C/D fp32, fp32 compute): no bf16 rounding of weight gradients.
// Precision: bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), outputs as stated.
// Stream: the stream argument; the workspace is shared, so calls must not run concurrently on
// different streams.
// Plans (descriptors + the heuristic's algorithm) are cached per shape, layout and alignment: the
// heuristic query costs tens of microseconds and would otherwise run for every GEMM of every step.
// Where cuBLASLt has no algorithm (leading dimensions that are not multiples of 16 bytes, as in
// sampling's growing T), the same GEMM runs through cublasGemmStridedBatchedEx instead. Each such
// shape prints one "matmul: ... falls back ..." line on stderr the first time it runs (shape,
// layout and the heuristic's status), so a training shape on the slower path shows in the log;
// after MATMUL_FALLBACK_LINES shapes the rest are counted without a line.
#pragma once
#include <array>
#include <map>
#include <set>
#include "cuda_common.cuh"

static const size_t MATMUL_WORKSPACE_BYTES = (size_t)32 << 20;  // cuBLASLt split-K etc.
// Sampling meets one new T per generated token, most of them off the 16-byte grid: listing them
// all would bury the log, and the training shapes, which run first, are the ones that matter.
static const int MATMUL_FALLBACK_LINES = 16;

typedef struct {
    bool lt;  // false: cuBLASLt offered no algorithm (odd leading dimensions); use classic cuBLAS
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c, d;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;

typedef std::array<long long, 20> MatmulKey;

typedef struct {
    cublasLtHandle_t handle;
    cublasHandle_t blas;  // fallback for shapes cuBLASLt rejects (e.g. sampling's T = 1, 2, 3, ...)
    void* workspace;
    std::map<MatmulKey, MatmulPlan>* plans;
    std::set<MatmulKey>* fallback_shapes;  // keys without the alignments: one line per shape
} MatmulContext;

static MatmulContext matmul_ctx = {NULL, NULL, NULL, NULL, NULL};

static inline void matmul_init(void) {
    if (matmul_ctx.handle != NULL) return;
    CUBLAS_CHECK(cublasLtCreate(&matmul_ctx.handle));
    CUBLAS_CHECK(cublasCreate(&matmul_ctx.blas));
    CUDA_CHECK(cudaMalloc(&matmul_ctx.workspace, MATMUL_WORKSPACE_BYTES));
    matmul_ctx.plans = new std::map<MatmulKey, MatmulPlan>();
    matmul_ctx.fallback_shapes = new std::set<MatmulKey>();
}

static inline void matmul_free(void) {
    if (matmul_ctx.handle == NULL) return;
    for (auto& kv : *matmul_ctx.plans) {
        MatmulPlan& p = kv.second;
        cublasLtMatmulDescDestroy(p.op);
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.c);
        cublasLtMatrixLayoutDestroy(p.d);
    }
    delete matmul_ctx.plans;
    delete matmul_ctx.fallback_shapes;
    CUDA_CHECK(cudaFree(matmul_ctx.workspace));
    CUBLAS_CHECK(cublasDestroy(matmul_ctx.blas));
    CUBLAS_CHECK(cublasLtDestroy(matmul_ctx.handle));
    matmul_ctx = {NULL, NULL, NULL, NULL, NULL};
}

// Distinct GEMM shapes (alignments aside) that have run on the cuBLAS fallback since matmul_init.
static inline int matmul_fallback_count(void) {
    return matmul_ctx.fallback_shapes ? (int)matmul_ctx.fallback_shapes->size() : 0;
}

// The line for a plan cuBLASLt refused (key as built in matmul_cublaslt), once per shape.
static inline void matmul_report_fallback(const MatmulKey& key, cublasStatus_t status, int found) {
    MatmulKey shape = key;
    for (int i = 14; i < 18; i++) shape[i] = 0;  // the alignments
    if (!matmul_ctx.fallback_shapes->insert(shape).second) return;
    int n = (int)matmul_ctx.fallback_shapes->size();
    if (n > MATMUL_FALLBACK_LINES) {
        if (n == MATMUL_FALLBACK_LINES + 1)
            fprintf(stderr, "matmul: more than %d GEMM shapes fall back from cuBLASLt to cuBLAS; the rest are not listed\n",
                    MATMUL_FALLBACK_LINES);
        return;
    }
    char reason[160];
    if (status != CUBLAS_STATUS_SUCCESS)
        snprintf(reason, sizeof reason, "cublasLtMatmulAlgoGetHeuristic returned status %d (%s)", (int)status, cublasGetStatusString(status));
    else
        snprintf(reason, sizeof reason, "cublasLtMatmulAlgoGetHeuristic found %d algorithms", found);
    fprintf(stderr, "matmul: GEMM M=%lld N=%lld K=%lld op(A)=%c op(B)=%c lda=%lld ldb=%lld ldd=%lld batch=%lld out=%s%s, "
                    "alignment A/B/C/D %lld/%lld/%lld/%lld bytes, falls back from cuBLASLt to cuBLAS: %s\n",
            key[0], key[1], key[2], key[3] ? 'T' : 'N', key[4] ? 'T' : 'N', key[5], key[6], key[7], key[8],
            key[12] == (long long)CUDA_R_32F ? "fp32" : "bf16", key[13] ? " +C" : "", key[14], key[15], key[16], key[17], reason);
}

// Largest power of two (up to 256) dividing the address of every batch's matrix: what the
// heuristic may assume about the pointer (flat-buffer slices are not always 256-byte aligned).
static inline long long matmul_alignment(const void* p, long long stride_bytes = 0) {
    uintptr_t a = (uintptr_t)p | (uintptr_t)stride_bytes;
    long long al = 256;
    while (al > 1 && (a % (uintptr_t)al) != 0) al >>= 1;
    return al;
}

static inline cublasLtMatrixLayout_t matmul_layout(cudaDataType t, int rows, int cols, int ld, int batch, long long stride) {
    cublasLtMatrixLayout_t l;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, (int64_t)ld));
    if (batch > 1) {
        int32_t bc = batch;
        int64_t st = stride;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof(st)));
    }
    return l;
}

// Row-major, optionally strided-batched:  D (M, N) = alpha · op(A) · op(B) + beta · C
//   op(A) (M, K): A is stored (M, K) row-major, or (K, M) when trans_a; lda = its row length.
//   op(B) (K, N): B is stored (K, N), or (N, K) when trans_b; ldb likewise.
//   C and D share type (d_type: CUDA_R_16BF or CUDA_R_32F), ld (ldd) and batch stride; C may be
//   NULL when beta == 0, and may equal D (in-place accumulation).
// cuBLASLt is column-major: a row-major (R, S) matrix is a column-major (S, R) one, so the call
// computes Dᵀ (N, M) = op(B)ᵀ · op(A)ᵀ, i.e. B is cuBLAS's first operand and A its second.
static inline void matmul_cublaslt(void* d, cudaDataType d_type, const void* c,
                                   const bf16* a, const bf16* b,
                                   int M, int N, int K, bool trans_a, bool trans_b,
                                   int lda, int ldb, int ldd, float alpha, float beta,
                                   int batch, long long stride_a, long long stride_b, long long stride_d,
                                   cudaStream_t stream) {
    if (matmul_ctx.handle == NULL) matmul_init();
    if (c == NULL) c = d;
    if (batch < 1) batch = 1;
    long long d_bytes = d_type == CUDA_R_32F ? 4 : 2;
    bool batched = batch > 1;
    MatmulKey key = {M, N, K, trans_a, trans_b, lda, ldb, ldd, batch, stride_a, stride_b, stride_d,
                     (long long)d_type, beta != 0.0f,
                     matmul_alignment(a, batched ? stride_a * 2 : 0), matmul_alignment(b, batched ? stride_b * 2 : 0),
                     matmul_alignment(c, batched ? stride_d * d_bytes : 0), matmul_alignment(d, batched ? stride_d * d_bytes : 0),
                     0, 0};
    auto it = matmul_ctx.plans->find(key);
    if (it == matmul_ctx.plans->end()) {
        MatmulPlan p;
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS's first operand is B
        cublasOperation_t tb = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        // column-major shapes as stored: first operand m x k (k x m if transposed), m = N, n = M
        p.a = matmul_layout(CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb, batch, stride_b);
        p.b = matmul_layout(CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda, batch, stride_a);
        p.c = matmul_layout(d_type, N, M, ldd, batch, stride_d);
        p.d = matmul_layout(d_type, N, M, ldd, batch, stride_d);
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = MATMUL_WORKSPACE_BYTES;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        uint32_t al_a = (uint32_t)key[15], al_b = (uint32_t)key[14], al_c = (uint32_t)key[16], al_d = (uint32_t)key[17];
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
        cublasLtMatmulHeuristicResult_t result;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(matmul_ctx.handle, p.op, p.a, p.b, p.c, p.d, pref, 1, &result, &found);
        CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
        p.lt = st == CUBLAS_STATUS_SUCCESS && found > 0;
        if (p.lt) p.algo = result.algo;
        else matmul_report_fallback(key, st, found);
        it = matmul_ctx.plans->emplace(key, p).first;
    }
    MatmulPlan& p = it->second;
    if (p.lt) {
        CUBLAS_CHECK(cublasLtMatmul(matmul_ctx.handle, p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, d, p.d,
                                    &p.algo, matmul_ctx.workspace, MATMUL_WORKSPACE_BYTES, stream));
        return;
    }
    // Classic cuBLAS accumulates into D itself (C == D): bring C into D first. Only contiguous
    // C/D occur with C != D in this engine (the residual add), which the check below guards.
    if (beta != 0.0f && c != d) {
        if (ldd != N || (batch > 1 && stride_d != (long long)M * N)) {
            fprintf(stderr, "matmul error %s:%d: C != D needs a contiguous D on the cuBLAS fallback path\n", __FILE__, __LINE__);
            exit(1);
        }
        CUDA_CHECK(cudaMemcpyAsync(d, c, (size_t)M * N * batch * d_bytes, cudaMemcpyDeviceToDevice, stream));
    }
    CUBLAS_CHECK(cublasSetStream(matmul_ctx.blas, stream));
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(matmul_ctx.blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha,
                                            b, CUDA_R_16BF, ldb, stride_b, a, CUDA_R_16BF, lda, stride_a, &beta,
                                            d, d_type, ldd, stride_d, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// out (N, OC) bf16 = inp (N, C) · weight (OC, C)ᵀ
static inline void matmul_forward(bf16* out,           // (N, OC)
                                  const bf16* inp,     // (N, C)
                                  const bf16* weight,  // (OC, C)
                                  int N, int C, int OC, cudaStream_t stream) {
    matmul_cublaslt(out, CUDA_R_16BF, NULL, inp, weight, N, OC, C, false, true, C, C, OC, 1.0f, 0.0f,
                    1, 0, 0, 0, stream);
}

// out (N, OC) fp32 = residual (N, OC) + inp · weightᵀ, or inp · weightᵀ when residual is NULL.
// out may equal residual.
static inline void matmul_forward_fp32(float* out,            // (N, OC)
                                       const float* residual, // (N, OC) or NULL
                                       const bf16* inp,       // (N, C)
                                       const bf16* weight,    // (OC, C)
                                       int N, int C, int OC, cudaStream_t stream) {
    matmul_cublaslt(out, CUDA_R_32F, residual, inp, weight, N, OC, C, false, true, C, C, OC, 1.0f,
                    residual != NULL ? 1.0f : 0.0f, 1, 0, 0, 0, stream);
}

// dinp (N, C) = dout · weight (written; skipped when NULL); dweight (OC, C) += doutᵀ · inp (fp32).
static inline void matmul_backward(bf16* dinp,          // (N, C) or NULL
                                   float* dweight,      // (OC, C) fp32
                                   const bf16* dout,    // (N, OC)
                                   const bf16* inp,     // (N, C)
                                   const bf16* weight,  // (OC, C)
                                   int N, int C, int OC, cudaStream_t stream) {
    if (dinp != NULL) {
        matmul_cublaslt(dinp, CUDA_R_16BF, NULL, dout, weight, N, C, OC, false, false, OC, C, C, 1.0f, 0.0f,
                        1, 0, 0, 0, stream);
    }
    matmul_cublaslt(dweight, CUDA_R_32F, dweight, dout, inp, OC, C, N, true, false, OC, C, C, 1.0f, 1.0f,
                    1, 0, 0, 0, stream);
}
