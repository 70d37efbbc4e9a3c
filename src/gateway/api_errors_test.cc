#include "gateway/api_errors.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(ErrorBody, EachApiInItsOwnShape) {
  EXPECT_EQ(ErrorBody(ErrorShape::kAnthropic, 503, "none"),
            R"({"type":"error","error":{"type":"overloaded_error","message":"none"}})");
  EXPECT_EQ(ErrorBody(ErrorShape::kAdmin, 400, "bad"), R"({"error":{"message":"bad"}})");
  EXPECT_EQ(ErrorBody(ErrorShape::kOpenAi, 404, "gone"),
            R"({"error":{"message":"gone","type":"invalid_request_error","param":null,)"
            R"("code":"model_not_found"}})");
}

// A 503 in OpenAI's shape names its cause: no replica in service, unless the gateway itself is
// stopping or short of resources (the replicas are fine then).
TEST(ErrorBody, OpenAiCodesSayWhoseFaultA503Is) {
  const auto code = [](int status, ErrorCode c) {
    const std::string body = ErrorBody(ErrorShape::kOpenAi, status, "m", c);
    const size_t at = body.find("\"code\":");
    return body.substr(at + 7, body.size() - at - 9);
  };
  EXPECT_EQ(code(503, ErrorCode::kByStatus), R"("no_healthy_replica")");
  EXPECT_EQ(code(503, ErrorCode::kGatewayStopping), R"("gateway_stopping")");
  EXPECT_EQ(code(503, ErrorCode::kGatewayResources), R"("gateway_resources_exhausted")");
  EXPECT_EQ(code(404, ErrorCode::kUnknownPath), "null");
  EXPECT_EQ(code(502, ErrorCode::kByStatus), "null");
}

}  // namespace
}  // namespace warden
