#include "gateway/broken_stream.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace warden {
namespace {

namespace json = boost::json;

TEST(EventTail, KnowsWhenTheBytesStopBetweenEvents) {
  EventTail tail;
  EXPECT_TRUE(tail.between_events());  // nothing relayed yet
  tail.Relayed("event: ping\ndata: {}\n");
  EXPECT_FALSE(tail.between_events());
  tail.Relayed("\n");  // the blank line, in a piece of its own
  EXPECT_TRUE(tail.between_events());
  tail.Relayed("data: {\"choices\":[");
  EXPECT_FALSE(tail.between_events());
  tail.Relayed("]}\r\n\r\n");
  EXPECT_TRUE(tail.between_events());
  tail.Relayed("data: x\r");
  EXPECT_FALSE(tail.between_events());
  tail.Relayed("\r");
  EXPECT_TRUE(tail.between_events());
  // Line ends of different kinds in one blank line (the SSE grammar allows any mix).
  for (const char* ending : {"\n\r\n", "\r\n\n", "\r\r\n", "\n\r"}) {
    EventTail mixed;
    mixed.Relayed(std::string("data: {}") + ending);
    EXPECT_TRUE(mixed.between_events()) << ending;
  }
  for (const char* ending : {"\r\n", "\n", "\r", "}"}) {
    EventTail open;
    open.Relayed(std::string("data: {}") + ending);
    EXPECT_FALSE(open.between_events()) << ending;
  }
}

// A stream's bytes come in pieces of any size: the verdict is the same however they are cut.
TEST(EventTail, TheVerdictDoesNotDependOnHowThePiecesAreCut) {
  for (const std::string stream :
       {"data: {}\n\n", "data: {}\r\n\r\n", "data: {}\r\n", "data: {}\n\r", "ab\r\r",
        "x\n\nevent: ping\n", "data: x\r\n\r", "\n", "}\n\n\n"}) {
    EventTail whole;
    whole.Relayed(stream);
    for (size_t cut = 1; cut <= 5; ++cut) {
      EventTail pieces;
      for (size_t at = 0; at < stream.size(); at += cut) pieces.Relayed(stream.substr(at, cut));
      EXPECT_EQ(pieces.between_events(), whole.between_events()) << stream << " cut " << cut;
    }
  }
  EventTail tail;
  tail.Relayed("data: {}\n\n");
  tail.Relayed("");  // nothing new: the verdict stays
  EXPECT_TRUE(tail.between_events());
  tail.Relayed("d");
  EXPECT_FALSE(tail.between_events());
}

// The error events the real clients act on (the Anthropic and OpenAI SDKs raise their API error
// with the message; Claude Code sends the turn again).
TEST(BrokenStreamEvent, SaysItInTheApisWords) {
  const std::string anthropic = BrokenStreamEvent("/v1/messages", "replica 2 broke off");
  ASSERT_TRUE(anthropic.starts_with("event: error\ndata: ")) << anthropic;
  ASSERT_TRUE(anthropic.ends_with("\n\n"));
  const json::value a = json::parse(anthropic.substr(19));
  EXPECT_EQ(a.at("type"), "error");
  EXPECT_EQ(a.at("error").at("type"), "api_error");
  EXPECT_EQ(a.at("error").at("message"), "replica 2 broke off");

  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    const std::string openai = BrokenStreamEvent(path, "replica 2 broke off");
    ASSERT_TRUE(openai.starts_with("data: {")) << openai;
    ASSERT_TRUE(openai.ends_with("}\n\n"));
    const json::value o = json::parse(openai.substr(6));
    EXPECT_EQ(o.at("error").at("message"), "replica 2 broke off");
    EXPECT_EQ(o.at("error").at("type"), "server_error");
  }
  EXPECT_EQ(BrokenStreamEvent("/v1/messages/count_tokens", "x"), "");
}

// On the Responses API: an error event the OpenAI SDKs raise on (an `error` object) in the
// documented shape, then response.failed, which Codex acts on (it sends the request again).
TEST(BrokenStreamEvent, OnTheResponsesApiSaysErrorThenFailed) {
  const std::string events = BrokenStreamEvent("/v1/responses", "replica 1 \"broke\"", "resp_7");
  const std::string_view kError = "event: error\ndata: ";
  ASSERT_TRUE(events.starts_with(kError)) << events;
  const size_t failed_at = events.find("\n\nevent: response.failed\ndata: ");
  ASSERT_NE(failed_at, std::string::npos) << events;
  ASSERT_TRUE(events.ends_with("\n\n"));
  const json::value error = json::parse(events.substr(kError.size(), failed_at - kError.size()));
  EXPECT_EQ(error.at("type"), "error");
  EXPECT_EQ(error.at("code"), "server_error");
  EXPECT_EQ(error.at("message"), "replica 1 \"broke\"");
  EXPECT_EQ(error.at("error").at("message"), "replica 1 \"broke\"");
  const size_t data = failed_at + std::string_view("\n\nevent: response.failed\ndata: ").size();
  const json::value failed = json::parse(events.substr(data, events.size() - 2 - data));
  EXPECT_EQ(failed.at("type"), "response.failed");
  EXPECT_EQ(failed.at("response").at("id"), "resp_7");
  EXPECT_EQ(failed.at("response").at("status"), "failed");
  EXPECT_EQ(failed.at("response").at("error").at("code"), "server_error");
}

}  // namespace
}  // namespace warden
