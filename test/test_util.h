// test_util.h — the tiny harness every C++ test binary uses.
// Each check prints exactly one line: "PASS <name>", "FAIL <name>: <detail>" or
// "SKIP <name>: <reason>". test/run_tests.sh counts those lines over all test programs and
// prints the final "N passed, N failed, N skipped". A binary returns test_exit_code():
// 1 if anything failed, 0 otherwise.
// A tolerance check (test_bound) prints its measurement on the PASS line as well:
// "PASS <name>: measured <value>, bound <bound>[ (<detail>)]". dev/tolerance_sweep.py reads
// those lines to find each bound's worst case over thread counts, BLAS kernels and builds.
#pragma once
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstddef>

static int test_passed = 0, test_failed = 0, test_skipped = 0;

static inline void test_check(const char* name, bool ok, const char* fmt = "", ...) {
    if (ok) {
        printf("PASS %s\n", name);
        test_passed++;
    } else {
        printf("FAIL %s: ", name);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        test_failed++;
    }
    fflush(stdout);
}

static inline void test_skip(const char* name, const char* reason) {
    printf("SKIP %s: %s\n", name, reason);
    test_skipped++;
    fflush(stdout);
}

// Passes when measured <= bound (NaN fails). For every error whose value depends on summation
// order (BLAS kernels, thread counts, FMA contraction): the comment next to `bound` gives the
// worst case dev/tolerance_sweep.py measured and the margin over it.
static inline bool test_bound(const char* name, double measured, double bound, const char* fmt = "", ...) {
    bool ok = measured <= bound;
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("%s %s: measured %.3e, bound %.3g%s%s%s\n", ok ? "PASS" : "FAIL", name, measured, bound,
           detail[0] ? " (" : "", detail, detail[0] ? ")" : "");
    if (ok) test_passed++;
    else test_failed++;
    fflush(stdout);
    return ok;
}

static inline int test_exit_code(void) { return test_failed > 0 ? 1 : 0; }

// max_i |a_i - b_i| / max(max_i |b_i|, floor): the error relative to the reference's scale,
// robust to reference entries near zero. b is the reference.
static inline double test_rel_err(const float* a, const float* b, size_t n, double floor = 1e-30) {
    double maxdiff = 0.0, maxref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= maxdiff)) maxdiff = d;  // also catches NaN
        double r = fabs((double)b[i]);
        if (r > maxref) maxref = r;
    }
    if (maxref < floor) maxref = floor;
    return maxdiff / maxref;
}

// ‖a - b‖₂ / ‖b‖₂ in double (‖a - b‖₂ where b is all zeros; NaN gives infinity). b is the
// reference. Weighs every entry by its size: the error of a tensor as a whole.
static inline double test_rel_l2(const float* a, const float* b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

// True iff every entry is finite.
static inline bool test_all_finite(const float* a, size_t n) {
    for (size_t i = 0; i < n; i++) if (!std::isfinite(a[i])) return false;
    return true;
}
