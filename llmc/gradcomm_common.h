// gradcomm_common.h — the host-side logic of gradient communication that the CPU
// (llmc/gradcomm.h) and GPU (llmc/gradcomm.cuh) engines share, so that both behave and log alike:
// what one step reports (GradCommStats) and how it is logged, the --geofp8-layers list, the
// fidelity figures, and the auto layer selection (profiling window, choice, geofp8_layers.txt).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "checkpoint.h"
#include "geofp8.h"
#include "llama.h"
#include "logger.h"
#include "train_config.h"
#include "utils.h"

// Per-unit figures of one step (summed over ranks), and the fidelity on --fidelity-every steps.
// Each communication path resets the flags at its start; the initializers cover the steps before.
typedef struct {
    double bytes = 0.0;            // sent by this rank
    bool skipped = false;          // a non-finite amax: the step must be skipped by every rank
    bool refreshed = false;        // the geometry factors were refreshed this step
    double refresh_seconds = 0.0;  // CPU engine: the refreshes' wall clock on this rank (sketch fold, Nyström, broadcast, residual carry)
    double omega_seconds = 0.0;    // host: what the step waited for its refresh's Ω (built ahead, geofp8_omega.h), set by begin_step
    std::vector<long> saturated;   // (units) codes at ± the format's max (448 / 57344) after local quantization
    std::vector<long> underflow;   // (units) nonzero values that quantized to ±0
    std::vector<long> nonzero;     // (units)
    std::vector<long> sum_saturated;  // (units) codes at ± the format's max after the native FP8 sum
    bool has_fidelity = false;
    std::vector<double> rel_l2, cos;  // (units) against the fp32 average
    double rel_l2_all = NAN, cos_all = NAN, rel_l2_geo = NAN, cos_geo = NAN;  // all units; the geometry units together
    // the least-squares slope of the communicated average h onto the exact one g, Σ h·g / Σ g²:
    // 1 when the errors are uncorrelated with g (noise), below 1 when the sum shrinks g (a bias)
    std::vector<double> slope;  // (units)
    double slope_all = NAN, slope_geo = NAN;  // all units; the geometry units together (NaN: none)
    double rel_l2_geo_fp8 = NAN;  // (c) what plain fp8 (same gradient, no transform, no error feedback) gives on them; NaN: not measured
    double rel_l2_geo_fp8ef = NAN;  // (b) plain fp8 with an error-feedback residual of its own (a counterfactual); NaN: not measured
    // the fidelity window that ends at this step (gradcomm_fair_step): RelL2 of the window's sum of
    // (a) geo as sent, (b) fp8+EF, (c) fp8 against the sum of the exact averages
    bool has_window = false;
    int window_steps = 0;   // steps in the window (fewer than W if a skipped step or a resume cut it)
    double win_rel_l2_geo = NAN, win_rel_l2_geo_fp8ef = NAN, win_rel_l2_geo_fp8 = NAN;
} GradCommStats;

// The steps that measure fidelity: every F-th (--fidelity-every F), with F raised to the smallest
// value coprime with the refresh interval K in the geometry modes. A factor's age at step s is
// (s - first geometry step) mod K, and F coprime with K makes the fidelity steps' ages run through
// every value 0..K-1 (F 5 with K 10 would see only ages 4 and 9). 0: fidelity off.
static inline int gradcomm_gcd(int a, int b) { while (b) { int t = a % b; a = b; b = t; } return a; }
static inline int gradcomm_fidelity_interval(const TrainConfig* tc) {
    int f = tc->fidelity_every;
    if (f <= 0 || (tc->comm != "geofp8" && tc->comm != "kfac")) return std::max(f, 0);
    while (gradcomm_gcd(f, tc->geofp8_refresh) != 1) f++;
    return f;
}
// --geofp8-rank full: every linear unit's d_in must fit the full factor (user_error naming the widest).
static inline void gradcomm_check_full_rank(const TrainConfig* tc, const LlamaConfig* c) {
    if (tc->geofp8_rank != "full" || tc->comm != "geofp8") return;
    for (const LlamaUnit& u : llama_units(c))
        if (u.is_matrix && u.cols > GEOFP8_RANK_MAX)
            user_error("--geofp8-rank full: the exact factor needs d_in <= %d, but %s has d_in %d (use a rank r <= %d)", GEOFP8_RANK_MAX,
                       u.name.c_str(), u.cols, GEOFP8_RANK_MAX);
}
// Whether a refresh step prints its --geofp8-power auto choices: every refresh, except that with
// --geofp8-refresh 1 only every 10th step of the geometry path (from its first) prints a line.
static inline bool gradcomm_print_power_now(int refresh_every, int step, int geometry_start) {
    return refresh_every > 1 || (step - geometry_start) % 10 == 0;
}
// The fidelity window W: --fidelity-window, or the refresh interval (one factor's whole life).
static inline int gradcomm_fidelity_window(const TrainConfig* tc) { return tc->fidelity_window > 0 ? tc->fidelity_window : tc->geofp8_refresh; }
// Is `step` (0-based) a fidelity step?
static inline bool gradcomm_fidelity_step(const TrainConfig* tc, int step) {
    const int f = gradcomm_fidelity_interval(tc);
    return f > 0 && (step + 1) % f == 0;
}

// " | fp8 sat 0 und 1234 | fid 1.2e-02 (geo 3.4e-02)": the step line's tail for the FP8 modes.
static inline std::string gradcomm_stats_summary(const GradCommStats& st, bool fp8) {
    std::string out;
    char b[160];
    if (fp8) {
        long sat = 0, und = 0, ssat = 0;
        for (size_t u = 0; u < st.saturated.size(); u++) { sat += st.saturated[u]; und += st.underflow[u]; ssat += st.sum_saturated[u]; }
        snprintf(b, sizeof(b), " | fp8 sat %ld und %ld sumsat %ld%s", sat, und, ssat, st.refreshed ? " | refresh" : "");
        out += b;
    }
    if (st.has_fidelity) {
        if (std::isnan(st.rel_l2_geo)) snprintf(b, sizeof(b), " | fid rel %.3e cos %.6f", st.rel_l2_all, st.cos_all);
        else if (std::isnan(st.rel_l2_geo_fp8)) snprintf(b, sizeof(b), " | fid rel %.3e cos %.6f (geo rel %.3e)", st.rel_l2_all, st.cos_all, st.rel_l2_geo);
        else if (std::isnan(st.rel_l2_geo_fp8ef)) snprintf(b, sizeof(b), " | fid rel %.3e cos %.6f (geo rel %.3e, fp8 on them %.3e)", st.rel_l2_all,
                                                           st.cos_all, st.rel_l2_geo, st.rel_l2_geo_fp8);
        else snprintf(b, sizeof(b), " | fid rel %.3e cos %.6f (geo rel %.3e, fp8+EF %.3e, fp8 %.3e)", st.rel_l2_all, st.cos_all, st.rel_l2_geo,
                      st.rel_l2_geo_fp8ef, st.rel_l2_geo_fp8);
        out += b;
    }
    if (st.has_window) {
        snprintf(b, sizeof(b), " | window %d: geo %.3e fp8+EF %.3e fp8 %.3e", st.window_steps, st.win_rel_l2_geo, st.win_rel_l2_geo_fp8ef,
                 st.win_rel_l2_geo_fp8);
        out += b;
    }
    return out;
}

// metrics.jsonl fields: FP8 totals, per-unit boundary hits of the geometry units, fidelity.
static inline void gradcomm_stats_log_fields(const std::vector<LlamaUnit>& units, const std::vector<int>& unit_to_geo,
                                             const GradCommStats& st, bool fp8, std::string* line) {
    if (fp8) {
        long sat = 0, und = 0, ssat = 0;
        for (size_t u = 0; u < st.saturated.size(); u++) { sat += st.saturated[u]; und += st.underflow[u]; ssat += st.sum_saturated[u]; }
        logger_field(line, "fp8_saturated", (double)sat);
        logger_field(line, "fp8_underflow", (double)und);
        logger_field(line, "fp8_sum_saturated", (double)ssat);
        logger_field(line, "geo_refresh", st.refreshed ? 1 : 0);
        std::string json = "{";
        for (size_t u = 0; u < units.size(); u++) {
            if (!units[u].is_matrix) continue;
            char b[200];
            snprintf(b, sizeof(b), "%s\"%s\": [%ld, %ld, %ld, %d]", json.size() > 1 ? ", " : "", units[u].name.c_str(),
                     st.saturated[u], st.underflow[u], st.sum_saturated[u], unit_to_geo[u] >= 0 ? 1 : 0);
            json += b;
        }
        json += "}";
        logger_field_json(line, "fp8_units", json);  // name: [saturated, underflow, sum_saturated, geometry path]
    }
    if (st.has_fidelity) {
        logger_field(line, "fidelity_rel_l2", st.rel_l2_all);
        logger_field(line, "fidelity_cos", st.cos_all);
        logger_field(line, "fidelity_slope", st.slope_all);
        logger_field(line, "fidelity_slope_geo", st.slope_geo);
        logger_field(line, "fidelity_rel_l2_geo", st.rel_l2_geo);
        logger_field(line, "fidelity_cos_geo", st.cos_geo);
        logger_field(line, "fidelity_rel_l2_geo_fp8", st.rel_l2_geo_fp8);
        logger_field(line, "fidelity_rel_l2_geo_fp8ef", st.rel_l2_geo_fp8ef);
        std::string json = "{";
        for (size_t u = 0; u < units.size(); u++) {
            std::string v;
            logger_json_number(&v, st.rel_l2[u]);
            v += ", ";
            logger_json_number(&v, st.cos[u]);
            v += ", ";
            logger_json_number(&v, st.slope[u]);
            json += (json.size() > 1 ? ", \"" : "\"") + units[u].name + "\": [" + v + "]";
        }
        json += "}";
        logger_field_json(line, "fidelity_units", json);  // name: [rel_l2, cos, slope]
    }
    if (st.has_window) {
        logger_field(line, "window_steps", st.window_steps);
        logger_field(line, "window_rel_l2_geo", st.win_rel_l2_geo);
        logger_field(line, "window_rel_l2_geo_fp8ef", st.win_rel_l2_geo_fp8ef);
        logger_field(line, "window_rel_l2_geo_fp8", st.win_rel_l2_geo_fp8);
    }
}

// ----------------------------------------------------------------------------
// --geofp8-layers as a list: "a,b,c" or a file with one name per line (anything after the name
// ignored, so geofp8_layers.txt works as written); every name must be a linear unit (qkv, proj,
// fc1, fc2) of this model. Returns unit indices, each once, in the order given (user_error).
// An empty name in the list ("," or "a,,b") is refused, not skipped: a list that names nothing
// would silently run plain fp8. Names from a file are echoed with bytes outside printable ASCII
// as \xNN, so a binary file gives a readable line.
static inline std::string gradcomm_printable(const std::string& s) {
    std::string out;
    for (unsigned char ch : s.substr(0, 64)) {
        char hex[8];
        if (ch >= 0x20 && ch < 0x7f) out += (char)ch;
        else snprintf(hex, sizeof(hex), "\\x%02x", ch), out += hex;
    }
    return s.size() > 64 ? out + "..." : out;
}

static inline std::vector<int> gradcomm_parse_layers(const std::vector<LlamaUnit>& units, const std::string& spec) {
    std::vector<std::string> names;
    std::vector<int> lines;  // file line of each name (0 for the comma list)
    FILE* f = fopen(spec.c_str(), "r");
    if (f) {
        char line[512];
        int number = 0;
        while (fgets(line, sizeof(line), f)) {
            char name[256];
            number++;
            if (sscanf(line, "%255s", name) == 1 && name[0] != '#') names.push_back(name), lines.push_back(number);
        }
        fclose(f);
        if (names.empty()) user_error("--geofp8-layers: file '%s' lists no layer names (expected one name per line, e.g. layers.3.fc2)", spec.c_str());
    } else {
        size_t start = 0;
        while (start <= spec.size()) {
            size_t end = spec.find(',', start);
            if (end == std::string::npos) end = spec.size();
            if (end == start)
                user_error("--geofp8-layers: expected layer names separated by commas (e.g. layers.0.fc2,layers.3.fc1), "
                           "found an empty name in '%s'", gradcomm_printable(spec).c_str());
            names.push_back(spec.substr(start, end - start)), lines.push_back(0);
            start = end + 1;
        }
    }
    int layers = 0;
    for (const LlamaUnit& u : units) layers = u.layer + 1 > layers ? u.layer + 1 : layers;
    std::vector<int> out;
    for (size_t k = 0; k < names.size(); k++) {
        const std::string& n = names[k];
        int u = -1;
        for (size_t i = 0; i < units.size(); i++) if (units[i].name == n) u = (int)i;
        if ((u < 0 || !units[u].is_matrix) && lines[k] > 0)
            user_error("--geofp8-layers: file '%s' line %d: '%s' is not a linear layer of this model "
                       "(expected one name per line like layers.0.fc2, with qkv, proj, fc1 or fc2 and a layer below %d)",
                       spec.c_str(), lines[k], gradcomm_printable(n).c_str(), layers);
        if (u < 0 || !units[u].is_matrix)
            user_error("--geofp8-layers: '%s' is not a file and '%s' is not a linear layer of this model "
                       "(expected auto, a file, or names like layers.0.fc2 with qkv, proj, fc1 or fc2 and a layer below %d)",
                       gradcomm_printable(spec).c_str(), gradcomm_printable(n).c_str(), layers);
        bool listed = false;  // a name given twice is one unit
        for (int v : out) listed |= v == u;
        if (!listed) out.push_back(u);
    }
    return out;
}

// Rank 0 says which units an explicit --geofp8-layers put on the geometry path, so a log shows
// what a run used (the auto selection prints its own choice).
static inline void gradcomm_print_layers(const std::vector<LlamaUnit>& units, const std::vector<int>& layers,
                                         const std::string& spec, int rank) {
    if (rank != 0) return;
    std::string names;
    for (int u : layers) names += (names.empty() ? "" : ", ") + units[u].name;
    printf("geofp8: %zu layers on the geometry path from step 1 (--geofp8-layers %s): %s\n", layers.size(),
           gradcomm_printable(spec).c_str(), names.c_str());
}

// ----------------------------------------------------------------------------
// The checkpoint names of logical rank v's own state (residuals, sketch averages) in its process's
// state file: "gradcomm.<...>" for the process's first logical rank, "gradcomm.v<v>.<...>" for the
// others (--virtual-ranks), so that files of one logical rank per process keep their names.
static inline std::string gradcomm_vprefix(int v) { return v == 0 ? "gradcomm." : "gradcomm.v" + std::to_string(v) + "."; }

// ----------------------------------------------------------------------------
// --geofp8-ema state of a unit in the checkpoint (both engines): its window's Ω, the average S,
// and [tr(A)'s average as the two halves of its double, the number of steps averaged].
static inline void gradcomm_save_ema(const std::string& prefix, const std::vector<float>& omega, const std::vector<float>& Y_ema, double trA_ema,
                                     int steps, std::vector<CheckpointArray>* out) {
    std::vector<float> meta(3);
    memcpy(meta.data(), &trA_ema, sizeof(double));
    meta[2] = (float)steps;
    out->push_back({prefix + "omega", omega});
    out->push_back({prefix + "ema_Y", Y_ema});
    out->push_back({prefix + "ema_meta", meta});
}
static inline void gradcomm_load_ema_meta(const std::vector<float>& meta, double* trA_ema, int* steps) {
    memcpy(trA_ema, meta.data(), sizeof(double));
    *steps = (int)meta[2];
}

// ----------------------------------------------------------------------------
// fidelity: RelL2, cosine and slope (Σ got·ref / Σ ref², the regression of the communicated
// average onto the fp32 one through the origin) against the fp32 average, per unit, over all
// units, and over the geometry units together (is_geo[u]; NaN when there are none), from the
// per-unit sums (4, units): Σ (got - ref)², Σ ref², Σ got², Σ got·ref, in double.
static inline void gradcomm_fidelity_finish(GradCommStats* st, const std::vector<double>& sums, const std::vector<bool>& is_geo) {
    const size_t U = is_geo.size();
    st->rel_l2.assign(U, 0.0); st->cos.assign(U, 0.0); st->slope.assign(U, 0.0);
    double ee = 0, gg = 0, hh = 0, hg = 0, ee_geo = 0, gg_geo = 0, hh_geo = 0, hg_geo = 0;
    for (size_t u = 0; u < U; u++) {
        double e2 = sums[u], g2 = sums[U + u], h2 = sums[2 * U + u], d = sums[3 * U + u];
        st->rel_l2[u] = g2 > 0 ? sqrt(e2 / g2) : 0.0;
        st->cos[u] = (g2 > 0 && h2 > 0) ? d / sqrt(g2 * h2) : 1.0;
        st->slope[u] = g2 > 0 ? d / g2 : 1.0;
        ee += e2; gg += g2; hh += h2; hg += d;
        if (is_geo[u]) { ee_geo += e2; gg_geo += g2; hh_geo += h2; hg_geo += d; }
    }
    st->rel_l2_all = gg > 0 ? sqrt(ee / gg) : 0.0;
    st->cos_all = (gg > 0 && hh > 0) ? hg / sqrt(gg * hh) : 1.0;
    st->rel_l2_geo = gg_geo > 0 ? sqrt(ee_geo / gg_geo) : NAN;
    st->cos_geo = (gg_geo > 0 && hh_geo > 0) ? hg_geo / sqrt(gg_geo * hh_geo) : NAN;
    st->slope_all = gg > 0 ? hg / gg : 1.0;
    st->slope_geo = gg_geo > 0 ? hg_geo / gg_geo : NAN;
    st->rel_l2_geo_fp8 = NAN;
    st->rel_l2_geo_fp8ef = NAN;
    st->has_fidelity = true;
}

// RelL2 over n units together from their fidelity sums (4, n) as gradcomm_fidelity_finish takes
// them (sums[i] = Σ (got - ref)², sums[n + i] = Σ ref²).
static inline double gradcomm_rel_l2_of_sums(const std::vector<double>& sums, size_t n) {
    double ee = 0.0, gg = 0.0;
    for (size_t i = 0; i < n; i++) ee += sums[i], gg += sums[n + i];
    return gg > 0 ? sqrt(ee / gg) : NAN;
}

// RelL2 of got against ref (n) in double; NaN when ref is zero.
static inline double gradcomm_rel_l2(const float* got, const float* ref, size_t n) {
    double ee = 0.0, gg = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - (double)ref[i];
        ee += d * d;
        gg += (double)ref[i] * ref[i];
    }
    return gg > 0 ? sqrt(ee / gg) : NAN;
}

// Test hook: with TRAIN_LLAMA_TEST_DUMP_GEO=DIR, every step that the fair figures measure
// (gradcomm_fair_step, gradcomm_gpu_fair_step) writes each logical rank's G of the geometry units
// (DIR/s<step>_r<rank>.f32) and, on rank 0, what the geometry path communicated
// (DIR/s<step>_geo.f32) and the units' sizes (DIR/units.txt, one per line): raw float32, units
// concatenated, so that a test can recompute the figures independently (test/fair_fidelity.py).
static inline void gradcomm_test_dump(const char* name, const float* data, size_t n) {
    FILE* f = fopen(name, "wb");
    if (!f || fwrite(data, sizeof(float), n, f) != n || fclose(f) != 0) { fprintf(stderr, "TRAIN_LLAMA_TEST_DUMP_GEO: cannot write %s\n", name); exit(1); }
}
static inline void gradcomm_test_dump_sizes(const char* dir, const std::vector<size_t>& sizes) {
    std::string name = std::string(dir) + "/units.txt";
    FILE* f = fopen(name.c_str(), "w");
    if (!f) { fprintf(stderr, "TRAIN_LLAMA_TEST_DUMP_GEO: cannot write %s\n", name.c_str()); exit(1); }
    for (size_t n : sizes) fprintf(f, "%zu\n", n);
    if (fclose(f) != 0) { fprintf(stderr, "TRAIN_LLAMA_TEST_DUMP_GEO: cannot write %s\n", name.c_str()); exit(1); }
}

// Adds the sums of entry u of (4, U) sums for got and ref (n) on the host.
static inline void gradcomm_fidelity_accumulate(std::vector<double>* sums, size_t U, size_t u, const float* got, const float* ref, size_t n) {
    double* s = sums->data();
    for (size_t i = 0; i < n; i++) {
        double a = got[i], b = ref[i];
        s[u] += (a - b) * (a - b); s[U + u] += b * b; s[2 * U + u] += a * a; s[3 * U + u] += a * b;
    }
}

// The same from host buffers got and ref (num_params).
static inline void gradcomm_fidelity(GradCommStats* st, const std::vector<LlamaUnit>& units, const std::vector<bool>& is_geo,
                                     const float* got, const float* ref) {
    const size_t U = units.size();
    std::vector<double> sums(4 * U, 0.0);
    for (size_t u = 0; u < U; u++)
        gradcomm_fidelity_accumulate(&sums, U, u, got + units[u].offset, ref + units[u].offset, (size_t)units[u].rows * units[u].cols);
    gradcomm_fidelity_finish(st, sums, is_geo);
}

// ----------------------------------------------------------------------------
// auto layer selection (DESIGN §6.4): the first --geofp8-profile-steps steps run in fp8 and
// score every fc1/fc2 unit by its vulnerability (saturated + underflowed fraction, summed over
// ranks); then the top units switch to the geometry path.

static inline bool gradcomm_is_mlp(const LlamaUnit& u) { return u.tensor == T_FC1W || u.tensor == T_FC2W; }

// Adds this step's vulnerability of every fc1/fc2 unit to score_sum (units).
static inline void gradcomm_profile_accumulate(std::vector<double>* score_sum, const std::vector<LlamaUnit>& units, const GradCommStats& st,
                                               int world_size) {
    for (size_t u = 0; u < units.size(); u++) {
        if (!gradcomm_is_mlp(units[u])) continue;
        size_t n = (size_t)units[u].rows * units[u].cols * world_size;
        (*score_sum)[u] += geofp8_vulnerability(st.saturated[u], st.underflow[u], st.nonzero[u], n);
    }
}

// After `steps` profiled steps: the units to whiten (geofp8_select_top over the mean scores).
// Rank 0 prints every candidate's score and writes the choice to output_dir/geofp8_layers.txt
// ("name score" lines, readable by --geofp8-layers); first_step is where the geometry starts (0-based).
static inline std::vector<int> gradcomm_profile_select(const std::vector<double>& score_sum, int steps, const std::vector<LlamaUnit>& units,
                                                       int top_k, int rank, const std::string& output_dir, int first_step) {
    std::vector<int> cand;
    std::vector<double> scores;
    for (size_t u = 0; u < units.size(); u++) {
        if (!gradcomm_is_mlp(units[u])) continue;
        cand.push_back((int)u);
        scores.push_back(score_sum[u] / steps);
    }
    std::vector<int> pick = geofp8_select_top(scores, top_k), chosen;
    for (int i : pick) chosen.push_back(cand[i]);
    if (rank != 0) return chosen;
    printf("geofp8: profiled %d steps in fp8; vulnerability of fc1/fc2 (saturated + underflowed fractions):\n", steps);
    for (int i : geofp8_rank_scores(scores)) {
        bool is_chosen = false;
        for (int j : pick) is_chosen |= j == i;
        printf("  %s %-16s %.6e\n", is_chosen ? "*" : " ", units[cand[i]].name.c_str(), scores[i]);
    }
    printf("geofp8: %zu layers switch to the geometry path from step %d\n", pick.size(), first_step + 1);
    if (!output_dir.empty()) {
        std::string text;
        char line[256];
        for (int i : pick) { snprintf(line, sizeof(line), "%s %.9e\n", units[cand[i]].name.c_str(), scores[i]); text += line; }
        CheckpointFile w;
        checkpoint_file_open(&w, output_dir + "/geofp8_layers.txt");
        checkpoint_file_write(&w, text.data(), 1, text.size());
        checkpoint_file_commit(&w, NULL, 0);
    }
    return chosen;
}

// ----------------------------------------------------------------------------
// gradient buckets (--bucket-mb)
//
// A bucket is a set of whole units in the order the backward finishes them: lm_head,
// final_norm, then layer L-1's fc2, fc1, ln2, proj, qkv, ln1, ..., layer 0's, and embed last. A
// bucket closes once its units hold at least bucket_mb MB (2^20 bytes) of fp32; the last one takes
// what is left. bucket_mb 0 gives one bucket of every unit. The units of a bucket are not
// contiguous in the flat layout (llama.h keeps each tensor's layers together), so each bucket
// also has a span in a packed buffer laid out in backward order: what a bucket sends (fp32, bf16
// or FP8 codes) travels there as one message.
typedef struct {
    std::vector<int> order;        // (units) unit indices in backward order
    std::vector<size_t> packed;    // (units, by unit index) the unit's offset in the packed buffer
    std::vector<int> first;        // (buckets + 1) index into order of each bucket's first unit
    std::vector<size_t> begin;     // (buckets + 1) packed offset of each bucket's first element
} GradBuckets;

static inline int gradcomm_num_buckets(const GradBuckets* b) { return (int)b->first.size() - 1; }

// Position of a unit in the backward's finishing order (see above); L = layers.
static inline int gradcomm_backward_position(const LlamaUnit& u, int L) {
    if (u.tensor == T_LMHEAD) return 0;
    if (u.tensor == T_LNFW) return 1;
    if (u.tensor == T_WTE) return 2 + 6 * L;
    int in_layer = 0;  // the order of one layer's backward
    switch (u.tensor) {
        case T_FC2W: in_layer = 0; break;
        case T_FC1W: in_layer = 1; break;
        case T_LN2W: in_layer = 2; break;
        case T_PROJW: in_layer = 3; break;
        case T_QKVW: in_layer = 4; break;
        default: in_layer = 5; break;  // T_LN1W
    }
    return 2 + 6 * (L - 1 - u.layer) + in_layer;
}

static inline GradBuckets gradcomm_buckets(const std::vector<LlamaUnit>& units, int L, double bucket_mb) {
    GradBuckets b;
    b.order.assign(units.size(), -1);
    for (size_t u = 0; u < units.size(); u++) b.order[gradcomm_backward_position(units[u], L)] = (int)u;
    b.packed.assign(units.size(), 0);
    b.first.push_back(0);
    b.begin.push_back(0);
    const double cap = bucket_mb * 1048576.0;
    size_t off = 0, start = 0;
    for (size_t i = 0; i < b.order.size(); i++) {
        const LlamaUnit& u = units[b.order[i]];
        b.packed[b.order[i]] = off;
        off += (size_t)u.rows * u.cols;
        const bool last = i + 1 == b.order.size();
        if (last || (bucket_mb > 0.0 && 4.0 * (double)(off - start) >= cap)) {
            b.first.push_back((int)i + 1);
            b.begin.push_back(off);
            start = off;
        }
    }
    return b;
}

// The start-up table's "gradient buckets" row.
static inline std::string gradcomm_buckets_summary(const GradBuckets* b, double bucket_mb, bool twophase) {
    char s[160];
    const int n = gradcomm_num_buckets(b);
    if (twophase) snprintf(s, sizeof(s), "1, sent after the backward (twophase's shards span the gradient)");
    else if (bucket_mb <= 0.0) snprintf(s, sizeof(s), "1, sent after the backward (--bucket-mb 0)");
    else snprintf(s, sizeof(s), "%d of ~%g MB, sent as the backward finishes each", n, bucket_mb);
    return s;
}
