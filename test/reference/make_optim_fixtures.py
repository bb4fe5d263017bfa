"""Single-matrix optimizer oracles -> test/fixtures/optim.fix.

Generated with torch 2.15.0 and transformers 5.24.0 (CPU); see make_fixtures.sh.
Oracles: torch.optim.Muon (Newton-Schulz run in float64 through the proxy in common.py instead
of torch's bf16), torch.optim.AdamW and torch.optim._muon._zeropower_via_newtonschulz.
Inputs are float32 values, computed in float64, stored as float32.
"""
import argparse
import os

import numpy as np
import torch

from common import (FIXTURE_DIR, MUON_PRESETS, check_muon_proxy, f32, make_adamw, make_muon,
                    muon_float64, newton_schulz, randn, read_fixture, write_fixture)

SHAPES = [(64, 32), (32, 64), (48, 48), (96, 16)]
GRAD_SCALES = [1e-2, 1.0, 3e-4]  # G1..G3: the update must not depend on the gradient's scale
MUON_LR, MUON_WD = 0.02, 0.1
ADAMW_N, ADAMW_LR, ADAMW_WD = 1000, 1e-2, 0.1


def muon_case(rng, fx, preset, k, shape):
    prefix = "muon.%s.%d." % (preset, k)
    w = randn(rng, shape, 0.05)
    fx[prefix + "W0"] = f32(w)
    grads = [randn(rng, shape, s) for s in GRAD_SCALES]
    # the second gradient gets a low-rank spike so the three steps see differently shaped spectra
    grads[1] += randn(rng, (shape[0], 1), 3.0) @ randn(rng, (1, shape[1]))
    grads[1] = torch.from_numpy(f32(grads[1]).astype(np.float64))
    param = w.clone().requires_grad_()
    opt = make_muon([param], preset, MUON_LR, MUON_WD)
    for i, g in enumerate(grads):
        fx[prefix + "G%d" % (i + 1)] = f32(g)
        param.grad = g.clone()
        with muon_float64():
            opt.step()
    fx[prefix + "W3"] = f32(param)
    fx[prefix + "M3"] = f32(opt.state[param]["momentum_buffer"])


def check_muon_by_hand(fx, preset, k):
    """Cross-check the fixture's semantics against DESIGN section 7 written out in numpy:
    M = bM + (1-b)G; U = (1-b)G + bM (Nesterov) or M; W = W(1 - lr wd) - lr s NS(U)."""
    p = MUON_PRESETS[preset]
    prefix = "muon.%s.%d." % (preset, k)
    w = fx[prefix + "W0"].astype(np.float64)
    r, c = w.shape
    scale = {"moonlight": 0.2 * np.sqrt(max(r, c)), "keller": np.sqrt(max(1.0, r / c)),
             "megatron_core": np.sqrt(max(r, c))}[preset]
    m = np.zeros_like(w)
    b = p["momentum"]
    for i in range(3):
        g = fx[prefix + "G%d" % (i + 1)].astype(np.float64)
        m = b * m + (1 - b) * g
        u = (1 - b) * g + b * m if p["nesterov"] else m
        x = newton_schulz(torch.from_numpy(u)).numpy()
        w = w * (1 - MUON_LR * MUON_WD) - MUON_LR * scale * x
    err_w = np.abs(w - fx[prefix + "W3"]).max() / np.abs(w).max()
    err_m = np.abs(m - fx[prefix + "M3"]).max() / np.abs(m).max()
    assert err_w < 1e-6 and err_m < 1e-6, (preset, k, err_w, err_m)


def adamw_case(rng, fx):
    w = randn(rng, (ADAMW_N,), 0.5)
    fx["adamw.W0"] = f32(w)
    param = w.clone().requires_grad_()
    opt = make_adamw([param], ADAMW_LR, ADAMW_WD)
    for i, s in enumerate([1.0, 1e-3, 0.1]):
        g = randn(rng, (ADAMW_N,), s)
        g[:10] = 0.0  # some coordinates never see a gradient: only weight decay moves them
        fx["adamw.G%d" % (i + 1)] = f32(g)
        param.grad = g.clone()
        opt.step()
    st = opt.state[param]
    fx["adamw.W3"] = f32(param)
    fx["adamw.m3"] = f32(st["exp_avg"])
    fx["adamw.v3"] = f32(st["exp_avg_sq"])


def ns_case(rng, fx, k, shape):
    x = randn(rng, shape, [1.0, 1e-3, 10.0, 0.1][k])
    fx["ns.%d.X" % k] = f32(x)
    fx["ns.%d.Y" % k] = f32(newton_schulz(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=2718)
    parser.add_argument("--out", default=os.path.join(FIXTURE_DIR, "optim.fix"))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    check_muon_proxy()
    fx = {}
    for preset in ("moonlight", "keller", "megatron_core"):
        for k, shape in enumerate(SHAPES):
            muon_case(rng, fx, preset, k, shape)
            check_muon_by_hand(fx, preset, k)
    adamw_case(rng, fx)
    for k, shape in enumerate(SHAPES):
        ns_case(rng, fx, k, shape)
        y = fx["ns.%d.Y" % k].astype(np.float64)
        sv = np.linalg.svd(y, compute_uv=False)
        print("ns.%d %s: singular values of Y in [%.3f, %.3f]" % (k, shape, sv.min(), sv.max()))
    write_fixture(args.out, fx)
    back = read_fixture(args.out)
    assert list(back) == list(fx)
    for name, a in fx.items():
        assert back[name].shape == a.shape and np.array_equal(back[name], np.asarray(a).astype(back[name].dtype))
    print("wrote %s: %d tensors, %d bytes" % (args.out, len(fx), os.path.getsize(args.out)))


if __name__ == "__main__":
    main()
