#!/usr/bin/env bash
# bench-io end to end: a small run prints one JSON object with a point per (queue, pages, depth)
# and a positive ceiling, deletes its test file unless --keep, reports a --memory-load run, and
# rejects bad options clearly.
set -euo pipefail
deltafin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_io: FAIL: $*" >&2; exit 1; }

"$deltafin" bench-io --dir "$work" --size-gb 0.1 --reps 2 --gb-per-rep 0.04 --depths 1,2 --json \
  >"$work/out.json" 2>"$work/err.txt" || { cat "$work/err.txt" >&2; fail "bench-io exited $?"; }
python3 - "$work/out.json" <<'PY' || fail "bad JSON report: $(cat "$work/out.json")"
import json, sys
r = json.load(open(sys.argv[1]))
queues = {p["queue"] for p in r["points"]}
assert queues <= {"io_uring", "pread"} and "pread" in queues, queues
assert len(r["points"]) == 2 * 2 * len(queues), len(r["points"])
for p in r["points"]:
    assert p["depth"] in (1, 2) and p["pages"] in ("huge", "4k"), p
    assert len(p["gbps"]) == 2 and 0 < p["min_gbps"] <= p["median_gbps"] <= p["max_gbps"], p
assert r["read_bytes"] == 17547264, r["read_bytes"]
assert r["ceiling_gbps"] == max(p["median_gbps"] for p in r["points"]), r
assert r["file_bytes"] == 100000000 // 4096 * 4096, r["file_bytes"]
assert r["memory_load_threads"] == 0 and r["memory_load_gbps"] == 0, r
PY
[[ ! -e "$work/deltafin-bench-io.bin" ]] || fail "the test file was not deleted"

"$deltafin" bench-io --dir "$work" --size-gb 0.05 --reps 1 --gb-per-rep 0.02 --depths 1 \
  --queue pread --pages huge --keep >"$work/table.txt" 2>/dev/null || fail "--keep run failed"
grep -q "^ceiling: " "$work/table.txt" || fail "no ceiling line: $(cat "$work/table.txt")"
[[ $(grep -c "^pread " "$work/table.txt") == 1 ]] || fail "expected one pread row"
[[ -e "$work/deltafin-bench-io.bin" ]] || fail "--keep did not keep the test file"

# Reads under --memory-load: the copying threads ran throughout and their rate is reported.
"$deltafin" bench-io --dir "$work" --size-gb 0.05 --reps 1 --gb-per-rep 0.02 --depths 1 \
  --queue pread --pages huge --memory-load 1 --json >"$work/load.json" 2>"$work/err.txt" ||
  { cat "$work/err.txt" >&2; fail "--memory-load run failed"; }
python3 - "$work/load.json" <<'PY' || fail "bad --memory-load report: $(cat "$work/load.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["memory_load_threads"] == 1 and r["memory_load_gbps"] > 0, r
assert len(r["points"]) == 1 and r["points"][0]["median_gbps"] > 0, r
PY
if "$deltafin" bench-io --dir "$work" --memory-load -1 2>"$work/err.txt"; then fail "--memory-load -1 accepted"; fi
grep -q -- "--memory-load must be" "$work/err.txt" || fail "unclear error: $(cat "$work/err.txt")"

# Existing files are read as they are; one smaller than a read is refused by name.
head -c 8192 /dev/zero >"$work/tiny.bin"
if "$deltafin" bench-io --file "$work/tiny.bin" 2>"$work/err.txt"; then fail "tiny file accepted"; fi
grep -q "tiny.bin has 8192 bytes" "$work/err.txt" || fail "unclear error: $(cat "$work/err.txt")"
if "$deltafin" bench-io 2>"$work/err.txt"; then fail "no --dir accepted"; fi
grep -q -- "--dir DIR" "$work/err.txt" || fail "unclear error: $(cat "$work/err.txt")"
if "$deltafin" bench-io --dir "$work/nope" 2>"$work/err.txt"; then fail "missing dir accepted"; fi
grep -q "is not a directory" "$work/err.txt" || fail "unclear error: $(cat "$work/err.txt")"
if "$deltafin" bench-io --dir "$work" --queue fast 2>"$work/err.txt"; then fail "bad --queue"; fi
grep -q "queue must be" "$work/err.txt" || fail "unclear error: $(cat "$work/err.txt")"
echo "bench_io: ok"
