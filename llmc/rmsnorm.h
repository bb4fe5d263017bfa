// rmsnorm.h — RMSNorm without bias: out = weight * x / sqrt(mean(x^2) + RMSNORM_EPS).
// Shapes: inp, out (N, C); weight (C); rstd (N) = 1 / sqrt(mean(x^2) + eps), saved by the forward
// for the backward.
// Conventions: forward writes out and rstd (=); backward accumulates (+=) into dinp and dweight.
// Precision: fp32 storage; the per-row sums run in double (C is up to a few thousand). Each row
// and each column of dweight is reduced in a fixed order, so results do not depend on threads.
#pragma once
#include <cstddef>
#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

static const float RMSNORM_EPS = 1e-5f;
// Columns per work item of the dweight reduction (see rmsnorm_backward_cpu).
static const int RMSNORM_BACKWARD_COL_BLOCK = 32;

static inline void rmsnorm_forward_cpu(float* out,           // (N, C)
                                       float* rstd,          // (N)
                                       const float* inp,     // (N, C)
                                       const float* weight,  // (C)
                                       int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* y = out + (size_t)n * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        float r = (float)(1.0 / sqrt(ss / C + (double)RMSNORM_EPS));
        for (int c = 0; c < C; c++) y[c] = weight[c] * (x[c] * r);
        rstd[n] = r;
    }
}

// With y = x * r and g = weight * dout:  dx = r * (g - y * mean(g * y)),  dweight += sum_n dout * y.
static inline void rmsnorm_backward_cpu(float* dinp,          // (N, C)
                                        float* dweight,       // (C)
                                        const float* dout,    // (N, C)
                                        const float* inp,     // (N, C)
                                        const float* weight,  // (C)
                                        const float* rstd,    // (N)
                                        int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* dy = dout + (size_t)n * C;
        float* dx = dinp + (size_t)n * C;
        float r = rstd[n];
        double dot = 0.0;
        for (int c = 0; c < C; c++) dot += (double)(weight[c] * dy[c]) * (x[c] * r);
        float m = (float)(dot / C);
        for (int c = 0; c < C; c++) dx[c] += r * (weight[c] * dy[c] - (x[c] * r) * m);
    }
    // dweight reduces over rows: a row-parallel loop would race (or depend on the thread count
    // through per-thread partials), so this pass gives each thread whole columns instead.
    int nblocks = (C + RMSNORM_BACKWARD_COL_BLOCK - 1) / RMSNORM_BACKWARD_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * RMSNORM_BACKWARD_COL_BLOCK;
        int c1 = c0 + RMSNORM_BACKWARD_COL_BLOCK < C ? c0 + RMSNORM_BACKWARD_COL_BLOCK : C;
        double acc[RMSNORM_BACKWARD_COL_BLOCK] = {0.0};
        for (int n = 0; n < N; n++) {
            const float* x = inp + (size_t)n * C;
            const float* dy = dout + (size_t)n * C;
            float r = rstd[n];
            for (int c = c0; c < c1; c++) acc[c - c0] += (double)(dy[c] * (x[c] * r));
        }
        for (int c = c0; c < c1; c++) dweight[c] += (float)acc[c - c0];
    }
}
