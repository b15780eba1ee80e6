#!/usr/bin/env bash
# Builds hdp and runs every test: the full suite in a warnings-as-errors build, then the unit and
# integration tests once more under AddressSanitizer + UndefinedBehaviorSanitizer (CUDA off).
# Usage: scripts/test.sh            (from the repository root; scripts/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
# ccache keys on relative paths, so a fresh clone reuses what an earlier clone compiled.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# The suite's jobs train on the CPU even on a machine with a GPU (`hdp train --device` is auto by
# default); the gpu-labelled tests use the device directly.
export HDP_DEVICE=cpu
# Most tests wait on timers and child processes rather than computing: run more than one per core.
test_jobs=$((jobs * 2))
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Each phase's header says how long the run has taken so far, so a slow phase shows in the log.
phase() { echo "== $1 (at ${SECONDS} s)"; }

phase "build (warnings are errors)"
cmake -S . -B build "${generator[@]}" -DHDP_WERROR=ON >/dev/null
cmake --build build --parallel "$jobs"

phase "tests: unit, integration, system, gpu"
ctest --test-dir build --output-on-failure --parallel "$test_jobs" --timeout 300

phase "build with address,undefined sanitizers"
cmake -S . -B build-asan "${generator[@]}" -DHDP_WERROR=ON -DHDP_SANITIZE=address,undefined -DHDP_CUDA=OFF \
  -DHDP_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan --parallel "$jobs"

# The labels that build runs are written once, by cmake/HdpHelpers.cmake.
labels=$(cat build-asan/sanitizer-test-labels)
phase "tests under sanitizers: $labels"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --parallel "$test_jobs" --timeout 600 -L "$labels"
phase "done"
