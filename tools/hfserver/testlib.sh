# Shared helpers for tests/e2e/setup*.sh: a scratch folder, the local HF server with fault rules,
# request-log queries and assertions. Source it after setting DF (the deltafin binary) and TESTS
# (the tests folder). Everything it starts is stopped on exit; the server also exits by itself.

set -euo pipefail

HFSERVER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$(mktemp -d /tmp/deltafin-setup-test.XXXXXX)"
HF_PID=""
MOUNTS=()

cleanup() {
  local rc=$?
  [[ -n "$HF_PID" ]] && kill "$HF_PID" 2>/dev/null && wait "$HF_PID" 2>/dev/null || true
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || true; done
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT

# Fast retries and stall detection so fault tests take seconds; plain progress lines.
export DELTAFIN_HTTP_BACKOFF_MS=20 DELTAFIN_HTTP_STALL_S=1 DELTAFIN_HTTP_ATTEMPTS=4
export DELTAFIN_PROGRESS=plain
unset HF_TOKEN HF_ENDPOINT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The commit the server reports, so tests can aim faults at one file's CDN URL:
# /cdn/<repo>/$COMMIT/<file>.
COMMIT=0123456789abcdef0123456789abcdef01234567

# hf_start NAME=DIR [extra server args...]: serves the repositories; sets HF_URL.
hf_start() {
  if [[ -n "$HF_PID" ]]; then  # one server at a time
    kill "$HF_PID" 2>/dev/null || true
    wait "$HF_PID" 2>/dev/null || true
  fi
  rm -f "$WORK/port"
  : >"$WORK/faults.json"
  : >"$WORK/requests.jsonl"
  python3 "$HFSERVER_DIR/hfserver.py" --repo "$1" "${@:2}" --commit "$COMMIT" --port-file "$WORK/port" \
    --control "$WORK/faults.json" --log "$WORK/requests.jsonl" --max-seconds 240 --verbose \
    2>"$WORK/server.err" &
  HF_PID=$!
  for _ in $(seq 400); do [[ -s "$WORK/port" ]] && break; sleep 0.05; done
  [[ -s "$WORK/port" ]] || fail "the test server did not start: $(cat "$WORK/server.err")"
  HF_URL="http://127.0.0.1:$(cat "$WORK/port")"
}

# hf_faults '[{"match": ..., "kind": ...}, ...]': replaces the fault rules ('[]' clears them).
hf_faults() {
  echo "{\"rules\": $1}" >"$WORK/faults.json.tmp"
  mv "$WORK/faults.json.tmp" "$WORK/faults.json"
  sleep 0.02  # a distinct mtime for the next change
}

hf_log_reset() { : >"$WORK/requests.jsonl"; }

# hf_count PYTHON_EXPR: requests in the log for which the expression (over `r`) holds.
hf_count() {
  python3 - "$WORK/requests.jsonl" "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def start(r):
    rng = r.get("range") or ""
    return int(rng.split("=")[1].split("-")[0]) if rng.startswith("bytes=") else None
print(sum(1 for r in rows if eval(sys.argv[2], {"start": start}, {"r": r})))
EOF
}

# expect_fail LOG CMD...: the command must fail; its stderr goes to LOG.
expect_fail() {
  local log=$1
  shift
  if "$@" >"$log.out" 2>"$log"; then
    fail "expected failure: $* (stderr: $(tail -3 "$log"))"
  fi
}

expect_in() {  # expect_in FILE PATTERN
  grep -q -- "$2" "$1" || fail "expected '$2' in $1: $(tail -5 "$1")"
}

# The test repository: a `deltafin synth --preset demo` model (with its tokenizer files), or the
# k3-tiny-a oracle where synth is not built.
make_repo() {
  local out=$1
  if "$DF" synth --out "$out" --preset demo --layers 6 --experts 16 >/dev/null 2>"$WORK/synth.err"; then
    echo "test repository: deltafin synth --preset demo --layers 6 --experts 16" >&2
  else
    echo "synth unavailable ($(tail -1 "$WORK/synth.err")); using tests/fixtures/k3-tiny-a" >&2
    mkdir -p "$out"
    cp "$TESTS"/fixtures/k3-tiny-a/{config.json,generation_config.json,model.safetensors.index.json} "$out"/
    cp "$TESTS"/fixtures/k3-tiny-a/model-0000*-of-00000*.safetensors "$out"/
  fi
}

# stream_install DIR: the test repository (make_repo) served (hf_start) and installed with
# `deltafin setup --stream` into DIR: spine shards, the expert manifest, an empty pool.
stream_install() {
  make_repo "$WORK/repo"
  hf_start "test/model=$WORK/repo"
  "$DF" setup --stream --repo test/model --revision main --endpoint "$HF_URL" --dir "$1" \
    >/dev/null 2>"$WORK/err" || fail "setup --stream: $(tail -5 "$WORK/err")"
}

# same_files A B FILE...: byte-identical copies.
same_files() {
  local a=$1 b=$2
  shift 2
  for f in "$@"; do cmp -s "$a/$f" "$b/$f" || fail "$b/$f differs from $a/$f"; done
}

# check_expert_cache INSTALL REPO: every cache file equals its span in the original shards, and no
# temporary or partial file is named like an expert.
check_expert_cache() {
  python3 - "$1" "$2" <<'EOF'
import json, os, sys
root, repo = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(root, ".deltafin/experts.json")))
n = 0
for l in m["layers"]:
    d = os.path.join(root, "experts", "L%03d" % l["layer"])
    for e, (fi, off) in enumerate(l["experts"]):
        p = os.path.join(d, "E%04d.bin" % e)
        if not os.path.exists(p):
            continue
        with open(os.path.join(repo, m["files"][fi]["name"]), "rb") as f:
            f.seek(off)
            want = f.read(l["span_bytes"])
        if open(p, "rb").read() != want:
            sys.exit("cache file %s differs from its span" % p)
        n += 1
print(n)
EOF
}

# check_spine INSTALL REPO: the install's spine shards hold exactly the repository's non-expert
# tensors, byte for byte; prints "<n_tensors> <n_experts>".
check_spine() {
  python3 - "$1" "$2" <<'EOF2'
import json, os, struct, sys
root, repo = sys.argv[1], sys.argv[2]
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return {k: (path, 8 + n + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0]) for k, v in h.items()}
def read(t):
    with open(t[0], "rb") as f:
        f.seek(t[1]); return f.read(t[2])
orig = {}
for f in os.listdir(repo):
    if f.startswith("model-") and f.endswith(".safetensors"):
        orig.update(tensors(os.path.join(repo, f)))
index = json.load(open(os.path.join(root, "model.safetensors.index.json")))["weight_map"]
spine = {}
for f in set(index.values()):
    assert f.startswith("spine-"), f
    spine.update(tensors(os.path.join(root, f)))
assert set(spine) == set(index), "index and spine shards disagree"
experts = {k for k in orig if ".block_sparse_moe.experts." in k}
assert set(spine) == set(orig) - experts, "the spine must be every non-expert tensor"
for k, t in spine.items():
    assert read(t) == read(orig[k]), k
m = json.load(open(os.path.join(root, ".deltafin/experts.json")))
n = sum(len(l["experts"]) for l in m["layers"])
assert n * 6 == len(experts), (n, len(experts))
print(len(spine), n)
EOF2
}

# wait_for SECONDS CONDITION...: polls the condition (a command) every 50 ms, bounded.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}
