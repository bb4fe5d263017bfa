// rope.h — rotary position embedding in the half-split ("rotate_half") convention of Hugging Face
// Llama, theta ROPE_THETA, so exported weights need no permutation.
// For pair i in [0, HS/2): inv_freq_i = theta^(-2i/HS), angle = t * inv_freq_i (t = 0-based
// position in the sequence), x1 = x[i], x2 = x[i + HS/2]:
//   out[i] = x1*cos - x2*sin;  out[i + HS/2] = x2*cos + x1*sin.
// Shapes: cos_table, sin_table (T, HS/2); inp, out, dinp, dout (B, T, (NH + 2*NKV) * HS) in the qkv
// column order (NH q heads, NKV k heads, NKV v heads). q and k heads are rotated, v heads copied.
// Conventions: forward and backward both WRITE (=) and may run in place (out == inp,
// dinp == dout); the backward is the transposed rotation (rotation by -angle).
// Precision: angles and their cos/sin in double, stored as fp32; rotation in fp32.
#pragma once
#include <cstddef>
#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

static const float ROPE_THETA = 10000.0f;

static inline void rope_precompute_cpu(float* cos_table,  // (T, HS/2)
                                       float* sin_table,  // (T, HS/2)
                                       int T, int HS) {
    int half = HS / 2;
    // Double angles: at t ~ 4096 a float angle would already be off by ~2e-4 rad.
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            double inv_freq = pow((double)ROPE_THETA, -2.0 * i / HS);
            double angle = (double)t * inv_freq;
            cos_table[(size_t)t * half + i] = (float)cos(angle);
            sin_table[(size_t)t * half + i] = (float)sin(angle);
        }
    }
}

// Rotates every head of one token row by the angles of its position; sign = +1 forward,
// -1 backward (the inverse rotation, which is the transpose). Reads x1, x2 before writing, so
// in place is safe.
static inline void rope_rotate_row(float* out, const float* inp, const float* cos_row,
                                   const float* sin_row, int NH, int NKV, int HS, float sign) {
    int half = HS / 2;
    for (int h = 0; h < NH + NKV; h++) {
        const float* x = inp + (size_t)h * HS;
        float* y = out + (size_t)h * HS;
        for (int i = 0; i < half; i++) {
            float c = cos_row[i], s = sign * sin_row[i];
            float x1 = x[i], x2 = x[i + half];
            y[i] = x1 * c - x2 * s;
            y[i + half] = x2 * c + x1 * s;
        }
    }
    if (out != inp) {
        size_t v0 = (size_t)(NH + NKV) * HS, v1 = (size_t)(NH + 2 * NKV) * HS;
        for (size_t c = v0; c < v1; c++) out[c] = inp[c];
    }
}

static inline void rope_forward_cpu(float* out,              // (B, T, (NH + 2*NKV) * HS)
                                    const float* inp,        // (B, T, (NH + 2*NKV) * HS)
                                    const float* cos_table,  // (T, HS/2)
                                    const float* sin_table,  // (T, HS/2)
                                    int B, int T, int NH, int NKV, int HS) {
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    int half = HS / 2;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        rope_rotate_row(out + bt * row, inp + bt * row, cos_table + (size_t)t * half,
                        sin_table + (size_t)t * half, NH, NKV, HS, 1.0f);
    }
}

// dinp = Rᵀ dout (written, not accumulated: rope sits between two buffers the trainer owns).
static inline void rope_backward_cpu(float* dinp,             // (B, T, (NH + 2*NKV) * HS)
                                     const float* dout,       // (B, T, (NH + 2*NKV) * HS)
                                     const float* cos_table,  // (T, HS/2)
                                     const float* sin_table,  // (T, HS/2)
                                     int B, int T, int NH, int NKV, int HS) {
    size_t row = (size_t)(NH + 2 * NKV) * HS;
    int half = HS / 2;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        rope_rotate_row(dinp + bt * row, dout + bt * row, cos_table + (size_t)t * half,
                        sin_table + (size_t)t * half, NH, NKV, HS, -1.0f);
    }
}
