// gradcomm.cuh — the gradient communication modes of the CUDA engine (DESIGN §5–6): the GPU
// twin of llmc/gradcomm.h, which stays the spec. Same modes, same unit order, same layer
// selection, same byte counts, same log fields and the same checkpoint extras (names and
// layouts), so either engine resumes the other's FP8 state.
//
// gradcomm_gpu_reduce() replaces the local fp32 gradient buffer grads (num_params, flat layout of
// llama.h, device) by the communicated average over ranks after the last micro-step; with
// --bucket-mb > 0 the same work runs bucket by bucket during that micro-step's backward on a
// stream of its own (gradcomm_gpu_start / _unit_ready / _bucket_wait / _bucket_finish, below).
// Every kernel / cuBLAS / cuSOLVER step is llmc/geofp8.cuh (GeoFP8Device), every collective is
// llmc/comm.cuh (NCCL on the trainer's stream or the bucket stream); this file only orders them:
//
//   fp32      f32 SUM all-reduce, / N
//   bf16      bf16 encode, bf16 SUM all-reduce (bf16 rounding at every combine), decode / N
//   fp8, fp8block, geofp8, kfac, native (geofp8.cuh §6):
//             [refresh] whiten + residual (geometry units) | amax | f32 MAX all-reduce of the amax |
//             scales + quantize (error feedback on the geometry units) | E4M3 SUM all-reduce |
//             decode / (s N) | unwhiten | u64 SUM all-reduce of the counts | read stats (sync)
//   twophase  [refresh] whiten | local amax, scales (N = 1) | MAX all-reduce of the skip flag
//             (sync: a skipped step must not touch the server residual) | quantize | all-gather
//             exponents, all-to-all codes | server sum + re-quantize | all-gather codes and
//             server exponents | decode | unwhiten | counts
//   --fp8-ef 1  every unit off the geometry path has a residual too (a flat buffer, ef_res, and
//             ef_next on bucketed steps): X = G + R before the amax, the quantizer writes the new R
//             (gradcomm.h's contract; the residual tables of GeoFP8Device point into these buffers)
//   refresh   (every --geofp8-refresh steps from the first geometry step) per geometry unit:
//             SUM all-reduce of Y and tr(A) (kfac: A and G), rank 0 factorizes, broadcast of the
//             packed factor (kfac: LA, LG), R <- R T_old⁻¹ T_new.
// Activations reach the sketches through gradcomm_gpu_observe_input (after each forward of a
// refresh step) and, for kfac, output gradients through gradcomm_gpu_observe_output_grad (in the
// backward); both take bf16 (the CPU engine hands fp32: the factors differ by bf16 rounding).
//
// Timing: GradCommTimer records cudaEvent pairs around phases on the trainer's stream (forward,
// backward, comm and its sub-phases, optimizer) and sums them per step at gradcomm_timer_collect
// (one sync). A NULL timer records nothing.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#include "checkpoint.h"
#include "comm.cuh"
#include "geofp8.cuh"
#include "geofp8_refresh.cuh"
#include "llama.h"
#include "gradcomm_common.h"
#include "logger.h"
#include "train_config.h"
#include "utils.h"

// ----------------------------------------------------------------------------
// per-step phase timer (cudaEvents on one stream)

enum {
    GC_T_FORWARD = 0, GC_T_BACKWARD, GC_T_COMM, GC_T_REFRESH, GC_T_WHITEN, GC_T_AMAX, GC_T_QUANTIZE, GC_T_NCCL,
    GC_T_DECODE, GC_T_UNWHITEN, GC_T_OPTIMIZER, GC_T_SKETCH, GC_T_NUM
};
static const char* const GRADCOMM_PHASE_NAMES[GC_T_NUM] = {"forward", "backward", "comm", "refresh", "whiten", "amax",
                                                           "quantize", "nccl", "decode", "unwhiten", "optimizer", "sketch"};

typedef struct {
    cudaStream_t stream;
    std::vector<cudaEvent_t> events;  // a pool, grown on the first step, reused afterwards
    std::vector<int> span_phase;      // (spans) the phase of span i: events 2i (start), 2i+1 (end)
    std::vector<cudaStream_t> span_stream;  // (spans) the stream span i is recorded on
    double ms[GC_T_NUM];              // the last collected step
} GradCommTimer;

static inline void gradcomm_timer_init(GradCommTimer* t, cudaStream_t stream) {
    t->stream = stream;
    t->events.clear();
    t->span_phase.clear();
    t->span_stream.clear();
    for (double& v : t->ms) v = 0.0;
}

// Opens a span of `phase` on `stream` (spans on the bucket stream time the communication that
// overlaps the backward); returns its handle for gradcomm_timer_end (-1 with no timer).
static inline int gradcomm_timer_begin_on(GradCommTimer* t, int phase, cudaStream_t stream) {
    if (!t) return -1;
    int i = (int)t->span_phase.size();
    while (t->events.size() < 2 * (size_t)(i + 1)) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        t->events.push_back(e);
    }
    t->span_phase.push_back(phase);
    t->span_stream.push_back(stream);
    CUDA_CHECK(cudaEventRecord(t->events[2 * i], stream));
    return i;
}

static inline int gradcomm_timer_begin(GradCommTimer* t, int phase) { return t ? gradcomm_timer_begin_on(t, phase, t->stream) : -1; }

static inline void gradcomm_timer_end(GradCommTimer* t, int span) {
    if (!t || span < 0) return;
    CUDA_CHECK(cudaEventRecord(t->events[2 * span + 1], t->span_stream[span]));
}

// Sums the spans of this step per phase into t->ms (synchronizes) and starts a new step. Each
// span's end event is waited for before its time is read (its start, recorded earlier on the same
// stream, is then done too): a span's time never depends on how the trainer's stream and the
// bucket stream were ordered.
static inline void gradcomm_timer_collect(GradCommTimer* t) {
    if (!t) return;
    for (double& v : t->ms) v = 0.0;
    for (size_t i = 0; i < t->span_phase.size(); i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventSynchronize(t->events[2 * i + 1]));
        CUDA_CHECK(cudaEventElapsedTime(&ms, t->events[2 * i], t->events[2 * i + 1]));
        t->ms[t->span_phase[i]] += ms;
    }
    t->span_phase.clear();
    t->span_stream.clear();
}

static inline void gradcomm_timer_free(GradCommTimer* t) {
    for (cudaEvent_t e : t->events) CUDA_CHECK(cudaEventDestroy(e));
    t->events.clear();
}

// ----------------------------------------------------------------------------
// state

// Per-unit figures of one step (summed over ranks), and the fidelity on --fidelity-every steps:
// the fields of gradcomm.h's GradCommStats.
typedef GradCommStats GradCommGPUStats;  // llmc/gradcomm_common.h

// The buffers of the fair fidelity figures (gradcomm_gpu_fair_step), made on the first step of
// the geometry path that measures them (the geometry units are fixed by then) and kept: the
// units' values concatenated in dev.geo order.
struct GradCommCounterfactual {
    size_t num_units = 0, total = 0;
    // --virtual-ranks: exact, geo and win are the same on every logical rank (averages and their
    // window sums), so ranks other than 0 use logical rank 0's (gradcomm_gpu_share), which alone
    // averages exact and keeps the window sums; the other buffers are every rank's own
    const GradCommCounterfactual* from = NULL;
    std::vector<size_t> off, size;    // (num_units) into the concatenation
    GeoFP8UnitTable table;
    float* raw = NULL;                // (total) G of the geometry units, then plain fp8's average (c)
    float* exact = NULL;              // (total) the fp32 average of the same units
    float* x = NULL;                  // (total) G + R_cf, then plain fp8 with error feedback's average (b)
    float* geo = NULL;                // (total) the geometry path's average (a)
    float* cf_residual = NULL;        // (total) (b)'s error-feedback residual
    float** cf_residual_ptrs = NULL;  // (num_units) device pointers into cf_residual (geofp8_quantize_ef_units)
    float* win = NULL;                // (4, total) the window's sums of exact, (a), (b), (c)
    int win_index = -1, win_steps = 0;  // the window (-1: none open) and its steps so far
    uint8_t* q = NULL;                // (total)
    float* amax = NULL;               // (num_units)
    float* scale = NULL;              // (num_units)
    float* skip = NULL;               // (1)
    double* scratch = NULL;           // (4, table chunks)
};

typedef struct {
    std::string mode;                 // -c
    bool twophase;                    // --fp8-reduce twophase
    Fp8Format fmt;                    // --fp8-format
    std::vector<LlamaUnit> units;
    size_t num_params;
    int world_size, rank;
    int rank_r, refresh_every, profile_steps, top_k;
    double power;                     // --geofp8-power (-1: auto, chosen per unit at each refresh)
    double damping;                   // --geofp8-damping
    float ema;                        // --geofp8-ema β (0: each refresh sketches its own step only)
    bool sketch_now;                  // this step sketches the geometry units' inputs (refresh_now, or every step with ema)
    unsigned long long seed;
    bool profiling;                   // --geofp8-layers auto, selection still to come
    int geometry_start;               // first step of the geometry path (-1: not yet)
    std::vector<double> score_sum;    // (units) summed vulnerability over the profiling window
    int profiled_steps;
    bool refresh_now;
    float sketch_weight;              // 1 / tokens per step over all ranks
    int max_tokens;                   // B * T: the activation scratch of the sketches
    bool has_device;                  // the FP8 modes
    GeoFP8Device dev;                 // unit table, codes, scales, counts, geometry units
    bf16* codes16;                    // (num_params) bf16 mode
    float* ref;                       // (num_params) fp32 reference of the fidelity, or NULL
    bool ref_shared;                  // --virtual-ranks: ref is logical rank 0's (gradcomm_gpu_share), which averages it
    GeoFP8UnitTable fid_units;        // every unit, for the fidelity sums (with ref)
    double* fid_scratch;              // (4, fid_units chunks)
    GradCommCounterfactual cf;        // gradcomm_gpu_fair_step
    const GradCommCounterfactual* cf_from;  // --virtual-ranks: logical rank 0's, whose shared buffers cf uses (gradcomm_gpu_share)
    bool fp8_ef;                      // --fp8-ef 1 (an FP8 mode)
    float* ef_res;                    // (num_params) --fp8-ef: the residuals in use of the units off the geometry path (zero on the others)
    float* ef_next;                   // (num_params) where a bucketed step's quantizer writes them (NULL without buckets)
    bool fair;                        // --fidelity-every > 0, a geometry mode, the native sum: the fair figures on every geometry step
    int fidelity_window;              // W
    std::string output_dir;
    GradCommGPUStats stats;
    // buckets (--bucket-mb; see gradcomm_gpu_start): the backward finishes the units in
    // descending index order, so bucket b is the range of units [bucket_lo[b], bucket_hi[b])
    GradBuckets buckets;
    bool bucketing;                   // --bucket-mb > 0 and the native reduction
    std::vector<int> bucket_lo, bucket_hi, unit_bucket;  // (buckets), (buckets), (units)
    std::vector<GeoFP8UnitTable> bucket_units;           // (buckets) geofp8_units_create_range
    std::vector<cudaEvent_t> bucket_ready;                // (buckets) recorded after its last unit's gradient
    cudaEvent_t bucket_done;          // recorded on the bucket stream after the last bucket
    cudaStream_t bucket_stream;       // the buckets' kernels and collectives (non-blocking)
    CommGridGPU bucket_grid;          // the trainer's communicator, on bucket_stream
    float* local_amax;                // (units) amax of each unit's local G before communication (+Inf: non-finite)
    GradCommTimer* bucket_timer;      // the step's timer (or NULL)
    int step;                         // the step being run
    bool last_backward;               // the last micro-step's backward is being enqueued
    bool bucketed_now;                // ... and this step goes out bucket by bucket
    bool geometry_now;                // this step's FP8 codes are of X = G T + R on the geometry units
    bool refresh_bucketed;            // ... and its refresh runs bucket by bucket (gradcomm_gpu_start)
    std::vector<char> refreshed;      // (geometry units) refreshed in this step's buckets so far
    std::vector<std::string> chosen;  // (geometry units) --geofp8-power auto: rank 0's choice at this refresh
    double refresh_bytes;             // sent by this step's bucketed refreshes
} GradCommGPU;

static inline bool gradcomm_gpu_is_fp8(const GradCommGPU* gc) { return gc->mode != "fp32" && gc->mode != "bf16"; }
static inline size_t gradcomm_gpu_unit_size(const LlamaUnit& u) { return (size_t)u.rows * u.cols; }
static inline int gradcomm_gpu_geo_index(const GradCommGPU* gc, int u) { return gc->has_device ? gc->dev.unit_to_geo[u] : -1; }

// Puts unit u on the geometry path (identity transform, zero residual), as gradcomm_add_geo.
static inline void gradcomm_gpu_add_geo(GradCommGPU* gc, int u) {
    const LlamaUnit& lu = gc->units[u];
    geofp8_device_add_unit(&gc->dev, u, lu.rows, lu.cols, gc->rank_r, gc->mode == "kfac" ? 1 : 0);
    geofp8_device_reserve_tokens(&gc->dev, gc->max_tokens);
}

// --fp8-ef: the flat residual buffers, zero, and every unit's entry of the residual tables
// pointing into them (gradcomm_gpu_add_geo then points a geometry unit's entries at its own).
static inline void gradcomm_gpu_ef_init(GradCommGPU* gc) {
    GeoFP8Device* g = &gc->dev;
    const size_t P = gc->num_params, U = gc->units.size();
    gc->ef_res = cuda_malloc<float>(P);
    CUDA_CHECK(cudaMemset(gc->ef_res, 0, P * sizeof(float)));
    std::vector<float*> t(U);
    for (size_t u = 0; u < U; u++) t[u] = gc->ef_res + gc->units[u].offset;
    CUDA_CHECK(cudaMemcpy(g->residual_table, t.data(), U * sizeof(float*), cudaMemcpyHostToDevice));
    if (!g->residual_next_table) return;
    gc->ef_next = cuda_malloc<float>(P);
    CUDA_CHECK(cudaMemset(gc->ef_next, 0, P * sizeof(float)));
    for (size_t u = 0; u < U; u++) t[u] = gc->ef_next + gc->units[u].offset;
    CUDA_CHECK(cudaMemcpy(g->residual_next_table, t.data(), U * sizeof(float*), cudaMemcpyHostToDevice));
}

// --fp8-ef: X = G + R on the units [lo, hi) off the geometry path (per unit, as the CPU engine:
// the geometry units' X is left as it is, signed zeros included).
static inline void gradcomm_gpu_ef_add(GradCommGPU* gc, float* grads, int lo, int hi, cudaStream_t s) {
    for (int u = lo; u < hi; u++)
        if (gc->dev.unit_to_geo[u] < 0)
            geofp8_residual_add(grads + gc->units[u].offset, gc->ef_res + gc->units[u].offset, gradcomm_gpu_unit_size(gc->units[u]), s);
}

// A kept bucketed step: the residuals its quantizer wrote become the ones in use.
static inline void gradcomm_gpu_swap_residuals(GradCommGPU* gc) {
    geofp8_device_swap_residuals(&gc->dev);  // (the tables, whose entries point into ef_res / ef_next too)
    std::swap(gc->ef_res, gc->ef_next);
}

// Validates the mode's settings (user_error) and sets up the state; call before any file is
// written, after the GPU of this rank is selected. max_tokens = B * T of a micro-batch.
static inline void gradcomm_gpu_init(GradCommGPU* gc, const TrainConfig* tc, const LlamaConfig* c, int rank, int world_size,
                                     int max_tokens) {
    gc->mode = tc->comm;
    gc->twophase = tc->fp8_reduce == "twophase";
    gc->fmt = train_config_fp8_format(tc);
    gc->units = llama_units(c);
    gc->num_params = llama_num_params(c);
    gc->world_size = world_size;
    gc->rank = rank;
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
    gc->max_tokens = max_tokens;
    gc->has_device = false;
    gc->dev = GeoFP8Device();
    gc->codes16 = NULL;
    gc->ref = NULL;
    gc->ref_shared = false;
    gc->cf_from = NULL;
    gc->fid_units = GeoFP8UnitTable();
    gc->fid_scratch = NULL;
    gc->cf = GradCommCounterfactual();
    gc->fp8_ef = tc->fp8_ef != 0 && gradcomm_gpu_is_fp8(gc);
    gc->ef_res = gc->ef_next = NULL;
    gc->fair = tc->fidelity_every > 0 && (gc->mode == "geofp8" || gc->mode == "kfac") && !gc->twophase;
    gc->fidelity_window = gradcomm_fidelity_window(tc);
    gc->output_dir = tc->output_dir;
    gc->buckets = gradcomm_buckets(gc->units, c->L, gc->twophase ? 0.0 : tc->bucket_mb);
    // --virtual-ranks: the logical ranks' backwards run one after another and every collective
    // waits for all of them, so there is nothing to overlap: their steps communicate after it
    const bool virtual_ranks = tc->virtual_ranks > 1;
    gc->bucketing = !gc->twophase && tc->bucket_mb > 0.0f && !virtual_ranks;
    gc->bucket_lo.clear(); gc->bucket_hi.clear(); gc->unit_bucket.assign(gc->units.size(), 0);
    gc->bucket_units.clear(); gc->bucket_ready.clear();
    gc->bucket_done = NULL;
    gc->bucket_stream = NULL;
    gc->bucket_grid = CommGridGPU();
    gc->local_amax = NULL;
    gc->bucket_timer = NULL;
    gc->step = 0;
    gc->last_backward = gc->bucketed_now = gc->geometry_now = gc->refresh_bucketed = false;
    gc->refreshed.clear();
    gc->chosen.clear();
    gc->refresh_bytes = 0.0;
    if (gc->twophase && gc->mode == "fp8block")
        user_error("--fp8-reduce twophase: works with -c fp8, geofp8 or kfac, found -c fp8block (its per-block scales are synchronized; use native)");
    if (world_size > 1 && !virtual_ranks && gradcomm_gpu_is_fp8(gc) && !gc->twophase) {  // the native FP8 sum in NCCL
        int dev = 0, major = 0, minor = 0, nccl = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
        NCCL_CHECK(ncclGetVersion(&nccl));
        if (major < 9)
            user_error("-c %s: the native FP8 sum needs an sm_90 or newer GPU (NCCL's ncclFloat8%s), found sm_%d%d; "
                       "use --fp8-reduce twophase (any GPU) or -c bf16", gc->mode.c_str(), fp8_format_name(gc->fmt), major, minor);
        if (nccl < 22400)
            user_error("-c %s: the native FP8 sum needs NCCL 2.24 or newer at run time, found %d.%d.%d; "
                       "use a newer libnccl or --fp8-reduce twophase", gc->mode.c_str(), nccl / 10000, nccl / 100 % 100, nccl % 100);
    }
    std::vector<int> explicit_layers;
    if (gc->mode == "geofp8" && tc->geofp8_layers != "auto") explicit_layers = gradcomm_parse_layers(gc->units, tc->geofp8_layers);
    if (gc->mode == "bf16") gc->codes16 = cuda_malloc<bf16>(gc->num_params);
    std::vector<size_t> off, size;
    for (const LlamaUnit& u : gc->units) { off.push_back(u.offset); size.push_back(gradcomm_gpu_unit_size(u)); }
    if (tc->fidelity_every > 0) {
        gc->ref = cuda_malloc<float>(gc->num_params);
        geofp8_units_create(&gc->fid_units, off, size);
        gc->fid_scratch = cuda_malloc<double>(4 * (size_t)std::max(gc->fid_units.dev.num_chunks, 1));
    }
    if (gc->bucketing) {
        const GradBuckets& bk = gc->buckets;
        const int U = (int)gc->units.size(), NB = gradcomm_num_buckets(&bk);
        for (int i = 0; i < U; i++)
            if (bk.order[i] != U - 1 - i) { fprintf(stderr, "gradcomm_gpu_init: the backward order is not descending unit index\n"); exit(1); }
        GeoFP8UnitTable all;
        geofp8_units_create(&all, off, size);
        gc->bucket_units.resize(NB);
        for (int b = 0; b < NB; b++) {
            const int lo = U - bk.first[b + 1], hi = U - bk.first[b];
            gc->bucket_lo.push_back(lo);
            gc->bucket_hi.push_back(hi);
            for (int u = lo; u < hi; u++) gc->unit_bucket[u] = b;
            geofp8_units_create_range(&gc->bucket_units[b], &all, lo, hi);
            cudaEvent_t e;
            CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            gc->bucket_ready.push_back(e);
        }
        geofp8_units_free(&all);
        CUDA_CHECK(cudaEventCreateWithFlags(&gc->bucket_done, cudaEventDisableTiming));
        // non-blocking: the trainer's stream is the legacy default stream, which would otherwise
        // wait for this one (and this one for it) at every launch
        CUDA_CHECK(cudaStreamCreateWithFlags(&gc->bucket_stream, cudaStreamNonBlocking));
        gc->local_amax = cuda_malloc<float>(gc->units.size());
    }
    if (!gradcomm_gpu_is_fp8(gc)) return;
    geofp8_device_init(&gc->dev, off, size, gc->num_params, world_size, rank, gc->mode == "fp8block" ? 1 : 0, gc->twophase ? 1 : 0,
                       gc->fmt);
    if (gc->bucketing) geofp8_device_double_buffer(&gc->dev);
    gc->has_device = true;
    if (gc->fp8_ef) gradcomm_gpu_ef_init(gc);
    if (gc->mode == "geofp8") {
        if (tc->geofp8_layers == "auto") gc->profiling = true;
        else {
            for (int u : explicit_layers) gradcomm_gpu_add_geo(gc, u);
            gradcomm_print_layers(gc->units, explicit_layers, tc->geofp8_layers, rank);
            gc->geometry_start = 0;
        }
    } else if (gc->mode == "kfac") {
        for (size_t u = 0; u < gc->units.size(); u++) if (gc->units[u].is_matrix) gradcomm_gpu_add_geo(gc, (int)u);
        gc->geometry_start = 0;
    }
}

static inline void gradcomm_gpu_free(GradCommGPU* gc) {
    if (gc->has_device) geofp8_device_free(&gc->dev);
    if (gc->ef_res) CUDA_CHECK(cudaFree(gc->ef_res));
    if (gc->ef_next) CUDA_CHECK(cudaFree(gc->ef_next));
    if (gc->codes16) CUDA_CHECK(cudaFree(gc->codes16));
    if (gc->ref) {
        if (!gc->ref_shared) CUDA_CHECK(cudaFree(gc->ref));
        CUDA_CHECK(cudaFree(gc->fid_scratch));
        geofp8_units_free(&gc->fid_units);
    }
    GradCommCounterfactual& cf = gc->cf;
    if (cf.num_units) {
        void* bufs[] = {cf.raw, cf.x, cf.cf_residual, cf.cf_residual_ptrs, cf.q, cf.amax, cf.scale, cf.skip, cf.scratch};
        for (void* b : bufs) CUDA_CHECK(cudaFree(b));
        if (!cf.from) for (void* b : {(void*)cf.exact, (void*)cf.geo, (void*)cf.win}) CUDA_CHECK(cudaFree(b));
        geofp8_units_free(&cf.table);
    }
    gc->cf = GradCommCounterfactual();
    for (GeoFP8UnitTable& t : gc->bucket_units) geofp8_units_free(&t);
    for (cudaEvent_t e : gc->bucket_ready) CUDA_CHECK(cudaEventDestroy(e));
    if (gc->bucket_done) CUDA_CHECK(cudaEventDestroy(gc->bucket_done));
    if (gc->bucket_stream) CUDA_CHECK(cudaStreamDestroy(gc->bucket_stream));
    if (gc->local_amax) CUDA_CHECK(cudaFree(gc->local_amax));
    gc->bucket_units.clear(); gc->bucket_ready.clear();
    gc->bucket_done = NULL; gc->bucket_stream = NULL; gc->local_amax = NULL;
    gc->has_device = false;
    gc->codes16 = NULL;
    gc->ref = NULL;
    gc->fid_scratch = NULL;
}

// --virtual-ranks: logical rank v > 0 of this process takes what every rank has alike from logical
// rank 0's state `first`: the fidelity reference (one buffer, which the fold fills and rank 0
// averages) and the test matrices Ω (built once, copied). `first` must outlive gc.
static inline void gradcomm_gpu_share(GradCommGPU* gc, const GradCommGPU* first) {
    if (gc->ref && !gc->ref_shared) {
        CUDA_CHECK(cudaFree(gc->ref));
        gc->ref = first->ref;
        gc->ref_shared = true;
    }
    if (gc->has_device) gc->dev.omega_from = &first->dev;
    gc->cf_from = &first->cf;
}

// Before the micro-steps of `step`; tokens = tokens per optimizer step over all ranks.
// (--geofp8-ema: the windows of gradcomm_begin_step in llmc/gradcomm.h)
static inline void gradcomm_gpu_begin_step(GradCommGPU* gc, int step, long long tokens, cudaStream_t stream) {
    const bool geometry = gc->has_device && gc->geometry_start >= 0 && step >= gc->geometry_start && !gc->dev.geo.empty();
    gc->refresh_now = geometry && (step - gc->geometry_start) % gc->refresh_every == 0;
    gc->sketch_now = gc->ema > 0.0f ? geometry : gc->refresh_now;
    gc->sketch_weight = (float)(1.0 / (double)tokens);
    gc->stats.omega_seconds = 0.0;
    if (!gc->sketch_now) return;
    const bool new_window = gc->ema > 0.0f ? step == gc->geometry_start || (step - gc->geometry_start - 1) % gc->refresh_every == 0 : true;
    gc->stats.omega_seconds = geofp8_device_sketch_begin(&gc->dev, gc->seed, step, step == gc->geometry_start ? 1 : 0, new_window ? 1 : 0,
                                                         gc->ema > 0.0f ? 1 : 0, stream);
}

// The first step >= from whose refresh builds Ω (-1: none known yet, or kfac).
static inline int gradcomm_gpu_next_omega_step(const GradCommGPU* gc, int from) {
    if (!gc->has_device || gc->geometry_start < 0 || gc->dev.geo.empty() || gc->mode == "kfac") return -1;
    return geofp8_omega_next_step(from, gc->geometry_start, gc->refresh_every, gc->ema > 0.0f);
}

// Starts building the Ω of the first Ω step >= from on host threads (geofp8_device_omega_prepare);
// at set-up, after a checkpoint is loaded or the model initialized.
static inline void gradcomm_gpu_omega_prepare(GradCommGPU* gc, int from) {
    const int t = gradcomm_gpu_next_omega_step(gc, from);
    if (t >= 0) geofp8_device_omega_prepare(&gc->dev, gc->seed, t, t == gc->geometry_start ? 1 : 0);
}

// After `step` is settled (kept or skipped, its factors final): the next refresh's Ω starts
// building if the factors may have changed (a refresh step) or nothing builds it yet.
static inline void gradcomm_gpu_end_step(GradCommGPU* gc, int step) {
    const int t = gradcomm_gpu_next_omega_step(gc, step + 1);
    if (t >= 0 && (gc->refresh_now || gc->dev.omega->step != t)) gradcomm_gpu_omega_prepare(gc, step + 1);
}

static inline bool gradcomm_gpu_wants_activations(const GradCommGPU* gc) { return gc && gc->sketch_now; }
static inline bool gradcomm_gpu_wants_output_grads(const GradCommGPU* gc) { return gc && gc->refresh_now && gc->mode == "kfac"; }

// h (n, d_in) bf16: the input of `unit` in one micro-batch (no-op off the geometry path).
static inline void gradcomm_gpu_observe_input(GradCommGPU* gc, int unit, const bf16* h, int n, cudaStream_t stream) {
    if (!gradcomm_gpu_wants_activations(gc)) return;
    geofp8_device_observe_input(&gc->dev, unit, h, n, gc->sketch_weight, stream);
}

// delta (n, d_out) bf16: the gradient at the output of `unit` in one micro-batch (kfac only).
static inline void gradcomm_gpu_observe_output_grad(GradCommGPU* gc, int unit, const bf16* delta, int n, cudaStream_t stream) {
    if (!gradcomm_gpu_wants_output_grads(gc)) return;
    geofp8_device_observe_output_grad(&gc->dev, unit, delta, n, gc->sketch_weight, stream);
}

// ----------------------------------------------------------------------------
// the refresh: every rank ends with bitwise the same factor. With --geofp8-power auto, rank 0
// picks each unit's power from its own gradient (grads) of this step, as the CPU engine does.

// Geometry unit gi, on grid's stream: SUM all-reduce of Y and tr(A) (kfac: A and G), rank 0
// factorizes, broadcast of the packed factor (kfac: LA, LG), R <- R T_old⁻¹ T_new (into
// residual_next with into_next: geofp8_device_refresh_finish). Asynchronous on the low-rank path
// (rank 0's report waits for gradcomm_gpu_refresh_results). Returns the bytes it sent.
static inline double gradcomm_gpu_refresh_unit(GradCommGPU* gc, CommGridGPU* grid, int gi, const float* grads, int into_next) {
    GeoFP8DeviceUnit& gu = gc->dev.geo[gi];
    cudaStream_t s = grid->stream;
    double bytes = 0.0;
    if (gu.kfac) {
        const size_t nin = (size_t)gu.d_in * gu.d_in, nout = (size_t)gu.d_out * gu.d_out;
        comm_gpu_allreduce_f32_sum(grid, gu.A, gu.A, nin);
        comm_gpu_allreduce_f32_sum(grid, gu.Gs, gu.Gs, nout);
        bytes += comm_gpu_ring_bytes(grid, 4.0 * (nin + nout));
        if (gc->rank == 0) geofp8_device_refresh_factor(&gc->dev, gi, s);
        comm_gpu_broadcast_f32(grid, gu.LA_next, nin, 0);
        comm_gpu_broadcast_f32(grid, gu.LG_next, nout, 0);
        bytes += 4.0 * (nin + nout);
    } else {
        const size_t dk = (size_t)gu.d_in * gu.k, nf = geofp8_factor_floats(gu.d_in, gu.r);
        comm_gpu_allreduce_f32_sum(grid, gu.Y, gu.Y, dk);
        comm_gpu_allreduce_f64_sum(grid, gu.trA, gu.trA, 1);
        bytes += comm_gpu_ring_bytes(grid, 4.0 * dk + 8.0);
        if (gc->rank == 0) {
            GeoFP8Power pw;
            pw.power = gc->power;
            pw.damping = gc->damping;
            pw.G = grads + gc->units[gu.unit].offset;
            pw.d_out = gu.d_out;
            geofp8_device_refresh_factor(&gc->dev, gi, s, &pw);
        }
        comm_gpu_broadcast_f32(grid, gu.factor_next, nf, 0);
        bytes += 4.0 * nf;
    }
    geofp8_device_refresh_finish(&gc->dev, gi, s, into_next);
    return bytes;
}

// Rank 0, after this step's refreshes (the units with refreshed[gi], all of them when NULL): their
// reports in one download (the refresh's one wait on rank 0), the warning of a failed
// factorization, and the --geofp8-power auto choices into gc->chosen.
static inline void gradcomm_gpu_refresh_results(GradCommGPU* gc, const std::vector<char>* refreshed, cudaStream_t stream) {
    if (gc->rank != 0) return;
    const GeoFP8RefreshReport* rep = geofp8_device_refresh_reports(&gc->dev, stream);
    for (size_t gi = 0; gi < gc->dev.geo.size(); gi++) {
        if (refreshed && !(*refreshed)[gi]) continue;
        const GeoFP8DeviceUnit& gu = gc->dev.geo[gi];
        const char* name = gc->units[gu.unit].name.c_str();
        if (rep[gi].status < 0) fprintf(stderr, "warning: geofp8 refresh of %s: the factorization failed (status %d)\n", name, rep[gi].status);
        if (gc->power < 0.0 && !gu.kfac) {
            char b[96];
            snprintf(b, sizeof(b), "%s p %.3f (q %.3f)", name, rep[gi].power, rep[gi].q);
            gc->chosen[gi] = b;
        }
    }
}

// Rank 0's power choices of this step's refresh, one line in geometry-unit order (as the CPU engine).
static inline void gradcomm_gpu_print_power(const GradCommGPU* gc, int step) {
    std::string line;
    for (const std::string& c : gc->chosen) if (!c.empty()) line += (line.empty() ? "" : ", ") + c;
    if (!line.empty() && gradcomm_print_power_now(gc->refresh_every, step, gc->geometry_start))
        printf("geofp8 power at step %d: %s\n", step + 1, line.c_str());
}

// Every geometry unit, after the backward (an unbucketed step); returns the bytes sent.
static inline double gradcomm_gpu_refresh(GradCommGPU* gc, CommGridGPU* grid, const float* grads, int step) {
    double bytes = 0.0;
    gc->chosen.assign(gc->dev.geo.size(), "");
    for (size_t gi = 0; gi < gc->dev.geo.size(); gi++) bytes += gradcomm_gpu_refresh_unit(gc, grid, (int)gi, grads, 0);
    gradcomm_gpu_refresh_results(gc, NULL, grid->stream);
    gradcomm_gpu_print_power(gc, step);
    return bytes;
}

// ----------------------------------------------------------------------------
// the step phases: geofp8_device_begin / _finish taken apart (whiten, amax | dequantize,
// unwhiten), so that each part gets its own timer span

// native: returns the bytes sent
static inline double gradcomm_gpu_native(GradCommGPU* gc, CommGridGPU* grid, float* grads, bool geometry, GradCommTimer* t) {
    GeoFP8Device* g = &gc->dev;
    cudaStream_t s = grid->stream;
    double bytes = 0.0;
    int sp = gradcomm_timer_begin(t, GC_T_AMAX);
    geofp8_device_amax(g, grads, s);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin(t, GC_T_NCCL);
    comm_gpu_allreduce_f32_max(grid, g->amax, g->amax, g->num_groups);
    gradcomm_timer_end(t, sp);
    bytes += comm_gpu_ring_bytes(grid, 4.0 * g->num_groups);
    sp = gradcomm_timer_begin(t, GC_T_QUANTIZE);
    geofp8_device_scales(g, s);  // a non-finite amax sets g->skip: the quantizer then leaves codes and residuals alone
    geofp8_device_quantize(g, grads, geometry || gc->fp8_ef ? 1 : 0, s);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin(t, GC_T_NCCL);
    comm_gpu_allreduce_fp8_sum(grid, g->q, g->q, gc->num_params, gc->fmt);
    gradcomm_timer_end(t, sp);
    bytes += comm_gpu_ring_bytes(grid, (double)gc->num_params);
    sp = gradcomm_timer_begin(t, GC_T_DECODE);
    geofp8_device_dequantize(g, grads, s);
    gradcomm_timer_end(t, sp);
    return bytes;
}

// twophase: returns the bytes sent, or -1 when the step must be skipped (before the server phase,
// so that a skipped step leaves the server residual as it was, as gradcomm_twophase does)
static inline double gradcomm_gpu_twophase(GradCommGPU* gc, CommGridGPU* grid, float* grads, bool geometry, GradCommTimer* t) {
    GeoFP8Device* g = &gc->dev;
    cudaStream_t s = grid->stream;
    const int N = gc->world_size, U = g->units.dev.num_units;
    const double P = (double)gc->num_params;
    int sp = gradcomm_timer_begin(t, GC_T_AMAX);
    geofp8_device_amax(g, grads, s);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin(t, GC_T_QUANTIZE);
    geofp8_device_scales(g, s);  // local scales (N = 1)
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin(t, GC_T_NCCL);
    comm_gpu_allreduce_f32_max(grid, g->skip, g->skip, 1);
    gradcomm_timer_end(t, sp);
    float skip = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&skip, g->skip, sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (skip != 0.0f) return -1.0;
    sp = gradcomm_timer_begin(t, GC_T_QUANTIZE);
    geofp8_device_quantize(g, grads, geometry || gc->fp8_ef ? 1 : 0, s);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin(t, GC_T_NCCL);
    comm_gpu_allgather_bytes(grid, g->exps, g->exps_all, 4 * (size_t)U);
    comm_gpu_alltoall_bytes(grid, g->q, g->recv, g->shard_size);
    gradcomm_timer_end(t, sp);
    double bytes = (N - 1) * 4.0 * U + (N > 1 ? (double)(N - 1) / N * P : 0.0);  // scales, then codes
    sp = gradcomm_timer_begin(t, GC_T_DECODE);
    geofp8_device_twophase_server(g, s);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin(t, GC_T_NCCL);
    comm_gpu_allgather_bytes(grid, g->mine, g->q, g->shard_size);
    comm_gpu_allgather_bytes(grid, g->server_exps, g->server_exps_all, 4 * (size_t)U);
    gradcomm_timer_end(t, sp);
    bytes += (N > 1 ? (double)(N - 1) / N * P : 0.0) + (N - 1) * 4.0 * U;
    sp = gradcomm_timer_begin(t, GC_T_DECODE);
    geofp8_twophase_dequantize(g->fmt, grads, g->q, g->server_exps_all, g->shard_size, g->world_size, &g->units, s);
    gradcomm_timer_end(t, sp);
    return bytes;
}

// Scores this step's fc1/fc2 units while profiling; at the end of the window, puts the chosen
// units on the geometry path from the next step (llmc/gradcomm_common.h, as gradcomm_profile).
static inline void gradcomm_gpu_profile(GradCommGPU* gc, int step) {
    gradcomm_profile_accumulate(&gc->score_sum, gc->units, gc->stats, gc->world_size);
    if (++gc->profiled_steps < gc->profile_steps) return;
    gc->profiling = false;
    gc->geometry_start = step + 1;
    for (int u : gradcomm_profile_select(gc->score_sum, gc->profiled_steps, gc->units, gc->top_k, gc->rank, gc->output_dir, gc->geometry_start)) {
        gradcomm_gpu_add_geo(gc, u);
        if (!gc->fp8_ef) continue;
        // --fp8-ef: the unit's residual moves to the geometry path (gradcomm_profile), its part of
        // the flat buffers is zeroed
        const size_t o = gc->units[u].offset, n = gradcomm_gpu_unit_size(gc->units[u]);
        CUDA_CHECK(cudaMemcpy(gc->dev.geo.back().residual, gc->ef_res + o, n * sizeof(float), cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemset(gc->ef_res + o, 0, n * sizeof(float)));
        if (gc->ef_next) CUDA_CHECK(cudaMemset(gc->ef_next + o, 0, n * sizeof(float)));
    }
}

// Makes the fair figures' buffers for the geometry units of now (once: they never change
// afterwards), with a zero counterfactual residual and no window open.
static inline void gradcomm_gpu_cf_make(GradCommGPU* gc) {
    GradCommCounterfactual& cf = gc->cf;
    if (cf.num_units == gc->dev.geo.size()) return;
    if (cf.num_units) { fprintf(stderr, "gradcomm_gpu_cf_make: the geometry units changed\n"); exit(1); }
    for (const GeoFP8DeviceUnit& gu : gc->dev.geo) {
        cf.off.push_back(cf.total);
        cf.size.push_back((size_t)gu.d_out * gu.d_in);
        cf.total += cf.size.back();
    }
    cf.num_units = cf.size.size();
    geofp8_units_create(&cf.table, cf.off, cf.size);
    cf.raw = cuda_malloc<float>(cf.total);
    cf.x = cuda_malloc<float>(cf.total);
    if (gc->cf_from) {  // logical rank 0's, made before (its communication runs first)
        if (gc->cf_from->total != cf.total) { fprintf(stderr, "gradcomm_gpu_cf_make: logical rank 0 has no such buffers\n"); exit(1); }
        cf.from = gc->cf_from;
        cf.exact = cf.from->exact;
        cf.geo = cf.from->geo;
        cf.win = cf.from->win;
    } else {
        cf.exact = cuda_malloc<float>(cf.total);
        cf.geo = cuda_malloc<float>(cf.total);
        cf.win = cuda_malloc<float>(4 * cf.total);
    }
    cf.cf_residual = cuda_malloc<float>(cf.total);
    CUDA_CHECK(cudaMemset(cf.cf_residual, 0, cf.total * sizeof(float)));
    std::vector<float*> ptrs;
    for (size_t o : cf.off) ptrs.push_back(cf.cf_residual + o);
    cf.cf_residual_ptrs = cuda_malloc<float*>(cf.num_units);
    CUDA_CHECK(cudaMemcpy(cf.cf_residual_ptrs, ptrs.data(), ptrs.size() * sizeof(float*), cudaMemcpyHostToDevice));
    cf.q = cuda_malloc<uint8_t>(cf.total);
    cf.amax = cuda_malloc<float>(cf.num_units);
    cf.scale = cuda_malloc<float>(cf.num_units);
    cf.skip = cuda_malloc<float>(1);
    cf.scratch = cuda_malloc<double>(4 * (size_t)std::max(cf.table.dev.num_chunks, 1));
}

// Copies the geometry units of a num_params buffer (grads) into a concatenation (dst, cf.total).
static inline void gradcomm_gpu_gather_geo(GradCommGPU* gc, float* dst, const float* grads, cudaStream_t s) {
    const GradCommCounterfactual& cf = gc->cf;
    for (size_t i = 0; i < cf.num_units; i++)
        CUDA_CHECK(cudaMemcpyAsync(dst + cf.off[i], grads + gc->units[gc->dev.geo[i].unit].offset, cf.size[i] * sizeof(float),
                                   cudaMemcpyDeviceToDevice, s));
}

// Plain fp8 of x (cf.total, consumed: the average replaces it), as the native fp8 mode would
// communicate it: one scale per unit from a MAX all-reduce of its amax, quantize (with error
// feedback into `residual`, device pointers per unit, or NULL), FP8 SUM all-reduce, decode / (s N).
// gradcomm_fp8_geo_sum of the CPU engine. False (x untouched) if an amax is non-finite, on every rank alike.
static inline bool gradcomm_gpu_fp8_geo_sum(GradCommGPU* gc, CommGridGPU* grid, float* x, float* const* residual, cudaStream_t s) {
    GradCommCounterfactual& cf = gc->cf;
    const size_t ng = cf.num_units;
    geofp8_amax_units(cf.amax, x, &cf.table, s);
    comm_gpu_allreduce_f32_max(grid, cf.amax, cf.amax, ng);
    geofp8_block_scales(gc->fmt, cf.scale, NULL, cf.skip, cf.amax, ng, gc->world_size, s);
    float hskip = 0.0f;
    CUDA_CHECK(cudaMemcpyAsync(&hskip, cf.skip, sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (hskip != 0.0f) return false;
    geofp8_quantize_ef_units(gc->fmt, cf.q, residual, x, cf.scale, 0, &cf.table, NULL, NULL, s);
    comm_gpu_allreduce_fp8_sum(grid, cf.q, cf.q, cf.total, gc->fmt);
    geofp8_dequantize_units(gc->fmt, x, cf.q, cf.scale, 0, gc->world_size, &cf.table, NULL, s);
    return true;
}

static inline double gradcomm_gpu_rel_l2(GradCommGPU* gc, const float* got, const float* ref, cudaStream_t s) {
    return gradcomm_rel_l2_of_sums(geofp8_fidelity_sums(gc->cf.scratch, got, ref, &gc->cf.table, s), gc->cf.num_units);
}

// The fair fidelity figures of one step of the geometry path (native sum), on every such step
// while --fidelity-every > 0: gradcomm_fair_step of the CPU engine, on the device. cf.raw holds
// the geometry units' G (kept before the transform), grads the communicated average. The exact
// average is an fp32 SUM all-reduce of cf.raw; (b) and (c) go through gradcomm_gpu_fp8_geo_sum,
// (b) with cf.cf_residual; the window sums are float adds in step order, as on the CPU.
// Test hook TRAIN_LLAMA_TEST_DUMP_GEO as the CPU engine's.
static inline void gradcomm_gpu_fair_step(GradCommGPU* gc, CommGridGPU* grid, const float* grads, int step, bool fidelity, cudaStream_t s) {
    GradCommCounterfactual& cf = gc->cf;
    GradCommGPUStats& st = gc->stats;
    const size_t n = cf.total;
    const char* dump = getenv("TRAIN_LLAMA_TEST_DUMP_GEO");
    if (dump) {
        char name[4096];
        snprintf(name, sizeof(name), "%s/s%d_r%d.f32", dump, step + 1, gc->rank);
        std::vector<float> h = cuda_download(cf.raw, n);
        gradcomm_test_dump(name, h.data(), n);
    }
    const bool own = cf.from == NULL;  // exact, geo and win are this rank's (not logical rank 0's)
    if (own) gradcomm_gpu_gather_geo(gc, cf.geo, grads, s);
    comm_gpu_allreduce_f32_sum(grid, cf.raw, cf.exact, n);
    if (own) geofp8_average(cf.exact, n, gc->world_size, s);
    CUDA_CHECK(cudaMemcpyAsync(cf.x, cf.raw, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    geofp8_residual_add(cf.x, cf.cf_residual, n, s);
    if (!gradcomm_gpu_fp8_geo_sum(gc, grid, cf.x, cf.cf_residual_ptrs, s)) CUDA_CHECK(cudaMemsetAsync(cf.x, 0xFF, n * sizeof(float), s));  // NaN
    if (!gradcomm_gpu_fp8_geo_sum(gc, grid, cf.raw, NULL, s)) CUDA_CHECK(cudaMemsetAsync(cf.raw, 0xFF, n * sizeof(float), s));
    if (dump && gc->rank == 0) {
        char name[4096];
        snprintf(name, sizeof(name), "%s/s%d_geo.f32", dump, step + 1);
        std::vector<float> h = cuda_download(cf.geo, n);
        gradcomm_test_dump(name, h.data(), n);
        gradcomm_test_dump_sizes(dump, cf.size);
    }
    if (fidelity) {
        st.rel_l2_geo_fp8ef = gradcomm_gpu_rel_l2(gc, cf.x, cf.exact, s);
        st.rel_l2_geo_fp8 = gradcomm_gpu_rel_l2(gc, cf.raw, cf.exact, s);
    }
    const int W = gc->fidelity_window, age = step - gc->geometry_start;
    if (age / W != cf.win_index) {
        cf.win_index = age / W;
        cf.win_steps = 0;
        if (own) CUDA_CHECK(cudaMemsetAsync(cf.win, 0, 4 * n * sizeof(float), s));
    }
    const float* parts[4] = {cf.exact, cf.geo, cf.x, cf.raw};
    if (own) for (int k = 0; k < 4; k++) geofp8_residual_add(cf.win + k * n, parts[k], n, s);  // win_k += part_k
    cf.win_steps++;
    if ((age + 1) % W == 0) {
        st.has_window = true;
        st.window_steps = cf.win_steps;
        st.win_rel_l2_geo = gradcomm_gpu_rel_l2(gc, cf.win + n, cf.win, s);
        st.win_rel_l2_geo_fp8ef = gradcomm_gpu_rel_l2(gc, cf.win + 2 * n, cf.win, s);
        st.win_rel_l2_geo_fp8 = gradcomm_gpu_rel_l2(gc, cf.win + 3 * n, cf.win, s);
        cf.win_index = -1;
    }
}

// RelL2 and cosine of grads (device) against gc->ref (device): per-unit sums on the device.
static inline void gradcomm_gpu_fidelity(GradCommGPU* gc, const float* grads, cudaStream_t stream) {
    std::vector<bool> is_geo(gc->units.size());
    for (size_t u = 0; u < gc->units.size(); u++) is_geo[u] = gradcomm_gpu_geo_index(gc, (int)u) >= 0;
    gradcomm_fidelity_finish(&gc->stats, geofp8_fidelity_sums(gc->fid_scratch, grads, gc->ref, &gc->fid_units, stream), is_geo);
}

// The entry point: averages grads (num_params, device) over ranks in the configured mode. With
// `fidelity`, also all-reduces an fp32 copy and records how far the result is from it. The
// result is in gc->stats (stats.skipped: every rank skips this step). Synchronizes the stream.
static inline void gradcomm_gpu_reduce(GradCommGPU* gc, CommGridGPU* grid, float* grads, int step, bool fidelity, GradCommTimer* t) {
    GradCommGPUStats& st = gc->stats;
    const size_t U = gc->units.size(), P = gc->num_params;
    const int N = gc->world_size;
    cudaStream_t s = grid->stream;
    st.bytes = 0.0;
    st.skipped = false;
    st.refreshed = false;
    st.has_fidelity = fidelity && gc->ref;
    st.has_window = false;
    bool fair = false;  // the geometry units' G kept for the fair figures (gradcomm_gpu_fair_step)
    st.saturated.assign(U, 0); st.underflow.assign(U, 0); st.nonzero.assign(U, 0); st.sum_saturated.assign(U, 0);
    if (st.has_fidelity) {
        comm_gpu_allreduce_f32_sum(grid, grads, gc->ref, P);
        if (!gc->ref_shared) geofp8_average(gc->ref, P, N, s);
    }
    if (gc->mode == "fp32") {
        int sp = gradcomm_timer_begin(t, GC_T_NCCL);
        comm_gpu_allreduce_f32_sum(grid, grads, grads, P);
        gradcomm_timer_end(t, sp);
        sp = gradcomm_timer_begin(t, GC_T_DECODE);
        geofp8_average(grads, P, N, s);
        gradcomm_timer_end(t, sp);
        st.bytes = comm_gpu_ring_bytes(grid, 4.0 * P);
    } else if (gc->mode == "bf16") {
        int sp = gradcomm_timer_begin(t, GC_T_QUANTIZE);
        geofp8_bf16_encode(gc->codes16, grads, P, s);
        gradcomm_timer_end(t, sp);
        sp = gradcomm_timer_begin(t, GC_T_NCCL);
        comm_gpu_allreduce_bf16_sum(grid, gc->codes16, gc->codes16, P);
        gradcomm_timer_end(t, sp);
        sp = gradcomm_timer_begin(t, GC_T_DECODE);
        geofp8_bf16_decode_average(grads, gc->codes16, P, N, s);
        gradcomm_timer_end(t, sp);
        st.bytes = comm_gpu_ring_bytes(grid, 2.0 * P);
    } else {
        if (gc->ema > 0.0f && gc->sketch_now) geofp8_device_ema_update(&gc->dev, gc->ema, s);
        if (gc->refresh_now) {
            int sp = gradcomm_timer_begin(t, GC_T_REFRESH);
            if (gc->ema > 0.0f) geofp8_device_ema_to_sketch(&gc->dev, gc->ema, s);
            st.bytes += gradcomm_gpu_refresh(gc, grid, grads, step);
            gradcomm_timer_end(t, sp);
            st.refreshed = true;
        }
        // X = G for Euclidean units; X = G T + R on the geometry path (in place: grads is overwritten anyway)
        bool geometry = gc->geometry_start >= 0 && step >= gc->geometry_start && !gc->dev.geo.empty();
        if (gc->fair && geometry) {  // the raw G of the geometry units, for gradcomm_gpu_fair_step
            gradcomm_gpu_cf_make(gc);
            gradcomm_gpu_gather_geo(gc, gc->cf.raw, grads, s);
            fair = true;
        }
        if (geometry || gc->fp8_ef) {
            int sp = gradcomm_timer_begin(t, GC_T_WHITEN);
            if (geometry) geofp8_device_whiten(&gc->dev, grads, s);
            if (gc->fp8_ef) gradcomm_gpu_ef_add(gc, grads, 0, (int)U, s);  // X = G + R off the geometry path
            gradcomm_timer_end(t, sp);
        }
        double b = gc->twophase ? gradcomm_gpu_twophase(gc, grid, grads, geometry, t) : gradcomm_gpu_native(gc, grid, grads, geometry, t);
        if (b < 0) {
            st.skipped = true;
            return;
        }
        st.bytes += b;
        if (geometry) {
            int sp = gradcomm_timer_begin(t, GC_T_UNWHITEN);
            geofp8_device_unwhiten(&gc->dev, grads, s);
            gradcomm_timer_end(t, sp);
        }
        int sp = gradcomm_timer_begin(t, GC_T_NCCL);
        comm_gpu_allreduce_u64_sum(grid, gc->dev.counts, gc->dev.counts, 3 * U);  // sum_saturated: already the same sum everywhere
        gradcomm_timer_end(t, sp);
        if (geofp8_device_read_stats(&gc->dev, st.saturated.data(), st.underflow.data(), st.nonzero.data(), st.sum_saturated.data(), s)) {
            st.skipped = true;  // a non-finite amax (after the MAX all-reduce: on every rank alike)
            return;
        }
        if (gc->profiling) gradcomm_gpu_profile(gc, step);
    }
    if (st.has_fidelity) gradcomm_gpu_fidelity(gc, grads, s);
    if (fair) gradcomm_gpu_fair_step(gc, grid, grads, step, fidelity, s);
}

// ----------------------------------------------------------------------------
// bucketed steps (--bucket-mb > 0): the communication of gradcomm_gpu_reduce, bucket by bucket
// on its own stream while the last micro-step's backward runs (llmc/gradcomm.h's contract).
//
//   gradcomm_gpu_start        before the last micro-step's backward: decides whether this step
//                             goes out in buckets (not on a fidelity step, not with twophase,
//                             not on a refresh step of kfac or --geofp8-ema: those communicate
//                             after the backward as before)
//   gradcomm_gpu_unit_ready   from the backward, after each unit's gradient is final; at a
//                             bucket's last unit, an event on the trainer's stream, and the bucket
//                             stream waits for it and runs the bucket:
//       every mode   the local amax of each unit's G (+Inf: a non-finite element), the check
//                    the unbucketed step makes with the gradient norm before it communicates
//       fp32         f32 SUM of each unit (one NCCL group per bucket), / N
//       bf16         encode, bf16 SUM of each unit, decode / N
//       FP8 modes    [fair figures: its geometry units' G kept] | [refresh step: the refresh of
//                    its geometry units, gradcomm_gpu_refresh_unit, with the carried residual
//                    in the second buffer and the old factor kept for a skip] |
//                    X = G T + R on its geometry units | amax | f32 MAX of its scale groups |
//                    scales | quantize (new residuals into the second buffer) | E4M3 SUM of each
//                    unit | decode / (s N) | unwhiten
//   gradcomm_gpu_bucket_wait  after the backward: waits for the bucket stream; whether every
//                             local G was finite (the trainer then agrees on a skip over ranks)
//   gradcomm_gpu_bucket_finish  on a kept step: the --geofp8-ema average, the counts, the scale
//                             skip, the new residuals swapped in, the fair figures
//   gradcomm_gpu_bucket_abort   on a skipped step: the old factors back in use (the residuals in
//                             use were never touched)
// Each unit's arithmetic is that of the unbucketed step, so every bucket layout gives bitwise its
// result wherever the collectives sum each element in the same order.

// Before the last micro-step's backward of `step`; returns whether it goes out in buckets.
static inline bool gradcomm_gpu_start(GradCommGPU* gc, CommGridGPU* grid, int step, bool fidelity, GradCommTimer* t) {
    gc->step = step;
    gc->last_backward = true;
    gc->geometry_now = gc->has_device && gc->geometry_start >= 0 && step >= gc->geometry_start && !gc->dev.geo.empty();
    // kfac's refresh needs the output gradients the backward is still observing, and an ema
    // refresh the window's average updated before it: both on the trainer's stream, after it
    const bool refresh_after = gc->refresh_now && (gc->mode == "kfac" || gc->ema > 0.0f);
    gc->bucketed_now = gc->bucketing && !refresh_after && !(fidelity && gc->ref);
    gc->refresh_bucketed = gc->bucketed_now && gc->refresh_now;
    if (!gc->bucketed_now) return false;
    gc->refreshed.assign(gc->dev.geo.size(), 0);
    gc->chosen.assign(gc->dev.geo.size(), "");
    gc->refresh_bytes = 0.0;
    if (gc->fair && gc->geometry_now) gradcomm_gpu_cf_make(gc);  // cf.raw: each bucket keeps its units' G
    gc->bucket_grid = *grid;
    gc->bucket_grid.stream = gc->bucket_stream;
    gc->bucket_timer = t;
    if (gc->has_device) geofp8_device_step_begin(&gc->dev, gc->bucket_stream);
    return true;
}

// The geometry units of bucket b, whitened (forward) or mapped back.
static inline void gradcomm_gpu_bucket_transform(GradCommGPU* gc, int b, float* grads, bool forward) {
    for (int u = gc->bucket_lo[b]; u < gc->bucket_hi[b]; u++) {
        int gi = gc->dev.unit_to_geo[u];
        if (gi < 0) continue;
        if (forward) geofp8_device_whiten_unit(&gc->dev, gi, grads, gc->bucket_stream, gc->refresh_bucketed ? 1 : 0);
        else geofp8_device_unwhiten_unit(&gc->dev, gi, grads, gc->bucket_stream);
    }
}

// The fair figures' cf.raw: bucket b's geometry units' G, before the transform.
static inline void gradcomm_gpu_bucket_keep_raw(GradCommGPU* gc, int b, const float* grads) {
    const GradCommCounterfactual& cf = gc->cf;
    for (int u = gc->bucket_lo[b]; u < gc->bucket_hi[b]; u++) {
        const int gi = gc->dev.unit_to_geo[u];
        if (gi < 0) continue;
        CUDA_CHECK(cudaMemcpyAsync(cf.raw + cf.off[gi], grads + gc->units[u].offset, cf.size[gi] * sizeof(float), cudaMemcpyDeviceToDevice,
                                   gc->bucket_stream));
    }
}

// Bucket b's communication on the bucket stream (see above).
static inline void gradcomm_gpu_bucket_launch(GradCommGPU* gc, int b, float* grads) {
    CommGridGPU* grid = &gc->bucket_grid;
    GradCommTimer* t = gc->bucket_timer;
    cudaStream_t s = gc->bucket_stream;
    const int lo = gc->bucket_lo[b], hi = gc->bucket_hi[b], N = gc->world_size;
    const GeoFP8UnitTable* r = &gc->bucket_units[b];
    auto unit_ptr = [&](int u) { return grads + gc->units[u].offset; };
    auto unit_n = [&](int u) { return gradcomm_gpu_unit_size(gc->units[u]); };
    int sp = gradcomm_timer_begin_on(t, GC_T_AMAX, s);
    geofp8_amax_units(gc->local_amax + lo, grads, r, s);
    gradcomm_timer_end(t, sp);
    if (gc->mode == "fp32" || gc->mode == "bf16") {
        const bool b16 = gc->mode == "bf16";
        if (b16) {
            sp = gradcomm_timer_begin_on(t, GC_T_QUANTIZE, s);
            for (int u = lo; u < hi; u++) geofp8_bf16_encode(gc->codes16 + gc->units[u].offset, unit_ptr(u), unit_n(u), s);
            gradcomm_timer_end(t, sp);
        }
        sp = gradcomm_timer_begin_on(t, GC_T_NCCL, s);
        comm_gpu_group_begin(grid);
        for (int u = lo; u < hi; u++) {
            if (b16) comm_gpu_allreduce_bf16_sum(grid, gc->codes16 + gc->units[u].offset, gc->codes16 + gc->units[u].offset, unit_n(u));
            else comm_gpu_allreduce_f32_sum(grid, unit_ptr(u), unit_ptr(u), unit_n(u));
        }
        comm_gpu_group_end(grid);
        gradcomm_timer_end(t, sp);
        sp = gradcomm_timer_begin_on(t, GC_T_DECODE, s);
        for (int u = lo; u < hi; u++) {
            if (b16) geofp8_bf16_decode_average(unit_ptr(u), gc->codes16 + gc->units[u].offset, unit_n(u), N, s);
            else geofp8_average(unit_ptr(u), unit_n(u), N, s);
        }
        gradcomm_timer_end(t, sp);
        return;
    }
    GeoFP8Device* g = &gc->dev;
    if (gc->geometry_now) {
        if (gc->fair) gradcomm_gpu_bucket_keep_raw(gc, b, grads);
        if (gc->refresh_bucketed) {
            sp = gradcomm_timer_begin_on(t, GC_T_REFRESH, s);
            for (int u = lo; u < hi; u++) {
                const int gi = g->unit_to_geo[u];
                if (gi < 0) continue;
                gc->refresh_bytes += gradcomm_gpu_refresh_unit(gc, grid, gi, grads, 1);
                gc->refreshed[gi] = 1;
            }
            gradcomm_timer_end(t, sp);
        }
        sp = gradcomm_timer_begin_on(t, GC_T_WHITEN, s);
        gradcomm_gpu_bucket_transform(gc, b, grads, true);
        gradcomm_timer_end(t, sp);
    }
    if (gc->fp8_ef) {
        sp = gradcomm_timer_begin_on(t, GC_T_WHITEN, s);
        gradcomm_gpu_ef_add(gc, grads, lo, hi, s);
        gradcomm_timer_end(t, sp);
    }
    sp = gradcomm_timer_begin_on(t, GC_T_AMAX, s);
    geofp8_device_amax_range(g, grads, r, lo, s);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin_on(t, GC_T_NCCL, s);
    float* amax = g->amax + geofp8_device_first_group(g, lo);
    comm_gpu_allreduce_f32_max(grid, amax, amax, geofp8_device_num_groups(g, lo, hi));
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin_on(t, GC_T_QUANTIZE, s);
    geofp8_device_scales_range(g, r, lo, s);
    geofp8_device_quantize_range(g, grads, r, lo, gc->geometry_now || gc->fp8_ef ? 1 : 0, s);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin_on(t, GC_T_NCCL, s);
    comm_gpu_group_begin(grid);
    for (int u = lo; u < hi; u++) comm_gpu_allreduce_fp8_sum(grid, g->q + gc->units[u].offset, g->q + gc->units[u].offset, unit_n(u), gc->fmt);
    comm_gpu_group_end(grid);
    gradcomm_timer_end(t, sp);
    sp = gradcomm_timer_begin_on(t, GC_T_DECODE, s);
    geofp8_device_dequantize_range(g, grads, r, lo, s);
    gradcomm_timer_end(t, sp);
    if (gc->geometry_now) {
        sp = gradcomm_timer_begin_on(t, GC_T_UNWHITEN, s);
        gradcomm_gpu_bucket_transform(gc, b, grads, false);
        gradcomm_timer_end(t, sp);
    }
}

// From the backward on `stream` (the trainer's): unit's gradient in grads is final.
static inline void gradcomm_gpu_unit_ready(GradCommGPU* gc, int unit, float* grads, cudaStream_t stream) {
    if (!gc->bucketed_now || !gc->last_backward) return;
    const int b = gc->unit_bucket[unit];
    if (unit != gc->bucket_lo[b]) return;  // not the bucket's last unit yet
    CUDA_CHECK(cudaEventRecord(gc->bucket_ready[b], stream));
    CUDA_CHECK(cudaStreamWaitEvent(gc->bucket_stream, gc->bucket_ready[b], 0));
    gradcomm_gpu_bucket_launch(gc, b, grads);
}

// After the backward of a bucketed step: the trainer's stream waits for the bucket stream, and
// the host for both; returns whether every unit's local G was finite.
static inline bool gradcomm_gpu_bucket_wait(GradCommGPU* gc, cudaStream_t stream) {
    gc->last_backward = false;
    CUDA_CHECK(cudaEventRecord(gc->bucket_done, gc->bucket_stream));
    CUDA_CHECK(cudaStreamWaitEvent(stream, gc->bucket_done, 0));
    std::vector<float> amax(gc->units.size());
    CUDA_CHECK(cudaMemcpyAsync(amax.data(), gc->local_amax, amax.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (float a : amax) if (!(a <= FLT_MAX)) return false;
    return true;
}

// A bucketed step every rank keeps (no rank saw a non-finite loss or G): what
// gradcomm_gpu_reduce does after its collectives; grads holds the communicated average.
// stats.skipped: a non-finite scale (every rank alike; a refresh of this step stays, with its
// residual carried, as in the unbucketed step); the new residuals are kept otherwise.
// Synchronizes the stream.
static inline void gradcomm_gpu_bucket_finish(GradCommGPU* gc, CommGridGPU* grid, const float* grads, GradCommTimer* t) {
    GradCommGPUStats& st = gc->stats;
    const size_t U = gc->units.size(), P = gc->num_params;
    cudaStream_t s = grid->stream;
    st.bytes = 0.0;
    st.skipped = false;
    st.refreshed = false;
    st.has_fidelity = false;
    st.has_window = false;  // gradcomm_gpu_fair_step sets it when a window ends here
    st.saturated.assign(U, 0); st.underflow.assign(U, 0); st.nonzero.assign(U, 0); st.sum_saturated.assign(U, 0);
    if (gc->mode == "fp32") { st.bytes = comm_gpu_ring_bytes(grid, 4.0 * P); return; }
    if (gc->mode == "bf16") { st.bytes = comm_gpu_ring_bytes(grid, 2.0 * P); return; }
    GeoFP8Device* g = &gc->dev;
    if (gc->ema > 0.0f && gc->sketch_now) geofp8_device_ema_update(g, gc->ema, s);  // (never on a bucketed refresh step)
    st.bytes = comm_gpu_ring_bytes(grid, 4.0 * g->num_groups) + comm_gpu_ring_bytes(grid, (double)P);
    if (gc->refresh_bucketed) {
        st.bytes += gc->refresh_bytes;
        st.refreshed = true;
        gradcomm_gpu_refresh_results(gc, &gc->refreshed, s);
        gradcomm_gpu_print_power(gc, gc->step);
    }
    int sp = gradcomm_timer_begin(t, GC_T_NCCL);
    comm_gpu_allreduce_u64_sum(grid, g->counts, g->counts, 3 * U);
    gradcomm_timer_end(t, sp);
    if (geofp8_device_read_stats(g, st.saturated.data(), st.underflow.data(), st.nonzero.data(), st.sum_saturated.data(), s)) {
        st.skipped = true;
        for (size_t gi = 0; gi < g->geo.size(); gi++) {  // the carry into the residual in use, as the unbucketed refresh did
            GeoFP8DeviceUnit& gu = g->geo[gi];
            if (gc->refreshed[gi]) geofp8_carry_residual(g, gu.residual, gu.d_out, gu.d_in, gu.factor_next, gu.factor, gu.r, s);
        }
        return;
    }
    if (gc->geometry_now || gc->fp8_ef) gradcomm_gpu_swap_residuals(gc);
    if (gc->profiling) gradcomm_gpu_profile(gc, gc->step);
    if (gc->fair && gc->geometry_now) gradcomm_gpu_fair_step(gc, grid, grads, gc->step, false, s);
}

// A bucketed step that every rank skips (a non-finite loss or G somewhere): its refreshes are
// undone, so that the next step runs with the state of before this one.
static inline void gradcomm_gpu_bucket_abort(GradCommGPU* gc) {
    for (size_t gi = 0; gi < gc->refreshed.size(); gi++)
        if (gc->refreshed[gi]) geofp8_device_refresh_undo(&gc->dev, (int)gi);
    gc->refreshed.assign(gc->refreshed.size(), 0);
}

// ----------------------------------------------------------------------------
// checkpoint state: the names and layouts of gradcomm_save / gradcomm_load. With --virtual-ranks
// the process's logical rank v adds its own state under gradcomm_vprefix(v) (v > 0: only that;
// what every rank has alike is logical rank 0's to write)

static inline void gradcomm_gpu_save(const GradCommGPU* gc, std::vector<CheckpointArray>* out, int v = 0) {
    if (!gradcomm_gpu_is_fp8(gc)) return;
    const std::string vp = gradcomm_vprefix(v);
    if (v == 0) {
        std::vector<float> sel = {(float)gc->geometry_start, (float)gc->profiled_steps, (float)(gc->profiling ? 1 : 0)};
        for (const GeoFP8DeviceUnit& gu : gc->dev.geo) sel.push_back((float)gu.unit);
        out->push_back({"gradcomm.selection", sel});
        out->push_back({"gradcomm.scores", std::vector<float>(gc->score_sum.begin(), gc->score_sum.end())});
    }
    for (const GeoFP8DeviceUnit& gu : gc->dev.geo) {
        const std::string p = "gradcomm." + gc->units[gu.unit].name + ".";
        out->push_back({vp + gc->units[gu.unit].name + ".residual", cuda_download(gu.residual, (size_t)gu.d_out * gu.d_in)});
        if (v == 0 && gu.kfac) {
            out->push_back({p + "LA", cuda_download(gu.LA, (size_t)gu.d_in * gu.d_in)});
            out->push_back({p + "LG", cuda_download(gu.LG, (size_t)gu.d_out * gu.d_out)});
        } else if (v == 0) {
            out->push_back({p + "factor", cuda_download(gu.factor, geofp8_factor_floats(gu.d_in, gu.r))});
        }
        if (gc->ema > 0.0f && !gu.kfac && gu.Y_ema) {
            const size_t dk = (size_t)gu.d_in * gu.k;
            double tr = 0.0;
            CUDA_CHECK(cudaMemcpy(&tr, gu.trA_ema, sizeof(double), cudaMemcpyDeviceToHost));
            gradcomm_save_ema(vp + gc->units[gu.unit].name + ".", cuda_download(gu.omega, dk), cuda_download(gu.Y_ema, dk), tr, gu.ema_steps, out);
        }
    }
    if (gc->twophase) out->push_back({vp + "server_residual", cuda_download(gc->dev.server_residual, gc->dev.shard_size)});
    if (gc->fp8_ef) out->push_back({vp + "fp8ef_residual", cuda_download(gc->ef_res, gc->num_params)});
    const GradCommCounterfactual& cf = gc->cf;
    if (gc->fair && cf.num_units) {  // the fair figures' state, under gradcomm_save's names
        const size_t n = cf.total;
        out->push_back({vp + "fair.cf_residual", cuda_download(cf.cf_residual, n)});
        if (v > 0) return;
        out->push_back({"gradcomm.fair.window", {(float)cf.win_index, (float)cf.win_steps}});
        if (cf.win_index >= 0) {
            const char* names[4] = {"gradcomm.fair.win_exact", "gradcomm.fair.win_geo", "gradcomm.fair.win_fp8ef", "gradcomm.fair.win_fp8"};
            for (int k = 0; k < 4; k++) out->push_back({names[k], cuda_download(cf.win + k * n, n)});
        }
    }
}

// Restores what gradcomm_gpu_save (or the CPU engine's gradcomm_save) wrote, logical rank v's
// own state under gradcomm_vprefix(v); user_error naming the file.
static inline void gradcomm_gpu_load(GradCommGPU* gc, const CheckpointState* s, const char* path, int v = 0) {
    if (!gradcomm_gpu_is_fp8(gc)) return;
    const std::string vp = gradcomm_vprefix(v);
    auto need = [&](const std::string& name, size_t size) -> const CheckpointArray* {
        const CheckpointArray* a = checkpoint_find_extra(s, name);
        if (!a || (size != (size_t)-1 && a->data.size() != size))
            user_error("-y: state file '%s' lacks '%s' (or it has the wrong size); was it written with another -c mode?", path, name.c_str());
        return a;
    };
    auto upload = [](float* dst, const std::vector<float>& src) {
        CUDA_CHECK(cudaMemcpy(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice));
    };
    const CheckpointArray* sel = need("gradcomm.selection", (size_t)-1);
    if (sel->data.size() < 3) user_error("-y: state file '%s' has a malformed gradcomm.selection", path);
    const CheckpointArray* scores = need("gradcomm.scores", gc->units.size());
    gc->score_sum.assign(scores->data.begin(), scores->data.end());
    gc->geometry_start = (int)sel->data[0];
    gc->profiled_steps = (int)sel->data[1];
    gc->profiling = sel->data[2] != 0.0f;
    // the device keeps the units added at init (explicit layers, kfac): they must be the saved ones
    if (gc->dev.geo.size() > sel->data.size() - 3)
        user_error("-y: state file '%s' has %zu geometry units, this run starts with %zu (--geofp8-layers changed?)", path,
                   sel->data.size() - 3, gc->dev.geo.size());
    for (size_t i = 3; i < sel->data.size(); i++) {
        int u = (int)sel->data[i];
        if (u < 0 || u >= (int)gc->units.size() || !gc->units[u].is_matrix)
            user_error("-y: state file '%s' names unit %d, which is not a linear unit of this model", path, u);
        if (gc->dev.unit_to_geo[u] < 0) gradcomm_gpu_add_geo(gc, u);
        GeoFP8DeviceUnit& gu = gc->dev.geo[gc->dev.unit_to_geo[u]];
        const std::string p = "gradcomm." + gc->units[u].name + ".", pv = vp + gc->units[u].name + ".";
        upload(gu.residual, need(pv + "residual", (size_t)gu.d_out * gu.d_in)->data);
        if (gu.kfac) {
            upload(gu.LA, need(p + "LA", (size_t)gu.d_in * gu.d_in)->data);
            upload(gu.LG, need(p + "LG", (size_t)gu.d_out * gu.d_out)->data);
        } else {
            upload(gu.factor, need(p + "factor", geofp8_factor_floats(gu.d_in, gu.r))->data);
            gu.factor_version++;  // the next Ω's U_prev is this factor's (geofp8_device_fetch_U)
            if (gc->ema > 0.0f && checkpoint_find_extra(s, pv + "ema_meta")) {
                const size_t dk = (size_t)gu.d_in * gu.k;
                if (!gu.Y_ema) gu.Y_ema = cuda_malloc<float>(dk), gu.trA_ema = cuda_malloc<double>(1);
                upload(gu.omega, need(pv + "omega", dk)->data);
                upload(gu.Y_ema, need(pv + "ema_Y", dk)->data);
                double tr = 0.0;
                gradcomm_load_ema_meta(need(pv + "ema_meta", 3)->data, &tr, &gu.ema_steps);
                CUDA_CHECK(cudaMemcpy(gu.trA_ema, &tr, sizeof(double), cudaMemcpyHostToDevice));
            }
        }
    }
    if (gc->twophase) upload(gc->dev.server_residual, need(vp + "server_residual", gc->dev.shard_size)->data);
    if (gc->fp8_ef) upload(gc->ef_res, need(vp + "fp8ef_residual", gc->num_params)->data);
    // the fair figures' state, when the run that wrote the file measured them (else they start afresh)
    if (gc->fair && checkpoint_find_extra(s, "gradcomm.fair.cf_residual") && !gc->dev.geo.empty()) {
        gradcomm_gpu_cf_make(gc);
        GradCommCounterfactual& cf = gc->cf;
        const size_t n = cf.total;
        upload(cf.cf_residual, need(vp + "fair.cf_residual", n)->data);
        const CheckpointArray* w = need("gradcomm.fair.window", 2);
        cf.win_index = (int)w->data[0];
        cf.win_steps = (int)w->data[1];
        if (cf.win_index >= 0) {
            const char* names[4] = {"gradcomm.fair.win_exact", "gradcomm.fair.win_geo", "gradcomm.fair.win_fp8ef", "gradcomm.fair.win_fp8"};
            for (int k = 0; k < 4; k++) upload(cf.win + k * n, need(names[k], n)->data);
        }
    }
}

// ----------------------------------------------------------------------------
// logs: the step line's tail and the metrics.jsonl fields of gradcomm_step_summary / gradcomm_log_fields

static inline std::string gradcomm_gpu_step_summary(const GradCommGPU* gc) {
    return gradcomm_stats_summary(gc->stats, gradcomm_gpu_is_fp8(gc));
}

static inline void gradcomm_gpu_log_fields(const GradCommGPU* gc, std::string* line) {
    static const std::vector<int> none;
    const std::vector<int>& to_geo = gc->has_device ? gc->dev.unit_to_geo : none;
    if (to_geo.size() == gc->units.size()) gradcomm_stats_log_fields(gc->units, to_geo, gc->stats, gradcomm_gpu_is_fp8(gc), line);
    else gradcomm_stats_log_fields(gc->units, std::vector<int>(gc->units.size(), -1), gc->stats, gradcomm_gpu_is_fp8(gc), line);
}

// " | fwd 1.2 bwd 2.3 comm 0.4 (nccl 0.3) opt 0.5 ms": the timing tail of the step line.
static inline std::string gradcomm_timer_summary(const GradCommTimer* t) {
    char b[200];
    snprintf(b, sizeof(b), " | fwd %.1f bwd %.1f comm %.1f (nccl %.1f) opt %.1f ms", t->ms[GC_T_FORWARD], t->ms[GC_T_BACKWARD],
             t->ms[GC_T_COMM], t->ms[GC_T_NCCL], t->ms[GC_T_OPTIMIZER]);
    return b;
}

// metrics.jsonl: "t_forward_ms", "t_backward_ms", "t_comm_ms", "t_refresh_ms", "t_whiten_ms", ...
static inline void gradcomm_timer_log_fields(const GradCommTimer* t, std::string* line) {
    for (int p = 0; p < GC_T_NUM; p++) {
        std::string key = std::string("t_") + GRADCOMM_PHASE_NAMES[p] + "_ms";
        logger_field(line, key.c_str(), t->ms[p]);
    }
}
