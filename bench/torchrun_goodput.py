#!/usr/bin/python3
"""bench_goodput's torchrun side: a small DDP language model on CPU over gloo, run by
`torch.distributed.run` (c10d rendezvous), checkpointing every --checkpoint-every steps.

Two roles:
  --store-port P   host the c10d rendezvous store (a TCPStore) until killed: the agents run with
                   --rdzv-conf is_host=false, so that no agent hosts it and a killed node takes
                   no rendezvous state with it (as hdp's Redis lives apart from its agents);
  (default)        one rank of the job, started by torchrun.

The job: a causal transformer of hdp's `demo` shape by default (vocabulary 256, width 256, 4
layers of 4 heads, feed-forward 768, context 256, 2,048 tokens a step), trained with AdamW on seeded random token sequences. Every step's global
batch is the same whatever the world size (drawn from the step number, split evenly over the
ranks), so a run that restarts from a checkpoint computes the same steps again. On start every
rank loads the newest checkpoint (model, optimizer, step) when there is one. Rank 0 appends one
JSON line per step to --metrics-file with the fields bench_goodput reads from hdp's (step, loss,
world_size, time_ms, step_ms, tokens_per_s), and writes the checkpoint (to a temporary file,
then renamed).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store-port", type=int, help="host the rendezvous store on this port and wait")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--metrics-file")
    p.add_argument("--lr", type=float, default=3e-3)
    # The run's length and the model's shape (hdp's demo preset by default).
    integers = {"steps": 600, "checkpoint-every": 10, "width": 256, "layers": 4, "heads": 4, "ffn": 768,
                "vocab": 256, "context": 256, "batch-tokens": 2048, "seed": 77}
    for name, default in integers.items():
        p.add_argument("--" + name, type=int, default=default)
    return p.parse_args()


class Model(nn.Module):
    """A causal pre-norm transformer of hdp's demo shape (torch's own layers: LayerNorm and
    learned positions where hdp's LLaMA has RMSNorm and RoPE, GELU where it has SwiGLU)."""

    def __init__(self, vocab, width, layers, heads, ffn, context):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), 1))

    def forward(self, tokens):
        n = tokens.shape[1]
        x = self.embed(tokens) + self.position[:n]
        return self.out(self.norm(self.blocks(x, mask=self.mask[:n, :n])))


def batch(args, step, rank, world):
    g = torch.Generator().manual_seed(args.seed * 1000003 + step)
    rows = args.batch_tokens // args.context
    tokens = torch.randint(0, args.vocab, (rows, args.context + 1), generator=g)
    mine = tokens.chunk(world)[rank] if rows >= world else tokens
    return mine[:, :-1], mine[:, 1:]


def host_store(port):
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    print(f"rendezvous store on 127.0.0.1:{port}", flush=True)
    while True:
        time.sleep(3600)
    del store


def main():
    args = parse()
    if args.store_port:
        host_store(args.store_port)
        return
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    model = Model(args.vocab, args.width, args.layers, args.heads, args.ffn, args.context)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    path = os.path.join(args.checkpoint_dir, "last.pt")
    start = 1
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"] + 1
        if rank == 0:
            print(f"restored step {state['step']} on {world} ranks", flush=True)
    metrics = open(args.metrics_file, "a") if rank == 0 else None
    for step in range(start, args.steps + 1):
        t0 = time.time()
        x, y = batch(args, step, rank, world)
        loss = F.cross_entropy(ddp(x).reshape(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        t1 = time.time()
        if rank == 0:
            ms = (t1 - t0) * 1000
            metrics.write(json.dumps({"step": step, "loss": mean.item(), "world_size": world,
                                      "time_ms": int(t1 * 1000), "step_ms": ms,
                                      "tokens_per_s": args.batch_tokens / (t1 - t0)}) + "\n")
            metrics.flush()
            if step % args.checkpoint_every == 0:
                tmp = path + ".tmp"
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
