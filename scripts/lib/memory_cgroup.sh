# shellcheck shell=bash
# A memory cgroup for the benchmark scripts (sourced, not run): cold runs capped at a memory limit,
# the way docs/PERFORMANCE.md measures a streamed spine. Needs root.
#
# make_memory_cgroup NAME LIMIT: creates the cgroup (v2, or v1's memory controller) with LIMIT
#   ("9G", bytes with an IEC suffix) and no swap, sets $cg, and removes it on exit. Exits 2 with
#   the reason when no writable memory controller is there.
# limit_read_rate DIR MBPS: caps the cgroup's reads from the disk holding DIR at MBPS (10^6 bytes
#   per second; cgroup v2 io.max, on the whole disk). A disk whose own rate drifts by more than
#   the difference being measured (the device host's: 1.8 to 3.1 GB/s within minutes) then reads
#   at one steady rate below its slowest. Exits 2 with the reason where that cannot be done.
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

limit_read_rate() {
  local dir=$1 mbps=$2 src disk majmin
  if [[ ! -e $cg/io.max ]]; then
    grep -qw io /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
      echo +io >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    [[ -e $cg/io.max ]] || {
      echo "limit_read_rate: needs cgroup v2 with the io controller" >&2
      exit 2
    }
  fi
  # The disk under DIR: its filesystem's device (st_dev), or the parent disk of that partition;
  # where st_dev names no block device (overlayfs), the mount's source device.
  local dev sys
  dev=$(stat -c %d "$dir")
  sys=/sys/dev/block/$(((dev >> 8) & 0xfff)):$(((dev & 0xff) | ((dev >> 12) & 0xfff00)))
  if [[ ! -e $sys ]]; then
    src=$(findmnt -no SOURCE --target "$dir")
    disk=$(lsblk -no PKNAME "$src" 2>/dev/null | head -1)
    [[ -n $disk ]] || disk=$(basename "$src")
    sys=/sys/block/$disk
  fi
  [[ -e $sys/partition ]] && sys=$(realpath "$sys/..")
  disk=$(basename "$(realpath "$sys")")
  majmin=$(cat "$sys/dev" 2>/dev/null) || {
    echo "limit_read_rate: no whole disk found for $dir" >&2
    exit 2
  }
  echo "$majmin rbps=$((mbps * 1000000))" >"$cg/io.max"
  echo "reads from $disk ($majmin) capped at $mbps MB/s: $(cat "$cg/io.max")" >&2
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
