#!/usr/bin/env bash
# Builds hdp and runs the main job on this machine: `hdp run` starts a private redis-server and
# three node agents with two workers each; the workers train the elastic smoke job (all-reduce with
# exact sums) while the demo kills one agent with SIGKILL, so the job resizes from 6 to 4 workers and
# carries on to completion. Usage: scripts/demo.sh (scripts/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" >/dev/null
cmake --build build --parallel "$(nproc)" --target hdp

build/bin/hdp version
log=$(mktemp)
trap 'rm -f "$log"' EXIT
build/bin/hdp run --nodes 3 --nproc-per-node 2 --nnodes 1:4 --lease-ms 2000 -- \
  build/bin/hdp train --smoke --steps 400 --step-ms 25 2>"$log" &
run_pid=$!
# Once the job trains, kill one agent (the elastic path), then watch it finish.
for _ in $(seq 200); do grep -q "rank 5 of 6" "$log" && break; sleep 0.1; done
sleep 2
victim=$(pgrep -f -- "--node-id node2 " | head -n 1 || true)
if [ -n "$victim" ]; then
  echo "demo: kill -9 the agent of node2 (pid $victim)"
  kill -9 "$victim"
fi
status=0
wait "$run_pid" || status=$?   # 0: the job completed although an agent was lost
echo "demo: what happened (from the agents' logs):"
grep -E "published generation|peer lost|finished" "$log" | sed 's/^/  /' | head -20
if [ "$status" -ne 0 ] || ! grep -q "finished 400 steps" "$log"; then
  echo "demo: the job did not complete (hdp run exit $status); full log:" >&2
  cat "$log" >&2
  exit 1
fi
echo "demo: the job completed 400 steps across the resize"
