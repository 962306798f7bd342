# Shell helpers shared by hack/cluster.sh and hack/realnode.sh (sourced; they set $dir, the cluster's directory,
# and $logs_hint, where to look when a wait times out).

log() { echo ">> $*" >&2; }

# A component started with setsid records its pid in $dir/pids/NAME.pid.
pid_alive() { local f="$dir/pids/$1.pid"; [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local secs=$1 what=$2
  shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then log "timed out waiting for $what (logs: $logs_hint)"; return 1; fi
    sleep 0.25
  done
}
