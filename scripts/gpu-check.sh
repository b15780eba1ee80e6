#!/usr/bin/env bash
# One command that checks hdp's GPU path on a GPU machine with CUDA but no apt and no network:
#   1. unpacks the Debian packages carried in .gpu-deps/ (scripts/gpu-deps.sh fetched them);
#   2. stage `kernels` (the default): builds the GPU subset (-DHDP_GPU_ONLY=ON: common, kernels, ops,
#      their tests, bench_gpu), runs every gpu-labelled test, bench_gpu, and PyTorch on the same
#      shapes (scripts/gpu_torch_baseline.py) as the baseline;
#   3. stage `trainer`: builds the full tree's `hdp` and nccl_gpu_test against the same packages
#      (redis-server among them) and runs `hdp run ... -- hdp train --device cuda`: the demo model and
#      a 0.85B LLaMA at 8,192-token micro-batches beside PyTorch's bf16 step of the same model and
#      batch; 3 agents x 1 worker with one node SIGKILLed mid-run beside the same job without the
#      fault (steps lost, final loss); NCCL's data plane at world size 1 and the abort of a
#      superseded generation's NCCL init (nccl_gpu_test);
#   4. writes OUT/gpu-check.json (and the logs beside it); `scripts/gpu_results.py table
#      OUT/gpu-check.json` turns it into docs/performance.md's rows (`trainer` for the trainer's).
# A failing step or run is recorded in the JSON with its log, and the later ones still run; every run
# has a time limit.
#
# Usage: scripts/gpu-check.sh [--stage kernels|trainer|all] [--dry-run] [--no-bench] [--quick]
#                            [--deadline-s N] [--out DIR]
#   --stage    kernels (default), trainer, or all (both, kernels first).
#   --dry-run  the rehearsal on a machine without a GPU: the same builds against the carried
#              packages (never the system's), the gpu tests (they skip), bench_gpu --device cpu on
#              small shapes, the trainer's runs with --device cpu on tiny shapes, the JSON.
#   --no-bench the build and the tests only (a check after a change that moves no figure).
#   --quick    the benchmarks' attention sweep at 4,096 tokens only (the model step as always): a run
#              after a change that moves the model step, not the attention kernels.
#   --deadline-s N  the trainer stage's builds and runs end N seconds after the command started (each
#              run's own limit is shortened to fit; one with under 20 s left is recorded as skipped),
#              so that the JSON is written within a machine's limit on one command.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
dry_run=0
stage=kernels
deadline_s=0
bench=1
quick=()
out=gpu-check-out
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --no-bench) bench=0 ;;
    --quick) quick=(--attention-tokens 4096) ;;
    --out) out="$2"; shift ;;
    --stage) stage="$2"; shift ;;
    --deadline-s) deadline_s="$2"; shift ;;
    *) echo "usage: scripts/gpu-check.sh [--stage kernels|trainer|all] [--dry-run] [--no-bench] [--quick] [--deadline-s N] [--out DIR]" >&2
       exit 2 ;;
  esac
  shift
done
case "$stage" in
  all | kernels | trainer) ;;
  *) echo "gpu-check: --stage is kernels, trainer or all, not '$stage'" >&2; exit 2 ;;
esac
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
# The packages are unpacked beside the build folders (the same path every run, so that ccache finds
# its objects again) and removed at the end.
deps_root=$PWD/build-gpu-deps
trap 'rm -rf "$deps_root"' EXIT
deps_lib=$deps_root/usr/lib/x86_64-linux-gnu
deps_base_lib=$deps_root/lib/x86_64-linux-gnu  # where Debian 12 still puts zlib, liblzma, libcap, ...
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
  # The packages' .pc files name /usr: point every path in them at the unpacked tree (prefix=/usr,
  # libdir=/usr/lib/..., -I/usr/include/...; ${prefix}-relative ones follow prefix). Their CMake
  # configs compute their prefix from their own location and need nothing.
  find "$deps_root" -name '*.pc' -type f -exec sed -i -E \
    "s#(^|[=[:space:]]|-I|-L)/usr(/|\$|[[:space:]])#\\1$deps_root/usr\\2#g" {} + || return 1
  # Debian selects OpenBLAS's pthread variant through alternatives that dpkg-deb -x does not create.
  ln -sfn ../openblas-pthread/pkgconfig/openblas.pc "$deps_lib/pkgconfig/openblas.pc" || return 1
  grep -h '^prefix=' "$deps_lib"/pkgconfig/*.pc | sort | uniq -c
  # The loader's folder (LD_LIBRARY_PATH): a link to each carried shared library that this machine
  # does not have (by soname, ldconfig's cache), so that the machine's own libraries, which its
  # compilers and tools load too, are never shadowed by Debian's. The dry run links every one: hdp
  # and redis-server run on the carried libraries alone there.
  local have lib ldconfig
  ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
  have=$("$ldconfig" -p 2>/dev/null | awk '{print $1}')
  mkdir -p "$deps_root/ld"
  for lib in "$deps_lib"/*.so.* "$deps_lib"/openblas-pthread/*.so.* "$deps_base_lib"/*.so.*; do
    [ -f "$lib" ] || continue
    if [ $dry_run = 1 ] || ! grep -qxF "$(basename "$lib")" <<<"$have"; then
      ln -sfn "$lib" "$deps_root/ld/$(basename "$lib")"
    fi
  done
  echo "carried libraries the loader is given:" && ls "$deps_root/ld"
}
step unpack unpack || exit 1
# What hdp, protoc, pkgconf and redis-server load and this machine lacks comes from the packages
# (unpack: OUT/unpack.log lists it); PyTorch's runs keep the machine's own LD_LIBRARY_PATH (python_env).
machine_ld_path=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$deps_root/ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$deps_root/usr/bin:$PATH"
python_env=(env LD_LIBRARY_PATH="$machine_ld_path" PYTHONUNBUFFERED=1)

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
      LD_LIBRARY_PATH="$(dirname "$nccl_lib"):$LD_LIBRARY_PATH"
    fi
  fi
  echo "gpu-check: NCCL library ${nccl_lib:-not found}, header ${nccl_inc:-not found}"
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# The benchmarks print JSON on stdout (OUT/NAME.json) and their progress on stderr (OUT/NAME.log).
json_step() {
  local name=$1
  shift
  step "$name" bash -c '"$@" >"'"$out/$name.json"'"' _ "$@"
}

# ---- stage kernels: the GPU subset, its gpu tests, bench_gpu beside PyTorch ------------------------
kernels_stage() {
  local build=build-gpu
  [ $dry_run = 1 ] && build="build-gpu-dry"
  step configure cmake -S . -B "$build" "${generator[@]}" -DHDP_GPU_ONLY=ON -DHDP_DEPS_ROOT="$deps_root" -DHDP_CUDA_ROOT="$cuda_root" "${nccl_args[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" -DHDP_WERROR=OFF  # another compiler: warnings stay warnings
  step build cmake --build "$build" --parallel "$(nproc)"

  step tests ctest --test-dir "$build" -L gpu --output-on-failure --timeout 300 --output-junit "$out/tests.xml"
  # The NCCL test's figures (its "nccl-figure" lines; ctest keeps a passing test's output to itself).
  [ $dry_run = 0 ] && [ -x "$build/tests/nccl_gpu_test" ] && step nccl "$build/tests/nccl_gpu_test"
  if [ $bench = 0 ]; then
    echo "== benchmarks skipped (--no-bench)"
  elif [ $dry_run = 1 ]; then
    json_step bench "$build/bin/bench_gpu" --device cpu --attention-tokens 256,512 --heads 4 --head-dim 64 \
      --model-tokens 256 --vocab 256 --d-model 128 --layers 2 --model-heads 4 --model-kv-heads 2 --ffn 256 --reps 1
  else
    nvidia-smi >"$out/nvidia-smi.txt" 2>&1
    json_step bench "$build/bin/bench_gpu" --budget-s 60 "${quick[@]}"
    json_step torch "${python_env[@]}" python3 scripts/gpu_torch_baseline.py "${quick[@]}"
  fi
}

# ---- stage trainer: `hdp run ... -- hdp train` beside PyTorch, recovery, NCCL ----------------------
# The full tree (HdpDependencies.cmake with HDP_DEPS_ROOT) against the unpacked packages only; the
# tests are configured (nccl_gpu_test is one) but only `hdp` and nccl_gpu_test are built.
# Each run has its folder OUT/trainer/NAME/ (run.json: what it is; run.log; metrics.jsonl, hdp train's
# line per step; torch.json, PyTorch's step; skipped.txt: why it did not run); steps.txt has
# `trainer-NAME rc seconds` per run. gpu_results.py reads the figures from those files.
loss_tolerance=2e-2  # relative, final loss after a node loss against the same job without it (bf16)
trainer_stage() {
  local tbuild=build-trainer tout=$out/trainer device=cuda
  [ $dry_run = 1 ] && tbuild="build-trainer-dry" && device=cpu
  rm -rf "$tout" && mkdir -p "$tout"
  step trainer-configure timeout "$(limit_s 300)" cmake -S . -B "$tbuild" "${generator[@]}" -DHDP_DEPS_ROOT="$deps_root" \
    -DHDP_BUILD_TESTS=ON -DHDP_BUILD_BENCH=OFF -DHDP_REDIS_SERVER="$deps_root/usr/bin/redis-server" \
    -DHDP_CUDA_ROOT="$cuda_root" "${nccl_args[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DHDP_WERROR=OFF || return 1
  step trainer-found-paths found_paths "$tbuild" || return 1
  local targets=(hdp)
  grep -qE '^build tests/nccl_gpu_test[ :]' "$tbuild/build.ninja" 2>/dev/null && targets+=(nccl_gpu_test)
  grep -qE '^build tests/kernels_cuda_test[ :]' "$tbuild/build.ninja" 2>/dev/null && targets+=(kernels_cuda_test)
  step trainer-build timeout "$(limit_s 1800)" cmake --build "$tbuild" --parallel "$(nproc)" --target "${targets[@]}" ||
    return 1
  step trainer-leaks leaks "$tbuild"
  # The kernels' and the device memory's own tests but the attention kernels' (unchanged; they skip
  # without a device), before the runs that rely on them.
  local tests_limit
  if [ -x "$tbuild/tests/kernels_cuda_test" ] && tests_limit=$(limit_s 120); then
    step trainer-kernels-tests timeout "$tests_limit" "$tbuild/tests/kernels_cuda_test" --gtest_brief=1 \
      '--gtest_filter=-FlashAttention.*'
  fi
  export HDP_REDIS_SERVER=$deps_root/usr/bin/redis-server
  local hdp
  hdp=$(cd "$tbuild/bin" && pwd)/hdp

  # Every micro-batch one sequence of `context` tokens (a length distribution of one length): the
  # batch PyTorch's step takes, and the FLOPs MFU counts.
  local ctx=8192 nsteps=30 warm=5 rmodel=demo rsteps=40 rkill=15 rctx=2048 big=llama-0.85b
  if [ $dry_run = 1 ]; then ctx=256 nsteps=4 warm=1 rmodel=tiny rsteps=30 rkill=10 rctx=256 big=llama-tiny; fi
  echo "$ctx" >"$tout/lengths.txt"
  # The demo preset (trainer/trainer_config.cc, model_preset) as a Hugging Face config, for PyTorch
  # and the FLOP count; hdp itself trains `--model demo`.
  hf_config "$tout/demo.json" 256 256 4 4 4 768
  if [ $dry_run = 1 ]; then
    hf_config "$tout/$big.json" 512 64 2 4 2 192
  else  # 853 M parameters: the model-step rows' layer (bench_gpu), 16 layers
    hf_config "$tout/$big.json" 32000 2048 16 16 4 5632
  fi
  local common=(--device "$device" --dtype bf16 --context "$ctx" --capacity "$ctx" --batch-tokens "$ctx"
    --data "synthetic:file:$tout/lengths.txt" --steps "$nsteps" --warmup-steps "$warm" --metrics-file metrics.jsonl
    --log-every 1 --timeout-ms 120000)
  local name model
  for name in demo "$big"; do
    model=(--model-config "$tout/$name.json")
    [ "$name" = demo ] && model=(--model demo)
    run_json "$tout/$name" "{\"kind\": \"throughput\", \"config\": \"$name.json\", \"tokens_per_step\": $ctx, \"steps\": $nsteps, \"warmup_steps\": $warm, \"device\": \"$device\", \"dtype\": \"bf16\"}"
    trun "$name" 150 "$hdp" run --nodes 1 --nproc-per-node 1 -- "$hdp" train "${model[@]}" "${common[@]}"
    torch_run "$name" --trainer-config "$tout/$name.json" --trainer-tokens "$ctx" --reps "$nsteps"
  done

  # 3 agents x 1 worker on the one device (they share it: TCP data plane, staged through the host),
  # with and without node2 (its agent, and with it its worker) SIGKILLed at step rkill; the job goes
  # on with 2 (--nnodes 2:3). Plans at equal speeds, so that both runs sum the same batches.
  local rec=(--device "$device" --dtype bf16 --model "$rmodel" --context "$rctx" --capacity "$rctx"
    --batch-tokens $((3 * rctx)) --data synthetic:github --seed 7 --steps "$rsteps" --warmup-steps 5
    --no-speed-aware --metrics-file metrics.jsonl --log-every 5 --timeout-ms 30000)
  local launch=(run --nodes 3 --nnodes 2:3 --nproc-per-node 1 --lease-ms 2000)
  run_json "$tout/recovery-reference" '{"kind": "recovery-reference"}'
  trun recovery-reference 150 "$hdp" "${launch[@]}" -- "$hdp" train "${rec[@]}"
  run_json "$tout/recovery-node-lost" "{\"kind\": \"recovery\", \"reference\": \"recovery-reference\", \"kill\": \"node2@$rkill\", \"steps\": $rsteps, \"loss_tolerance\": $loss_tolerance}"
  trun recovery-node-lost 150 "$hdp" "${launch[@]}" --kill-node "node2@$rkill" -- "$hdp" train "${rec[@]}"

  # NCCL: the data plane of a world of one on its own GPU is read from the demo run's log
  # (gpu_results.py); the abort of a superseded generation's init is nccl_gpu_test's case.
  run_json "$tout/nccl-data-plane" '{"kind": "nccl-data-plane", "from": "demo"}'
  [ $dry_run = 1 ] && skip nccl-data-plane "dry run: every rank is on the CPU, so the data plane is TCP (NCCL needs a GPU per rank)"
  run_json "$tout/nccl-superseded" '{"kind": "nccl-superseded"}'
  if [ ! -x "$tbuild/tests/nccl_gpu_test" ]; then
    skip nccl-superseded "nccl_gpu_test not built: this build has no NCCL (CUDA toolkit and nccl.h)"
  else
    trun nccl-superseded 120 "$PWD/$tbuild/tests/nccl_gpu_test"
    if grep -q '\[  SKIPPED \]' "$tout/nccl-superseded/run.log"; then
      skip nccl-superseded "$(grep -m1 -o 'no CUDA device[^"]*' "$tout/nccl-superseded/run.log" || echo 'nccl_gpu_test skipped')"
    fi
  fi
  # Activation offloading, where the planner's Eq. 3 lets compute hide the copies (the built-in GPU
  # estimate does not offload an 8K-token micro-batch of this model): one 32,768-token sequence of
  # the big model held whole (--capacity 32768), then on a rank declared to hold half of it
  # (--capacity 16384), which fits one rank only if the planner offloads (ops/model/offload_schedule.h).
  # A refusal at start ("does not fit 1 rank(s)") is the planner's answer, recorded as the run's failure.
  local long=32768 lsteps=10
  echo "$long" >"$tout/long-lengths.txt"
  local cap name_long
  for cap in "$long" $((long / 2)); do
    name_long="long-$big-c$cap"
    run_json "$tout/$name_long" "{\"kind\": \"throughput\", \"config\": \"$big.json\", \"tokens_per_step\": $long, \"steps\": $lsteps, \"warmup_steps\": 2, \"device\": \"$device\", \"dtype\": \"bf16\", \"capacity\": $cap}"
    if [ $dry_run = 1 ]; then
      skip "$name_long" "dry run: the CPU never offloads (its activations are host memory)"
      continue
    fi
    trun "$name_long" 150 "$hdp" run --nodes 1 --nproc-per-node 1 -- "$hdp" train --model-config "$tout/$big.json" \
      --device "$device" --dtype bf16 --context "$long" --capacity "$cap" --batch-tokens "$long" \
      --data "synthetic:file:$tout/long-lengths.txt" --steps "$lsteps" --warmup-steps 2 --metrics-file metrics.jsonl \
      --log-every 1 --timeout-ms 120000
    if [ "$cap" = "$long" ]; then
      torch_run "$name_long" --trainer-config "$tout/$big.json" --trainer-tokens "$long" --reps "$lsteps"
    else
      echo "PyTorch's eager step does not offload: the baseline of this row is the same sequence held whole (the row above)" \
        >"$out/trainer/$name_long/torch-skipped.txt"
    fi
  done

}

# hf_config FILE VOCAB D_MODEL LAYERS HEADS KV_HEADS FFN: a Hugging Face LLaMA config.json.
hf_config() {
  printf '{"model_type": "llama", "vocab_size": %s, "hidden_size": %s, "num_hidden_layers": %s, "num_attention_heads": %s, "num_key_value_heads": %s, "intermediate_size": %s, "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "tie_word_embeddings": false}\n' \
    "$2" "$3" "$4" "$5" "$6" "$7" >"$1"
}
run_json() { mkdir -p "$1" && echo "$2" >"$1/run.json"; }
# limit_s SECONDS: that, or what --deadline-s leaves if less; fails when under 20 s are left.
limit_s() {
  local left=$1
  [ "$deadline_s" -gt 0 ] && left=$((deadline_s - SECONDS < $1 ? deadline_s - SECONDS : $1))
  echo "$left"
  [ "$left" -ge 20 ]
}
skip() { mkdir -p "$out/trainer/$1" && echo "$2" >"$out/trainer/$1/skipped.txt" && echo "== trainer $1 skipped: $2"; }
# trun NAME LIMIT_S COMMAND...: one run in OUT/trainer/NAME/, its output in run.log, ended after LIMIT_S
# (SIGTERM: `hdp run` drains its agents; SIGKILL 20 s later; what it started dies with it).
trun() {
  local name=$1 limit t0=$SECONDS rc
  limit=$(limit_s "$2") || { skip "$name" "not run: the --deadline-s budget was spent"; return 1; }
  shift 2
  echo "== trainer $name"
  (cd "$out/trainer/$name" && timeout --kill-after=20 "$limit" "$@") >"$out/trainer/$name/run.log" 2>&1
  rc=$?
  echo "trainer-$name $rc $((SECONDS - t0))" >>"$steps"
  tail -n 6 "$out/trainer/$name/run.log"
  return $rc
}
# torch_run NAME ARGS...: PyTorch's step of the same model and batch, into OUT/trainer/NAME/torch.json.
torch_run() {
  local name=$1 dir=$out/trainer/$1
  shift
  if ! "${python_env[@]}" python3 -c 'import torch' 2>/dev/null; then
    echo "no PyTorch on this machine" >"$dir/torch-skipped.txt"
    return 0
  fi
  local where=() limit
  [ $dry_run = 1 ] && where=(--device cpu)
  limit=$(limit_s 300) || { echo "not run: the --deadline-s budget was spent" >"$dir/torch-skipped.txt"; return 1; }
  # shellcheck disable=SC2016
  step "trainer-$name-torch" bash -c 'timeout --kill-after=10 "$0" "$@" >"'"$dir/torch.json"'"' "$limit" \
    "${python_env[@]}" python3 scripts/gpu_torch_baseline.py "${where[@]}" "$@"
}
# found_paths BUILD: every library, header folder and program the configure found, and a failure if
# one of those the packages carry was found outside them (the system's instead).
found_paths() {
  local cache=$1/CMakeCache.txt
  grep -E '^[A-Za-z0-9_]+:(FILEPATH|PATH)=/' "$cache" | grep -v NOTFOUND
  local outside
  outside=$(grep -E '^[A-Za-z0-9_]+:(FILEPATH|PATH)=/' "$cache" | grep -v -e NOTFOUND -e "=$deps_root" |
    grep -E -i '^(boost|protobuf|hdf5_(c_|hdf5)|pkgcfg_lib|spdlog|fmt|nlohmann|cli11|gtest|hdp_redis|pkg_config)' |
    grep -v -i 'hdf5_.*_library_(m|dl|pthread|rt)' )
  [ -z "$outside" ] && echo "every carried dependency was found under $deps_root" && return 0
  echo "found outside $deps_root:"
  echo "$outside"
  return 1
}
# leaks BUILD: a header the build read from the system's /usr/include that the packages carry too
# (the build did not use the packages), or in the dry run a carried library that hdp or redis-server
# loads from the system. Lists what they load from the machine (on the GPU machine, a library it has
# is its own).
leaks() {
  local b=$1 leaked=0 f
  if command -v ninja >/dev/null && [ -f "$b/build.ninja" ]; then
    while read -r f; do
      [ -e "$deps_root$f" ] && echo "header from the system, carried too: $f" && leaked=1
    done < <(ninja -C "$b" -t deps 2>/dev/null | awk '$1 ~ "^/usr/(include|lib)/" {print $1}' | sort -u)
  fi
  local bin lib path
  for bin in "$b/bin/hdp" "$deps_root/usr/bin/redis-server"; do
    echo "$bin loads from the machine:"
    while read -r lib path; do
      case "$path" in
        "$deps_root"/*) ;;
        *) echo "  $lib => $path"
           if [ $dry_run = 1 ] && [ -e "$deps_root/ld/$lib" ]; then echo "  ^ carried too" && leaked=1; fi ;;
      esac
    done < <(ldd "$bin" | awk '$2 == "=>" {print $1, $3}')
    ldd "$bin" | grep 'not found' && leaked=1
  done
  return $leaked
}

case "$stage" in
  kernels) kernels_stage ;;
  trainer) trainer_stage ;;
  all) kernels_stage; trainer_stage ;;
esac
python3 scripts/gpu_results.py collect "$out" --dry-run "$dry_run" >"$out/gpu-check.json"
echo "== wrote $out/gpu-check.json"
python3 scripts/gpu_results.py table "$out/gpu-check.json"
