#!/usr/bin/env bash
# Checks deploy/systemd/hdp-agent@.service and its sample environment file.
#
#   systemd_unit_test.sh SOURCE_DIR HDP_BINARY
#
# 1. The unit says what the agent relies on (notify + watchdog, restart policy and the exit codes
#    that must not restart, control-group kill, a stop timeout longer than the drain timeout of the
#    sample settings, the per-instance environment file) and nothing that hides the GPUs.
# 2. Every variable the agent or the unit reads is documented in hdp-agent.env.example.
# 3. `systemd-analyze verify` accepts a copy of the unit whose ExecStart is the built binary, and
#    rejects a copy whose binary is missing (so that a silent verifier cannot pass the check).
#    Where systemd-analyze cannot run, this part reports SKIP (exit 77) after parts 1 and 2 passed.
set -euo pipefail

(($# == 2)) || { echo "usage: $0 SOURCE_DIR HDP_BINARY" >&2; exit 2; }
src=$1
# ExecStart needs an absolute path.
hdp_bin=$(realpath -m -- "$2")
unit=$src/deploy/systemd/hdp-agent@.service
env_example=$src/deploy/systemd/hdp-agent.env.example
for f in "$unit" "$env_example"; do
  [[ -r $f ]] || { echo "FAIL: $f is missing" >&2; exit 1; }
done

failures=0
fail() {
  printf 'FAIL: %s\n' "$*" >&2
  failures=$((failures + 1))
}

# directive NAME: the last value the unit gives NAME (systemd lets a later line win).
directive() { sed -n "s/^$1=//p" "$unit" | tail -n 1; }

expect_directive() { # NAME VALUE
  local got
  got=$(directive "$1")
  [[ $got == "$2" ]] || fail "$1 is '$got', expected '$2'"
}

# seconds VALUE: a systemd time span in whole seconds (plain number, s, min); empty when not parsed.
seconds() {
  case $1 in
    *[!0-9a-z]* | "") ;;
    *min) echo $((${1%min} * 60)) ;;
    *s) echo "${1%s}" ;;
    *[0-9]) echo "$1" ;;
  esac
}

# ---- 1. directives -------------------------------------------------------------------------------
expect_directive Type notify
expect_directive NotifyAccess main
expect_directive Restart on-failure
expect_directive KillMode control-group
expect_directive EnvironmentFile /etc/hdp/%i.env
[[ $(directive ExecStart) == "/usr/local/bin/hdp agent"* ]] ||
  fail "ExecStart is '$(directive ExecStart)', expected '/usr/local/bin/hdp agent ...'"
watchdog=$(seconds "$(directive WatchdogSec)")
[[ -n $watchdog && $watchdog -gt 0 ]] || fail "WatchdogSec is '$(directive WatchdogSec)', expected a positive time span"
prevent=" $(directive RestartPreventExitStatus) "
[[ $prevent == *" 2 "* && $prevent == *" 3 "* && $prevent == *" 5 "* ]] ||
  fail "RestartPreventExitStatus is '$(directive RestartPreventExitStatus)', expected it to hold 2 (usage), 3 (failed) and 5 (refused)"
for hides_gpus in PrivateDevices DevicePolicy DeviceAllow ProtectClock ProtectKernelLogs MemoryDenyWriteExecute; do
  value=$(directive "$hides_gpus")
  [[ -z $value || $value == no || $value == false || $value == auto ]] ||
    fail "$hides_gpus=$value would cut the workers off the GPUs (or CUDA's JIT)"
done

stop=$(seconds "$(directive TimeoutStopSec)")
drain=$(sed -n 's/^HDP_AGENT_ARGS=.*--drain-timeout[ =]\([0-9]*\).*/\1/p' "$env_example")
if [[ -z $stop || -z $drain ]]; then
  fail "cannot compare TimeoutStopSec ('$(directive TimeoutStopSec)') with the sample --drain-timeout ('$drain')"
elif ((stop <= drain)); then
  fail "TimeoutStopSec ($stop s) must be longer than the sample --drain-timeout ($drain s)"
fi

# ---- 2. documented variables ---------------------------------------------------------------------
# The agent's environment fallbacks, and whatever $VARIABLE the unit's ExecStart expands.
vars=(HDP_JOB_ID HDP_REDIS_URL HDP_REDIS_PASSWORD_FILE HDP_NODE_ID HDP_NPROC_PER_NODE HDP_NNODES)
while read -r v; do vars+=("$v"); done < <(directive ExecStart | grep -o '\$[A-Z_][A-Z0-9_]*' | tr -d '$')
for v in "${vars[@]}"; do
  grep -Eq "^#?$v=" "$env_example" || fail "$v is not documented in ${env_example#"$src"/}"
done

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "unit directives and sample settings: ok"

# ---- 3. systemd-analyze verify ---------------------------------------------------------------------
skip() {
  printf 'SKIP: systemd-analyze verify cannot run here (%s); the other checks passed\n' "$*"
  exit 77
}
command -v systemd-analyze >/dev/null 2>&1 || skip "systemd-analyze is not installed"
[[ -x $hdp_bin ]] || { echo "FAIL: $hdp_bin is not an executable (build the hdp target)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/hdp-unit.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

# A unit that is surely valid: if even this does not verify, the tool, not our unit, is the problem.
mkdir -p "$work/control" "$work/good" "$work/bad"
printf '[Unit]\nDescription=control\n[Service]\nType=oneshot\nExecStart=/bin/true\n' >"$work/control/control.service"
if ! out=$(systemd-analyze verify "$work/control/control.service" 2>&1) || [[ -n $out ]]; then
  skip "a minimal valid unit fails: ${out//$'\n'/ }"
fi

# Instances are verified from the template in the same directory, the way systemd loads them.
sed "s|^ExecStart=/usr/local/bin/hdp |ExecStart=$hdp_bin |" "$unit" >"$work/good/hdp-agent@.service"
sed "s|^ExecStart=/usr/local/bin/hdp |ExecStart=$work/missing/hdp |" "$unit" >"$work/bad/hdp-agent@.service"

status=0
out=$(systemd-analyze verify "$work/good/hdp-agent@ci.service" 2>&1) || status=$?
# Lines about other units (the host's own, pulled in as dependencies) are not ours to judge.
ours=$(grep -F 'hdp-agent@' <<<"$out" || true)
if ((status != 0)) || [[ -n $ours ]]; then
  printf 'FAIL: systemd-analyze verify rejects the unit (exit %d):\n%s\n' "$status" "$out" >&2
  exit 1
fi
if out=$(systemd-analyze verify "$work/bad/hdp-agent@ci.service" 2>&1) && ! grep -q 'not executable' <<<"$out"; then
  echo "FAIL: systemd-analyze verify accepted a unit whose binary is missing: the check proves nothing" >&2
  exit 1
fi
echo "systemd-analyze verify: ok"
