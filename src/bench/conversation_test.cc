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

}  // namespace
}  // namespace warden
