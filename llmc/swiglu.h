// swiglu.h — the Llama MLP gate: out = silu(gate) * up, silu(x) = x * sigmoid(x).
// Shapes: inp (N, 2*FF), each row [gate (FF) | up (FF)] as produced by fc1 (rows [0, FF) of fc1w
// are the gate, [FF, 2FF) the up projection); out (N, FF).
// Conventions: forward writes out (=); backward accumulates (+=) into dinp.
// Precision: fp32. sigmoid as 1 / (1 + exp(-x)): for very negative x exp overflows to inf and the
// sigmoid correctly becomes 0, never NaN.
#pragma once
#include <cstddef>
#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

static inline void swiglu_forward_cpu(float* out,        // (N, FF)
                                      const float* inp,  // (N, 2*FF)
                                      int N, int FF) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* gate = inp + (size_t)n * 2 * FF;
        const float* up = gate + FF;
        float* y = out + (size_t)n * FF;
        for (int i = 0; i < FF; i++) {
            float g = gate[i];
            float sig = 1.0f / (1.0f + expf(-g));
            y[i] = g * sig * up[i];
        }
    }
}

// d silu(g)/dg = sig * (1 + g * (1 - sig)).
static inline void swiglu_backward_cpu(float* dinp,        // (N, 2*FF)
                                       const float* dout,  // (N, FF)
                                       const float* inp,   // (N, 2*FF)
                                       int N, int FF) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* gate = inp + (size_t)n * 2 * FF;
        const float* up = gate + FF;
        const float* dy = dout + (size_t)n * FF;
        float* dgate = dinp + (size_t)n * 2 * FF;
        float* dup = dgate + FF;
        for (int i = 0; i < FF; i++) {
            float g = gate[i];
            float sig = 1.0f / (1.0f + expf(-g));
            dgate[i] += dy[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
            dup[i] += dy[i] * g * sig;
        }
    }
}
