#!/usr/bin/env bash
# `deltafin serve` at the HTTP level with curl, on the demo model: every refusal (400, 401, 404,
# 405, 413, 429, 431) in OpenAI's error shape, a client hang-up cancelling its generation (streamed
# and not), and the exact-response memo (and --no-memo). State reuse: server_reuse.sh.
# usage: server_curl.sh DELTAFIN TESTS_DIR
set -euo pipefail
deltafin=$1
tests=$2
tmp=$(mktemp -d)
source "$tests/e2e/lib/server.sh"
source "$tests/e2e/lib/tally.sh"
# Every request declares its body JSON, as the SDKs do: the server refuses a POST without it (415,
# what a web page could send; server_limits.sh tests that).
curl() { command curl -H "Content-Type: application/json" "$@"; }

"$deltafin" synth --out "$tmp/demo" --preset demo >/dev/null
# An empty key is refused at startup, not taken as "no key" (bounded: it must not start serving).
for empty in flag env; do
  if [[ $empty == env ]]; then
    DELTAFIN_API_KEY= timeout 20 "$deltafin" serve --model "$tmp/demo" --port 0 2>"$tmp/err" && rc=0 || rc=$?
  else
    timeout 20 "$deltafin" serve --model "$tmp/demo" --port 0 --api-key "" 2>"$tmp/err" && rc=0 || rc=$?
  fi
  [[ $rc != 0 && $rc != 124 ]] && grep -q "empty" "$tmp/err" ||
    fail "empty API key ($empty): exit $rc, $(head -c 300 "$tmp/err")"
done
start_server main --model "$tmp/demo" --api-key k --max-request-bytes 100000 \
  --max-tokens-limit 1000000
base="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer k")

# expect NAME STATUS CODE PARAM -- CURL_ARGS...: the status, and error.code / error.param when
# given ("-" skips), in the OpenAI error shape.
expect() {
  local name=$1 status=$2 code=$3 param=$4
  shift 5
  local got
  got=$(curl -s -o "$tmp/out" -w '%{http_code}' "$@") || true
  if [[ $got != "$status" ]]; then
    fail "$name: status $got, want $status: $(head -c 300 "$tmp/out")"
    return
  fi
  [[ $status == 200 ]] && return
  local shape
  shape=$(json "$tmp/out" "sorted(d['error'].keys()) == ['code','message','param','type'] and bool(d['error']['message'])")
  [[ $shape == True ]] || fail "$name: not an OpenAI error body: $(head -c 300 "$tmp/out")"
  [[ $code == - || "$(json "$tmp/out" "d['error']['code']")" == "$code" ]] ||
    fail "$name: error.code $(json "$tmp/out" "d['error']['code']"), want $code"
  [[ $param == - || "$(json "$tmp/out" "d['error']['param']")" == "$param" ]] ||
    fail "$name: error.param $(json "$tmp/out" "d['error']['param']"), want $param"
}
chat() { echo "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]$1}"; }
post_chat() { expect "$1" "$2" "$3" "$4" -- "${auth[@]}" "$base/v1/chat/completions" -d "$(chat "$5")"; }

# --- refusals
expect "no key" 401 - - -- "$base/v1/models"
expect "wrong key" 401 invalid_api_key - -- -H "Authorization: Bearer nope" "$base/v1/models"
expect "models" 200 - - -- "${auth[@]}" "$base/v1/models"
expect "unknown path" 404 unknown_url - -- "${auth[@]}" "$base/v1/embeddings" -d '{}'
expect "wrong method" 405 method_not_allowed - -- "${auth[@]}" -X DELETE "$base/v1/models"
expect "malformed json" 400 invalid_json - -- "${auth[@]}" "$base/v1/chat/completions" -d '{"messages":'
printf '{"messages":[{"role":"user","content":"hi"}]}\0anything' >"$tmp/nul.json"
expect "NUL then bytes" 400 invalid_json - -- "${auth[@]}" "$base/v1/chat/completions" \
  --data-binary "@$tmp/nul.json"
post_chat "unknown model" 404 model_not_found model ',"model":"gpt-4o"'
post_chat "n" 400 unsupported_value n ',"n":3'
post_chat "logprobs" 400 unsupported_parameter logprobs ',"logprobs":true'
post_chat "top_logprobs" 400 unsupported_parameter top_logprobs ',"top_logprobs":3'
post_chat "penalty" 400 unsupported_parameter presence_penalty ',"presence_penalty":1'
post_chat "logit_bias" 400 unsupported_parameter logit_bias ',"logit_bias":{"1":5}'
post_chat "unknown field" 400 unknown_parameter mystery ',"mystery":1'
post_chat "effort" 400 unsupported_value reasoning_effort ',"reasoning_effort":"medium"'
post_chat "ceiling" 400 invalid_value max_tokens ',"max_tokens":2000000'
post_chat "context" 400 context_length_exceeded max_tokens ',"max_tokens":40000'
post_chat "temperature" 400 invalid_value temperature ',"temperature":3'
post_chat "stop count" 400 invalid_value stop ',"stop":["a","b","c","d","e"]'
post_chat "stream_options" 400 invalid_value stream_options ',"stream_options":{"include_usage":true}'
post_chat "named tool_choice" 400 unsupported_value tool_choice \
  ',"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}'
post_chat "image" 400 unsupported_value "messages[0].content[0].type" \
  ',"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]'
expect "completion prompt ids" 400 invalid_value prompt -- "${auth[@]}" "$base/v1/completions" \
  -d '{"prompt":[1,2,999999]}'
expect "suffix" 400 unsupported_parameter suffix -- "${auth[@]}" "$base/v1/completions" \
  -d '{"prompt":"a","suffix":"b"}'
head -c 300000 /dev/zero | tr '\0' 'x' >"$tmp/big"
expect "body too large" 413 request_too_large - -- "${auth[@]}" "$base/v1/completions" \
  --data-binary @"$tmp/big"
expect "body too large, chunked" 413 request_too_large - -- "${auth[@]}" \
  -H "Transfer-Encoding: chunked" "$base/v1/completions" --data-binary @"$tmp/big"
expect "head too large" 431 - - -- "${auth[@]}" -H "X-Big: $(head -c 70000 /dev/zero | tr '\0' 'y')" \
  "$base/v1/models"

# --- one generation at a time: 429 while /v1/models answers; a hang-up cancels within a token
cancelled() { grep -c "cancelled (client gone" "$tmp/main.log" || true; }
command curl -sN -H "Content-Type: application/json" "${auth[@]}" "$base/v1/completions" \
  -d '{"prompt":"Count:","max_tokens":30000,"stream":true}' >"$tmp/long" &
long=$!
bg_pids+=("$long")
for _ in $(seq 1 200); do grep -q '^data: ' "$tmp/long" && break; sleep 0.05; done
grep -q '^data: ' "$tmp/long" || fail "the long generation did not start"
expect "busy" 429 server_busy - -- "${auth[@]}" "$base/v1/completions" -d '{"prompt":"x"}'
curl -s -D "$tmp/h" -o /dev/null "${auth[@]}" "$base/v1/completions" -d '{"prompt":"x"}' || true
grep -qi '^retry-after: 1' "$tmp/h" || fail "429 without Retry-After"
expect "models while busy" 200 - - -- "${auth[@]}" "$base/v1/models"
before=$(cancelled)
t0=$(date +%s%N)
kill "$long"
wait "$long" 2>/dev/null || true
for _ in $(seq 1 400); do [[ $(cancelled) -gt $before ]] && break; sleep 0.005; done
t1=$(date +%s%N)
[[ $(cancelled) -gt $before ]] || fail "the streamed generation was not cancelled on hang-up"
echo "server_curl: streamed generation cancelled $(((t1 - t0) / 1000000)) ms after the hang-up"
expect "free again" 200 - - -- "${auth[@]}" "$base/v1/completions" -d '{"prompt":"x","max_tokens":1}'
# A non-streamed request whose client gives up (curl --max-time) is cancelled too.
before=$(cancelled)
curl -s -m 1 "${auth[@]}" "$base/v1/completions" -d '{"prompt":"Go","max_tokens":30000}' \
  >/dev/null || true
for _ in $(seq 1 400); do [[ $(cancelled) -gt $before ]] && break; sleep 0.005; done
[[ $(cancelled) -gt $before ]] || fail "the non-streamed generation was not cancelled on hang-up"

# --- the memo: byte-identical deterministic requests come from it, with fresh ids
body='{"prompt":"Memo me","max_tokens":24}'
curl -s -D "$tmp/h1" -o "$tmp/r1" "${auth[@]}" "$base/v1/completions" -d "$body"
curl -s -D "$tmp/h2" -o "$tmp/r2" "${auth[@]}" "$base/v1/completions" -d "$body"
grep -qi '^x-deltafin-memo: hit' "$tmp/h1" && fail "memo hit on the first request"
grep -qi '^x-deltafin-memo: hit' "$tmp/h2" || fail "no memo hit on the identical second request"
[[ "$(json "$tmp/r1" "d['choices']")" == "$(json "$tmp/r2" "d['choices']")" ]] ||
  fail "the memo answered differently"
[[ "$(json "$tmp/r1" "d['id']")" != "$(json "$tmp/r2" "d['id']")" ]] || fail "the memo reused the id"
sbody='{"prompt":"Memo me","max_tokens":24,"stream":true}'
curl -s -o "$tmp/s1" "${auth[@]}" "$base/v1/completions" -d "$sbody"
curl -s -D "$tmp/h3" -o "$tmp/s2" "${auth[@]}" "$base/v1/completions" -d "$sbody"
grep -qi '^x-deltafin-memo: hit' "$tmp/h3" || fail "no memo hit on a repeated stream"
strip() { sed -E 's/"id":"[^"]*","object":"[^"]*","created":[0-9]*//' "$1"; }
[[ "$(strip "$tmp/s1")" == "$(strip "$tmp/s2")" ]] || fail "the memo's stream differs from the original"
sampled='{"prompt":"Memo me","max_tokens":8,"temperature":1}'
curl -s -o /dev/null "${auth[@]}" "$base/v1/completions" -d "$sampled"
curl -s -D "$tmp/h4" -o /dev/null "${auth[@]}" "$base/v1/completions" -d "$sampled"
grep -qi '^x-deltafin-memo' "$tmp/h4" && fail "an unseeded sampled request was memoized"

start_server nomemo --model "$tmp/demo" --no-memo
nomemo=$port
curl -s -o /dev/null "http://127.0.0.1:$nomemo/v1/completions" -d "$body"
curl -s -D "$tmp/h5" -o "$tmp/r5" "http://127.0.0.1:$nomemo/v1/completions" -d "$body"
grep -qi '^x-deltafin-memo' "$tmp/h5" && fail "--no-memo still memoizes"
[[ "$(json "$tmp/r5" "d['choices']")" == "$(json "$tmp/r1" "d['choices']")" ]] ||
  fail "greedy output differs between servers"

# --- slow and idle clients: a total request deadline, and room for the probes at the limit
start_server limits --model "$tmp/demo" --request-timeout-ms 1000 --max-connections 1
python3 - "$port" >"$tmp/limits.out" <<'PY' || fail "connection limits: $(cat "$tmp/limits.out")"
import socket, subprocess, sys, time
port = int(sys.argv[1])
base = f"http://127.0.0.1:{port}"
def status(*args):
    return subprocess.run(["curl", "-s", "-H", "Content-Type: application/json", "-o", "/dev/null", "-w", "%{http_code}", "-m", "10", *args],
                          capture_output=True, text=True).stdout
# The one connection, held by a client that drips a head, a byte every 50 ms for 10 s.
slow = socket.create_connection(("127.0.0.1", port))
slow.settimeout(0.05)
head = b"GET /v1/models HTTP/1.1\r\nX-Slow: " + b"a" * 200
t0, got = time.time(), b""
checked = False
for i, c in enumerate(head):
    try:
        slow.send(bytes([c]))
    except OSError:
        break
    if i == 3 and not checked:  # the slow client holds the only connection now
        checked = True
        assert status(f"{base}/health") == "200", "/health refused at the connection limit"
        assert status(f"{base}/v1/models") == "200", "/v1/models refused at the connection limit"
        s = status(f"{base}/v1/completions", "-d", '{"prompt":"x","max_tokens":1}')
        assert s == "503", f"a completion at the connection limit got {s}, want 503"
    try:
        got = slow.recv(4096)
        if got:
            break
    except socket.timeout:
        pass
took = time.time() - t0
assert got.startswith(b"HTTP/1.1 408 "), f"the dripping client got {got[:60]!r}, want 408"
assert took < 5, f"408 after {took:.1f} s: the deadline is per byte, not total"
print(f"408 after {took:.2f} s")
PY
echo "server_curl: limits: $(cat "$tmp/limits.out")"

if ((failures > 0)); then
  echo "--- server log (tail)" >&2
  tail -20 "$tmp/main.log" >&2
  exit 1
fi
echo "server_curl: PASS"
