"""Shared helpers for the reference fixture scripts (PyTorch / Hugging Face oracles).

Generated with torch 2.15.0 and transformers 5.24.0 (CPU).

Conventions: every random input is drawn as float32 and then widened to float64, so the
engine sees exactly the values the oracle used; the oracles compute in float64 and the
fixtures store float32.
"""
import contextlib
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.optim._muon as torch_muon

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_io import read_fixture, write_fixture  # noqa: E402,F401

FIXTURE_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))

# Newton-Schulz coefficients shared by every Muon preset (DESIGN section 7)
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7
ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPS = 1e-8
RMSNORM_EPS = 1e-5
ROPE_THETA = 10000.0

CHECKPOINT_MAGIC = 20250301
CHECKPOINT_VERSION = 1
CHECKPOINT_HEADER_INTS = 256


def randn(rng, shape, scale=1.0):
    """Normal samples rounded to float32 first, returned as a float64 tensor."""
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    return torch.from_numpy(a.astype(np.float64))


def f32(t):
    """Tensor (any float dtype) -> float32 numpy array for storing."""
    return t.detach().to(torch.float64).cpu().numpy().astype(np.float32)


# ----------------------------------------------------------------------------
# torch.optim.Muon at high precision.
#
# torch.optim._muon._zeropower_via_newtonschulz casts its input to torch.bfloat16 before the
# Newton-Schulz iterations. The engine's CPU reference runs Newton-Schulz in fp32, so a bf16
# oracle would be far too coarse. Instead of rewriting torch's function, the context manager
# below swaps the module-global name `torch` seen by torch.optim._muon for a proxy whose
# `bfloat16` attribute is torch.float64 and which forwards every other attribute to the real
# torch module. torch's own code then runs unchanged, in float64.

class _TorchPrecisionProxy:
    def __init__(self, dtype):
        self.bfloat16 = dtype

    def __getattr__(self, name):  # only called for names other than bfloat16
        return getattr(torch, name)


@contextlib.contextmanager
def muon_precision(dtype):
    saved = torch_muon.torch
    torch_muon.torch = _TorchPrecisionProxy(dtype)
    try:
        yield
    finally:
        torch_muon.torch = saved


def muon_float64():
    return muon_precision(torch.float64)


def newton_schulz(x):
    """torch's own Newton-Schulz orthogonalization, run in float64 through the proxy."""
    with muon_float64():
        y = torch_muon._zeropower_via_newtonschulz(x, NS_COEFFICIENTS, NS_STEPS, NS_EPS)
    assert y.dtype == torch.float64, y.dtype
    return y


def check_muon_proxy():
    """The proxy must make NS run in float64, and without it torch must still use bf16."""
    x = torch.randn(8, 4, dtype=torch.float64)
    plain = torch_muon._zeropower_via_newtonschulz(x, NS_COEFFICIENTS, NS_STEPS, NS_EPS)
    assert plain.dtype == torch.bfloat16, plain.dtype
    assert newton_schulz(x).dtype == torch.float64
    assert torch_muon.torch is torch


# Muon presets (DESIGN section 7) as torch.optim.Muon arguments.
# megatron_core scales the update by sqrt(max(rows, cols)) = "match_rms_adamw" / 0.2, which
# torch does not offer directly. torch applies W <- W * (1 - lr * wd) with the unadjusted lr
# and then W <- W - adjust(lr) * X, so passing lr * 5 and wd / 5 with "match_rms_adamw" gives
# W(1 - lr*wd) - lr*sqrt(max(r, c))*X exactly (up to float64 rounding of lr*5*wd/5).
MUON_PRESETS = {
    "moonlight": dict(momentum=0.95, nesterov=True, adjust_lr_fn="match_rms_adamw", lr_mult=1.0),
    "keller": dict(momentum=0.95, nesterov=True, adjust_lr_fn="original", lr_mult=1.0),
    "megatron_core": dict(momentum=0.9, nesterov=False, adjust_lr_fn="match_rms_adamw", lr_mult=5.0),
}


def make_muon(params, preset, lr, weight_decay):
    p = MUON_PRESETS[preset]
    opt = torch.optim.Muon(params, lr=lr * p["lr_mult"], weight_decay=weight_decay / p["lr_mult"],
                           momentum=p["momentum"], nesterov=p["nesterov"],
                           ns_coefficients=NS_COEFFICIENTS, eps=NS_EPS, ns_steps=NS_STEPS,
                           adjust_lr_fn=p["adjust_lr_fn"])
    opt.lr_mult = p["lr_mult"]
    return opt


def make_adamw(params, lr, weight_decay):
    return torch.optim.AdamW(params, lr=lr, betas=ADAMW_BETAS, eps=ADAMW_EPS,
                             weight_decay=weight_decay)


def scheduler_lr(step, max_steps, warmup, peak, final_frac):
    """Cosine schedule with linear warmup (llmc/schedulers.h), step 0-based."""
    if step < warmup:
        return peak * (step + 1) / warmup
    lr_min = final_frac * peak
    decay = (step - warmup) / (max_steps - warmup)
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * decay)) * (peak - lr_min)


# ----------------------------------------------------------------------------
# Flat parameter layout (DESIGN section 3)

def param_shapes(V, Vp, C, L, NH, NKV, FF):
    HS = C // NH
    return [
        ("wte", (Vp, C)),
        ("ln1w", (L, C)),
        ("ln2w", (L, C)),
        ("qkvw", (L, (NH + 2 * NKV) * HS, C)),
        ("projw", (L, C, NH * HS)),
        ("fc1w", (L, 2 * FF, C)),
        ("fc2w", (L, C, FF)),
        ("lnfw", (C,)),
        ("lm_head", (Vp, C)),
    ]


def unflatten(flat, shapes):
    out, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape)
        off += n
    assert off == flat.numel() if torch.is_tensor(flat) else off == flat.size
    return out


def flatten(tensors, shapes):
    return torch.cat([tensors[name].reshape(-1) for name, _ in shapes])


def write_checkpoint(path, params_f32, V, Vp, C, L, NH, NKV, FF, T, step=0):
    """Model checkpoint: int32[256] header, then float32 params in the flat layout."""
    payload = np.ascontiguousarray(params_f32, dtype="<f4").tobytes()
    header = np.zeros(CHECKPOINT_HEADER_INTS, dtype="<i4")
    crc = np.array([zlib.crc32(payload) & 0xFFFFFFFF], dtype=np.uint32).view(np.int32)[0]
    header[:13] = [CHECKPOINT_MAGIC, CHECKPOINT_VERSION, V, Vp, C, L, NH, NKV, FF, T, step, crc, 0]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(payload)
