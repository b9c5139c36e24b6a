#!/usr/bin/env bash
# `deltafin serve` against hostile or unusual clients, on the demo model, with short limits set by
# flags: a streamed client that stops reading (--write-timeout-ms), clients that half-close, many
# large bodies at once (--max-body-memory, and the memory given back), what a web page could send
# (Host, Origin, content types; --allow-origin and its CORS preflight), and SIGTERM
# (--shutdown-grace-ms).
# usage: server_limits.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
tmp=$(mktemp -d)
source "$tests/e2e/lib/server.sh"
source "$tests/e2e/lib/tally.sh"
# status NAME WANT CURL_ARGS...: the status, and an OpenAI-shaped error body when it is not 200.
status() {
  local name=$1 want=$2
  shift 2
  local got
  got=$(command curl -s -m 20 -D "$tmp/h" -o "$tmp/out" -w '%{http_code}' "$@") || true
  if [[ $got != "$want" ]]; then
    fail "$name: status $got, want $want: $(head -c 300 "$tmp/out")"
  elif [[ $want != 200 ]]; then
    [[ "$(json "$tmp/out" "sorted(d['error'].keys()) == ['code','message','param','type']")" == True ]] ||
      fail "$name: not an OpenAI error body: $(head -c 300 "$tmp/out")"
  fi
}
ct=(-H "Content-Type: application/json")

"$deltafin" synth --out "$tmp/demo" --preset demo >/dev/null

# --- a streamed client that stops reading loses its generation; the slot frees
start_server slow --model "$tmp/demo" --write-timeout-ms 1000 --max-tokens-limit 1000000
python3 - "$port" "$tmp/slow.log" >"$tmp/slow.out" <<'PY' || fail "slow reader: $(cat "$tmp/slow.out")"
import json, socket, subprocess, sys, time
port, log = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window, never read
s.connect(("127.0.0.1", port))
body = json.dumps({"prompt": "Count:", "max_tokens": 30000, "stream": True}).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(body) + body)
t0 = time.time()
while "cancelled (slow client" not in open(log).read():
    assert time.time() - t0 < 30, "the slow reader's generation was never cancelled"
    time.sleep(0.05)
took = time.time() - t0
code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "20",
                       "-H", "Content-Type: application/json", f"http://127.0.0.1:{port}/v1/completions",
                       "-d", '{"prompt":"x","max_tokens":1}'], capture_output=True, text=True).stdout
assert code == "200", f"the next request got {code} (429: the slot is still held)"
print(f"cancelled {took:.2f} s after the request, then the next request got 200")
s.close()
PY
echo "server_limits: slow reader: $(cat "$tmp/slow.out")"

# --- half-close: a client that shuts its sending side still gets the whole answer
python3 - "$port" >"$tmp/half.out" <<'PY' || fail "half-close: $(cat "$tmp/half.out")"
import json, socket, sys
port = int(sys.argv[1])
for stream in (False, True):
    s = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"prompt": "Half", "max_tokens": 40, "stream": stream}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    s.shutdown(socket.SHUT_WR)
    wire = b""
    s.settimeout(20)
    while chunk := s.recv(65536):
        wire += chunk
    s.close()
    assert b"HTTP/1.1 200 OK\r\n" in wire, wire[:300]
    if stream:
        assert wire.count(b"data: {") >= 2 and b"data: [DONE]" in wire, wire[-300:]
        assert b'"finish_reason":"length"' in wire, wire[-300:]
    else:
        d = json.loads(wire.split(b"\r\n\r\n")[-1])
        assert d["usage"]["completion_tokens"] == 40, d
print("whole and streamed answers complete")
PY
echo "server_limits: half-close: $(cat "$tmp/half.out")"
grep -q "cancelled (client gone" "$tmp/slow.log" && fail "a half-closed client's generation was cancelled"

# --- many large bodies at once: 503 past --max-body-memory, and the memory given back
start_server bodies --model "$tmp/demo" --max-request-bytes 4000000 --max-body-memory 64M
python3 - "$port" "$pid" >"$tmp/bodies.out" <<'PY' || fail "bodies: $(cat "$tmp/bodies.out")"
import socket, sys, threading, time
port, pid = int(sys.argv[1]), sys.argv[2]
def rss_mib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
N = 4_000_000
def body():  # JSON without a prompt: a quick 400 once read whole
    filler = b"a" * (N - 16)
    b = b'{"mystery":"' + filler + b'"}'
    return b + b" " * (N - len(b))
def head():
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n" % N)
def reply(s):
    s.settimeout(30)
    wire = b""
    try:
        while chunk := s.recv(65536):
            wire += chunk
    except OSError:
        pass
    s.close()
    return wire
base = rss_mib()
data = body()
peak = 0
for round_ in range(3):
    # 16 bodies of 4 MB fill the 64 MiB: each sends its head and a first MB and holds.
    held = []
    for _ in range(16):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(head() + data[:1_000_000])
        held.append(s)
    time.sleep(0.3)
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(head())
    over = reply(s)
    assert over.startswith(b"HTTP/1.1 503 "), over[:200]
    assert b"Retry-After: 1\r\n" in over and b"server_overloaded" in over, over[:400]
    for s in held:
        s.sendall(data[1_000_000:])
    for s in held:
        r = reply(s)
        assert r.startswith(b"HTTP/1.1 400 "), r[:300]
    peak = max(peak, rss_mib())
    # Then 40 full bodies from 40 threads at once: those that fit get 400, the rest 503.
    out = []
    def one():
        s = socket.create_connection(("127.0.0.1", port))
        try:
            s.sendall(head() + data)
        except OSError:
            pass
        out.append(reply(s)[:12])
    ts = [threading.Thread(target=one) for _ in range(40)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert all(o in (b"HTTP/1.1 400", b"HTTP/1.1 503") for o in out), out
    assert b"HTTP/1.1 400" in out, out
    peak = max(peak, rss_mib())
time.sleep(0.5)
after = rss_mib()
print(f"RSS {base:.0f} MiB before, {peak:.0f} MiB at the peak, {after:.0f} MiB after")
assert after - base < 32, f"{after - base:.0f} MiB of request bodies stayed allocated"
PY
echo "server_limits: bodies: $(cat "$tmp/bodies.out")"

for bad in "--max-body-memory 1M --max-request-bytes 2000000:less than --max-request-bytes" \
  "--max-body-memory 0:must be positive" "--max-body-memory 3X:--max-body-memory: '3X' is not a size"; do
  # shellcheck disable=SC2086
  timeout 20 "$deltafin" serve --model "$tmp/demo" --port 0 ${bad%%:*} 2>"$tmp/err" && rc=0 || rc=$?
  [[ $rc == 1 ]] && grep -qF -- "${bad#*:}" "$tmp/err" || fail "${bad%%:*}: exit $rc, $(tail -1 "$tmp/err")"
done

# --- what a web page could send is refused; --allow-origin lets one origin's pages in
start_server browser --model "$tmp/demo"
base="http://127.0.0.1:$port"
chat='{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
status "json post" 200 "${ct[@]}" "$base/v1/chat/completions" -d "$chat"
status "Host localhost:port" 200 -H "Host: localhost:$port" "$base/v1/models"
status "rebound Host" 421 -H "Host: attacker.example:$port" "$base/v1/models"
[[ "$(json "$tmp/out" "d['error']['code']")" == invalid_host ]] || fail "rebound Host: code"
status "rebound Host, POST" 421 -H "Host: attacker.example" "${ct[@]}" "$base/v1/chat/completions" -d "$chat"
status "cross-origin POST" 403 -H "Origin: http://attacker.example" "${ct[@]}" \
  "$base/v1/chat/completions" -d "$chat"
grep -qi '^access-control-allow-origin' "$tmp/h" && fail "CORS header sent to a refused origin"
status "cross-origin preflight" 403 -X OPTIONS -H "Origin: http://attacker.example" \
  -H "Access-Control-Request-Method: POST" "$base/v1/chat/completions"
status "no-cors GET" 403 -H "Sec-Fetch-Site: cross-site" "$base/v1/models"
status "form post" 415 "$base/v1/chat/completions" -d "$chat"  # curl's default: a form
status "text/plain post" 415 -H "Content-Type: text/plain" "$base/v1/chat/completions" -d "$chat"
[[ "$(json "$tmp/out" "d['error']['code']")" == unsupported_media_type ]] || fail "415: code"
start_server cors --model "$tmp/demo" --allow-origin http://localhost:5173
base="http://127.0.0.1:$port"
status "allowed preflight" 200 -X OPTIONS -H "Origin: http://localhost:5173" \
  -H "Access-Control-Request-Method: POST" -H "Access-Control-Request-Headers: content-type" \
  "$base/v1/chat/completions"
grep -qi '^access-control-allow-origin: http://localhost:5173' "$tmp/h" || fail "preflight: no ACAO"
grep -qi '^access-control-allow-headers: content-type' "$tmp/h" || fail "preflight: no ACAH"
status "allowed POST" 200 -H "Origin: http://localhost:5173" "${ct[@]}" \
  "$base/v1/chat/completions" -d "$chat"
grep -qi '^access-control-allow-origin: http://localhost:5173' "$tmp/h" || fail "POST: no ACAO"
status "other origin" 403 -H "Origin: http://localhost:5174" "$base/v1/models"
timeout 20 "$deltafin" serve --model "$tmp/demo" --port 0 --allow-origin localhost:5173 \
  2>"$tmp/err" && rc=0 || rc=$?
[[ $rc == 1 ]] && grep -q "is not an origin" "$tmp/err" ||
  fail "--allow-origin without a scheme: exit $rc, $(tail -1 "$tmp/err")"

# --- SIGTERM: stop accepting, end requests in flight properly, exit 0
for mode in stream whole; do
  start_server "term-$mode" --model "$tmp/demo" --shutdown-grace-ms 500 --max-tokens-limit 1000000
  term_pid=$pid
  stream=$([[ $mode == stream ]] && echo true || echo false)
  command curl -sN -m 30 "${ct[@]}" "http://127.0.0.1:$port/v1/completions" \
    -d "{\"prompt\":\"Count:\",\"max_tokens\":30000,\"stream\":$stream}" >"$tmp/term.out" &
  client=$!
  bg_pids+=("$client")
  sleep 1  # the generation is under way (30000 tokens take far longer)
  t0=$(date +%s%N)
  kill -TERM "$term_pid"
  sleep 0.1
  command curl -s -m 5 -o /dev/null "http://127.0.0.1:$port/health" && fail "$mode: accepting after SIGTERM"
  wait "$term_pid" && rc=0 || rc=$?
  t1=$(date +%s%N)
  wait "$client" || true
  [[ $rc == 0 ]] || fail "$mode: serve exited $rc after SIGTERM, want 0"
  ((t1 - t0 < 5000000000)) || fail "$mode: serve took $(((t1 - t0) / 1000000)) ms to stop"
  if [[ $mode == stream ]]; then
    tail -c 600 "$tmp/term.out" | grep -q '"code":"server_shutting_down"' ||
      fail "stream: no error event: $(tail -c 300 "$tmp/term.out")"
    [[ "$(tail -n 2 "$tmp/term.out" | head -1)" == "data: [DONE]" ]] ||
      fail "stream: does not end with [DONE]: $(tail -c 300 "$tmp/term.out")"
  else
    [[ "$(json "$tmp/term.out" "d['error']['code']")" == server_shutting_down ]] ||
      fail "whole: not the shutdown error: $(head -c 300 "$tmp/term.out")"
  fi
  echo "server_limits: SIGTERM ($mode): exit $rc after $(((t1 - t0) / 1000000)) ms"
done

if ((failures > 0)); then
  exit 1
fi
echo "server_limits: PASS"
