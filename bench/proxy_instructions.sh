#!/usr/bin/env bash
# Instructions per proxied request, gateway against nginx: a count that does not move with the
# machine's load, unlike requests per second (bench/proxy_bench.sh).
#
# Each proxy runs alone under valgrind's callgrind (one worker: `warden serve --threads 1`, nginx
# with master_process off) in front of the same fast upstream as proxy_bench.sh; wrk sends the
# small chat request and then the 86 KB Claude Code turn at 8 connections; the count is taken
# between a warm-up and the end of the run (callgrind_control --zero / --dump) and divided by the
# requests wrk completed in that time. For warden it also prints the share spent in Beast's HTTP
# parser (its own code, not what it calls).
#
# Usage: bench/proxy_instructions.sh [seconds-per-run]   (needs build/warden; installs valgrind, wrk, nginx-light)
#        PROFILES=dir keeps the callgrind profiles there (for callgrind_annotate --inclusive=yes).
#        WARDEN_ARGS="--config f.yaml" adds arguments to `warden serve` (a setting's cost, say).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-10}
WARDEN=${WARDEN:-build/warden}
[[ -x $WARDEN ]] || { echo "build first: make build" >&2; exit 1; }
WARDEN_WITH_BENCH=1 scripts/install-deps.sh
command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

. bench/proxy_setup.sh
UP=$(free_port); NGX=$(free_port); WP=$(free_port)
write_upstream_conf "$UP"
write_proxy_conf "$NGX" "$UP" single
nginx -c "$work/up/nginx.conf" -p "$work/up" & pids+=($!)
write_wrk_scripts

requests() { grep -o '[0-9]* requests in' | cut -d' ' -f1; }

# Instructions per request of the proxy on `port` (pid `pid`, profile `out`) for `body`.
count() {  # pid port out body
  local pid=$1 url="http://127.0.0.1:$2" out=$3 body=$4
  wrk -t1 -c8 -d3s -s "$work/$body.lua" "$url" >/dev/null
  callgrind_control --zero "$pid" >/dev/null 2>&1
  local n
  n=$(wrk -t1 -c8 -d"${SECONDS_PER_RUN}s" -s "$work/$body.lua" "$url" | requests)
  callgrind_control --dump="$body" "$pid" >/dev/null 2>&1
  local file
  for _ in $(seq 100); do
    file=$(grep -l "^desc: Trigger: dump $body$" "$out".* 2>/dev/null | head -1 || true)
    [[ -n $file ]] && break
    sleep 0.1
  done
  local total
  total=$(grep -m1 '^summary:' "$file" | awk '{print $2}')
  echo "$n $total $file"
}

# Self instructions of Beast's HTTP parser in a callgrind profile.
beast_parser_share() {  # file total
  callgrind_annotate --threshold=100 "$1" 2>/dev/null |
    awk -v total="$2" '/boost::beast::http::(detail::basic_parser_base|basic_parser<|string_to_field|detail::opt_token_list|validate_list)/ {
      gsub(",", "", $1); s += $1 } END { printf "%.0f%%", 100 * s / total }'
}

start_proxy() {  # name port
  if [[ $1 == nginx ]]; then
    valgrind --tool=callgrind --callgrind-out-file="$work/nginx.cg" \
      nginx -c "$work/ngx/nginx.conf" -p "$work/ngx" 2> "$work/nginx.vg" &
  else
    valgrind --tool=callgrind --callgrind-out-file="$work/warden.cg" \
      $WARDEN serve --listen "127.0.0.1:$2" --model m --url "http://127.0.0.1:$UP" --threads 1 \
      ${WARDEN_ARGS:-} > "$work/warden.out" 2> "$work/warden.vg" &
  fi
  pids+=($!)
  for _ in $(seq 300); do
    curl -s -o /dev/null -XPOST -d '{"model":"m","messages":[]}' "http://127.0.0.1:$2/v1/chat/completions" && return
    sleep 0.2
  done
  echo "$1 did not start" >&2
  exit 1
}

echo "| body | proxy | requests | instructions per request | of which Beast's parser |"
echo "|---|---|---|---|---|"
declare -A per
for proxy in nginx warden; do
  port=$NGX; [[ $proxy == warden ]] && port=$WP
  start_proxy "$proxy" "$port"
  pid=${pids[-1]}
  for body in small claude; do
    read -r n total file <<< "$(count "$pid" "$port" "$work/$proxy.cg" "$body")"
    per[$proxy.$body]=$((total / n))
    share=""
    [[ $proxy == warden ]] && share=$(beast_parser_share "$file" "$total")
    echo "| $body | $proxy | $n | ${per[$proxy.$body]} | $share |"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  [[ -n ${PROFILES:-} ]] && mkdir -p "$PROFILES" && cp "$work/$proxy".cg.* "$PROFILES/"
done
for body in small claude; do
  python3 -c "print(f'| $body | warden / nginx | | {${per[warden.$body]} / ${per[nginx.$body]}:.2f}x | |')"
done
