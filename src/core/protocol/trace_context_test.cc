#include "core/protocol/trace_context.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

constexpr std::string_view kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr std::string_view kSpan = "00f067aa0ba902b7";

TEST(TraceParent, ReadsTheSpecificationsExample) {
  const auto parent = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(parent);
  EXPECT_EQ(parent->trace_id, kTrace);
  EXPECT_EQ(parent->span_id, kSpan);
  EXPECT_TRUE(parent->sampled);
  const auto unsampled =
      ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled);
  EXPECT_FALSE(unsampled->sampled);
}

TEST(TraceParent, RefusesWhatTheSpecificationCallsInvalid) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 has no more fields
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // trace id all zero
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // span id all zero
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // not a dash
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
       }) {
    EXPECT_FALSE(ParseTraceParent(bad)) << bad;
  }
}

TEST(TraceParent, ReadsALaterVersionForItsFirstFields) {
  const auto parent =
      ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-what-comes");
  ASSERT_TRUE(parent);
  EXPECT_EQ(parent->trace_id, kTrace);
  EXPECT_TRUE(parent->sampled);
  EXPECT_FALSE(ParseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03x"));
}

TEST(TraceParent, WritesWhatItReads) {
  const std::string value = FormatTraceParent(kTrace, kSpan, /*sampled=*/true);
  EXPECT_EQ(value, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(ParseTraceParent(value)->span_id, kSpan);
  EXPECT_EQ(FormatTraceParent(kTrace, kSpan, false).substr(53), "00");
}

TEST(TraceParent, MakesIdsOfTheRightSizeAndNeverZero) {
  EXPECT_EQ(TraceIdHex(1, 2), "00000000000000010000000000000002");
  EXPECT_EQ(TraceIdHex(0, 0), "00000000000000000000000000000001");
  EXPECT_EQ(SpanIdHex(0xabc), "0000000000000abc");
  EXPECT_EQ(SpanIdHex(0), "0000000000000001");
}

TEST(RouteOfPath, NamesARouteWithItsIdsTemplated) {
  EXPECT_EQ(RouteOfPath("/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(RouteOfPath("/v1/messages/count_tokens"), "/v1/messages/count_tokens");
  EXPECT_EQ(RouteOfPath("/v1/responses/resp_68a9f2c1d4e5"), "/v1/responses/{id}");
  EXPECT_EQ(RouteOfPath("/v1/responses/resp_68a9f2c1d4e5/input_items"),
            "/v1/responses/{id}/input_items");
  EXPECT_EQ(RouteOfPath("/v1/models/qwen3-4b-dp4"), "/v1/models/{id}");
  EXPECT_EQ(RouteOfPath("/v1/models/m"), "/v1/models/m");                    // short: a name, kept
  EXPECT_EQ(RouteOfPath("/v1/load_lora_adapter"), "/v1/load_lora_adapter");  // no digit
  EXPECT_EQ(RouteOfPath("/"), "/");
  EXPECT_EQ(RouteOfPath(""), "");
}

}  // namespace
}  // namespace warden
