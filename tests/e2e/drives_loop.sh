#!/usr/bin/env bash
# Placement on real block devices: three tmpfs-backed loop devices with ext4 (the emulation of
# ../shared/spec/multidrive.md, unthrottled), each its own drive. The synth demo's experts are
# striped over them, then laid out whole with hot replicas; logits and ids with no flags equal
# the unplaced run's, every drive is named at startup and read, and one drive failing mid-run
# (device-mapper switched to its error target where dmsetup works, else the drive unmounted) is
# reported while the ids stay the same: its reads move to another holder or the shards.
# Exit 77 (skipped, reason printed) where the machine cannot make loop devices.
set -euo pipefail
deltafin=$1
skip() {
  echo "drives_loop: skipped: $*"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "attaching loop devices needs root"
command -v losetup >/dev/null || skip "no losetup (util-linux)"
command -v mkfs.ext4 >/dev/null || skip "no mkfs.ext4 (e2fsprogs)"
base=/dev/shm
[[ $(stat -f -c %T "$base" 2>/dev/null) == tmpfs && -w $base ]] || base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/deltafin-drives-loop.XXXXXX")
loops=()
mounts=()
dm=
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  [[ -n $dm ]] && dmsetup remove --force "$dm" >/dev/null 2>&1
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
failed=0
fail() {
  echo "drives_loop: FAIL: $*" >&2
  failed=1
}
export DELTAFIN_DRIVE_CACHE=$work/drives.tsv

# Three drives of 96 MB (sparse images on the tmpfs). The third sits under a device-mapper
# linear target when dmsetup works, so it can be switched to the error target later.
for i in 0 1 2; do
  truncate -s 96M "$work/d$i.img"
  loop=$(losetup --direct-io=on --show -f "$work/d$i.img" 2>"$work/losetup.err") ||
    skip "losetup: $(head -1 "$work/losetup.err")"
  loops+=("$loop")
  dev=$loop
  if [[ $i == 2 ]] && command -v dmsetup >/dev/null &&
    dmsetup create "deltafin-loop-$$" --table "0 $(blockdev --getsz "$loop") linear $loop 0" \
      >/dev/null 2>&1; then
    dm=deltafin-loop-$$
    dev=/dev/mapper/$dm
  fi
  mkfs.ext4 -q -F "$dev" >/dev/null 2>&1 || skip "mkfs.ext4 on $dev failed"
  mkdir -p "$work/m$i"
  mount -o noatime "$dev" "$work/m$i" 2>"$work/mount.err" || skip "mount: $(head -1 "$work/mount.err")"
  mounts+=("$work/m$i")
done
echo "drives_loop: drives ${loops[*]}${dm:+ (the third under /dev/mapper/$dm)}"

"$deltafin" synth --out "$work/model" --preset demo >/dev/null 2>"$work/err" ||
  { cat "$work/err" >&2; exit 1; }
model=$work/model
ids="464,1012,300,7,88,512,9,130,44,61,700,2,3,999,15,16,23,42,77,101"
"$deltafin" logits --model "$model" --ids "$ids" --out "$work/ref.st" --experts stream 2>"$work/err" ||
  { cat "$work/err" >&2; exit 1; }
ref48=$("$deltafin" generate --model "$model" --ids "$ids" --max-new 48 --ignore-eos \
  --experts stream --expert-slots 4 --trace-routes "$work/routes.jsonl" 2>"$work/err") ||
  { cat "$work/err" >&2; exit 1; }
drives="$work/m0,$work/m1,$work/m2"

check_same() {  # check_same LABEL: logits with no flags identical; every drive named and read
  local label=$1
  "$deltafin" logits --model "$model" --ids "$ids" --out "$work/$label.st" 2>"$work/$label.err" ||
    { tail -3 "$work/$label.err" >&2; fail "$label: logits exited non-zero"; return; }
  cmp -s "$work/ref.st" "$work/$label.st" && echo "drives_loop: $label: logits byte-identical" ||
    fail "$label: logits differ from the unplaced run's"
  local named
  named=$(grep -c "^.*drive [0-9]*: \(loop\|dm-\)" "$work/$label.err" || true)
  ((named >= 3)) || fail "$label: $named drives named at startup: $(grep drive "$work/$label.err")"
  "$deltafin" bench decode --model "$model" --tokens 4 --expert-slots 4 --ceiling-reps 1 \
    --ceiling-gb 0.01 --device cpu --json >"$work/$label.json" 2>"$work/$label.bench.err" ||
    { tail -3 "$work/$label.bench.err" >&2; fail "$label: bench decode"; return; }
  python3 - "$work/$label.json" "$label" <<'PY' || fail "$label: bench decode --json per drive"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
placed = [d for d in r["drives"] if d["device"].startswith(("loop", "dm-"))]
assert len(placed) == 3 and all(d["bytes"] > 0 for d in placed), r["drives"]
print(f"drives_loop: {sys.argv[2]}: bytes per drive {[(d['device'], d['bytes']) for d in placed]}")
PY
}

"$deltafin" place --model "$model" --drives "$drives" --gbps 1,2,4 >"$work/stripe.json" \
  2>"$work/err" || { cat "$work/err" >&2; fail "place (stripe)"; }
check_same striped
"$deltafin" place --model "$model" --drives "$drives" --gbps 1,2,4 --layout whole \
  --from-trace "$work/routes.jsonl" >"$work/whole.json" 2>"$work/err" ||
  { cat "$work/err" >&2; fail "place (whole, hot replicas)"; }
replicas=$(python3 -c "import json,sys; print(json.load(sys.stdin)['replicas'])" <"$work/whole.json")
((replicas > 0)) || fail "no hot replicas from the trace"
check_same whole-replicas

# The third drive fails during a 48-token generation (4 slots: experts are read again and again).
"$deltafin" generate --model "$model" --ids "$ids" --max-new 48 --ignore-eos --expert-slots 4 \
  >"$work/mid.out" 2>"$work/mid.err" &
pid=$!
sleep 0.3
running=0
kill -0 $pid 2>/dev/null && running=1
if [[ -n $dm ]]; then
  how="switched to the device-mapper error target"
  dmsetup suspend --nolockfs "$dm" && dmsetup load "$dm" --table "0 $(blockdev --getsz "${loops[2]}") error" &&
    dmsetup resume "$dm" || fail "could not switch $dm to the error target"
else
  how="unmounted"
  umount -l "$work/m2" || fail "could not unmount the third drive"
fi
wait $pid || fail "generate with a drive failing mid-run exited non-zero: $(tail -3 "$work/mid.err")"
[[ $(cat "$work/mid.out") == "$ref48" ]] &&
  echo "drives_loop: third drive $how mid-run: 48 ids identical" ||
  fail "a drive failing mid-run: ids $(cat "$work/mid.out"), expected $ref48"
if [[ $running == 0 ]]; then
  echo "drives_loop: the generation had ended before the drive failed: nothing to report"
elif grep -q "drive folder .*m2/deltafin-model failed" "$work/mid.err"; then
  echo "drives_loop: reported: $(grep -o "drive folder .*m2/deltafin-model failed.\{0,60\}" "$work/mid.err" | head -1)"
else
  fail "the drive $how mid-run was not reported: $(grep -i "warn\|fail" "$work/mid.err" | head -3)"
fi
exit $failed
