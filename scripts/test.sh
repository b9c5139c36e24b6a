#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs what is needed (Debian packages, npm test
# clients), builds the release tree and the clang ASan+UBSan tree (the fuzz preset: the unit tests
# and the libFuzzer targets, one build for both), runs every ctest entry in release, the unit tests
# again under the sanitizers, and each libFuzzer target briefly, two at a time.
#   scripts/test.sh            default run (well under 30 minutes on 2 cores)
#   scripts/test.sh --long     longer fuzzing (FUZZ_SECONDS, default 600 per target)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

long=0
[[ "${1:-}" == "--long" ]] && long=1
fuzz_seconds=${FUZZ_SECONDS:-$([[ $long == 1 ]] && echo 600 || echo 20)}
jobs=${JOBS:-$(nproc)}

./scripts/install-deps.sh --tests || { echo "test.sh: installing dependencies failed" >&2; exit 1; }
if [[ -f tests/npm/package.json ]]; then
  (cd tests/npm && npm ci --no-audit --no-fund --loglevel=error) ||
    { echo "test.sh: npm ci in tests/npm failed" >&2; exit 1; }
fi

passed=0
failed=0
skipped=0
failures=()
skips=()
record() {  # record NAME STATUS
  if [[ $2 == 0 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); failures+=("$1"); fi
}
# Adds ctest's per-test counts from its summary line ("NN% tests passed, F tests failed out of T").
record_ctest() {  # record_ctest NAME LOGFILE STATUS
  local line total fails
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$2" | tail -1)
  if [[ -z $line ]]; then record "$1" 1; return; fi
  total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
  fails=$(sed -E 's/.*tests passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
  # ctest counts a skipped test (SKIP_RETURN_CODE: the GPU tests without a GPU) as passed in
  # that line; it lists each as "NN - name (Skipped)". They are counted apart, not as passes.
  local skips_here
  skips_here=$(grep -cE '^\s+[0-9]+ - .* \(Skipped\)' "$2")
  passed=$((passed + total - fails - skips_here))
  failed=$((failed + fails))
  skipped=$((skipped + skips_here))
  ((skips_here > 0)) && skips+=("$1: $(grep -E '^\s+[0-9]+ - .* \(Skipped\)' "$2" | tr -s ' ' | tr '\n' ';')")
  ((fails > 0)) && failures+=("$1: $(grep -E '^\s+[0-9]+ - ' "$2" | tr -s ' ' | tr '\n' ';')")
  [[ $3 == 0 || $fails -gt 0 ]] || record "$1 (ctest exit $3)" 1
}

build() {  # build PRESET
  echo "== configure + build: $1"
  cmake --preset "$1" >/dev/null && cmake --build --preset "$1" -j "$jobs"
}

log_dir=$(mktemp -d)
if build release; then
  echo "== ctest (release: unit + end-to-end)"
  ctest --preset release -j "$jobs" 2>&1 | tee "$log_dir/release.log"
  record_ctest "release ctest" "$log_dir/release.log" "${PIPESTATUS[0]}"
else
  record "release build" 1
fi

# One clang tree with ASan+UBSan serves both the unit tests under the sanitizers and the fuzzers
# (a gcc debug tree for the former cost a whole build of the project; the `debug` preset remains
# for local use).
if build fuzz; then
  echo "== ctest (clang ASan+UBSan: unit tests)"
  ASAN_OPTIONS=detect_leaks=1 ctest --preset fuzz -L unit -j "$jobs" 2>&1 | tee "$log_dir/sanitize.log"
  record_ctest "sanitizer ctest" "$log_dir/sanitize.log" "${PIPESTATUS[0]}"
  # Each fuzzer is one process on one core for fuzz_seconds: two run at a time on 2 cores.
  fuzz_one() {  # fuzz_one BINARY: its exit status
    local name corpus seeds=()
    name=$(basename "$1")
    corpus=$log_dir/corpus_$name
    mkdir -p "$corpus"
    [[ -d fuzz/corpus/${name#fuzz_} ]] && seeds=("fuzz/corpus/${name#fuzz_}")
    "$1" -max_total_time="$fuzz_seconds" -rss_limit_mb=4096 -print_final_stats=0 "$corpus" \
      "${seeds[@]}" >"$log_dir/$name.log" 2>&1
  }
  fuzzers=(build/fuzz/fuzz/fuzz_*)
  at_once=$((jobs < 2 ? 1 : 2))
  for ((k = 0; k < ${#fuzzers[@]}; k += at_once)); do
    batch=("${fuzzers[@]:k:at_once}")
    pids=()
    for bin in "${batch[@]}"; do
      echo "== fuzz $(basename "$bin") for ${fuzz_seconds}s"
      fuzz_one "$bin" &
      pids+=($!)
    done
    for m in "${!batch[@]}"; do
      name=$(basename "${batch[m]}")
      if wait "${pids[m]}"; then
        record "$name" 0
      else
        tail -40 "$log_dir/$name.log"
        record "$name" 1
      fi
    done
  done
else
  record "sanitizer and fuzz build" 1
fi

echo
for f in "${failures[@]}"; do echo "FAILED: $f"; done
for f in "${skips[@]}"; do echo "SKIPPED: $f"; done
echo "tests: $passed passed, $failed failed, $skipped skipped"
[[ $failed == 0 ]]
