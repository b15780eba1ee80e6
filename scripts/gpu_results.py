#!/usr/bin/env python3
"""The results of scripts/gpu-check.sh: one JSON, and docs/performance.md's rows from it.

  gpu_results.py collect DIR [--dry-run 0|1]   the files gpu-check.sh wrote in DIR -> JSON on stdout
  gpu_results.py table FILE.json                that JSON -> Markdown rows on stdout (all stages')
  gpu_results.py trainer FILE.json              the trainer stage's rows only
  gpu_results.py kernels FILE.csv [--steps N]   Nsight Compute's per-kernel times (scripts/gpu-profile.sh)
                                                -> a Markdown table of the kernels by time per step

Each hdp figure is printed beside PyTorch's on the same shape, measured in the same run.
"""
import argparse
import json
import os
import re
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
              "git": command_output("git", "describe", "--always", "--dirty"), "steps": steps}
    if "build" in steps:  # the kernels stage ran
        result.update(tests=tests_from_junit(os.path.join(d, "tests.xml")),
                      hdp=read_json(os.path.join(d, "bench.json")),
                      nccl=nccl_figures(os.path.join(d, "nccl.log")))
        if os.path.exists(os.path.join(d, "torch.json")) or not result["dry_run"]:
            result["torch"] = read_json(os.path.join(d, "torch.json"))
    trainer = collect_trainer(d, steps, result["dry_run"])
    if trainer is not None:
        result["trainer"] = trainer
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
    if "tests" not in r and "hdp" not in r:  # the trainer stage alone
        print(f"GPU: {r.get('gpu') or 'none (dry run)'}; {r.get('nvcc', '')}; hdp {r.get('git', '')}")
        print("\n".join(trainer_rows(r)))
        return 0
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
    if "trainer" in r:
        lines += [""] + trainer_rows(r)
    print("\n".join(lines))
    return 0


# ---- the trainer stage (gpu-check.sh --stage trainer) -------------------------------------------

# Dense bf16 tensor-core peaks, FLOP/s, by the name nvidia-smi gives (NVIDIA's data sheets; SXM
# unless the name says PCIe or NVL): the MFU's denominator. An unknown device has no MFU.
BF16_PEAK = (("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H200 NVL", 835e12), ("H100", 989.4e12),
             ("H200", 989.4e12), ("A100", 312e12))


def bf16_peak(gpu):
    for name, peak in BF16_PEAK:
        if name in (gpu or ""):
            return peak
    return None


def step_flops(c, tokens):
    """FLOPs of one training step on one causal sequence of `tokens` tokens, as hdp counts them
    (ops/model/llama_config.cc: LlamaConfig::step_flops) and gpu_torch_baseline.py does."""
    d, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads) * (d // heads)
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * c["intermediate_size"]
    weight_flops = 2 * (layers * per_layer + c["vocab_size"] * d)
    attention = 4.0 * tokens * (tokens + 1) / 2.0 * heads * (d // heads)
    return 3.0 * (weight_flops * tokens + layers * attention)


def params(c):
    d, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads) * (d // heads)
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * c["intermediate_size"] + 2 * d
    return c["num_hidden_layers"] * per_layer + 2 * c["vocab_size"] * d + d


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError:
        return []


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def metrics(path):
    rows = []
    for line in read_lines(path):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows


def trainer_run(d, name, steps, dry_run):
    """One run's record from its folder: what gpu-check.sh wrote and hdp's own output."""
    run = read_json(os.path.join(d, "run.json"))
    run["name"] = name
    step = steps.get(f"trainer-{name}")
    if step:
        run.update(rc=step["rc"], seconds=step["seconds"])
    skipped = read_lines(os.path.join(d, "skipped.txt"))
    log = read_lines(os.path.join(d, "run.log"))
    if skipped:
        run.update(status="skipped", reason=" ".join(skipped))
    elif step is None and run.get("kind") != "nccl-data-plane":
        run.update(status="failed", reason="did not run (an earlier step of the stage failed)")
    elif step is not None and step["rc"] != 0:
        run.update(status="failed", reason=f"exit {step['rc']}" + (" (time limit)" if step["rc"] in (124, 137) else ""),
                   log_tail="\n".join(log[-25:]))
    else:
        run["status"] = "passed"
    rows = metrics(os.path.join(d, "metrics.jsonl"))
    if rows:
        run["steps_reported"] = len(rows)
        run["distinct_steps"] = len({r.get("step") for r in rows})
        run["final_step"] = rows[-1].get("step")
        run["final_loss"] = rows[-1].get("loss")
    kind = run.get("kind")
    if kind == "throughput" and rows:
        warm = run.get("warmup_steps", 0)
        timed = [r for r in rows if r.get("step", 0) > warm] or rows
        run["timed_steps"] = len(timed)
        offloaded = [r["offloaded_bytes"] for r in timed if "offloaded_bytes" in r]
        if offloaded:  # hdp train's metrics name what rank 0 offloaded, on the steps that did
            run["offloaded_gb_per_step"] = median(offloaded) / 1e9
        run["tokens_per_s"] = median([r["tokens_per_s"] for r in timed if "tokens_per_s" in r])
        run["step_s"] = median([r["step_ms"] / 1000.0 for r in timed if "step_ms" in r])
        config = read_json(os.path.join(os.path.dirname(d), run.get("config", "")))
        if "hidden_size" in config and run["step_s"]:
            run["params"] = params(config)
            run["flops_per_step"] = step_flops(config, run["tokens_per_step"])
            run["model_tflops"] = run["flops_per_step"] / run["step_s"] / 1e12
        torch = read_json(os.path.join(d, "torch.json"))
        if os.path.exists(os.path.join(d, "torch-skipped.txt")):
            run["torch"] = {"skipped": " ".join(read_lines(os.path.join(d, "torch-skipped.txt")))}
        elif "trainer" in torch and torch["trainer"]:
            run["torch"] = dict(torch["trainer"][0], version=torch.get("torch"))
        else:
            run["torch"] = {"error": torch.get("error", "no result")}
    if kind in ("recovery", "recovery-reference"):
        text = "\n".join(log)
        run["continued_from_memory"] = [
            {"generation": int(m.group(1)), "step": int(m.group(2)), "lost_steps": int(m.group(3))}
            for m in re.finditer(r"generation (\d+): continuing from memory at step (\d+) on .*?(\d+) step\(s\) lost",
                                 text)]
        run["recovered"] = [{"generation": int(m.group(1)), "seconds": float(m.group(2)), "lost_steps": int(m.group(3))}
                            for m in re.finditer(r"generation (\d+): recovered in ([\d.]+) s, (\d+) step\(s\) lost",
                                                 text)]
        # trainer/recovery.cc: a generation that did not continue from memory restored a checkpoint or
        # started again from the seed ("generation G: restored PATH at step S" / "initialised from the
        # seed at step S"; generation 1's start is the latter).
        run["restarts"] = [{"generation": int(m.group(1)), "from": m.group(2), "step": int(m.group(3))}
                           for m in re.finditer(r"generation (\d+): (restored \S+|initialised from the seed) at step (\d+)",
                                                text) if int(m.group(1)) > 1]
        run["tokens_per_s"] = median([r["tokens_per_s"] for r in rows if "tokens_per_s" in r])
        killed = re.search(r"--kill-node: SIGKILL the agent of (\S+) \(pid (\d+)\).*at step (\d+)", text)
        if killed:
            run["killed"] = {"node": killed.group(1), "pid": int(killed.group(2)), "at_step": int(killed.group(3))}
    return run


def judge_recovery(run, reference):
    """The node-loss run against the reference: 0 steps lost, from memory, the same final loss."""
    problems = []
    if run.get("status") != "passed":
        return
    if "killed" not in run:
        problems.append("no node was killed (the job ended before the step?)")
    if not run.get("continued_from_memory"):
        problems.append("no 'continuing from memory' line: the job did not recover from memory")
    for r in run.get("restarts", []):
        problems.append(f"generation {r['generation']}: {r['from']} at step {r['step']}, not from memory")
    lost = [r["lost_steps"] for r in run.get("continued_from_memory", []) + run.get("recovered", [])]
    run["steps_lost"] = max(lost) if lost else None
    if lost and max(lost) > 0:
        problems.append(f"{max(lost)} step(s) lost")
    a, b = run.get("final_loss"), (reference or {}).get("final_loss")
    if a is None or b is None or reference.get("status") != "passed":
        problems.append("no final loss to compare (the reference or this run did not finish)")
    else:
        run["final_loss_reference"] = b
        run["final_loss_rel_diff"] = abs(a - b) / max(abs(b), 1e-12)
        if run["final_loss_rel_diff"] > run.get("loss_tolerance", 2e-2):
            problems.append(f"final loss {a:.6f} against {b:.6f}: relative {run['final_loss_rel_diff']:.2e} "
                            f"> {run.get('loss_tolerance')}")
    if run.get("final_step") != (reference or {}).get("final_step"):
        problems.append(f"final step {run.get('final_step')} against the reference's {reference.get('final_step')}")
    if problems:
        run.update(status="failed", reason="; ".join(problems))


def judge_nccl(runs, by_name, dry_run):
    plane = by_name.get("nccl-data-plane")
    if plane and plane.get("status") != "skipped":
        demo = by_name.get(plane.get("from", "demo"), {})
        text = "\n".join(read_lines(demo.get("_log", "")))
        m = re.search(r"channel main: (\w+) data plane \(([^)]*)\)", text)
        if m:
            plane.update(data_plane=m.group(1), why=m.group(2))
            plane.update(status="passed" if m.group(1) == "NCCL" else "failed",
                         reason="" if m.group(1) == "NCCL" else f"{m.group(1)} data plane: {m.group(2)}")
        else:
            plane.update(status="failed", reason=f"no data plane line in {plane.get('from')}'s log "
                                                  f"(that run: {demo.get('status')}, {demo.get('reason', '')})")
    sup = by_name.get("nccl-superseded")
    if sup and sup.get("status") != "skipped":
        figures = nccl_figures(sup["_log"])
        sup["figures"] = figures
        took = figures.get("superseded_at_0.5s_aborted_after_s")
        if took is not None:
            sup["superseded_aborted_after_s"] = float(took)
        if took is None and sup.get("status") == "passed":
            sup.update(status="failed", reason="no superseded_at_0.5s figure in nccl_gpu_test's output")


def collect_trainer(d, steps, dry_run):
    base = os.path.join(d, "trainer")
    if not os.path.isdir(base):
        return None
    runs, by_name = [], {}
    def started(name):  # the order of the runs: each one's run.json is written before it starts
        path = os.path.join(base, name, "run.json")
        return os.path.getmtime(path) if os.path.exists(path) else float("inf")

    for name in sorted(os.listdir(base), key=started):
        path = os.path.join(base, name)
        if not os.path.isdir(path):
            continue
        run = trainer_run(path, name, steps, dry_run)
        run["_log"] = os.path.join(path, "run.log")
        runs.append(run)
        by_name[name] = run
    for run in runs:
        if run.get("kind") == "recovery":
            judge_recovery(run, by_name.get(run.get("reference")))
    judge_nccl(runs, by_name, dry_run)
    for run in runs:
        run.pop("_log", None)
    stage = {"runs": runs}
    for name in ("trainer-configure", "trainer-found-paths", "trainer-build", "trainer-leaks", "trainer-kernels-tests"):
        if name in steps:
            stage[name] = steps[name]
    if "trainer-kernels-tests" in steps:  # the names of the cases that failed, from gtest's summary
        failed = sorted({m.group(1) for m in re.finditer(r"^\[  FAILED  \] ([\w/]+\.[\w/]+)",
                                                          "\n".join(read_lines(os.path.join(d, "trainer-kernels-tests.log"))),
                                                          re.M)})
        stage["trainer-kernels-tests"] = dict(stage["trainer-kernels-tests"], failed=failed)
    return stage


def trainer_rows(r):
    """docs/performance.md's rows for the trainer stage."""
    stage = r.get("trainer")
    if not stage:
        return ["(no trainer stage in this run)"]
    peak = bf16_peak(r.get("gpu"))
    build = ", ".join(f"{k[8:]} rc {v['rc']} ({v['seconds']} s)" + (f" (failed: {', '.join(v['failed'])})" if v.get("failed") else "")
                      for k, v in stage.items() if k != "runs")
    lines = [f"trainer stage: {build}",
             f"MFU against a bf16 dense peak of {peak / 1e12:.1f} TFLOP/s" if peak else
             "MFU: – (no bf16 peak known for this device)",
             "", "| run | tokens/s | MFU | PyTorch tokens/s | ratio | steps lost | final-loss difference |",
             "|---|---|---|---|---|---|---|"]
    for run in stage["runs"]:
        kind, name = run.get("kind"), run["name"]
        if run.get("status") == "skipped":
            lines.append(f"| {name} | skipped: {run.get('reason', '')} | | | | | |")
            continue
        failed = f" **failed: {run.get('reason', '')}**" if run.get("status") == "failed" else ""
        if kind == "throughput":
            p = run.get("params")
            size = "–" if p is None else f"{p / 1e6:.0f} M" if p >= 1e7 else f"{p / 1e6:.2f} M"
            label = (f"{name} ({size} params, {run.get('tokens_per_step')} tokens/step, {run.get('dtype')} on "
                     f"{run.get('device')}, {run.get('timed_steps', 0)} timed steps"
                     + (f", {run['offloaded_gb_per_step']:.2f} GB offloaded a step" if "offloaded_gb_per_step" in run else "")
                     + f"){failed}")
            t = run.get("torch", {})
            tps = run.get("tokens_per_s")
            mfu = f"{100 * run['flops_per_step'] / run['step_s'] / peak:.1f}%" if peak and run.get("step_s") else "–"
            if "tokens_per_s" in t:
                torch_cell = f"{t['tokens_per_s']:,.0f}"
                ratio = f"{tps / t['tokens_per_s']:.3f}" if tps else "–"
            else:
                torch_cell, ratio = f"– ({t.get('skipped') or t.get('error', 'none')})", "–"
            lines.append(f"| {label} | {fmt(tps, 0) if tps is None else f'{tps:,.0f}'} | {mfu} | {torch_cell} | "
                         f"{ratio} | – | – |")
        elif kind == "recovery":
            k = run.get("killed", {})
            cont = run.get("continued_from_memory") or [{}]
            label = (f"{name}: 3 agents × 1 worker, {k.get('node', '?')} SIGKILLed at step {k.get('at_step', '?')}, "
                     f"continued from memory at step {cont[0].get('step', '–')}{failed}")
            diff = run.get("final_loss_rel_diff")
            diff_cell = (f"{diff:.1e} relative ({run['final_loss']:.4f} against {run['final_loss_reference']:.4f}; "
                         f"bound {run.get('loss_tolerance')})" if diff is not None else "–")
            tps = run.get("tokens_per_s")
            lines.append(f"| {label} | {'–' if tps is None else f'{tps:,.0f}'} | – | – | – | "
                         f"{fmt(run.get('steps_lost'), 0) if run.get('steps_lost') is not None else '–'} | {diff_cell} |")
        elif kind == "recovery-reference":
            tps = run.get("tokens_per_s")
            loss = run.get("final_loss")
            lines.append(f"| {name}: the same job without the fault{failed} | {'–' if tps is None else f'{tps:,.0f}'} | "
                         f"– | – | – | – | final loss {'–' if loss is None else f'{loss:.4f}'} |")
        elif kind == "nccl-data-plane":
            lines.append(f"| NCCL data plane, world size 1 (the demo run){failed} | "
                         f"{run.get('data_plane', '–')} ({run.get('why', '')}) | | | | | |")
        elif kind == "nccl-superseded":
            took = run.get("superseded_aborted_after_s")
            lines.append(f"| NCCL init superseded by a newer generation 0.5 s in (nccl_gpu_test; bound 1.5 s){failed} | "
                         f"aborted after {'–' if took is None else f'{took:.3f} s'} | | | | | |")
        else:
            lines.append(f"| {name} | {run.get('status')} {run.get('reason', '')} | | | | | |")
    for run in stage["runs"]:
        if run.get("status") == "failed" and run.get("log_tail"):
            lines += ["", f"{run['name']}'s log, last lines:", *("    " + x for x in run["log_tail"].splitlines())]
    return lines


def trainer_table(args):
    print("\n".join(trainer_rows(read_json(args.file))))
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
    tr = sub.add_parser("trainer")
    tr.add_argument("file")
    k = sub.add_parser("kernels")
    k.add_argument("file")
    k.add_argument("--steps", type=int, default=1, help="model steps the profile covers")
    args = p.parse_args()
    return {"collect": collect, "table": table, "trainer": trainer_table, "kernels": kernels}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
