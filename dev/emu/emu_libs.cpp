// emu_libs.cpp — the libraries of the GeoFP8 and multi-GPU path on the CPU, for dev/emu: cuBLAS
// level 3 in fp32 / fp64 (column-major, through CBLAS or plain loops), cuSOLVER potrf / syevd
// (LAPACKE), warp reductions, a few runtime calls, and NCCL over MPI: each emulated GPU is one MPI
// rank. The NCCL sums combine the ranks' buffers in rank order and round to the wire type after
// every combine (bf16, E4M3 and E5M2 with satfinite), the model DESIGN §5.1 states for NCCL's own sums.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cusolverDn.h>
#include <nccl.h>
#include <mpi.h>
#include <lapacke.h>
#include <cblas.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <unistd.h>
#include <vector>
#include <map>
#include "../../llmc/fp8.h"

static void xdie(const char* m) { fprintf(stderr, "emu: %s\n", m); abort(); }

// ---- warp reductions (through the fibers' warp exchange) ---------------------------------------
void emu_warp_gather(const void* mine, void* all, size_t bytes);
// __reduce_{max,add}_sync over the whole warp: one exchange, then every lane folds the 32 values
// (max and the wrapping u32 sum do not depend on the order)
unsigned int emu_reduce_max_u32(unsigned int v) {
    unsigned int all[32];
    emu_warp_gather(&v, all, sizeof(v));
    for (int i = 0; i < 32; i++) v = v > all[i] ? v : all[i];
    return v;
}
unsigned int emu_reduce_add_u32(unsigned int v) {
    unsigned int all[32], sum = 0;
    emu_warp_gather(&v, all, sizeof(v));
    for (int i = 0; i < 32; i++) sum += all[i];
    return sum;
}

extern "C" {
// sm_90, or $EMU_SM (e.g. 80): the compute capability and the opt-in shared memory of a block
// (227 KB on sm_90, 163 KB on sm_80: the CUDA programming guide's table); 0 for anything else
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    const char* sm = getenv("EMU_SM");
    int cc = sm ? atoi(sm) : 90;
    if (a == cudaDevAttrMaxSharedMemoryPerBlockOptin) *v = cc >= 90 ? 227 * 1024 : cc >= 80 ? 163 * 1024 : 0;
    else *v = a == cudaDevAttrComputeCapabilityMajor ? cc / 10 : a == cudaDevAttrComputeCapabilityMinor ? cc % 10 : 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { if (d != 0) xdie("cudaSetDevice: only device 0"); return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
    for (size_t r = 0; r < height; r++) memcpy((char*)dst + r * dpitch, (const char*)src + r * spitch, width);
    return cudaSuccess;
}

// ---- cuBLAS column-major level 3 ---------------------------------------------------------------
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
}

// op(A) triangular (upper/lower stored), full dense copy of op(A) as n×n
template <typename T>
static std::vector<double> tri_dense(cublasFillMode_t up, cublasOperation_t op, cublasDiagType_t diag, int n, const T* A, int lda) {
    std::vector<double> M((size_t)n * n, 0.0);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            bool in = up == CUBLAS_FILL_MODE_UPPER ? i <= j : i >= j;
            double v = in ? (double)A[i + (size_t)j * lda] : 0.0;
            if (i == j && diag == CUBLAS_DIAG_UNIT) v = 1.0;
            if (op == CUBLAS_OP_N) M[i + (size_t)j * n] = v; else M[j + (size_t)i * n] = v;
        }
    return M;
}
// solve op(A) X = alpha B (left) or X op(A) = alpha B (right), B m×n in place
template <typename T>
static void trsm_t(cublasSideMode_t side, cublasFillMode_t up, cublasOperation_t op, cublasDiagType_t diag, int m, int n,
                   T alpha, const T* A, int lda, T* B, int ldb) {
    int na = side == CUBLAS_SIDE_LEFT ? m : n;
    std::vector<double> M = tri_dense(up, op, diag, na, A, lda);
    // is M upper or lower after op?
    bool upper = (up == CUBLAS_FILL_MODE_UPPER) == (op == CUBLAS_OP_N);
    if (side == CUBLAS_SIDE_LEFT) {
        for (int j = 0; j < n; j++) {
            std::vector<double> x(m);
            for (int i = 0; i < m; i++) x[i] = (double)alpha * B[i + (size_t)j * ldb];
            if (upper) for (int i = m - 1; i >= 0; i--) { double s = x[i]; for (int p = i + 1; p < m; p++) s -= M[i + (size_t)p * na] * x[p]; x[i] = s / M[i + (size_t)i * na]; }
            else for (int i = 0; i < m; i++) { double s = x[i]; for (int p = 0; p < i; p++) s -= M[i + (size_t)p * na] * x[p]; x[i] = s / M[i + (size_t)i * na]; }
            for (int i = 0; i < m; i++) B[i + (size_t)j * ldb] = (T)x[i];
        }
    } else {  // X M = alpha B  <=>  M^T X^T = alpha B^T; row i of X
        for (int i = 0; i < m; i++) {
            std::vector<double> x(n);
            for (int j = 0; j < n; j++) x[j] = (double)alpha * B[i + (size_t)j * ldb];
            // x M = b: for upper M solve columns left to right
            if (upper) for (int j = 0; j < n; j++) { double s = x[j]; for (int p = 0; p < j; p++) s -= x[p] * M[p + (size_t)j * na]; x[j] = s / M[j + (size_t)j * na]; }
            else for (int j = n - 1; j >= 0; j--) { double s = x[j]; for (int p = j + 1; p < n; p++) s -= x[p] * M[p + (size_t)j * na]; x[j] = s / M[j + (size_t)j * na]; }
            for (int j = 0; j < n; j++) B[i + (size_t)j * ldb] = (T)x[j];
        }
    }
}
template <typename T>
static void trmm_t(cublasSideMode_t side, cublasFillMode_t up, cublasOperation_t op, cublasDiagType_t diag, int m, int n,
                   T alpha, const T* A, int lda, const T* B, int ldb, T* C, int ldc) {
    int na = side == CUBLAS_SIDE_LEFT ? m : n;
    std::vector<double> M = tri_dense(up, op, diag, na, A, lda);
    std::vector<double> out((size_t)m * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            if (side == CUBLAS_SIDE_LEFT) for (int p = 0; p < m; p++) s += M[i + (size_t)p * na] * B[p + (size_t)j * ldb];
            else for (int p = 0; p < n; p++) s += B[i + (size_t)p * ldb] * M[p + (size_t)j * na];
            out[i + (size_t)j * m] = (double)alpha * s;
        }
    for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) C[i + (size_t)j * ldc] = (T)out[i + (size_t)j * m];
}
// C = alpha op(A) op(A)^T + beta C, only the uplo triangle; op N: A n×k
template <typename T>
static void syrk_t(cublasFillMode_t up, cublasOperation_t op, int n, int k, T alpha, const T* A, int lda, T beta, T* C, int ldc) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            bool in = up == CUBLAS_FILL_MODE_UPPER ? i <= j : i >= j;
            if (!in) continue;
            double s = 0;
            for (int p = 0; p < k; p++) {
                double a = op == CUBLAS_OP_N ? A[i + (size_t)p * lda] : A[p + (size_t)i * lda];
                double b = op == CUBLAS_OP_N ? A[j + (size_t)p * lda] : A[p + (size_t)j * lda];
                s += a * b;
            }
            T c = beta == (T)0 ? (T)0 : beta * C[i + (size_t)j * ldc];
            C[i + (size_t)j * ldc] = (T)(alpha * (T)s) + c;
        }
}

extern "C" {
cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* al,
                              const float* A, int lda, const float* B, int ldb, const float* be, float* C, int ldc) {
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, *al, A, lda, B, ldb, *be, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDgemm_v2(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* al,
                              const double* A, int lda, const double* B, int ldb, const double* be, double* C, int ldc) {
    cblas_dgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, *al, A, lda, B, ldb, *be, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasStrsm_v2(cublasHandle_t, cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t o, cublasDiagType_t d, int m, int n,
                              const float* al, const float* A, int lda, float* B, int ldb) {
    trsm_t<float>(s, u, o, d, m, n, *al, A, lda, B, ldb); return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDtrsm_v2(cublasHandle_t, cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t o, cublasDiagType_t d, int m, int n,
                              const double* al, const double* A, int lda, double* B, int ldb) {
    trsm_t<double>(s, u, o, d, m, n, *al, A, lda, B, ldb); return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasStrmm_v2(cublasHandle_t, cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t o, cublasDiagType_t d, int m, int n,
                              const float* al, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
    trmm_t<float>(s, u, o, d, m, n, *al, A, lda, B, ldb, C, ldc); return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSsyrk_v2(cublasHandle_t, cublasFillMode_t u, cublasOperation_t o, int n, int k, const float* al, const float* A, int lda,
                              const float* be, float* C, int ldc) {
    syrk_t<float>(u, o, n, k, *al, A, lda, *be, C, ldc); return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDsyrk_v2(cublasHandle_t, cublasFillMode_t u, cublasOperation_t o, int n, int k, const double* al, const double* A, int lda,
                              const double* be, double* C, int ldc) {
    syrk_t<double>(u, o, n, k, *al, A, lda, *be, C, ldc); return CUBLAS_STATUS_SUCCESS;
}

// ---- cuSOLVER ----------------------------------------------------------------------------------
cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t* h) { *h = (cusolverDnHandle_t)malloc(16); return CUSOLVER_STATUS_SUCCESS; }
cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t h) { free(h); return CUSOLVER_STATUS_SUCCESS; }
cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t, cudaStream_t) { return CUSOLVER_STATUS_SUCCESS; }
cusolverStatus_t cusolverDnDpotrf_bufferSize(cusolverDnHandle_t, cublasFillMode_t, int n, double*, int, int* lwork) { *lwork = n + 1; return CUSOLVER_STATUS_SUCCESS; }
cusolverStatus_t cusolverDnDpotrf(cusolverDnHandle_t, cublasFillMode_t u, int n, double* A, int lda, double* work, int lwork, int* info) {
    (void)work; (void)lwork;
    *info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, u == CUBLAS_FILL_MODE_UPPER ? 'U' : 'L', n, A, lda);
    return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnDsyevd_bufferSize(cusolverDnHandle_t, cusolverEigMode_t, cublasFillMode_t, int n, const double*, int, const double*, int* lwork) {
    *lwork = n + 1; return CUSOLVER_STATUS_SUCCESS;
}
cusolverStatus_t cusolverDnDsyevd(cusolverDnHandle_t, cusolverEigMode_t jobz, cublasFillMode_t u, int n, double* A, int lda, double* W,
                                  double* work, int lwork, int* info) {
    (void)work; (void)lwork;
    *info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, jobz == CUSOLVER_EIG_MODE_VECTOR ? 'V' : 'N', u == CUBLAS_FILL_MODE_UPPER ? 'U' : 'L', n, A, lda, W);
    return CUSOLVER_STATUS_SUCCESS;
}
}

// ---- NCCL over MPI -----------------------------------------------------------------------------
// A lost peer, for the engine's watch on ncclCommGetAsyncError (llmc/comm.cuh):
// EMU_NCCL_PEER_LOST="R:N" makes rank R's N-th collective (1-based; all-reduce, broadcast,
// all-gather, or a group of sends and receives) never return, as a GPU collective whose peer died
// never completes, and from then on ncclCommGetAsyncError reports ncclRemoteError there.
struct EmuComm { int rank, size; MPI_Comm mpi; long collectives; std::atomic<bool> lost{false}; };
static const char* EMU_PEER_LOST_TEXT = "emulated: a peer of this rank is gone (EMU_NCCL_PEER_LOST)";
static void emu_collective_begin(EmuComm* e) {
    e->collectives++;
    const char* v = getenv("EMU_NCCL_PEER_LOST");
    int rank = -1;
    long n = 0;
    if (!v || sscanf(v, "%d:%ld", &rank, &n) != 2 || rank != e->rank || e->collectives != n) return;
    e->lost = true;
    for (;;) sleep(1);  // ended by the engine's watch thread (or the test's timeout when it has none)
}
struct PendingP2P { bool send; const void* s; void* r; size_t bytes; int peer; };
static int g_group = 0;
static std::vector<PendingP2P> g_p2p;
static EmuComm* g_p2p_comm = NULL;

static size_t type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        default: return 8;
    }
}
static double load_t(const void* p, ncclDataType_t t, size_t i) {
    switch (t) {
        case ncclFloat32: return ((const float*)p)[i];
        case ncclFloat64: return ((const double*)p)[i];
        case ncclUint64: return (double)((const uint64_t*)p)[i];
        case ncclBfloat16: return fp8_bf16_decode(((const uint16_t*)p)[i]);
        case ncclFloat8e4m3: return fp8_e4m3_decode(((const uint8_t*)p)[i]);
        case ncclFloat8e5m2: return fp8_e5m2_decode(((const uint8_t*)p)[i]);
        default: xdie("nccl emu: type"); return 0;
    }
}
static void store_t(void* p, ncclDataType_t t, size_t i, double v) {
    switch (t) {
        case ncclFloat32: ((float*)p)[i] = (float)v; break;
        case ncclFloat64: ((double*)p)[i] = v; break;
        case ncclUint64: ((uint64_t*)p)[i] = (uint64_t)v; break;
        case ncclBfloat16: ((uint16_t*)p)[i] = fp8_bf16_encode((float)v); break;
        case ncclFloat8e4m3: ((uint8_t*)p)[i] = fp8_e4m3_encode((float)v); break;
        case ncclFloat8e5m2: ((uint8_t*)p)[i] = fp8_e5m2_encode((float)v); break;
        default: xdie("nccl emu: type");
    }
}

extern "C" {
const char* ncclGetErrorString(ncclResult_t r) { return r == ncclRemoteError ? "remote process exited or there was a network error" : "emulated nccl error"; }
ncclResult_t ncclGetVersion(int* v) { *v = NCCL_VERSION_CODE; return ncclSuccess; }
// A unique id names its creator (pid, time): ncclCommInitRank checks that every rank got rank 0's.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "emu:%ld:%ld", (long)getpid(), (long)time(NULL));
    return ncclSuccess;
}
// With MPI initialized (an MPI launch) the communicator is MPI_COMM_WORLD's ranks. Without it and
// n > 1 (the Slurm id-file launch, emulated under mpirun with the launcher's variables hidden in
// EMU_HIDDEN_ENV="NAME=VALUE ..." so that the trainer does not see an MPI launch), they are put
// back and MPI is initialized here, and finalized in ncclCommDestroy.
static bool g_owns_mpi = false;
ncclResult_t ncclCommInitRank(ncclComm_t* c, int n, ncclUniqueId id, int rank) {
    if (strncmp(id.internal, "emu:", 4) != 0) xdie("ncclCommInitRank: the id is not one ncclGetUniqueId made");
    int ini = 0; MPI_Initialized(&ini);
    if (!ini && n > 1) {
        const char* hidden = getenv("EMU_HIDDEN_ENV");
        if (!hidden) xdie("ncclCommInitRank: n > 1 without MPI (launch under mpirun; see EMU_HIDDEN_ENV)");
        std::string all = hidden;
        size_t pos = 0;
        while (pos < all.size()) {
            size_t end = all.find(' ', pos);
            if (end == std::string::npos) end = all.size();
            std::string kv = all.substr(pos, end - pos);
            size_t eq = kv.find('=');
            if (eq != std::string::npos) setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
            pos = end + 1;
        }
        MPI_Init(NULL, NULL);
        g_owns_mpi = true;
        ini = 1;
    }
    EmuComm* e = new EmuComm();
    e->rank = rank; e->size = n;
    if (ini) {
        int ws; MPI_Comm_size(MPI_COMM_WORLD, &ws);
        if (ws != n) xdie("ncclCommInitRank: size differs from MPI world");
        MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &e->mpi);
        ncclUniqueId root = id;
        MPI_Bcast(&root, (int)sizeof(root), MPI_BYTE, 0, e->mpi);
        if (memcmp(&root, &id, sizeof(id)) != 0) xdie("ncclCommInitRank: this rank got another id than rank 0's");
    } else {
        e->mpi = MPI_COMM_NULL;
    }
    *c = (ncclComm_t)e;
    return ncclSuccess;
}
ncclResult_t ncclCommInitAll(ncclComm_t* c, int n, const int*) {
    if (n != 1) xdie("ncclCommInitAll: only 1");
    EmuComm* e = new EmuComm(); e->rank = 0; e->size = 1; e->mpi = MPI_COMM_NULL;
    *c = (ncclComm_t)e; return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
// Called from the engine's watch thread while the main thread runs: reads the atomic flag only.
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* err) {
    *err = ((EmuComm*)c)->lost ? ncclRemoteError : ncclSuccess;
    return ncclSuccess;
}
const char* ncclGetLastError(ncclComm_t c) { return c && ((EmuComm*)c)->lost ? EMU_PEER_LOST_TEXT : ""; }
// The engine exits right after an abort; the communicator stays allocated because the main
// thread may still be inside a collective on it.
ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    EmuComm* e = (EmuComm*)c;
    if (e->mpi != MPI_COMM_NULL) MPI_Comm_free(&e->mpi);
    delete e;
    if (g_owns_mpi) { MPI_Finalize(); g_owns_mpi = false; }
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c, cudaStream_t) {
    EmuComm* e = (EmuComm*)c;
    size_t ts = type_size(t), bytes = count * ts;
    // inside a group: run at once (collectives of a group complete in call order on every rank);
    // mixing them with the group's point-to-point calls is not used by the engine
    if (g_group && !g_p2p.empty()) xdie("ncclAllReduce in a group with ncclSend/ncclRecv (not used by the engine)");
    emu_collective_begin(e);
    if (e->size == 1) { memmove(recv, send, bytes); return ncclSuccess; }
    std::vector<char> all(bytes * e->size);
    MPI_Allgather(send, (int)bytes, MPI_BYTE, all.data(), (int)bytes, MPI_BYTE, e->mpi);
    // ring-like: combine in rank order, rounding to the wire type at every combine
    for (size_t i = 0; i < count; i++) {
        double acc = load_t(all.data(), t, i);
        for (int r = 1; r < e->size; r++) {
            double v = load_t(all.data() + (size_t)r * bytes, t, i);
            double x;
            if (op == ncclSum) x = acc + v;
            else if (op == ncclMax) x = acc > v ? acc : (v != v ? v : (acc != acc ? acc : v));
            else { xdie("nccl emu: op"); x = 0; }
            if (t == ncclFloat32 || t == ncclBfloat16 || t == ncclFloat8e4m3 || t == ncclFloat8e5m2) x = (float)x;
            // round to the wire type
            char tmp[8]; store_t(tmp, t, 0, x); acc = load_t(tmp, t, 0);
        }
        store_t(recv, t, i, acc);
    }
    return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t) {
    EmuComm* e = (EmuComm*)c;
    size_t bytes = count * type_size(t);
    emu_collective_begin(e);
    if (send != recv && e->rank == root) memmove(recv, send, bytes);
    if (e->size > 1) MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, e->mpi);
    return ncclSuccess;
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t) {
    EmuComm* e = (EmuComm*)c;
    size_t bytes = count * type_size(t);
    emu_collective_begin(e);
    if (e->size == 1) { memmove(recv, send, bytes); return ncclSuccess; }
    std::vector<char> tmp(bytes);
    memcpy(tmp.data(), send, bytes);
    MPI_Allgather(tmp.data(), (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, e->mpi);
    return ncclSuccess;
}
ncclResult_t ncclGroupStart() { g_group++; return ncclSuccess; }
ncclResult_t ncclSend(const void* s, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t) {
    if (!g_group) xdie("ncclSend outside a group");
    g_p2p_comm = (EmuComm*)c;
    g_p2p.push_back({true, s, NULL, count * type_size(t), peer});
    return ncclSuccess;
}
ncclResult_t ncclRecv(void* r, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t) {
    if (!g_group) xdie("ncclRecv outside a group");
    g_p2p_comm = (EmuComm*)c;
    g_p2p.push_back({false, NULL, r, count * type_size(t), peer});
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
    if (--g_group > 0) return ncclSuccess;
    if (g_p2p.empty()) return ncclSuccess;
    EmuComm* e = g_p2p_comm;
    emu_collective_begin(e);
    std::vector<MPI_Request> req;
    std::vector<std::vector<char>> self_copies;
    // self send/recv pairs: copy directly
    for (auto& p : g_p2p) if (p.peer < 0 || p.peer >= e->size) xdie("nccl p2p: bad peer");
    for (auto& p : g_p2p) {
        if (e->size == 1 || p.peer == e->rank) continue;
        MPI_Request rq;
        if (p.send) MPI_Isend(p.s, (int)p.bytes, MPI_BYTE, p.peer, 7, e->mpi, &rq);
        else MPI_Irecv(p.r, (int)p.bytes, MPI_BYTE, p.peer, 7, e->mpi, &rq);
        req.push_back(rq);
    }
    const PendingP2P* self_send = NULL;
    for (auto& p : g_p2p) if (p.send && p.peer == e->rank) self_send = &p;
    for (auto& p : g_p2p) if (!p.send && p.peer == e->rank) {
        if (!self_send || self_send->bytes != p.bytes) xdie("nccl p2p: self recv without matching send");
        memmove(p.r, self_send->s, p.bytes);
    }
    if (!req.empty()) MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE);
    g_p2p.clear();
    return ncclSuccess;
}
}
