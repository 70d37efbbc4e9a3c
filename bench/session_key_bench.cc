// Time to read what routing needs (model, stream flag, metadata.user_id) and extract the session
// key from a Claude-Code-sized request body (the captured 88 KB first turn), against a full
// Boost.JSON parse of the same body as the in-process reference; and what the gateway does when
// Claude Code's header keys the request (the model read from the body's opening only).
#include <benchmark/benchmark.h>

#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "core/routing/session_key.h"

namespace warden {
namespace {

struct Fixture {
  std::string body;
  std::vector<std::pair<std::string, std::string>> header_text;  // what `headers` views
  std::vector<HeaderView> headers;
};

const Fixture& Turn1() {
  static const Fixture f = [] {
    std::ifstream in(std::string(WARDEN_FIXTURES_DIR) + "/claude-code-turn1.json");
    std::stringstream ss;
    ss << in.rdbuf();
    const auto doc = boost::json::parse(ss.str());
    Fixture fx;
    fx.body = boost::json::serialize(doc.at("body"));
    fx.body.reserve(fx.body.size() + 64);  // as the gateway reserves: simdjson parses in place
    for (const auto& [name, value] : doc.at("headers").as_object())
      fx.header_text.emplace_back(std::string(name), std::string(value.as_string()));
    for (const auto& [name, value] : fx.header_text) fx.headers.push_back({name, value});
    return fx;
  }();
  return f;
}

void BM_ExtractSessionKey(benchmark::State& state) {
  const Fixture& f = Turn1();
  const SessionKeyConfig config;
  for (auto _ : state) {
    BodyFacts facts;
    std::string error;
    ReadBodyFacts(f.body, f.body.capacity(), config, &facts, &error);
    SessionKey key = ExtractSessionKey(f.headers, facts, config);
    benchmark::DoNotOptimize(key);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(f.body.size()));
  state.counters["body_bytes"] = double(f.body.size());
}
BENCHMARK(BM_ExtractSessionKey);

// What the gateway does for Claude Code: its header keys the request, so only the model is read,
// from the body's opening (BodyReadOptions::model_only).
void BM_ExtractSessionKeyAsTheGatewayDoesForClaudeCode(benchmark::State& state) {
  const Fixture& f = Turn1();
  const SessionKeyConfig config;
  for (auto _ : state) {
    BodyFacts facts;
    std::string error;
    ReadBodyFacts(f.body, f.body.capacity(), config, &facts, &error,
                  {.model_only = ClaudeCodeHeaderKeys(f.headers)});
    SessionKey key = ExtractSessionKey(f.headers, facts, config);
    benchmark::DoNotOptimize(key);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(f.body.size()));
}
BENCHMARK(BM_ExtractSessionKeyAsTheGatewayDoesForClaudeCode);

void BM_ExtractSessionKeyFromMetadataOnly(benchmark::State& state) {
  const Fixture& f = Turn1();
  const SessionKeyConfig config;
  for (auto _ : state) {
    BodyFacts facts;
    std::string error;
    ReadBodyFacts(f.body, f.body.capacity(), config, &facts, &error);
    SessionKey key = ExtractSessionKey({}, facts, config);  // no header: metadata.user_id's JSON
    benchmark::DoNotOptimize(key);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(f.body.size()));
}
BENCHMARK(BM_ExtractSessionKeyFromMetadataOnly);

// What a request without a session id costs: the same pass reading the messages one by one to
// hash the conversation's opening (system, tools, first user message) for its key.
void BM_ReadBodyAndHashOpening(benchmark::State& state) {
  const Fixture& f = Turn1();
  const SessionKeyConfig config;
  for (auto _ : state) {
    BodyFacts facts;
    std::string error;
    ReadBodyFacts(f.body, f.body.capacity(), config, &facts, &error, {.hash_opening = true});
    benchmark::DoNotOptimize(facts.opening_hash);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(f.body.size()));
}
BENCHMARK(BM_ReadBodyAndHashOpening);

// What a prefix-aware policy adds: the same pass, plus the prompt's chained chunk hashes.
void BM_ExtractSessionKeyAndHashPrompt(benchmark::State& state) {
  const Fixture& f = Turn1();
  const SessionKeyConfig config;
  for (auto _ : state) {
    BodyFacts facts;
    std::string error;
    ReadBodyFacts(f.body, f.body.capacity(), config, &facts, &error, {.hash_prompt = true});
    SessionKey key = ExtractSessionKey(f.headers, facts, config);
    benchmark::DoNotOptimize(key);
    benchmark::DoNotOptimize(facts.prompt_hashes.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(f.body.size()));
}
BENCHMARK(BM_ExtractSessionKeyAndHashPrompt);

void BM_ReferenceBoostJsonFullParse(benchmark::State& state) {
  const Fixture& f = Turn1();
  for (auto _ : state) {
    auto doc = boost::json::parse(f.body);
    benchmark::DoNotOptimize(doc);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(f.body.size()));
}
BENCHMARK(BM_ReferenceBoostJsonFullParse);

}  // namespace
}  // namespace warden

BENCHMARK_MAIN();
