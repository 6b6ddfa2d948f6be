#!/usr/bin/env python3
"""PyTorch reference for strata's training-step benchmark (`strata bench train`,
`strata bench model`): the same Llama (RMSNorm, RoPE, causal attention, SwiGLU,
tied or untied head), the same batch shape, one training step (forward,
backward, clip_grad_norm 1.0, AdamW) timed the same way (median of N after at
least 0.2 s of warm-up). Used only to compare speed; strata does not need Python.

On a GPU (--device cuda) the step runs under CUDA bf16 autocast with --bf16
(fp32 master weights, as strata's training.precision = "bf16"), each timed
step ends with torch.cuda.synchronize, and --peak divides the FLOP rate into
an MFU; the GPU shapes 2048 (16L-2048) and 4096 (32L-4096) match `strata bench
train --model 2048|4096` at the same --vocab (strata's default 32000), and the
CPU shapes 288, 768 and 1024 (24L-1024) `strata bench train --model 288|768|1024`.

Runs on Debian bookworm's python3-torch (1.13) and on torch 2.x. Attention uses
F.scaled_dot_product_attention where it exists (k/v repeated for GQA when the
installed version has no enable_gqa), otherwise an explicit causal softmax.

  python3 bench/pytorch_train_step.py --model 288 [--vocab 32000] [--bf16] [--threads 2]
  python3 bench/pytorch_train_step.py --device cuda --model 2048 --tokens 8192 --bf16 --peak 989400

The last line printed is machine-readable:
  result: tokens_per_s=... step_ms=... gflops=... peak_rss_mib=... params=... torch=... threads=...
"""
import argparse
import inspect
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {"288": dict(layers=6, C=288, F=768, H=6, KV=6, T=256),
          "768": dict(layers=12, C=768, F=2048, H=12, KV=12, T=1024),
          "1024": dict(layers=24, C=1024, F=2816, H=16, KV=16, T=1024),
          "2048": dict(layers=16, C=2048, F=8192, H=32, KV=8, T=2048),
          "4096": dict(layers=32, C=4096, F=14336, H=32, KV=8, T=2048)}

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def sdpa_accepts_enable_gqa():
    if not HAS_SDPA:
        return False
    try:
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without a signature: try it
        q = torch.zeros(1, 2, 2, 4)
        kv = torch.zeros(1, 1, 2, 4)
        try:
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
            return True
        except TypeError:
            return False


SDPA_GQA = sdpa_accepts_enable_gqa()


class RMSNorm(nn.Module):
    def __init__(self, c, eps=1e-5):
        super().__init__()
        self.w = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.w


def cpu_summary():
    """The CPU model and the vector instruction sets that matter here."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [x for x in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if x in flags]
    return f"{model}; {' '.join(isa)}"


def cpu_capability():
    cpu = getattr(torch.backends, "cpu", None)
    if cpu is not None and hasattr(cpu, "get_cpu_capability"):
        return cpu.get_cpu_capability()
    return "n/a"


def rope(x, cos, sin):
    # cos/sin in the activations' dtype (as Hugging Face does), so that q, k
    # and v share one dtype under bf16 autocast.
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def causal_attention_explicit(q, k, v, mask):
    """softmax(q k^T / sqrt(D) + causal mask) v with the scores materialised.
    q: [B, H, T, D]; k, v: [B, H, T, D] (already repeated for GQA);
    mask: [T, T] bool, True above the diagonal (the future)."""
    scale = q.shape[-1] ** -0.5
    s = torch.matmul(q * scale, k.transpose(-2, -1))
    s = s.masked_fill(mask, float("-inf"))
    if s.dtype in (torch.bfloat16, torch.float16):  # softmax in fp32 under autocast
        s = s.float()
    p = torch.softmax(s, dim=-1).to(v.dtype)
    return torch.matmul(p, v)


def causal_attention(q, k, v, mask, impl):
    H, KV = q.shape[1], k.shape[1]
    if impl == "sdpa" and SDPA_GQA and KV != H:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if KV != H:  # grouped-query attention by repeating each k/v head
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
    if impl == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return causal_attention_explicit(q, k, v, mask)


class Layer(nn.Module):
    def __init__(self, C, F, H, KV, impl):
        super().__init__()
        self.H, self.KV, self.D, self.impl = H, KV, C // H, impl
        self.n1, self.n2 = RMSNorm(C), RMSNorm(C)
        self.qkv = nn.Linear(C, (H + 2 * KV) * self.D, bias=False)
        self.o = nn.Linear(H * self.D, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * F, bias=False)
        self.down = nn.Linear(F, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.H * self.D, self.KV * self.D, self.KV * self.D], -1)
        q = rope(q.view(B, T, self.H, self.D).transpose(1, 2), cos, sin)
        k = rope(k.view(B, T, self.KV, self.D).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.KV, self.D).transpose(1, 2)
        a = causal_attention(q, k, v, mask, self.impl)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        g, u = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, layers, C, F, H, KV, T, V, tied, impl):
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Layer(C, F, H, KV, impl) for _ in range(layers))
        self.norm = RMSNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        if tied:
            self.head.weight = self.emb.weight
        D = C // H
        inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2).float() / D))
        ang = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((ang, ang), -1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))

    def forward(self, idx, targets):
        x = self.emb(idx)
        T = idx.shape[1]
        mask = self.mask[:T, :T]
        for l in self.layers:
            x = l(x, self.cos[:T], self.sin[:T], mask)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def model_flops(m, V, B):
    """strata's model FLOP count of one training step: 6 per weight per token
    for every matrix but the embedding (the head included), plus causal
    attention (QK^T and PV, forward and 2x backward)."""
    T, C, Fi, H, KV, L = m["T"], m["C"], m["F"], m["H"], m["KV"], m["layers"]
    D = C // H
    qkv_dim, q_dim = (H + 2 * KV) * D, H * D
    matrices = L * (C * qkv_dim + q_dim * C + 3 * C * Fi) + V * C
    attn = 2 * 2 * H * D * (T * (T + 1) / 2) * B * L
    return 6 * B * T * matrices + 3 * attn


def main():
    p = argparse.ArgumentParser(description="PyTorch reference of strata's training step")
    p.add_argument("--model", default="288", choices=MODELS)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tokens", type=int, default=4096, help="tokens per step (B = tokens / T)")
    p.add_argument("--steps", type=int, default=5, help="timed steps (the median is reported)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 master weights)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where the step runs")
    p.add_argument("--peak", type=float, default=0.0,
                   help="GFLOP/s to divide by for the fraction of peak (0: none printed)")
    p.add_argument("--tied", action="store_true", help="tie the embedding and the LM head")
    p.add_argument("--attention", default="auto", choices=("auto", "sdpa", "explicit"),
                   help="auto: scaled_dot_product_attention where this torch has it, else explicit")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (torch 2.x)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    impl = a.attention
    if impl == "auto":
        impl = "sdpa" if HAS_SDPA else "explicit"
    if impl == "sdpa" and not HAS_SDPA:
        p.error(f"torch {torch.__version__} has no scaled_dot_product_attention")
    if a.compile and not hasattr(torch, "compile"):
        p.error(f"torch {torch.__version__} has no torch.compile")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        p.error(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    if cuda:
        print(f"gpu: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, CUDA {torch.version.cuda}",
              flush=True)
    else:
        print(f"cpu: {cpu_summary()}; torch CPU capability: {cpu_capability()}", flush=True)
    m = MODELS[a.model]
    B = max(1, a.tokens // m["T"])
    torch.manual_seed(0)
    model = Llama(m["layers"], m["C"], m["F"], m["H"], m["KV"], m["T"], a.vocab, a.tied, impl)
    model = model.to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95))
    fwd = torch.compile(model) if a.compile else model
    idx = torch.randint(0, a.vocab, (B, m["T"]), device=a.device)
    tgt = torch.randint(0, a.vocab, (B, m["T"]), device=a.device)
    nparam = sum(p.numel() for p in model.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.bf16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        return loss

    # Warm-up: at least one step and 0.2 s (allocator, thread pools, oneDNN).
    t0 = time.perf_counter()
    loss = step()
    while time.perf_counter() - t0 < 0.2:
        loss = step()
    times = []
    for _ in range(max(1, a.steps)):
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    threads = torch.get_num_threads()
    tokens_per_s = B * m["T"] / med
    gflops = model_flops(m, a.vocab, B) / med * 1e-9
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # ru_maxrss: KiB on Linux
    where = "cuda" if cuda else f"{threads} threads"
    mfu = f", {100 * gflops / a.peak:.1f}% of {a.peak:.0f} GFLOP/s" if a.peak > 0 else ""
    print(f"pytorch {torch.__version__} {'bf16-autocast' if a.bf16 else 'fp32'}: {a.model} "
          f"{nparam / 1e6:.2f}M parameters, B={B} T={m['T']}, vocab {a.vocab}, {where}, "
          f"attention {impl}: step {med * 1e3:.1f} ms (median of {len(times)}), "
          f"{tokens_per_s:.0f} tokens/s, {gflops:.1f} GFLOP/s{mfu}, loss {loss.item():.4f}")
    gpu_mem = f" gpu_peak_mib={torch.cuda.max_memory_allocated() / 2**20:.1f}" if cuda else ""
    print(f"result: tokens_per_s={tokens_per_s:.1f} step_ms={med * 1e3:.1f} gflops={gflops:.1f} "
          f"peak_rss_mib={rss_mib:.1f}{gpu_mem} params={nparam} torch={torch.__version__} "
          f"threads={threads} device={a.device}",
          flush=True)


if __name__ == "__main__":
    main()
