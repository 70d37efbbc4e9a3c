#!/usr/bin/env bash
# The gateway's memory and file descriptors under sustained load: what grows without bound shows
# here, not in a short test.
#
# Two phases, each for the given seconds:
#   1. `warden serve` (2 shards) in front of the fast upstream of proxy_bench.sh, wrk at 32
#      connections, every request a new conversation (Claude Code's header with a new id): the
#      session table fills to its bound (max_sessions, 100,000) and then evicts.
#   2. `warden serve --demo` (simulated replicas, time scale 20), 16 clients that each start a
#      streamed Claude Code turn (of 64 conversations, so that the session table stays small) and
#      hang up at its first token event: every request ends with the client gone mid-stream. At the end, nothing may be left in flight at
#      the gateway or running on the replicas.
# It prints the gateway's resident memory and open descriptors over time, and fails when the
# memory of the last sample is more than 10 % above the one at a third of the phase (after the
# warm-up; with short phases the session table may still be filling then), or it holds 32 more
# descriptors than then; when a request of the first phase fails or the table does not fill; or
# when anything is left in flight, or running on a replica, a few seconds after the hang-ups
# (the turns ask for 16,000 tokens: only a hang-up passed on ends them that soon).
#
# Usage: bench/soak.sh [seconds-per-phase]   (needs build/warden; installs wrk, nginx-light)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_PHASE=${1:-60}
WARDEN=${WARDEN:-build/warden}
[[ -x $WARDEN ]] || { echo "build first: make build" >&2; exit 1; }
WARDEN_WITH_BENCH=1 scripts/install-deps.sh

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
. bench/proxy_setup.sh

rss_kb() { awk '/VmRSS/{print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }

# Starts `warden serve` with the given arguments; sets GW (pid) and GW_PORT.
start_gateway() {
  local out="$work/gw.$RANDOM.out"
  $WARDEN serve --listen 127.0.0.1:0 "$@" > "$out" 2>&1 & GW=$!
  pids+=("$GW")
  for _ in $(seq 300); do grep -q "listening" "$out" 2>/dev/null && break; sleep 0.1; done
  GW_PORT=$(grep -Eo 'listening https?://127.0.0.1:[0-9]*' "$out" | grep -o '[0-9]*$')
}

# Samples the gateway's memory every tenth of the phase while `load_pid` runs; prints them and
# checks the growth after the first third.
watch_memory() {  # phase-name load_pid
  local name=$1 load=$2 step samples=() descriptors=() start=$SECONDS
  step=$(( SECONDS_PER_PHASE / 10 > 1 ? SECONDS_PER_PHASE / 10 : 1 ))
  echo "| $name | seconds | resident memory (MiB) | open descriptors |"
  echo "|---|---|---|---|"
  while kill -0 "$load" 2>/dev/null; do
    local kb
    kb=$(rss_kb "$GW") || { echo "FAIL: the gateway is gone" >&2; exit 1; }
    samples+=("$kb")
    descriptors+=("$(fds "$GW")")
    printf '| | %s | %s.%s | %s |\n' $((SECONDS - start)) $((kb / 1024)) $((kb % 1024 * 10 / 1024)) "${descriptors[-1]}"
    sleep "$step"
  done
  local n=${#samples[@]}
  local base=${samples[$((n / 3))]} last=${samples[$((n - 1))]}
  if (( ${descriptors[$((n - 1))]} > ${descriptors[$((n / 3))]} + 32 )); then
    echo "FAIL: $name: descriptors grew from ${descriptors[$((n / 3))]} to ${descriptors[$((n - 1))]}" >&2
    exit 1
  fi
  python3 -c "
import sys
base, last = $base, $last
print(f'{\"$name\"}: {last / 1024:.1f} MiB at the end, {base / 1024:.1f} MiB after the warm-up ({100 * (last - base) / base:+.1f} %)')
sys.exit(0 if last <= base * 1.10 else 1)" || { echo "FAIL: $name: memory grew" >&2; exit 1; }
}

# Phase 1: a new conversation every request.
UP=$(free_port)
write_upstream_conf "$UP"
nginx -c "$work/up/nginx.conf" -p "$work/up" & pids+=($!)
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$UP/health" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$UP/health" >/dev/null || { echo "FAIL: the upstream did not start" >&2; exit 1; }
start_gateway --model m --url "http://127.0.0.1:$UP" --threads 2
cat > "$work/new.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hello there"}]}'
local n = 0
local prefix = tostring(math.random(1, 1e9))
request = function()
  n = n + 1
  wrk.headers["X-Claude-Code-Session-Id"] = "soak-" .. prefix .. "-" .. n
  return wrk.format(nil, "/v1/chat/completions")
end
LUA
wrk -t1 -c32 -d"${SECONDS_PER_PHASE}s" -s "$work/new.lua" "http://127.0.0.1:$GW_PORT" > "$work/wrk.out" & load=$!
pids+=("$load")
watch_memory "new conversations" "$load"
wait "$load"
known=$(curl -s "http://127.0.0.1:$GW_PORT/warden/v1/models/m" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sessions"]["known"])')
echo "$(grep -Eo '[0-9]+ requests in' "$work/wrk.out" | cut -d' ' -f1) requests; sessions known: $known"
if grep -q "Non-2xx" "$work/wrk.out"; then echo "FAIL: $(grep Non-2xx "$work/wrk.out")" >&2; exit 1; fi
(( known == 100000 )) || { echo "FAIL: the session table did not fill ($known of 100,000)" >&2; exit 1; }
echo

# Phase 2: every client hangs up mid-stream.
start_gateway --demo --time-scale 20
python3 - "$GW_PORT" "$SECONDS_PER_PHASE" > "$work/hangups.out" <<'PY' & load=$!
import json, socket, sys, threading, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
end = time.time() + seconds
counts = {"cut": 0, "errors": 0}
lock = threading.Lock()
def client(k):
    n = 0
    while time.time() < end:
        n += 1
        conversation = f"{k}-{n % 4}"
        body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 16000, "stream": True,
                           "messages": [{"role": "user", "content": f"soak {conversation} " * 200}]})
        head = (f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"X-Claude-Code-Session-Id: hangup-{conversation}\r\nContent-Length: {len(body)}\r\n\r\n")
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(head.encode() + body.encode())
            seen = b""
            while b"content_block_delta" not in seen:
                chunk = s.recv(65536)
                if not chunk:
                    raise OSError("closed before the first token")
                seen += chunk
            s.close()  # mid-stream
            with lock:
                counts["cut"] += 1
        except OSError:
            with lock:
                counts["errors"] += 1
            time.sleep(0.1)
threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(counts))
PY
pids+=("$load")
watch_memory "clients hanging up mid-stream" "$load"
wait "$load"
echo "streams cut by their clients: $(cat "$work/hangups.out")"
# Whatever the hang-ups left must drain: in flight at the gateway, running on the replicas.
left=""
for _ in $(seq 25); do
  left=$(curl -s "http://127.0.0.1:$GW_PORT/warden/v1/models/qwen3-4b-dp4" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(r["in_flight"] for r in d["replicas"]), sum(r["running"] + r["waiting"] for r in d["replicas"]))')
  [[ $left == "0 0" ]] && break
  sleep 0.2
done
echo "left in flight at the gateway, running or waiting on the replicas: $left"
[[ $left == "0 0" ]] || { echo "FAIL: requests left behind" >&2; exit 1; }
python3 -c "import json,sys; c=json.load(open('$work/hangups.out')); sys.exit(0 if c['errors'] == 0 else 1)" ||
  { echo "FAIL: some streams failed before their first token" >&2; exit 1; }
