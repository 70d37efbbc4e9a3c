#!/usr/bin/env bash
# Instructions each proxy spends relaying streams, counted under valgrind's callgrind: steadier
# than CPU time, whose kernel share moves with how events happen to come together.
#
# `warden sim` (replies of 256 tokens, 258 events each, at --time-scale 4) is the upstream; in
# front of it, in turn, `warden serve --threads 1` and nginx (one process), each alone under
# callgrind. wrk keeps 16 streams going for a warm-up, the counters are zeroed, then 20 s more
# are counted (callgrind_control --zero / --dump). Prints each proxy's instructions over the
# streams wrk completed, and per event.
#
# Usage: bench/stream_instructions.sh [seconds]   (needs build/warden; installs valgrind, wrk, nginx-light)
#        PROFILES=dir keeps the callgrind profiles there (for callgrind_annotate --inclusive=yes).
#        WARDEN_ARGS="--stream-keepalive 0" adds arguments to `warden serve` (a setting's cost, say).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_COUNTED=${1:-20}
WARDEN=${WARDEN:-build/warden}
[[ -x $WARDEN ]] || { echo "build first: make build" >&2; exit 1; }
WARDEN_WITH_BENCH=1 scripts/install-deps.sh
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
. bench/proxy_setup.sh

SIM=$(free_port)
$WARDEN sim --port "$SIM" --model m --time-scale 4 --reply-tokens 256 --api-latency 0 \
  > "$work/sim.out" 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$SIM/health" >/dev/null && break; sleep 0.1; done
write_stream_script 16 "$SIM"
EVENTS=$(cat "$work/events")

# Runs wrk against port $2 of process $1 (under callgrind); prints "streams instructions".
count() {
  local pid=$1 port=$2 name=$3
  wrk -t1 -c16 -d5s -s "$work/stream.lua" "http://127.0.0.1:$port" >/dev/null 2>&1
  callgrind_control --zero "$pid" >/dev/null 2>&1
  wrk -t1 -c16 -d"${SECONDS_COUNTED}s" -s "$work/stream.lua" "http://127.0.0.1:$port" > "$work/$name.wrk" 2>&1
  callgrind_control --dump="$name" "$pid" >/dev/null 2>&1
  local streams total
  streams=$(grep -Eo '[0-9]+ requests in' "$work/$name.wrk" | grep -Eo '^[0-9]+')
  total=$(grep -h -m1 '^summary:' "$work/$name".cg.* 2>/dev/null | tail -1 | awk '{print $2}')
  echo "$streams $total"
}

WPORT=$(free_port)
valgrind --tool=callgrind --callgrind-out-file="$work/warden.cg" "$WARDEN" serve \
  --listen "127.0.0.1:$WPORT" --model m --url "http://127.0.0.1:$SIM" --threads 1 \
  ${WARDEN_ARGS:-} > "$work/warden.out" 2>&1 & wpid=$!; pids+=($wpid)
for _ in $(seq 300); do grep -q "listening" "$work/warden.out" 2>/dev/null && break; sleep 0.2; done
read -r w_streams w_total <<< "$(count "$wpid" "$WPORT" warden)"
kill "$wpid"; wait "$wpid" 2>/dev/null || true

NGX=$(free_port)
write_proxy_conf "$NGX" "$SIM" single
valgrind --tool=callgrind --callgrind-out-file="$work/nginx.cg" nginx -c "$work/ngx/nginx.conf" \
  -p "$work/ngx" > "$work/nginx.out" 2>&1 & npid=$!; pids+=($npid)
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$NGX/health" >/dev/null 2>&1 && break; sleep 0.2; done
read -r n_streams n_total <<< "$(count "$npid" "$NGX" nginx)"

echo "$EVENTS events per stream"
echo "| proxy | streams | instructions | per stream | per event |"
echo "|---|---|---|---|---|"
for row in "warden $w_streams $w_total" "nginx $n_streams $n_total"; do
  read -r name streams total <<< "$row"
  python3 -c "print(f'| $name | $streams | {$total / 1e6:.1f} M | {$total / $streams / 1e3:.0f} K | {$total / $streams / $EVENTS / 1e3:.2f} K |')"
done
if [[ -n ${PROFILES:-} ]]; then mkdir -p "$PROFILES"; cp "$work"/*.cg.* "$PROFILES"/; fi
python3 -c "print(f'| warden / nginx | | | {($w_total / $w_streams) / ($n_total / $n_streams):.2f}x | |')"
