// matmul.h — the bias-free linear layer used by every projection (qkv, proj, fc1, fc2, lm_head).
// Shapes: inp (N, C), weight (OC, C) row-major (out, in), out (N, OC); out = inp · weightᵀ.
// Conventions: forward writes out (=); backward accumulates (+=) into dinp and dweight, so
// gradients of a weight used by several micro-batches add up without extra buffers.
// Precision: fp32 in and out, OpenBLAS sgemm (row-major). For a fixed OpenBLAS thread count the
// result is deterministic.
#pragma once
#include <cblas.h>
#include <cstdio>
#include <cstdlib>

// out = inp · weightᵀ
static inline void matmul_forward_cpu(float* out,           // (N, OC)
                                      const float* inp,     // (N, C)
                                      const float* weight,  // (OC, C)
                                      int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C,
                1.0f, inp, C, weight, C, 0.0f, out, OC);
}

// dinp += dout · weight (skipped when dinp is NULL, e.g. for the first layer's input);
// dweight += doutᵀ · inp.
static inline void matmul_backward_cpu(float* dinp,          // (N, C) or NULL
                                       float* dweight,       // (OC, C)
                                       const float* dout,    // (N, OC)
                                       const float* inp,     // (N, C)
                                       const float* weight,  // (OC, C)
                                       int N, int C, int OC) {
    if (dinp != NULL) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC,
                    1.0f, dout, OC, weight, C, 1.0f, dinp, C);
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N,
                1.0f, dout, OC, inp, C, 1.0f, dweight, C);
}
