# Helpers for the server end-to-end tests (sourced, not run): start `deltafin serve` on a free
# loopback port and always stop it. The including script sets $deltafin and $tmp and calls
# server_cleanup from its EXIT trap.
server_pids=()

# start_server NAME ARGS...: serves in the background, waits until /health answers, and sets
# $port and $pid. The log is $tmp/NAME.log.
start_server() {
  local name=$1
  shift
  # The log exists before the poll below reads it: the background shell may open it later than
  # the first read, and a failed read ends a script under `set -eo pipefail`.
  : >"$tmp/$name.log"
  "$deltafin" serve --port 0 "$@" 2>"$tmp/$name.log" &
  pid=$!
  server_pids+=("$pid")
  port=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's#.*at http://127\.0\.0\.1:\([0-9]*\)/v1.*#\1#p' "$tmp/$name.log" | head -1)
    [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: server $name did not start:" >&2
  cat "$tmp/$name.log" >&2
  return 1
}

stop_server() {  # stop_server PID: SIGTERM, then wait (bounded), then SIGKILL
  local p=$1
  kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 1 100); do
    kill -0 "$p" 2>/dev/null || { wait "$p" 2>/dev/null; return 0; }
    sleep 0.1
  done
  kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null
}

server_cleanup() {
  for p in "${server_pids[@]}"; do stop_server "$p"; done
}
