"""Whole-model oracle -> test/fixtures/model.fix and test/fixtures/model_small.bin.

Generated with torch 2.15.0 and transformers 5.24.0 (CPU); see make_fixtures.sh.
The forward pass is Hugging Face LlamaForCausalLM (float64, eager attention); gradients come from
torch autograd; training uses torch.optim.Muon / torch.optim.AdamW and
torch.nn.utils.clip_grad_norm_. Parameters are float32 values, computed in float64, stored
as float32.

The trainable leaves are held in the engine's layout (one (NH+2NKV)*HS x C qkv matrix and one
2FF x C fc1 matrix per layer; q, k, v as three leaves for megatron_core) and mapped onto HF's
q/k/v/gate/up weights by slicing inside torch.func.functional_call, so autograd and Muon see the
matrices exactly as the engine does: Muon orthogonalizes the whole qkv and the whole fc1 matrix,
which is not the same as orthogonalizing HF's q/k/v or gate/up separately.

Precision: even in a float64 model, HF evaluates three pieces in float32 (LlamaRMSNorm normalizes
in float32, LlamaRotaryEmbedding computes cos/sin in float32, eager attention runs its softmax in
float32), so logits and gradients are accurate to about 1e-7 relative, well inside what an fp32
engine can be asked for. The run below also repeats each training run in float32 and prints the
gap, a guide for test tolerances.
"""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from common import (FIXTURE_DIR, RMSNORM_EPS, ROPE_THETA, check_muon_proxy, f32, flatten,
                    make_adamw, make_muon, muon_precision, param_shapes, read_fixture,
                    scheduler_lr, unflatten, write_checkpoint, write_fixture)

V, Vp, C, L, NH, NKV, FF, T, B = 500, 512, 64, 2, 4, 2, 192, 32, 2
HS = C // NH
SHAPES = param_shapes(V, Vp, C, L, NH, NKV, FF)
NUM_PARAMS = sum(int(np.prod(s)) for _, s in SHAPES)
# [peak_lr, final_frac, warmup, steps, wd, clip]
HPARAMS = dict(peak_lr=0.01, final_frac=0.1, warmup=2, steps=10, wd=0.1, clip=1.0)
OPTIMIZERS = ["muon_moonlight", "muon_keller", "muon_megatron_core", "adamw"]


def init_params(rng):
    """DESIGN init: normal(0, 0.02), proj and fc2 scaled by 1/sqrt(2L), padded vocab rows zero.
    Norm weights are 1 + 0.1*normal instead of 1 so that the tests exercise them."""
    def normal(shape, std):
        return rng.standard_normal(shape) * std
    p = {
        "wte": normal((Vp, C), 0.02),
        "ln1w": 1.0 + normal((L, C), 0.1),
        "ln2w": 1.0 + normal((L, C), 0.1),
        "qkvw": normal((L, (NH + 2 * NKV) * HS, C), 0.02),
        "projw": normal((L, C, NH * HS), 0.02 / math.sqrt(2 * L)),
        "fc1w": normal((L, 2 * FF, C), 0.02),
        "fc2w": normal((L, C, FF), 0.02 / math.sqrt(2 * L)),
        "lnfw": 1.0 + normal((C,), 0.1),
        "lm_head": normal((Vp, C), 0.02),
    }
    p["wte"][V:] = 0.0
    p["lm_head"][V:] = 0.0
    flat = np.concatenate([p[name].reshape(-1) for name, _ in SHAPES]).astype(np.float32)
    assert flat.size == NUM_PARAMS
    return torch.from_numpy(flat.astype(np.float64))


def hf_model(dtype=torch.float64):
    config = LlamaConfig(vocab_size=Vp, hidden_size=C, intermediate_size=FF, num_hidden_layers=L,
                         num_attention_heads=NH, num_key_value_heads=NKV,
                         max_position_embeddings=T, rms_norm_eps=RMSNORM_EPS,
                         rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
                         attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
                         pad_token_id=None, attn_implementation="eager")
    model = LlamaForCausalLM(config).to(dtype)
    model.train(False)
    assert model.config._attn_implementation == "eager"
    assert model.model.embed_tokens.padding_idx is None
    return model


def make_leaves(flat, split_qkv, dtype=torch.float64):
    """Trainable leaves in the engine's layout (per layer for the Muon matrices)."""
    p = unflatten(flat.detach().to(dtype), SHAPES)
    leaves = {name: p[name].clone() for name in ("wte", "ln1w", "ln2w", "lnfw", "lm_head")}
    for l in range(L):
        if split_qkv:
            q, k, v = p["qkvw"][l].split([NH * HS, NKV * HS, NKV * HS])
            leaves["qw.%d" % l], leaves["kw.%d" % l], leaves["vw.%d" % l] = q.clone(), k.clone(), v.clone()
        else:
            leaves["qkvw.%d" % l] = p["qkvw"][l].clone()
        for name in ("projw", "fc1w", "fc2w"):
            leaves["%s.%d" % (name, l)] = p[name][l].clone()
    for t in leaves.values():
        t.requires_grad_()
    return leaves


def qkv_blocks(leaves, l):
    if "qkvw.%d" % l in leaves:
        return leaves["qkvw.%d" % l].split([NH * HS, NKV * HS, NKV * HS])
    return leaves["qw.%d" % l], leaves["kw.%d" % l], leaves["vw.%d" % l]


def hf_weights(leaves):
    """Engine-layout leaves -> HF parameter names (slices keep the autograd graph)."""
    w = {"model.embed_tokens.weight": leaves["wte"], "model.norm.weight": leaves["lnfw"],
         "lm_head.weight": leaves["lm_head"]}
    for l in range(L):
        pre = "model.layers.%d." % l
        q, k, v = qkv_blocks(leaves, l)
        gate, up = leaves["fc1w.%d" % l].split([FF, FF])
        w.update({pre + "input_layernorm.weight": leaves["ln1w"][l],
                  pre + "self_attn.q_proj.weight": q,
                  pre + "self_attn.k_proj.weight": k,
                  pre + "self_attn.v_proj.weight": v,
                  pre + "self_attn.o_proj.weight": leaves["projw.%d" % l],
                  pre + "post_attention_layernorm.weight": leaves["ln2w"][l],
                  pre + "mlp.gate_proj.weight": gate,
                  pre + "mlp.up_proj.weight": up,
                  pre + "mlp.down_proj.weight": leaves["fc2w.%d" % l]})
    return w


def leaves_to_flat(leaves, use_grad=False):
    def get(t):
        return t.grad if use_grad else t.detach()
    p = {name: get(leaves[name]) for name in ("wte", "ln1w", "ln2w", "lnfw", "lm_head")}
    def qkv(l):
        if "qkvw.%d" % l in leaves:
            return get(leaves["qkvw.%d" % l])
        return torch.cat([get(leaves["%sw.%d" % (b, l)]) for b in "qkv"])
    p["qkvw"] = torch.stack([qkv(l) for l in range(L)])
    for name in ("projw", "fc1w", "fc2w"):
        p[name] = torch.stack([get(leaves["%s.%d" % (name, l)]) for l in range(L)])
    return flatten(p, SHAPES)


def forward(model, leaves, inputs, targets):
    out = torch.func.functional_call(model, hf_weights(leaves), args=(),
                                     kwargs={"input_ids": inputs, "use_cache": False})
    logits = out.logits  # (B, T, Vp)
    loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))
    return logits, loss


def build_optimizers(name, leaves, lr, wd):
    norms = [leaves[n] for n in ("ln1w", "ln2w", "lnfw")]
    embeds = [leaves["wte"], leaves["lm_head"]]
    matrices = [t for n, t in leaves.items() if "." in n]
    if name == "adamw":
        return [make_adamw([{"params": embeds + matrices, "weight_decay": wd},
                            {"params": norms, "weight_decay": 0.0}], lr, wd)]
    preset = name[len("muon_"):]
    return [make_muon(matrices, preset, lr, wd),
            make_adamw([{"params": embeds, "weight_decay": wd},
                        {"params": norms, "weight_decay": 0.0}], lr, wd)]


def train(model, name, params0, inputs, targets, dtype=torch.float64, verbose=True):
    hp = HPARAMS
    leaves = make_leaves(params0, split_qkv=(name == "muon_megatron_core"), dtype=dtype)
    opts = build_optimizers(name, leaves, hp["peak_lr"], hp["wd"])
    losses, norms = [], []
    for step in range(hp["steps"]):
        for t in leaves.values():
            t.grad = None
        _, loss = forward(model, leaves, inputs, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(leaves.values()), hp["clip"])
        lr = scheduler_lr(step, hp["steps"], hp["warmup"], hp["peak_lr"], hp["final_frac"])
        for opt in opts:
            for group in opt.param_groups:
                group["lr"] = lr * getattr(opt, "lr_mult", 1.0)
        with muon_precision(dtype):
            for opt in opts:
                opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    if verbose:
        print("%-20s losses %s" % (name, " ".join("%.4f" % x for x in losses)))
        print("%-20s gradnorms %s" % ("", " ".join("%.3f" % x for x in norms)))
    final = leaves_to_flat(leaves)
    return np.array(losses), np.array(norms), final


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=4321)
    parser.add_argument("--out", default=os.path.join(FIXTURE_DIR, "model.fix"))
    parser.add_argument("--checkpoint", default=os.path.join(FIXTURE_DIR, "model_small.bin"))
    args = parser.parse_args()
    torch.manual_seed(args.seed)  # only HF's throwaway init; every tensor we use comes from rng
    rng = np.random.default_rng(args.seed)
    check_muon_proxy()

    params = init_params(rng)
    inputs = torch.from_numpy(rng.integers(0, V, size=(B, T)))
    targets = torch.from_numpy(rng.integers(0, V, size=(B, T)))
    model = hf_model()

    leaves = make_leaves(params, split_qkv=False)
    logits, loss = forward(model, leaves, inputs, targets)
    loss.backward()
    grads = leaves_to_flat(leaves, use_grad=True)
    assert torch.equal(leaves_to_flat(leaves), params)
    g = unflatten(grads, SHAPES)
    assert torch.all(g["wte"][V:] == 0) and torch.all(g["lm_head"][V:] == 0)
    print("loss at init %.6f (ln V = %.6f), grad norm %.4f" % (loss.item(), math.log(V), grads.norm().item()))

    # the same weights loaded into the HF module the ordinary way give the same logits
    with torch.no_grad():
        model.load_state_dict({k: v.detach() for k, v in hf_weights(leaves).items()}, strict=False)
        ref = model(input_ids=inputs, use_cache=False).logits
    assert torch.equal(ref, logits.detach()), (ref - logits).abs().max()
    assert torch.all(logits[..., V:] == 0)

    fx = {
        "config": np.array([V, Vp, C, L, NH, NKV, FF, T, B, NUM_PARAMS], dtype=np.int32),
        "inputs": inputs.numpy().astype(np.int32),
        "targets": targets.numpy().astype(np.int32),
        "params": f32(params),
        "logits": f32(logits),
        "loss": f32(loss.reshape(1)),
        "grads": f32(grads),
        "train.hparams": np.array([HPARAMS[k] for k in ("peak_lr", "final_frac", "warmup", "steps",
                                                        "wd", "clip")], dtype=np.float32),
    }
    for name in OPTIMIZERS:
        losses, norms, final = train(model, name, params, inputs, targets)
        assert losses[-1] < losses[0]
        fx["train.%s.losses" % name] = losses.astype(np.float32)
        fx["train.%s.params" % name] = f32(final)
        fx["train.%s.gradnorms" % name] = norms.astype(np.float32)
        # the same run in float32 (model, optimizers and Newton-Schulz) shows how far an fp32
        # engine can be expected to land from this oracle after 10 steps
        l32, n32, p32 = train(hf_model(torch.float32), name, params, inputs, targets,
                              dtype=torch.float32, verbose=False)
        d = (p32.double() - final).abs()
        print("%-20s float32 rerun: max|dloss| %.1e, max|dnorm| %.1e, params max|d| %.1e "
              "(max|p| %.2f), mean|d| %.1e" % ("", np.abs(l32 - losses).max(), np.abs(n32 - norms).max(),
                                           d.max().item(), final.abs().max().item(), d.mean().item()))

    write_fixture(args.out, fx)
    back = read_fixture(args.out)
    assert list(back) == list(fx)
    for name, a in fx.items():
        assert back[name].shape == a.shape and np.array_equal(back[name], np.asarray(a).astype(back[name].dtype))
    print("wrote %s: %d tensors, %d bytes" % (args.out, len(fx), os.path.getsize(args.out)))

    write_checkpoint(args.checkpoint, f32(params), V, Vp, C, L, NH, NKV, FF, T, step=0)
    print("wrote %s: %d bytes" % (args.checkpoint, os.path.getsize(args.checkpoint)))


if __name__ == "__main__":
    main()
