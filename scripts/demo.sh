#!/usr/bin/env bash
# Builds hdp and runs the main job on this machine: `hdp run` starts a private redis-server and
# three node agents with two workers each, which train the demo LLaMA model (4 layers, d 256,
# byte-level) on this machine's C/C++ headers with HDP for 100 steps. At step 30 the agent of node2
# and its two workers are SIGKILLed: the job shrinks to 4 workers, restores the last checkpoint
# resharded to the new size and carries on; 5 s later node2 starts again and rejoins (6 workers).
# Rank 0 prints a line every 5 steps (loss, tokens/s, world size); `hdp run` prints the
# generations as they change and a summary at the end. About 2 minutes on 2 cores.
# Usage: scripts/demo.sh (scripts/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" >/dev/null
cmake --build build --parallel "$(nproc)" --target hdp

build/bin/hdp version
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
# Worker and agent log lines go to stderr: keep the steps and the events, leave the rest in $log.
# Its live dashboard is served on http://127.0.0.1:${HDP_DEMO_DASHBOARD_PORT:-8265}/ while it runs.
build/bin/hdp run --nodes 3 --nproc-per-node 2 --nnodes 1:3 --lease-ms 2000 --run-dir build/hdp-runs \
  --dashboard-port "${HDP_DEMO_DASHBOARD_PORT:-8265}" --kill-node node2@30+5 2> >(tee "$log" | grep --line-buffered -E \
    "step [0-9]+/|published generation|restored|continuing from memory|recovered|peer lost|rejoin|registered|completed" >&2) || status=$?
wait
if [ "$status" -ne 0 ]; then
  echo "demo: the job did not complete (hdp run exit $status); full log:" >&2
  cat "$log" >&2
  exit 1
fi
echo "demo: the job trained 100 steps across a node loss and its rejoin"
