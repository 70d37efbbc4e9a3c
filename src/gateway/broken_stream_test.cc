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
  EXPECT_EQ(BrokenStreamEvent("/v1/responses", "x"), "");
  EXPECT_EQ(BrokenStreamEvent("/v1/messages/count_tokens", "x"), "");
}

}  // namespace
}  // namespace warden
