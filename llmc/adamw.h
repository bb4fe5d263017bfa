// adamw.h — AdamW, fp32 CPU reference with torch.optim.AdamW semantics.
//
// What: one step on a flat slice of n parameters (embeddings, lm_head, norm weights; any
// layout, the update is elementwise). param, grad, m, v are all (n). step is 1-based: the
// number of updates including this one, as torch's state["step"] after its increment.
//
//   param *= 1 - lr*wd                                   (decoupled weight decay)
//   m      = lerp(m, g, 1 - beta1)                       (first moment)
//   v      = beta2*v + (1 - beta2)*g²                    (second moment)
//   param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//
// Conventions: param, m, v updated in place (=); grad read only. The order of operations and
// the lerp form follow torch's single-tensor path, so an fp32 run tracks torch fp32 to within
// rounding. Bias corrections are computed in double (torch computes them as Python floats)
// and rounded once. Elementwise, so the OpenMP split does not change any result.
#pragma once
#include <cmath>
#include <cstddef>

// torch's lerp: start + w*(end - start) for w < 0.5, else end - (end - start)*(1 - w);
// the two forms keep the result exact at w = 0 and w = 1 respectively.
static inline float adamw_lerp(float start, float end, float w) {
    return w < 0.5f ? start + w * (end - start) : end - (end - start) * (1.0f - w);
}

static inline void adamw_update_cpu(float* param, const float* grad, float* m, float* v, size_t n,
                                    float lr, float beta1, float beta2, float eps,
                                    float weight_decay, int step) {
    const double bias_correction1 = 1.0 - pow((double)beta1, (double)step);
    const double bias_correction2 = 1.0 - pow((double)beta2, (double)step);
    const float step_size = (float)((double)lr / bias_correction1);
    const float bias_correction2_sqrt = (float)sqrt(bias_correction2);
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const float w1 = 1.0f - beta1;
    const float w2 = 1.0f - beta2;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        float p = param[i] * decay;
        float mi = adamw_lerp(m[i], g, w1);
        float vi = v[i] * beta2 + w2 * g * g;
        float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        param[i] = p + (-step_size * mi) / denom;  // torch addcdiv: self + (value * t1) / t2
    }
}
