"""Plain PyTorch training-step benchmark of the same Llama model as train_llama / train_llama_cpu.

Forward, backward, grad clipping and the optimizer step (torch.optim.Muon "match_rms_adamw" on the
hidden matrices, AdamW on embeddings, lm_head and norms), eager, with scaled_dot_product_attention,
so each engine's tokens/s have a baseline measured on the same machine:
  --device cpu --dtype float32      the CPU engine's anchor (dev/bench_cpu.sh)
  --device cuda --dtype bfloat16    the CUDA engine's anchor (dev/gpu_check.sh): bf16 autocast with
                                    fp32 weights and optimizer, as train_llama (bf16 compute, fp32
                                    master weights)
Newton-Schulz: torch.optim.Muon orthogonalizes in bfloat16, which is the GPU engine's choice but
about ten times slower than fp32 on a CPU without bf16 matrix units, and not what the CPU engine
does (fp32). So on --device cpu the anchor replaces torch's iteration with the same quintic in
fp32 (--ns-dtype float32, the default there; bfloat16 keeps torch's own), and says so in its line.
Random tokens; the timed steps follow --warmup untimed ones. Written against torch 2.15.

    python dev/bench_pytorch.py --preset tiny -b 4 -t 256 --threads 2
    python dev/bench_pytorch.py --device cuda --dtype bfloat16 --preset llama300m -b 4 -t 4096 --steps 5
"""
import argparse
import math
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    raise SystemExit("error: dev/bench_pytorch.py needs torch (%s); hint: pip install torch, or run dev/bench_cpu.sh "
                     "with PYTHON set to an interpreter that has it" % e)

V, Vp = 50257, 50304
PRESETS = {  # C, L, NH, NKV, FF (llmc/llama.h)
    "tiny": (128, 4, 4, 2, 384),
    "d12": (768, 12, 12, 12, 2048),
    "llama300m": (1024, 16, 16, 16, 2816),
    "llama600m": (1536, 16, 12, 12, 4096),
}
RMSNORM_EPS = 1e-5
ROPE_THETA = 10000.0


class RMSNorm(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, RMSNORM_EPS)


def rope(x, cos, sin):
    """Half-split (rotate_half) RoPE on x (B, H, T, HS); cos, sin (T, HS/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # under autocast q, k arrive in bf16: keep them there
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, C, NH, NKV, FF):
        super().__init__()
        self.NH, self.NKV, self.HS, self.FF = NH, NKV, C // NH, FF
        self.ln1 = RMSNorm(C)
        self.qkv = nn.Linear(C, (NH + 2 * NKV) * self.HS, bias=False)  # rows: q heads, k heads, v heads
        self.proj = nn.Linear(NH * self.HS, C, bias=False)
        self.ln2 = RMSNorm(C)
        self.fc1 = nn.Linear(C, 2 * FF, bias=False)  # rows [0,FF) gate, [FF,2FF) up
        self.fc2 = nn.Linear(FF, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        NH, NKV, HS = self.NH, self.NKV, self.HS
        q, k, v = self.qkv(self.ln1(x)).split([NH * HS, NKV * HS, NKV * HS], dim=-1)
        q = rope(q.view(B, T, NH, HS).transpose(1, 2), cos, sin)
        k = rope(k.view(B, T, NKV, HS).transpose(1, 2), cos, sin)
        v = v.view(B, T, NKV, HS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=NKV != NH)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, NH * HS))
        gate, up = self.fc1(self.ln2(x)).split([self.FF, self.FF], dim=-1)
        return x + self.fc2(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, C, L, NH, NKV, FF, T):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.blocks = nn.ModuleList(Block(C, NH, NKV, FF) for _ in range(L))
        self.lnf = RMSNorm(C)
        self.lm_head = nn.Linear(C, Vp, bias=False)
        HS = C // NH
        inv_freq = ROPE_THETA ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        # init: normal(0, 0.02); proj and fc2 scaled by 1/sqrt(2L); norms 1; padded vocab rows 0
        for name, p in self.named_parameters():
            if p.ndim == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
        with torch.no_grad():
            self.wte.weight[V:] = 0
            self.lm_head.weight[V:] = 0

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x, self.cos[:T], self.sin[:T])
        logits = self.lm_head(self.lnf(x))
        # padded vocab columns never contribute to the loss
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def newton_schulz_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz's iteration, in float32 instead of bfloat16."""
    a, b, c = ns_coefficients
    x = grad.to(dtype=torch.float32, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, update, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


def use_fp32_newton_schulz():
    """Makes torch.optim.Muon orthogonalize in fp32 (it looks the function up at each step)."""
    import torch.optim._muon as muon_impl
    if not hasattr(muon_impl, "_zeropower_via_newtonschulz"):
        raise SystemExit("error: --ns-dtype float32: torch %s has no torch.optim._muon._zeropower_via_newtonschulz to replace "
                         "(hint: --ns-dtype bfloat16 keeps torch's own)" % torch.__version__)
    muon_impl._zeropower_via_newtonschulz = newton_schulz_fp32


def make_optimizers(model, lr, wd):
    hidden = [p for n, p in model.named_parameters() if n.startswith("blocks.") and p.ndim == 2]
    embeds = [model.wte.weight, model.lm_head.weight]
    norms = [p for p in model.parameters() if p.ndim == 1]
    muon = torch.optim.Muon(hidden, lr=lr, weight_decay=wd, momentum=0.95, nesterov=True,
                            adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW([{"params": embeds, "weight_decay": wd},
                               {"params": norms, "weight_decay": 0.0}],
                              lr=lr, betas=(0.9, 0.95), eps=1e-8)
    return [muon, adamw]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    parser.add_argument("-b", type=int, default=4, help="micro-batch B")
    parser.add_argument("-t", type=int, default=256, help="sequence length T")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (--device cpu)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="compute precision; bfloat16 = autocast over fp32 weights")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--ns-dtype", choices=["float32", "bfloat16"], default=None,
                        help="Muon's Newton-Schulz precision (float32 on cpu, as train_llama_cpu; bfloat16 on cuda, torch's own)")
    args = parser.parse_args()
    if args.ns_dtype is None:
        args.ns_dtype = "float32" if args.device == "cpu" else "bfloat16"
    if args.ns_dtype == "float32":
        use_fp32_newton_schulz()
    if args.b < 1 or args.t < 1 or args.steps < 1 or args.threads < 1 or args.warmup < 0:
        parser.error("-b, -t, --steps and --threads must be positive, --warmup at least 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch %s sees no CUDA device (torch.cuda.is_available() is False)" % torch.__version__)

    dev = torch.device(args.device)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    C, L, NH, NKV, FF = PRESETS[args.preset]
    B, T = args.b, args.t
    model = Llama(C, L, NH, NKV, FF, T).to(dev)
    opts = make_optimizers(model, lr=5e-4, wd=0.1)
    idx = torch.randint(0, V, (B, T), device=dev)
    targets = torch.randint(0, V, (B, T), device=dev)
    bf16 = args.dtype == "bfloat16"

    def train_step():
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=args.device, dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt in opts:
            opt.step()
        return loss.item()  # waits for the device

    for _ in range(args.warmup):
        train_step()
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = train_step()
    dt = (time.perf_counter() - t0) / args.steps
    if not math.isfinite(loss):
        raise SystemExit("error: non-finite loss %r after %d steps" % (loss, args.warmup + args.steps))
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    print("pytorch preset=%s B=%d T=%d device=%s dtype=%s ns_dtype=%s threads=%d tokens/s=%.0f  ms/step=%.1f peak_mem_gib=%.2f loss=%.4f"
          % (args.preset, B, T, args.device, args.dtype, args.ns_dtype, args.threads, B * T / dt, dt * 1000, peak, loss))


if __name__ == "__main__":
    main()
