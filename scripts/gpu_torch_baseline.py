#!/usr/bin/env python3
"""PyTorch on the shapes bench_gpu measures, on the same machine: the baselines of the GPU figures.

  attention  torch.nn.functional.scaled_dot_product_attention, causal, one sequence of T tokens:
             bf16 on the flash backend (the target), and f32 on the memory-efficient backend (the
             same dtype as hdp's kernels today);
  model      one training step of the same LLaMA (RMSNorm, RoPE, GQA through SDPA, SwiGLU, untied
             lm_head) in eager PyTorch: forward, backward and AdamW (fused), in f32 and with bf16
             autocast;
  trainer    (--trainer-config CONFIG.json) only the model step with bf16 autocast, of the LLaMA a
             Hugging Face config.json describes (the one `hdp train --model-config` reads), on one
             sequence of --trainer-tokens tokens: the baseline of scripts/gpu-check.sh's trainer
             stage. --device cpu runs it on the CPU (the stage's rehearsal without a GPU).

FLOPs are counted as hdp counts them (ops/model/llama_config.cc: causal_attention_flops,
LlamaConfig::step_flops); every figure is the median of
--reps timed runs after one warm-up. Prints JSON; an error in one part is recorded in the JSON and
the other parts still run.
"""
import argparse
import json
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F


def synchronize(device="cuda"):
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, reps, device="cuda"):
    fn()
    synchronize(device)
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        runs.append(time.perf_counter() - t0)
    runs.sort()
    return runs[len(runs) // 2]


def causal_attention_flops(t, heads, head_dim):
    return 4.0 * t * (t + 1) / 2.0 * heads * head_dim


def attention(t, heads, head_dim, dtype, backend, reps):
    from torch.nn.attention import sdpa_kernel

    shape = (1, heads, t, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=dtype)
    with sdpa_kernel(backend):
        fwd_s = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def backward():
            q.grad = k.grad = v.grad = None
            out.backward(dout, retain_graph=True)

        bwd_s = timed(backward, reps)
    flops = causal_attention_flops(t, heads, head_dim)
    return {"tokens": t, "heads": heads, "head_dim": head_dim, "forward_s": fwd_s, "backward_s": bwd_s,
            "forward_tflops": flops / fwd_s / 1e12, "backward_tflops": 2.5 * flops / bwd_s / 1e12}


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.eps = heads, kv_heads, d // heads, eps
        self.n1 = nn.Parameter(torch.ones(d))
        self.n2 = nn.Parameter(torch.ones(d))
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(d, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        t = x.shape[0]
        h = F.rms_norm(x, (x.shape[-1],), self.n1, self.eps)
        q = self.q(h).view(t, self.heads, self.head_dim).transpose(0, 1)
        k = self.k(h).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
        v = self.v(h).view(t, self.kv_heads, self.head_dim).transpose(0, 1)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # GQA by repeating the KV heads: every SDPA backend takes that (enable_gqa is not on all).
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        a = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
        x = x + self.o(a.transpose(0, 1).reshape(t, -1))
        h = F.rms_norm(x, (x.shape[-1],), self.n2, self.eps)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Llama(nn.Module):
    def __init__(self, vocab, d, layers, heads, kv_heads, ffn, theta=10000.0, eps=1e-5):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, kv_heads, ffn, eps) for _ in range(layers))
        self.norm = nn.Parameter(torch.ones(d))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.head_dim, self.theta, self.eps = d // heads, theta, eps

    def forward(self, tokens, targets):
        t = tokens.shape[0]
        inv = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, device=tokens.device).float() / self.head_dim))
        angles = torch.outer(torch.arange(t, device=tokens.device).float(), inv)
        cos = torch.cat((angles.cos(), angles.cos()), dim=-1)
        sin = torch.cat((angles.sin(), angles.sin()), dim=-1)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.lm_head(F.rms_norm(x, (x.shape[-1],), self.norm, self.eps))
        return F.cross_entropy(logits.float(), targets)


def model_step(cfg, t, dtype_name, reps, device="cuda", theta=10000.0, eps=1e-5):
    torch.manual_seed(0)
    model = Llama(cfg.vocab, cfg.d_model, cfg.layers, cfg.model_heads, cfg.model_kv_heads, cfg.ffn, theta,
                  eps).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=device == "cuda")
    tokens = torch.randint(0, cfg.vocab, (t,), device=device)
    targets = torch.roll(tokens, -1)
    loss_box = [0.0]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype_name == "bf16"):
            loss = model(tokens, targets)
        loss.backward()
        opt.step()
        loss_box[0] = loss.detach()

    step_s = timed(step, reps, device)
    n_params = sum(p.numel() for p in model.parameters())
    head_dim = cfg.d_model // cfg.model_heads
    kv = cfg.model_kv_heads * head_dim
    per_layer = cfg.d_model * cfg.d_model * 2 + cfg.d_model * kv * 2 + 3 * cfg.d_model * cfg.ffn
    weight_flops = 2 * (cfg.layers * per_layer + cfg.vocab * cfg.d_model)
    flops = 3.0 * (weight_flops * t + cfg.layers * causal_attention_flops(t, cfg.model_heads, head_dim))
    del opt, model
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"tokens": t, "dtype": dtype_name, "params": n_params, "step_s": step_s, "tokens_per_s": t / step_s,
            "model_tflops": flops / step_s / 1e12, "last_loss_per_token": float(loss_box[0])}


def guarded(results, fn, *args):
    try:
        results.append(fn(*args))
    except Exception as e:  # recorded, and the next part still runs
        results.append({"args": [str(a) for a in args[:3]], "error": f"{type(e).__name__}: {e}",
                        "trace": traceback.format_exc(limit=3)})
        torch.cuda.empty_cache()


def trainer(args):
    """The model step of the Hugging Face config args.trainer_config, bf16 autocast."""
    with open(args.trainer_config) as f:
        c = json.load(f)
    cfg = argparse.Namespace(vocab=c["vocab_size"], d_model=c["hidden_size"], layers=c["num_hidden_layers"],
                             model_heads=c["num_attention_heads"],
                             model_kv_heads=c.get("num_key_value_heads", c["num_attention_heads"]),
                             ffn=c["intermediate_size"])
    out = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "config": c, "trainer": []}
    guarded(out["trainer"], model_step, cfg, args.trainer_tokens, "bf16", args.reps, args.device,
            c.get("rope_theta", 10000.0), c.get("rms_norm_eps", 1e-5))
    print(json.dumps(out, indent=2))
    return 0 if "error" not in out["trainer"][0] else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attention-tokens", default="4096,8192,16384,32768")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--model-tokens", default="8192")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--d-model", type=int, default=2048)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--model-heads", type=int, default=16)
    p.add_argument("--model-kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=5632)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--trainer-config", help="a Hugging Face LLaMA config.json: its model step only")
    p.add_argument("--trainer-tokens", type=int, default=8192)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args()
    if args.device == "cpu" and args.trainer_config:
        return trainer(args)
    if not torch.cuda.is_available():
        print("gpu_torch_baseline: no CUDA device", file=sys.stderr)
        return 2
    if args.trainer_config:
        return trainer(args)
    from torch.nn.attention import SDPBackend

    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32, "attention_bf16_flash": [],
           "attention_f32_efficient": [], "model": []}
    for t in [int(x) for x in args.attention_tokens.split(",")]:
        guarded(out["attention_bf16_flash"], attention, t, args.heads, args.head_dim, torch.bfloat16,
                SDPBackend.FLASH_ATTENTION, args.reps)
        guarded(out["attention_f32_efficient"], attention, t, args.heads, args.head_dim, torch.float32,
                SDPBackend.EFFICIENT_ATTENTION, args.reps)
    for t in [int(x) for x in args.model_tokens.split(",")]:
        for dtype_name in ("f32", "bf16"):
            guarded(out["model"], model_step, args, t, dtype_name, args.reps)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
