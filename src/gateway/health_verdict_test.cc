#include "gateway/health_verdict.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

UpstreamGetResult Answered(int status) {
  return UpstreamGetResult{.status = status};
}

UpstreamGetResult Late() {
  return UpstreamGetResult{.error = "no answer within 1 s", .timed_out = true, .connected = true};
}

UpstreamGetResult Refused() {
  return UpstreamGetResult{.error = "Connection refused", .refused = true};
}

UpstreamGetResult NotHttp() {
  return UpstreamGetResult{.error = "bad version", .connected = true, .malformed = true};
}

// One late answer keeps a server in service (in doubt); a second in a row takes it out; the third
// gives its waiting requests up.
TEST(HealthVerdict, ALateAnswerIsGivenTheBenefitOfTheDoubtOnce) {
  int failed = 0;
  HealthVerdict v = JudgeHealthCheck(Late(), /*was_healthy=*/true, &failed);
  EXPECT_TRUE(v.healthy);
  EXPECT_TRUE(v.in_doubt);
  EXPECT_FALSE(v.lost);
  v = JudgeHealthCheck(Late(), true, &failed);
  EXPECT_FALSE(v.healthy);
  EXPECT_FALSE(v.lost);
  v = JudgeHealthCheck(Late(), false, &failed);
  EXPECT_FALSE(v.healthy);
  EXPECT_TRUE(v.lost);
  EXPECT_EQ(failed, 3);
  v = JudgeHealthCheck(Answered(200), false, &failed);
  EXPECT_TRUE(v.healthy);
  EXPECT_FALSE(v.in_doubt);
  EXPECT_EQ(failed, 0);
}

// A server that was already out gets no doubt from a late answer.
TEST(HealthVerdict, ALateAnswerDoesNotBringBackAServerThatWasOut) {
  int failed = 0;
  EXPECT_FALSE(JudgeHealthCheck(Late(), /*was_healthy=*/false, &failed).healthy);
}

// An error answer, or bytes that are no HTTP, take a server out at once and lose its waiting
// requests at the second; a refused connection takes it out at once and loses them at the third.
TEST(HealthVerdict, WrongAnswersAreLostSoonerThanSilence) {
  for (const UpstreamGetResult& wrong : {Answered(503), NotHttp()}) {
    int failed = 0;
    HealthVerdict v = JudgeHealthCheck(wrong, true, &failed);
    EXPECT_FALSE(v.healthy);
    EXPECT_FALSE(v.lost);
    EXPECT_TRUE(JudgeHealthCheck(wrong, false, &failed).lost);
  }
  int failed = 0;
  EXPECT_FALSE(JudgeHealthCheck(Refused(), true, &failed).healthy);
  EXPECT_FALSE(JudgeHealthCheck(Refused(), false, &failed).lost);
  EXPECT_TRUE(JudgeHealthCheck(Refused(), false, &failed).lost);
}

TEST(HealthVerdict, TheProblemSaysWhatTheCheckMet) {
  EXPECT_EQ(HealthProblem(Answered(503)), "/health answered 503");
  EXPECT_EQ(HealthProblem(Late()), "no answer on /health (no answer within 1 s)");
  EXPECT_EQ(HealthProblem(Refused()), "cannot connect for /health (Connection refused)");
  EXPECT_EQ(HealthProblem(NotHttp()), "/health answered with no valid HTTP (bad version)");
}

}  // namespace
}  // namespace warden
