#!/usr/bin/env bash
# What clients that compress their bodies cost the others: small plain requests' latency through
# the gateway, alone and while other clients send compressed bodies that decode to the body limit
# (40 KB of gzip each, answered 413 once 32 MiB are decoded: the most decoding a request can ask).
#
# The fast upstream of proxy_bench.sh; `warden serve` with 2 shards in front of it; wrk sends the
# small chat request at 8 connections (latency p50/p99, requests per second), first alone, then
# with a second wrk sending the compressed bodies at 2 connections.
#
# DECODED_MIB=31 makes the compressed bodies valid JSON under the limit instead: decoded, read and
# sent on to the upstream (whose nginx refuses them, 413, past its 1 MiB). PLAIN=1 sends the
# DECODED_MIB bodies uncompressed, for what large plain bodies cost the others.
#
# Usage: [WARDEN=build/warden] [DECODED_MIB=40] [PLAIN=1] bench/decode_flood.sh [seconds-per-run]   (installs wrk, nginx-light)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
WARDEN=${WARDEN:-build/warden}
[[ -x $WARDEN ]] || { echo "build first: make build" >&2; exit 1; }
WARDEN_WITH_BENCH=1 scripts/install-deps.sh

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
. bench/proxy_setup.sh

UP=$(free_port)
write_upstream_conf "$UP"
nginx -c "$work/up/nginx.conf" -p "$work/up" & pids+=($!)
$WARDEN serve --listen 127.0.0.1:0 --model m --url "http://127.0.0.1:$UP" --threads 2 \
  > "$work/warden.out" 2> "$work/warden.err" & pids+=($!)
for _ in $(seq 100); do grep -q "listening" "$work/warden.out" 2>/dev/null && break; sleep 0.1; done
PORT=$(grep -Eo 'listening http://127.0.0.1:[0-9]*' "$work/warden.out" | grep -o '[0-9]*$')
write_wrk_scripts

# 40 MiB of a JSON string's spaces, gzipped: the gateway decodes 32 MiB (its body limit) and
# answers 413.
python3 - "$work" "${DECODED_MIB:-40}" <<'PY'
import gzip, os, sys
work, mib = sys.argv[1], int(sys.argv[2])
body = b'{"model":"m","messages":[{"role":"user","content":"' + b" " * (mib << 20) + b'"}]}'
plain = os.environ.get("PLAIN") == "1"
open(f"{work}/flood.body", "wb").write(body if plain else gzip.compress(body, 9))
coding = "" if plain else 'wrk.headers["Content-Encoding"] = "gzip"'
open(f"{work}/flood.lua", "w").write(f'''
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
{coding}
local f = io.open("{work}/flood.body", "rb")
wrk.body = f:read("*all")
f:close()
request = function() return wrk.format(nil, "/v1/chat/completions") end
''')
PY

# wrk output -> "rps p50_us p99_us"
measure() {  # script connections
  wrk -t1 -c"$2" -d"${SECONDS_PER_RUN}s" --latency -s "$1" "http://127.0.0.1:$PORT" 2>/dev/null |
    python3 -c '
import re, sys
t = sys.stdin.read()
def us(v, unit): return float(v) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]
rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", t).group(1))
p = {m.group(1): us(m.group(2), m.group(3)) for m in re.finditer(r"\s+(50|99)%\s+([0-9.]+)(us|ms|s)", t)}
print("%.0f %.0f %.0f" % (rps, p.get("50", 0), p.get("99", 0)))'
}

kind=$([[ ${PLAIN:-} == 1 ]] && echo "plain ${DECODED_MIB:-40} MiB" || echo compressed)
echo "| small plain requests at 8 connections | req/s | p50 (µs) | p99 (µs) | $kind bodies (req/s) |"
echo "|---|---|---|---|---|"
read -r rps p50 p99 <<< "$(measure "$work/small.lua" 8)"
echo "| alone | $rps | $p50 | $p99 | — |"
wrk -t1 -c2 -d"$((SECONDS_PER_RUN + 2))s" -s "$work/flood.lua" "http://127.0.0.1:$PORT" \
  > "$work/flood.out" 2>&1 &
flood=$!
sleep 1
read -r rps p50 p99 <<< "$(measure "$work/small.lua" 8)"
wait "$flood"
flood_rps=$(grep -Eo 'Requests/sec:[[:space:]]+[0-9.]+' "$work/flood.out" | grep -Eo '[0-9.]+$')
echo "| beside 2 connections of $kind bodies | $rps | $p50 | $p99 | $flood_rps |"
