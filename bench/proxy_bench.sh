#!/usr/bin/env bash
# The gateway's overhead as a proxy, against nginx, in one run.
#
# One fast upstream (an nginx that answers every POST with a fixed JSON body at once), and in front
# of it, in turn: nothing (direct), nginx (proxy_pass, upstream keepalive) and `warden serve`.
# wrk measures requests per second at 32 connections (interleaved rounds: the ratio over their sum,
# and the geometric mean of the rounds' ratios with its 95 % interval, bench/ratio_interval.py)
# and latency p50/p99 at 1 connection; the added latency is the proxy's p50/p99 minus the direct
# one; CPU per request is the proxy's own CPU time (from /proc) over the requests it served. Both
# proxies get the same number of workers. Two request bodies: a small chat request, and the
# captured 86 KB Claude Code turn.
#
# With TLS=1 both proxies serve their clients over TLS (the test certificate in tests/fixtures/tls;
# wrk's connections are kept alive, so this is the cost of encryption, not of handshakes); the
# upstream stays plain.
#
# Usage: [ROUNDS=4] [TLS=1] bench/proxy_bench.sh [seconds-per-run]   (needs build/warden; installs wrk, nginx-light)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
WORKERS=${WORKERS:-2}
WARDEN=${WARDEN:-build/warden}
[[ -x $WARDEN ]] || { echo "build first: make build" >&2; exit 1; }
WARDEN_WITH_BENCH=1 scripts/install-deps.sh

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
SCHEME=http
if [[ -n ${TLS:-} ]]; then
  SCHEME=https
  PROXY_TLS_CERT=$PWD/tests/fixtures/tls/localhost-cert.pem
  PROXY_TLS_KEY=$PWD/tests/fixtures/tls/localhost-key.pem
fi
. bench/proxy_setup.sh

UP=$(free_port); NGX=$(free_port)

write_upstream_conf "$UP"
write_proxy_conf "$NGX" "$UP" "$WORKERS"
nginx -c "$work/up/nginx.conf" -p "$work/up" & pids+=($!)
nginx -c "$work/ngx/nginx.conf" -p "$work/ngx" & pids+=($!)
warden_tls=()
[[ -n ${PROXY_TLS_CERT:-} ]] && warden_tls=(--tls-cert-file "$PROXY_TLS_CERT" --tls-key-file "$PROXY_TLS_KEY")
$WARDEN serve --listen 127.0.0.1:0 --model m --url "http://127.0.0.1:$UP" --threads "$WORKERS" \
  "${warden_tls[@]}" > "$work/warden.out" 2> "$work/warden.err" & pids+=($!)
for _ in $(seq 100); do grep -q "listening" "$work/warden.out" 2>/dev/null && break; sleep 0.1; done
WARDEN_PORT=$(grep -Eo 'listening https?://127.0.0.1:[0-9]*' "$work/warden.out" | grep -o '[0-9]*$')
for _ in $(seq 50); do curl -skf "$SCHEME://127.0.0.1:$NGX/health" >/dev/null && break; sleep 0.1; done

write_wrk_scripts

# wrk output -> "rps p50_us p99_us non2xx requests"
measure() {  # url script connections
  wrk -t1 -c"$3" -d"${SECONDS_PER_RUN}s" --latency -s "$2" "$1" 2>/dev/null | python3 -c '
import re, sys
t = sys.stdin.read()
def us(v, unit): return float(v) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]
rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", t).group(1))
n = int(re.search(r"(\d+) requests in", t).group(1))
p = {m.group(1): us(m.group(2), m.group(3)) for m in re.finditer(r"\s+(50|99)%\s+([0-9.]+)(us|ms|s)", t)}
errors = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
print("%.0f %.0f %.0f %s %d" % (rps, p.get("50", 0), p.get("99", 0), errors.group(1) if errors else 0, n))'
}

# CPU time (user and system, in clock ticks) of the given processes so far: "user system".
cpu_ticks() { local tu=0 tk=0 u k; for p in "$@"; do read -r u k < <(awk '{print $14, $15}' "/proc/$p/stat"); tu=$((tu + u)); tk=$((tk + k)); done; echo "$tu $tk"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
NGX_WORKERS=$(pgrep -P "${pids[1]}" | tr '\n' ' ')
WARDEN_PID=${pids[2]}

# Throughput is measured in ROUNDS interleaved rounds (nginx then warden, then warden then nginx,
# ...), so that a slow spell of the shared machine does not land on one proxy only; CPU per
# request is the proxy's own processes' CPU time over the requests served at 32 connections.
ROUNDS=${ROUNDS:-4}
echo "| body | target | req/s at 32 conn | CPU per request (µs: user + system) | p50 at 1 conn (µs) | p99 at 1 conn (µs) | added p50 (µs) | added p99 (µs) | non-2xx |"
echo "|---|---|---|---|---|---|---|---|---|"
for body in small claude; do
  script="$work/$body.lua"
  read -r d_rps _ _ _ _ <<< "$(measure "http://127.0.0.1:$UP" "$script" 32)"
  read -r _ d50 d99 _ _ <<< "$(measure "http://127.0.0.1:$UP" "$script" 1)"
  echo "| $body | direct | $d_rps | | $d50 | $d99 | | | |"
  declare -A rps_sum=() req_sum=() user_sum=() sys_sum=() errs=()
  ratios=() exact=()  # indexed by round: listed in round order
  for round in $(seq "$ROUNDS"); do
    order="nginx warden"; (( round % 2 == 0 )) && order="warden nginx"
    declare -A round_rps=()
    for target in $order; do
      port=$NGX; procs=$NGX_WORKERS
      [[ $target == warden ]] && { port=$WARDEN_PORT; procs=$WARDEN_PID; }
      read -r user0 sys0 <<< "$(cpu_ticks $procs)"
      read -r r_rps _ _ r_err r_n <<< "$(measure "$SCHEME://127.0.0.1:$port" "$script" 32)"
      read -r user1 sys1 <<< "$(cpu_ticks $procs)"
      round_rps[$target]=$r_rps
      rps_sum[$target]=$(( ${rps_sum[$target]:-0} + r_rps ))
      req_sum[$target]=$(( ${req_sum[$target]:-0} + r_n ))
      user_sum[$target]=$(( ${user_sum[$target]:-0} + user1 - user0 ))
      sys_sum[$target]=$(( ${sys_sum[$target]:-0} + sys1 - sys0 ))
      errs[$target]=$(( ${errs[$target]:-0} + r_err ))
    done
    exact[$round]=$(python3 -c "print(${round_rps[warden]} / ${round_rps[nginx]})")
    ratios[$round]=$(LC_ALL=C printf '%.2f' "${exact[$round]}")
  done
  for target in nginx warden; do
    port=$NGX; [[ $target == warden ]] && port=$WARDEN_PORT
    read -r _ p50 p99 err2 _ <<< "$(measure "$SCHEME://127.0.0.1:$port" "$script" 1)"
    cpu=$(python3 -c "u, k = (t * $TICK_US / ${req_sum[$target]} for t in (${user_sum[$target]}, ${sys_sum[$target]})); print(f'{u + k:.1f} ({u:.1f} + {k:.1f})')")
    echo "| $body | $target | $(( ${rps_sum[$target]} / ROUNDS )) | $cpu | $p50 | $p99 | $((p50 - d50)) | $((p99 - d99)) | $(( ${errs[$target]} + err2 )) |"
  done
  spread=$(python3 bench/ratio_interval.py "${exact[@]}")
  python3 -c "print(f'| $body | warden / nginx req/s | {${rps_sum[warden]} / ${rps_sum[nginx]}:.2f}x (rounds: ${ratios[*]}; $spread) | | | | | | |')"
done
