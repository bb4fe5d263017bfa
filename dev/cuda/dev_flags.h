// dev_flags.h — the command line of the dev/cuda tools (dev_attention, with flags of its own,
// reads its own): one parser, so that each tool refuses a flag it does not take the same way, its
// usage line on stderr and exit 2, before it looks for a device.
//
//   --validate-only   the checks against the CPU reference, no benchmark
//   --small           the checks at the shapes dev/emu runs in reasonable time (implies
//                     --validate-only; dev_muon's --compare --small compares at tiny's shapes)
//   --compare         the kernel timed against the version it replaced (dev/bench_small_kernels.sh)
#pragma once
#include <cstdio>
#include <cstring>

enum DevFlag { DEV_FLAG_SMALL = 1, DEV_FLAG_COMPARE = 2 };  // which flags beyond --validate-only a tool takes

struct DevFlags {
    bool validate_only = false, small = false, compare = false;
};

// Reads argv into *f. A flag outside the tool's set (DevFlag bits in `takes`): the usage line on
// stderr and false, for main to return 2.
static inline bool dev_flags_parse(int argc, char** argv, const char* tool, int takes, DevFlags* f) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--validate-only") == 0) f->validate_only = true;
        else if ((takes & DEV_FLAG_SMALL) && strcmp(argv[i], "--small") == 0) f->small = f->validate_only = true;
        else if ((takes & DEV_FLAG_COMPARE) && strcmp(argv[i], "--compare") == 0) f->compare = true;
        else {
            fprintf(stderr, "%s: unknown flag '%s'; usage: %s [--validate-only]%s%s\n", tool, argv[i], tool,
                    (takes & DEV_FLAG_SMALL) ? " [--small]" : "", (takes & DEV_FLAG_COMPARE) ? " [--compare]" : "");
            return false;
        }
    }
    return true;
}
