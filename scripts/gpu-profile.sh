#!/usr/bin/env bash
# Where a model step's GPU time goes: Nsight Compute (ncu) times every kernel of bench_gpu's model
# step (the warm-up and one timed step, nothing else) and `scripts/gpu_results.py kernels` lists the
# kernels by time per step. Run on the GPU machine after scripts/gpu-check.sh built build-gpu/.
# ncu runs the kernels one at a time, so the sum is the kernels' time without overlap or host gaps:
# compare it with the step's wall time from bench_gpu to see what the host adds.
#
# Usage: scripts/gpu-profile.sh [--build DIR] [--out DIR] [--dtype bf16|f32] [bench_gpu model options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-gpu
out=gpu-check-out
dtype=bf16
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift ;;
    --out) out="$2"; shift ;;
    --dtype) dtype="$2"; shift ;;
    *) extra+=("$1") ;;
  esac
  shift
done
command -v ncu >/dev/null || { echo "gpu-profile: ncu (Nsight Compute) is not on PATH" >&2; exit 2; }
[ -x "$build/bin/bench_gpu" ] || { echo "gpu-profile: no $build/bin/bench_gpu: run scripts/gpu-check.sh first" >&2; exit 2; }
mkdir -p "$out"
csv="$out/profile-$dtype.csv"
# --clock-control none: the clocks stay as the benchmarks saw them.
ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  "$build/bin/bench_gpu" --attention-tokens 0 --model-dtypes "$dtype" --reps 1 "${extra[@]}" >"$csv" 2>"$out/profile-$dtype.log"
python3 scripts/gpu_results.py kernels "$csv" --steps 2
