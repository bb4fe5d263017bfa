// blas_select.h — train_llama_cpu on the fastest OpenBLAS kernels this CPU supports.
//
// Why: a DYNAMIC_ARCH OpenBLAS picks its kernel set once, in a constructor that runs when the
// library is loaded (gotoblas_init, before main), from the CPU model it knows. An OpenBLAS older
// than the CPU does not know the model and falls back to a generic core: Debian's 0.3.21 names
// an Intel Xeon of family 6, model 207 (AVX-512) "Prescott" and runs SSE3 kernels, 4.4x slower
// at d12 than its SkylakeX kernels on the same CPU (and the fp32 GEMM rate depends on the set: on
// 2 cores of an AVX-512 AMD EPYC, 2048^3 ran at 392 GFLOP/s with Cooperlake's and 205 with Haswell's). The choice cannot change once the library is
// loaded, so blas_select_early() (first thing in main, before MPI_Init and before any BLAS call)
// restarts the program once, with the same pid, arguments and environment, plus
// OPENBLAS_CORETYPE:
//   OpenBLAS named a generic core (Katmai, Coppermine, Northwood, Prescott, Banias, Core2, Penryn,
//   Dunnington, Nehalem, Atom, Sandybridge, Generic) and the CPU (and its OS) supports
//     AVX-512 F, BW, VL, DQ, CD  -> SkylakeX
//     AVX2 and FMA               -> Haswell
//   anything else                -> OpenBLAS's own choice, untouched.
// The restarted program checks the chosen kernels with a short GEMM and SYRK self-check against
// a plain loop in double (blas_select_self_check); on a mismatch it prints one warning and
// restarts once more on OpenBLAS's own choice. It never overrides an OPENBLAS_CORETYPE the user
// set (some environments set it on purpose), does nothing for an OpenBLAS built for one core,
// and is off with --blas-auto 0 or TRAIN_LLAMA_BLAS_AUTO=0 (test/run_tests.sh sets the latter:
// the tests run on the environment's kernels). The start-up table's BLAS row says which kernels
// run and why (blas_select_row). The decision depends only on the OpenBLAS build, the CPU and the
// environment; blas_select_agree() then checks that every rank of a job runs the same kernels.
//
// The program's state travels across the restart in TRAIN_LLAMA_BLAS_STATE (removed from the
// environment once read). Test hook: TRAIN_LLAMA_BLAS_TEST=<core>[,mismatch] makes the first
// start behave as if OpenBLAS had named <core> (by forcing it), and ",mismatch" makes the
// self-check fail; test/test_blas_select.sh drives every path through it.
#pragma once
#include <cblas.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>

extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

typedef struct {
    char row[256];  // the start-up table's BLAS row
} BlasSelect;
static BlasSelect g_blas_select = {""};

// The kernel set this CPU runs fastest, or NULL when it has neither AVX-512 nor AVX2 + FMA.
// __builtin_cpu_supports also checks that the OS saves the wider registers (XGETBV).
static inline const char* blas_select_best_core(const char** why) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd")) {
        *why = "AVX-512";
        return "SkylakeX";
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *why = "AVX2 and FMA";
        return "Haswell";
    }
#endif
    *why = "neither AVX-512 nor AVX2 and FMA";
    return NULL;
}

// OpenBLAS's names of the cores older than AVX2 (its x86 fallbacks for a CPU it does not know).
static inline bool blas_select_is_generic(const char* core) {
    static const char* generic[] = {"Katmai", "Coppermine", "Northwood", "Prescott", "Banias", "Core2", "Penryn",
                                    "Dunnington", "Nehalem", "Atom", "Sandybridge", "Generic", "generic", "Unknown"};
    for (const char* g : generic)
        if (strcasecmp(core, g) == 0) return true;
    return false;
}

// Sum of |a_ik b_kj| products, for a rounding bound; out[i] of the product in double.
static inline bool blas_select_close(double ref, double bound, float got) {
    // fp32 accumulation of K terms: |error| <= about K * 2^-24 * sum|a b|; 1e-5 leaves room for
    // any order of summation and catches a wrong kernel (errors of the order of sum|a b|)
    return std::isfinite(got) && fabs((double)got - ref) <= 1e-5 * bound + 1e-30;
}

// The chosen kernels against a plain loop: sgemm in the two layouts matmul.h uses (A·Bᵀ and
// Aᵀ·B) and ssyrk as muon.h uses it, at sizes off the kernels' block multiples. A few ms.
static inline bool blas_select_self_check(void) {
    const int M = 67, N = 45, K = 131;
    std::vector<float> a((size_t)M * K), b((size_t)N * K), c((size_t)M * N), at((size_t)K * M), s((size_t)M * M, 0.0f);
    uint32_t x = 12345u;
    auto next = [&x]() { x = x * 1664525u + 1013904223u; return (float)((x >> 8) & 0xffff) / 32768.0f - 1.0f; };
    for (auto& v : a) v = next();
    for (auto& v : b) v = next();
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) at[(size_t)k * M + i] = a[(size_t)i * K + k];
    const char* test = getenv("TRAIN_LLAMA_BLAS_TEST");
    bool force_mismatch = test && strstr(test, ",mismatch");
    for (int layout = 0; layout < 3; layout++) {
        if (layout == 0)  // c = a · bᵀ
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
        else if (layout == 1)  // c = (aᵀ)ᵀ · bᵀ, the transposed-A path
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, M, N, K, 1.0f, at.data(), M, b.data(), K, 0.0f, c.data(), N);
        else  // s = a · aᵀ (upper triangle)
            cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, M, K, 1.0f, a.data(), K, 0.0f, s.data(), M);
        int cols = layout == 2 ? M : N;
        const float* bm = layout == 2 ? a.data() : b.data();
        for (int i = 0; i < M; i++)
            for (int j = layout == 2 ? i : 0; j < cols; j++) {
                double ref = 0.0, bound = 0.0;
                for (int k = 0; k < K; k++) {
                    double p = (double)a[(size_t)i * K + k] * bm[(size_t)j * K + k];
                    ref += p;
                    bound += fabs(p);
                }
                float got = layout == 2 ? s[(size_t)i * M + j] : c[(size_t)i * N + j];
                if (force_mismatch) got += 1.0f;
                if (!blas_select_close(ref, bound, got)) return false;
            }
    }
    return true;
}

// This process's rank under mpirun or srun, before MPI_Init (0 when not launched by either).
static inline int blas_select_launch_rank(void) {
    const char* vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    for (const char* v : vars)
        if (getenv(v)) return atoi(getenv(v));
    return 0;
}

// Restarts this program with the environment as it now is; returns only when that fails.
static inline void blas_select_restart(char** argv, const char* state) {
    setenv("TRAIN_LLAMA_BLAS_STATE", state, 1);
    fflush(stdout);
    fflush(stderr);
    execv("/proc/self/exe", argv);
    unsetenv("TRAIN_LLAMA_BLAS_STATE");  // no /proc: stay on what runs
}

// --blas-auto as given on the command line (the flag table validates it later): 1, 0, or -1 if
// absent. Read here because the choice is made before the flags are parsed.
static inline int blas_select_flag(int argc, char** argv) {
    int v = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--blas-auto") == 0 && i + 1 < argc) v = strcmp(argv[i + 1], "0") == 0 ? 0 : 1;
        if (strncmp(argv[i], "--blas-auto=", 12) == 0) v = strcmp(argv[i] + 12, "0") == 0 ? 0 : 1;
    }
    return v;
}

// First thing in main. May replace the process (execv) once or twice, each time before any BLAS
// call and before MPI_Init; fills g_blas_select.row.
static inline void blas_select_early(int argc, char** argv) {
    char* row = g_blas_select.row;
    const size_t n = sizeof(g_blas_select.row);
    const char* now = openblas_get_corename();
    const char* state_env = getenv("TRAIN_LLAMA_BLAS_STATE");
    std::string state = state_env ? state_env : "";
    unsetenv("TRAIN_LLAMA_BLAS_STATE");
    for (int i = 1; i < argc; i++)  // --help and --version need no kernels
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") || !strcmp(argv[i], "--version")) state = "skip";
    if (state == "skip") {
        snprintf(row, n, "OpenBLAS, %s kernels", now);
        return;
    }
    // later starts: "pretend:<core>" (the test hook's first restart), "chosen:<own>:<target>:<why>",
    // "failed:<own>:<target>"
    std::string own;
    if (state.compare(0, 8, "pretend:") == 0) {
        own = now;
    } else if (state.compare(0, 7, "chosen:") == 0) {
        size_t a = state.find(':', 7), b = state.find(':', a + 1);
        std::string own_core = state.substr(7, a - 7), target = state.substr(a + 1, b - a - 1), why = state.substr(b + 1);
        bool pretended = getenv("TRAIN_LLAMA_BLAS_TEST") != NULL;
        if (target == now && blas_select_self_check()) {
            snprintf(row, n, "OpenBLAS, %s kernels (chosen for this CPU's %s: OpenBLAS named it %s; --blas-auto 0 keeps that)",
                     now, why.c_str(), own_core.c_str());
            return;
        }
        if (blas_select_launch_rank() == 0)
            fprintf(stderr, "warning: OpenBLAS's %s kernels %s; running on its own choice, %s (--blas-auto)\n", target.c_str(),
                    target == now ? "failed the start-up GEMM check against a plain loop" : ("were not loaded (it ran " + std::string(now) + ")").c_str(),
                    own_core.c_str());
        if (pretended) setenv("OPENBLAS_CORETYPE", own_core.c_str(), 1);
        else unsetenv("OPENBLAS_CORETYPE");
        blas_select_restart(argv, ("failed:" + own_core + ":" + target).c_str());
        snprintf(row, n, "OpenBLAS, %s kernels (%s failed the start-up check; restart impossible)", now, target.c_str());
        return;
    } else if (state.compare(0, 7, "failed:") == 0) {
        size_t a = state.find(':', 7);
        snprintf(row, n, "OpenBLAS, %s kernels (OpenBLAS's own choice: its %s kernels failed the start-up check)", now,
                 state.substr(a + 1).c_str());
        return;
    } else {  // the first start
        const char* env_off = getenv("TRAIN_LLAMA_BLAS_AUTO");
        int flag = blas_select_flag(argc, argv);
        const char* forced = getenv("OPENBLAS_CORETYPE");
        const char* test = getenv("TRAIN_LLAMA_BLAS_TEST");
        if (flag == 0 || (flag == -1 && env_off && strcmp(env_off, "0") == 0)) {
            snprintf(row, n, "OpenBLAS, %s kernels (%s%s; no choice with %s)", now, forced ? "OPENBLAS_CORETYPE=" : "OpenBLAS's own choice",
                     forced ? forced : "", flag == 0 ? "--blas-auto 0" : "TRAIN_LLAMA_BLAS_AUTO=0");
            return;
        }
        if (forced && !test) {
            snprintf(row, n, "OpenBLAS, %s kernels (OPENBLAS_CORETYPE=%s, as set)", now, forced);
            return;
        }
        if (!strstr(openblas_get_config(), "DYNAMIC_ARCH")) {
            snprintf(row, n, "OpenBLAS, %s kernels (built for this one core)", now);
            return;
        }
        if (test) {  // the hook: restart as if OpenBLAS had named this core
            std::string core = std::string(test).substr(0, std::string(test).find(','));
            setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
            blas_select_restart(argv, ("pretend:" + core).c_str());
        }
        own = now;
    }
    const char* why = NULL;
    const char* best = blas_select_best_core(&why);
    if (!blas_select_is_generic(own.c_str())) {
        snprintf(row, n, "OpenBLAS, %s kernels (OpenBLAS's own choice for this CPU)", now);
        return;
    }
    if (best == NULL) {
        snprintf(row, n, "OpenBLAS, %s kernels (OpenBLAS's own choice; the CPU has %s)", now, why);
        return;
    }
    setenv("OPENBLAS_CORETYPE", best, 1);
    blas_select_restart(argv, ("chosen:" + own + ":" + best + ":" + why).c_str());
    snprintf(row, n, "OpenBLAS, %s kernels (could not restart on %s: no /proc/self/exe)", now, best);
}

// After MPI_Init (RunRanks, llmc/run.h): every rank must run rank 0's kernels (others round
// differently in the last bits, and the ranks' copies of the parameters would drift apart).
static inline void blas_select_agree(RunRanks* r) {
    if (r->world_size == 1) return;
    std::string mine = openblas_get_corename();
    std::string ref = r->broadcast(r->ctx, mine), problem;
    if (ref != mine)
        problem = "rank " + std::to_string(r->rank) + " runs OpenBLAS's " + mine + " kernels, rank 0 its " + ref +
                  " kernels; every rank must run the same (set OPENBLAS_CORETYPE=" + ref + " for the whole job)";
    run_agree(r, problem);
}
