#include "bench/conversation.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace warden {
namespace {

bool HasHeader(const BenchRequest& r, std::string_view name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return true;
  }
  return false;
}

TEST(BenchConversation, CarriesItsSessionIdOnlyWhenAsked) {
  WorkloadOptions workload;
  const std::string system = "a shared system prompt";
  for (BenchApi api : {BenchApi::kAnthropic, BenchApi::kOpenAi}) {
    const BenchRequest with = Conversation(workload, system, 0, 3, api, "m").NextRequest();
    const BenchRequest without =
        Conversation(workload, system, 0, 3, api, "m", /*session_ids=*/false).NextRequest();
    const boost::json::object with_body = boost::json::parse(with.body).as_object();
    const boost::json::object without_body = boost::json::parse(without.body).as_object();
    if (api == BenchApi::kAnthropic) {
      EXPECT_TRUE(HasHeader(with, "X-Claude-Code-Session-Id"));
      EXPECT_TRUE(with_body.contains("metadata"));
      EXPECT_FALSE(HasHeader(without, "X-Claude-Code-Session-Id"));
      EXPECT_FALSE(without_body.contains("metadata"));
    } else {
      EXPECT_TRUE(HasHeader(with, "X-Session-Id"));
      EXPECT_TRUE(with_body.contains("user"));
      EXPECT_FALSE(HasHeader(without, "X-Session-Id"));
      EXPECT_FALSE(without_body.contains("user"));
    }
    EXPECT_EQ(with_body.at("messages"), without_body.at("messages"));
  }
}

// Claude Code 2.1's reminder follows each user message and stays in the history.
TEST(BenchConversation, SystemRemindersFollowEachUserMessageAndStay) {
  WorkloadOptions workload;
  const std::string system = "a shared system prompt";
  Conversation conv(workload, system, 0, 3, BenchApi::kAnthropic, "m");
  conv.set_system_reminders(true);
  conv.RecordReply("first reply");
  const boost::json::array messages =
      boost::json::parse(conv.NextRequest().body).at("messages").as_array();
  ASSERT_EQ(messages.size(), 5u);
  const char* roles[] = {"user", "system", "assistant", "user", "system"};
  for (size_t i = 0; i < messages.size(); ++i) EXPECT_EQ(messages[i].at("role"), roles[i]) << i;
  EXPECT_EQ(messages[1].at("content"), "<total_tokens>1000000 tokens left</total_tokens>");
  EXPECT_EQ(messages[4].at("content"), "<total_tokens>999000 tokens left</total_tokens>");
}

}  // namespace
}  // namespace warden
