// encoder.h — token embedding lookup (no position embedding: positions enter through RoPE).
// Shapes: tokens (N) int32 in [0, V), wte (Vp, C), out (N, C).
// Conventions: forward writes out (=); backward accumulates (+=) into dwte.
// Precision: fp32. The backward sums the rows of dout that share a token in increasing n for
// every column, whatever the thread count, so dwte is bitwise reproducible.
#pragma once
#include <cstddef>
#ifdef _OPENMP
#include <omp.h>
#endif

// Columns per work item of the backward: wide enough for contiguous vector loads, narrow enough
// that C = 128 still splits over a few threads.
static const int ENCODER_BACKWARD_COL_BLOCK = 32;

// out[n, :] = wte[tokens[n], :]
static inline void encoder_forward_cpu(float* out,         // (N, C)
                                       const int* tokens,  // (N)
                                       const float* wte,   // (Vp, C)
                                       int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* src = wte + (size_t)tokens[n] * C;
        float* dst = out + (size_t)n * C;
        for (int c = 0; c < C; c++) dst[c] = src[c];
    }
}

// dwte[tokens[n], :] += dout[n, :]
static inline void encoder_backward_cpu(float* dwte,        // (Vp, C)
                                        const float* dout,  // (N, C)
                                        const int* tokens,  // (N)
                                        int N, int C) {
    // Repeated tokens make a scatter over n racy; splitting the columns instead gives each
    // thread a disjoint slice of dwte and a fixed summation order (n ascending).
    int nblocks = (C + ENCODER_BACKWARD_COL_BLOCK - 1) / ENCODER_BACKWARD_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * ENCODER_BACKWARD_COL_BLOCK;
        int c1 = c0 + ENCODER_BACKWARD_COL_BLOCK < C ? c0 + ENCODER_BACKWARD_COL_BLOCK : C;
        for (int n = 0; n < N; n++) {
            const float* src = dout + (size_t)n * C;
            float* dst = dwte + (size_t)tokens[n] * C;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}
