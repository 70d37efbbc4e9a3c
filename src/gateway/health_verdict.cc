#include "gateway/health_verdict.h"

#include <fmt/format.h>

namespace warden {
namespace {

// Health checks in a row that a server leaves unanswered before its waiting requests are given up
// (vLLM loading its model accepts connections and answers nothing; a busy one can be slow once).
constexpr int kSilentChecksLost = 3;
// Health checks in a row answered with an error (vLLM's dead engine; one from a proxy in front
// may be a one-off).
constexpr int kErrorChecksLost = 2;
// Health checks in a row a server leaves unanswered in time before it is out of service. One is
// not a server down: a vLLM busy streaming can answer /health late, and taking it out re-homes its
// conversations (their cached history lost) and, with one server, refuses every request. A
// refused connection or an error answer takes it out at once (and a request that cannot reach it
// does too).
constexpr int kLateChecksDown = 2;

}  // namespace

HealthVerdict JudgeHealthCheck(const UpstreamGetResult& health, bool was_healthy,
                               int* failed_checks) {
  const bool answered = health.status == 200;
  *failed_checks = answered ? 0 : *failed_checks + 1;
  // Late: connected, then no answer in time (a host that does not even take the connection is
  // not busy, it is gone).
  const bool late = health.status == 0 && health.timed_out && health.connected;
  HealthVerdict v;
  v.healthy = answered || (late && was_healthy && *failed_checks < kLateChecksDown);
  v.in_doubt = !answered && v.healthy;
  const bool silent = health.status == 0 && !health.malformed;
  v.lost = *failed_checks >= (silent ? kSilentChecksLost : kErrorChecksLost);
  return v;
}

std::string HealthProblem(const UpstreamGetResult& health) {
  const std::string error = health.error.empty() ? std::string() : " (" + health.error + ")";
  if (health.status != 0) return fmt::format("/health answered {}", health.status);
  if (health.malformed) return "/health answered with no valid HTTP" + error;
  return (health.connected ? "no answer on /health" : "cannot connect for /health") + error;
}

}  // namespace warden
