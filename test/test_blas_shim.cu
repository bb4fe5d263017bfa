// test_blas_shim.cu — dev/cuda/blas_shim (the CBLAS / LAPACKE calls of the CPU references, served
// by cuBLAS and cuSOLVER in CUDA builds) against the operations' definitions, written out as
// plain double loops: every entry point llmc/ uses, every side / uplo / trans combination, with
// leading dimensions wider than the matrices (so a row-major / column-major or ld mix-up shows),
// on small random matrices.
// Tolerances: fp32 results 1e-5 relative to max |ref| (a few fp32 roundings over sums of at most
// 9 terms; measured worst 1.1e-7 under dev/emu, where OpenBLAS serves the emulated cuBLAS; not
// yet measured on a GPU; a layout mix-up gives O(1)); double results 1e-12 (measured worst
// 8.9e-16). Eigenpairs are checked by their residual, so any sign convention passes. Exits 77 after a SKIP line when there is no CUDA device.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include <cblas.h>    // dev/cuda/blas_shim/cblas.h: cuda.mk puts that directory first
#include <lapacke.h>
#include "../llmc/rand.h"
#include "test_util.h"

static const double TOL_FP32 = 1e-5;
static const double TOL_FP64 = 1e-12;

template <typename T>
static std::vector<T> random_matrix(int rows, int ld, uint64_t seed) {
    Rng r;
    rand_init(&r, seed);
    std::vector<T> m((size_t)rows * ld);
    for (T& x : m) x = (T)rand_normal(&r);
    return m;
}

// max |got - ref| / max |ref| over the (rows × cols) part of two row-major (ld) matrices
template <typename T>
static double rel_err(const std::vector<T>& got, const std::vector<double>& ref, int rows, int cols, int ld) {
    double num = 0.0, den = 0.0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            num = fmax(num, fabs((double)got[(size_t)i * ld + j] - ref[(size_t)i * ld + j]));
            den = fmax(den, fabs(ref[(size_t)i * ld + j]));
        }
    return den > 0.0 ? num / den : num;
}

// element (i, j) of op(A) for a row-major A with leading dimension ld
template <typename T>
static double at(const std::vector<T>& A, int ld, bool trans, int i, int j) {
    return trans ? (double)A[(size_t)j * ld + i] : (double)A[(size_t)i * ld + j];
}

template <typename T>
static void test_gemm(const char* tag, double tol) {
    const int M = 7, N = 5, K = 9;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 4;
            std::vector<T> A = random_matrix<T>(ta ? K : M, lda, 1 + ta), B = random_matrix<T>(tb ? N : K, ldb, 3 + tb);
            std::vector<T> C = random_matrix<T>(M, ldc, 5);
            const T alpha = (T)0.75, beta = (T)-0.5;
            std::vector<double> ref(C.begin(), C.end());
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0.0;
                    for (int k = 0; k < K; k++) s += at(A, lda, ta, i, k) * at(B, ldb, tb, k, j);
                    ref[(size_t)i * ldc + j] = alpha * s + beta * (double)C[(size_t)i * ldc + j];
                }
            if constexpr (sizeof(T) == 4)
                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A.data(), lda,
                            B.data(), ldb, beta, C.data(), ldc);
            else
                cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A.data(), lda,
                            B.data(), ldb, beta, C.data(), ldc);
            std::string name = std::string(tag) + "gemm_" + (ta ? "T" : "N") + (tb ? "T" : "N");
            test_bound(name.c_str(), rel_err(C, ref, M, N, ldc), tol);
        }
}

template <typename T>
static void test_syrk(const char* tag, double tol) {
    const int N = 6, K = 8;
    for (int trans = 0; trans < 2; trans++)
        for (int upper = 0; upper < 2; upper++) {
            const int lda = (trans ? N : K) + 3, ldc = N + 2;
            std::vector<T> A = random_matrix<T>(trans ? K : N, lda, 7 + trans), C = random_matrix<T>(N, ldc, 9);
            const T alpha = (T)1.25, beta = (T)0.5;
            std::vector<double> ref(C.begin(), C.end());  // the other triangle stays as it was
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) {
                    if (upper ? j < i : j > i) continue;
                    double s = 0.0;  // (A Aᵀ)(i, j) or (Aᵀ A)(i, j)
                    for (int k = 0; k < K; k++) s += at(A, lda, trans, i, k) * at(A, lda, trans, j, k);
                    ref[(size_t)i * ldc + j] = alpha * s + beta * (double)C[(size_t)i * ldc + j];
                }
            if constexpr (sizeof(T) == 4)
                cblas_ssyrk(CblasRowMajor, upper ? CblasUpper : CblasLower, trans ? CblasTrans : CblasNoTrans, N, K, alpha, A.data(), lda,
                            beta, C.data(), ldc);
            else
                cblas_dsyrk(CblasRowMajor, upper ? CblasUpper : CblasLower, trans ? CblasTrans : CblasNoTrans, N, K, alpha, A.data(), lda,
                            beta, C.data(), ldc);
            std::string name = std::string(tag) + "syrk_" + (trans ? "T" : "N") + (upper ? "U" : "L");
            test_bound(name.c_str(), rel_err(C, ref, N, N, ldc), tol);
        }
}

// A well-conditioned triangular matrix (n × n, ld): unit-ish diagonal, small off-diagonal part;
// the unused triangle holds garbage, which must never be read.
template <typename T>
static std::vector<T> triangular(int n, int ld, bool upper, uint64_t seed) {
    std::vector<T> A = random_matrix<T>(n, ld, seed);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            T& a = A[(size_t)i * ld + j];
            if (i == j) a = (T)(2.0 + 0.1 * i);
            else if (upper ? j > i : j < i) a = (T)(0.2 * (double)a);
            else a = (T)1e3;  // outside the stored triangle
        }
    return A;
}

// op(A)(i, j) of a triangular A, zero outside its triangle
template <typename T>
static double tri_at(const std::vector<T>& A, int ld, bool upper, bool trans, int i, int j) {
    int r = trans ? j : i, c = trans ? i : j;
    if (upper ? c < r : c > r) return 0.0;
    return (double)A[(size_t)r * ld + c];
}

// trsm checked by multiplying back: op(A) X = alpha B (Left) or X op(A) = alpha B (Right);
// trmm against its definition.
template <typename T>
static void test_triangular(const char* tag, double tol, bool do_trmm) {
    const int M = 5, N = 7, ldb = N + 3;
    for (int left = 0; left < 2; left++)
        for (int upper = 0; upper < 2; upper++)
            for (int trans = 0; trans < 2; trans++) {
                const int na = left ? M : N, lda = na + 2;
                std::vector<T> A = triangular<T>(na, lda, upper, 11 + left + 2 * upper), B = random_matrix<T>(M, ldb, 13), X = B;
                const T alpha = (T)1.5;
                auto op_at = [&](int i, int j) { return tri_at(A, lda, upper, trans, i, j); };
                std::vector<double> ref(B.size(), 0.0);
                std::string name = std::string(tag) + (do_trmm ? "trmm_" : "trsm_") + (left ? "L" : "R") + (upper ? "U" : "L") + (trans ? "T" : "N");
                if (do_trmm) {
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < N; j++) {
                            double s = 0.0;
                            if (left) for (int k = 0; k < M; k++) s += op_at(i, k) * (double)B[(size_t)k * ldb + j];
                            else for (int k = 0; k < N; k++) s += (double)B[(size_t)i * ldb + k] * op_at(k, j);
                            ref[(size_t)i * ldb + j] = alpha * s;
                        }
                    if constexpr (sizeof(T) == 4)
                        cblas_strmm(CblasRowMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower,
                                    trans ? CblasTrans : CblasNoTrans, CblasNonUnit, M, N, alpha, A.data(), lda, X.data(), ldb);
                    test_bound(name.c_str(), rel_err(X, ref, M, N, ldb), tol);
                    continue;
                }
                if constexpr (sizeof(T) == 4)
                    cblas_strsm(CblasRowMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower,
                                trans ? CblasTrans : CblasNoTrans, CblasNonUnit, M, N, alpha, A.data(), lda, X.data(), ldb);
                else
                    cblas_dtrsm(CblasRowMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower,
                                trans ? CblasTrans : CblasNoTrans, CblasNonUnit, M, N, alpha, A.data(), lda, X.data(), ldb);
                std::vector<double> back(B.size(), 0.0), want(B.size(), 0.0);  // op(A) X or X op(A), against alpha B
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double s = 0.0;
                        if (left) for (int k = 0; k < M; k++) s += op_at(i, k) * (double)X[(size_t)k * ldb + j];
                        else for (int k = 0; k < N; k++) s += (double)X[(size_t)i * ldb + k] * op_at(k, j);
                        back[(size_t)i * ldb + j] = s;
                        want[(size_t)i * ldb + j] = alpha * (double)B[(size_t)i * ldb + j];
                    }
                test_bound(name.c_str(), rel_err(back, want, M, N, ldb), tol);
            }
}

static void test_lapack() {
    const int n = 6, lda = n + 2;
    // a symmetric positive definite matrix S = G Gᵀ + n I, stored fully
    std::vector<double> G = random_matrix<double>(n, n, 17), S((size_t)n * lda, 0.0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = i == j ? n : 0.0;
            for (int k = 0; k < n; k++) s += G[(size_t)i * n + k] * G[(size_t)j * n + k];
            S[(size_t)i * lda + j] = s;
        }
    for (int upper = 0; upper < 2; upper++) {
        std::vector<double> F = S;
        int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, upper ? 'U' : 'L', n, F.data(), lda);
        // U: S = UᵀU with U upper; L: S = L Lᵀ with L lower. Rebuild S from the stored triangle.
        std::vector<double> back((size_t)n * lda, 0.0);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double s = 0.0;
                for (int k = 0; k < n; k++) {
                    double a = upper ? (k <= i ? F[(size_t)k * lda + i] : 0.0) : (k <= i ? F[(size_t)i * lda + k] : 0.0);
                    double b = upper ? (k <= j ? F[(size_t)k * lda + j] : 0.0) : (k <= j ? F[(size_t)j * lda + k] : 0.0);
                    s += a * b;
                }
                back[(size_t)i * lda + j] = s;
            }
        test_check(upper ? "blas_shim.dpotrf_U_info" : "blas_shim.dpotrf_L_info", info == 0, "info %d", info);
        std::vector<double> Sd(S.begin(), S.end());
        test_bound(upper ? "blas_shim.dpotrf_U" : "blas_shim.dpotrf_L", rel_err(back, Sd, n, n, lda), TOL_FP64, "max |factor product - S| / max |S|");
    }
    // not positive definite: info = order of the failing leading minor (here 1, a negative corner)
    std::vector<double> bad = S;
    bad[0] = -1.0;
    int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', n, bad.data(), lda);
    test_check("blas_shim.dpotrf_not_positive_definite_info", info == 1, "info %d (expected 1)", info);
    for (int upper = 0; upper < 2; upper++) {
        std::vector<double> V = S, w(n);
        // only the uplo triangle may be read: poison the other
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++)
                if (upper ? j < i : j > i) V[(size_t)i * lda + j] = 1e6;
        info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', upper ? 'U' : 'L', n, V.data(), lda, w.data());
        // S v_j = w_j v_j with v_j column j of the row-major V, unit norm, ascending w
        double worst = 0.0, norm_err = 0.0;
        bool ascending = true;
        for (int j = 0; j < n; j++) {
            double nrm = 0.0;
            for (int i = 0; i < n; i++) {
                double s = 0.0;
                for (int k = 0; k < n; k++) s += S[(size_t)i * lda + k] * V[(size_t)k * lda + j];
                worst = fmax(worst, fabs(s - w[j] * V[(size_t)i * lda + j]));
                nrm += V[(size_t)i * lda + j] * V[(size_t)i * lda + j];
            }
            norm_err = fmax(norm_err, fabs(nrm - 1.0));
            if (j > 0 && w[j] < w[j - 1]) ascending = false;
        }
        std::string tag = upper ? "blas_shim.dsyevd_U" : "blas_shim.dsyevd_L";
        test_check((tag + "_info_ascending").c_str(), info == 0 && ascending, "info %d, ascending %d", info, (int)ascending);
        test_bound((tag + "_residual").c_str(), worst / w[n - 1], TOL_FP64, "max |S v - w v| / w_max");
        test_bound((tag + "_unit_vectors").c_str(), norm_err, TOL_FP64, "max |‖v‖² - 1|");
    }
}

int main() {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        test_skip("blas_shim", "no CUDA device");
        return 77;
    }
    test_gemm<float>("blas_shim.s", TOL_FP32);
    test_gemm<double>("blas_shim.d", TOL_FP64);
    test_syrk<float>("blas_shim.s", TOL_FP32);
    test_syrk<double>("blas_shim.d", TOL_FP64);
    test_triangular<float>("blas_shim.s", TOL_FP32, false);
    test_triangular<double>("blas_shim.d", TOL_FP64, false);
    test_triangular<float>("blas_shim.s", TOL_FP32, true);
    test_lapack();
    return test_exit_code();
}
