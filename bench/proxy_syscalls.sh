#!/usr/bin/env bash
# Socket system calls per proxied request, gateway against nginx: reads, reads that found nothing
# (EAGAIN), peeks and writes, counted inside each proxy by an LD_PRELOAD shim
# (bench/syscall_count.c), under the load of bench/proxy_bench.sh (wrk, 32 connections, the small
# chat request; both proxies with 2 workers in front of the same fast upstream).
#
# Usage: bench/proxy_syscalls.sh [seconds-per-run]   (needs build/warden; installs wrk, nginx-light)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN=${1:-5}
WARDEN=${WARDEN:-build/warden}
[[ -x $WARDEN ]] || { echo "build first: make build" >&2; exit 1; }
WARDEN_WITH_BENCH=1 scripts/install-deps.sh

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

gcc -O2 -shared -fPIC -o "$work/syscall_count.so" bench/syscall_count.c -ldl -lpthread
export SYSCALL_COUNT_DIR=$work/counts
mkdir -p "$SYSCALL_COUNT_DIR"
chmod 755 "$work"                # nginx's workers open theirs (as root) and write them later
chmod 777 "$SYSCALL_COUNT_DIR"

. bench/proxy_setup.sh
UP=$(free_port); NGX=$(free_port); WP=$(free_port)
write_upstream_conf "$UP"
write_proxy_conf "$NGX" "$UP" 2
write_wrk_scripts
nginx -c "$work/up/nginx.conf" -p "$work/up" & pids+=($!)
LD_PRELOAD=$work/syscall_count.so nginx -c "$work/ngx/nginx.conf" -p "$work/ngx" & pids+=($!)
LD_PRELOAD=$work/syscall_count.so $WARDEN serve --listen "127.0.0.1:$WP" --model m \
  --url "http://127.0.0.1:$UP" --threads 2 > "$work/warden.out" 2>&1 & pids+=($!)
for port in $NGX $WP; do
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.1; done
done

# Totals over the given processes' count files: "reads failed peeks writes".
totals() {
  local r=0 f=0 p=0 w=0 a b c d
  for pid in "$@"; do
    read -r a b c d < "$SYSCALL_COUNT_DIR/$pid"
    r=$((r + a)); f=$((f + b)); p=$((p + c)); w=$((w + d))
  done
  echo "$r $f $p $w"
}

echo "| proxy | requests | reads per request | of which found nothing (EAGAIN) | of which peeks | writes per request |"
echo "|---|---|---|---|---|---|"
for target in nginx warden; do
  port=$NGX; procs=$(pgrep -P "${pids[1]}" | tr '\n' ' ')
  [[ $target == warden ]] && { port=$WP; procs=${pids[2]}; }
  wrk -t1 -c32 -d2s -s "$work/small.lua" "http://127.0.0.1:$port" > /dev/null
  sleep 1.5  # the shim rewrites its counts every second
  read -r r0 f0 p0 w0 <<< "$(totals $procs)"
  out=$(wrk -t1 -c32 -d"${SECONDS_PER_RUN}s" -s "$work/small.lua" "http://127.0.0.1:$port")
  n=$(grep -o '[0-9]* requests in' <<< "$out" | cut -d' ' -f1)
  if grep -q "Non-2xx" <<< "$out"; then echo "$target answered errors: $out" >&2; exit 1; fi
  sleep 1.5
  read -r r1 f1 p1 w1 <<< "$(totals $procs)"
  python3 -c "
n = $n
print(f'| $target | {n} | {($r1 - $r0) / n:.2f} | {($f1 - $f0) / n:.2f} | {($p1 - $p0) / n:.2f} | {($w1 - $w0) / n:.2f} |')"
done
