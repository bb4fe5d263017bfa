"""Layer oracles -> test/fixtures/layers.fix.

Generated with torch 2.15.0 and transformers 5.24.0 (CPU); see make_fixtures.sh.
Oracles: torch autograd, torch.nn.functional, Hugging Face LlamaRMSNorm, LlamaRotaryEmbedding
and apply_rotary_pos_emb. Inputs are float32 values, computed in float64, stored as float32.
Every backward is d(sum(out * dout)) / d(input) with a random normal dout, except the
cross-entropy, whose dlogits is d(mean loss) / dlogits.
LlamaRMSNorm and LlamaRotaryEmbedding work in float32 internally even on float64 inputs; the script
prints how far that is from float64 (about 1e-7).
"""
import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from common import FIXTURE_DIR, RMSNORM_EPS, ROPE_THETA, f32, randn, read_fixture, write_fixture

B, T, C, OC, NH, NKV, HS, FF, V, Vp = 2, 8, 64, 96, 4, 2, 16, 48, 500, 512
N = B * T
PAD_LOGIT = 8.0  # large padded logits: a kernel that reads them gets a visibly wrong loss


def grads_of(out, dout, inputs):
    return torch.autograd.grad((out * dout).sum(), inputs)


def layer_matmul(rng, fx):
    inp = randn(rng, (N, C)).requires_grad_()
    weight = randn(rng, (OC, C), 0.1).requires_grad_()
    out = F.linear(inp, weight)
    dout = randn(rng, (N, OC))
    dinp, dweight = grads_of(out, dout, [inp, weight])
    fx.update({"matmul.inp": f32(inp), "matmul.weight": f32(weight), "matmul.out": f32(out),
               "matmul.dout": f32(dout), "matmul.dinp": f32(dinp), "matmul.dweight": f32(dweight)})


def layer_encoder(rng, fx):
    tokens = rng.integers(0, V, size=N)
    tokens[5] = tokens[0]   # repeated ids: the backward must sum their rows
    tokens[9] = tokens[0]
    tokens[12] = tokens[3]
    assert len(set(tokens.tolist())) <= N - 3
    wte = randn(rng, (Vp, C)).requires_grad_()
    out = F.embedding(torch.from_numpy(tokens), wte)
    dout = randn(rng, (N, C))
    (dwte,) = grads_of(out, dout, [wte])
    fx.update({"encoder.tokens": tokens.astype(np.int32), "encoder.wte": f32(wte),
               "encoder.out": f32(out), "encoder.dout": f32(dout), "encoder.dwte": f32(dwte)})


def layer_rmsnorm(rng, fx):
    inp = randn(rng, (N, C), 2.0)
    inp[3] *= 0.01  # one small-norm row, where eps matters more
    inp.requires_grad_()
    norm = LlamaRMSNorm(C, eps=RMSNORM_EPS).to(torch.float64)
    with torch.no_grad():
        norm.weight.copy_(1.0 + randn(rng, (C,), 0.3))
    out = norm(inp)
    dout = randn(rng, (N, C))
    dinp, dweight = grads_of(out, dout, [inp, norm.weight])
    fx.update({"rmsnorm.inp": f32(inp), "rmsnorm.weight": f32(norm.weight), "rmsnorm.out": f32(out),
               "rmsnorm.dout": f32(dout), "rmsnorm.dinp": f32(dinp), "rmsnorm.dweight": f32(dweight)})
    # LlamaRMSNorm normalizes in float32 internally; report how far that is from float64
    x = inp.detach()
    exact = norm.weight.detach() * x / torch.sqrt((x * x).mean(-1, keepdim=True) + RMSNORM_EPS)
    print("rmsnorm: LlamaRMSNorm vs float64 formula max rel err %.2e"
          % ((out.detach() - exact).abs().max() / exact.abs().max()).item())


def rope_tables():
    config = LlamaConfig(hidden_size=NH * HS, num_attention_heads=NH, num_key_value_heads=NKV,
                         max_position_embeddings=T,
                         rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    rotary = LlamaRotaryEmbedding(config)
    position_ids = torch.arange(T)[None]
    cos, sin = rotary(torch.zeros(1, dtype=torch.float64), position_ids)  # (1, T, HS)
    # HF evaluates the angles in float32; the engine computes its tables in double and stores
    # float, so report the gap.
    inv_freq = ROPE_THETA ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq
    ang = torch.cat([ang, ang], -1)
    print("rope: HF cos/sin vs float64 max abs err %.2e"
          % max((cos[0] - ang.cos()).abs().max().item(), (sin[0] - ang.sin()).abs().max().item()))
    return cos, sin


def rope_apply(qkv, cos, sin):
    """qkv (B,T,(NH+2NKV)*HS) -> same, q and k heads rotated by HF, v copied."""
    q = qkv[..., :NH * HS].reshape(B, T, NH, HS).transpose(1, 2)
    k = qkv[..., NH * HS:(NH + NKV) * HS].reshape(B, T, NKV, HS).transpose(1, 2)
    v = qkv[..., (NH + NKV) * HS:]
    q, k = apply_rotary_pos_emb(q, k, cos, sin)  # cos/sin (1,T,HS) broadcast over heads
    q = q.transpose(1, 2).reshape(B, T, NH * HS)
    k = k.transpose(1, 2).reshape(B, T, NKV * HS)
    return torch.cat([q, k, v], -1)


def layer_rope(rng, fx):
    inp = randn(rng, (B, T, (NH + 2 * NKV) * HS)).requires_grad_()
    cos, sin = rope_tables()
    out = rope_apply(inp, cos, sin)
    dout = randn(rng, out.shape)
    (dinp,) = grads_of(out, dout, [inp])
    fx.update({"rope.inp": f32(inp), "rope.out": f32(out), "rope.dout": f32(dout),
               "rope.dinp": f32(dinp)})


def layer_attention(rng, fx):
    qkv = randn(rng, (B, T, (NH + 2 * NKV) * HS)).requires_grad_()
    q = qkv[..., :NH * HS].reshape(B, T, NH, HS).transpose(1, 2)
    k = qkv[..., NH * HS:(NH + NKV) * HS].reshape(B, T, NKV, HS).transpose(1, 2)
    v = qkv[..., (NH + NKV) * HS:].reshape(B, T, NKV, HS).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=HS ** -0.5, enable_gqa=True)
    # same result with the kv heads repeated explicitly (q head h uses kv head h / (NH/NKV))
    rep = NH // NKV
    y2 = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                        is_causal=True)
    assert torch.allclose(y, y2, rtol=0, atol=1e-12)
    out = y.transpose(1, 2).reshape(B, T, NH * HS)
    dout = randn(rng, out.shape)
    (dqkv,) = grads_of(out, dout, [qkv])
    fx.update({"attention.qkv": f32(qkv), "attention.out": f32(out), "attention.dout": f32(dout),
               "attention.dqkv": f32(dqkv)})


def layer_swiglu(rng, fx):
    inp = randn(rng, (N, 2 * FF), 2.0).requires_grad_()
    out = F.silu(inp[:, :FF]) * inp[:, FF:]
    dout = randn(rng, out.shape)
    (dinp,) = grads_of(out, dout, [inp])
    fx.update({"swiglu.inp": f32(inp), "swiglu.out": f32(out), "swiglu.dout": f32(dout),
               "swiglu.dinp": f32(dinp)})


def layer_crossentropy(rng, fx):
    logits = randn(rng, (N, Vp), 2.0)
    logits[:, V:] = PAD_LOGIT
    logits.requires_grad_()
    targets = rng.integers(0, V, size=N)
    t = torch.from_numpy(targets)
    losses = F.cross_entropy(logits[:, :V], t, reduction="none")
    loss = F.cross_entropy(logits[:, :V], t)
    (dlogits,) = torch.autograd.grad(loss, [logits])
    assert torch.all(dlogits[:, V:] == 0)
    fx.update({"crossentropy.logits": f32(logits), "crossentropy.targets": targets.astype(np.int32),
               "crossentropy.losses": f32(losses), "crossentropy.loss": f32(loss.reshape(1)),
               "crossentropy.dlogits": f32(dlogits)})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", default=os.path.join(FIXTURE_DIR, "layers.fix"))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    fx = {"dims": np.array([B, T, C, OC, NH, NKV, HS, FF, V, Vp], dtype=np.int32)}
    for make in (layer_matmul, layer_encoder, layer_rmsnorm, layer_rope, layer_attention,
                 layer_swiglu, layer_crossentropy):
        make(rng, fx)
    write_fixture(args.out, fx)
    back = read_fixture(args.out)
    assert list(back) == list(fx)
    for name, a in fx.items():
        assert back[name].shape == a.shape and np.array_equal(back[name], np.asarray(a).astype(back[name].dtype))
    print("wrote %s: %d tensors, %d bytes" % (args.out, len(fx), os.path.getsize(args.out)))


if __name__ == "__main__":
    main()
