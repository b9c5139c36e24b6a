#!/usr/bin/env bash
# `deltafin render-chat` on every case of the K3 chat fixture (segments produced by the release's
# encoding_k3.py) must print exactly the expected [text, is_markup] pairs; refused input must exit
# non-zero with a message.
# usage: chat_render.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

/usr/bin/python3 - "$deltafin" "$tests/fixtures/xtml/k3-chat-cases.json" "$tmp" <<'PY'
import json, subprocess, sys
deltafin, fixture, tmp = sys.argv[1:]
cases = json.load(open(fixture, encoding="utf-8"))["cases"]
failed = 0
for name, case in cases.items():
    path = f"{tmp}/{name}.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(case["input"], f, ensure_ascii=False)
    run = subprocess.run([deltafin, "render-chat", "--input", path], capture_output=True, text=True)
    got = json.loads(run.stdout) if run.returncode == 0 else None
    if got != case["segments"]:
        failed += 1
        print(f"FAIL {name}: exit {run.returncode} {run.stderr.strip()}")
        for i, (a, b) in enumerate(zip(got or [], case["segments"])):
            if a != b:
                print(f"  segment {i}: got {a!r}, want {b!r}")
                break
with open(f"{tmp}/medium.json", "w") as f:
    json.dump({"messages": [{"role": "user", "content": "go"}], "thinking_effort": "medium"}, f)
run = subprocess.run([deltafin, "render-chat", "--input", f"{tmp}/medium.json"],
                     capture_output=True, text=True)
if run.returncode == 0 or "thinking_effort" not in run.stderr:
    failed += 1
    print(f"FAIL: thinking_effort=medium was not refused (exit {run.returncode}, {run.stderr!r})")
print(f"{len(cases) + 1 - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
