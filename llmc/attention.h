// attention.h — causal multi-head attention with grouped-query attention (GQA), fp32 reference.
// Shapes: qkv (B, T, (NH + 2*NKV) * HS), columns [NH q heads | NKV k heads | NKV v heads], each head
// HS wide, q and k already rotated by rope; out (B, T, NH * HS); lse (B, NH, T).
// q head h reads kv head h / (NH / NKV), so each kv head serves a consecutive group of q heads.
// Scores are q·k / sqrt(HS) with key positions j <= t.
// Conventions: forward writes out and lse (=); backward accumulates (+=) into dqkv.
// Memory: no (T, T) matrix is kept. The forward saves lse, the log-sum-exp of each scaled score
// row, and the backward recomputes each probability row as exp(score - lse) (as FlashAttention
// does), using D_t = sum(dout_t * out_t) for the softmax Jacobian.
// Precision: fp32 scores and products, softmax normalizer and D_t summed in double.
// Determinism: every output element is produced by one work item in a fixed loop order
// (forward over (b, h), backward over (b, kv head)), so results do not depend on threads.
#pragma once
#include <cstddef>
#include <cmath>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

// Dot product over a head. Eight independent partial sums give the compiler a reduction it may
// vectorize without -ffast-math, in an order fixed by the code rather than by the optimizer.
static inline float attention_dot(const float* a, const float* b, int n) {
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    }
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// y += a * x over a head. The simd pragma vectorizes this at -O2 too (no reduction, so it cannot
// change the result).
static inline void attention_axpy(float* y, float a, const float* x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static inline void attention_forward_cpu(float* out,        // (B, T, NH * HS)
                                         float* lse,        // (B, NH, T)
                                         const float* qkv,  // (B, T, (NH + 2*NKV) * HS)
                                         int B, int T, int NH, int NKV, int HS) {
    const size_t qkv_row = (size_t)(NH + 2 * NKV) * HS;
    const size_t out_row = (size_t)NH * HS;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel
    {
        std::vector<float> scores(T);  // one score row, reused for every t
        std::vector<float> acc(HS);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH, kvh = h / group;
            const float* base = qkv + (size_t)b * T * qkv_row;
            const float* kbase = base + (size_t)(NH + kvh) * HS;
            const float* vbase = base + (size_t)(NH + NKV + kvh) * HS;
            for (int t = 0; t < T; t++) {
                const float* q = base + t * qkv_row + (size_t)h * HS;
                float smax = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    float s = attention_dot(q, kbase + j * qkv_row, HS) * scale;
                    scores[j] = s;
                    if (s > smax) smax = s;
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    float p = expf(scores[j] - smax);
                    scores[j] = p;
                    sum += p;
                }
                for (int i = 0; i < HS; i++) acc[i] = 0.0f;
                for (int j = 0; j <= t; j++) attention_axpy(acc.data(), scores[j], vbase + j * qkv_row, HS);
                float inv = (float)(1.0 / sum);
                float* o = out + ((size_t)b * T + t) * out_row + (size_t)h * HS;
                for (int i = 0; i < HS; i++) o[i] = acc[i] * inv;
                lse[((size_t)b * NH + h) * T + t] = (float)((double)smax + log(sum));
            }
        }
    }
}

// With p_j = exp(s_j - lse_t), dp_j = dout_t·v_j, ds_j = p_j (dp_j - D_t), D_t = dout_t·out_t:
//   dq_t += scale Σ_j ds_j k_j,  dk_j += scale ds_j q_t,  dv_j += p_j dout_t.
static inline void attention_backward_cpu(float* dqkv,        // (B, T, (NH + 2*NKV) * HS)
                                          const float* dout,  // (B, T, NH * HS)
                                          const float* qkv,   // (B, T, (NH + 2*NKV) * HS)
                                          const float* out,   // (B, T, NH * HS)
                                          const float* lse,   // (B, NH, T)
                                          int B, int T, int NH, int NKV, int HS) {
    const size_t qkv_row = (size_t)(NH + 2 * NKV) * HS;
    const size_t out_row = (size_t)NH * HS;
    const int group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
    // dk and dv of one kv head gather terms from all q heads of its group and all t >= j, so the
    // work item is (b, kv head): it owns those rows of dk, dv and the dq of its group's heads.
#pragma omp parallel
    {
        std::vector<float> dk((size_t)T * HS), dv((size_t)T * HS);  // contiguous per-head sums
        std::vector<float> dq(HS);
#pragma omp for schedule(static)
        for (int bk = 0; bk < B * NKV; bk++) {
            int b = bk / NKV, kvh = bk % NKV;
            const float* base = qkv + (size_t)b * T * qkv_row;
            const float* kbase = base + (size_t)(NH + kvh) * HS;
            const float* vbase = base + (size_t)(NH + NKV + kvh) * HS;
            float* dbase = dqkv + (size_t)b * T * qkv_row;
            for (size_t i = 0; i < dk.size(); i++) { dk[i] = 0.0f; dv[i] = 0.0f; }
            for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                for (int t = 0; t < T; t++) {
                    const float* q = base + t * qkv_row + (size_t)h * HS;
                    const float* dy = dout + ((size_t)b * T + t) * out_row + (size_t)h * HS;
                    const float* y = out + ((size_t)b * T + t) * out_row + (size_t)h * HS;
                    double D = 0.0;
                    for (int i = 0; i < HS; i++) D += (double)dy[i] * y[i];
                    float Df = (float)D;
                    float l = lse[((size_t)b * NH + h) * T + t];
                    for (int i = 0; i < HS; i++) dq[i] = 0.0f;
                    for (int j = 0; j <= t; j++) {
                        const float* k = kbase + j * qkv_row;
                        const float* v = vbase + j * qkv_row;
                        float p = expf(attention_dot(q, k, HS) * scale - l);
                        float ds = p * (attention_dot(dy, v, HS) - Df);
                        attention_axpy(dq.data(), ds, k, HS);
                        attention_axpy(&dk[(size_t)j * HS], ds * scale, q, HS);
                        attention_axpy(&dv[(size_t)j * HS], p, dy, HS);
                    }
                    float* dqt = dbase + t * qkv_row + (size_t)h * HS;
                    for (int i = 0; i < HS; i++) dqt[i] += scale * dq[i];
                }
            }
            for (int j = 0; j < T; j++) {
                float* dkj = dbase + j * qkv_row + (size_t)(NH + kvh) * HS;
                float* dvj = dbase + j * qkv_row + (size_t)(NH + NKV + kvh) * HS;
                for (int i = 0; i < HS; i++) { dkj[i] += dk[(size_t)j * HS + i]; dvj[i] += dv[(size_t)j * HS + i]; }
            }
        }
    }
}
