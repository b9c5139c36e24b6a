# shellcheck shell=bash
# A memory cgroup for the benchmark scripts (sourced, not run): cold runs capped at a memory limit,
# the way docs/PERFORMANCE.md measures a streamed spine. Needs root.
#
# make_memory_cgroup NAME LIMIT: creates the cgroup (v2, or v1's memory controller) with LIMIT
#   ("9G", bytes with an IEC suffix) and no swap, sets $cg, and removes it on exit. Exits 2 with
#   the reason when no writable memory controller is there.
# capped NAME CMD...: drops the page cache, then runs CMD inside the cgroup with stdout to
#   $raw/NAME.json and stderr to $raw/NAME.err ($raw set by the caller); a failure is reported,
#   not fatal.

make_memory_cgroup() {
  local name=$1 limit
  limit=$(numfmt --from=iec "$2")
  if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cg=/sys/fs/cgroup/$name-$$
    mkdir "$cg" && echo "$limit" >"$cg/memory.max"
    [[ -e $cg/memory.swap.max ]] && echo 0 >"$cg/memory.swap.max"
  elif [[ -d /sys/fs/cgroup/memory ]]; then
    cg=/sys/fs/cgroup/memory/$name-$$
    mkdir "$cg" && echo "$limit" >"$cg/memory.limit_in_bytes"
  else
    echo "$name: needs a writable memory cgroup (v2, or v1's memory controller)" >&2
    exit 2
  fi
  trap 'rmdir "$cg" 2>/dev/null || true' EXIT
}

# shellcheck disable=SC2154  # raw: set by the sourcing script
capped() {
  local name=$1
  shift
  sync
  echo 3 >/proc/sys/vm/drop_caches
  echo "[$(date +%T)] $name" >&2
  (echo "$BASHPID" >"$cg/cgroup.procs" && exec "$@") >"$raw/$name.json" 2>"$raw/$name.err" ||
    echo "  $name exited $? (see $raw/$name.err)" >&2
}
