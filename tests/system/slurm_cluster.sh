#!/usr/bin/env bash
# A throwaway Slurm cluster on one host, for the system tests: munge, slurmctld and three slurmd
# (nodes n1, n2, n3), all on loopback, every file under one temp dir, torn down on exit.
#
# Two ways to use it:
#   source tests/system/slurm_cluster.sh     then cluster_require, cluster_isolate, cluster_start
#   bash tests/system/slurm_cluster.sh [COMMAND ...]
#       starts the cluster, runs COMMAND (default: sinfo) with SLURM_CONF set, tears it down
#       (COMMAND may be `bash`, for an interactive look around)
#
# Environment: HDP_SYSTEM_KEEP=1 keeps the temp dir (configs, logs) after the run;
# HDP_CLUSTER_ISOLATED=0 runs in the host's namespaces even where private ones are allowed.
#
# Needs root (slurmd runs jobs as their owner and SlurmUser=root) and Debian's slurm-wlm and munge.
# When the kernel allows it, the whole run moves into private network, UTS, mount and PID namespaces
# (cluster_isolate): the daemons, which bind the wildcard address, then see only a loopback device,
# and every process the run starts dies with it. Each slurmd also gets its own hostname (n1, n2, n3)
# so that jobs see the host they would see on a real cluster; `slurmd -N` alone is enough for
# Debian's build, which accepts several slurmd per host on distinct ports.

# Exit status that CTest reads as "skipped" (SKIP_RETURN_CODE in CMakeLists.txt).
readonly CLUSTER_SKIP=77
readonly CLUSTER_NODES=(n1 n2 n3)

CLUSTER_DIR=""
CLUSTER_KEEP=${HDP_SYSTEM_KEEP:-0}   # 1: keep the temp dir (configs and logs) after the run
CLUSTER_FAILED=0
declare -a CLUSTER_DAEMON_PIDS=()   # munged, slurmctld, slurmd...: stopped last, in reverse order
declare -a CLUSTER_EXTRA_PIDS=()    # anything else a test starts (redis-server): stopped first

cluster_log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# cluster_fail MESSAGE: report a failed check and exit non-zero (the EXIT trap tears down).
cluster_fail() {
  CLUSTER_FAILED=1
  printf 'FAIL: %s\n' "$*" >&2
  exit 1
}

# cluster_require: every program the cluster needs, and root. Prints the reason and exits with the
# skip status where the packages are missing, so that CTest reports SKIP rather than a failure.
cluster_require() {
  local missing=() tool
  for tool in munged munge unmunge slurmctld slurmd sbatch srun scancel squeue sinfo scontrol; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    printf 'SKIP: slurm-wlm and munge are not installed (missing: %s); scripts/install-deps.sh installs them\n' \
      "${missing[*]}"
    exit "$CLUSTER_SKIP"
  fi
  if ((EUID != 0)); then
    printf 'SKIP: the local Slurm cluster needs root (slurmd starts jobs as their owner)\n'
    exit "$CLUSTER_SKIP"
  fi
}

# cluster_isolate SCRIPT ARGS...: re-run SCRIPT inside private namespaces when the kernel allows it.
# Returns (to run in the host's namespaces) where unshare is refused, e.g. without CAP_SYS_ADMIN.
# --kill-child: when unshare dies, even by SIGKILL (a CTest timeout), the script gets SIGTERM and
# tears down through its trap; once the script, the namespace's first process, exits, the kernel
# kills whatever is left in the namespace.
cluster_isolate() {
  [[ -z ${HDP_CLUSTER_ISOLATED:-} ]] || return 0
  if command -v unshare >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 &&
    unshare --net --uts --pid --fork --mount-proc true 2>/dev/null; then
    export HDP_CLUSTER_ISOLATED=1
    exec unshare --net --uts --pid --fork --mount-proc --kill-child=SIGTERM -- bash "$@"
  fi
  cluster_log "private namespaces unavailable: running in the host's namespaces"
  export HDP_CLUSTER_ISOLATED=0
}

# wait_until SECONDS COMMAND...: poll COMMAND every 0.2 s; false when it never succeeded in time.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# cluster_pick_port: sets CLUSTER_PORT to a TCP port nobody listens on now (read from
# /proc/net/tcp*, no binding) and that this run has not handed out yet. A port taken between this
# check and the daemon's bind makes that daemon fail to start, which cluster_start reports with its
# log. (A variable, not output: a command substitution would lose the list of ports handed out.)
cluster_pick_port() {
  local port used="" hex
  # Listening sockets (state 0A); the local port is the hex after the colon of field 2.
  for hex in $(awk 'FNR > 1 && $4 == "0A" { sub(/.*:/, "", $2); print $2 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    used+="$((16#$hex))"$'\n'
  done
  for _ in $(seq 200); do
    port=$((20000 + RANDOM % 12000))
    if ! grep -qx "$port" <<<"$used" && [[ " ${CLUSTER_TAKEN_PORTS:-} " != *" $port "* ]]; then
      CLUSTER_TAKEN_PORTS="${CLUSTER_TAKEN_PORTS:-} $port"
      CLUSTER_PORT=$port
      return 0
    fi
  done
  cluster_fail "no free TCP port found"
}

# cluster_descendants PID: the PIDs of every process below PID (children, grandchildren, ...).
cluster_descendants() {
  local -A children=()
  local stat pid ppid rest
  for stat in /proc/[0-9]*/stat; do
    read -r pid _ rest <"$stat" 2>/dev/null || continue
    # The command name is in parentheses and may hold spaces: the parent PID follows the last ')'.
    rest=${rest##*) }
    read -r _ ppid _ <<<"$rest"
    children[$ppid]+=" $pid"
  done 2>/dev/null
  local queue=("$1") next
  while ((${#queue[@]})); do
    next=${queue[0]}
    queue=("${queue[@]:1}")
    for pid in ${children[$next]:-}; do
      echo "$pid"
      queue+=("$pid")
    done
  done
}

# cluster_pids_with_marker: processes whose environment holds this cluster's marker: the daemons,
# the slurmstepd they start (which double-fork away from slurmd) and the jobs' tasks. Runs in a
# subshell that drops the marker first, so that the grep processes of the scan do not match.
cluster_pids_with_marker() (
  marker="HDP_TEST_CLUSTER=$CLUSTER_DIR"
  unset HDP_TEST_CLUSTER
  for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}
    pid=${pid%/environ}
    [[ $pid != "$$" && $pid != "$BASHPID" ]] || continue
    if grep -qzxF "$marker" "$env" 2>/dev/null; then echo "$pid"; fi
  done
)

# cluster_kill_pids SIGNAL PID...: signal each PID that still exists; never by name.
cluster_kill_pids() {
  local sig=$1 pid
  shift
  for pid in "$@"; do
    kill "-$sig" "$pid" 2>/dev/null || true
  done
}

# cluster_alive PID...: true while at least one of them has not exited (a zombie counts as exited).
cluster_alive() {
  local pid
  for pid in "$@"; do
    [[ -e /proc/$pid/stat ]] || continue
    [[ $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) == Z ]] || return 0
  done
  return 1
}

cluster_all_gone() { ! cluster_alive "$@"; }

# cluster_stop_pids PID...: SIGTERM, up to 5 s to exit, then SIGKILL; reaps those that are children.
cluster_stop_pids() {
  (($#)) || return 0
  cluster_kill_pids TERM "$@"
  if ! wait_until 5 cluster_all_gone "$@"; then
    cluster_log "still running after SIGTERM, sending SIGKILL: $*"
    cluster_kill_pids KILL "$@"
  fi
  local pid
  for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}

# cluster_dump_logs: the end of every log, so that a failure in CI can be read without the temp dir.
cluster_dump_logs() {
  local f
  for f in "$CLUSTER_DIR"/log/* "$CLUSTER_DIR"/jobs/*; do
    [[ -f $f ]] || continue
    printf -- '----- %s (last 40 lines)\n' "${f#"$CLUSTER_DIR"/}" >&2
    tail -n 40 "$f" >&2 || true
  done
}

# cluster_stop: cancel every job of this cluster, stop what the run started, by PID, and remove the
# temp dir. Safe to call twice, and from the EXIT trap after a failure part way through the start.
cluster_stop() {
  local status=${1:-0}
  [[ -n $CLUSTER_DIR && -d $CLUSTER_DIR ]] || return 0
  trap - EXIT INT TERM
  if ((status != 0 || CLUSTER_FAILED)); then cluster_dump_logs; fi
  if [[ -f $CLUSTER_DIR/slurm.conf ]] && cluster_alive "${CLUSTER_DAEMON_PIDS[@]:-0}"; then
    # Jobs first, while slurmctld and slurmd can still end them cleanly.
    timeout 10 scancel --quiet --user="$(id -un)" 2>/dev/null || true
    wait_until 10 bash -c '[[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]]' || true
  fi
  cluster_stop_pids "${CLUSTER_EXTRA_PIDS[@]}"
  local i reversed=()
  for ((i = ${#CLUSTER_DAEMON_PIDS[@]} - 1; i >= 0; i--)); do reversed+=("${CLUSTER_DAEMON_PIDS[i]}"); done
  cluster_stop_pids "${reversed[@]}"
  # What is left was started by this cluster (its environment carries the marker): steps that
  # outlived their slurmd, tasks that ignored SIGTERM.
  local left=()
  mapfile -t left < <(cluster_pids_with_marker)
  if ((${#left[@]})); then
    cluster_log "killing ${#left[@]} leftover process(es): ${left[*]}"
    cluster_kill_pids KILL "${left[@]}"
  fi
  if ((CLUSTER_KEEP)); then
    cluster_log "kept $CLUSTER_DIR"
  else
    rm -rf -- "$CLUSTER_DIR"
  fi
  CLUSTER_DIR=""
}

cluster_on_exit() {
  local status=$?
  cluster_stop "$status"
  exit "$status"
}

cluster_write_conf() {
  local ctl_port=$1 ctl_host
  ctl_host=$(hostname -s)
  cat >"$CLUSTER_DIR/slurm.conf" <<EOF
# A private test cluster: loopback only, no accounting, no cgroups.
ClusterName=hdptest
SlurmctldHost=$ctl_host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CLUSTER_DIR/munge/munge.socket
StateSaveLocation=$CLUSTER_DIR/ctld
SlurmctldPidFile=$CLUSTER_DIR/ctld/slurmctld.pid
SlurmctldLogFile=$CLUSTER_DIR/log/slurmctld.log
SlurmdSpoolDir=$CLUSTER_DIR/spool/%n
SlurmdPidFile=$CLUSTER_DIR/spool/%n/slurmd.pid
SlurmdLogFile=$CLUSTER_DIR/log/slurmd-%n.log
PlugStackConfig=$CLUSTER_DIR/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
KillWait=5
MinJobAge=300
EOF
  local node
  for node in "${CLUSTER_NODES[@]}"; do
    cluster_pick_port
    printf 'NodeName=%s NodeAddr=127.0.0.1 Port=%s CPUs=1 State=UNKNOWN\n' "$node" "$CLUSTER_PORT" \
      >>"$CLUSTER_DIR/slurm.conf"
  done
  printf 'PartitionName=test Nodes=n[1-%d] Default=YES MaxTime=INFINITE State=UP\n' "${#CLUSTER_NODES[@]}" \
    >>"$CLUSTER_DIR/slurm.conf"
  : >"$CLUSTER_DIR/plugstack.conf"   # no site SPANK plugins
}

cluster_start_munge() {
  local dir=$CLUSTER_DIR/munge
  mkdir -p "$dir"
  # munged refuses a socket directory that others cannot traverse and a key others can read.
  chmod 755 "$CLUSTER_DIR" "$dir"
  if command -v mungekey >/dev/null 2>&1; then
    mungekey --create --keyfile="$dir/munge.key" --bits=1024 2>/dev/null
  else
    dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
  fi
  chmod 600 "$dir/munge.key"
  # --origin: the origin is an address, so munged does not look our private hostname up in DNS.
  munged --foreground --origin=127.0.0.1 --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$CLUSTER_DIR/log/munged.log" \
    --seed-file="$dir/munged.seed" >"$CLUSTER_DIR/log/munged.out" 2>&1 &
  CLUSTER_DAEMON_PIDS+=($!)
  wait_until 10 bash -c 'munge -S "$1" -n </dev/null 2>/dev/null | unmunge -S "$1" >/dev/null 2>&1' _ "$dir/munge.socket" ||
    cluster_fail "munged did not answer on its socket within 10 s"
}

cluster_node_state_is() {
  local want=$1 states
  states=$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u) || return 1
  [[ $(grep -c " $want\$" <<<"$states") -eq ${#CLUSTER_NODES[@]} ]]
}

# cluster_start: sets CLUSTER_DIR and exports SLURM_CONF; every node is idle when it returns.
cluster_start() {
  CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/hdp-slurm.XXXXXX")
  trap cluster_on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  mkdir -p "$CLUSTER_DIR"/{ctld,log,jobs,spool}
  # Children inherit the marker; cluster_stop finds leftovers by it.
  export HDP_TEST_CLUSTER=$CLUSTER_DIR
  export SLURM_CONF=$CLUSTER_DIR/slurm.conf
  if [[ ${HDP_CLUSTER_ISOLATED:-0} == 1 ]]; then
    ip link set lo up
    # Slurm fails to resolve even "127.0.0.1" (getaddrinfo: EAI_NONAME) where loopback is the only
    # address; one more address on lo, from a range reserved for documentation (RFC 5737), cures it.
    ip addr add 192.0.2.1/32 dev lo
    hostname hdp-ctld
    # The node names resolve to loopback, as a real cluster's names resolve to its nodes (programs in
    # the jobs may look their own hostname up). The mount namespace keeps this copy private.
    { cat /etc/hosts; echo "127.0.0.1 hdp-ctld ${CLUSTER_NODES[*]}"; } >"$CLUSTER_DIR/hosts"
    mount --bind "$CLUSTER_DIR/hosts" /etc/hosts
  fi
  cluster_start_munge
  cluster_pick_port
  cluster_write_conf "$CLUSTER_PORT"

  slurmctld -D -i -f "$SLURM_CONF" >"$CLUSTER_DIR/log/slurmctld.out" 2>&1 &
  CLUSTER_DAEMON_PIDS+=($!)
  wait_until 15 bash -c 'timeout 5 scontrol ping 2>/dev/null | grep -q "is UP"' ||
    cluster_fail "slurmctld did not answer within 15 s"

  local node use_uts=0
  [[ ${HDP_CLUSTER_ISOLATED:-0} == 1 ]] && use_uts=1
  for node in "${CLUSTER_NODES[@]}"; do
    mkdir -p "$CLUSTER_DIR/spool/$node"
    if ((use_uts)); then
      # unshare without --fork execs in place: the PID recorded is slurmd's own.
      unshare --uts -- bash -c 'hostname "$1" && exec slurmd -D -N "$1" -f "$2"' _ "$node" "$SLURM_CONF" \
        >"$CLUSTER_DIR/log/slurmd-$node.out" 2>&1 &
    else
      slurmd -D -N "$node" -f "$SLURM_CONF" >"$CLUSTER_DIR/log/slurmd-$node.out" 2>&1 &
    fi
    CLUSTER_DAEMON_PIDS+=($!)
  done
  wait_until 30 cluster_node_state_is idle ||
    cluster_fail "the nodes did not all become idle within 30 s: $(sinfo -h -N -o '%N %t' 2>&1 | tr '\n' ' ')"
  cluster_log "up in $CLUSTER_DIR: $(sinfo -h -o '%P %D %t %N' | tr '\n' ' ')"
}

# cluster_job_field JOBID FIELD: one field of `scontrol show job` (e.g. JobState, ExitCode, Restarts).
cluster_job_field() {
  timeout 5 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# cluster_wait_job_state JOBID SECONDS STATE...: true once the job is in one of the states.
cluster_wait_job_state() {
  local job=$1 secs=$2
  shift 2
  local want=" $* "
  wait_until "$secs" bash -c '[[ "$2" == *" $(scontrol -o show job "$1" 2>/dev/null | tr " " "\n" | sed -n "s/^JobState=//p") "* ]]' \
    _ "$job" "$want"
}

# cluster_start_requeued_job JOBID: starts a requeued (pending) job now, where Slurm would make it
# eligible only 120 s after its requeue. It first waits out the second of the requeue: slurmd
# revokes the old run's credential with a time stamp in whole seconds, so a run launched in that
# same second is refused ("Job credential revoked") and the job fails.
cluster_start_requeued_job() {
  sleep 2
  scontrol update JobId="$1" StartTime=now
}

# Run as a program: start, run the command (or show the nodes), stop.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -euo pipefail
  cluster_require
  cluster_isolate "$0" "$@"
  cluster_start
  if (($#)); then "$@"; else sinfo -N -l; fi
fi
