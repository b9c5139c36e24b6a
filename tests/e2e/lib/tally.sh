# For end-to-end scripts that run many checks and report every failure before exiting (sourced
# after lib/server.sh; the including script sets $tmp): background client pids stopped at exit
# with the servers and $tmp, a failure count, and a JSON query helper.
bg_pids=()
tally_cleanup() {
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  server_cleanup
  rm -rf "$tmp"
}
trap tally_cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
json() {  # json FILE EXPR: a Python expression over the parsed file, bound to d
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
