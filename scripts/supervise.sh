#!/usr/bin/env bash
# Keeps one daemon running (issue 29): scripts/setup.sh starts each engine and the registry under this loop, so a
# daemon that dies is started again within seconds, and `imagebuild doctor` can say which engine answers, since
# when, and whether anything watches it. A second setup.sh finds a dead loop (its pid file names no live
# supervise.sh) and starts a new one.
#
# Why a loop and not systemd: PID 1 on the build machines, in CI runners' containers and in the stock-Debian
# rehearsal (scripts/rehearse-stock-debian.sh) is not systemd, and one mechanism that runs everywhere is tested
# everywhere. After a reboot nothing runs until setup.sh runs again; doctor then says no engine answers and that
# no supervisor runs (the state lives under /run, which a reboot empties).
#
# Usage: supervise.sh STATE_DIR SOCKET -- COMMAND [ARG...]
# STATE_DIR/supervisor.pid  this loop        STATE_DIR/child.pid  the daemon now running
# STATE_DIR/since           UTC start of the daemon now running (ISO 8601)
# STATE_DIR/restarts        how many times the daemon was started again     STATE_DIR/socket  what it serves
# The daemon's output goes to STATE_DIR/daemon.log. TERM or INT stops the daemon, then the loop.
set -uo pipefail

state="$1" socket="$2"
shift 2
[[ "${1:-}" == "--" ]] && shift
(($#)) || { echo "usage: supervise.sh STATE_DIR SOCKET -- COMMAND [ARG...]" >&2; exit 2; }
mkdir -p "$state"
echo $$ >"$state/supervisor.pid"
printf '%s\n' "$socket" >"$state/socket"
echo 0 >"$state/restarts"
child=""

stop() {
    if [[ -n "$child" ]]; then
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    rm -f "$state/supervisor.pid" "$state/child.pid"
    exit 0
}
trap stop TERM INT

restarts=0
while :; do
    started=$SECONDS
    "$@" >>"$state/daemon.log" 2>&1 </dev/null &
    child=$!
    echo "$child" >"$state/child.pid"
    date -u +%Y-%m-%dT%H:%M:%SZ >"$state/since"
    wait "$child"
    rc=$?
    echo "supervise: $1 (pid ${child}) exited ${rc} at $(date -u +%Y-%m-%dT%H:%M:%SZ); starting it again" \
        >>"$state/daemon.log"
    restarts=$((restarts + 1))
    echo "$restarts" >"$state/restarts"
    # one that dies at once is not restarted in a tight loop
    ((SECONDS - started < 10)) && sleep 5
done
