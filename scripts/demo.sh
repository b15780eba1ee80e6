#!/usr/bin/env bash
# Builds hdp and runs the main job. For now: the build's features and a round trip to a private
# redis-server, the coordination store every later part stands on.
# Usage: scripts/demo.sh            (from the repository root; scripts/install-deps.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" >/dev/null
cmake --build build --parallel "$(nproc)" --target hdp

build/bin/hdp version

# A private redis-server on a unix socket (no port to collide with), stopped when this script exits.
workdir=$(mktemp -d)
redis-server --port 0 --unixsocket "$workdir/redis.sock" --save "" --appendonly no --dir "$workdir" \
  --daemonize no --loglevel warning >"$workdir/redis.log" 2>&1 &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$workdir"' EXIT
build/bin/hdp ping --redis "unix://$workdir/redis.sock" -n 10
