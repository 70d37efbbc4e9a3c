// `warden sim` over real sockets: prefix caching per rank, metrics, streaming formats, pinning.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <fstream>
#include <future>
#include <iterator>
#include <set>
#include <thread>

#include "child_process.h"
#include "eventually.h"
#include "http_client.h"
#include "util/prometheus.h"
#include "words.h"

namespace warden::testing {
namespace {

namespace json = boost::json;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

json::object ChatBody(const json::array& messages, int max_tokens, bool stream = false) {
  json::object body{{"model", "qwen3-4b"}, {"messages", messages}, {"max_tokens", max_tokens}};
  if (stream) {
    body["stream"] = true;
    body["stream_options"] = json::object{{"include_usage", true}};
  }
  return body;
}

json::object Message(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

Headers Rank(int r) {
  return {{"X-data-parallel-rank", std::to_string(r)}};
}

double MetricValue(uint16_t port, const std::string& name, const std::string& engine,
                   const std::string& extra_label = "", const std::string& extra_value = "") {
  const HttpResult r = HttpGet(port, "/metrics");
  std::vector<PrometheusSample> samples;
  std::string error;
  EXPECT_TRUE(ParsePrometheusText(r.body, &samples, &error)) << error;
  for (const PrometheusSample& s : samples) {
    if (s.name == name && s.label("engine") == engine &&
        (extra_label.empty() || s.label(extra_label) == extra_value)) {
      return s.value;
    }
  }
  ADD_FAILURE() << "no sample " << name << "{engine=" << engine << "}";
  return -1;
}

class SimTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}, int listeners = 1,
             std::string time_scale = "200") {
    std::vector<std::string> args = {"sim",      "--port",        "0", "--time-scale",
                                     time_scale, "--api-latency", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    sim_ = StartWarden(args, &ports_, listeners);
    ASSERT_NE(sim_, nullptr);
  }
  uint16_t port(int i = 0) const { return ports_[i]; }

  // Posts a chat request and returns the parsed body; expects 200.
  json::object Chat(const json::object& body, const Headers& headers, int server = 0) {
    const HttpResult r =
        HttpPost(port(server), "/v1/chat/completions", json::serialize(body), headers);
    EXPECT_EQ(r.status, 200) << r.body << r.error;
    return json::parse(r.body).as_object();
  }

  std::unique_ptr<ChildProcess> sim_;
  std::vector<uint16_t> ports_;
};

int CachedTokens(const json::object& response) {
  return static_cast<int>(
      response.at("usage").at("prompt_tokens_details").at("cached_tokens").as_int64());
}
int Usage(const json::object& response, const char* field) {
  return static_cast<int>(response.at("usage").at(field).as_int64());
}

TEST_F(SimTest, NextTurnHitsPreviousPromptAndReplyOnItsRankAndOnlyTheSystemPromptElsewhere) {
  ASSERT_NO_FATAL_FAILURE(Start({"--dp", "4"}));
  const std::string system = Words("sys", 40);  // system message: 5 + 40 = 45 tokens
  json::array turn1{Message("system", system), Message("user", Words("first", 200))};
  const json::object r1 = Chat(ChatBody(turn1, 40), Rank(0));
  const int p1 = Usage(r1, "prompt_tokens");
  const int c1 = Usage(r1, "completion_tokens");
  EXPECT_EQ(p1, 45 + 205 + 3);
  EXPECT_EQ(c1, 40);
  EXPECT_EQ(CachedTokens(r1), 0);

  // Another conversation with the same system prompt puts that prefix on rank 1.
  Chat(ChatBody(json::array{Message("system", system), Message("user", Words("other", 100))}, 8),
       Rank(1));

  json::array turn2 = turn1;
  turn2.push_back(Message(
      "assistant", std::string(r1.at("choices").at(0).at("message").at("content").as_string())));
  turn2.push_back(Message("user", Words("second", 30)));
  const json::object same_rank = Chat(ChatBody(turn2, 8), Rank(0));
  // KV exists for the prompt and all but the last reply token; hits are whole 16-token blocks.
  EXPECT_EQ(CachedTokens(same_rank), (p1 + c1 - 1) / 16 * 16);
  EXPECT_EQ(Usage(same_rank, "prompt_tokens"), p1 + c1 + 2 + 35 + 3);

  const json::object other_rank = Chat(ChatBody(turn2, 8), Rank(1));
  // Shared with rank 1's cache: the system message and "<|im_start|>user\n": 48 tokens.
  EXPECT_EQ(CachedTokens(other_rank), 48);

  EXPECT_EQ(MetricValue(port(), "vllm:prefix_cache_hits_total", "0"), (p1 + c1 - 1) / 16 * 16);
  EXPECT_EQ(MetricValue(port(), "vllm:prefix_cache_queries_total", "0"),
            p1 + Usage(same_rank, "prompt_tokens"));
  EXPECT_EQ(MetricValue(port(), "vllm:prefix_cache_hits_total", "2"), 0);
}

// With --kv-offloading-size, as vLLM's native CPU offloading: a prompt the GPU's cache has let go
// of is read back from CPU memory, so it is cached whole again (but for the block holding its last
// token); vLLM's external prefix-cache counters say how much, the GPU's do not count it.
TEST_F(SimTest, WithCpuOffloadingAnEvictedPromptIsReadBack) {
  ASSERT_NO_FATAL_FAILURE(Start({"--profile", "tiny", "--kv-offloading-size", "0.01"}));
  const json::array first{Message("user", Words("first", 400))};
  const json::object a = Chat(ChatBody(first, 4), {});
  const int prompt = Usage(a, "prompt_tokens");
  EXPECT_EQ(CachedTokens(a), 0);
  // Two others fill the GPU's 1,024 tokens, evicting most of the first.
  Chat(ChatBody(json::array{Message("user", Words("second", 500))}, 4), {});
  Chat(ChatBody(json::array{Message("user", Words("third", 500))}, 4), {});
  const double gpu_hits = MetricValue(port(), "vllm:prefix_cache_hits_total", "0");
  const json::object again = Chat(ChatBody(first, 4), {});
  EXPECT_EQ(CachedTokens(again), (prompt - 1) / 16 * 16);
  const double from_gpu = MetricValue(port(), "vllm:prefix_cache_hits_total", "0") - gpu_hits;
  const double from_cpu = MetricValue(port(), "vllm:external_prefix_cache_hits_total", "0");
  EXPECT_GT(from_cpu, 0);
  EXPECT_EQ(from_gpu + from_cpu, (prompt - 1) / 16 * 16);
  EXPECT_GT(MetricValue(port(), "vllm:external_prefix_cache_queries_total", "0"), from_cpu);
}

TEST_F(SimTest, MetricsCarryPerEngineSeriesWithVllmNamesAndLabels) {
  ASSERT_NO_FATAL_FAILURE(Start({"--dp", "4", "--model", "qwen3-4b"}));
  Chat(ChatBody(json::array{Message("user", Words("w", 50))}, 5), Rank(2));
  const HttpResult r = HttpGet(port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  std::vector<PrometheusSample> samples;
  std::string error;
  ASSERT_TRUE(ParsePrometheusText(r.body, &samples, &error)) << error;
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        // the simulator's own, for a load test to tell when it fell behind its time scale
        "warden_sim_late_seconds_total"}) {
    std::set<std::string> engines;
    for (const auto& s : samples) {
      if (s.name == name) {
        EXPECT_EQ(s.label("model_name"), "qwen3-4b") << name;
        engines.insert(std::string(s.label("engine")));
      }
    }
    EXPECT_EQ(engines, (std::set<std::string>{"0", "1", "2", "3"})) << name;
  }
  int config_series = 0;
  for (const auto& s : samples) {
    if (s.name != "vllm:cache_config_info") continue;
    ++config_series;
    EXPECT_EQ(s.label("block_size"), "16");
    EXPECT_EQ(s.label("num_gpu_blocks"), "9252");  // as vLLM: the server's, 4 engines x 2313
    EXPECT_EQ(s.value, 1);
  }
  EXPECT_EQ(config_series, 4);
  EXPECT_EQ(MetricValue(port(), "vllm:generation_tokens_total", "2"), 5);
  EXPECT_EQ(MetricValue(port(), "vllm:time_to_first_token_seconds_count", "2"), 1);
  EXPECT_EQ(MetricValue(port(), "vllm:prompt_tokens_total", "0"), 0);
}

TEST_F(SimTest, AnthropicStreamHasTheMessagesEventOrderAndUsage) {
  ASSERT_NO_FATAL_FAILURE(Start({"--dp", "2"}));
  json::object body{
      {"model", "qwen3-4b"},
      {"max_tokens", 6},
      {"stream", true},
      {"system", json::array{json::object{{"type", "text"}, {"text", Words("s", 20)}}}},
      {"messages", json::array{Message("user", Words("u", 30))}}};
  const HttpResult r = HttpPost(port(), "/v1/messages", json::serialize(body));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("content-type"), "text/event-stream; charset=utf-8");
  const auto events = ParseSse(r.body);
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.event);
  std::vector<std::string> expected = {"message_start", "content_block_start"};
  for (int i = 0; i < 6; ++i) expected.push_back("content_block_delta");
  expected.insert(expected.end(), {"content_block_stop", "message_delta", "message_stop"});
  EXPECT_EQ(names, expected);
  for (const auto& e : events) EXPECT_EQ(json::parse(e.data).at("type").as_string(), e.event);

  // The prompt's 63 tokens, split as Anthropic's API splits them (its 3 full blocks written to
  // the cache), at the start as at the end.
  const auto start = json::parse(events[0].data);
  const json::object& opening = start.at("message").at("usage").as_object();
  EXPECT_EQ(opening.at("input_tokens").as_int64() +
                opening.at("cache_creation_input_tokens").as_int64() +
                opening.at("cache_read_input_tokens").as_int64(),
            25 + 35 + 3);
  EXPECT_EQ(opening.at("cache_creation_input_tokens").as_int64(), 48);
  EXPECT_EQ(opening.at("output_tokens").as_int64(), 0);
  const auto delta = json::parse(events[events.size() - 2].data);
  EXPECT_EQ(delta.at("delta").at("stop_reason").as_string(), "max_tokens");
  EXPECT_EQ(delta.at("usage").at("output_tokens").as_int64(), 6);
  EXPECT_EQ(delta.at("usage").at("cache_read_input_tokens").as_int64(), 0);
  for (const char* prompt_field :
       {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"})
    EXPECT_EQ(delta.at("usage").at(prompt_field), opening.at(prompt_field)) << prompt_field;
}

TEST_F(SimTest, OpenAiStreamHasRoleContentFinishUsageThenDone) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const json::object body = ChatBody(json::array{Message("user", Words("u", 30))}, 4, true);
  const HttpResult r = HttpPost(port(), "/v1/chat/completions", json::serialize(body));
  ASSERT_EQ(r.status, 200);
  const auto events = ParseSse(r.body);
  // role, 4 tokens (the last with the finish, as vLLM sends it), usage, [DONE]
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(json::parse(events[0].data).at("choices").at(0).at("delta").at("role").as_string(),
            "assistant");
  std::string text;
  for (int i = 1; i <= 4; ++i) {
    text += json::parse(events[i].data).at("choices").at(0).at("delta").at("content").as_string();
  }
  EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 3);
  EXPECT_TRUE(json::parse(events[3].data).at("choices").at(0).at("finish_reason").is_null());
  EXPECT_EQ(json::parse(events[4].data).at("choices").at(0).at("finish_reason").as_string(),
            "length");
  const auto usage = json::parse(events[5].data).at("usage");
  EXPECT_EQ(usage.at("completion_tokens").as_int64(), 4);
  EXPECT_EQ(usage.at("prompt_tokens_details").at("cached_tokens").as_int64(), 0);
  EXPECT_EQ(events[6].data, "[DONE]");
}

// vLLM's completions API, as OpenAI's, replies with 16 tokens at most when it is given no
// max_tokens (its chat API with as many as the context leaves).
TEST_F(SimTest, ACompletionWithoutMaxTokensStopsAtSixteen) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const HttpResult r = HttpPost(port(), "/v1/completions",
                                json::serialize(json::object{{"prompt", Words("p", 20)}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json::value body = json::parse(r.body);
  EXPECT_EQ(body.at("usage").at("completion_tokens").as_int64(), 16);
  EXPECT_EQ(body.at("choices").at(0).at("finish_reason").as_string(), "length");
}

// As a vLLM started without --enable-auto-tool-choice: a request offering tools with the choice
// left to the model is refused with vLLM's 400 (Anthropic's API: any with tools, the choice
// "auto" unless it names one); one that forbids a call is served.
TEST_F(SimTest, WithoutAutoToolChoiceARequestOfferingToolsIsRefusedAsVllmRefusesIt) {
  ASSERT_NO_FATAL_FAILURE(Start({"--no-auto-tool-choice"}));
  const json::array tools{
      json::object{{"type", "function"},
                   {"function", json::object{{"name", "f"}, {"parameters", json::object{}}}}}};
  json::object chat = ChatBody(json::array{Message("user", Words("u", 10))}, 2);
  chat["tools"] = tools;
  const HttpResult refused = HttpPost(port(), "/v1/chat/completions", json::serialize(chat));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body).at("error").at("message").as_string(),
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
            "set");
  chat["tool_choice"] = "none";
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", json::serialize(chat)).status, 200);
  const json::object messages{
      {"model", chat.at("model")},
      {"max_tokens", 2},
      {"tools", json::array{json::object{{"name", "f"}, {"input_schema", json::object{}}}}},
      {"messages", json::array{Message("user", Words("u", 10))}}};
  const HttpResult anthropic = HttpPost(port(), "/v1/messages", json::serialize(messages));
  EXPECT_EQ(anthropic.status, 400);
  EXPECT_NE(anthropic.body.find("--enable-auto-tool-choice"), std::string::npos) << anthropic.body;
}

// vLLM's `priority`: refused unless the engine runs with --scheduling-policy priority, then
// taken (its effect on the queue: Engine.WithPriorityScheduling*).
TEST_F(SimTest, APriorityIsRefusedUnderFcfsAsVllmRefusesItAndTakenUnderPriority) {
  ASSERT_NO_FATAL_FAILURE(Start());
  json::object chat = ChatBody(json::array{Message("user", Words("u", 10))}, 2);
  chat["priority"] = 3;
  const HttpResult refused = HttpPost(port(), "/v1/chat/completions", json::serialize(chat));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body).at("error").at("message").as_string(),
            "Got priority 3 but Priority scheduling is not enabled.");
  chat["priority"] = 0;
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", json::serialize(chat)).status, 200);
  chat["priority"] = "high";
  const HttpResult wrong_type = HttpPost(port(), "/v1/chat/completions", json::serialize(chat));
  EXPECT_EQ(wrong_type.status, 400);
  EXPECT_EQ(json::parse(wrong_type.body).at("error").at("param").as_string(), "priority");

  sim_.reset();
  ports_.clear();
  ASSERT_NO_FATAL_FAILURE(Start({"--scheduling-policy", "priority"}));
  chat["priority"] = 3;
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", json::serialize(chat)).status, 200);
  json::object completion{
      {"model", "qwen3-4b"}, {"prompt", Words("p", 10)}, {"max_tokens", 2}, {"priority", -2}};
  EXPECT_EQ(HttpPost(port(), "/v1/completions", json::serialize(completion)).status, 200);
}

// vLLM's routes take JSON only: a body of another type (curl -d without a Content-Type sends a
// form) is refused with a 400 in OpenAI's shape; parameters of the type do not matter.
TEST_F(SimTest, ABodyNotSaidToBeJsonIsRefusedAsVllmRefusesIt) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string body = json::serialize(ChatBody(json::array{Message("user", "hi")}, 2));
  for (const char* type : {"application/x-www-form-urlencoded", "text/plain"}) {
    const HttpResult r = HttpPost(port(), "/v1/messages", body, {{"Content-Type", type}});
    EXPECT_EQ(r.status, 400) << type;
    EXPECT_EQ(json::parse(r.body).at("error").at("message").as_string(),
              "Unsupported Media Type: Only 'application/json' is allowed");
  }
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", body,
                     {{"Content-Type", "Application/JSON; charset=utf-8"}})
                .status,
            200);
}

TEST_F(SimTest, RankHeaderPinsAndOutOfRangeIsA400) {
  ASSERT_NO_FATAL_FAILURE(Start({"--dp", "4"}));
  const json::object body = ChatBody(json::array{Message("user", Words("u", 10))}, 2);
  for (int i = 0; i < 3; ++i) Chat(body, Rank(3));
  EXPECT_EQ(MetricValue(port(), "vllm:prompt_tokens_total", "3"), 3 * 18);
  EXPECT_EQ(MetricValue(port(), "vllm:prompt_tokens_total", "0"), 0);

  const HttpResult bad = HttpPost(port(), "/v1/chat/completions", json::serialize(body), Rank(4));
  EXPECT_EQ(bad.status, 400);
  const auto error = json::parse(bad.body).at("error");
  EXPECT_EQ(error.at("message").as_string(), "data_parallel_rank 4 is out of range [0, 4).");
  EXPECT_EQ(error.at("code").as_int64(), 400);
}

// One connection is served by one of vLLM's API servers, whose balancer, with a dense model's
// counts never published, goes round the ranks.
TEST_F(SimTest, VllmDpBalancerWithoutPublishedCountsGoesRoundTheRanksOnOneConnection) {
  ASSERT_NO_FATAL_FAILURE(Start({"--dp", "4", "--dp-balancer", "vllm-dp"}));
  const std::string body =
      json::serialize(ChatBody(json::array{Message("user", Words("u", 10))}, 2));
  RawConnection connection(port());
  for (int i = 0; i < 8; ++i) {
    connection.Send(fmt::format(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n\r\n{}",
        body.size(), body));
    ASSERT_NE(connection.ReadUntil("\"finish_reason\"", i + 1).find("\"finish_reason\""),
              std::string::npos);
  }
  for (const char* engine : {"0", "1", "2", "3"}) {
    EXPECT_EQ(MetricValue(port(), "vllm:prefix_cache_queries_total", engine), 2 * 18) << engine;
  }
}

// As vLLM (uvicorn's keep-alive timeout, VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s by default): a
// kept-alive connection left idle is closed, which a gateway's pool must live with.
TEST_F(SimTest, AnIdleKeptAliveConnectionIsClosedAfterTheKeepAliveTimeout) {
  ASSERT_NO_FATAL_FAILURE(Start({"--http-timeout-keep-alive", "1"}));
  RawConnection connection(port());
  connection.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_NE(connection.ReadUntil("\r\n\r\n").find("200 OK"), std::string::npos);
  const auto answered = std::chrono::steady_clock::now();
  connection.ReadToClose();
  EXPECT_TRUE(connection.closed());
  EXPECT_GE(std::chrono::steady_clock::now() - answered, std::chrono::milliseconds(900));
}

TEST_F(SimTest, IndependentServersEachHaveTheirOwnCache) {
  ASSERT_NO_FATAL_FAILURE(Start({"--servers", "2"}, 2));
  ASSERT_EQ(ports_.size(), 2u);
  const json::object body = ChatBody(json::array{Message("user", Words("u", 100))}, 2);
  Chat(body, {}, 0);
  EXPECT_EQ(CachedTokens(Chat(body, {}, 0)), 96);
  EXPECT_EQ(CachedTokens(Chat(body, {}, 1)), 0);
  EXPECT_EQ(MetricValue(port(1), "vllm:prompt_tokens_total", "0"), 108);
}

// The Responses API's stored responses live in the server that made them, as vLLM's do: read
// back and deleted there, unknown on another server, and a continuation of one made elsewhere
// is not found; `store: false` keeps nothing.
TEST_F(SimTest, EachServerKeepsTheResponsesItMade) {
  ASSERT_NO_FATAL_FAILURE(Start({"--servers", "2"}, 2));
  const auto create = [&](int server, const std::string& extra) {
    return HttpPost(
        port(server), "/v1/responses",
        R"({"model":"qwen3-4b","input":"hello there","max_output_tokens":3)" + extra + "}");
  };
  const HttpResult made = create(0, "");
  ASSERT_EQ(made.status, 200) << made.body;
  const std::string id(json::parse(made.body).at("id").as_string());
  const HttpResult read = HttpGet(port(0), "/v1/responses/" + id);
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(json::parse(read.body).at("id").as_string(), id);
  EXPECT_EQ(HttpGet(port(1), "/v1/responses/" + id).status, 404);
  EXPECT_EQ(create(0, R"(,"previous_response_id":")" + id + "\"").status, 200);
  const HttpResult elsewhere = create(1, R"(,"previous_response_id":")" + id + "\"");
  EXPECT_EQ(elsewhere.status, 404);
  EXPECT_NE(elsewhere.body.find("not found"), std::string::npos) << elsewhere.body;
  const std::string unstored(json::parse(create(0, R"(,"store":false)").body).at("id").as_string());
  EXPECT_EQ(HttpGet(port(0), "/v1/responses/" + unstored).status, 404);
  const HttpResult deleted = HttpCall(port(0), "DELETE", "/v1/responses/" + id);
  EXPECT_EQ(deleted.status, 200);
  EXPECT_EQ(json::parse(deleted.body).at("deleted").as_bool(), true);
  EXPECT_EQ(HttpGet(port(0), "/v1/responses/" + id).status, 404);
}

// A request that continues a stored response comes after that response's conversation, its
// prompt and reply (as vLLM prepends a stored response's messages), and so reads it from the cache.
TEST_F(SimTest, AContinuationOfAStoredResponseComesAfterItsConversation) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const auto usage = [](const HttpResult& r) { return json::parse(r.body).at("usage"); };
  const HttpResult first =
      HttpPost(port(), "/v1/responses",
               R"({"model":"qwen3-4b","instructions":")" + Words("rule", 60) + R"(","input":")" +
                   Words("ask", 100) + R"(","max_output_tokens":20})");
  ASSERT_EQ(first.status, 200) << first.body;
  const int64_t first_prompt = usage(first).at("input_tokens").as_int64();
  const int64_t first_reply = usage(first).at("output_tokens").as_int64();
  const std::string id(json::parse(first.body).at("id").as_string());
  const HttpResult next = HttpPost(port(), "/v1/responses",
                                   R"({"model":"qwen3-4b","previous_response_id":")" + id +
                                       R"(","input":"and then?","max_output_tokens":5})");
  ASSERT_EQ(next.status, 200) << next.body;
  const json::value next_usage = usage(next);
  EXPECT_GT(next_usage.at("input_tokens").as_int64(), first_prompt + first_reply);
  EXPECT_GE(next_usage.at("input_tokens_details").at("cached_tokens").as_int64(),
            (first_prompt + first_reply) / 16 * 16 - 16);
}

TEST_F(SimTest, ErrorsComeInEachApisShape) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const HttpResult anthropic = HttpPost(port(), "/v1/messages", "{\"messages\": [");
  EXPECT_EQ(anthropic.status, 400);
  const auto a = json::parse(anthropic.body);
  EXPECT_EQ(a.at("type").as_string(), "error");
  EXPECT_TRUE(a.at("error").at("message").is_string());

  const HttpResult openai = HttpPost(port(), "/v1/chat/completions", "not json");
  EXPECT_EQ(openai.status, 400);
  EXPECT_EQ(json::parse(openai.body).at("error").at("code").as_int64(), 400);

  const HttpResult unknown =
      HttpPost(port(), "/v1/chat/completions",
               R"({"model":"gpt-9","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(json::parse(unknown.body).at("error").at("type").as_string(), "NotFoundError");
  EXPECT_EQ(json::parse(unknown.body).at("error").at("param").as_string(), "model");

  const HttpResult too_long = HttpPost(
      port(), "/v1/completions", json::serialize(json::object{{"prompt", Words("x", 40000)}}));
  EXPECT_EQ(too_long.status, 400);

  EXPECT_EQ(HttpGet(port(), "/health").status, 200);
  EXPECT_EQ(HttpGet(port(), "/ping").status, 200);  // vLLM's, for SageMaker: GET and POST
  EXPECT_EQ(HttpPost(port(), "/ping", "").status, 200);
  EXPECT_EQ(HttpGet(port(), "/nope").status, 404);
  // An API path asked with another method: Starlette's 405, with its Allow field.
  const HttpResult get = HttpGet(port(), "/v1/chat/completions");
  EXPECT_EQ(get.status, 405);
  EXPECT_EQ(get.header("allow"), "POST");
}

// --api-key guards what vLLM's AuthenticationMiddleware guards: paths under /v1, whatever the
// method but OPTIONS. Browsers' CORS preflights are answered as vLLM's default CORS settings
// answer them (any origin, method and header), and answers to a request with an Origin say any
// origin may read them.
TEST_F(SimTest, TheApiKeyGuardsWhatVllmGuardsAndPreflightsAreAnswered) {
  ASSERT_NO_FATAL_FAILURE(Start({"--api-key", "sk-x"}));
  const std::string chat =
      json::serialize(ChatBody(json::array{Message("user", "hello there")}, 4));
  const HttpResult no_key = HttpPost(port(), "/v1/chat/completions", chat);
  EXPECT_EQ(no_key.status, 401);
  EXPECT_EQ(no_key.body, R"({"error":"Unauthorized"})");
  EXPECT_EQ(HttpGet(port(), "/v1/models").status, 401);
  EXPECT_EQ(HttpGet(port(), "/version").status, 200);
  EXPECT_EQ(HttpGet(port(), "/tokenize").status, 404);  // not under /v1: open, and not served
  EXPECT_EQ(HttpCall(port(), "OPTIONS", "/v1/chat/completions").status, 405);

  const HttpResult preflight =
      HttpCall(port(), "OPTIONS", "/v1/chat/completions", {},
               {{"Origin", "http://app.example"},
                {"Access-Control-Request-Method", "POST"},
                {"Access-Control-Request-Headers", "authorization, content-type"}});
  EXPECT_EQ(preflight.status, 200);
  EXPECT_EQ(preflight.body, "OK");
  EXPECT_EQ(preflight.header("access-control-allow-origin"), "*");
  EXPECT_NE(preflight.header("access-control-allow-methods").find("POST"), std::string::npos);
  EXPECT_EQ(preflight.header("access-control-allow-headers"), "authorization, content-type");
  EXPECT_EQ(preflight.header("access-control-max-age"), "600");

  const HttpResult keyed =
      HttpPost(port(), "/v1/chat/completions", chat,
               {{"Authorization", "Bearer sk-x"}, {"Origin", "http://app.example"}});
  EXPECT_EQ(keyed.status, 200) << keyed.body;
  EXPECT_EQ(keyed.header("access-control-allow-origin"), "*");
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", chat, {{"Authorization", "Bearer sk-x"}})
                .header("access-control-allow-origin"),
            "");
}

// Claude Code asks for max_tokens 32000 on every turn: cut to the room left by default (so the demo
// serves it), refused in vLLM's (current) words with --strict-max-tokens.
TEST_F(SimTest, MaxTokensPastTheContextIsCutOrRefusedAsVllmDoes) {
  const std::string body = json::serialize(json::object{
      {"model", "qwen3-4b"},
      {"max_tokens", 32000},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Words("x", 1000)}}}}});
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", body).status, 200);
  sim_.reset();
  ports_.clear();
  ASSERT_NO_FATAL_FAILURE(Start({"--strict-max-tokens"}));
  const HttpResult refused = HttpPost(port(), "/v1/chat/completions", body);
  EXPECT_EQ(refused.status, 400);
  // As vLLM's renderer says it: the prompt counted up to one token past the room left for it.
  const std::string message(json::parse(refused.body).at("error").at("message").as_string());
  EXPECT_TRUE(message.starts_with(
      "You passed 769 input tokens and requested 32000 output tokens. However, the model's "
      "context length is only 32768 tokens, resulting in a maximum input length of 768 tokens."))
      << message;
  // As vLLM's VLLMValidationError: the field named, in the message and as the error's param.
  EXPECT_TRUE(message.ends_with(" (parameter=input_tokens, value=769)")) << message;
  EXPECT_EQ(json::parse(refused.body).at("error").at("param"), "input_tokens");
  const std::string fits = json::serialize(
      json::object{{"model", "qwen3-4b"},
                   {"max_tokens", 8},
                   {"messages", json::array{json::object{{"role", "user"}, {"content", "hi"}}}}});
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", fits).status, 200);
}

// As vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: adapters loaded and unloaded while it runs,
// each with a prefix cache of its own, which it finds again when loaded again.
TEST_F(SimTest, LoraAdaptersLoadAndUnloadAtRunTimeAsVllmDoes) {
  ASSERT_NO_FATAL_FAILURE(Start({"--runtime-lora-updating"}));
  const std::string sql = R"({"lora_name":"sql","lora_path":"/adapters/sql"})";
  const HttpResult loaded = HttpPost(port(), "/v1/load_lora_adapter", sql);
  EXPECT_EQ(loaded.status, 200);
  EXPECT_EQ(loaded.body, "Success: LoRA adapter 'sql' added successfully.");
  EXPECT_NE(HttpGet(port(), "/v1/models").body.find(R"("id":"sql")"), std::string::npos);
  const HttpResult again = HttpPost(port(), "/v1/load_lora_adapter", sql);
  EXPECT_EQ(again.status, 400);
  EXPECT_EQ(json::parse(again.body).at("error").at("message"),
            json::value("The lora adapter 'sql' has already been loaded."));
  EXPECT_EQ(HttpPost(port(), "/v1/load_lora_adapter", R"({"lora_name":"x"})").status, 400);
  EXPECT_EQ(HttpPost(port(), "/v1/unload_lora_adapter", "{}").status, 400);
  EXPECT_EQ(HttpGet(port(), "/v1/load_lora_adapter").status, 405);
  // With the Allow field Starlette's 405 has (found by review: the simulator sent none).
  EXPECT_EQ(HttpGet(port(), "/v1/load_lora_adapter").header("allow"), "POST");
  // Listed with the path it was loaded from as its root; loaded in place from another.
  EXPECT_NE(HttpGet(port(), "/v1/models").body.find(R"("root":"/adapters/sql")"),
            std::string::npos);
  EXPECT_EQ(HttpPost(port(), "/v1/load_lora_adapter",
                     R"({"lora_name":"sql","lora_path":"/v2/sql","load_inplace":true})")
                .status,
            200);
  EXPECT_NE(HttpGet(port(), "/v1/models").body.find(R"("root":"/v2/sql")"), std::string::npos);
  json::object body = ChatBody(json::array{Message("user", Words("adapter", 200))}, 4);
  body["model"] = "sql";
  EXPECT_EQ(CachedTokens(Chat(body, {})), 0);
  EXPECT_GT(CachedTokens(Chat(body, {})), 150);
  body["model"] = "qwen3-4b";  // the same prompt, the model's cache: nothing there
  EXPECT_EQ(CachedTokens(Chat(body, {})), 0);
  EXPECT_EQ(HttpPost(port(), "/v1/unload_lora_adapter", R"({"lora_name":"sql"})").body,
            "Success: LoRA adapter 'sql' removed successfully.");
  body["model"] = "sql";
  EXPECT_EQ(HttpPost(port(), "/v1/chat/completions", json::serialize(body)).status, 404);
  const HttpResult unknown = HttpPost(port(), "/v1/unload_lora_adapter", R"({"lora_name":"sql"})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(json::parse(unknown.body).at("error").at("message"),
            json::value("The lora adapter 'sql' cannot be found."));
  ASSERT_EQ(HttpPost(port(), "/v1/load_lora_adapter", sql).status, 200);
  EXPECT_GT(CachedTokens(Chat(body, {})), 150);  // its blocks were still in the cache
}

TEST_F(SimTest, WithoutRuntimeLoraUpdatingThereAreNoSuchEndpoints) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const HttpResult r = HttpPost(port(), "/v1/load_lora_adapter",
                                R"({"lora_name":"sql","lora_path":"/adapters/sql"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, R"({"detail":"Not Found"})");
}

// A streamed chat request read on a thread of its own: WaitForFirstBytes returns once some of
// the answer came, Join once all of it did, with all of it.
class BackgroundStream {
 public:
  BackgroundStream(uint16_t port, const json::object& body)
      : thread_([this, port, payload = json::serialize(body)] {
          HttpStream(port, "/v1/chat/completions", payload, {}, [&](std::string_view piece) {
            text_ += piece;
            if (!said_) first_.set_value();
            said_ = true;
            return true;
          });
          if (!said_) first_.set_value();
        }) {}
  BackgroundStream(const BackgroundStream&) = delete;
  BackgroundStream& operator=(const BackgroundStream&) = delete;
  ~BackgroundStream() {
    if (thread_.joinable()) thread_.join();
  }

  void WaitForFirstBytes() { first_.get_future().wait(); }
  std::string Join() {
    thread_.join();
    return text_;
  }

 private:
  std::promise<void> first_;
  bool said_ = false;
  std::string text_;
  std::thread thread_;  // last: it starts once the rest is built
};

// vLLM's sleep mode: put to sleep, a running stream ends as aborted, /health still answers, the
// metrics say so, requests wait until it wakes, and level 1 loses the prefix cache (level 0
// keeps it).
TEST_F(SimTest, SleepModeAbortsWhatRunsHoldsWhatComesAndLosesTheCacheAtLevelOne) {
  ASSERT_NO_FATAL_FAILURE(Start({"--enable-sleep-mode"}, 1, "20"));
  const json::object turn = ChatBody(json::array{Message("user", Words("sleepy", 200))}, 4);
  Chat(turn, {});
  ASSERT_GT(CachedTokens(Chat(turn, {})), 0);

  json::object long_body = ChatBody(json::array{Message("user", Words("u", 10))}, 5000, true);
  long_body["ignore_eos"] = true;
  BackgroundStream stream(port(), long_body);
  stream.WaitForFirstBytes();
  const HttpResult slept = HttpPost(port(), "/sleep?level=1", "");
  const std::string streamed = stream.Join();
  EXPECT_EQ(slept.status, 200);
  EXPECT_EQ(json::parse(slept.body), json::parse(R"({"status":"sleeping","level":1})"));
  EXPECT_NE(streamed.find(R"("finish_reason":"abort")"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("data: [DONE]"), std::string::npos);

  EXPECT_EQ(HttpGet(port(), "/is_sleeping").body, R"({"is_sleeping":true})");
  EXPECT_EQ(HttpGet(port(), "/health").status, 200);
  EXPECT_EQ(MetricValue(port(), "vllm:engine_sleep_state", "0", "sleep_state", "awake"), 0);
  EXPECT_EQ(MetricValue(port(), "vllm:engine_sleep_state", "0", "sleep_state", "weights_offloaded"),
            1);
  EXPECT_EQ(MetricValue(port(), "vllm:kv_cache_usage_perc", "0"), 0);

  std::atomic<bool> answered = false;
  json::object after;
  std::thread waiting([&] {
    after = Chat(turn, {});
    answered = true;
  });
  EXPECT_EQ(HttpGet(port(), "/is_sleeping").body, R"({"is_sleeping":true})");
  EXPECT_FALSE(answered);  // held while asleep
  // A partial wake leaves it asleep; the other tag wakes it.
  EXPECT_EQ(json::parse(HttpPost(port(), "/wake_up?tags=weights", "").body),
            json::parse(R"({"status":"sleeping","tags_woken":["weights"]})"));
  EXPECT_FALSE(answered);
  EXPECT_EQ(json::parse(HttpPost(port(), "/wake_up?tags=kv_cache", "").body),
            json::parse(R"({"status":"awake","tags_woken":["kv_cache"]})"));
  waiting.join();
  EXPECT_EQ(CachedTokens(after), 0);  // the cache went with level 1
  EXPECT_EQ(MetricValue(port(), "vllm:engine_sleep_state", "0", "sleep_state", "awake"), 1);

  // Level 0 pauses only: the cache stays.
  ASSERT_EQ(HttpPost(port(), "/sleep?level=0", "").status, 200);
  EXPECT_EQ(MetricValue(port(), "vllm:engine_sleep_state", "0", "sleep_state", "awake"), 0);
  ASSERT_EQ(HttpPost(port(), "/wake_up", "").body, R"({"status":"awake","tags_woken":null})");
  EXPECT_GT(CachedTokens(Chat(turn, {})), 0);

  // Mode wait lets what runs finish first.
  const json::object short_stream =
      ChatBody(json::array{Message("user", Words("w", 10))}, 40, true);
  BackgroundStream runs(port(), short_stream);
  runs.WaitForFirstBytes();
  EXPECT_EQ(HttpPost(port(), "/sleep?mode=wait&level=2", "").status, 200);
  const std::string finished = runs.Join();
  EXPECT_EQ(finished.find(R"("finish_reason":"abort")"), std::string::npos) << finished;
  EXPECT_NE(finished.find(R"("finish_reason":"length")"), std::string::npos) << finished;
  EXPECT_EQ(MetricValue(port(), "vllm:engine_sleep_state", "0", "sleep_state", "discard_all"), 1);
  ASSERT_EQ(HttpPost(port(), "/wake_up", "").status, 200);

  // Mode keep: what runs waits through the sleep and ends whole after the wake.
  json::object kept_stream = ChatBody(json::array{Message("user", Words("k", 10))}, 1000, true);
  kept_stream["ignore_eos"] = true;
  BackgroundStream keeps(port(), kept_stream);
  keeps.WaitForFirstBytes();
  EXPECT_EQ(HttpPost(port(), "/sleep?mode=keep", "").status, 200);
  EXPECT_EQ(MetricValue(port(), "vllm:num_requests_running", "0"), 0);  // sent back to the queue
  EXPECT_EQ(MetricValue(port(), "vllm:num_requests_waiting", "0"), 1);
  ASSERT_EQ(HttpPost(port(), "/wake_up", "").status, 200);
  const std::string kept = keeps.Join();
  EXPECT_NE(kept.find(R"("finish_reason":"length")"), std::string::npos) << kept;
  EXPECT_NE(kept.find(R"("completion_tokens":1000)"), std::string::npos) << kept;

  const HttpResult bad = HttpPost(port(), "/sleep?level=3", "");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(json::parse(bad.body).at("error").at("param"), "query.level");
  EXPECT_EQ(HttpPost(port(), "/sleep?mode=later", "").status, 400);
  EXPECT_EQ(HttpPost(port(), "/wake_up?tags=gpu", "").status, 200);  // only said in the log
  EXPECT_EQ(HttpGet(port(), "/sleep").status, 405);
  EXPECT_EQ(HttpGet(port(), "/sleep").header("allow"), "POST");
  EXPECT_EQ(HttpGet(port(), "/is_sleeping").body, R"({"is_sleeping":false})");
}

// vLLM's cache resets: the prefix cache emptied on every rank, refused (409) while a request runs
// unless it is to be preempted, which then starts over and still ends whole.
TEST_F(SimTest, APrefixCacheResetEmptiesTheCacheOfEveryRank) {
  ASSERT_NO_FATAL_FAILURE(Start({"--dp", "2", "--enable-sleep-mode"}, 1, "20"));
  const json::object turn = ChatBody(json::array{Message("user", Words("reset", 200))}, 4);
  for (const char* rank : {"0", "1"}) {
    Chat(turn, {{"X-data-parallel-rank", rank}});
    ASSERT_GT(CachedTokens(Chat(turn, {{"X-data-parallel-rank", rank}})), 0);
  }
  const HttpResult reset = HttpPost(port(), "/reset_prefix_cache", "");
  EXPECT_EQ(reset.status, 200);
  EXPECT_EQ(reset.body, "");
  for (const char* rank : {"0", "1"})
    EXPECT_EQ(CachedTokens(Chat(turn, {{"X-data-parallel-rank", rank}})), 0) << rank;

  json::object long_body = ChatBody(json::array{Message("user", Words("r", 10))}, 2000, true);
  long_body["ignore_eos"] = true;
  BackgroundStream stream(port(), long_body);
  stream.WaitForFirstBytes();
  const HttpResult refused = HttpPost(port(), "/reset_prefix_cache", "");
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(refused.body, R"({"detail":"Prefix cache reset failed."})");
  for (const char* rank : {"0", "1"})  // kept, on every rank (found by review: one was emptied)
    EXPECT_GT(CachedTokens(Chat(turn, {{"X-data-parallel-rank", rank}})), 0) << rank;
  EXPECT_EQ(HttpPost(port(), "/reset_prefix_cache?reset_running_requests=true", "").status, 200);
  const std::string streamed = stream.Join();
  EXPECT_NE(streamed.find(R"("completion_tokens":2000)"), std::string::npos) << streamed;
  EXPECT_EQ(CachedTokens(Chat(turn, {{"X-data-parallel-rank", "0"}})), 0);

  // A sleep in mode wait waits for what runs: a reset meanwhile does not hold it up (it did).
  json::object waited = ChatBody(json::array{Message("user", Words("w", 10))}, 2000, true);
  waited["ignore_eos"] = true;
  BackgroundStream runs(port(), waited);
  runs.WaitForFirstBytes();
  std::future<HttpResult> sleep =
      std::async(std::launch::async, [&] { return HttpPost(port(), "/sleep?mode=wait", ""); });
  ASSERT_TRUE(Eventually(
      [&] { return HttpGet(port(), "/is_sleeping").body == R"({"is_sleeping":true})"; }));
  EXPECT_EQ(HttpPost(port(), "/reset_prefix_cache", "").status, 409);
  EXPECT_NE(runs.Join().find(R"("completion_tokens":2000)"), std::string::npos);
  EXPECT_EQ(sleep.get().status, 200);
  ASSERT_EQ(HttpPost(port(), "/wake_up", "").status, 200);

  EXPECT_EQ(HttpPost(port(), "/reset_prefix_cache?reset_running_requests=maybe", "").status, 400);
  EXPECT_EQ(HttpGet(port(), "/reset_prefix_cache").status, 405);
  EXPECT_EQ(HttpGet(port(), "/reset_prefix_cache").header("allow"), "POST");
  EXPECT_EQ(HttpPost(port(), "/reset_mm_cache", "").status, 200);
}

// vLLM's --sleep-idle-ttl: asleep once idle, woken by the next inference request (not by a probe),
// while a sleep asked for by hand waits for POST /wake_up.
TEST_F(SimTest, IdleSleepWakesAtTheNextRequestButASleepByHandDoesNot) {
  ASSERT_NO_FATAL_FAILURE(Start({"--enable-sleep-mode", "--sleep-idle-ttl", "2"}, 1, "20"));
  const json::object turn = ChatBody(json::array{Message("user", Words("idle", 100))}, 4);
  Chat(turn, {});
  const auto sleeping = [&] {
    return HttpGet(port(), "/is_sleeping").body == R"({"is_sleeping":true})";
  };
  ASSERT_TRUE(Eventually(sleeping));
  EXPECT_EQ(HttpGet(port(), "/health").status, 200);
  EXPECT_TRUE(sleeping());                     // probes wake nothing
  EXPECT_EQ(CachedTokens(Chat(turn, {})), 0);  // woken, with the cache gone (level 1)
  EXPECT_FALSE(sleeping());

  ASSERT_EQ(HttpPost(port(), "/sleep?level=0", "").status, 200);
  std::atomic<bool> answered = false;
  std::thread waiting([&] {
    Chat(turn, {});
    answered = true;
  });
  EXPECT_TRUE(sleeping());
  EXPECT_FALSE(answered);
  ASSERT_EQ(HttpPost(port(), "/wake_up", "").status, 200);
  waiting.join();
  EXPECT_TRUE(answered);
}

// A wake that comes while a sleep waits for the step under way ends that sleep (it hung, waiting
// for a pause that was over); a request whose client left while it waited for the wake is not
// run; a second sleep leaves the first's level; "scheduling" wakes a pause.
TEST_F(SimTest, SleepAndWakeInterleaved) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--enable-sleep-mode", "--wake-up-seconds", "0"}, 1, "0.05"));  // steps of ~0.5 s
  json::object body = ChatBody(json::array{Message("user", Words("slow", 10))}, 3, true);
  body["ignore_eos"] = true;
  BackgroundStream stream(port(), body);
  stream.WaitForFirstBytes();
  std::future<HttpResult> slept =
      std::async(std::launch::async, [&] { return HttpPost(port(), "/sleep?mode=keep", ""); });
  ASSERT_TRUE(Eventually(
      [&] { return HttpGet(port(), "/is_sleeping").body.find("true") != std::string::npos; }));
  ASSERT_EQ(HttpPost(port(), "/wake_up", "").status, 200);
  ASSERT_EQ(slept.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(slept.get().status, 200);
  EXPECT_NE(stream.Join().find(R"("finish_reason":"length")"), std::string::npos);

  ASSERT_EQ(HttpPost(port(), "/sleep?level=0", "").status, 200);
  const double prompt_before = MetricValue(port(), "vllm:prompt_tokens_total", "0");
  {
    RawConnection leaving(port());
    const std::string gone =
        json::serialize(ChatBody(json::array{Message("user", Words("gone", 50))}, 3));
    leaving.Send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(gone.size()) + "\r\n\r\n" + gone);
  }  // closed before the wake
  // A second sleep leaves a deeper one as it is; a pause wakes with "scheduling".
  EXPECT_EQ(json::parse(HttpPost(port(), "/sleep?level=0", "").body).at("level"), 0);
  EXPECT_EQ(json::parse(HttpPost(port(), "/wake_up?tags=weights", "").body).at("status"),
            "sleeping");
  EXPECT_EQ(json::parse(HttpPost(port(), "/wake_up?tags=scheduling", "").body).at("status"),
            "awake");
  const json::object stayed =
      Chat(ChatBody(json::array{Message("user", Words("stay", 20))}, 1), {});
  // Only the request whose client stayed was computed.
  EXPECT_EQ(MetricValue(port(), "vllm:prompt_tokens_total", "0") - prompt_before,
            Usage(stayed, "prompt_tokens"));
}

// A wake from level 1 takes --wake-up-seconds (the weights back over PCIe): POST /wake_up
// answers, and the requests held meanwhile start, once it is over; a second wake sent meanwhile
// waits for the same one.
TEST_F(SimTest, AWakeFromLevelOneTakesItsTime) {
  ASSERT_NO_FATAL_FAILURE(Start({"--enable-sleep-mode", "--wake-up-seconds", "10"}, 1, "20"));
  ASSERT_EQ(HttpPost(port(), "/sleep?level=1", "").status, 200);
  const auto started = std::chrono::steady_clock::now();
  std::future<HttpResult> second =
      std::async(std::launch::async, [&] { return HttpPost(port(), "/wake_up", ""); });
  const HttpResult woke = HttpPost(port(), "/wake_up", "");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(json::parse(woke.body).at("status"), "awake");
  EXPECT_GE(took, 10 / 20.0 * 0.9);  // 10 simulated seconds at 20 times real time, at least
  EXPECT_EQ(json::parse(second.get().body).at("status"), "awake");
  EXPECT_EQ(HttpGet(port(), "/is_sleeping").body, R"({"is_sleeping":false})");
  // A sleep sent during a wake waits for it, then sleeps; a wake sent after that sleep still
  // wakes the server (it waited for the first wake, and found it asleep again).
  ASSERT_EQ(HttpPost(port(), "/sleep?level=1", "").status, 200);
  std::future<HttpResult> waking =
      std::async(std::launch::async, [&] { return HttpPost(port(), "/wake_up", ""); });
  std::future<HttpResult> sleeping =
      std::async(std::launch::async, [&] { return HttpPost(port(), "/sleep?level=1", ""); });
  std::future<HttpResult> waking_again =
      std::async(std::launch::async, [&] { return HttpPost(port(), "/wake_up", ""); });
  ASSERT_EQ(waking.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_EQ(sleeping.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  ASSERT_EQ(waking_again.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  sleeping.get();
  if (json::parse(HttpGet(port(), "/is_sleeping").body).at("is_sleeping").as_bool()) {
    ASSERT_EQ(HttpPost(port(), "/wake_up", "").status, 200);  // the sleep came last
  }
  EXPECT_EQ(HttpGet(port(), "/is_sleeping").body, R"({"is_sleeping":false})");
}

TEST_F(SimTest, WithoutSleepModeThereAreNoSleepEndpoints) {
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_EQ(HttpPost(port(), "/sleep", "").status, 404);
  EXPECT_EQ(HttpGet(port(), "/is_sleeping").status, 404);
}

TEST_F(SimTest, ClientThatDisconnectsMidStreamIsAborted) {
  ASSERT_NO_FATAL_FAILURE(Start({}, 1, "20"));
  json::object body = ChatBody(json::array{Message("user", Words("u", 10))}, 5000, true);
  body["ignore_eos"] = true;
  int pieces = 0;
  HttpStream(port(), "/v1/chat/completions", json::serialize(body), {},
             [&](std::string_view) { return ++pieces < 2; });
  // The engine learns of it at its next token write; wait for that, with a deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double aborted = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    aborted = MetricValue(port(), "vllm:request_success_total", "0", "finished_reason", "abort");
    if (aborted == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(aborted, 1);
  EXPECT_EQ(MetricValue(port(), "vllm:num_requests_running", "0"), 0);
  EXPECT_LT(MetricValue(port(), "vllm:generation_tokens_total", "0"), 5000);
}

// Like vLLM, a request whose client leaves while its prompt is read is aborted then, whether it
// streams or not: not at its first token, seconds later (found by review), so it generates none.
TEST_F(SimTest, AClientThatLeavesDuringThePromptsReadingAbortsIt) {
  ASSERT_NO_FATAL_FAILURE(Start({}, 1, "1"));
  for (const bool stream : {false, true}) {
    json::object body = ChatBody(json::array{Message("user", Words("long", 24000))}, 8, stream);
    const std::string payload = json::serialize(body);
    const std::string request = fmt::format(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n\r\n{}",
        payload.size(), payload);
    {
      asio::io_context io;
      tcp::socket socket(io);
      socket.connect({asio::ip::make_address("127.0.0.1"), port()});
      asio::write(socket, asio::buffer(request));
      if (stream) {  // its head comes at once: the request is in
        std::string head;
        asio::read_until(socket, asio::dynamic_buffer(head), "\r\n\r\n");
      }
    }  // closed
    const double expected = stream ? 2 : 1;
    ASSERT_TRUE(Eventually([&] {
      return MetricValue(port(), "vllm:request_success_total", "0", "finished_reason", "abort") ==
             expected;
    }));
    EXPECT_EQ(MetricValue(port(), "vllm:num_requests_running", "0"), 0);
    EXPECT_EQ(MetricValue(port(), "vllm:generation_tokens_total", "0"), 0) << stream;
  }
}

// A flag whose value is missing does not take the next flag for it, in any subcommand (found by
// review: "warden sim --lora-modules --port P" served adapters named "--port" and "P" on 8000).
TEST(CommandLine, AFlagWhoseValueIsMissingIsRefusedNotFedTheNextFlag) {
  const uint16_t port = FreePort();
  const std::string said = ::testing::TempDir() + "/warden-missing-value";
  const auto exit_status = [&](const std::string& args) {
    auto child = ChildProcess::Start(
        {"/bin/sh", "-c", std::string(WARDEN_BIN) + " " + args + " 2> " + said});
    return child ? child->Wait(std::chrono::seconds(30)) : -2;
  };
  const auto stderr_text = [&] {
    std::ifstream f(said);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(exit_status("sim --lora-modules --port " + std::to_string(port)), 2);
  EXPECT_NE(stderr_text().find("a value is missing: '--port' is a flag"), std::string::npos)
      << stderr_text();
  EXPECT_FALSE(PortListening(port));
  EXPECT_EQ(exit_status("lab --slow-replica --quiet --out " + ::testing::TempDir() + "/x"), 2);
  EXPECT_NE(stderr_text().find("a value is missing: '--quiet' is a flag"), std::string::npos)
      << stderr_text();
  EXPECT_EQ(exit_status("bench --target --quiet"), 2);
  EXPECT_NE(stderr_text().find("a value is missing: '--quiet' is a flag"), std::string::npos)
      << stderr_text();
  // A value that starts with "--" but names none of the command's flags is a value (an API key,
  // a description; found by review).
  const std::string missing = ::testing::TempDir() + "/no-such-results.csv";
  EXPECT_EQ(exit_status("report --description --slow --in " + missing + " --out " +
                        ::testing::TempDir() + "/report-out"),
            1);  // read: the file is missing
  EXPECT_NE(stderr_text().find("no such file"), std::string::npos) << stderr_text();
  EXPECT_EQ(exit_status("report --description=--out --in " + missing), 2);
  EXPECT_NE(stderr_text().find("a value is missing: '--out' is a flag"), std::string::npos)
      << stderr_text();
  // A results file that is a folder is said to be one (it read as a file with no header line).
  const std::string folder = ::testing::TempDir();
  EXPECT_EQ(exit_status("lab --stages 4 --stage-seconds 1 --quiet --reference " + folder +
                        " --out " + folder + "/lab-out"),
            2);
  EXPECT_NE(stderr_text().find("--reference: " + folder + ": it is a directory"), std::string::npos)
      << stderr_text();
  EXPECT_EQ(exit_status("report --in " + folder + " --out " + folder + "/report-out"), 1);
  EXPECT_NE(stderr_text().find(": it is a directory"), std::string::npos) << stderr_text();
}

}  // namespace
}  // namespace warden::testing
