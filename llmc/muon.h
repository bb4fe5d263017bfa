// muon.h — Muon optimizer, fp32 CPU reference (the spec the CUDA version is checked against).
//
// What: momentum, Newton–Schulz orthogonalization and the weight update for one 2-D hidden
// matrix W (rows, cols), row-major, plus the three presets of DESIGN §7:
//
//   preset          beta  nesterov  (a, b, c)                  lr scale s
//   moonlight       0.95  on        (3.4445, -4.7750, 2.0315)  0.2 * sqrt(max(rows, cols))
//   keller          0.95  on        same                       sqrt(max(1, rows / cols))
//   megatron_core   0.9   off       same                       sqrt(max(rows, cols))
//
// moonlight equals torch.optim.Muon(adjust_lr_fn="match_rms_adamw"), keller equals
// adjust_lr_fn="original". megatron_core takes Megatron-Core's momentum, Nesterov and scale
// defaults and its q/k/v split (split_qkv = 1: the trainer calls muon_update_cpu once per q, k
// and v row block of qkvw), but keeps the Keller coefficients for all five iterations.
//
// Step, on the (averaged, clipped) gradient G:
//   M <- beta*M + (1-beta)*G
//   U  = (1-beta)*G + beta*M  if nesterov, else M
//   X  = NS(U)                (muon_newton_schulz_cpu)
//   W <- W*(1 - lr*wd) - lr*s*X
//
// Conventions: every function writes (=) in place; nothing accumulates. The math is pure
// functions of their arguments: no globals, no allocation; the caller owns the scratch buffer
// (muon_scratch_floats). Deterministic for a given thread count: fixed-order reductions, BLAS
// products whose results do not depend on timing; OpenBLAS chooses its kernels by thread count,
// so 1 and 2 threads agree to rounding, not bit for bit. Precision: fp32 storage and fp32 BLAS,
// the Frobenius norm in double.
// Matrix products use OpenBLAS (cblas_ssyrk for the symmetric Gram matrices, cblas_sgemm for
// the polynomial times X); its thread count is set by the caller (openblas_set_num_threads or
// OPENBLAS_NUM_THREADS).
#pragma once
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <algorithm>
#include <vector>
#include <cblas.h>

typedef enum { MUON_MOONLIGHT = 0, MUON_KELLER, MUON_MEGATRON_CORE } MuonPreset;

typedef struct {
    MuonPreset preset;
    float beta;       // momentum coefficient
    int nesterov;     // 1: orthogonalize (1-beta)G + beta*M; 0: orthogonalize M
    float a, b, c;    // quintic Newton–Schulz coefficients
    int ns_steps;     // Newton–Schulz iterations
    int split_qkv;    // 1: q, k, v row blocks of qkvw are orthogonalized separately
} MuonConfig;

// Keller Jordan's quintic: chosen to maximize the slope at zero, so small singular values
// grow fast; the result has singular values in roughly [0.7, 1.2] rather than exactly 1.
static const float MUON_NS_A = 3.4445f;
static const float MUON_NS_B = -4.7750f;
static const float MUON_NS_C = 2.0315f;
static const int MUON_NS_STEPS = 5;
// Clamp on ‖U‖_F: a zero U stays zero (0 / 1e-7) instead of becoming 0/0 = NaN.
static const float MUON_NORM_EPS = 1e-7f;

static inline MuonConfig muon_config(MuonPreset p) {
    MuonConfig cfg;
    cfg.preset = p;
    cfg.a = MUON_NS_A;
    cfg.b = MUON_NS_B;
    cfg.c = MUON_NS_C;
    cfg.ns_steps = MUON_NS_STEPS;
    switch (p) {
        case MUON_KELLER:
            cfg.beta = 0.95f; cfg.nesterov = 1; cfg.split_qkv = 0;
            break;
        case MUON_MEGATRON_CORE:
            cfg.beta = 0.9f; cfg.nesterov = 0; cfg.split_qkv = 1;
            break;
        case MUON_MOONLIGHT:
        default:
            assert(p == MUON_MOONLIGHT);
            cfg.beta = 0.95f; cfg.nesterov = 1; cfg.split_qkv = 0;
            break;
    }
    return cfg;
}

static inline const char* muon_preset_name(MuonPreset p) {
    switch (p) {
        case MUON_MOONLIGHT: return "moonlight";
        case MUON_KELLER: return "keller";
        case MUON_MEGATRON_CORE: return "megatron_core";
    }
    return "unknown";
}

// Returns 1 and sets *out for "moonlight", "keller" or "megatron_core"; 0 (and leaves *out
// alone) for anything else, so the caller can print a user error naming the valid choices.
static inline int muon_preset_from_name(const char* name, MuonPreset* out) {
    if (name == NULL) return 0;
    const MuonPreset all[3] = {MUON_MOONLIGHT, MUON_KELLER, MUON_MEGATRON_CORE};
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, muon_preset_name(all[i])) == 0) { *out = all[i]; return 1; }
    }
    return 0;
}

// The factor s in W -= lr*s*X. Computed in double: rows/cols is a true division (torch's A / B).
static inline float muon_lr_scale(const MuonConfig* cfg, int rows, int cols) {
    double r = (double)rows, c = (double)cols;
    double big = r > c ? r : c;
    switch (cfg->preset) {
        case MUON_KELLER: return (float)sqrt(r / c > 1.0 ? r / c : 1.0);
        case MUON_MEGATRON_CORE: return (float)sqrt(big);
        case MUON_MOONLIGHT:
        default: return (float)(0.2 * sqrt(big));
    }
}

// Scratch floats for muon_update_cpu (and enough for muon_newton_schulz_cpu) on a (rows, cols)
// matrix. With m = min(rows, cols), n = max(rows, cols):
//   rows*cols  the orthogonalization input U (muon_update_cpu only)
//   m*n        the second wide (m, n) iterate: Newton–Schulz ping-pongs between it and the
//              input's own memory; it also holds the transposed copy when rows > cols
//   m*m        S = X Xᵀ
//   m*m        P = a I + b S + c S²
// e.g. (768, 3072): 2*768*3072 + 2*768² floats = 22.5 MiB; (4096, 1536): 66 MiB.
static inline size_t muon_scratch_floats(int rows, int cols) {
    size_t m = (size_t)(rows < cols ? rows : cols);
    size_t n = (size_t)(rows < cols ? cols : rows);
    return (size_t)rows * (size_t)cols + m * n + 2 * m * m;
}

// dst (cols, rows) = src (rows, cols)ᵀ. Blocked so both sides stay in cache.
static inline void muon_transpose_cpu(float* dst, const float* src, int rows, int cols) {
    const int TB = 32;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int i0 = 0; i0 < rows; i0 += TB) {
        for (int j0 = 0; j0 < cols; j0 += TB) {
            int i1 = i0 + TB < rows ? i0 + TB : rows;
            int j1 = j0 + TB < cols ? j0 + TB : cols;
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1; j++) dst[(size_t)j * rows + i] = src[(size_t)i * cols + j];
        }
    }
}

// cblas_ssyrk fills only the upper triangle; copy it down so S (m, m) is a full matrix.
static inline void muon_symmetrize_upper_cpu(float* S, int m) {
    for (int i = 1; i < m; i++)
        for (int j = 0; j < i; j++) S[(size_t)i * m + j] = S[(size_t)j * m + i];
}

// In place X (rows, cols) <- NS(X): X / max(‖X‖_F, 1e-7), then ns_steps times
// S = X Xᵀ, X <- aX + (bS + cS²)X, computed on the wide orientation (transposed if rows > cols,
// so the Gram matrices are min(rows, cols)² and the cost is O(m² n)), transposed back.
// The Frobenius normalization bounds the spectral norm by 1, inside the polynomial's basin.
// scratch: at least muon_scratch_floats(rows, cols) - rows*cols floats (m*n + 2*m*m).
static inline void muon_newton_schulz_cpu(float* X, int rows, int cols, const MuonConfig* cfg, float* scratch) {
    const int tall = rows > cols;
    const int m = tall ? cols : rows;  // short side: the Gram matrices are (m, m)
    const int n = tall ? rows : cols;  // long side
    const size_t mn = (size_t)m * n;
    float* T = scratch;           // (m, n) second iterate
    float* S = T + mn;            // (m, m) X Xᵀ
    float* P = S + (size_t)m * m; // (m, m) a I + b S + c S²

    // Serial double sum: exact enough for any size we see and independent of the thread count.
    double ss = 0.0;
    for (size_t i = 0; i < mn; i++) ss += (double)X[i] * (double)X[i];
    float norm = (float)sqrt(ss);
    if (norm < MUON_NORM_EPS) norm = MUON_NORM_EPS;

    // cur is the wide (m, n) iterate; nxt receives the next one. A tall X is transposed into T
    // and its own memory becomes the second buffer, so no extra (m, n) copy is needed.
    float* cur;
    float* nxt;
    if (tall) {
        muon_transpose_cpu(T, X, rows, cols);
        cur = T; nxt = X;
    } else {
        cur = X; nxt = T;
    }
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < mn; i++) cur[i] /= norm;

    const float a = cfg->a, b = cfg->b, c = cfg->c;
    for (int it = 0; it < cfg->ns_steps; it++) {
        // S = X Xᵀ (symmetric: syrk does half the flops of a general product).
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, m, n, 1.0f, cur, n, 0.0f, S, m);
        muon_symmetrize_upper_cpu(S, m);
        // P = a I + b S + c S Sᵀ; S is symmetric so S² = S Sᵀ is again a syrk. Folding a X into
        // the polynomial as a I saves a pass over the (m, n) iterate per step.
        for (size_t i = 0; i < (size_t)m * m; i++) P[i] = b * S[i];
        for (int i = 0; i < m; i++) P[(size_t)i * m + i] += a;
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, m, m, c, S, m, 1.0f, P, m);
        muon_symmetrize_upper_cpu(P, m);
        // nxt = P X = a X + (b S + c S²) X
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, m, 1.0f, P, m, cur, n, 0.0f, nxt, n);
        float* t = cur; cur = nxt; nxt = t;
    }

    if (tall) {
        // The wide result must come from T, since the transpose writes X.
        if (cur != T) memcpy(T, cur, mn * sizeof(float));
        muon_transpose_cpu(X, T, m, n);
    } else if (cur != X) {
        memcpy(X, cur, mn * sizeof(float));
    }
}

// One Muon step on W (rows, cols) with gradient G (rows, cols) and momentum M (rows, cols),
// all updated in place except G. lr is this step's (scheduled) learning rate before the
// preset's shape scale; weight decay is decoupled and uses the unscaled lr, as in torch.
// A zero G with zero M leaves M zero, orthogonalizes to exactly zero and gives
// W <- W*(1 - lr*wd) bit for bit. scratch: muon_scratch_floats(rows, cols) floats.
// The three parts of a step, for the sharded update (muon_shard_owners): every rank moves its
// momentum, the owner of a matrix orthogonalizes, every rank applies the owner's X.
// M <- beta M + (1-beta) G and U (n) = the matrix to orthogonalize.
static inline void muon_momentum_cpu(float* U, float* M, const float* G, size_t n, const MuonConfig* cfg) {
    const float beta = cfg->beta, one_minus_beta = 1.0f - cfg->beta;
    const int nesterov = cfg->nesterov;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float m = beta * M[i] + one_minus_beta * G[i];
        M[i] = m;
        U[i] = nesterov ? one_minus_beta * G[i] + beta * m : m;
    }
}

// W (rows, cols) <- W (1 - lr wd) - lr s X, X = NS(U).
static inline void muon_apply_cpu(float* W, const float* X, int rows, int cols, const MuonConfig* cfg, float lr, float weight_decay) {
    const size_t n = (size_t)rows * cols;
    const float decay = 1.0f - lr * weight_decay;
    const float step = lr * muon_lr_scale(cfg, rows, cols);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) W[i] = W[i] * decay - step * X[i];
}

static inline void muon_update_cpu(float* W, const float* G, float* M, int rows, int cols,
                                   const MuonConfig* cfg, float lr, float weight_decay, float* scratch) {
    const size_t n = (size_t)rows * cols;
    float* U = scratch;  // (rows, cols)
    muon_momentum_cpu(U, M, G, n, cfg);
    muon_newton_schulz_cpu(U, rows, cols, cfg, scratch + n);
    muon_apply_cpu(W, U, rows, cols, cfg, lr, weight_decay);
}

// Relative cost of Newton–Schulz on a (rows, cols) matrix: m² n with m = min, n = max (each
// iteration forms X Xᵀ, its square and the product with X: 2m²n + 2m³ + 2m²n flops).
static inline double muon_ns_cost(int rows, int cols) {
    double m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
    return m * m * n;
}

// The fixed assignment of the sharded update (--muon-shard): matrix i (in the order given, cost
// cost[i]) goes to owner[i] of N ranks, largest first to the least loaded rank (lowest rank on
// ties, equal costs in their given order): the longest-processing-time rule, within 4/3 of the
// best balance. The same on every rank.
static inline std::vector<int> muon_shard_owners(const std::vector<double>& cost, int N) {
    std::vector<int> order(cost.size()), owner(cost.size(), 0);
    for (size_t i = 0; i < order.size(); i++) order[i] = (int)i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
    std::vector<double> load(N, 0.0);
    for (int i : order) {
        int best = 0;
        for (int r = 1; r < N; r++)
            if (load[r] < load[best]) best = r;
        owner[i] = best;
        load[best] += cost[i];
    }
    return owner;
}
