#!/usr/bin/env bash
# Disk space: with neither flag setup picks a streaming install when a full one does not fit; a
# full disk during a shard download or an expert fetch ends in a clear error with nothing corrupt
# under a final name, and a rerun with space finishes. Uses small tmpfs mounts (root); where
# mounting is not permitted, RLIMIT_FSIZE (EFBIG) stands in for the full disk.
DF=$1
TESTS=$2
source "$TESTS/../tools/hfserver/testlib.sh"

make_repo "$WORK/repo"
hf_start "test/model=$WORK/repo"
shards=$(cd "$WORK/repo" && ls model-*.safetensors)
A=$(echo "$shards" | head -1)
BIG=1000000
setup_args=(--repo test/model --revision main --endpoint "$HF_URL")
read -r full_bytes spine_bytes < <(python3 - "$WORK/repo" <<'PY'
import json, os, struct, sys
full = spine = 0
for f in os.listdir(sys.argv[1]):
    if f.startswith("model-") and f.endswith(".safetensors"):
        p = os.path.join(sys.argv[1], f)
        full += os.path.getsize(p)
        with open(p, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        spine += 8 + n + sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items()
                             if k != "__metadata__" and ".block_sparse_moe.experts." not in k)
print(full, spine)
PY
)

mount_tmpfs() {  # mount_tmpfs DIR KB: a small file system of its own
  mkdir -p "$1"
  mount -t tmpfs -o size="$2"k deltafin-test "$1" 2>/dev/null || return 1
  MOUNTS+=("$1")
}
fill() { dd if=/dev/zero of="$1/filler" bs=64k status=none 2>/dev/null || true; }
size_at_least() { [[ -f "$1" ]] && (($(stat -c %s "$1") >= $2)); }

if ! mount_tmpfs "$WORK/probe" 64; then
  # No mount permission: a file size limit makes writes fail with EFBIG instead of ENOSPC.
  echo "tmpfs mounts are not permitted here: testing a write failure with RLIMIT_FSIZE instead"
  expect_fail "$WORK/f.err" bash -c "trap '' XFSZ; ulimit -f 1024; exec \"$DF\" setup --full ${setup_args[*]} --dir \"$WORK/lim\""
  expect_in "$WORK/f.err" "File too large"
  expect_in "$WORK/f.err" "a rerun resumes it"
  [[ ! -e "$WORK/lim/$A" ]] || cmp -s "$WORK/repo/$A" "$WORK/lim/$A" || fail "a damaged $A under its final name"
  "$DF" setup --full "${setup_args[@]}" --dir "$WORK/lim" >/dev/null 2>"$WORK/f2.err" || fail "rerun: $(tail -3 "$WORK/f2.err")"
  same_files "$WORK/repo" "$WORK/lim" $shards
  echo "setup_disk: ok (RLIMIT_FSIZE variant)"
  exit 0
fi

# 1. Room for the spine but not for everything: the automatic choice is a streaming install.
mid_kb=$(((full_bytes + spine_bytes) / 2 / 1024))
mount_tmpfs "$WORK/small" "$mid_kb" || fail "mount"
"$DF" setup "${setup_args[@]}" --dir "$WORK/small/m" >/dev/null 2>"$WORK/a.err" || fail "auto: $(tail -3 "$WORK/a.err")"
expect_in "$WORK/a.err" "but only .* is free at .*: streaming install"
grep -q '"kind": "stream"' "$WORK/small/m/.deltafin/install.json" || fail "auto did not make a streaming install"
check_spine "$WORK/small/m" "$WORK/repo" >/dev/null || fail "spine on the small disk"
echo "ok  ${mid_kb} kB free (full $full_bytes B, spine $spine_bytes B): streaming install chosen"
# ... and --full is refused up front, with the sizes.
expect_fail "$WORK/b.err" "$DF" setup --full "${setup_args[@]}" --dir "$WORK/small/f"
expect_in "$WORK/b.err" "not enough disk at .* for --full: a full install needs"
echo "ok  --full refused: $(grep '^deltafin: error' "$WORK/b.err" | cut -c1-150)"

# 2. The disk fills up during a shard download.
mount_tmpfs "$WORK/d" $(((full_bytes + 3000000) / 1024)) || fail "mount"
hf_faults "[{\"match\": \"/cdn/\", \"kind\": \"slow\", \"rate\": 2000000, \"min_range\": $BIG, \"times\": -1}]"
"$DF" setup --full "${setup_args[@]}" --dir "$WORK/d/m" >/dev/null 2>"$WORK/c.err" &
pid=$!
wait_for 30 size_at_least "$WORK/d/m/$A.partial" 1000000 || fail "the download never got going: $(tail -3 "$WORK/c.err")"
fill "$WORK/d"
wait $pid && fail "setup succeeded on a full disk"
expect_in "$WORK/c.err" "No space left on device"
expect_in "$WORK/c.err" "the partial download is kept and a rerun resumes it"
for s in $shards; do
  [[ ! -e "$WORK/d/m/$s" ]] || cmp -s "$WORK/repo/$s" "$WORK/d/m/$s" || fail "a damaged $s under its final name"
done
[[ ! -e "$WORK/d/m/.deltafin/install.json" ]] || fail "install.json after a failed install"
echo "ok  $(grep '^deltafin: error' "$WORK/c.err" | cut -c1-150)"
rm -f "$WORK/d/filler"
hf_faults '[]'
"$DF" setup --full "${setup_args[@]}" --dir "$WORK/d/m" >/dev/null 2>"$WORK/c2.err" || fail "rerun: $(tail -3 "$WORK/c2.err")"
same_files "$WORK/repo" "$WORK/d/m" $shards
echo "ok  rerun with space finished the full install"

# 3. The disk fills up under the expert cache.
# Room for the spine and every expert (tmpfs rounds each cache file up to whole pages).
mount_tmpfs "$WORK/e" $(((spine_bytes + (full_bytes - spine_bytes) * 3 / 2 + 1000000) / 1024)) || fail "mount"
"$DF" setup --stream "${setup_args[@]}" --dir "$WORK/e/m" >/dev/null 2>"$WORK/e.err" || fail "stream: $(tail -3 "$WORK/e.err")"
fill "$WORK/e"
expect_fail "$WORK/e2.err" "$DF" fetch-experts --model "$WORK/e/m"
expect_in "$WORK/e2.err" "No space left on device"
expect_in "$WORK/e2.err" "free for the expert cache"
[[ -z "$(find "$WORK/e/m/experts" -name '*.tmp-*')" ]] || fail "temporary expert files left on the full disk"
check_expert_cache "$WORK/e/m" "$WORK/repo" >/dev/null || fail "a damaged cache file on the full disk"
echo "ok  $(grep '^deltafin: error' "$WORK/e2.err" | cut -c1-150)"
rm -f "$WORK/e/filler"
"$DF" fetch-experts --model "$WORK/e/m" >/dev/null 2>"$WORK/e3.err" || fail "rerun: $(tail -3 "$WORK/e3.err")"
check_expert_cache "$WORK/e/m" "$WORK/repo" >/dev/null || fail "cache after the rerun"
echo "setup_disk: ok"
