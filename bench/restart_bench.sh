#!/usr/bin/env bash
# A gateway restarted in the middle of a load test: SIGTERM (it drains) and a new one started on
# the same port at once, with or without a state file; or handed over (SIGUSR2: the new one takes
# the old one's socket, with its state file); against an uninterrupted run.
#
# One `warden sim --dp 4` (time scale 10), one gateway, `warden bench` at SESSIONS sessions for a
# stage of STAGE simulated seconds; the restart comes RESTART_AT simulated seconds in. Prints the
# stage's row of the bench's table for each mode, and any failed requests.
#
# Usage: [SESSIONS=8] [STAGE=120] [RESTART_AT=70] [MODES="no-restart state no-state hand-over"]
#        bench/restart_bench.sh [out-dir]   (needs build/warden)
set -euo pipefail
cd "$(dirname "$0")/.."
W=$PWD/build/warden
[[ -x $W ]] || { echo "build first: make build" >&2; exit 1; }
SESSIONS=${SESSIONS:-8}
STAGE=${STAGE:-120}
RESTART_AT=${RESTART_AT:-70}
OUT=${1:-restart-bench-out}
mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() {  # mode: state | no-state | no-restart | hand-over
  local mode=$1 dir=$OUT/$1 state=()
  rm -rf "$dir"; mkdir -p "$dir"
  local sp gp; sp=$(free_port); gp=$(free_port)
  "$W" sim --port "$sp" --model qwen3-4b-dp4 --dp 4 --time-scale 10 > "$dir/sim.log" 2>&1 &
  local sim=$!
  # Up before the gateway's first health check: a replica refusing it would fail the first turns.
  for _ in $(seq 250); do (exec 3<>"/dev/tcp/127.0.0.1/$sp") 2>/dev/null && break; sleep 0.02; done
  [[ $mode == state || $mode == hand-over ]] &&
    state=(--state-file "$dir/state.json" --state-save-interval 0.5)
  gateway() {  # $1: log file; waits until it listens
    "$W" serve --listen "127.0.0.1:$gp" --model qwen3-4b-dp4 --url "http://127.0.0.1:$sp" --dp 4 \
      --max-num-seqs 32 --scrape-interval 0.1 "${state[@]}" > "$1" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do grep -q listening "$1" && break; sleep 0.02; done
    grep -q listening "$1" || { echo "the gateway did not start: $(cat "$1")" >&2; exit 1; }
    echo $pid
  }
  local gw old=""; gw=$(gateway "$dir/gateway.log")
  "$W" bench --target "http://127.0.0.1:$gp" --model qwen3-4b-dp4 --time-scale 10 \
    --stages "$SESSIONS" --stage-seconds "$STAGE" --variants on --out "$dir/bench" > "$dir/bench.log" 2>&1 &
  local bench=$!
  # The bench starts its stage at once; RESTART_AT simulated seconds are a tenth as many real ones.
  sleep "$(python3 -c "print($RESTART_AT / 10)")"
  if [[ $mode == hand-over ]]; then
    old=$gw
    kill -USR2 "$old"  # a new gateway takes the socket; the old one drains once it is ready
    for _ in $(seq 250); do grep -q "handed over to pid" "$dir/gateway.log" && break; sleep 0.02; done
    gw=$(grep -o "handed over to pid [0-9]*" "$dir/gateway.log" | grep -o "[0-9]*$")
    [[ -n $gw ]] || { echo "no hand-over: $(tail -3 "$dir/gateway.log")" >&2; exit 1; }
  elif [[ $mode != no-restart ]]; then
    old=$gw
    kill -TERM "$old"  # it stops listening at once, then drains
    gw=$(gateway "$dir/gateway-restarted.log")
  fi
  wait "$bench"
  if [[ -n $old ]] && kill -0 "$old" 2>/dev/null; then
    echo "$mode: the old gateway had not exited by the end of the stage" >&2
    kill "$old"
  fi
  kill "$gw" "$sim" 2>/dev/null || true
  wait 2>/dev/null || true
  local row; row=$(grep -E "^\| $SESSIONS \|" "$dir/bench/results.md")
  local errors; errors=$(grep -o '[0-9]* errors$' "$dir/bench.log" | tail -1 | grep -o '^[0-9]*')
  echo "| $mode ${row#| $SESSIONS | on } ${errors:-?} |"
}

# (The bench's rows have no upper bound column: only the lab's do.)
echo "| mode | sessions/h | output tokens/min | TTFB p50 (s) | TTFB p95 (s) | replicas busy | prefix hits (%) | stayed (%) | failed requests |"
echo "|---|---|---|---|---|---|---|---|---|"
for mode in ${MODES:-no-restart state no-state hand-over}; do run "$mode"; done
