// crossentropy.h — softmax cross-entropy over a padded vocabulary.
// Shapes: logits, dlogits (N, Vp); targets (N) int32 in [0, V); losses (N).
// Only the first V columns of a row are real tokens: the padded columns [V, Vp) never enter the
// softmax and get dlogits exactly 0, so the padded rows of lm_head stay zero.
// Conventions: losses written (=) per position, the functions return their mean.
// crossentropy_forward_backward_cpu WRITES (=) dlogits = (softmax - onehot) * dloss and may run in
// place (dlogits == logits), which saves an (N, Vp) buffer; dloss is the weight of one position
// (1/N for the mean over a batch, 1/(N * grad_accum) under gradient accumulation).
// Precision: max subtraction and exp in fp32, the normalizer and the mean in double.
#pragma once
#include <cstddef>
#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

// Returns log(sum_v exp(row[v])) over the first V columns; *sum_out = sum_v exp(row[v] - *max_out).
static inline double crossentropy_row_lse(const float* row, int V, float* max_out, double* sum_out) {
    float m = -INFINITY;
    for (int v = 0; v < V; v++) m = row[v] > m ? row[v] : m;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += expf(row[v] - m);
    *max_out = m;
    *sum_out = sum;
    return (double)m + log(sum);
}

// Mean in double, serially: the order is fixed, so the loss is the same for any thread count.
static inline float crossentropy_mean(const float* losses, int N) {
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return (float)(total / N);
}

static inline float crossentropy_forward_cpu(float* losses,        // (N)
                                             const float* logits,  // (N, Vp)
                                             const int* targets,   // (N)
                                             int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* row = logits + (size_t)n * Vp;
        float m;
        double sum;
        double lse = crossentropy_row_lse(row, V, &m, &sum);
        losses[n] = (float)(lse - (double)row[targets[n]]);
    }
    return crossentropy_mean(losses, N);
}

static inline float crossentropy_forward_backward_cpu(float* losses,        // (N)
                                                      float* dlogits,       // (N, Vp), may == logits
                                                      const float* logits,  // (N, Vp)
                                                      const int* targets,   // (N)
                                                      int N, int V, int Vp, float dloss) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* row = logits + (size_t)n * Vp;
        float* drow = dlogits + (size_t)n * Vp;
        int target = targets[n];
        float m;
        double sum;
        double lse = crossentropy_row_lse(row, V, &m, &sum);
        // The loss reads row[target] before the in-place loop below overwrites it.
        losses[n] = (float)(lse - (double)row[target]);
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; v++) {
            float p = expf(row[v] - m) * inv;
            drow[v] = (p - (v == target ? 1.0f : 0.0f)) * dloss;
        }
        for (int v = V; v < Vp; v++) drow[v] = 0.0f;
    }
    return crossentropy_mean(losses, N);
}
