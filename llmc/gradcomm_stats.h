// gradcomm_stats.h — what one step of gradient communication reports, and how it is logged
// (host only), shared by the CPU (llmc/gradcomm.h) and GPU (llmc/gradcomm.cuh) engines so both
// write the same step-line tail and the same metrics.jsonl fields.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "llama.h"
#include "logger.h"

// Per-unit figures of one step (summed over ranks), and the fidelity on --fidelity-every steps.
typedef struct {
    double bytes;                  // sent by this rank
    bool skipped;                  // a non-finite amax: the step must be skipped by every rank
    bool refreshed;                // the geometry factors were refreshed this step
    std::vector<long> saturated;   // (units) codes at ±448 after local quantization
    std::vector<long> underflow;   // (units) nonzero values that quantized to ±0
    std::vector<long> nonzero;     // (units)
    std::vector<long> sum_saturated;  // (units) codes at ±448 after the native FP8 sum
    bool has_fidelity;
    std::vector<double> rel_l2, cos;  // (units) against the fp32 average
    double rel_l2_all, cos_all, rel_l2_geo, cos_geo;  // all units; the geometry units together
} GradCommStats;

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
        else snprintf(b, sizeof(b), " | fid rel %.3e cos %.6f (geo rel %.3e)", st.rel_l2_all, st.cos_all, st.rel_l2_geo);
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
        logger_field(line, "fidelity_rel_l2_geo", st.rel_l2_geo);
        logger_field(line, "fidelity_cos_geo", st.cos_geo);
        std::string json = "{";
        for (size_t u = 0; u < units.size(); u++) {
            std::string v;
            logger_json_number(&v, st.rel_l2[u]);
            v += ", ";
            logger_json_number(&v, st.cos[u]);
            json += (json.size() > 1 ? ", \"" : "\"") + units[u].name + "\": [" + v + "]";
        }
        json += "}";
        logger_field_json(line, "fidelity_units", json);  // name: [rel_l2, cos]
    }
}
