#!/usr/bin/env bash
# Fuzzes one parser of untrusted input with libFuzzer, under AddressSanitizer and UBSan: what a
# replica streams or answers (observer), what its /metrics say (metrics), a config file (config),
# a client's request body and its session key (body), a request's head and what is decided from it
# alone (head), a state file (state), the head and body of
# a replica's response as relayed (relay), a peer gateway's message (peer), a multipart upload's
# model field and a body's inline media (media), a compressed request body (coding).
# The target's own sources are compiled here with clang and the fuzzer's instrumentation; the rest
# comes from the build's libraries (make build first). Findings (crash-*, leak-*, timeout-*) and
# the corpus stay in build/fuzz/<target>/.
#
# Usage: scripts/fuzz.sh observer|metrics|config|body|head|state|relay|peer|media|coding [seconds, default 300]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh observer|metrics|config|body|head|state|relay|peer|media|coding [seconds]}
seconds=${2:-300}
[[ -f build/libwarden_gateway.a ]] || { echo "build first: make build" >&2; exit 1; }
if ! command -v clang++-14 >/dev/null || [[ ! -f /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ]]; then
  apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null
fi

seeds=()
sanitizers=fuzzer,address,undefined
defines=()
link_flags=()
case $target in
  observer) harness=fuzz/response_observer_fuzz.cc
            sources=(src/core/protocol/response_observer.cc src/core/protocol/reply_content.cc)
            seeds=(tests/fixtures/claude-code-turn1.json) ;;
  metrics)  harness=fuzz/vllm_metrics_fuzz.cc
            sources=(src/core/protocol/vllm_metrics_reader.cc src/util/prometheus.cc) ;;
  config)   harness=fuzz/gateway_config_fuzz.cc
            sources=(src/gateway/config.cc src/net/host_allowlist.cc src/util/glob.cc) ;;
  body)     harness=fuzz/request_body_fuzz.cc
            sources=(src/core/routing/session_key.cc src/core/routing/prompt_hasher.cc
                     src/core/protocol/inline_data.cc)
            seeds=(tests/fixtures/claude-code-turn1.json tests/fixtures/claude-code-turn2.json) ;;
  state)    harness=fuzz/state_file_fuzz.cc
            sources=(src/gateway/state_file.cc) ;;
  head)     harness=fuzz/request_head_fuzz.cc
            sources=(src/core/routing/session_key.cc src/net/host_allowlist.cc src/util/glob.cc
                     src/net/asio_impl.cc)
            defines=(-DBOOST_BEAST_SEPARATE_COMPILATION)
            link_flags=(-Wl,--allow-multiple-definition) ;;
  relay)    harness=fuzz/relay_parser_fuzz.cc
            # Beast compiled here as well, for the same reason as Asio for peer below.
            sources=(src/net/relay_parser.cc src/net/asio_impl.cc)
            defines=(-DBOOST_BEAST_SEPARATE_COMPILATION)
            link_flags=(-Wl,--allow-multiple-definition) ;;
  peer)     harness=fuzz/peer_message_fuzz.cc
            # Asio compiled here as well: clang and gcc name some of its executor templates
            # differently, so the build's copy alone does not link; the build's stays for the
            # gcc-compiled libraries, and where both define a name the first (this one) is taken.
            sources=(src/gateway/peer_sync.cc src/net/asio_impl.cc)
            defines=(-DBOOST_BEAST_SEPARATE_COMPILATION)
            link_flags=(-Wl,--allow-multiple-definition)
            # clang 14 cannot assemble UBSan's checks in this file's coroutines ("Cannot represent
            # a difference across sections"): AddressSanitizer alone.
            sanitizers=fuzzer,address ;;
  media)    harness=fuzz/media_fuzz.cc
            sources=(src/core/protocol/multipart_field.cc src/core/protocol/inline_data.cc
                     src/core/protocol/image_size.cc) ;;
  coding)   harness=fuzz/content_coding_fuzz.cc
            sources=(src/net/content_coding.cc) ;;
  *) echo "unknown target '$target': observer, metrics, config, body, head, state, relay, peer, media or coding" >&2; exit 2 ;;
esac

out=build/fuzz/$target
mkdir -p "$out/corpus"
for seed in "${seeds[@]}"; do cp "$seed" "$out/corpus/"; done
[[ -d fuzz/corpus/$target ]] && cp fuzz/corpus/"$target"/* "$out/corpus/"
[[ -n $(ls -A "$out/corpus") ]] || printf 'x' > "$out/corpus/empty"
# The build's definitions where they change a library's types: simdjson's parser is laid out
# differently without SIMDJSON_THREADS_ENABLED (set by its CMake package), and code compiled here
# would then misread documents the build's libraries made (a false crash).
clang++-14 -std=c++20 -O1 -g -fsanitize=$sanitizers -fno-sanitize-recover=all \
  -DBOOST_ASIO_SEPARATE_COMPILATION -DBOOST_ASIO_NO_DEPRECATED -DSIMDJSON_THREADS_ENABLED=1 \
  -DBOOST_DISABLE_ASSERTS \
  "${defines[@]}" -Isrc \
  "$harness" "${sources[@]}" \
  build/libwarden_gateway.a build/libwarden_net.a build/libwarden_os.a build/libwarden_core.a build/libwarden_util.a \
  -lyaml-cpp -lboost_json -lspdlog -lfmt -lsimdjson -lxxhash -lssl -lcrypto -lz -lzstd -lpthread "${link_flags[@]}" \
  -o "$out/fuzzer"
cd "$out"
exec ./fuzzer -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -max_len=65536 corpus
