// cblas.h (dev/cuda/blas_shim) — the CBLAS calls the CPU references in llmc/*.h make, served by
// cuBLAS in plain fp32 / fp64, for CUDA builds on machines without a host BLAS (a bare CUDA image).
// cuda.mk puts this directory first on the include path of every CUDA program, so
// llmc/matmul.h, llmc/muon.h and llmc/geofp8.h compile unchanged and their reference results
// come from cuBLAS's fp32 SGEMM family, a different code path from the bf16 cuBLASLt GEMMs and the
// hand-written kernels under test. The engine itself calls none of these; only the checks do.
//
// Row-major in, column-major out: a row-major (rows × cols, ld) matrix is the column-major
// (cols × rows, ld) matrix of the same memory, so each call becomes the transposed problem with
// the standard CBLAS mapping (gemm: swap A and B; syrk: flip uplo and trans; trsm / trmm: flip
// side and uplo, swap m and n). Each call copies its operands to the device and back,
// synchronously on the default stream: for references, not for speed. Only CblasRowMajor, the
// only order llmc/ uses; anything else stops with a message.
// Math mode CUBLAS_PEDANTIC_MATH: no TF32 or other reduced-precision shortcuts.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <cublas_v2.h>

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
enum CBLAS_UPLO { CblasUpper = 121, CblasLower = 122 };
enum CBLAS_DIAG { CblasNonUnit = 131, CblasUnit = 132 };
enum CBLAS_SIDE { CblasLeft = 141, CblasRight = 142 };

static inline void blas_shim_check(bool ok, const char* what, int code) {
    if (!ok) {
        fprintf(stderr, "blas_shim: %s failed (status %d)\n", what, code);
        exit(1);
    }
}

static inline cublasHandle_t blas_shim_handle() {
    static cublasHandle_t h = NULL;
    if (!h) {
        cublasStatus_t st = cublasCreate(&h);
        blas_shim_check(st == CUBLAS_STATUS_SUCCESS, "cublasCreate", (int)st);
        st = cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
        blas_shim_check(st == CUBLAS_STATUS_SUCCESS, "cublasSetMathMode", (int)st);
    }
    return h;
}

static inline void blas_shim_row_major(enum CBLAS_ORDER order) {
    blas_shim_check(order == CblasRowMajor, "CBLAS call with CblasColMajor (only CblasRowMajor is served)", (int)order);
}

// Elements a row-major (rows × cols, ld) matrix spans in memory.
static inline size_t blas_shim_extent(int rows, int cols, int ld) {
    return rows > 0 && cols > 0 ? (size_t)(rows - 1) * (size_t)ld + (size_t)cols : 0;
}

// A device copy of n elements of a host array (NULL for n == 0); blas_shim_free frees it.
template <typename T>
static inline T* blas_shim_upload(const T* host, size_t n) {
    if (n == 0) return NULL;
    T* dev = NULL;
    cudaError_t err = cudaMalloc(&dev, n * sizeof(T));
    blas_shim_check(err == cudaSuccess, "cudaMalloc", (int)err);
    err = cudaMemcpy(dev, host, n * sizeof(T), cudaMemcpyHostToDevice);
    blas_shim_check(err == cudaSuccess, "cudaMemcpy to device", (int)err);
    return dev;
}

template <typename T>
static inline void blas_shim_download(T* host, const T* dev, size_t n) {
    if (n == 0) return;
    cudaError_t err = cudaMemcpy(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost);
    blas_shim_check(err == cudaSuccess, "cudaMemcpy to host", (int)err);
}

static inline void blas_shim_free(void* dev) {
    if (dev) cudaFree(dev);
}

static inline cublasOperation_t blas_shim_op(enum CBLAS_TRANSPOSE t) { return t == CblasNoTrans ? CUBLAS_OP_N : CUBLAS_OP_T; }
static inline cublasOperation_t blas_shim_op_flipped(enum CBLAS_TRANSPOSE t) { return t == CblasNoTrans ? CUBLAS_OP_T : CUBLAS_OP_N; }
static inline cublasFillMode_t blas_shim_fill_flipped(enum CBLAS_UPLO u) { return u == CblasUpper ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER; }
static inline cublasSideMode_t blas_shim_side_flipped(enum CBLAS_SIDE s) { return s == CblasLeft ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT; }
static inline cublasDiagType_t blas_shim_diag(enum CBLAS_DIAG d) { return d == CblasUnit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT; }

// Typed entry points of cuBLAS, so the wrappers below are written once for float and double.
static inline cublasStatus_t blas_shim_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* al,
                                            const float* A, int lda, const float* B, int ldb, const float* be, float* C, int ldc) {
    return cublasSgemm(blas_shim_handle(), ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc);
}
static inline cublasStatus_t blas_shim_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* al,
                                            const double* A, int lda, const double* B, int ldb, const double* be, double* C, int ldc) {
    return cublasDgemm(blas_shim_handle(), ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc);
}
static inline cublasStatus_t blas_shim_syrk(cublasFillMode_t u, cublasOperation_t t, int n, int k, const float* al, const float* A,
                                            int lda, const float* be, float* C, int ldc) {
    return cublasSsyrk(blas_shim_handle(), u, t, n, k, al, A, lda, be, C, ldc);
}
static inline cublasStatus_t blas_shim_syrk(cublasFillMode_t u, cublasOperation_t t, int n, int k, const double* al, const double* A,
                                            int lda, const double* be, double* C, int ldc) {
    return cublasDsyrk(blas_shim_handle(), u, t, n, k, al, A, lda, be, C, ldc);
}
static inline cublasStatus_t blas_shim_trsm(cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t t, cublasDiagType_t d, int m,
                                            int n, const float* al, const float* A, int lda, float* B, int ldb) {
    return cublasStrsm(blas_shim_handle(), s, u, t, d, m, n, al, A, lda, B, ldb);
}
static inline cublasStatus_t blas_shim_trsm(cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t t, cublasDiagType_t d, int m,
                                            int n, const double* al, const double* A, int lda, double* B, int ldb) {
    return cublasDtrsm(blas_shim_handle(), s, u, t, d, m, n, al, A, lda, B, ldb);
}

// C (M × N) = alpha op(A) op(B) + beta C, row-major: column-major Cᵀ = op(B)ᵀ op(A)ᵀ.
template <typename T>
static inline void blas_shim_gemm_rm(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K, T alpha, const T* A,
                                     int lda, const T* B, int ldb, T beta, T* C, int ldc) {
    const size_t na = ta == CblasNoTrans ? blas_shim_extent(M, K, lda) : blas_shim_extent(K, M, lda);
    const size_t nb = tb == CblasNoTrans ? blas_shim_extent(K, N, ldb) : blas_shim_extent(N, K, ldb);
    const size_t nc = blas_shim_extent(M, N, ldc);
    T *dA = blas_shim_upload(A, na), *dB = blas_shim_upload(B, nb), *dC = blas_shim_upload(C, nc);
    cublasStatus_t st = blas_shim_gemm(blas_shim_op(tb), blas_shim_op(ta), N, M, K, &alpha, dB, ldb, dA, lda, &beta, dC, ldc);
    blas_shim_check(st == CUBLAS_STATUS_SUCCESS, "cublas gemm", (int)st);
    blas_shim_download(C, dC, nc);
    blas_shim_free(dA), blas_shim_free(dB), blas_shim_free(dC);
}

// C (N × N, the uplo triangle) = alpha A Aᵀ + beta C (NoTrans, A N × K) or alpha Aᵀ A (Trans, A K × N).
template <typename T>
static inline void blas_shim_syrk_rm(enum CBLAS_UPLO uplo, enum CBLAS_TRANSPOSE trans, int N, int K, T alpha, const T* A, int lda,
                                     T beta, T* C, int ldc) {
    const size_t na = trans == CblasNoTrans ? blas_shim_extent(N, K, lda) : blas_shim_extent(K, N, lda);
    const size_t nc = blas_shim_extent(N, N, ldc);
    T *dA = blas_shim_upload(A, na), *dC = blas_shim_upload(C, nc);
    cublasStatus_t st = blas_shim_syrk(blas_shim_fill_flipped(uplo), blas_shim_op_flipped(trans), N, K, &alpha, dA, lda, &beta, dC, ldc);
    blas_shim_check(st == CUBLAS_STATUS_SUCCESS, "cublas syrk", (int)st);
    blas_shim_download(C, dC, nc);
    blas_shim_free(dA), blas_shim_free(dC);
}

// B (M × N) = alpha op(A)⁻¹ B (Left) or alpha B op(A)⁻¹ (Right), A triangular.
template <typename T>
static inline void blas_shim_trsm_rm(enum CBLAS_SIDE side, enum CBLAS_UPLO uplo, enum CBLAS_TRANSPOSE trans, enum CBLAS_DIAG diag,
                                     int M, int N, T alpha, const T* A, int lda, T* B, int ldb) {
    const int na_dim = side == CblasLeft ? M : N;
    const size_t na = blas_shim_extent(na_dim, na_dim, lda), nb = blas_shim_extent(M, N, ldb);
    T *dA = blas_shim_upload(A, na), *dB = blas_shim_upload(B, nb);
    cublasStatus_t st = blas_shim_trsm(blas_shim_side_flipped(side), blas_shim_fill_flipped(uplo), blas_shim_op(trans),
                                       blas_shim_diag(diag), N, M, &alpha, dA, lda, dB, ldb);
    blas_shim_check(st == CUBLAS_STATUS_SUCCESS, "cublas trsm", (int)st);
    blas_shim_download(B, dB, nb);
    blas_shim_free(dA), blas_shim_free(dB);
}

// B (M × N) = alpha op(A) B (Left) or alpha B op(A) (Right), A triangular (cuBLAS's out-of-place
// trmm, written into a second buffer).
static inline void cblas_strmm(enum CBLAS_ORDER order, enum CBLAS_SIDE side, enum CBLAS_UPLO uplo, enum CBLAS_TRANSPOSE trans,
                               enum CBLAS_DIAG diag, int M, int N, float alpha, const float* A, int lda, float* B, int ldb) {
    blas_shim_row_major(order);
    const int na_dim = side == CblasLeft ? M : N;
    const size_t na = blas_shim_extent(na_dim, na_dim, lda), nb = blas_shim_extent(M, N, ldb);
    float *dA = blas_shim_upload(A, na), *dB = blas_shim_upload(B, nb), *dC = blas_shim_upload(B, nb);
    cublasStatus_t st = cublasStrmm(blas_shim_handle(), blas_shim_side_flipped(side), blas_shim_fill_flipped(uplo), blas_shim_op(trans),
                                    blas_shim_diag(diag), N, M, &alpha, dA, lda, dB, ldb, dC, ldb);
    blas_shim_check(st == CUBLAS_STATUS_SUCCESS, "cublasStrmm", (int)st);
    blas_shim_download(B, dC, nb);
    blas_shim_free(dA), blas_shim_free(dB), blas_shim_free(dC);
}

static inline void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                               float alpha, const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    blas_shim_row_major(order);
    blas_shim_gemm_rm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static inline void cblas_dgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                               double alpha, const double* A, int lda, const double* B, int ldb, double beta, double* C, int ldc) {
    blas_shim_row_major(order);
    blas_shim_gemm_rm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
static inline void cblas_ssyrk(enum CBLAS_ORDER order, enum CBLAS_UPLO uplo, enum CBLAS_TRANSPOSE trans, int N, int K, float alpha,
                               const float* A, int lda, float beta, float* C, int ldc) {
    blas_shim_row_major(order);
    blas_shim_syrk_rm(uplo, trans, N, K, alpha, A, lda, beta, C, ldc);
}
static inline void cblas_dsyrk(enum CBLAS_ORDER order, enum CBLAS_UPLO uplo, enum CBLAS_TRANSPOSE trans, int N, int K, double alpha,
                               const double* A, int lda, double beta, double* C, int ldc) {
    blas_shim_row_major(order);
    blas_shim_syrk_rm(uplo, trans, N, K, alpha, A, lda, beta, C, ldc);
}
static inline void cblas_strsm(enum CBLAS_ORDER order, enum CBLAS_SIDE side, enum CBLAS_UPLO uplo, enum CBLAS_TRANSPOSE trans,
                               enum CBLAS_DIAG diag, int M, int N, float alpha, const float* A, int lda, float* B, int ldb) {
    blas_shim_row_major(order);
    blas_shim_trsm_rm(side, uplo, trans, diag, M, N, alpha, A, lda, B, ldb);
}
static inline void cblas_dtrsm(enum CBLAS_ORDER order, enum CBLAS_SIDE side, enum CBLAS_UPLO uplo, enum CBLAS_TRANSPOSE trans,
                               enum CBLAS_DIAG diag, int M, int N, double alpha, const double* A, int lda, double* B, int ldb) {
    blas_shim_row_major(order);
    blas_shim_trsm_rm(side, uplo, trans, diag, M, N, alpha, A, lda, B, ldb);
}
