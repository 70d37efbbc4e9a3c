// What one health check of a server says of it, given the checks before: in service or not, and
// whether its waiting requests are given up. Pure, so that the thresholds can be tested.
#pragma once

#include <string>

#include "net/upstream_get.h"

namespace warden {

struct HealthVerdict {
  bool healthy = false;  // in service after this check
  // Kept in service on the benefit of the doubt (one late answer): the router's health is left as
  // it is, so that a request that found the server down meanwhile is not undone by this check.
  bool in_doubt = false;
  // Its waiting requests are given up (routed again): failed checks in a row, fewer when /health
  // answers wrongly (an error, or no HTTP) than when it is silent; never one slow answer.
  bool lost = false;
};

// Judges `health` (GET /health, answered or not; not a failure of the gateway's own resources).
// `was_healthy`: the server was in service before it. `failed_checks`: checks in a row that did
// not answer 200, updated here.
HealthVerdict JudgeHealthCheck(const UpstreamGetResult& health, bool was_healthy,
                               int* failed_checks);

// What a failed health check met, for the log and the admin API's health_problem.
std::string HealthProblem(const UpstreamGetResult& health);

}  // namespace warden
