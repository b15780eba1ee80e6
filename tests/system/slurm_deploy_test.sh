#!/usr/bin/env bash
# System test of deploy/slurm/hdp.sbatch on a local three-node Slurm cluster (slurm_cluster.sh).
#
#   slurm_deploy_test.sh SOURCE_DIR
#
# 1. A three-node batch job's steps run on n1, n2 and n3, once each.
# 2. hdp.sbatch with a stand-in agent (fake_agent.sh): every node gets its own node id, the job id,
#    the Redis URL and the worker command; `scancel --batch --signal=USR1` (what --signal=B:USR1@120
#    does before the time limit) reaches the batch script's trap, is forwarded to each node's agent
#    exactly once, and the drained job is requeued; in the next run (SLURM_RESTART_COUNT=1) one agent
#    exits 3 while another exits 4: the job ends FAILED with exit code 3 and is not requeued.
# 3. `scancel --signal=USR1` to the steps only, after one agent failed: the others drain once each,
#    the job ends with exit code 4 and is not requeued.
# 4. Two agents complete after the third failed: the job completed (exit 0), no requeue.
# 5. Without HDP_REDIS_URL: exit code 2, requeue flag cleared, no agent started.
# 6. A node the running job refused (agent exit 5) while the others complete: the job completed
#    (exit 0), no requeue. Every node refused (a job running elsewhere refused them all): exit code
#    5, requeue flag cleared, not requeued.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/system/slurm_cluster.sh
source "$here/slurm_cluster.sh"

(($# == 1)) || { echo "usage: $0 SOURCE_DIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
sbatch_script=$src/deploy/slurm/hdp.sbatch
[[ -r $sbatch_script ]] || { echo "FAIL: $sbatch_script is missing" >&2; exit 1; }

cluster_require
cluster_isolate "$0" "$@"
cluster_start

jobs_dir=$CLUSTER_DIR/jobs
reports=$CLUSTER_DIR/agents
mkdir -p "$reports"

# expect_eq WHAT ACTUAL EXPECTED
expect_eq() {
  [[ $2 == "$3" ]] || cluster_fail "$1: got '$2', expected '$3'"
}

# expect_in_file FILE PATTERN WHAT: an extended regex that must match a line of FILE.
expect_in_file() {
  grep -Eq -- "$2" "$1" || cluster_fail "$3 (no line matching '$2' in ${1#"$CLUSTER_DIR"/})"
}

# report_value FILE KEY: the value of KEY=... in a fake agent's report.
report_value() { sed -n "s/^$2=//p" "$1" | head -n 1; }

wait_reports() { # JOB RESTART SECONDS: all three nodes' agents of that run have written a report
  local job=$1 restart=$2 secs=$3 node
  for node in "${CLUSTER_NODES[@]}"; do
    wait_until "$secs" test -e "$reports/$job.$restart.$node" ||
      cluster_fail "no agent report from $node in run $restart of job $job within ${secs} s"
  done
}

wait_final() { # JOB SECONDS: the job has ended for good
  cluster_wait_job_state "$1" "$2" COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL ||
    cluster_fail "job $1 did not end within $2 s (state $(cluster_job_field "$1" JobState))"
}

# ---- 1. three nodes ---------------------------------------------------------------------------
cluster_log "test 1: a three-node job runs a step task on each node"
job=$(sbatch --parsable --nodes=3 --output="$jobs_dir/nodes-%j.out" --wrap \
  'srun --ntasks-per-node=1 bash -c "echo step-task node=\$SLURMD_NODENAME procid=\$SLURM_PROCID"')
wait_final "$job" 20
expect_eq "job $job state" "$(cluster_job_field "$job" JobState)" COMPLETED
ran=$(sed -n 's/^step-task node=\([^ ]*\) .*/\1/p' "$jobs_dir/nodes-$job.out" | sort | tr '\n' ' ')
expect_eq "nodes that ran a step task" "$ran" "n1 n2 n3 "

# ---- 2. hdp.sbatch: drain on USR1, requeue, then exit 3 ends the job -------------------------
cluster_log "test 2: hdp.sbatch forwards SIGUSR1, requeues, and stops requeueing on exit 3"
export FAKE_AGENT_DIR=$reports
# Run 0: every agent waits for the drain. Run 1: n2 fails permanently (3) while n1 drains (4),
# the larger code, which must not win; n3 completes.
export FAKE_AGENT_PLAN="0:*:wait 1:n2:exit3 1:n1:exit4 1:*:exit0"
export HDP_BIN=$here/fake_agent.sh
export HDP_REDIS_URL=redis://127.0.0.1:6379/0
# Set at submission, it would reach every node: the script must replace it with each node's name.
export HDP_NODE_ID=one-id-for-all
job=$(sbatch --parsable --nodes=3 --output="$jobs_dir/hdp-%j.out" "$sbatch_script" -- worker --flag 'two words')
log_file=$jobs_dir/hdp-$job.out
wait_reports "$job" 0 20
for node in "${CLUSTER_NODES[@]}"; do
  r=$reports/$job.0.$node
  expect_eq "HDP_NODE_ID on $node" "$(report_value "$r" HDP_NODE_ID)" "$node"
  expect_eq "HDP_JOB_ID on $node" "$(report_value "$r" HDP_JOB_ID)" "$job"
  expect_eq "HDP_REDIS_URL on $node" "$(report_value "$r" HDP_REDIS_URL)" "$HDP_REDIS_URL"
  expect_eq "HDP_NNODES on $node" "$(report_value "$r" HDP_NNODES)" "1:3"
  expect_eq "agent arguments on $node" "$(report_value "$r" args)" "agent --drain-timeout 90 --metrics-port 9464 -- worker --flag two words"
done
expect_in_file "$log_file" '^hdp\.sbatch: job [0-9]+ \(Slurm job [0-9]+\), restart 0,' "the batch script logs restart 0"
expect_in_file "$log_file" 'ignoring HDP_NODE_ID=one-id-for-all' "the batch script warns about a job-wide HDP_NODE_ID"
unset HDP_NODE_ID

scancel --batch --signal=USR1 "$job"
# The drained run is requeued; the test starts it at once (cluster_start_requeued_job) rather than
# wait the 120 s Slurm would. The next run's agents report with restart count 1.
wait_until 20 bash -c '[[ $(scontrol -o show job "$1" | grep -o "Restarts=[0-9]*") == Restarts=1 ]]' _ "$job" ||
  cluster_fail "job $job was not requeued within 20 s after SIGUSR1"
cluster_wait_job_state "$job" 20 PENDING || cluster_fail "requeued job $job is not pending"
cluster_start_requeued_job "$job"
wait_reports "$job" 1 20
for node in "${CLUSTER_NODES[@]}"; do
  r=$reports/$job.0.$node
  expect_eq "drain signals that reached the agent on $node" "$(report_value "$r" signals)" 1
  expect_in_file "$r" '^signal USR1$' "the agent on $node got SIGUSR1"
done
expect_in_file "$log_file" '^hdp\.sbatch: SIGUSR1: draining the agents' "the batch script's trap caught SIGUSR1"
expect_in_file "$log_file" '^hdp\.sbatch: requeueing job [0-9]+: drained on SIGUSR1' "the drained job is requeued"
expect_in_file "$log_file" '^hdp\.sbatch: job [0-9]+ \(Slurm job [0-9]+\), restart 1,' "the requeued run logs restart 1"

wait_final "$job" 20
expect_eq "job $job state after an agent exited 3" "$(cluster_job_field "$job" JobState)" FAILED
expect_eq "job $job exit code" "$(cluster_job_field "$job" ExitCode)" "3:0"
expect_eq "job $job requeue flag" "$(cluster_job_field "$job" Requeue)" 0
expect_eq "job $job restarts" "$(cluster_job_field "$job" Restarts)" 1
expect_in_file "$log_file" 'failed permanently: not requeued' "the batch script reports the permanent failure"
[[ ! -e $reports/$job.2.n1 ]] || cluster_fail "job $job ran a third time after an agent exited 3"

# ---- 3. a drain signal to the steps only ends the job without a requeue ----------------------
cluster_log "test 3: scancel --signal=USR1 to the steps drains each agent once, without a requeue"
# n3's agent fails at once (a lost node, as far as the job goes): the other two carry on and drain.
export FAKE_AGENT_PLAN="*:n3:exit1 *:*:wait"
job=$(sbatch --parsable --nodes=3 --output="$jobs_dir/hdp-%j.out" "$sbatch_script")
log_file=$jobs_dir/hdp-$job.out
wait_reports "$job" 0 20
wait_until 10 grep -q 'node n3: agent exited with 1' "$log_file" || cluster_fail "n3's agent did not exit 1"
scancel --signal=USR1 "$job"
wait_final "$job" 20
for node in n1 n2; do
  r=$reports/$job.0.$node
  expect_eq "drain signals that reached the agent on $node" "$(report_value "$r" signals)" 1
  expect_eq "agent arguments on $node" "$(report_value "$r" args)" "agent --drain-timeout 90 --metrics-port 9464"
done
expect_eq "job $job state after a drain" "$(cluster_job_field "$job" JobState)" FAILED
expect_eq "job $job exit code after a drain" "$(cluster_job_field "$job" ExitCode)" "4:0"
expect_eq "job $job restarts after a drain" "$(cluster_job_field "$job" Restarts)" 0
expect_in_file "$log_file" 'drained without SIGUSR1 to this script: not requeued' "the batch script does not requeue"
if grep -q 'SIGUSR1: draining' "$log_file"; then
  cluster_fail "the batch script got SIGUSR1 that was meant for the steps only"
fi

# ---- 4. completion outweighs an earlier agent error --------------------------------------------
cluster_log "test 4: the job completes on two nodes after the third one's agent failed"
export FAKE_AGENT_PLAN="*:n2:exit1 *:*:exit0"
job=$(sbatch --parsable --nodes=3 --output="$jobs_dir/hdp-%j.out" "$sbatch_script")
log_file=$jobs_dir/hdp-$job.out
wait_final "$job" 20
expect_eq "job $job state" "$(cluster_job_field "$job" JobState)" COMPLETED
expect_eq "job $job exit code" "$(cluster_job_field "$job" ExitCode)" "0:0"
expect_eq "job $job restarts" "$(cluster_job_field "$job" Restarts)" 0
expect_in_file "$log_file" "^hdp\.sbatch: job $job completed" "the batch script reports completion"

# ---- 5. no Redis URL: a usage error, never requeued ------------------------------------------
cluster_log "test 5: without HDP_REDIS_URL the job fails with exit code 2 and is not requeueable"
job=$(env -u HDP_REDIS_URL sbatch --parsable --nodes=3 --output="$jobs_dir/hdp-%j.out" "$sbatch_script")
wait_final "$job" 20
expect_eq "job $job exit code" "$(cluster_job_field "$job" ExitCode)" "2:0"
expect_eq "job $job requeue flag" "$(cluster_job_field "$job" Requeue)" 0
expect_in_file "$jobs_dir/hdp-$job.out" 'HDP_REDIS_URL is not set' "the batch script names the missing setting"
[[ ! -e $reports/$job.0.n1 ]] || cluster_fail "an agent started without a Redis URL"

# ---- 6. a refused node decides nothing ----------------------------------------------------------
cluster_log "test 6: the job completes on two nodes after the running job refused the third"
export FAKE_AGENT_PLAN="*:n3:exit5 *:*:exit0"
job=$(sbatch --parsable --nodes=3 --output="$jobs_dir/hdp-%j.out" "$sbatch_script")
log_file=$jobs_dir/hdp-$job.out
wait_final "$job" 20
expect_in_file "$log_file" 'node n3: agent exited with 5' "n3's agent exits 5"
expect_eq "job $job state" "$(cluster_job_field "$job" JobState)" COMPLETED
expect_eq "job $job exit code" "$(cluster_job_field "$job" ExitCode)" "0:0"
expect_eq "job $job restarts" "$(cluster_job_field "$job" Restarts)" 0
expect_in_file "$log_file" "^hdp\.sbatch: job $job completed" "the batch script reports completion"

export FAKE_AGENT_PLAN="*:*:exit5"
job=$(sbatch --parsable --nodes=3 --output="$jobs_dir/hdp-%j.out" "$sbatch_script")
log_file=$jobs_dir/hdp-$job.out
wait_final "$job" 20
expect_eq "job $job exit code, every node refused" "$(cluster_job_field "$job" ExitCode)" "5:0"
expect_eq "job $job requeue flag" "$(cluster_job_field "$job" Requeue)" 0
expect_eq "job $job restarts" "$(cluster_job_field "$job" Restarts)" 0
expect_in_file "$log_file" 'the running job refused every node of this allocation: not requeued' "the batch script says why"

cluster_log "PASS"
