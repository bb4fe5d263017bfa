// adamw.cuh — AdamW on the GPU with torch.optim.AdamW semantics. CPU reference: adamw.h.
// What: one step on a flat slice of n parameters (embeddings, lm_head, norm weights; any layout,
// the update is elementwise); step is 1-based.
//   param *= 1 - lr*wd;  m = lerp(m, g, 1 - beta1);  v = beta2*v + (1 - beta2)*g²
//   param -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Shapes: param, grad, m, v (n) fp32; param_bf16 (n) bf16 or NULL.
// The gradient is read as grad * grad_scale (one fp32 multiply, never fused into what follows):
// the gradient clip's scale, so that the clip needs no pass of its own and the update sees
// exactly the values an in-place clip (train_llama_cpu's) would have left; 1 when not clipping.
// Conventions: param, m, v updated in place (=); grad read only; when param_bf16 is not NULL the
// compute copy of the updated weight is written there too (so no separate cast pass is needed).
// Precision: fp32, the same operation order as adamw_update_cpu; the bias corrections are
// computed on the host in double exactly as the CPU does and passed in as floats.
// Stream: the stream argument.
#pragma once
#include "cuda_common.cuh"
#include "adamw.h"

static const int ADAMW_BLOCK = 256;

// param, grad, m, v (n) fp32; param_bf16 (n) or NULL
__global__ void adamw_update_kernel(float* param, bf16* param_bf16, const float* grad, float grad_scale, float* m, float* v, size_t n,
                                    float beta2, float eps, float step_size, float bias_correction2_sqrt,
                                    float decay, float w1, float w2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        float g = __fmul_rn(grad[i], grad_scale);  // the clipped gradient, rounded as a stored one
        float p = param[i] * decay;
        float mi = m[i];
        mi = w1 < 0.5f ? mi + w1 * (g - mi) : g - (g - mi) * (1.0f - w1);  // torch's lerp (adamw_lerp)
        float vi = v[i] * beta2 + w2 * g * g;
        float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        p = p + (-step_size * mi) / denom;
        param[i] = p;
        if (param_bf16 != NULL) param_bf16[i] = __float2bfloat16(p);
    }
}

static inline void adamw_update(float* param,       // (n)
                                bf16* param_bf16,   // (n) or NULL
                                const float* grad,  // (n)
                                float grad_scale,   // the clip's scale (1: none)
                                float* m,           // (n)
                                float* v,           // (n)
                                size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                                int step, cudaStream_t stream) {
    if (n == 0) return;
    const double bias_correction1 = 1.0 - pow((double)beta1, (double)step);
    const double bias_correction2 = 1.0 - pow((double)beta2, (double)step);
    const float step_size = (float)((double)lr / bias_correction1);
    const float bias_correction2_sqrt = (float)sqrt(bias_correction2);
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    adamw_update_kernel<<<cuda_grid_for(n, ADAMW_BLOCK), ADAMW_BLOCK, 0, stream>>>(
        param, param_bf16, grad, grad_scale, m, v, n, beta2, eps, step_size, bias_correction2_sqrt, decay, 1.0f - beta1, 1.0f - beta2);
    KERNEL_CHECK();
}
