#!/usr/bin/env bash
# One command that checks hdp's GPU path on a GPU machine with CUDA but no apt and no network:
#   1. unpacks the Debian packages carried in .gpu-deps/ (scripts/gpu-deps.sh fetched them);
#   2. builds the GPU subset (-DHDP_GPU_ONLY=ON: common, kernels, ops, their tests, bench_gpu);
#   3. runs every gpu-labelled test, bench_gpu, and PyTorch on the same shapes
#      (scripts/gpu_torch_baseline.py) as the baseline;
#   4. writes OUT/gpu-check.json (and the logs beside it); `scripts/gpu_results.py table
#      OUT/gpu-check.json` turns it into docs/performance.md's rows.
# A failing step is recorded in the JSON and the later steps still run.
#
# Usage: scripts/gpu-check.sh [--dry-run] [--no-bench] [--quick] [--out DIR]
#   --dry-run  the rehearsal on a machine without a GPU: the same build against the carried
#              packages, the gpu tests (they skip), bench_gpu --device cpu on small shapes, the JSON.
#   --no-bench the build and the tests only (a check after a change that moves no figure).
#   --quick    the benchmarks' attention sweep at 4,096 tokens only (the model step as always): a run
#              after a change that moves the model step, not the attention kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
dry_run=0
bench=1
quick=()
out=gpu-check-out
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --no-bench) bench=0 ;;
    --quick) quick=(--attention-tokens 4096) ;;
    --out) out="$2"; shift ;;
    *) echo "usage: scripts/gpu-check.sh [--dry-run] [--no-bench] [--quick] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
steps="$out/steps.txt"
: >"$steps"
step() {  # step NAME COMMAND...: runs it, logs to OUT/NAME.log, records NAME rc seconds
  local name=$1 t0=$SECONDS rc
  shift
  echo "== $name"
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "$name $rc $((SECONDS - t0))" >>"$steps"
  tail -n 15 "$out/$name.log"
  return $rc
}

ls .gpu-deps/*.deb >/dev/null 2>&1 || { echo "gpu-check: no .gpu-deps/*.deb: run scripts/gpu-deps.sh where apt works" >&2; exit 2; }
deps_root=${TMPDIR:-/tmp}/hdp-gpu-deps
unpack() {
  rm -rf "$deps_root" && mkdir -p "$deps_root"
  for deb in .gpu-deps/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$deps_root" || return 1
    else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}
      local member
      member=$(ar t "$deb" | grep '^data\.tar') || return 1
      case "$member" in
        *.xz) ar p "$deb" "$member" | tar -xJ -C "$deps_root" ;;
        *.zst) ar p "$deb" "$member" | tar --zstd -x -C "$deps_root" ;;
        *) ar p "$deb" "$member" | tar -xz -C "$deps_root" ;;
      esac || return 1
    fi
  done
  ls "$deps_root/usr/lib/x86_64-linux-gnu"
}
step unpack unpack || exit 1
export LD_LIBRARY_PATH="$deps_root/usr/lib/x86_64-linux-gnu:$deps_root/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

arch=90
if [ $dry_run = 0 ] && command -v nvidia-smi >/dev/null; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
  [ -n "$cap" ] && arch=$cap
fi
# nvcc where PATH has it (an image may keep CUDA outside /usr/local/cuda).
cuda_root=/usr/local/cuda
command -v nvcc >/dev/null && cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
# NCCL: beside CUDA, else the library PyTorch's wheel brings (nvidia/nccl), with its header or the
# one scripts/gpu-deps.sh carried in .gpu-deps/nccl/.
nccl_args=()
if [ ! -f "$cuda_root/include/nccl.h" ] && command -v python3 >/dev/null; then
  sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
  # shellcheck disable=SC2086
  nccl_lib=$(find $sites -path '*nccl*' -name 'libnccl.so*' 2>/dev/null | head -n1)
  if [ -n "$nccl_lib" ]; then
    nccl_inc=$(dirname "$(dirname "$nccl_lib")")/include
    [ -f "$nccl_inc/nccl.h" ] || nccl_inc=$PWD/.gpu-deps/nccl
    if [ -f "$nccl_inc/nccl.h" ]; then
      nccl_args=(-DHDP_NCCL_INCLUDE="$nccl_inc" -DHDP_NCCL_LIBRARY="$nccl_lib")
      export LD_LIBRARY_PATH="$(dirname "$nccl_lib"):$LD_LIBRARY_PATH"
    fi
  fi
  echo "gpu-check: NCCL library ${nccl_lib:-not found}, header ${nccl_inc:-not found}"
fi
build=build-gpu
[ $dry_run = 1 ] && build=build-gpu-dry
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
step configure cmake -S . -B "$build" "${generator[@]}" -DHDP_GPU_ONLY=ON -DHDP_DEPS_ROOT="$deps_root" -DHDP_CUDA_ROOT="$cuda_root" "${nccl_args[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" -DHDP_WERROR=OFF  # another compiler: warnings stay warnings
step build cmake --build "$build" --parallel "$(nproc)"

step tests ctest --test-dir "$build" -L gpu --output-on-failure --timeout 300 --output-junit "$out/tests.xml"
# The NCCL test's figures (its "nccl-figure" lines; ctest keeps a passing test's output to itself).
[ $dry_run = 0 ] && [ -x "$build/tests/nccl_gpu_test" ] && step nccl "$build/tests/nccl_gpu_test"
# The benchmarks print JSON on stdout (OUT/NAME.json) and their progress on stderr (OUT/NAME.log).
json_step() {
  local name=$1
  shift
  step "$name" bash -c '"$@" >"'"$out/$name.json"'"' _ "$@"
}
if [ $bench = 0 ]; then
  echo "== benchmarks skipped (--no-bench)"
elif [ $dry_run = 1 ]; then
  json_step bench "$build/bin/bench_gpu" --device cpu --attention-tokens 256,512 --heads 4 --head-dim 64 \
    --model-tokens 256 --vocab 256 --d-model 128 --layers 2 --model-heads 4 --model-kv-heads 2 --ffn 256 --reps 1
else
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  json_step bench "$build/bin/bench_gpu" --budget-s 60 "${quick[@]}"
  json_step torch env PYTHONUNBUFFERED=1 python3 scripts/gpu_torch_baseline.py "${quick[@]}"
fi
python3 scripts/gpu_results.py collect "$out" --dry-run "$dry_run" >"$out/gpu-check.json"
echo "== wrote $out/gpu-check.json"
python3 scripts/gpu_results.py table "$out/gpu-check.json"
