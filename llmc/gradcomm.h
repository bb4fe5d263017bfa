// gradcomm.h — the gradient communication modes of the CPU engine (DESIGN §5–6), host only.
//
// gradcomm_start / gradcomm_unit_ready / gradcomm_finish replace the local fp32 gradient buffer
// (num_params, flat layout of llama.h) by the communicated average over ranks, bucket by bucket
// while the last micro-step's backward runs (--bucket-mb):
//
//   fp32      MPI SUM all-reduce in fp32, divided by N
//   bf16      bf16 codes, SUM with bf16 rounding at every combine, decoded, divided by N
//   fp8       one power-of-two scale per unit, synchronized by a MAX all-reduce of the units'
//             amax (per bucket); FP8 codes (--fp8-format e4m3 or e5m2) SUM-reduced with rounding to the
//             format at every combine (native) or
//             through the two-phase reduction (twophase)
//   fp8block  as fp8 with one scale per 512-element block of each unit (native only)
//   geofp8    fp8 for every unit, except the selected ones, which go through the geometry path:
//             X = G T + R (T the rank-r input-side whitening, R the error-feedback residual),
//             communicate X, R <- X - decode(q)/s, map the average back with T⁻¹
//   kfac      the geometry path with the two-sided K-FAC transform L_G⁻¹ G L_A⁻ᵀ on every
//             linear unit (qkv, proj, fc1, fc2)
//   --fp8-ef 1  (any FP8 mode) error feedback on every unit off the geometry path too: X = G + R
//             with R <- X - decode(q)/s per unit (per block with fp8block) and logical rank, kept
//             in a flat (num_params) buffer; the quantizer writes the new R into a second buffer,
//             swapped in once the step is kept. The control that tells error feedback's share of
//             GeoFP8's gain from the transform's.
//
// Factors are refreshed every K steps from that step's activations (the trainer hands them over
// through gradcomm_observe_input / gradcomm_observe_output_grad while it runs the micro-steps):
// Y = Σ hᵀ(hΩ)/n and tr(A) are SUM-reduced, rank 0 computes the Nyström factor and broadcasts
// it, so every rank applies bitwise the same transform; the residual is carried into the new
// coordinates. With --geofp8-layers auto, the first profiling window runs as fp8 and scores the
// fc1/fc2 units by vulnerability (saturated fraction + underflowed fraction of nonzeros); the
// top units (largest-drop rule or --geofp8-top) then switch to the geometry path and their names
// and scores go to geofp8_layers.txt in the output directory.
//
// Logical ranks: a job of N ranks may run in P <= N processes (--virtual-ranks N), V = N / P in
// each; V = 1 is the plain data-parallel run. Each process hands over its V logical ranks'
// gradients (gradcomm_start), sketches them per logical rank (gradcomm_set_vrank before a logical
// rank's micro-steps), and keeps every per-rank state per logical rank: error-feedback residuals,
// sketches, the twophase server residual. Every sum over ranks is a fold in rank order
// (comm_fold, llmc/comm.h), so V logical ranks in a process give bitwise what V processes give.
// The result, the same for every logical rank, is left in the first gradient buffer.
//
// The numerics (scales, quantization, sketches, factors, transforms) are the pure functions of
// geofp8.h; MPI is comm.h. This file only orchestrates them over the units.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include "checkpoint.h"
#include "comm.h"
#include "fp8.h"
#include "geofp8.h"
#include "geofp8_omega.h"
#include "gradcomm_common.h"
#include "llama.h"
#include "logger.h"
#include "utils.h"

#define GRADCOMM_PROFILE_STEPS 100  // default --geofp8-profile-steps

// A unit on the geometry path: a selected geofp8 unit, or any linear unit under kfac. The
// per-rank parts are (V) vectors, one entry per logical rank of this process.
struct GeoUnit {
    int unit = -1;                 // index into GradComm::units
    int d_out = 0, d_in = 0;
    GeoFP8Factor factor;           // geofp8: T of the last refresh (identity before the first)
    std::vector<float> omega;      // (d_in, k) test matrix of the current refresh (window)
    std::vector<float> omega_next; // (d_in, k) the next one, built ahead (geofp8_omega.h), then swapped in
    std::vector<std::vector<float>> Y;  // (V) (d_in, k) sketch accumulator of this step
    std::vector<double> trA;            // (V)
    std::vector<std::vector<float>> Y_ema;  // (V) --geofp8-ema: (d_in, k) average of the window's sketches
    std::vector<double> trA_ema;            // (V)
    int ema_steps = 0;             // steps averaged into Y_ema (bias correction 1 / (1 - β^n))
    std::vector<std::vector<float>> A, Gs;  // (V) kfac: (d_in, d_in) and (d_out, d_out) accumulators (upper triangles)
    std::vector<float> LA, LG;     // kfac: lower Cholesky factors (identity before the first refresh)
    std::vector<std::vector<float>> residual;  // (V) (d_out, d_in) error feedback, in whitened coordinates
};

// What a step changes in a geometry unit before every rank knows whether the step is skipped:
// the residuals always, the factors on a refresh step, the sketch averages with --geofp8-ema.
struct GeoUnitSaved {
    std::vector<std::vector<float>> residual;
    GeoFP8Factor factor;
    std::vector<float> LA, LG;
    std::vector<std::vector<float>> Y_ema;
    std::vector<double> trA_ema;
    int ema_steps = 0;
};

typedef struct {
    std::string mode;              // -c
    bool twophase;                 // --fp8-reduce twophase
    Fp8Format fmt;                 // --fp8-format
    std::vector<LlamaUnit> units;
    std::vector<int> unit_to_geo;  // (units) index into geo, or -1
    size_t num_params;
    int world_size, rank;          // logical ranks N; this process's rank p among the P processes
    int V, vrank0;                 // logical ranks in this process (N / P) and the first one (p V)
    int cur_v;                     // the logical rank (0..V-1) whose micro-steps run now (gradcomm_set_vrank)
    // geometry settings
    int rank_r, refresh_every, profile_steps, top_k;
    double power;                  // --geofp8-power (-1: auto, chosen per unit at each refresh)
    double damping;                // --geofp8-damping
    float ema;                     // --geofp8-ema β (0: each refresh sketches its own step only)
    bool sketch_now;               // this step sketches the geometry units' inputs (refresh_now, or every step with ema)
    unsigned long long seed;
    // layer selection
    bool profiling;                // auto selection still to come
    int geometry_start;            // first step of the geometry path (-1: not yet)
    std::vector<double> score_sum; // (units) summed per-step vulnerability over the window
    int profiled_steps;
    std::vector<GeoUnit> geo;
    GeoFP8OmegaBuilder omega_builder;  // the next refresh's Ω, built on host threads (gradcomm_end_step)
    bool refresh_now;              // this step refreshes the factors
    float sketch_weight;           // 1 / tokens per step over all ranks
    // scratch, V copies of num_params each: logical rank v's at v * num_params
    std::vector<float> x;          // (V, num_params) values to quantize
    std::vector<uint8_t> q;        // (V, num_params) codes; after the sum, entry 0 holds the summed codes
    std::vector<float> ref;        // (num_params) fp32 reference for fidelity
    bool fp8_ef;                   // --fp8-ef 1 (an FP8 mode)
    std::vector<float> ef_residual, ef_next;  // (V, num_params) --fp8-ef: the residuals in use, and where this step's quantizer writes
    std::vector<std::vector<float>> server_residual;  // (V) twophase: each logical rank's shard
    std::string output_dir;
    GradCommStats stats;
    // buckets (--bucket-mb; twophase communicates the whole gradient after the backward)
    GradBuckets buckets;
    std::vector<size_t> group_off;  // (units + 1, backward order) amax groups: one per unit, or one per 512-element block (fp8block)
    std::vector<float> amax, scale; // (groups, backward order)
    std::vector<float> packed;      // fp32: (V, num_params) the values in bucket order
    std::vector<uint16_t> packed16; // bf16: (V, num_params) the codes in bucket order
    // (q holds the FP8 codes in bucket order in the native modes, in the flat layout with twophase)
    // the step in flight, from gradcomm_start to gradcomm_finish
    CommGrid* grid;
    std::vector<float*> grads;      // (V) each logical rank's gradient; grads[0] receives the average
    int step;
    bool geometry;                  // the geometry path is on this step
    int units_ready, launched;      // units the backward has finished; buckets started
    std::vector<std::vector<MPI_Request>> reqs;  // (buckets) the MAX all-reduce of the amax in flight
    std::vector<CommFold> folds;    // (buckets) the SUM in flight
    int local_bad;                  // 1 + the highest logical rank of this process with a non-finite gradient (0: none)
    int stop_signal;                // in: this process's stop signal (0: none, llmc/run.h); out: the highest over ranks,
                                    // from gradcomm_finish's skip all-reduce, which carries it
    bool scale_skip;                // a non-finite amax (after the MAX all-reduce: on every rank alike)
    std::vector<GeoUnitSaved> saved_geo;  // (geo) kept at gradcomm_start, put back if a non-finite gradient skips the step
    std::vector<std::vector<std::vector<float>>> saved_residual;  // (geo, V) residuals before this step's quantization, put back if a scale skips it
    std::vector<std::string> chosen;  // (geo) this step's --geofp8-power auto choices
    // the fair fidelity figures (gradcomm_fair_step), on every geometry step while --fidelity-every > 0
    bool fair;                      // --fidelity-every > 0, a geometry mode, the native sum
    int fidelity_window;            // W
    std::vector<std::vector<float>> cf_residual;  // (V) fp8+EF's counterfactual residual, geometry units concatenated
    std::vector<float> win_exact, win_geo, win_fp8ef, win_fp8;  // the current window's sums (geometry units concatenated)
    int win_index, win_steps;       // the window (-1: none open) and its steps so far
} GradComm;

static inline bool gradcomm_is_fp8(const GradComm* gc) { return gc->mode != "fp32" && gc->mode != "bf16"; }

// The data pointers of V per-logical-rank buffers, for comm_fold.
template <typename T>
static inline std::vector<const void*> gradcomm_ptrs(const std::vector<std::vector<T>>& v) {
    std::vector<const void*> p;
    for (const std::vector<T>& x : v) p.push_back(x.data());
    return p;
}
// V slices of `stride` elements of one buffer, starting at `off`.
template <typename T>
static inline std::vector<const void*> gradcomm_slices(const T* base, int V, size_t stride, size_t off) {
    std::vector<const void*> p;
    for (int v = 0; v < V; v++) p.push_back(base + (size_t)v * stride + off);
    return p;
}

// Linear units: the 2-D hidden matrices qkv, proj, fc1, fc2.
static inline bool gradcomm_is_linear(const LlamaUnit& u) { return u.is_matrix; }

static inline int gradcomm_unit_by_name(const GradComm* gc, const std::string& name) {
    for (size_t i = 0; i < gc->units.size(); i++) if (gc->units[i].name == name) return (int)i;
    return -1;
}

// Puts unit u on the geometry path with an identity transform and a zero residual.
static inline void gradcomm_add_geo(GradComm* gc, int u) {
    const LlamaUnit& lu = gc->units[u];
    GeoUnit g;
    g.unit = u;
    g.d_out = lu.rows;
    g.d_in = lu.cols;
    g.residual.assign(gc->V, std::vector<float>((size_t)lu.rows * lu.cols, 0.0f));
    g.Y.assign(gc->V, {});
    g.trA.assign(gc->V, 0.0);
    g.Y_ema.assign(gc->V, {});
    g.trA_ema.assign(gc->V, 0.0);
    g.A.assign(gc->V, {});
    g.Gs.assign(gc->V, {});
    if (gc->mode == "kfac") {
        g.LA.assign((size_t)g.d_in * g.d_in, 0.0f);
        g.LG.assign((size_t)g.d_out * g.d_out, 0.0f);
        for (int i = 0; i < g.d_in; i++) g.LA[(size_t)i * g.d_in + i] = 1.0f;
        for (int i = 0; i < g.d_out; i++) g.LG[(size_t)i * g.d_out + i] = 1.0f;
    } else {
        geofp8_factor_identity(&g.factor, g.d_in, std::min(gc->rank_r, g.d_in));
    }
    gc->unit_to_geo[u] = (int)gc->geo.size();
    gc->geo.push_back(std::move(g));
}

// Validates the mode's settings (user_error) and sets up the state; call before any file is written.
// V: logical ranks per process (1, or --virtual-ranks / processes).
static inline void gradcomm_init(GradComm* gc, const TrainConfig* tc, const LlamaConfig* c, const CommGrid* g, int V = 1) {
    gc->mode = tc->comm;
    gc->twophase = tc->fp8_reduce == "twophase";
    gc->fmt = train_config_fp8_format(tc);
    gc->units = llama_units(c);
    gc->unit_to_geo.assign(gc->units.size(), -1);
    gc->num_params = llama_num_params(c);
    gc->world_size = g->world_size * V;
    gc->rank = g->rank;
    gc->V = V;
    gc->vrank0 = g->rank * V;
    gc->cur_v = 0;
    gc->rank_r = train_config_geofp8_rank(tc);
    gradcomm_check_full_rank(tc, c);
    gc->refresh_every = tc->geofp8_refresh;
    gc->profile_steps = tc->geofp8_profile_steps;
    gc->top_k = tc->geofp8_top;
    gc->power = train_config_geofp8_power(tc);
    gc->damping = tc->geofp8_damping;
    gc->ema = gc->mode == "geofp8" ? tc->geofp8_ema : 0.0f;
    gc->sketch_now = false;
    gc->seed = tc->seed;
    gc->profiling = false;
    gc->geometry_start = -1;
    gc->score_sum.assign(gc->units.size(), 0.0);
    gc->profiled_steps = 0;
    gc->refresh_now = false;
    gc->sketch_weight = 0.0f;
    gc->output_dir = tc->output_dir;
    gc->fp8_ef = tc->fp8_ef != 0 && gradcomm_is_fp8(gc);
    gc->fair = tc->fidelity_every > 0 && (gc->mode == "geofp8" || gc->mode == "kfac") && !gc->twophase;
    gc->fidelity_window = gradcomm_fidelity_window(tc);
    gc->win_index = -1;
    gc->win_steps = 0;
    if (gc->twophase && gc->mode == "fp8block")
        user_error("--fp8-reduce twophase: works with -c fp8, geofp8 or kfac, found -c fp8block (its per-block scales are synchronized; use native)");
    if (gc->mode == "geofp8") {
        if (tc->geofp8_layers == "auto") {
            gc->profiling = true;
        } else {
            std::vector<int> layers = gradcomm_parse_layers(gc->units, tc->geofp8_layers);
            for (int u : layers) gradcomm_add_geo(gc, u);
            gradcomm_print_layers(gc->units, layers, tc->geofp8_layers, gc->rank);
            gc->geometry_start = 0;
        }
    } else if (gc->mode == "kfac") {
        for (size_t u = 0; u < gc->units.size(); u++) if (gradcomm_is_linear(gc->units[u])) gradcomm_add_geo(gc, (int)u);
        gc->geometry_start = 0;
    }
    if (gradcomm_is_fp8(gc)) {
        gc->x.resize((size_t)V * gc->num_params);
        gc->q.resize((size_t)V * gc->num_params);
    }
    if (gc->fp8_ef) {
        gc->ef_residual.assign((size_t)V * gc->num_params, 0.0f);
        gc->ef_next.assign((size_t)V * gc->num_params, 0.0f);
    }
    size_t shard = (gc->num_params + gc->world_size - 1) / gc->world_size;
    if (gc->twophase) gc->server_residual.assign(V, std::vector<float>(shard, 0.0f));
    gc->buckets = gradcomm_buckets(gc->units, c->L, gc->twophase ? 0.0 : tc->bucket_mb);
    const GradBuckets& b = gc->buckets;
    gc->group_off.assign(b.order.size() + 1, 0);
    for (size_t i = 0; i < b.order.size(); i++) {
        size_t n = (size_t)gc->units[b.order[i]].rows * gc->units[b.order[i]].cols;
        gc->group_off[i + 1] = gc->group_off[i] + (gc->mode == "fp8block" ? geofp8_num_blocks(n, GEOFP8_BLOCK) : 1);
    }
    if (gradcomm_is_fp8(gc)) {
        gc->amax.resize(gc->group_off.back());
        gc->scale.resize(gc->group_off.back());
    }
    if (gc->mode == "fp32") gc->packed.resize((size_t)V * gc->num_params);
    if (gc->mode == "bf16") gc->packed16.resize((size_t)V * gc->num_params);
    gc->reqs.assign(gradcomm_num_buckets(&b), {});
    gc->folds.assign(gradcomm_num_buckets(&b), CommFold());
    gc->grid = NULL;
    gc->grads.clear();
    gc->units_ready = gc->launched = 0;
}

// With --geofp8-ema β > 0 the geofp8 units sketch their inputs on every step of the geometry
// path, not only on refresh steps. A window is the steps after one refresh up to and including
// the next (the first window: the first geometry step alone); its first step builds Ω (Ω ⊇ the
// current U after the first refresh, as a refresh step does without ema) and zeroes the average;
// every step adds its sketch Y as S <- β S + (1 - β) Y (gradcomm_ema_update), and the refresh
// takes S / (1 - β^n) over its n steps in place of its own step's Y. The average restarts with
// each window because Ω changes at each refresh (subspace iteration) and Y = A Ω only averages
// under one Ω; with K >= 1 / (1 - β) (K = --geofp8-refresh) nearly all of an unbroken average's
// weight would fall inside the window anyway.
static inline bool gradcomm_ema_window_start(const GradComm* gc, int step) {
    return step == gc->geometry_start || (step - gc->geometry_start - 1) % gc->refresh_every == 0;
}

// The first step >= from that builds Ω: a refresh step (with --geofp8-ema, a window's first
// step). -1 while the geometry path is not known yet, or has no Ω (kfac).
static inline int gradcomm_next_omega_step(const GradComm* gc, int from) {
    if (gc->geometry_start < 0 || gc->geo.empty() || gc->mode == "kfac") return -1;
    return geofp8_omega_next_step(from, gc->geometry_start, gc->refresh_every, gc->ema > 0.0f);
}

// The jobs that build every geometry unit's Ω of `step` into its omega_next, from the factor in
// use (geofp8_test_matrix's arguments, as every rank computes them).
static inline std::vector<GeoFP8OmegaJob> gradcomm_omega_jobs(GradComm* gc, int step) {
    std::vector<GeoFP8OmegaJob> jobs;
    for (GeoUnit& g : gc->geo) {
        GeoFP8OmegaJob j;
        j.d_in = g.d_in;
        j.r = g.factor.r;
        j.k = geofp8_sketch_width(j.r, g.d_in);
        j.first = step == gc->geometry_start;
        // identical on every rank: the shared seed, the unit and the step
        j.seed = gc->seed * 1000003ull + (uint64_t)g.unit * 7919ull + (uint64_t)step;
        if (!j.first) j.U_prev = g.factor.U;
        g.omega_next.resize((size_t)g.d_in * j.k);
        j.out = g.omega_next.data();
        jobs.push_back(std::move(j));
    }
    return jobs;
}

// Starts building the Ω of the first Ω step >= from on host threads, from the factors in use.
static inline void gradcomm_omega_prepare(GradComm* gc, int from) {
    const int t = gradcomm_next_omega_step(gc, from);
    if (t < 0) return;
    geofp8_omega_wait(&gc->omega_builder);  // the jobs write omega_next: none may be in flight
    geofp8_omega_start(&gc->omega_builder, t, gradcomm_omega_jobs(gc, t));
}

// After `step` is settled (kept or skipped, its factors final): the next refresh's Ω starts now
// if the factors may have changed (a refresh step) or nothing is building it yet.
static inline void gradcomm_end_step(GradComm* gc, int step) {
    const int t = gradcomm_next_omega_step(gc, step + 1);
    if (t >= 0 && (gc->refresh_now || gc->omega_builder.step != t)) gradcomm_omega_prepare(gc, step + 1);
}

// Every geometry unit's Ω of `step` into its omega: the builder's, if it ran for this step from
// the factors in use now; else built here (a factor loaded or put back since). Returns the
// seconds the step waited for it.
static inline double gradcomm_omega_install(GradComm* gc, int step) {
    double waited = 0.0;
    const std::vector<GeoFP8OmegaJob>* jobs = geofp8_omega_take(&gc->omega_builder, step, &waited);
    bool ok = jobs && jobs->size() == gc->geo.size();
    for (size_t i = 0; ok && i < gc->geo.size(); i++) {
        const GeoFP8OmegaJob& j = (*jobs)[i];
        ok = j.first == (step == gc->geometry_start) && j.r == gc->geo[i].factor.r && (j.first || j.U_prev == gc->geo[i].factor.U);
    }
    if (!ok) {
        const auto t0 = std::chrono::steady_clock::now();
        geofp8_omega_start(&gc->omega_builder, step, gradcomm_omega_jobs(gc, step), false);
        waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    for (GeoUnit& g : gc->geo) g.omega.swap(g.omega_next);
    gc->omega_builder.step = -1;  // its outputs are in use now
    return waited;
}

// Called before the micro-steps of `step`; tokens = tokens per optimizer step over all ranks.
static inline void gradcomm_begin_step(GradComm* gc, int step, long long tokens) {
    const bool geometry = gc->geometry_start >= 0 && step >= gc->geometry_start && !gc->geo.empty();
    gc->refresh_now = geometry && (step - gc->geometry_start) % gc->refresh_every == 0;
    gc->sketch_now = gc->ema > 0.0f ? geometry : gc->refresh_now;
    gc->sketch_weight = (float)(1.0 / (double)tokens);
    gc->stats.omega_seconds = 0.0;
    if (!gc->sketch_now) return;
    const bool new_window = gc->ema > 0.0f ? gradcomm_ema_window_start(gc, step) : true;
    if (new_window && gc->mode != "kfac") gc->stats.omega_seconds = gradcomm_omega_install(gc, step);
    for (size_t i = 0; i < gc->geo.size(); i++) {
        GeoUnit& g = gc->geo[i];
        if (gc->mode == "kfac") {
            for (int v = 0; v < gc->V; v++) {
                g.A[v].assign((size_t)g.d_in * g.d_in, 0.0f);
                g.Gs[v].assign((size_t)g.d_out * g.d_out, 0.0f);
            }
            continue;
        }
        int r = g.factor.r, k = geofp8_sketch_width(r, g.d_in);
        if (new_window && gc->ema > 0.0f) {
            for (int v = 0; v < gc->V; v++) g.Y_ema[v].assign((size_t)g.d_in * k, 0.0f), g.trA_ema[v] = 0.0;
            g.ema_steps = 0;
        }
        for (int v = 0; v < gc->V; v++) g.Y[v].assign((size_t)g.d_in * k, 0.0f), g.trA[v] = 0.0;
    }
}

// The micro-steps that follow are logical rank vrank0 + v's: its sketches collect their inputs.
static inline void gradcomm_set_vrank(GradComm* gc, int v) { gc->cur_v = v; }

// --geofp8-ema, after the backward of a sketching step: S <- β S + (1 - β) Y for each unit.
static inline void gradcomm_ema_update(GradComm* gc) {
    const float b = gc->ema, a = 1.0f - gc->ema;
    for (GeoUnit& g : gc->geo) {
        for (int v = 0; v < gc->V; v++) {
            for (size_t i = 0; i < g.Y[v].size(); i++) g.Y_ema[v][i] = b * g.Y_ema[v][i] + a * g.Y[v][i];
            g.trA_ema[v] = (double)b * g.trA_ema[v] + (double)a * g.trA[v];
        }
        g.ema_steps++;
    }
}

// --geofp8-ema, at a refresh: this rank's part of the window's bias-corrected average into Y and
// tr(A), which the refresh then SUM-reduces as it does a single step's sketch.
static inline void gradcomm_ema_to_sketch(GradComm* gc) {
    for (GeoUnit& g : gc->geo) {
        const double c = 1.0 / (1.0 - pow((double)gc->ema, (double)g.ema_steps));
        for (int v = 0; v < gc->V; v++) {
            for (size_t i = 0; i < g.Y[v].size(); i++) g.Y[v][i] = (float)((double)g.Y_ema[v][i] * c);
            g.trA[v] = g.trA_ema[v] * c;
        }
    }
}

// Does unit (tensor, layer) want its input activations / output gradients this step?
static inline GeoUnit* gradcomm_geo_unit(GradComm* gc, int unit) {
    if (!gc->sketch_now || unit < 0) return NULL;
    int gi = gc->unit_to_geo[unit];
    return gi < 0 ? NULL : &gc->geo[gi];
}
static inline bool gradcomm_wants_activations(const GradComm* gc) { return gc->sketch_now; }
static inline bool gradcomm_wants_output_grads(const GradComm* gc) { return gc->refresh_now && gc->mode == "kfac"; }

// h (n, d_in): the input of `unit` in one micro-batch.
static inline void gradcomm_observe_input(GradComm* gc, int unit, const float* h, int n) {
    GeoUnit* g = gradcomm_geo_unit(gc, unit);
    if (!g) return;
    const int v = gc->cur_v;
    if (gc->mode == "kfac") {
        geofp8_kfac_accumulate(g->A[v].data(), h, n, g->d_in, gc->sketch_weight);
    } else {
        int k = geofp8_sketch_width(g->factor.r, g->d_in);
        geofp8_sketch_accumulate(g->Y[v].data(), &g->trA[v], h, n, g->d_in, g->omega.data(), k, gc->sketch_weight);
    }
}

// delta (n, d_out): the gradient at the output of `unit` in one micro-batch (kfac only).
static inline void gradcomm_observe_output_grad(GradComm* gc, int unit, const float* delta, int n) {
    GeoUnit* g = gradcomm_geo_unit(gc, unit);
    if (!g || gc->mode != "kfac") return;
    geofp8_kfac_accumulate(g->Gs[gc->cur_v].data(), delta, n, g->d_out, gc->sketch_weight);
}

static inline double gradcomm_ring_bytes(const GradComm* gc, double payload) {
    return gc->world_size > 1 ? 2.0 * (gc->world_size - 1) / gc->world_size * payload : 0.0;
}

// The new factor of one geometry unit from this step's sketches, folded over the logical ranks
// (every rank ends with bitwise the same factor), with each logical rank's residual carried into
// the new coordinates. With --geofp8-power auto, logical rank 0 picks the unit's power from its
// own gradient of this step (grads, flat layout) along the new eigenvectors (geofp8_estimate_q)
// and describes the choice in *chosen. Returns the bytes it sent.
static inline double gradcomm_refresh_unit(GradComm* gc, CommGrid* grid, GeoUnit& g, const float* grads, std::string* chosen) {
    double bytes = 0.0;
    const int V = gc->V;
    if (gc->mode == "kfac") {
        comm_fold(grid, COMM_FOLD_F32, gradcomm_ptrs(g.A).data(), V, g.A[0].data(), g.A[0].size());
        comm_fold(grid, COMM_FOLD_F32, gradcomm_ptrs(g.Gs).data(), V, g.Gs[0].data(), g.Gs[0].size());
        bytes += gradcomm_ring_bytes(gc, 4.0 * (g.A[0].size() + g.Gs[0].size()));
        std::vector<float> LA((size_t)g.d_in * g.d_in), LG((size_t)g.d_out * g.d_out);
        if (gc->rank == 0) {
            geofp8_kfac_factor(LA.data(), g.A[0].data(), g.d_in);
            geofp8_kfac_factor(LG.data(), g.Gs[0].data(), g.d_out);
        }
        comm_broadcast_floats(grid, LA.data(), LA.size());
        comm_broadcast_floats(grid, LG.data(), LG.size());
        bytes += 4.0 * (LA.size() + LG.size());
        // R <- whiten_new(unwhiten_old(R))
        for (std::vector<float>& R : g.residual) {
            geofp8_kfac_unwhiten(R.data(), R.data(), g.d_out, g.d_in, g.LG.data(), g.LA.data());
            geofp8_kfac_whiten(R.data(), R.data(), g.d_out, g.d_in, LG.data(), LA.data());
        }
        g.LA.swap(LA);
        g.LG.swap(LG);
        return bytes;
    }
    int r = g.factor.r, k = geofp8_sketch_width(r, g.d_in);
    comm_fold(grid, COMM_FOLD_F32, gradcomm_ptrs(g.Y).data(), V, g.Y[0].data(), g.Y[0].size());
    {
        std::vector<const void*> t;
        for (int v = 0; v < V; v++) t.push_back(&g.trA[v]);
        comm_fold(grid, COMM_FOLD_F64, t.data(), V, &g.trA[0], 1);
    }
    const double trA = g.trA[0];
    bytes += gradcomm_ring_bytes(gc, 4.0 * g.Y[0].size() + 8.0);
    std::vector<float> packed(geofp8_factor_floats(g.d_in, r));
    if (gc->rank == 0) {
        std::vector<float> U((size_t)g.d_in * r), lambda(r);
        float sigma2 = 0.0f;
        geofp8_nystrom(U.data(), lambda.data(), &sigma2, g.Y[0].data(), g.omega.data(), trA, g.d_in, k, r);
        double power = gc->power;
        if (power < 0.0) {
            double q = 0.0;
            power = geofp8_choose_power(grads + gc->units[g.unit].offset, g.d_out, g.d_in, U.data(), lambda.data(), sigma2, r,
                                        gc->damping * trA / g.d_in, &q);
            char b[96];
            snprintf(b, sizeof(b), "%s p %.3f (q %.3f)", gc->units[g.unit].name.c_str(), power, q);
            *chosen = b;
        }
        GeoFP8Factor f;
        geofp8_factor_from_nystrom(&f, U.data(), lambda.data(), sigma2, trA, g.d_in, r, power, gc->damping);
        geofp8_factor_pack(packed.data(), &f);
    }
    comm_broadcast_floats(grid, packed.data(), packed.size());
    bytes += 4.0 * packed.size();
    GeoFP8Factor fresh;
    geofp8_factor_unpack(&fresh, packed.data(), g.d_in, r);
    for (std::vector<float>& R : g.residual) geofp8_carry_residual(R.data(), g.d_out, g.d_in, &g.factor, &fresh, NULL);
    g.factor = std::move(fresh);
    return bytes;
}

static inline void gradcomm_whiten(const GradComm* gc, const GeoUnit& g, float* out, const float* G) {
    if (gc->mode == "kfac") geofp8_kfac_whiten(out, G, g.d_out, g.d_in, g.LG.data(), g.LA.data());
    else geofp8_whiten(out, G, g.d_out, g.d_in, &g.factor, NULL);
}

static inline void gradcomm_unwhiten(const GradComm* gc, const GeoUnit& g, float* inout) {
    if (gc->mode == "kfac") geofp8_kfac_unwhiten(inout, inout, g.d_out, g.d_in, g.LG.data(), g.LA.data());
    else geofp8_unwhiten(inout, inout, g.d_out, g.d_in, &g.factor, NULL);
}

static inline size_t gradcomm_unit_size(const LlamaUnit& u) { return (size_t)u.rows * u.cols; }

// Counts codes at ± the format's largest finite value in q (n).
static inline long gradcomm_count_max_codes(Fp8Format f, const uint8_t* q, size_t n) {
    const uint8_t max_code = fp8_format_max_code(f);
    long c = 0;
    for (size_t i = 0; i < n; i++) c += (q[i] & 0x7Fu) == max_code;
    return c;
}

// Where the quantizer of logical rank v writes unit lu's new error-feedback residual: the
// geometry unit's own (gi >= 0), the --fp8-ef buffer of the next step, or nowhere (NULL).
static inline float* gradcomm_residual_out(GradComm* gc, int gi, int v, const LlamaUnit& lu) {
    if (gi >= 0) return gc->geo[gi].residual[v].data();
    return gc->fp8_ef ? gc->ef_next.data() + (size_t)v * gc->num_params + lu.offset : NULL;
}

// twophase (DESIGN §5.2): local per-unit scales; an FP8 all-to-all hands logical rank j shard j
// of every logical rank's codes (and every rank's scales); rank j decodes and sums in fp32 in
// rank order, adds its server residual, re-quantizes its shard with per-unit scales of its own,
// keeps the new residual; an FP8 all-gather returns codes and scales to everyone. With V logical
// ranks per process, process p serves shards pV..pV+V-1 (consecutive in the flat layout). The
// average goes to grads (num_params).
static inline bool gradcomm_twophase(GradComm* gc, CommGrid* grid, float* grads) {
    GradCommStats& st = gc->stats;
    const int N = gc->world_size, U = (int)gc->units.size(), V = gc->V, P = grid->world_size;
    const size_t NP = gc->num_params, shard = (NP + N - 1) / N;
    std::vector<int> exps((size_t)V * U);
    int bad = 0;
    for (int v = 0; v < V; v++)
        for (int u = 0; u < U; u++) {
            const LlamaUnit& lu = gc->units[u];
            int e = geofp8_scale_exponent(gc->fmt, geofp8_amax(gc->x.data() + (size_t)v * NP + lu.offset, gradcomm_unit_size(lu)), 1);
            if (e == GEOFP8_EXP_SKIP) { bad = 1; e = 0; }
            exps[(size_t)v * U + u] = e;
        }
    if (comm_max_int(grid, bad)) return false;
    for (int v = 0; v < V; v++)
        for (int u = 0; u < U; u++) {
            const LlamaUnit& lu = gc->units[u];
            const size_t n = gradcomm_unit_size(lu);
            const float* x = gc->x.data() + (size_t)v * NP + lu.offset;
            const float s = geofp8_scale_from_exponent(exps[(size_t)v * U + u]);
            long sat, und, nz;
            geofp8_count_saturated_underflow(gc->fmt, x, n, s, &sat, &und, &nz);
            st.saturated[u] += sat; st.underflow[u] += und; st.nonzero[u] += nz;
            int gi = gc->unit_to_geo[u];
            geofp8_quantize_ef(gc->fmt, gc->q.data() + (size_t)v * NP + lu.offset, gradcomm_residual_out(gc, gi, v, lu), x, n, s);
        }
    // shard j of the flat layout belongs to logical rank j
    std::vector<size_t> off(N), len(N);
    for (int j = 0; j < N; j++) {
        off[j] = std::min(NP, (size_t)j * shard);
        len[j] = std::min(NP, (size_t)(j + 1) * shard) - off[j];
    }
    // every logical rank's scales, in rank order (process p contributes ranks pV..pV+V-1)
    std::vector<int> all_exps((size_t)N * U);
    comm_allgather_ints(grid, exps.data(), V * U, all_exps.data());
    // recv[w]: shard vrank0 + w of every logical rank's codes, rank s at s * len
    const int me = gc->rank;
    std::vector<std::vector<uint8_t>> recv(V);
    for (int w = 0; w < V; w++) recv[w].resize((size_t)N * len[gc->vrank0 + w]);
    if (P == 1) {
        for (int w = 0; w < V; w++)
            for (int s2 = 0; s2 < N; s2++) memcpy(recv[w].data() + (size_t)s2 * len[w], gc->q.data() + (size_t)s2 * NP + off[w], len[w]);
    } else {
        // to process t: for each of my logical ranks v (in order), the shards of t's logical ranks (in order)
        std::vector<int> scount(P), sdispl(P), rcount(P), rdispl(P);
        size_t so = 0, ro = 0, mine_len = 0;
        for (int w = 0; w < V; w++) mine_len += len[gc->vrank0 + w];
        for (int t = 0; t < P; t++) {
            size_t lt = 0;
            for (int w = 0; w < V; w++) lt += len[t * V + w];
            scount[t] = (int)(V * lt); sdispl[t] = (int)so; so += V * lt;
            rcount[t] = (int)(V * mine_len); rdispl[t] = (int)ro; ro += V * mine_len;
        }
        std::vector<uint8_t> send(so), got(ro);
        size_t o = 0;
        for (int t = 0; t < P; t++)
            for (int v = 0; v < V; v++)
                for (int w = 0; w < V; w++) {
                    const int j = t * V + w;
                    memcpy(send.data() + o, gc->q.data() + (size_t)v * NP + off[j], len[j]);
                    o += len[j];
                }
        MPI_CHECK(MPI_Alltoallv(send.data(), scount.data(), sdispl.data(), MPI_BYTE, got.data(), rcount.data(), rdispl.data(), MPI_BYTE,
                                grid->comm));
        o = 0;
        for (int t = 0; t < P; t++)
            for (int v = 0; v < V; v++)
                for (int w = 0; w < V; w++) {
                    const size_t l = len[gc->vrank0 + w];
                    memcpy(recv[w].data() + (size_t)(t * V + v) * l, got.data() + o, l);
                    o += l;
                }
    }
    st.bytes += (N - 1) * 4.0 * U + (N > 1 ? (double)(N - 1) / N * NP : 0.0);  // scales, then codes
    // each server: sum in rank order, per unit segment of its shard, then re-quantize
    std::vector<int> server_exps((size_t)V * U, 0);
    size_t mine_total = 0;
    for (int w = 0; w < V; w++) mine_total += len[gc->vrank0 + w];
    std::vector<uint8_t> mine(mine_total);
    size_t mo = 0;
    for (int w = 0; w < V; w++) {
        const int j = gc->vrank0 + w;
        const size_t lo = off[j], l = len[j];
        std::vector<float> sum(l);
        for (int u = 0; u < U; u++) {
            const LlamaUnit& lu = gc->units[u];
            size_t a = std::max(lu.offset, lo), b = std::min(lu.offset + gradcomm_unit_size(lu), lo + l);
            if (a >= b) continue;
            for (size_t i = a; i < b; i++) {
                float acc = 0.0f;
                for (int r = 0; r < N; r++)
                    acc += fp8_decode(gc->fmt, recv[w][(size_t)r * l + (i - lo)]) / geofp8_scale_from_exponent(all_exps[(size_t)r * U + u]);
                sum[i - lo] = acc + gc->server_residual[w][i - lo];
            }
            int e = geofp8_scale_exponent(gc->fmt, geofp8_amax(sum.data() + (a - lo), b - a), 1);
            if (e == GEOFP8_EXP_SKIP) e = 0;  // cannot happen: every input was finite
            server_exps[(size_t)w * U + u] = e;
            geofp8_quantize_ef(gc->fmt, mine.data() + mo + (a - lo), gc->server_residual[w].data() + (a - lo), sum.data() + (a - lo), b - a,
                               geofp8_scale_from_exponent(e));
        }
        mo += l;
    }
    // the servers' shards, consecutive per process, to everyone; and their scales
    std::vector<uint8_t> gathered(NP);
    if (P == 1) {
        memcpy(gathered.data(), mine.data(), NP);
    } else {
        std::vector<int> count(P), displ(P);
        for (int t = 0; t < P; t++) {
            size_t lt = 0;
            for (int w = 0; w < V; w++) lt += len[t * V + w];
            count[t] = (int)lt;
            displ[t] = (int)off[t * V];
        }
        MPI_CHECK(MPI_Allgatherv(mine.data(), count[me], MPI_BYTE, gathered.data(), count.data(), displ.data(), MPI_BYTE, grid->comm));
    }
    std::vector<int> all_server((size_t)N * U);
    comm_allgather_ints(grid, server_exps.data(), V * U, all_server.data());
    st.bytes += (N > 1 ? (double)(N - 1) / N * NP : 0.0) + (N - 1) * 4.0 * U;
    for (int u = 0; u < U; u++) {
        const LlamaUnit& lu = gc->units[u];
        size_t end = lu.offset + gradcomm_unit_size(lu);
        for (int j = 0; j < N; j++) {
            size_t a = std::max(lu.offset, off[j]), b = std::min(end, off[j] + len[j]);
            if (a >= b) continue;
            geofp8_dequantize(gc->fmt, grads + a, gathered.data() + a, b - a, geofp8_scale_from_exponent(all_server[(size_t)j * U + u]), N);
        }
    }
    return true;
}

// Scores this step's fc1/fc2 units while profiling; at the end of the window, puts the chosen
// units on the geometry path from the next step (llmc/gradcomm_common.h).
static inline void gradcomm_profile(GradComm* gc, int step) {
    gradcomm_profile_accumulate(&gc->score_sum, gc->units, gc->stats, gc->world_size);
    if (++gc->profiled_steps < gc->profile_steps) return;
    gc->profiling = false;
    gc->geometry_start = step + 1;
    for (int u : gradcomm_profile_select(gc->score_sum, gc->profiled_steps, gc->units, gc->top_k, gc->rank, gc->output_dir, gc->geometry_start)) {
        gradcomm_add_geo(gc, u);
        if (!gc->fp8_ef) continue;
        // --fp8-ef: the unit's residual moves to the geometry path (identity coordinates until the
        // refresh of its first step carries it), and its part of the flat buffers is zeroed
        const size_t o = gc->units[u].offset, n = gradcomm_unit_size(gc->units[u]);
        GeoUnit& g = gc->geo.back();
        for (int v = 0; v < gc->V; v++) {
            float* r = gc->ef_residual.data() + (size_t)v * gc->num_params + o;
            memcpy(g.residual[v].data(), r, n * sizeof(float));
            std::fill(r, r + n, 0.0f);
            std::fill(gc->ef_next.begin() + (size_t)v * gc->num_params + o, gc->ef_next.begin() + (size_t)v * gc->num_params + o + n, 0.0f);
        }
    }
}

// Plain fp8 of the geometry units, as the native fp8 mode would communicate them: raw (V) holds
// each logical rank's G of them as the backward left it (units in gc->geo order, concatenated,
// unit i at off[i]); x = G (+ R), one scale per unit from a MAX all-reduce of its amax, FP8 SUM (a
// fold in rank order), decoded and divided by N into out (off[ng]). residual (V) or NULL: error
// feedback, R <- x - decode(q)/s. No transform. False if an amax is not finite (then every rank
// returns false and nothing changed).
static inline bool gradcomm_fp8_geo_sum(GradComm* gc, CommGrid* grid, const std::vector<std::vector<float>>& raw, const std::vector<size_t>& off,
                                        std::vector<std::vector<float>>* residual, float* out) {
    const size_t ng = gc->geo.size(), total = off[ng];
    const int V = gc->V;
    std::vector<std::vector<float>> x(raw);
    if (residual)
        for (int v = 0; v < V; v++)
            for (size_t k = 0; k < total; k++) x[v][k] += (*residual)[v][k];
    std::vector<float> amax(ng, 0.0f);
    for (int v = 0; v < V; v++)
        for (size_t i = 0; i < ng; i++) amax[i] = std::max(amax[i], geofp8_amax(x[v].data() + off[i], off[i + 1] - off[i]));
    comm_max_floats(grid, amax.data(), ng);
    std::vector<float> scale(ng);
    for (size_t i = 0; i < ng; i++) {
        int e = geofp8_scale_exponent(gc->fmt, amax[i], gc->world_size);
        if (e == GEOFP8_EXP_SKIP) return false;  // every rank sees the same amax
        scale[i] = geofp8_scale_from_exponent(e);
    }
    std::vector<std::vector<uint8_t>> q(V, std::vector<uint8_t>(total));
    for (int v = 0; v < V; v++)
        for (size_t i = 0; i < ng; i++)
            geofp8_quantize_ef(gc->fmt, q[v].data() + off[i], residual ? (*residual)[v].data() + off[i] : NULL, x[v].data() + off[i],
                               off[i + 1] - off[i], scale[i]);
    comm_fold(grid, comm_fold_kind_fp8(gc->fmt), gradcomm_ptrs(q).data(), V, q[0].data(), total);
    for (size_t i = 0; i < ng; i++) geofp8_dequantize(gc->fmt, out + off[i], q[0].data() + off[i], off[i + 1] - off[i], scale[i], gc->world_size);
    return true;
}

// The fair fidelity figures of one step of the geometry path (native sum), on every such step
// while --fidelity-every > 0: the counterfactual residual and the windows need every step.
//   (a) geo:    the geometry units' average as communicated (in grads, after the inverse transform);
//   (b) fp8+EF: plain fp8 of the same gradients with an error-feedback residual of its own
//               (cf_residual, per logical rank; a counterfactual, never applied to the model);
//   (c) fp8:    plain fp8 of the same gradients without error feedback;
// each against the exact average of the same units (an fp32 fold in rank order, divided by N).
// On fidelity steps the step's RelL2 of (b) and (c) go to the stats ((a) is rel_l2_geo). Windows:
// tumbling windows of W steps counted from the first geometry step (W = --fidelity-window, or the
// refresh interval, so that a window is one factor's life); each sums (a), (b), (c) and the exact
// average over its steps, and at its last step the stats get each sum's RelL2 against the exact
// sum. A window that a skipped step or a resume cut short reports the steps it has. The extra
// communication (two MAX all-reduces and three folds of the geometry units) is not counted in
// the step's bytes.
static inline void gradcomm_fair_step(GradComm* gc, CommGrid* grid, const std::vector<std::vector<float>>& raw, bool fidelity) {
    GradCommStats& st = gc->stats;
    const size_t ng = gc->geo.size();
    const int V = gc->V;
    std::vector<size_t> off(ng + 1, 0);
    for (size_t i = 0; i < ng; i++) off[i + 1] = off[i] + gradcomm_unit_size(gc->units[gc->geo[i].unit]);
    const size_t total = off[ng];
    if (gc->cf_residual.size() != (size_t)V || gc->cf_residual[0].size() != total) gc->cf_residual.assign(V, std::vector<float>(total, 0.0f));
    std::vector<float> exact(total), geo(total), fp8ef(total), fp8(total);
    comm_fold(grid, COMM_FOLD_F32, gradcomm_ptrs(raw).data(), V, exact.data(), total);
    for (float& e : exact) e /= (float)gc->world_size;
    for (size_t i = 0; i < ng; i++) memcpy(geo.data() + off[i], gc->grads[0] + gc->units[gc->geo[i].unit].offset, (off[i + 1] - off[i]) * sizeof(float));
    if (!gradcomm_fp8_geo_sum(gc, grid, raw, off, &gc->cf_residual, fp8ef.data())) fp8ef.assign(total, NAN);
    if (!gradcomm_fp8_geo_sum(gc, grid, raw, off, NULL, fp8.data())) fp8.assign(total, NAN);
    if (const char* dir = getenv("TRAIN_LLAMA_TEST_DUMP_GEO")) {
        char name[4096];
        for (int v = 0; v < V; v++) {
            snprintf(name, sizeof(name), "%s/s%d_r%d.f32", dir, gc->step + 1, gc->vrank0 + v);
            gradcomm_test_dump(name, raw[v].data(), total);
        }
        snprintf(name, sizeof(name), "%s/s%d_geo.f32", dir, gc->step + 1);
        if (gc->rank == 0) {
            gradcomm_test_dump(name, geo.data(), total);
            std::vector<size_t> sizes;
            for (size_t i = 0; i < ng; i++) sizes.push_back(off[i + 1] - off[i]);
            gradcomm_test_dump_sizes(dir, sizes);
        }
    }
    if (fidelity) {
        st.rel_l2_geo_fp8ef = gradcomm_rel_l2(fp8ef.data(), exact.data(), total);
        st.rel_l2_geo_fp8 = gradcomm_rel_l2(fp8.data(), exact.data(), total);
    }
    const int W = gc->fidelity_window, age = gc->step - gc->geometry_start;
    if (age / W != gc->win_index) {
        gc->win_index = age / W;
        gc->win_steps = 0;
        for (std::vector<float>* w : {&gc->win_exact, &gc->win_geo, &gc->win_fp8ef, &gc->win_fp8}) w->assign(total, 0.0f);
    }
    for (size_t k = 0; k < total; k++) {
        gc->win_exact[k] += exact[k];
        gc->win_geo[k] += geo[k];
        gc->win_fp8ef[k] += fp8ef[k];
        gc->win_fp8[k] += fp8[k];
    }
    gc->win_steps++;
    if ((age + 1) % W == 0) {
        st.has_window = true;
        st.window_steps = gc->win_steps;
        st.win_rel_l2_geo = gradcomm_rel_l2(gc->win_geo.data(), gc->win_exact.data(), total);
        st.win_rel_l2_geo_fp8ef = gradcomm_rel_l2(gc->win_fp8ef.data(), gc->win_exact.data(), total);
        st.win_rel_l2_geo_fp8 = gradcomm_rel_l2(gc->win_fp8.data(), gc->win_exact.data(), total);
        gc->win_index = -1;
    }
}

// ----------------------------------------------------------------------------
// the step's communication, bucket by bucket (--bucket-mb)
//
// gradcomm_start before the last micro-step's backward, gradcomm_unit_ready from that backward as
// it finishes each unit's gradient, gradcomm_finish after it. When the last unit of bucket b is
// finished, gradcomm_launch(b) checks the bucket for non-finite values and starts its
// communication: fp32 packs the values and starts their SUM all-reduce, bf16 encodes them and
// starts a bf16 SUM; the FP8 modes refresh the bucket's geometry factors on a refresh step, form
// X (G, or G T + R on the geometry path), take each scale group's amax and start its MAX
// all-reduce. Bucket b's FP8 codes are quantized and their SUM started at the launch of bucket
// b + 1 (its amax has had a bucket's backward to arrive), not whenever that amax arrives: every
// rank must start the same collectives in the same order. gradcomm_finish waits for the rest and
// decodes. Scales, error feedback and transforms are per unit, so every bucket layout gives the
// same result wherever MPI sums each element in the same order. twophase forms X bucket by bucket
// and communicates after the backward (its shards span the whole gradient).

static inline bool gradcomm_all_finite(const float* x, size_t n) {
    int bad = 0;
    #pragma omp parallel for schedule(static) reduction(|:bad)
    for (size_t i = 0; i < n; i++) bad |= !std::isfinite(x[i]);
    return !bad;
}

// Bucket b's FP8 codes: scales from the reduced amax, quantization of every logical rank's values
// (error feedback on the geometry units, whose residuals are kept first in case the step is
// skipped), start of the SUM. A non-finite amax (every rank alike) sets scale_skip: no codes are
// sent from then on.
static inline void gradcomm_fp8_send(GradComm* gc, int b) {
    const GradBuckets& bk = gc->buckets;
    GradCommStats& st = gc->stats;
    const int V = gc->V;
    const size_t NP = gc->num_params;
    comm_wait_all(&gc->reqs[b]);
    const size_t g0 = gc->group_off[bk.first[b]], g1 = gc->group_off[bk.first[b + 1]];
    if (geofp8_block_scales(gc->fmt, gc->scale.data() + g0, gc->amax.data() + g0, g1 - g0, gc->world_size) > 0) gc->scale_skip = true;
    if (gc->scale_skip) return;
    const bool block = gc->mode == "fp8block";
    for (int i = bk.first[b]; i < bk.first[b + 1]; i++) {
        const int u = bk.order[i], gi = gc->unit_to_geo[u];
        const LlamaUnit& lu = gc->units[u];
        const size_t n = gradcomm_unit_size(lu);
        const float* sc = gc->scale.data() + gc->group_off[i];
        const bool ef = !block && gi >= 0 && gc->geometry_start >= 0;  // error feedback on the geometry path
        if (ef) gc->saved_residual[gi] = gc->geo[gi].residual;
        for (int v = 0; v < V; v++) {
            const float* x = gc->x.data() + (size_t)v * NP + lu.offset;
            uint8_t* q = gc->q.data() + (size_t)v * NP + bk.packed[u];
            if (block) {
                for (size_t k = 0; k * GEOFP8_BLOCK < n; k++) {
                    size_t off = k * GEOFP8_BLOCK, len = std::min((size_t)GEOFP8_BLOCK, n - off);
                    long sat, und, nz;
                    geofp8_count_saturated_underflow(gc->fmt, x + off, len, sc[k], &sat, &und, &nz);
                    st.saturated[u] += sat; st.underflow[u] += und; st.nonzero[u] += nz;
                }
                geofp8_quantize_ef_block(gc->fmt, q, gradcomm_residual_out(gc, -1, v, lu), x, n, GEOFP8_BLOCK, sc);
            } else {
                long sat, und, nz;
                geofp8_count_saturated_underflow(gc->fmt, x, n, sc[0], &sat, &und, &nz);
                st.saturated[u] += sat; st.underflow[u] += und; st.nonzero[u] += nz;
                geofp8_quantize_ef(gc->fmt, q, ef ? gc->geo[gi].residual[v].data() : gradcomm_residual_out(gc, -1, v, lu), x, n, sc[0]);
            }
        }
    }
    const size_t p0 = bk.begin[b], np = bk.begin[b + 1] - p0;
    comm_fold_start(gc->grid, comm_fold_kind_fp8(gc->fmt), gradcomm_slices(gc->q.data(), V, NP, p0).data(), V, gc->q.data() + p0, np,
                    &gc->folds[b]);
    st.bytes += gradcomm_ring_bytes(gc, (double)np);
}

// Starts bucket b's communication (see above).
static inline void gradcomm_launch(GradComm* gc, int b) {
    const GradBuckets& bk = gc->buckets;
    GradCommStats& st = gc->stats;
    CommGrid* grid = gc->grid;
    const int V = gc->V;
    const size_t NP = gc->num_params, p0 = bk.begin[b], np = bk.begin[b + 1] - p0;
    for (int i = bk.first[b]; i < bk.first[b + 1]; i++) {
        const LlamaUnit& lu = gc->units[bk.order[i]];
        for (int v = 0; v < V; v++)
            if (!gradcomm_all_finite(gc->grads[v] + lu.offset, gradcomm_unit_size(lu))) gc->local_bad = std::max(gc->local_bad, gc->vrank0 + v + 1);
    }
    if (gc->mode == "fp32" || gc->mode == "bf16") {
        for (int v = 0; v < V; v++)
            for (int i = bk.first[b]; i < bk.first[b + 1]; i++) {
                const int u = bk.order[i];
                const float* G = gc->grads[v] + gc->units[u].offset;
                const size_t n = gradcomm_unit_size(gc->units[u]), o = (size_t)v * NP + bk.packed[u];
                if (gc->mode == "fp32") memcpy(gc->packed.data() + o, G, n * sizeof(float));
                else for (size_t k = 0; k < n; k++) gc->packed16[o + k] = fp8_bf16_encode(G[k]);
            }
        if (gc->mode == "fp32")
            comm_fold_start(grid, COMM_FOLD_F32, gradcomm_slices(gc->packed.data(), V, NP, p0).data(), V, gc->packed.data() + p0, np, &gc->folds[b]);
        else
            comm_fold_start(grid, COMM_FOLD_BF16, gradcomm_slices(gc->packed16.data(), V, NP, p0).data(), V, gc->packed16.data() + p0, np,
                            &gc->folds[b]);
        st.bytes += gradcomm_ring_bytes(gc, (gc->mode == "fp32" ? 4.0 : 2.0) * np);
        return;
    }
    if (b > 0 && !gc->twophase) gradcomm_fp8_send(gc, b - 1);  // the previous bucket's codes first
    for (int i = bk.first[b]; i < bk.first[b + 1]; i++) {
        const int u = bk.order[i], gi = gc->unit_to_geo[u];
        const LlamaUnit& lu = gc->units[u];
        const size_t n = gradcomm_unit_size(lu);
        if (gi >= 0 && gc->refresh_now) {
            const auto t0 = std::chrono::steady_clock::now();
            st.bytes += gradcomm_refresh_unit(gc, grid, gc->geo[gi], gc->grads[0], &gc->chosen[gi]);
            st.refresh_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
        float* amax = gc->amax.data() + gc->group_off[i];
        const size_t groups = gc->group_off[i + 1] - gc->group_off[i];
        std::vector<float> a(groups);
        for (int v = 0; v < V; v++) {
            float* x = gc->x.data() + (size_t)v * NP + lu.offset;
            memcpy(x, gc->grads[v] + lu.offset, n * sizeof(float));
            if (gi >= 0 && gc->geometry) {  // X = G T + R
                const GeoUnit& g = gc->geo[gi];
                gradcomm_whiten(gc, g, x, x);
                for (size_t k = 0; k < n; k++) x[k] += g.residual[v][k];
            } else if (gc->fp8_ef) {  // X = G + R
                const float* R = gc->ef_residual.data() + (size_t)v * NP + lu.offset;
                for (size_t k = 0; k < n; k++) x[k] += R[k];
            }
            if (gc->twophase) continue;
            // the group's amax over this process's logical ranks (then the MAX over processes)
            if (gc->mode == "fp8block") geofp8_block_amax(a.data(), x, n, GEOFP8_BLOCK);
            else a[0] = geofp8_amax(x, n);
            for (size_t k = 0; k < groups; k++) amax[k] = v == 0 ? a[k] : std::max(amax[k], a[k]);
        }
    }
    if (gc->twophase) return;
    const size_t g0 = gc->group_off[bk.first[b]], g1 = gc->group_off[bk.first[b + 1]];
    comm_imax_floats(grid, gc->amax.data() + g0, g1 - g0, &gc->reqs[b]);
    st.bytes += gradcomm_ring_bytes(gc, 4.0 * (g1 - g0));
}

// Before the last micro-step's backward of `step` (of the last logical rank of this process):
// grads (V) are the logical ranks' gradient buffers; that backward finishes the last one.
static inline void gradcomm_start(GradComm* gc, CommGrid* grid, float* const* grads, int step) {
    GradCommStats& st = gc->stats;
    const size_t U = gc->units.size();
    st.bytes = 0.0;
    st.skipped = false;
    st.refreshed = false;
    st.refresh_seconds = 0.0;
    st.has_fidelity = false;
    st.has_window = false;
    st.saturated.assign(U, 0); st.underflow.assign(U, 0); st.nonzero.assign(U, 0); st.sum_saturated.assign(U, 0);
    gc->grid = grid;
    gc->grads.assign(grads, grads + gc->V);
    gc->step = step;
    gc->geometry = gc->geometry_start >= 0 && step >= gc->geometry_start;
    gc->units_ready = gc->launched = 0;
    gc->local_bad = 0;
    gc->stop_signal = 0;
    gc->scale_skip = false;
    gc->chosen.assign(gc->geo.size(), "");
    gc->saved_residual.assign(gc->geo.size(), {});
    if (!gradcomm_is_fp8(gc)) return;
    // what this step may change, put back by gradcomm_finish if a non-finite gradient skips it
    gc->saved_geo.assign(gc->geo.size(), GeoUnitSaved());
    for (size_t i = 0; i < gc->geo.size(); i++) {
        const GeoUnit& g = gc->geo[i];
        GeoUnitSaved& k = gc->saved_geo[i];
        k.residual = g.residual;
        if (gc->refresh_now) {
            k.factor = g.factor;
            k.LA = g.LA;
            k.LG = g.LG;
        }
        if (gc->ema > 0.0f && gc->sketch_now) {
            k.Y_ema = g.Y_ema;
            k.trA_ema = g.trA_ema;
            k.ema_steps = g.ema_steps;
        }
    }
    if (gc->ema > 0.0f && gc->sketch_now) gradcomm_ema_update(gc);
    if (gc->refresh_now) {
        if (gc->ema > 0.0f) gradcomm_ema_to_sketch(gc);
        st.refreshed = true;
    }
}

// The backward has finished unit `unit`'s gradient for this step (units come in GradBuckets order).
static inline void gradcomm_unit_ready(GradComm* gc, int unit) {
    const GradBuckets& bk = gc->buckets;
    if (gc->grads.empty() || gc->units_ready >= (int)bk.order.size() || bk.order[gc->units_ready] != unit) {
        fprintf(stderr, "gradcomm_unit_ready: unit %d out of the backward's order (%d finished)\n", unit, gc->units_ready);
        exit(1);
    }
    gc->units_ready++;
    if (gc->units_ready == bk.first[gc->launched + 1]) gradcomm_launch(gc, gc->launched++);
}

// After the backward: completes every bucket and leaves in grads[0] the average over logical
// ranks in the configured mode. With `fidelity`, also sums the fp32 gradients and records how
// far the result is from them. loss_bad: 1 + the highest logical rank of this process whose loss
// was not finite (0: none). Returns 1 + the highest logical rank whose loss or gradient was not
// finite (0: none), and then every rank must skip the step, with the geometry state as it was
// before it; gc->stats.skipped: a non-finite scale, every rank skips too.
static inline int gradcomm_finish(GradComm* gc, int loss_bad, bool fidelity) {
    GradCommStats& st = gc->stats;
    const GradBuckets& bk = gc->buckets;
    CommGrid* grid = gc->grid;
    float* grads = gc->grads[0];
    const int NB = gradcomm_num_buckets(&bk), V = gc->V;
    const size_t U = gc->units.size(), P = gc->num_params;
    if (gc->launched != NB) {
        fprintf(stderr, "gradcomm_finish: the backward finished %d of %zu units\n", gc->units_ready, U);
        exit(1);
    }
    int flags[2] = {std::max(gc->local_bad, loss_bad), gc->stop_signal};
    comm_max_ints(grid, flags, 2);
    const int bad_rank = flags[0];
    gc->stop_signal = flags[1];
    if (bad_rank > 0) {
        for (std::vector<MPI_Request>& r : gc->reqs) comm_wait_all(&r);
        for (CommFold& f : gc->folds) comm_fold_finish(&f);  // the ones started (the same on every rank)
        for (size_t i = 0; gradcomm_is_fp8(gc) && i < gc->geo.size(); i++) {
            GeoUnit& g = gc->geo[i];
            GeoUnitSaved& k = gc->saved_geo[i];
            g.residual.swap(k.residual);
            if (gc->refresh_now) {
                g.factor = std::move(k.factor);
                g.LA.swap(k.LA);
                g.LG.swap(k.LG);
            }
            if (gc->ema > 0.0f && gc->sketch_now) {
                g.Y_ema.swap(k.Y_ema);
                g.trA_ema.swap(k.trA_ema);
                g.ema_steps = k.ema_steps;
            }
        }
        gc->grads.clear();
        return bad_rank;
    }
    st.has_fidelity = fidelity;
    if (fidelity) {
        gc->ref.resize(P);
        std::vector<const void*> in;
        for (int v = 0; v < V; v++) in.push_back(gc->grads[v]);
        comm_fold(grid, COMM_FOLD_F32, in.data(), V, gc->ref.data(), P);
        for (float& v : gc->ref) v /= (float)gc->world_size;
    }
    std::vector<std::vector<float>> raw_geo(V);  // each logical rank's G of the geometry units (gradcomm_fair_step)
    const bool fair = gc->fair && gc->geometry && !gc->geo.empty();
    if (fair) {
        for (int v = 0; v < V; v++)
            for (const GeoUnit& g : gc->geo) {
                const float* G = gc->grads[v] + gc->units[g.unit].offset;
                raw_geo[v].insert(raw_geo[v].end(), G, G + g.residual[0].size());
            }
    }
    if (gc->mode == "fp32" || gc->mode == "bf16") {
        const float N = (float)gc->world_size;
        for (int b = 0; b < NB; b++) {
            comm_fold_finish(&gc->folds[b]);
            for (int i = bk.first[b]; i < bk.first[b + 1]; i++) {
                const int u = bk.order[i];
                float* G = grads + gc->units[u].offset;
                const size_t n = gradcomm_unit_size(gc->units[u]), o = bk.packed[u];
                if (gc->mode == "bf16") for (size_t k = 0; k < n; k++) G[k] = fp8_bf16_decode(gc->packed16[o + k]) / N;
                else if (gc->world_size > 1) for (size_t k = 0; k < n; k++) G[k] = gc->packed[o + k] / N;
            }
        }
    } else {
        std::string chosen;
        for (const std::string& c : gc->chosen) if (!c.empty()) chosen += (chosen.empty() ? "" : ", ") + c;
        if (!chosen.empty() && gradcomm_print_power_now(gc->refresh_every, gc->step, gc->geometry_start))
            printf("geofp8 power at step %d: %s\n", gc->step + 1, chosen.c_str());
        bool ok;
        if (gc->twophase) {
            ok = gradcomm_twophase(gc, grid, grads);
        } else {
            gradcomm_fp8_send(gc, NB - 1);
            for (std::vector<MPI_Request>& r : gc->reqs) comm_wait_all(&r);
            ok = !gc->scale_skip;
            for (CommFold& f : gc->folds) comm_fold_finish(&f);  // the ones started (all of them unless a scale skips)
            for (int i = 0; ok && i < (int)bk.order.size(); i++) {
                const int u = bk.order[i];
                const LlamaUnit& lu = gc->units[u];
                const size_t n = gradcomm_unit_size(lu);
                const uint8_t* q = gc->q.data() + bk.packed[u];
                const float* sc = gc->scale.data() + gc->group_off[i];
                st.sum_saturated[u] += gradcomm_count_max_codes(gc->fmt, q, n);
                if (gc->mode == "fp8block") geofp8_dequantize_block(gc->fmt, grads + lu.offset, q, n, GEOFP8_BLOCK, sc, gc->world_size);
                else geofp8_dequantize(gc->fmt, grads + lu.offset, q, n, sc[0], gc->world_size);
            }
        }
        if (!ok) {  // the quantizer's residuals go back (a refresh of this step stays, as its factor is sound)
            for (size_t i = 0; i < gc->geo.size(); i++)
                if (!gc->saved_residual[i].empty()) gc->geo[i].residual.swap(gc->saved_residual[i]);
            st.skipped = true;
            gc->grads.clear();
            return 0;
        }
        if (gc->fp8_ef) gc->ef_residual.swap(gc->ef_next);  // the step is kept: its residuals are the ones in use
        if (gc->geometry) for (GeoUnit& g : gc->geo) gradcomm_unwhiten(gc, g, grads + gc->units[g.unit].offset);
        comm_sum_longs(grid, st.saturated.data(), U);
        comm_sum_longs(grid, st.underflow.data(), U);
        comm_sum_longs(grid, st.nonzero.data(), U);
        if (gc->twophase) st.sum_saturated.assign(U, 0);  // (native only: sum_saturated counts the summed codes, the same on every rank)
        if (gc->profiling) gradcomm_profile(gc, gc->step);
    }
    if (fidelity) {
        std::vector<bool> is_geo(U);
        for (size_t u = 0; u < U; u++) is_geo[u] = gc->unit_to_geo[u] >= 0;
        gradcomm_fidelity(&st, gc->units, is_geo, grads, gc->ref.data());
    }
    if (fair) gradcomm_fair_step(gc, grid, raw_geo, fidelity);
    gc->grads.clear();
    return 0;
}

// ----------------------------------------------------------------------------
// checkpoint state: selection, scores, factors, residuals (every rank has its own residuals; a
// process keeps its V logical ranks' in its state file, logical rank vrank0 + v's named
// "gradcomm.v<v>.<...>" for v > 0, so that V = 1 files keep their names: gradcomm_vprefix)

static inline void gradcomm_save(const GradComm* gc, std::vector<CheckpointArray>* out) {
    if (!gradcomm_is_fp8(gc)) return;
    std::vector<float> sel = {(float)gc->geometry_start, (float)gc->profiled_steps, (float)(gc->profiling ? 1 : 0)};
    for (const GeoUnit& g : gc->geo) sel.push_back((float)g.unit);
    out->push_back({"gradcomm.selection", sel});
    std::vector<float> scores(gc->score_sum.begin(), gc->score_sum.end());
    out->push_back({"gradcomm.scores", scores});
    for (const GeoUnit& g : gc->geo) {
        const std::string p = "gradcomm." + gc->units[g.unit].name + ".";
        for (int v = 0; v < gc->V; v++) out->push_back({gradcomm_vprefix(v) + gc->units[g.unit].name + ".residual", g.residual[v]});
        if (gc->mode == "kfac") {
            out->push_back({p + "LA", g.LA});
            out->push_back({p + "LG", g.LG});
        } else {
            std::vector<float> packed(geofp8_factor_floats(g.d_in, g.factor.r));
            geofp8_factor_pack(packed.data(), &g.factor);
            out->push_back({p + "factor", packed});
            if (gc->ema > 0.0f && !g.Y_ema[0].empty())
                for (int v = 0; v < gc->V; v++)
                    gradcomm_save_ema(gradcomm_vprefix(v) + gc->units[g.unit].name + ".", g.omega, g.Y_ema[v], g.trA_ema[v], g.ema_steps, out);
        }
    }
    if (gc->twophase)
        for (int v = 0; v < gc->V; v++) out->push_back({gradcomm_vprefix(v) + "server_residual", gc->server_residual[v]});
    if (gc->fp8_ef)
        for (int v = 0; v < gc->V; v++) {
            const float* r = gc->ef_residual.data() + (size_t)v * gc->num_params;
            out->push_back({gradcomm_vprefix(v) + "fp8ef_residual", std::vector<float>(r, r + gc->num_params)});
        }
    if (gc->fair && !gc->cf_residual.empty()) {  // the fair fidelity figures' state (gradcomm_fair_step)
        for (int v = 0; v < gc->V; v++) out->push_back({gradcomm_vprefix(v) + "fair.cf_residual", gc->cf_residual[v]});
        out->push_back({"gradcomm.fair.window", {(float)gc->win_index, (float)gc->win_steps}});
        if (gc->win_index >= 0) {
            out->push_back({"gradcomm.fair.win_exact", gc->win_exact});
            out->push_back({"gradcomm.fair.win_geo", gc->win_geo});
            out->push_back({"gradcomm.fair.win_fp8ef", gc->win_fp8ef});
            out->push_back({"gradcomm.fair.win_fp8", gc->win_fp8});
        }
    }
}

// Restores what gradcomm_save wrote (user_error naming the file if something is missing).
static inline void gradcomm_load(GradComm* gc, const CheckpointState* s, const char* path) {
    if (!gradcomm_is_fp8(gc)) return;
    auto need = [&](const std::string& name, size_t size) -> const CheckpointArray* {
        const CheckpointArray* a = checkpoint_find_extra(s, name);
        if (!a || (size != (size_t)-1 && a->data.size() != size))
            user_error("-y: state file '%s' lacks '%s' (or it has the wrong size); was it written with another -c mode?", path, name.c_str());
        return a;
    };
    const CheckpointArray* sel = need("gradcomm.selection", (size_t)-1);
    if (sel->data.size() < 3) user_error("-y: state file '%s' has a malformed gradcomm.selection", path);
    const CheckpointArray* scores = need("gradcomm.scores", gc->units.size());
    gc->score_sum.assign(scores->data.begin(), scores->data.end());
    gc->geometry_start = (int)sel->data[0];
    gc->profiled_steps = (int)sel->data[1];
    gc->profiling = sel->data[2] != 0.0f;
    gc->geo.clear();
    gc->unit_to_geo.assign(gc->units.size(), -1);
    for (size_t i = 3; i < sel->data.size(); i++) {
        int u = (int)sel->data[i];
        if (u < 0 || u >= (int)gc->units.size()) user_error("-y: state file '%s' names unit %d, out of range", path, u);
        gradcomm_add_geo(gc, u);
        GeoUnit& g = gc->geo.back();
        const std::string p = "gradcomm." + gc->units[u].name + ".";
        for (int v = 0; v < gc->V; v++) g.residual[v] = need(gradcomm_vprefix(v) + gc->units[u].name + ".residual", g.residual[v].size())->data;
        if (gc->mode == "kfac") {
            g.LA = need(p + "LA", g.LA.size())->data;
            g.LG = need(p + "LG", g.LG.size())->data;
        } else {
            geofp8_factor_unpack(&g.factor, need(p + "factor", geofp8_factor_floats(g.d_in, g.factor.r))->data.data(), g.d_in, g.factor.r);
            if (gc->ema > 0.0f && checkpoint_find_extra(s, p + "ema_meta")) {
                const size_t dk = (size_t)g.d_in * geofp8_sketch_width(g.factor.r, g.d_in);
                g.omega = need(p + "omega", dk)->data;
                for (int v = 0; v < gc->V; v++) {
                    const std::string pv = gradcomm_vprefix(v) + gc->units[u].name + ".";
                    g.Y_ema[v] = need(pv + "ema_Y", dk)->data;
                    gradcomm_load_ema_meta(need(pv + "ema_meta", 3)->data, &g.trA_ema[v], &g.ema_steps);
                    g.Y[v].assign(dk, 0.0f);
                }
            }
        }
    }
    if (gc->twophase)
        for (int v = 0; v < gc->V; v++)
            gc->server_residual[v] = need(gradcomm_vprefix(v) + "server_residual", gc->server_residual[v].size())->data;
    if (gc->fp8_ef)
        for (int v = 0; v < gc->V; v++) {
            const std::vector<float>& r = need(gradcomm_vprefix(v) + "fp8ef_residual", gc->num_params)->data;
            std::copy(r.begin(), r.end(), gc->ef_residual.begin() + (size_t)v * gc->num_params);
        }
    // the fair fidelity figures' state, when the run that wrote the file measured them (else they
    // start afresh: a zero counterfactual residual, no window open)
    gc->cf_residual.clear();
    gc->win_index = -1;
    gc->win_steps = 0;
    const CheckpointArray* cf0 = checkpoint_find_extra(s, "gradcomm.fair.cf_residual");
    if (gc->fair && cf0) {
        for (int v = 0; v < gc->V; v++) gc->cf_residual.push_back(need(gradcomm_vprefix(v) + "fair.cf_residual", cf0->data.size())->data);
        const CheckpointArray* w = need("gradcomm.fair.window", 2);
        gc->win_index = (int)w->data[0];
        gc->win_steps = (int)w->data[1];
        if (gc->win_index >= 0) {
            gc->win_exact = need("gradcomm.fair.win_exact", cf0->data.size())->data;
            gc->win_geo = need("gradcomm.fair.win_geo", cf0->data.size())->data;
            gc->win_fp8ef = need("gradcomm.fair.win_fp8ef", cf0->data.size())->data;
            gc->win_fp8 = need("gradcomm.fair.win_fp8", cf0->data.size())->data;
        }
    }
}

// ----------------------------------------------------------------------------
// logs

static inline std::string gradcomm_step_summary(const GradComm* gc) { return gradcomm_stats_summary(gc->stats, gradcomm_is_fp8(gc)); }

static inline void gradcomm_log_fields(const GradComm* gc, std::string* line) {
    gradcomm_stats_log_fields(gc->units, gc->unit_to_geo, gc->stats, gradcomm_is_fp8(gc), line);
}
