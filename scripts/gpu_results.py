#!/usr/bin/env python3
"""The results of scripts/gpu-check.sh: one JSON, and docs/performance.md's rows from it.

  gpu_results.py collect DIR [--dry-run 0|1]   the files gpu-check.sh wrote in DIR -> JSON on stdout
  gpu_results.py table FILE.json                that JSON -> Markdown rows on stdout
  gpu_results.py kernels FILE.csv [--steps N]   Nsight Compute's per-kernel times (scripts/gpu-profile.sh)
                                                -> a Markdown table of the kernels by time per step

Each hdp figure is printed beside PyTorch's on the same shape, measured in the same run.
"""
import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"{os.path.basename(path)}: {e}"}


def tests_from_junit(path):
    """Every test case of ctest's JUnit file: name, status, seconds, and its failure text."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        return {"error": f"{os.path.basename(path)}: {e}"}
    cases = []
    for case in root.iter("testcase"):
        status = case.get("status") or "run"
        failure = case.find("failure")
        skipped = case.find("skipped")
        if failure is not None:
            status = "failed"
        elif skipped is not None:
            status = "skipped"
        out = case.findtext("system-out") or ""
        if "Skipped" in out and status == "run":
            status = "skipped"
        cases.append({"name": case.get("name"), "status": status, "seconds": float(case.get("time") or 0),
                      "output_tail": out[-1500:] if status != "run" else ""})
    return {"cases": cases, "passed": sum(c["status"] == "run" for c in cases),
            "failed": sum(c["status"] == "failed" for c in cases),
            "skipped": sum(c["status"] == "skipped" for c in cases)}


def command_output(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def nccl_figures(path):
    """The "nccl-figure NAME VALUE..." lines tests/mesh/nccl/nccl_gpu_test.cc prints."""
    figures = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("nccl-figure "):
                    name, _, value = line[len("nccl-figure "):].strip().partition(" ")
                    figures[name.rstrip(":")] = value
    except OSError:
        pass
    return figures


def collect(args):
    d = args.dir
    steps = {}
    try:
        with open(os.path.join(d, "steps.txt")) as f:
            for line in f:
                name, rc, seconds = line.split()
                steps[name] = {"rc": int(rc), "seconds": int(seconds)}
    except OSError:
        pass
    gpu = command_output("nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                         "--format=csv,noheader")
    nvcc = command_output("nvcc", "--version").splitlines()
    result = {"dry_run": bool(int(args.dry_run)), "gpu": gpu, "nvcc": nvcc[-1] if nvcc else "",
              "git": command_output("git", "describe", "--always", "--dirty"), "steps": steps,
              "tests": tests_from_junit(os.path.join(d, "tests.xml")),
              "hdp": read_json(os.path.join(d, "bench.json")),
              "nccl": nccl_figures(os.path.join(d, "nccl.log"))}
    if os.path.exists(os.path.join(d, "torch.json")) or not result["dry_run"]:
        result["torch"] = read_json(os.path.join(d, "torch.json"))
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


def fmt(x, digits=1):
    return "–" if x is None else f"{x:.{digits}f}"


def by_tokens(rows, **match):
    out = {}
    for r in rows or []:
        if "tokens" in r and all(r.get(k) == v for k, v in match.items()):
            out[r["tokens"]] = r
    return out


def table(args):
    r = read_json(args.file)
    lines = [f"GPU: {r.get('gpu') or 'none (dry run)'}; {r.get('nvcc', '')}; hdp {r.get('git', '')}; "
             f"PyTorch {r.get('torch', {}).get('torch', '–')}"]
    t = r.get("tests", {})
    lines.append(f"gpu-labelled tests: {t.get('passed', 0)} passed, {t.get('failed', 0)} failed, "
                 f"{t.get('skipped', 0)} skipped")
    for c in t.get("cases", []):
        if c["status"] == "failed":
            lines.append(f"  FAILED {c['name']}")
    for name, value in (r.get("nccl") or {}).items():
        lines.append(f"NCCL {name}: {value}")
    hdp, torch = r.get("hdp", {}), r.get("torch", {})
    lines += ["", "| causal attention, heads × head_dim, tokens | hdp f32 kernel fwd / bwd TFLOP/s | "
                  "hdp bf16 tensor-core fwd / bwd | PyTorch SDPA f32 (efficient) fwd / bwd | "
                  "PyTorch SDPA bf16 (flash) fwd / bwd | hdp bf16 ÷ flash, fwd / bwd |",
              "|---|---|---|---|---|---|"]
    t_f32 = by_tokens(torch.get("attention_f32_efficient"))
    t_bf16 = by_tokens(torch.get("attention_bf16_flash"))
    h_bf16 = by_tokens(hdp.get("attention_bf16"))
    for row in hdp.get("attention", []):
        n = row["tokens"]
        if "skipped" in row:
            lines.append(f"| {n} | skipped: {row['skipped']} | | | | |")
            continue
        a, b, c = t_f32.get(n, {}), t_bf16.get(n, {}), h_bf16.get(n, {})
        ratio = (f"{c['forward_tflops'] / b['forward_tflops']:.2f} / {c['backward_tflops'] / b['backward_tflops']:.2f}"
                 if "forward_tflops" in b and "forward_tflops" in c else "–")
        lines.append(f"| {row['heads']} × {row['head_dim']}, {n} | {fmt(row['forward_tflops'])} / "
                     f"{fmt(row['backward_tflops'])} | {fmt(c.get('forward_tflops'))} / {fmt(c.get('backward_tflops'))} | "
                     f"{fmt(a.get('forward_tflops'))} / {fmt(a.get('backward_tflops'))} | "
                     f"{fmt(b.get('forward_tflops'))} / {fmt(b.get('backward_tflops'))} | {ratio} |")
    # hdp's model rows carry "dtype" ("f32" or "bf16" mixed precision); a run from before bench_gpu
    # had --model-dtypes has f32 rows without it.
    lines += ["", "| model step (params, tokens) | hdp f32 tokens/s (TFLOP/s) | hdp bf16 tokens/s (TFLOP/s) | "
                  "PyTorch f32 tokens/s (TFLOP/s) | PyTorch bf16 autocast tokens/s (TFLOP/s) | "
                  "hdp f32 ÷ PyTorch f32 | hdp bf16 ÷ PyTorch bf16 |",
              "|---|---|---|---|---|---|---|"]
    h_rows = [row for row in hdp.get("model", []) if isinstance(row, dict) and "tokens" in row]
    for row in h_rows:
        row.setdefault("dtype", "f32")
    h_f32, h_bf16 = by_tokens(h_rows, dtype="f32"), by_tokens(h_rows, dtype="bf16")
    m_f32 = by_tokens(torch.get("model"), dtype="f32")
    m_bf16 = by_tokens(torch.get("model"), dtype="bf16")

    def speed(row):
        if "skipped" in row:
            return f"skipped: {row['skipped']}"
        return f"{fmt(row.get('tokens_per_s'), 0)} ({fmt(row.get('model_tflops'))})"

    def ratio(a, b):
        return f"{a['tokens_per_s'] / b['tokens_per_s']:.3f}" if "tokens_per_s" in a and "tokens_per_s" in b else "–"

    for n in dict.fromkeys(row["tokens"] for row in h_rows):  # in the bench's order, once each
        hf, hb, a, b = h_f32.get(n, {}), h_bf16.get(n, {}), m_f32.get(n, {}), m_bf16.get(n, {})
        params = next((row["params"] for row in (hf, hb) if "params" in row), None)
        size = "–" if params is None else f"{params / 1e6:.0f} M" if params >= 1e7 else f"{params / 1e6:.2f} M"
        lines.append(f"| {size}, {n} | {speed(hf)} | {speed(hb)} | "
                     f"{speed(a)} | {speed(b)} | {ratio(hf, a)} | {ratio(hb, b)} |")
    for name, part in (("hdp", hdp), ("torch", torch)):
        if isinstance(part, dict) and "error" in part:
            lines.append(f"\n{name}: {part['error']}")
        for key, rows in (part.items() if isinstance(part, dict) else []):
            for row in rows if isinstance(rows, list) else []:
                if isinstance(row, dict) and "error" in row:
                    lines.append(f"{name} {key}: {row['error']}")
    print("\n".join(lines))
    return 0


def short_name(name):
    """A kernel's name without namespaces, template arguments and parameter list."""
    out, depth = [], 0
    for ch in name.replace("(anonymous namespace)::", ""):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    text = "".join(out).strip()
    text = text.split(" ")[-1]  # the return type, if ncu printed one
    return text.split("::")[-1] or name[:60]


def kernels(args):
    """Sums gpu__time_duration over every launch of each kernel in ncu's --csv output."""
    import csv
    totals, counts = {}, {}
    with open(args.file, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu prints its own progress lines too
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        ns = value * {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1)
        name = short_name(row["Kernel Name"])
        totals[name] = totals.get(name, 0.0) + ns
        counts[name] = counts.get(name, 0) + 1
    if not totals:
        print(f"{args.file}: no gpu__time_duration.sum rows", file=sys.stderr)
        return 1
    whole = sum(totals.values())
    print(f"| kernel | launches per step | ms per step | share |")
    print("|---|---|---|---|")
    for name, ns in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"| `{name}` | {counts[name] / args.steps:g} | {ns / 1e6 / args.steps:.2f} | {100 * ns / whole:.1f}% |")
    print(f"| all kernels | {sum(counts.values()) / args.steps:g} | {whole / 1e6 / args.steps:.2f} | 100% |")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("dir")
    c.add_argument("--dry-run", default="0")
    t = sub.add_parser("table")
    t.add_argument("file")
    k = sub.add_parser("kernels")
    k.add_argument("file")
    k.add_argument("--steps", type=int, default=1, help="model steps the profile covers")
    args = p.parse_args()
    return {"collect": collect, "table": table, "kernels": kernels}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
