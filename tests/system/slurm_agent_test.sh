#!/usr/bin/env bash
# System test of `hdp agent` and the real trainer under Slurm: deploy/slurm/hdp.sbatch on the local
# three-node cluster (slurm_cluster.sh) with a private redis-server on a free loopback port; each
# node's agent runs one `hdp train` worker (the demo model) with checkpoints on the shared disk.
#
#   slurm_agent_test.sh SOURCE_DIR HDP_BINARY
#
# 1. The three agents register, a generation with n1, n2 and n3 is published, and the job trains.
# 2. n3 set DOWN (scontrol) and its agent killed (kill -9): a newer generation without n3 follows within the lease plus a margin,
#    the other two agents keep running (srun --kill-on-bad-exit=0), no process of n3's is left,
#    and training goes on on the two survivors (restored from the last checkpoint).
# 3. `scancel --batch --signal=USR1` (what --signal=B:USR1@120 does before the time limit): the
#    agents drain, every rank stops at one step and writes a final checkpoint, the batch script
#    requeues the job; the requeued run (three nodes again) restores that checkpoint, resharded
#    from the two ranks that wrote it to the three that read it, at the step the first run
#    stopped, and trains to the last step: the job ends COMPLETED with exit code 0,
#    the job's outcome is `completed`, and nothing is left over.
# Reports SKIP (exit 77) while `hdp agent` is not built, or without slurm-wlm, munge or redis.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/system/slurm_cluster.sh
source "$here/slurm_cluster.sh"

(($# == 2)) || { echo "usage: $0 SOURCE_DIR HDP_BINARY" >&2; exit 2; }
src=$(cd "$1" && pwd)
hdp_bin=$(realpath -m -- "$2")
sbatch_script=$src/deploy/slurm/hdp.sbatch

# The hdp binary answers --help for any word after it; only the agent's own help names its flags.
if ! help=$("$hdp_bin" agent --help 2>&1) || ! grep -q -- '--drain-timeout' <<<"$help"; then
  echo "SKIP: hdp agent not built ($hdp_bin agent --help does not describe the agent)"
  exit "$CLUSTER_SKIP"
fi
for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool is not installed"; exit "$CLUSTER_SKIP"; }
done
cluster_require
cluster_isolate "$0" "$@"
cluster_start

readonly LEASE_MS=2000
readonly NNODES=3

# ---- Redis -------------------------------------------------------------------------------------------
mkdir -p "$CLUSTER_DIR/redis"
cluster_pick_port
redis_port=$CLUSTER_PORT
redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
  --dir "$CLUSTER_DIR/redis" --logfile "$CLUSTER_DIR/log/redis.log" &
CLUSTER_EXTRA_PIDS+=($!)
redis() { timeout 5 redis-cli -h 127.0.0.1 -p "$redis_port" --raw "$@"; }
wait_until 10 bash -c '[[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]' _ "$redis_port" ||
  cluster_fail "redis-server did not answer on port $redis_port within 10 s"

# ---- helpers --------------------------------------------------------------------------------------------
# The job's keys (docs/redis-schema.md): hdp:<job>:gen is the current generation, hdp:<job>:gen:<g>
# its members as JSON, hdp:<job>:node:<id> the incarnation holding a node id and
# hdp:<job>:lease:<id>/<incarnation> that incarnation's lease.
node_has_lease() {
  local incarnation
  incarnation=$(redis GET "hdp:$job:node:$1" 2>/dev/null || true)
  [[ -n $incarnation && $(redis EXISTS "hdp:$job:lease:$1/$incarnation") == 1 ]]
}
node_is_gone() {
  [[ $(redis EXISTS "hdp:$job:node:$1") == 0 && -z $(redis --scan --pattern "hdp:$job:lease:$1/*") ]]
}
current_gen() { redis GET "hdp:$job:gen" 2>/dev/null | grep -E '^[0-9]+$' || true; }
state_field() { redis HGET "hdp:$job:state" "$1" 2>/dev/null || true; }
step_at_least() { local s; s=$(state_field step); [[ -n $s ]] && ((s >= $1)); }
gen_members() { redis GET "hdp:$job:gen:$1" 2>/dev/null || true; }

# gen_is GEN_MIN NODES...: the current generation is at least GEN_MIN and has exactly these nodes
# of the cluster among its members.
gen_is() {
  local min=$1 g members node
  shift
  g=$(current_gen)
  [[ -n $g ]] && ((g >= min)) || return 1
  members=$(gen_members "$g")
  for node in "${CLUSTER_NODES[@]}"; do
    if [[ " $* " == *" $node "* ]]; then
      grep -q "\"$node\"" <<<"$members" || return 1
    else
      ! grep -q "\"$node\"" <<<"$members" || return 1
    fi
  done
}

# argv_of PID: sets argv to the process's arguments, with an interpreter's name dropped when the
# binary is a script (so that a wrapper script installed as hdp is recognised too).
argv_of() {
  mapfile -d '' -t argv <"/proc/$1/cmdline" 2>/dev/null || return 1
  if [[ ${argv[0]:-} != "$hdp_bin" && ${argv[1]:-} == "$hdp_bin" ]]; then argv=("${argv[@]:1}"); fi
}

on_node() { grep -qx "SLURMD_NODENAME=$2" <<<"$(tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null)"; }

# agent_pid NODE: the agent process that runs on NODE (its arguments are "<hdp> agent ...").
agent_pid() {
  local node=$1 pid argv
  for pid in $(cluster_pids_with_marker); do
    on_node "$pid" "$node" && argv_of "$pid" || continue
    if [[ ${argv[0]:-} == "$hdp_bin" && ${argv[1]:-} == agent ]]; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# hdp_pids_on NODE: every process of the hdp binary (agent, workers) still running on NODE.
hdp_pids_on() {
  local node=$1 pid argv
  for pid in $(cluster_pids_with_marker); do
    on_node "$pid" "$node" && argv_of "$pid" || continue
    if [[ ${argv[0]:-} == "$hdp_bin" ]]; then echo "$pid"; fi
  done
  return 0
}

no_hdp_process_on() {
  local node
  for node in "$@"; do [[ -z $(hdp_pids_on "$node") ]] || return 1; done
}

# ---- 1. all three nodes join ---------------------------------------------------------------------------
export HDP_REDIS_URL=redis://127.0.0.1:$redis_port/0
export HDP_BIN=$hdp_bin
export HDP_NPROC_PER_NODE=1
export HDP_LEASE_MS=$LEASE_MS
export HDP_DRAIN_TIMEOUT=20
# Several agents may share one network namespace here: each takes a free metrics port.
export HDP_METRICS_PORT=0
export HDP_NNODES=1:$NNODES
readonly STEPS=100
ckpt=$CLUSTER_DIR/ckpt
# --no-kill: the allocation outlives a node that goes down (hdp.sbatch's srun has --no-kill too).
job=$(sbatch --parsable --no-kill --nodes=$NNODES --output="$CLUSTER_DIR/jobs/hdp-%j.out" "$sbatch_script" -- \
  "$hdp_bin" train --model demo --steps $STEPS --context 128 --capacity 128 --batch-tokens 1024 --threads 1 \
  --checkpoint-dir "$ckpt" --checkpoint-every 10 --timeout-ms 5000 --log-every 50)
log_file=$CLUSTER_DIR/jobs/hdp-$job.out
cluster_log "job $job submitted; waiting for a generation with n1 n2 n3"
wait_until 60 gen_is 1 n1 n2 n3 ||
  cluster_fail "no generation with n1 n2 n3 within 60 s (gen '$(current_gen)': $(gen_members "$(current_gen)"))"
gen_full=$(current_gen)
for node in "${CLUSTER_NODES[@]}"; do
  node_has_lease "$node" || cluster_fail "no live lease for $node"
  agent_pid "$node" >/dev/null || cluster_fail "no agent process on $node"
done

wait_until 60 step_at_least 10 || cluster_fail "the job did not train to step 10 (step '$(state_field step)')"

# ---- 2. one node's agent dies: the job resizes and trains on ----------------------------------------
victim=$(agent_pid n3)
cluster_log "generation $gen_full has all three nodes, step $(state_field step); n3 DOWN and its agent killed (pid $victim)"
scontrol update NodeName=n3 State=DOWN Reason=hdp-test
# The node set DOWN may have had Slurm kill its step's task (the agent) already: a kill that finds
# no such process is that, not a failure; no_hdp_process_on below checks that it is gone.
kill -KILL "$victim" 2>/dev/null || cluster_log "n3's agent (pid $victim) was already gone: Slurm ended it with the node"
# The lease runs out after LEASE_MS; the leader then publishes the next generation. The margin
# allows for a settle window and for a loaded two-core host.
bound=$((LEASE_MS / 1000 + 6))
wait_until "$bound" gen_is $((gen_full + 1)) n1 n2 ||
  cluster_fail "no generation without n3 within $bound s of the kill (gen '$(current_gen)': $(gen_members "$(current_gen)"))"
gen_two=$(current_gen)
cluster_log "generation $gen_two has n1 n2"
for node in n1 n2; do
  agent_pid "$node" >/dev/null || cluster_fail "the agent on $node stopped when n3's agent died"
done
wait_until 10 no_hdp_process_on n3 || cluster_fail "processes of n3's dead agent are left: $(hdp_pids_on n3)"
trains_on_two() { [[ $(state_field world_size) == 2 ]] && step_at_least "$1"; }
step_then=$(state_field step)
wait_until 30 trains_on_two $((step_then + 3)) ||
  cluster_fail "no training on the two survivors (world size '$(state_field world_size)', step '$(state_field step)')"

# ---- 3. drain at the time limit's warning: final checkpoint, requeue, resume, completion -------------
cluster_log "step $(state_field step) on 2 ranks; scancel --batch --signal=USR1: drain and requeue"
scancel --batch --signal=USR1 "$job"
stopped_step() { [[ $(state_field status) == stopped ]]; }
wait_until $((HDP_DRAIN_TIMEOUT + 20)) stopped_step ||
  cluster_fail "the ranks did not stop (status '$(state_field status)')"
stop_step=$(state_field step)
((stop_step < STEPS)) || cluster_fail "the job finished before the drain; raise STEPS"
[[ $(state_field last_ckpt_step) == "$stop_step" ]] ||
  cluster_fail "no final checkpoint at the stop (step $stop_step, last checkpoint '$(state_field last_ckpt_step)')"
cluster_log "the ranks stopped at step $stop_step with a checkpoint; waiting for the requeue"
wait_until 30 bash -c '[[ $(scontrol -o show job "$1" | grep -o "Restarts=[0-9]*") == Restarts=1 ]]' _ "$job" ||
  cluster_fail "job $job was not requeued within 30 s after SIGUSR1"
cluster_wait_job_state "$job" 30 PENDING || cluster_fail "requeued job $job is not pending"
cluster_start_requeued_job "$job"
cluster_log "requeued ($(grep -o 'requeueing job.*' "$log_file" | head -n 1)); waiting for the second run to complete"
completed() { [[ $(redis GET "hdp:$job:outcome") == completed ]]; }
# Bounded by progress, not by this machine's speed: the second run fails the test when its step
# stands still for 30 s (it has to restore and start within that too), or after 200 s in all.
wait_while_progressing() {
  local total=$1 stall=$2 deadline=$((SECONDS + $1)) last=-1 moved=$SECONDS step
  until completed; do
    step=$(state_field step)
    if [[ $step != "$last" ]]; then last=$step moved=$SECONDS; fi
    ((SECONDS < deadline && SECONDS - moved < stall)) || return 1
    sleep 0.5
  done
}
wait_while_progressing 200 30 ||
  cluster_fail "the requeued job did not complete (status '$(state_field status)', step '$(state_field step)')"
cluster_wait_job_state "$job" 60 COMPLETED FAILED CANCELLED TIMEOUT ||
  cluster_fail "job $job did not end within 60 s of completing"
[[ $(cluster_job_field "$job" JobState) == COMPLETED && $(cluster_job_field "$job" ExitCode) == 0:0 ]] ||
  cluster_fail "job $job ended $(cluster_job_field "$job" JobState) with exit code $(cluster_job_field "$job" ExitCode), expected COMPLETED 0:0"
[[ $(cluster_job_field "$job" Restarts) == 1 ]] ||
  cluster_fail "job $job was requeued $(cluster_job_field "$job" Restarts) times, expected once"
[[ $(state_field step) == "$STEPS" ]] || cluster_fail "the job completed at step '$(state_field step)', expected $STEPS"
# The requeued run resumed from the stop's checkpoint: a restore event at exactly that step.
# Read whole before matching: under pipefail, `redis-cli ... | grep -q` fails when grep exits at
# its match before redis-cli has written the rest (SIGPIPE), which it did once the stream was long.
events=$(redis XRANGE "hdp:$job:events" - +)
grep -qx "step-$(printf '%08d' "$stop_step")" <<<"$events" ||
  cluster_fail "no restore of the checkpoint of step $stop_step in the events"
wait_until 10 no_hdp_process_on "${CLUSTER_NODES[@]}" ||
  cluster_fail "hdp processes are left after the job ended: $(hdp_pids_on n1) $(hdp_pids_on n2) $(hdp_pids_on n3)"

cluster_log "PASS"
