// lapacke.h (dev/cuda/blas_shim) — the LAPACKE calls the CPU references in llmc/*.h make
// (Cholesky and the symmetric eigensolver, in double), served by cuSOLVER, for CUDA builds on
// machines without a host LAPACK; see cblas.h beside this file for why and how it is used.
// Row-major in: a symmetric matrix's row-major memory is the same matrix column-major with the
// other triangle stored, so uplo flips; a Cholesky factor U (A = UᵀU, row-major upper) is
// column-major L = Uᵀ (A = L Lᵀ) in the same memory. Eigenvectors come back in cuSOLVER's
// columns, i.e. row-major rows, and are transposed into LAPACKE's row-major columns.
// Returns LAPACKE's info: 0, or the order of the leading minor that is not positive definite
// (potrf), or > 0 when the eigensolver did not converge (syevd).
#pragma once
#include <vector>
#include <cusolverDn.h>
#include "cblas.h"

typedef int lapack_int;
#define LAPACK_ROW_MAJOR 101
#define LAPACK_COL_MAJOR 102

static inline cusolverDnHandle_t lapack_shim_handle() {
    static cusolverDnHandle_t h = NULL;
    if (!h) {
        cusolverStatus_t st = cusolverDnCreate(&h);
        blas_shim_check(st == CUSOLVER_STATUS_SUCCESS, "cusolverDnCreate", (int)st);
    }
    return h;
}

static inline cublasFillMode_t lapack_shim_fill_flipped(char uplo) {
    return (uplo == 'U' || uplo == 'u') ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
}

static inline lapack_int LAPACKE_dpotrf(int layout, char uplo, lapack_int n, double* a, lapack_int lda) {
    blas_shim_check(layout == LAPACK_ROW_MAJOR, "LAPACKE_dpotrf with LAPACK_COL_MAJOR (only row-major is served)", layout);
    const size_t na = blas_shim_extent(n, n, lda);
    double* dA = blas_shim_upload(a, na);
    int lwork = 0, info = 0;
    cublasFillMode_t fill = lapack_shim_fill_flipped(uplo);
    cusolverStatus_t st = cusolverDnDpotrf_bufferSize(lapack_shim_handle(), fill, n, dA, lda, &lwork);
    blas_shim_check(st == CUSOLVER_STATUS_SUCCESS, "cusolverDnDpotrf_bufferSize", (int)st);
    std::vector<double> zeros((size_t)lwork + 1, 0.0);
    double* dwork = blas_shim_upload(zeros.data(), zeros.size());
    int* dinfo = blas_shim_upload(&info, 1);
    st = cusolverDnDpotrf(lapack_shim_handle(), fill, n, dA, lda, dwork, lwork, dinfo);
    blas_shim_check(st == CUSOLVER_STATUS_SUCCESS, "cusolverDnDpotrf", (int)st);
    blas_shim_download(&info, dinfo, 1);
    blas_shim_download(a, dA, na);
    blas_shim_free(dA), blas_shim_free(dwork), blas_shim_free(dinfo);
    return info;
}

static inline lapack_int LAPACKE_dsyevd(int layout, char jobz, char uplo, lapack_int n, double* a, lapack_int lda, double* w) {
    blas_shim_check(layout == LAPACK_ROW_MAJOR, "LAPACKE_dsyevd with LAPACK_COL_MAJOR (only row-major is served)", layout);
    const bool vectors = jobz == 'V' || jobz == 'v';
    const cusolverEigMode_t mode = vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
    const size_t na = blas_shim_extent(n, n, lda);
    double* dA = blas_shim_upload(a, na);
    std::vector<double> hw((size_t)n, 0.0);
    double* dw = blas_shim_upload(hw.data(), hw.size());
    int lwork = 0, info = 0;
    cublasFillMode_t fill = lapack_shim_fill_flipped(uplo);
    cusolverStatus_t st = cusolverDnDsyevd_bufferSize(lapack_shim_handle(), mode, fill, n, dA, lda, dw, &lwork);
    blas_shim_check(st == CUSOLVER_STATUS_SUCCESS, "cusolverDnDsyevd_bufferSize", (int)st);
    std::vector<double> zeros((size_t)lwork + 1, 0.0);
    double* dwork = blas_shim_upload(zeros.data(), zeros.size());
    int* dinfo = blas_shim_upload(&info, 1);
    st = cusolverDnDsyevd(lapack_shim_handle(), mode, fill, n, dA, lda, dw, dwork, lwork, dinfo);
    blas_shim_check(st == CUSOLVER_STATUS_SUCCESS, "cusolverDnDsyevd", (int)st);
    blas_shim_download(&info, dinfo, 1);
    blas_shim_download(w, dw, (size_t)n);
    if (vectors && info == 0) {
        std::vector<double> v(na);
        blas_shim_download(v.data(), dA, na);  // eigenvector j in row j (cuSOLVER's column j)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) a[(size_t)i * lda + j] = v[(size_t)j * lda + i];
    }
    blas_shim_free(dA), blas_shim_free(dw), blas_shim_free(dwork), blas_shim_free(dinfo);
    return info;
}
