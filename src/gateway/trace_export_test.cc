#include "gateway/trace_export.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace warden {
namespace {

namespace json = boost::json;

TEST(OtlpTracesJson, WritesServerSpansAsACollectorReadsThem) {
  GatewaySpan span;
  span.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  span.span_id = "00f067aa0ba902b7";
  span.parent_span_id = "1111111111111111";
  span.name = "POST /v1/messages";
  span.start_unix_ns = 1700000000250000000;
  span.end_unix_ns = 1700000001500000000;
  span.error = true;
  span.strings = {{"warden.route", "sticky"}};
  span.ints = {{"warden.replica", 2}};
  span.doubles = {{"warden.ttft_s", 0.125}};
  GatewaySpan root = span;
  root.parent_span_id.clear();
  root.error = false;
  const std::vector<GatewaySpan> spans = {span, root};
  const json::value doc = json::parse(OtlpTracesJson(spans, "warden"));

  const json::object& resource_spans = doc.at("resourceSpans").at(0).as_object();
  EXPECT_EQ(resource_spans.at("resource").at("attributes").at(0),
            json::parse(R"({"key":"service.name","value":{"stringValue":"warden"}})"));
  const json::object& scope_spans = resource_spans.at("scopeSpans").at(0).as_object();
  EXPECT_EQ(scope_spans.at("scope").at("name"), "warden");
  const json::array& list = scope_spans.at("spans").as_array();
  ASSERT_EQ(list.size(), 2u);
  const json::object& s = list[0].as_object();
  EXPECT_EQ(s.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(s.at("spanId"), "00f067aa0ba902b7");
  EXPECT_EQ(s.at("parentSpanId"), "1111111111111111");
  EXPECT_EQ(s.at("kind"), 2);  // server
  EXPECT_EQ(s.at("startTimeUnixNano"), "1700000000250000000");
  EXPECT_EQ(s.at("endTimeUnixNano"), "1700000001500000000");
  EXPECT_EQ(s.at("status").at("code"), 2);  // error
  const json::array& attributes = s.at("attributes").as_array();
  EXPECT_EQ(attributes.at(0),
            json::parse(R"({"key":"warden.route","value":{"stringValue":"sticky"}})"));
  EXPECT_EQ(attributes.at(1), json::parse(R"({"key":"warden.replica","value":{"intValue":"2"}})"));
  EXPECT_EQ(attributes.at(2),
            json::parse(R"({"key":"warden.ttft_s","value":{"doubleValue":0.125}})"));
  // A root span has no parent, and a span that went well no status.
  EXPECT_FALSE(list[1].as_object().contains("parentSpanId"));
  EXPECT_FALSE(list[1].as_object().contains("status"));
}

TEST(OtlpTracesJson, EscapesWhatAClientNamed) {
  GatewaySpan span;
  span.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  span.span_id = "00f067aa0ba902b7";
  span.name = "POST /v1/\"odd\"\npath";
  span.strings = {{"gen_ai.request.model", "m\\\"x"}};
  const std::vector<GatewaySpan> spans = {span};
  const json::value doc = json::parse(OtlpTracesJson(spans, "warden"));
  const json::object& s =
      doc.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0).as_object();
  EXPECT_EQ(s.at("name").as_string(), "POST /v1/\"odd\"\npath");
  EXPECT_EQ(s.at("attributes").at(0).at("value").at("stringValue").as_string(), "m\\\"x");
  EXPECT_TRUE(OtlpTracesJson({}, "warden").find(R"("spans":[])") != std::string::npos);
}

}  // namespace
}  // namespace warden
