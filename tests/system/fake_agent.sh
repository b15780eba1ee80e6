#!/usr/bin/env bash
# Stands in for `hdp agent` where deploy/slurm/hdp.sbatch is under test (HDP_BIN points here), so
# that the batch script's plumbing is checked without Redis or a trainer: what reaches each node
# (environment, arguments), how many drain signals each agent gets, and how exit codes steer requeue.
#
# Environment (set at submission; sbatch exports it to the job):
#   FAKE_AGENT_DIR   where each run writes its report: <job>.<restart>.<node>
#   FAKE_AGENT_PLAN  space-separated RESTART:NODE:ACTION rules, first match wins, `*` matches all:
#                      wait   wait for a drain signal (SIGUSR1/SIGTERM/SIGINT), count the signals
#                             that arrive in the following second, exit 4 (drained)
#                      exitN  exit with status N at once
set -euo pipefail

[[ ${1:-} == agent ]] || { echo "fake agent: expected 'agent' as the first argument, got '${1:-}'" >&2; exit 2; }
: "${FAKE_AGENT_DIR:?}" "${FAKE_AGENT_PLAN:?}" "${SLURMD_NODENAME:?}" "${SLURM_JOB_ID:?}"

restart=${SLURM_RESTART_COUNT:-0}
node=$SLURMD_NODENAME
report=$FAKE_AGENT_DIR/$SLURM_JOB_ID.$restart.$node
signals=0
on_signal() { signals=$((signals + 1)); printf 'signal %s\n' "$1" >>"$report"; }
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

action=""
for rule in $FAKE_AGENT_PLAN; do
  IFS=: read -r want_restart want_node want_action <<<"$rule"
  if [[ ($want_restart == '*' || $want_restart == "$restart") && ($want_node == '*' || $want_node == "$node") ]]; then
    action=$want_action
    break
  fi
done

{
  printf 'node=%s\n' "$node"
  printf 'HDP_NODE_ID=%s\n' "${HDP_NODE_ID:-}"
  printf 'HDP_JOB_ID=%s\n' "${HDP_JOB_ID:-}"
  printf 'HDP_REDIS_URL=%s\n' "${HDP_REDIS_URL:-}"
  printf 'HDP_NNODES=%s\n' "${HDP_NNODES:-}"
  printf 'args=%s\n' "$*"
  printf 'action=%s\n' "$action"
} >"$report.tmp"
# The test waits for the report; it appears complete or not at all.
mv "$report.tmp" "$report"

# sleep in the background and `wait`, so that a trapped signal interrupts the wait at once.
pause() {
  sleep "$1" &
  wait $! 2>/dev/null || true
}

case $action in
  wait)
    # Bounded: a drain signal that never comes fails the test (exit 1) instead of hanging it.
    for _ in $(seq 300); do
      ((signals == 0)) || break
      pause 0.1
    done
    if ((signals == 0)); then
      echo "timeout" >>"$report"
      exit 1
    fi
    # A forwarding mistake would deliver the drain signal twice; give a second one time to arrive.
    pause 1
    pause 0.5
    printf 'signals=%d\nexit 4\n' "$signals" >>"$report"
    exit 4
    ;;
  exit[0-9]*)
    printf 'exit %s\n' "${action#exit}" >>"$report"
    exit "${action#exit}"
    ;;
  *)
    echo "fake agent: no rule of FAKE_AGENT_PLAN matches restart $restart on $node" >>"$report"
    exit 1
    ;;
esac
