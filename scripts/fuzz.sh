#!/usr/bin/env bash
# Fuzzes one parser of untrusted input with libFuzzer, under AddressSanitizer and UBSan: what a
# replica streams or answers (observer), what its /metrics say (metrics), a config file (config).
# The target's own sources are compiled here with clang and the fuzzer's instrumentation; the rest
# comes from the build's libraries (make build first). Findings (crash-*, leak-*, timeout-*) and
# the corpus stay in build/fuzz/<target>/.
#
# Usage: scripts/fuzz.sh observer|metrics|config [seconds, default 300]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh observer|metrics|config [seconds]}
seconds=${2:-300}
[[ -f build/libwarden_gateway.a ]] || { echo "build first: make build" >&2; exit 1; }
if ! command -v clang++-14 >/dev/null || [[ ! -f /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ]]; then
  apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null
fi

seeds=()
case $target in
  observer) harness=fuzz/response_observer_fuzz.cc
            sources=(src/core/protocol/response_observer.cc src/core/protocol/reply_content.cc)
            seeds=(tests/fixtures/claude-code-turn1.json) ;;
  metrics)  harness=fuzz/vllm_metrics_fuzz.cc
            sources=(src/core/protocol/vllm_metrics_reader.cc src/util/prometheus.cc) ;;
  config)   harness=fuzz/gateway_config_fuzz.cc
            sources=(src/gateway/config.cc src/net/host_allowlist.cc src/util/glob.cc) ;;
  *) echo "unknown target '$target': observer, metrics or config" >&2; exit 2 ;;
esac

out=build/fuzz/$target
mkdir -p "$out/corpus"
for seed in "${seeds[@]}"; do cp "$seed" "$out/corpus/"; done
[[ -n $(ls -A "$out/corpus") ]] || printf 'x' > "$out/corpus/empty"
clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DBOOST_ASIO_SEPARATE_COMPILATION -DBOOST_ASIO_NO_DEPRECATED -Isrc \
  "$harness" "${sources[@]}" \
  build/libwarden_gateway.a build/libwarden_net.a build/libwarden_core.a build/libwarden_util.a \
  -lyaml-cpp -lboost_json -lspdlog -lfmt -lsimdjson -lxxhash -lssl -lcrypto -lpthread \
  -o "$out/fuzzer"
cd "$out"
exec ./fuzzer -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -max_len=65536 corpus
