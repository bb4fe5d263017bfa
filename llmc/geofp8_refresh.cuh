// geofp8_refresh.cuh — the factor refresh of GeoFP8 on the GPU (DESIGN §6 "Factor"): when each
// piece runs and what waits for what. The kernels are llmc/geofp8.cuh's; the math they mirror is
// llmc/geofp8.h's; llmc/gradcomm.cuh calls the phases below between its collectives.
//
// A refresh of K steps' cadence, as the trainer sees it:
//   ahead of it   geofp8_device_omega_prepare: on host threads (geofp8_omega.h), Ω of every unit
//                 for the next refresh, from the seed and the factor the last refresh left (its U
//                 downloaded into pinned memory by geofp8_device_refresh_finish). At set-up for
//                 the first refresh; after each refresh for the next.
//   begin         geofp8_device_sketch_begin: waits for the builder (it is done by then), uploads
//                 Ω from pinned memory, zeroes the sketches. No host wait on the device.
//   forward       geofp8_device_observe_input per micro-batch: Y += w hᵀ(hΩ), tr(A).
//   communicate   per unit: SUM of Y and tr(A); rank 0 runs geofp8_device_refresh_factor, the
//                 whole Nyström step on the device (geofp8_nystrom_enqueue: the shift, the retries,
//                 the top-r choice and the power are the kernels' decisions); broadcast of the
//                 factor; geofp8_device_refresh_finish carries the residual. Nothing waits on the
//                 host, so a bucketed refresh runs on the bucket stream under the backward.
//   after it      one download of every unit's GeoFP8RefreshReport on rank 0
//                 (geofp8_device_refresh_reports): the warnings and the power line.
// So a refresh step synchronizes with the host once on rank 0 and never on the other ranks, and
// the test matrices never hold up a step unless a factor changed since they were started (a
// skipped step's undo, a checkpoint load): then geofp8_device_sketch_begin builds them itself.
#pragma once
#include <chrono>
#include <cstring>
#include <vector>
#include "geofp8.cuh"
#include "geofp8_omega.h"

// --- the Nyström step on the device ---

// How a refresh turns (U, λ, σ²) into the transform (--geofp8-power, --geofp8-damping); with a
// negative power (auto), p = geofp8_power_from_energy with the energies of this rank's gradient G
// of the unit (device, (d_out, d_in)) along the new eigenvectors, as the CPU engine does. The
// geofp8_nystrom wrapper writes chosen and q back.
struct GeoFP8Power {
    double power = 1.0, damping = GEOFP8_DAMPING;
    const float* G = NULL;
    int d_out = 0;
    double chosen = 1.0, q = 0.0;
};

// The stable Nyström step of geofp8.h's geofp8_nystrom, then geofp8_factor_from_nystrom, from the
// all-reduced sketch, enqueued on `stream` with no host wait: factor (packed, device) = T of
// (U, λ, σ², tr A); rep (device) receives what the step found. Y, Ω (d_in, k) and trA (double)
// on the device; pw NULL: p = 1, δ = 1e-3.
// Device work, all in double, with the row-major buffers read column-major as their transposes
// (Ω -> Ωᵀ (k × d_in)):
//   rep->ss = ‖Y‖²_F                        fixed tree
//   for every attempt a = 0..GEOFP8_MAX_RETRIES (all of them: which one counts is the device's call):
//     Y_ν = Y + ν_a Ω,  M_a = Ωᵀ Y_ν        dgemm(N, T, k, k, d_in, Ω ld k, Yv ld k), symmetrized
//     M_a = Rᵀ R                            dpotrf(UPPER), its info into rep->info[a]
//   select: the first a that succeeded      its R into Mc, ν and status into rep; else the fallback
//   Y_ν again with the chosen ν (Ω itself with the fallback)
//   Bᵀ = R⁻ᵀ Y_νᵀ                           dtrsm(LEFT, UPPER, T) on the Yv buffer (k × d_in), in place
//   K = Bᵀ B (upper)                        dsyrk(UPPER, N, k, d_in) on Bᵀ
//   K = V diag(w) Vᵀ                        dsyevd(VECTOR, UPPER), ascending, eigenvectors in K's columns
//   Vs (k × r), λ (r)                       the top r, descending, each over its σ (the fallback: 0, iso)
//   Uᵀ = Vsᵀ Bᵀ (r × d_in)                  dgemm(T, N, r, d_in, k, Vs ld k, Bᵀ ld k): the row-major U (d_in, r)
//   factor's U = (float) U, or Ω's first r columns with the fallback
//   power auto: P = G U, e_j = ‖P_j‖², ‖G‖² sgemm + fixed trees, as geofp8_direction_energy
//   σ², p, D, c, ε                          geofp8.h's formulas on one device thread
// The speculative attempts cost three small dgemm and dpotrf each time; the CPU's loop stops at
// the first success, and the bits of the one taken are the same. Eigenvector signs may differ
// from LAPACK's; the transform U D Uᵀ + c (I - U Uᵀ) does not depend on them.
static inline void geofp8_nystrom_enqueue(GeoFP8Device* g, GeoFP8RefreshReport* rep, float* factor, const float* Y, const float* omega,
                                          const double* trA, int d_in, int k, int r, const GeoFP8Power* pw, cudaStream_t stream) {
    if (!(r >= 1 && r <= k && k <= d_in && r <= GEOFP8_MAX_RANK)) { fprintf(stderr, "geofp8_nystrom: need 1 <= r <= k <= d_in\n"); exit(1); }
    GeoFP8Power defaults;
    if (!pw) pw = &defaults;
    const size_t dk = (size_t)d_in * k, kk = (size_t)k * k;
    geofp8_reserve(&g->dwork, &g->cap_dwork, geofp8_nystrom_doubles(d_in, k, r));
    double* Om = g->dwork;
    double* Yv = Om + dk;
    double* Ma = Yv + dk;                             // (GEOFP8_MAX_RETRIES + 1) × (k, k)
    double* Mc = Ma + (GEOFP8_MAX_RETRIES + 1) * kk;  // the chosen attempt's R
    double* K = Mc + kk;
    double* w = K + kk;
    double* Vs = w + k;
    double* Ud = Vs + (size_t)k * r;
    geofp8_reserve_solver(g, Ma, k, 1);
    CUBLAS_CHECK(cublasSetStream(g->blas, stream));
    CUSOLVER_CHECK(cusolverDnSetStream(g->solver, stream));
    const double one = 1.0, zero = 0.0;
    const int grid = cuda_grid_for(dk, 256);
    geofp8_sum_squares_kernel<<<1, 1024, 0, stream>>>(&rep->ss, Y, dk);
    KERNEL_CHECK();
    geofp8_to_double_kernel<<<grid, 256, 0, stream>>>(Om, omega, dk);
    KERNEL_CHECK();
    const dim3 sb(16, 16), sg(cuda_ceil_div(k, 16), cuda_ceil_div(k, 16));
    for (int a = 0; a <= GEOFP8_MAX_RETRIES; a++) {
        double* M = Ma + (size_t)a * kk;
        geofp8_nystrom_shift_kernel<<<grid, 256, 0, stream>>>(Yv, Y, Om, dk, rep, a);
        KERNEL_CHECK();
        CUBLAS_CHECK(cublasDgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_T, k, k, d_in, &one, Om, k, Yv, k, &zero, M, k));
        geofp8_symmetrize_kernel<<<sg, sb, 0, stream>>>(M, k);
        KERNEL_CHECK();
        CUSOLVER_CHECK(cusolverDnDpotrf(g->solver, CUBLAS_FILL_MODE_UPPER, k, M, k, g->solver_work, g->cap_solver, &rep->info[a]));
    }
    geofp8_nystrom_select_kernel<<<1, 256, 0, stream>>>(Mc, Ma, k, rep, trA);
    KERNEL_CHECK();
    geofp8_nystrom_shift_kernel<<<grid, 256, 0, stream>>>(Yv, Y, Om, dk, rep, -1);
    KERNEL_CHECK();
    CUBLAS_CHECK(cublasDtrsm(g->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, k, d_in, &one, Mc, k, Yv, k));
    CUBLAS_CHECK(cublasDsyrk(g->blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, k, d_in, &one, Yv, k, &zero, K, k));
    CUSOLVER_CHECK(cusolverDnDsyevd(g->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, k, K, k, w, g->solver_work, g->cap_solver,
                                    &rep->eig_info));
    geofp8_nystrom_top_kernel<<<1, 256, 0, stream>>>(Vs, g->lambda, K, w, k, r, d_in, rep);
    KERNEL_CHECK();
    CUBLAS_CHECK(cublasDgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, r, d_in, k, &one, Vs, k, Yv, k, &zero, Ud, r));
    geofp8_nystrom_u_kernel<<<cuda_grid_for((size_t)d_in * r, 256), 256, 0, stream>>>(factor, Ud, omega, d_in, k, r, rep);
    KERNEL_CHECK();
    double* e = NULL;
    if (pw->power < 0.0) {  // e (r) = ‖G u_j‖² from P = G U: Pᵀ (r × d_out) = Uᵀ Gᵀ -> sgemm(N, N, r, d_out, d_in, U ld r, G ld d_in)
        const float fone = 1.0f, fzero = 0.0f;
        geofp8_reserve(&g->P, &g->cap_P, (size_t)pw->d_out * r);
        geofp8_reserve(&g->rows, &g->cap_rows, (size_t)r);
        CUBLAS_CHECK(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, r, pw->d_out, d_in, &fone, factor, r, pw->G, d_in, &fzero, g->P, r));
        geofp8_column_energy_kernel<<<r, 256, 0, stream>>>(g->rows, g->P, pw->d_out, r);
        KERNEL_CHECK();
        geofp8_sum_squares_kernel<<<1, 1024, 0, stream>>>(&rep->total, pw->G, (size_t)pw->d_out * d_in);
        KERNEL_CHECK();
        e = g->rows;
    }
    geofp8_nystrom_coef_kernel<<<1, 256, 0, stream>>>(factor, g->lambda, e, d_in, r, pw->power, pw->damping, rep);
    KERNEL_CHECK();
}

// geofp8_nystrom_enqueue, then a wait for its report (one synchronization): returns what geofp8.h's
// geofp8_nystrom returns (0, retries, or -1 with the isotropic fallback). lambda_out (r) and
// sigma2_out (host, optional) receive λ and σ²; pw's chosen and q are written back. For the
// checks and benchmarks of one factor; the trainer's refresh reads its reports once for all units.
static inline int geofp8_nystrom(GeoFP8Device* g, float* factor, const float* Y, const float* omega, const double* trA_dev, int d_in,
                                 int k, int r, cudaStream_t stream, float* lambda_out = NULL, float* sigma2_out = NULL, GeoFP8Power* pw = NULL) {
    if (g->cap_reports < 1) {  // no unit added yet: room for this call's report
        g->cap_reports = 1;
        g->reports = cuda_malloc<GeoFP8RefreshReport>(1);
        CUDA_CHECK(cudaMallocHost((void**)&g->reports_host, sizeof(GeoFP8RefreshReport)));
    }
    GeoFP8RefreshReport* rep = g->reports + g->cap_reports - 1;  // past every unit's
    geofp8_nystrom_enqueue(g, rep, factor, Y, omega, trA_dev, d_in, k, r, pw, stream);
    GeoFP8RefreshReport h;
    CUDA_CHECK(cudaMemcpyAsync(&h, rep, sizeof(h), cudaMemcpyDeviceToHost, stream));
    if (lambda_out) CUDA_CHECK(cudaMemcpyAsync(lambda_out, g->lambda, (size_t)r * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    if (sigma2_out) *sigma2_out = (float)h.sigma2;
    if (pw) pw->chosen = h.power, pw->q = h.q;
    return h.status;
}

// --- the test matrices, ahead of their refresh ---

// The shared seed of a unit's test matrix at `step` (gradcomm_begin_step's formula).
static inline uint64_t geofp8_refresh_seed(unsigned long long seed, int unit, int step) {
    return (uint64_t)seed * 1000003ull + (uint64_t)unit * 7919ull + (uint64_t)step;
}

// Every low-rank unit's U_host holds the factor in use (after the downloads the last refresh
// enqueued): a factor changed since (undo, load) is downloaded now (synchronous, rare).
static inline void geofp8_device_fetch_U(GeoFP8Device* g) {
    for (GeoFP8DeviceUnit& gu : g->geo) {
        if (gu.kfac || gu.U_host_version == gu.factor_version) continue;
        CUDA_CHECK(cudaMemcpy(gu.U_host, gu.factor, (size_t)gu.d_in * gu.r * sizeof(float), cudaMemcpyDeviceToHost));
        gu.U_host_version = gu.factor_version;
    }
}

// Starts building every low-rank unit's Ω of refresh step `step` into its omega_host, on host
// threads (background) or here. first: the first refresh (Gaussian only).
static inline void geofp8_device_omega_prepare(GeoFP8Device* g, unsigned long long seed, int step, int first, bool background = true) {
    if (g->omega_from) return;  // a copy of another device's (geofp8_device_omega_install)
    geofp8_omega_wait(g->omega);  // its jobs write omega_host: none may be in flight, nor an upload from it,
    CUDA_CHECK(cudaEventSynchronize(g->pinned_done));  // and U_host must have arrived
    if (!first) geofp8_device_fetch_U(g);
    std::vector<GeoFP8OmegaJob> jobs;
    for (GeoFP8DeviceUnit& gu : g->geo) {
        if (gu.kfac) continue;
        GeoFP8OmegaJob j;
        j.d_in = gu.d_in, j.k = gu.k, j.r = gu.r;
        j.first = first != 0;
        j.seed = geofp8_refresh_seed(seed, gu.unit, step);
        if (!first) j.U_prev.assign(gu.U_host, gu.U_host + (size_t)gu.d_in * gu.r), j.version = gu.U_host_version;
        j.out = gu.omega_host;
        jobs.push_back(std::move(j));
    }
    if (!jobs.empty()) geofp8_omega_start(g->omega, step, std::move(jobs), background);
}

// Ω of refresh step `step` into every low-rank unit's omega, uploaded from pinned memory on
// `stream`: the builder's, if it ran for this step from the factors in use; else built here.
// Returns the seconds the host spent on it (waiting or building).
static inline double geofp8_device_omega_install(GeoFP8Device* g, unsigned long long seed, int step, int first, cudaStream_t stream) {
    if (g->omega_from) {  // installed there first, on the same stream
        if (g->omega_from->geo.size() != g->geo.size()) { fprintf(stderr, "geofp8_device_omega_install: the devices' units differ\n"); exit(1); }
        for (size_t gi = 0; gi < g->geo.size(); gi++) {
            const GeoFP8DeviceUnit& gu = g->geo[gi];
            if (!gu.kfac)
                CUDA_CHECK(cudaMemcpyAsync(gu.omega, g->omega_from->geo[gi].omega, (size_t)gu.d_in * gu.k * sizeof(float), cudaMemcpyDeviceToDevice,
                                           stream));
        }
        return 0.0;
    }
    double spent = 0.0;
    const std::vector<GeoFP8OmegaJob>* jobs = geofp8_omega_take(g->omega, step, &spent);
    size_t i = 0;
    bool ok = jobs != nullptr;
    for (const GeoFP8DeviceUnit& gu : g->geo) {
        if (gu.kfac || !ok) continue;
        const GeoFP8OmegaJob& j = (*jobs)[i++];
        ok = j.first == (first != 0) && (j.first || j.version == gu.factor_version);
    }
    if (!ok) {
        const auto t0 = std::chrono::steady_clock::now();
        geofp8_device_omega_prepare(g, seed, step, first, false);
        spent += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    for (GeoFP8DeviceUnit& gu : g->geo)
        if (!gu.kfac) CUDA_CHECK(cudaMemcpyAsync(gu.omega, gu.omega_host, (size_t)gu.d_in * gu.k * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(g->pinned_done, stream));  // geofp8_device_omega_prepare waits for it before the builder reuses omega_host
    g->omega->step = -1;  // its outputs are in use now
    return spent;
}

// --- the refresh ---

// Before the micro-steps of a refresh step: Ω in place (geofp8_device_omega_install: from the seed
// at the first refresh, [U_prev | Gaussian] afterwards) and the accumulators zeroed. Every rank
// has bitwise the same Ω without a broadcast: the same seed, the same (broadcast) U_prev and the
// same sequential QR (geofp8_orthonormalize). Asynchronous; returns the host seconds of Ω.
// With --geofp8-ema (ema = 1) this runs on every step of the geometry path (gradcomm_begin_step
// of llmc/gradcomm.h explains the windows): new_window installs Ω and zeroes the average, every
// call zeroes the step's accumulators.
static inline double geofp8_device_sketch_begin(GeoFP8Device* g, unsigned long long seed, int step, int first, int new_window, int ema,
                                                cudaStream_t stream) {
    double spent = 0.0;
    bool low_rank = false;
    for (const GeoFP8DeviceUnit& gu : g->geo) low_rank = low_rank || !gu.kfac;
    if (new_window && low_rank) spent = geofp8_device_omega_install(g, seed, step, first, stream);
    for (GeoFP8DeviceUnit& gu : g->geo) {
        if (gu.kfac) {
            CUDA_CHECK(cudaMemsetAsync(gu.A, 0, (size_t)gu.d_in * gu.d_in * sizeof(float), stream));
            CUDA_CHECK(cudaMemsetAsync(gu.Gs, 0, (size_t)gu.d_out * gu.d_out * sizeof(float), stream));
            continue;
        }
        const size_t dk = (size_t)gu.d_in * gu.k;
        if (new_window && ema) {
            if (!gu.Y_ema) gu.Y_ema = cuda_malloc<float>(dk), gu.trA_ema = cuda_malloc<double>(1);
            CUDA_CHECK(cudaMemsetAsync(gu.Y_ema, 0, dk * sizeof(float), stream));
            CUDA_CHECK(cudaMemsetAsync(gu.trA_ema, 0, sizeof(double), stream));
            gu.ema_steps = 0;
        }
        CUDA_CHECK(cudaMemsetAsync(gu.Y, 0, dk * sizeof(float), stream));
        CUDA_CHECK(cudaMemsetAsync(gu.trA, 0, sizeof(double), stream));
    }
    return spent;
}

static inline double geofp8_device_refresh_begin(GeoFP8Device* g, unsigned long long seed, int step, int first, cudaStream_t stream) {
    return geofp8_device_sketch_begin(g, seed, step, first, 1, 0, stream);
}

// --geofp8-ema, after the backward of a sketching step: S <- β S + (1 - β) Y for each unit.
static inline void geofp8_device_ema_update(GeoFP8Device* g, float beta, cudaStream_t stream) {
    for (GeoFP8DeviceUnit& gu : g->geo) {
        const size_t dk = (size_t)gu.d_in * gu.k;
        geofp8_ema_kernel<<<cuda_grid_for(dk, 256), 256, 0, stream>>>(gu.Y_ema, gu.Y, dk, beta, 1.0f - beta, gu.trA_ema, gu.trA);
        KERNEL_CHECK();
        gu.ema_steps++;
    }
}

// --geofp8-ema, at a refresh: this rank's bias-corrected average S / (1 - β^n) into Y and tr(A).
static inline void geofp8_device_ema_to_sketch(GeoFP8Device* g, float beta, cudaStream_t stream) {
    for (GeoFP8DeviceUnit& gu : g->geo) {
        const size_t dk = (size_t)gu.d_in * gu.k;
        const double c = 1.0 / (1.0 - pow((double)beta, (double)gu.ema_steps));
        geofp8_ema_to_sketch_kernel<<<cuda_grid_for(dk, 256), 256, 0, stream>>>(gu.Y, gu.Y_ema, dk, c, gu.trA, gu.trA_ema);
        KERNEL_CHECK();
    }
}

// One micro-batch's input h (n, d_in) bf16 of unit `unit` (no-op if the unit is not on the
// geometry path); weight = 1 / (tokens of the step over all ranks).
static inline void geofp8_device_observe_input(GeoFP8Device* g, int unit, const bf16* h, int n, float weight, cudaStream_t stream) {
    int gi = unit >= 0 && unit < (int)g->unit_to_geo.size() ? g->unit_to_geo[unit] : -1;
    if (gi < 0) return;
    GeoFP8DeviceUnit& gu = g->geo[gi];
    if (gu.kfac) geofp8_kfac_accumulate(g, gu.A, h, n, gu.d_in, weight, stream);
    else geofp8_sketch_accumulate(g, gu.Y, gu.trA, h, n, gu.d_in, gu.omega, gu.k, weight, stream);
}

// One micro-batch's output gradient δ (n, d_out) bf16 of unit `unit` (kfac only).
static inline void geofp8_device_observe_output_grad(GeoFP8Device* g, int unit, const bf16* delta, int n, float weight,
                                                     cudaStream_t stream) {
    int gi = unit >= 0 && unit < (int)g->unit_to_geo.size() ? g->unit_to_geo[unit] : -1;
    if (gi < 0 || !g->geo[gi].kfac) return;
    GeoFP8DeviceUnit& gu = g->geo[gi];
    geofp8_kfac_accumulate(g, gu.Gs, delta, n, gu.d_out, weight, stream);
}

// Rank 0, after the SUM all-reduce of gu.Y and gu.trA (kfac: gu.A and gu.Gs): the new factor into
// gu.factor_next (kfac: gu.LA_next, gu.LG_next), which every rank then broadcasts from rank 0.
// Low-rank units: enqueued, the report into g->reports[gi] (geofp8_device_refresh_reports reads
// it); kfac: geofp8_kfac_factor, which synchronizes (the ablation refreshes after the backward).
static inline void geofp8_device_refresh_factor(GeoFP8Device* g, int gi, cudaStream_t stream, const GeoFP8Power* pw = NULL) {
    GeoFP8DeviceUnit& gu = g->geo[gi];
    if (gu.kfac) {
        int a = geofp8_kfac_factor(g, gu.LA_next, gu.A, gu.d_in, stream);
        int b = geofp8_kfac_factor(g, gu.LG_next, gu.Gs, gu.d_out, stream);
        GeoFP8RefreshReport rep;
        memset(&rep, 0, sizeof(rep));
        rep.status = a < 0 || b < 0 ? -1 : std::max(a, b);
        CUDA_CHECK(cudaMemcpyAsync(g->reports + gi, &rep, sizeof(rep), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));  // rep lives on this stack
        return;
    }
    geofp8_nystrom_enqueue(g, g->reports + gi, gu.factor_next, gu.Y, gu.omega, gu.trA, gu.d_in, gu.k, gu.r, pw, stream);
}

// Rank 0, after the refresh of units (all of them, or a bucketed step's): their reports, with one
// download and one synchronization. Returns g->reports_host, indexed like g->geo.
static inline const GeoFP8RefreshReport* geofp8_device_refresh_reports(GeoFP8Device* g, cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpyAsync(g->reports_host, g->reports, g->geo.size() * sizeof(GeoFP8RefreshReport), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return g->reports_host;
}

// Every rank, after the broadcast of the new factor: R <- R T_old⁻¹ T_new, then the new factor is
// in use, and its U starts on its way to U_host for the next Ω. into_next (a bucketed step,
// geofp8_device_double_buffer): the carried R goes to residual_next and gu.residual stays as it
// was, so that a step skipped afterwards can put the old factor back (geofp8_device_refresh_undo)
// with its residual; the step's quantizer then overwrites residual_next with the new residual, as
// the unbucketed step overwrites gu.residual.
static inline void geofp8_device_refresh_finish(GeoFP8Device* g, int gi, cudaStream_t stream, int into_next = 0) {
    GeoFP8DeviceUnit& gu = g->geo[gi];
    float* R = gu.residual;
    if (into_next) {
        R = gu.residual_next;
        CUDA_CHECK(cudaMemcpyAsync(R, gu.residual, (size_t)gu.d_out * gu.d_in * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
    if (gu.kfac) {
        geofp8_kfac_unwhiten(g, R, gu.d_out, gu.d_in, gu.LG, gu.LA, stream);
        geofp8_kfac_whiten(g, R, gu.d_out, gu.d_in, gu.LG_next, gu.LA_next, stream);
        std::swap(gu.LA, gu.LA_next);
        std::swap(gu.LG, gu.LG_next);
        return;
    }
    geofp8_carry_residual(g, R, gu.d_out, gu.d_in, gu.factor, gu.factor_next, gu.r, stream);
    std::swap(gu.factor, gu.factor_next);
    gu.factor_version++;
    CUDA_CHECK(cudaMemcpyAsync(gu.U_host, gu.factor, (size_t)gu.d_in * gu.r * sizeof(float), cudaMemcpyDeviceToHost, stream));
    gu.U_host_version = gu.factor_version;
    CUDA_CHECK(cudaEventRecord(g->pinned_done, stream));
}

// A refresh of this step undone (the step is skipped): the old factor is in use again; the new
// one stays in the broadcast buffer, which the next refresh overwrites.
static inline void geofp8_device_refresh_undo(GeoFP8Device* g, int gi) {
    GeoFP8DeviceUnit& gu = g->geo[gi];
    std::swap(gu.factor, gu.factor_next);
    std::swap(gu.LA, gu.LA_next);
    std::swap(gu.LG, gu.LG_next);
    gu.factor_version++;
}
