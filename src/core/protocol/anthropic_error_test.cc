#include "core/protocol/anthropic_error.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(AnthropicError, VllmsOwnTypeNamesAndOpenAisShapeAreSaidInAnthropicsShape) {
  EXPECT_EQ(
      InAnthropicsShape(
          R"({"type":"error","error":{"type":"BadRequestError","message":"bad \"x\""}})", 400),
      R"({"type":"error","error":{"type":"invalid_request_error","message":"bad \"x\""}})");
  EXPECT_EQ(
      InAnthropicsShape(
          R"({"object":"error","message":"boom","type":"InternalServerError","code":500})", 500),
      R"({"type":"error","error":{"type":"api_error","message":"boom"}})");
  EXPECT_EQ(InAnthropicsShape(R"({"error":{"message":"no","type":"BadRequestError"}})", 400),
            R"({"type":"error","error":{"type":"invalid_request_error","message":"no"}})");
  EXPECT_EQ(InAnthropicsShape(R"({"detail":"Not Found"})", 404),
            R"({"type":"error","error":{"type":"not_found_error","message":"Not Found"}})");
}

// vLLM started with --api-key answers a request without the key 401 {"error":"Unauthorized"}
// (a gateway configured without replica_api_key): Claude Code must see an authentication_error.
// An error object whose message is not a string (no server of ours sends one; a proxy might): the
// body's text is the message, so that the client still gets Anthropic's shape.
TEST(AnthropicError, AnErrorWhoseMessageIsNoStringIsSaidWithTheBodyAsItsMessage) {
  EXPECT_EQ(InAnthropicsShape(R"({"error":{"message":{"deep":[1,2]},"type":5}})", 400),
            R"({"type":"error","error":{"type":"invalid_request_error","message":)"
            R"("{\"error\":{\"message\":{\"deep\":[1,2]},\"type\":5}}"}})");
}

TEST(AnthropicError, VllmsApiKeyRefusalIsAnAuthenticationError) {
  EXPECT_EQ(InAnthropicsShape(R"({"error":"Unauthorized"})", 401),
            R"({"type":"error","error":{"type":"authentication_error","message":"Unauthorized"}})");
}

TEST(AnthropicError, AnthropicsOwnShapeAndWhatIsNoErrorArePassedOnAsTheyAre) {
  EXPECT_EQ(InAnthropicsShape(
                R"({"type":"error","error":{"type":"invalid_request_error","message":"m"}})", 400),
            std::nullopt);
  EXPECT_EQ(InAnthropicsShape(R"({"id":"msg_1","type":"message"})", 400), std::nullopt);
}

// Anthropic's SDKs read error.type of a JSON body: a plain-text error (uvicorn's, a proxy's) and
// FastAPI's validation errors are said in that shape too.
TEST(AnthropicError, PlainTextAndValidationErrorsAreSaidInAnthropicsShape) {
  EXPECT_EQ(InAnthropicsShape("Internal Server Error\n", 500),
            R"({"type":"error","error":{"type":"api_error","message":"Internal Server Error"}})");
  EXPECT_EQ(InAnthropicsShape("", 502),
            R"({"type":"error","error":{"type":"api_error","message":"the replica answered 502 )"
            R"(without a message"}})");
  EXPECT_NE(InAnthropicsShape("\xff\xfe", 500).value().find("without a message"),
            std::string::npos);
  // (Checked as UTF-8 when cut too: found by review, a latin-1 page made JSON no parser reads.)
  EXPECT_NE(
      InAnthropicsShape("caf\xe9 " + std::string(2000, 'x'), 500).value().find("without a message"),
      std::string::npos);
  const std::string cut = InAnthropicsShape(std::string(5000, 'x'), 503).value();
  EXPECT_LT(cut.size(), 1100u);
  EXPECT_TRUE(cut.ends_with(R"(xxx..."}})")) << cut;
  EXPECT_EQ(
      InAnthropicsShape(
          R"({"detail":[{"loc":["body","messages",0],"msg":"Field required"},{"msg":"bad"}]})",
          422),
      R"({"type":"error","error":{"type":"invalid_request_error","message":"body.messages.0: )"
      R"(Field required; bad"}})");
}

TEST(AnthropicError, TypesFollowTheStatus) {
  EXPECT_EQ(AnthropicErrorType(400), "invalid_request_error");
  EXPECT_EQ(AnthropicErrorType(422), "invalid_request_error");
  EXPECT_EQ(AnthropicErrorType(429), "rate_limit_error");
  EXPECT_EQ(AnthropicErrorType(500), "api_error");
  EXPECT_EQ(AnthropicErrorType(503), "overloaded_error");
  EXPECT_EQ(AnthropicErrorType(529), "overloaded_error");
  EXPECT_EQ(AnthropicErrorType(502), "api_error");
  EXPECT_EQ(AnthropicErrorType(504), "timeout_error");  // Anthropic's (found by review)
}

}  // namespace
}  // namespace warden
