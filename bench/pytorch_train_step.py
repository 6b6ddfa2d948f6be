#!/usr/bin/env python3
"""PyTorch reference for `strata bench model`: the same Llama (RMSNorm, RoPE,
causal GQA attention through scaled_dot_product_attention, SwiGLU, tied or
untied head), the same batch shape, one AdamW training step timed the same
way (median of N after warm-up). Used only to compare speed; strata does not
need Python.

  python3 bench/pytorch_train_step.py --model 288 --vocab 4096 [--bf16] [--threads 2]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {"288": dict(layers=6, C=288, F=768, H=6, KV=6, T=256),
          "768": dict(layers=12, C=768, F=2048, H=12, KV=12, T=1024)}


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
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    isa = [x for x in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16") if x in flags]
    return f"{model}; {' '.join(isa)}"


def rope(x, cos, sin):
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Layer(nn.Module):
    def __init__(self, C, F, H, KV):
        super().__init__()
        self.H, self.KV, self.D = H, KV, C // H
        self.n1, self.n2 = RMSNorm(C), RMSNorm(C)
        self.qkv = nn.Linear(C, (H + 2 * KV) * self.D, bias=False)
        self.o = nn.Linear(H * self.D, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * F, bias=False)
        self.down = nn.Linear(F, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.H * self.D, self.KV * self.D, self.KV * self.D], -1)
        q = rope(q.view(B, T, self.H, self.D).transpose(1, 2), cos, sin)
        k = rope(k.view(B, T, self.KV, self.D).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.KV, self.D).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.KV != self.H)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        g, u = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, layers, C, F, H, KV, T, V, tied):
        super().__init__()
        self.emb = nn.Embedding(V, C)
        self.layers = nn.ModuleList(Layer(C, F, H, KV) for _ in range(layers))
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

    def forward(self, idx, targets):
        x = self.emb(idx)
        T = idx.shape[1]
        for l in self.layers:
            x = l(x, self.cos[:T], self.sin[:T])
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="288", choices=MODELS)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (fp32 master weights)")
    p.add_argument("--tied", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(f"cpu: {cpu_summary()}; torch CPU capability: "
          f"{torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, 'cpu') else 'n/a'}")
    m = MODELS[a.model]
    B = max(1, a.tokens // m["T"])
    torch.manual_seed(0)
    model = Llama(m["layers"], m["C"], m["F"], m["H"], m["KV"], m["T"], a.vocab, a.tied)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95))
    fwd = torch.compile(model) if a.compile else model
    idx = torch.randint(0, a.vocab, (B, m["T"]))
    tgt = torch.randint(0, a.vocab, (B, m["T"]))
    nparam = sum(p.numel() for p in model.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.2 or True:
        step()
        if time.perf_counter() - t0 >= 0.2:
            break
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(f"pytorch {torch.__version__} {'bf16-autocast' if a.bf16 else 'fp32'}: {a.model} "
          f"{nparam / 1e6:.2f}M parameters, B={B} T={m['T']}, vocab {a.vocab}, "
          f"{torch.get_num_threads()} threads: step {med * 1e3:.1f} ms, {B * m['T'] / med:.0f} tokens/s")


if __name__ == "__main__":
    main()
