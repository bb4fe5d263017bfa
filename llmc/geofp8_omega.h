// geofp8_omega.h — the test matrices Ω of the next refresh, built on host threads while the steps
// before it run (DESIGN §6 "Factor"), for both engines. Host only.
//
// Ω of a refresh (geofp8_test_matrix) depends on the run's seed, the unit, the refresh's step and
// the factor in use (U_prev), nothing else: every rank knows all four as soon as the previous
// refresh is settled. So the trainer starts the next Ω right then (geofp8_omega_start) and takes
// it when the refresh comes (geofp8_omega_take). The units are built side by side, one thread per
// unit up to the machine's cores; each unit's Ω is the same sequential geofp8_test_matrix as ever,
// so the bits do not depend on the threads, and a job whose inputs changed since it started (the
// factor put back by a skipped step, or loaded from a checkpoint) is caught by its caller and
// built again.
//
// Conventions: a job writes only its own `out` (d_in * k floats, owned by the caller, which must
// stay valid and untouched until geofp8_omega_wait returns); the builder owns a copy of U_prev.
// Nothing here calls CUDA: the GPU engine uploads the result itself.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>
#include "geofp8.h"

// The first step >= from that builds Ω, for a geometry path that starts at geometry_start and
// refreshes every refresh_every steps: a refresh step, or with --geofp8-ema (ema) a window's first
// step (the geometry path's first step, then the step after each refresh; llmc/gradcomm.h).
static inline int geofp8_omega_next_step(int from, int geometry_start, int refresh_every, bool ema) {
    const int gs = geometry_start, K = refresh_every, t = std::max(from, gs);
    if (ema && t == gs) return t;
    const int m = ema ? (t - gs - 1) % K : (t - gs) % K;
    return m == 0 ? t : t + K - m;
}

// One unit's Ω: geofp8_test_matrix(out, d_in, k, first ? NULL : U_prev, r, seed).
struct GeoFP8OmegaJob {
    int d_in = 0, k = 0, r = 0;
    bool first = true;            // the first refresh: Ω of a Gaussian alone
    uint64_t seed = 0;
    std::vector<float> U_prev;    // (d_in, r) the factor in use when the job started (empty if first)
    long long version = 0;        // the caller's tag for that factor (the GPU engine's factor_version)
    float* out = nullptr;         // (d_in, k) row-major
};

struct GeoFP8OmegaBuilder {
    std::thread worker;
    int step = -1;                // the refresh step whose Ω the jobs build (-1: none)
    std::vector<GeoFP8OmegaJob> jobs;
    ~GeoFP8OmegaBuilder() { if (worker.joinable()) worker.join(); }
};

static inline void geofp8_omega_run(std::vector<GeoFP8OmegaJob>* jobs) {
    const int n = (int)jobs->size();
    const int threads = std::max(1, std::min(n, (int)std::thread::hardware_concurrency()));
    auto work = [jobs, n, threads](int t) {
        for (int i = t; i < n; i += threads) {
            GeoFP8OmegaJob& j = (*jobs)[i];
            geofp8_test_matrix(j.out, j.d_in, j.k, j.first ? nullptr : j.U_prev.data(), j.r, j.seed);
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; t++) {
        try {
            pool.emplace_back(work, t);
        } catch (...) {  // no thread to be had: this one does the rest
            for (int u = t; u < threads; u++) work(u);
            break;
        }
    }
    work(0);
    for (std::thread& th : pool) th.join();
}

// Waits for the jobs in flight; returns the seconds it waited.
static inline double geofp8_omega_wait(GeoFP8OmegaBuilder* b) {
    if (!b->worker.joinable()) return 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    b->worker.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Starts building the jobs' Ω for refresh step `step` on a host thread (after the previous jobs
// are done). background = false builds them here, before returning.
static inline void geofp8_omega_start(GeoFP8OmegaBuilder* b, int step, std::vector<GeoFP8OmegaJob> jobs, bool background = true) {
    geofp8_omega_wait(b);
    b->jobs = std::move(jobs);
    b->step = step;
    if (background) {
        try {
            b->worker = std::thread(geofp8_omega_run, &b->jobs);
            return;
        } catch (...) {}  // no thread: build now
    }
    geofp8_omega_run(&b->jobs);
}

// The jobs for refresh step `step`, finished (nullptr if the builder holds another step's): the
// caller checks each job's inputs against its units before it uses `out`. *waited: seconds spent
// waiting for them.
static inline const std::vector<GeoFP8OmegaJob>* geofp8_omega_take(GeoFP8OmegaBuilder* b, int step, double* waited) {
    *waited = geofp8_omega_wait(b);
    return b->step == step ? &b->jobs : nullptr;
}

static inline void geofp8_omega_free(GeoFP8OmegaBuilder* b) {
    geofp8_omega_wait(b);
    b->jobs.clear();
    b->step = -1;
}
