// schedulers.h — learning-rate schedules: linear warmup, then cosine, linear or constant.
//
// What: scheduler_lr(kind, step, max_steps, warmup, peak, final_frac) gives the lr of one
// 0-based step. With min = final_frac * peak:
//   step < warmup          peak * (step + 1) / warmup   (the last warmup step reaches peak)
//   warmup <= step         decay = (step - warmup) / (max_steps - warmup), clamped to [0, 1]
//     cosine               min + 0.5 * (1 + cos(pi * decay)) * (peak - min)
//     linear               peak + decay * (min - peak)
//     constant             peak (final_frac is ignored)
// Edge cases: warmup 0 starts at peak; step >= max_steps (and max_steps <= warmup, where there
// is no decay phase) gives the final lr: min for cosine and linear, peak for constant.
// Conventions: pure functions; arithmetic in double, the result rounded to float once, so the
// CPU and CUDA trainers (and a resumed run) see bit-identical learning rates.
#pragma once
#include <cmath>
#include <cstring>

static const double SCHEDULER_PI = 3.14159265358979323846;

typedef enum { SCHEDULER_COSINE = 0, SCHEDULER_LINEAR, SCHEDULER_CONSTANT } SchedulerKind;

static inline const char* scheduler_name(SchedulerKind kind) {
    switch (kind) {
        case SCHEDULER_COSINE: return "cosine";
        case SCHEDULER_LINEAR: return "linear";
        case SCHEDULER_CONSTANT: return "constant";
    }
    return "unknown";
}

// Returns 1 and sets *out for "cosine", "linear" or "constant"; 0 (and leaves *out alone)
// for anything else, so the caller can print a user error naming the valid choices.
static inline int scheduler_from_name(const char* name, SchedulerKind* out) {
    if (name == NULL) return 0;
    const SchedulerKind all[3] = {SCHEDULER_COSINE, SCHEDULER_LINEAR, SCHEDULER_CONSTANT};
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, scheduler_name(all[i])) == 0) { *out = all[i]; return 1; }
    }
    return 0;
}

static inline float scheduler_lr(SchedulerKind kind, int step, int max_steps, int warmup,
                                 float peak, float final_frac) {
    const double hi = (double)peak;
    const double lo = kind == SCHEDULER_CONSTANT ? hi : (double)final_frac * hi;
    if (step < 0) step = 0;
    if (step < warmup && step < max_steps) return (float)(hi * (double)(step + 1) / (double)warmup);
    // Past the end (or no decay phase at all): the final lr, never a 0/0 decay fraction.
    if (step >= max_steps) return (float)lo;
    double decay = (double)(step - warmup) / (double)(max_steps - warmup);
    if (decay < 0.0) decay = 0.0;
    if (decay > 1.0) decay = 1.0;
    switch (kind) {
        case SCHEDULER_LINEAR: return (float)(hi + decay * (lo - hi));
        case SCHEDULER_CONSTANT: return (float)hi;
        case SCHEDULER_COSINE:
        default: return (float)(lo + 0.5 * (1.0 + cos(SCHEDULER_PI * decay)) * (hi - lo));
    }
}
