# shellcheck shell=bash
# wait_until: the one bounded polling loop of the scripts, sourced by scenarios/lib.sh and run.sh.
#
#   wait_until TIMEOUT_S WHAT CMD...
#
# Runs CMD every 0.05 s until it succeeds (returns 0) or TIMEOUT_S whole seconds pass (returns 1).
# On a timeout with WHAT non-empty it calls `wait_timed_out "WHAT: not within TIMEOUT_S s"`,
# which the sourcing script defines (lib.sh: a failed assertion; run.sh: an error line); with
# WHAT empty the caller decides (say, SIGKILL after a SIGTERM was ignored).
wait_until() {
  local timeout_s=$1 what=$2
  shift 2
  local deadline=$(($(_wait_now_us) + timeout_s * 1000000))
  until "$@"; do
    if [ "$(_wait_now_us)" -gt "$deadline" ]; then
      "$@" && return 0  # one last look: it may have happened during the last sleep
      [ -z "$what" ] || wait_timed_out "$what: not within ${timeout_s}s"
      return 1
    fi
    sleep 0.05
  done
}

# process_gone PID: PID has exited (or was never ours to see).
process_gone() { ! kill -0 "$1" 2>/dev/null; }

# Microseconds since the epoch; EPOCHREALTIME's decimal point follows the locale, so drop it.
_wait_now_us() { echo "${EPOCHREALTIME//[!0-9]/}"; }
