// test_util.h — the tiny harness every C++ test binary uses.
// Each check prints exactly one line: "PASS <name>", "FAIL <name>: <detail>" or
// "SKIP <name>: <reason>". test/run_tests.sh counts those lines over all test programs and
// prints the final "N passed, N failed, N skipped". A binary returns test_exit_code():
// 1 if anything failed, 0 otherwise.
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

// True iff every entry is finite.
static inline bool test_all_finite(const float* a, size_t n) {
    for (size_t i = 0; i < n; i++) if (!std::isfinite(a[i])) return false;
    return true;
}
