#!/usr/bin/env bash
# `deltafin bench-io --dirs`: two folders, small reads, ceilings given (no measuring): the JSON has
# both policies with min <= median <= max, per-drive bytes adding up to every read, shares of the
# ceiling, and least-ETA sending more reads to the drive given the higher ceiling; bad flags are
# refused naming the flag. Then --stats over a placement spanning two devices (the build's disk and
# /dev/shm, a tmpfs) prints each drive's bytes and the I/O floor over the sum of the ceilings, and
# bench decode --json reports them per drive.
set -euo pipefail
deltafin=$1
work=$(mktemp -d)
shm=
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT
failed=0
fail() {
  echo "drives_bench_io: FAIL: $*" >&2
  failed=1
}
export DELTAFIN_DRIVE_CACHE=$work/drives.tsv
mkdir -p "$work/a" "$work/b"
"$deltafin" bench-io --dirs "$work/a,$work/b" --size-gb 0.05 --reads 24 --reps 2 \
  --read-bytes 1048576 --ceilings 1,3 --json >"$work/out.json" 2>"$work/err" ||
  { cat "$work/err" >&2; exit 1; }
/usr/bin/python3 - "$work/out.json" <<'PY' || fail "bench-io --dirs JSON"
import json, sys
r = json.load(open(sys.argv[1]))
assert abs(r["sum_ceiling_gbps"] - 4) < 1e-9, r["sum_ceiling_gbps"]
for p in ("least_eta", "round_robin"):
    q = r[p]
    assert len(q["gbps"]) == 2 and q["min_gbps"] <= q["median_gbps"] <= q["max_gbps"], q
    per = q["per_drive"]
    assert sum(d["bytes"] for d in per) == 24 * 1048576, per
    assert sum(d["reads"] for d in per) == 24, per
    assert all(d["busy_seconds"] > 0 and d["share_of_ceiling"] > 0 for d in per), per
rr = [d["reads"] for d in r["round_robin"]["per_drive"]]
eta = [d["reads"] for d in r["least_eta"]["per_drive"]]
assert rr == [12, 12], rr
assert eta[1] > eta[0], eta  # the drive said to be three times faster gets more
print(f"drives_bench_io: least_eta reads {eta}, round_robin {rr}")
PY
[[ -e $work/a/deltafin-bench-io.bin ]] && fail "the test file was not removed"
if "$deltafin" bench-io --dirs "$work/a,$work/nowhere" --size-gb 0.01 2>"$work/err" >/dev/null; then
  fail "a missing --dirs folder was accepted"
fi
grep -q -- "--dirs $work/nowhere" "$work/err" || fail "unexpected refusal: $(cat "$work/err")"
if "$deltafin" bench-io --dirs "$work/a" --ceilings 1,2 2>"$work/err" >/dev/null; then
  fail "--ceilings with the wrong count was accepted"
fi

# --stats with drives on two devices.
if shm=$(mktemp -d /dev/shm/deltafin-e2e.XXXXXX 2>/dev/null) &&
    [[ $(stat -c %d "$shm") != $(stat -c %d "$work") ]]; then
  "$deltafin" synth --out "$work/demo" --preset demo >/dev/null 2>"$work/err" ||
    { cat "$work/err" >&2; exit 1; }
  mkdir -p "$work/d0"
  "$deltafin" place --model "$work/demo" --drives "$work/d0,$shm" --gbps 1,1 >/dev/null \
    2>"$work/err" || { cat "$work/err" >&2; fail "place over two devices"; }
  # Known ceilings for both devices, so the floor can be printed.
  for d in "$work/d0" "$shm"; do
    "$deltafin" bench-io --dirs "$d" --size-gb 0.02 --reads 4 --reps 1 --read-bytes 1048576 \
      --json >/dev/null 2>"$work/err" || { cat "$work/err" >&2; fail "bench-io --dirs $d"; }
  done
  "$deltafin" generate --model "$work/demo" --ids 5,6,7 --max-new 3 --ignore-eos --stats \
    >/dev/null 2>"$work/err" || { cat "$work/err" >&2; fail "generate --stats"; }
  if grep -q "^token 1: .*; drives: .*% of .*I/O floor" "$work/err"; then
    echo "drives_bench_io: --stats: $(grep -o 'drives: .*' "$work/err" | head -1)"
  else
    fail "--stats printed no per-drive figures: $(grep '^token 1' "$work/err")"
  fi
  "$deltafin" bench decode --model "$work/demo" --tokens 3 --prompt-tokens 2 --json \
    >"$work/decode.json" 2>"$work/err" || { tail -5 "$work/err" >&2; fail "bench decode"; }
  /usr/bin/python3 - "$work/decode.json" <<'PY' || fail "bench decode --json per drive"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
d = r["drives"]
assert len(d) == 2, d
assert all(x["ceiling_gbps"] > 0 and x["busy_seconds"] >= 0 for x in d), d
assert r["io_floor_sum_of_ceilings_seconds_per_token"] > 0, r
print(f"drives_bench_io: bench decode: {[(x['device'], x['bytes']) for x in d]}, floor over the sum "
      f"of ceilings {r['io_floor_sum_of_ceilings_seconds_per_token']*1e3:.2f} ms/token")
PY
else
  echo "drives_bench_io: --stats over two devices skipped: /dev/shm is not a separate writable device here"
fi
exit $failed
