// residual.h — the residual add of each block (CPU reference).
// out (N) = a (N) + b (N), elementwise; out may alias a or b. Its backward is the identity on
// both inputs, so the trainer passes the residual gradient straight through.
#pragma once
#include <cstddef>

static inline void residual_forward_cpu(float* out, const float* a, const float* b, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
