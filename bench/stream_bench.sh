#!/usr/bin/env bash
# What relaying streams costs the gateway, against nginx: the CPU each proxy spends per streamed
# response and per event, with events coming as a model generates them.
#
# The upstream is `warden sim` (one server, its replies 256 tokens, each token an event of
# vLLM's chat-completion stream, paced by its engine model at --time-scale); in front of it, in
# turn, nginx (proxy_pass, upstream keepalive, proxy_buffering off: each event goes on as it
# comes) and `warden serve`, both with 2 workers. wrk keeps 64 streams going through each for
# the run, in interleaved rounds; CPU is each proxy's own (from /proc) over what it relayed, in
# streams' worth of bytes (wrk counts the bytes of streams cut at the run's end too, and the
# streams end in batches of 64, so a count of whole streams would move by a batch). Both proxies see the same upstream and the same requests, so their figures
# compare; the direct run says what the clients got without a proxy.
#
# Usage: [ROUNDS=2] [TIME_SCALE=4] bench/stream_bench.sh [seconds-per-run]   (needs build/warden)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
ROUNDS=${ROUNDS:-2}
TIME_SCALE=${TIME_SCALE:-4}
WARDEN=${WARDEN:-build/warden}
[[ -x $WARDEN ]] || { echo "build first: make build" >&2; exit 1; }
WARDEN_WITH_BENCH=1 scripts/install-deps.sh

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
. bench/proxy_setup.sh

SIM=$(free_port); NGX=$(free_port)
$WARDEN sim --port "$SIM" --model m --time-scale "$TIME_SCALE" --reply-tokens 256 --api-latency 0 \
  > "$work/sim.out" 2>&1 & pids+=($!)
write_proxy_conf "$NGX" "$SIM" 2
nginx -c "$work/ngx/nginx.conf" -p "$work/ngx" & pids+=($!)
$WARDEN serve --listen 127.0.0.1:0 --model m --url "http://127.0.0.1:$SIM" --threads 2 \
  > "$work/warden.out" 2> "$work/warden.err" & pids+=($!)
for _ in $(seq 100); do grep -q "listening" "$work/warden.out" 2>/dev/null && break; sleep 0.1; done
WARDEN_PORT=$(grep -Eo 'listening http://127.0.0.1:[0-9]*' "$work/warden.out" | grep -o '[0-9]*$')
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$SIM/health" >/dev/null && break; sleep 0.1; done
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$NGX/health" >/dev/null && break; sleep 0.1; done

write_stream_script 64 "$SIM"
EVENTS=$(cat "$work/events")
STREAM_BYTES=$(stat -c %s "$work/one-stream.txt")

# wrk output -> "streams_per_s requests MB_read non2xx"
measure() {  # url
  wrk -t1 -c64 -d"${SECONDS_PER_RUN}s" -s "$work/stream.lua" "$1" 2>/dev/null | python3 -c '
import re, sys
t = sys.stdin.read()
rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", t).group(1))
n = int(re.search(r"(\d+) requests in", t).group(1))
m = re.search(r"requests in [^,]+, ([0-9.]+)(KB|MB|GB) read", t)
mb = float(m.group(1)) * {"KB": 1 / 1024, "MB": 1, "GB": 1024}[m.group(2)]
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
print("%.1f %d %.1f %s" % (rps, n, mb, errors.group(1) if errors else 0))'
}
cpu_ticks() { local tu=0 tk=0 u k; for p in "$@"; do read -r u k < <(awk '{print $14, $15}' "/proc/$p/stat"); tu=$((tu + u)); tk=$((tk + k)); done; echo "$tu $tk"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
NGX_WORKERS=$(pgrep -P "${pids[1]}" | tr '\n' ' ')
WARDEN_PID=${pids[2]}

echo "$EVENTS events (data: lines), $STREAM_BYTES bytes per stream, straight from the simulator"
echo
echo "| target | streams/s at 64 at once | MB relayed | CPU per stream (µs: user + system) | CPU per event (µs) | non-2xx |"
echo "|---|---|---|---|---|---|"
read -r d_rps _ d_mb d_err <<< "$(measure "http://127.0.0.1:$SIM")"
echo "| direct | $d_rps | $d_mb | | | $d_err |"
declare -A n_sum=() mb_sum=() user_sum=() sys_sum=() errs=() rps_sum=()
for round in $(seq "$ROUNDS"); do
  order="nginx warden"; (( round % 2 == 0 )) && order="warden nginx"
  for target in $order; do
    port=$NGX; procs=$NGX_WORKERS
    [[ $target == warden ]] && { port=$WARDEN_PORT; procs=$WARDEN_PID; }
    read -r user0 sys0 <<< "$(cpu_ticks $procs)"
    read -r r_rps r_n r_mb r_err <<< "$(measure "http://127.0.0.1:$port")"
    read -r user1 sys1 <<< "$(cpu_ticks $procs)"
    n_sum[$target]=$(( ${n_sum[$target]:-0} + r_n ))
    mb_sum[$target]=$(python3 -c "print(${mb_sum[$target]:-0} + $r_mb)")
    rps_sum[$target]=$(python3 -c "print(${rps_sum[$target]:-0} + $r_rps)")
    user_sum[$target]=$(( ${user_sum[$target]:-0} + user1 - user0 ))
    sys_sum[$target]=$(( ${sys_sum[$target]:-0} + sys1 - sys0 ))
    errs[$target]=$(( ${errs[$target]:-0} + r_err ))
  done
done
for target in nginx warden; do
  python3 -c "
n, u, k = ${mb_sum[$target]} * 1048576 / $STREAM_BYTES, ${user_sum[$target]} * $TICK_US, ${sys_sum[$target]} * $TICK_US
print(f'| $target | {${rps_sum[$target]} / $ROUNDS:.1f} | {${mb_sum[$target]}:.1f} | {(u + k) / n:.0f} ({u / n:.0f} + {k / n:.0f}) | {(u + k) / n / $EVENTS:.2f} | ${errs[$target]} |')"
done
python3 -c "
w = (${user_sum[warden]} + ${sys_sum[warden]}) / ${mb_sum[warden]}
g = (${user_sum[nginx]} + ${sys_sum[nginx]}) / ${mb_sum[nginx]}
print(f'| warden / nginx CPU per stream | {w / g:.2f}x | | | | |')"
