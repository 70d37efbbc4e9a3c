// What the files of Gateway's request path share (gateway.cc, gateway_forward.cc,
// gateway_upstream.cc, gateway_local.cc): not an interface for anything else.
#ifndef WARDEN_GATEWAY_GATEWAY_INTERNAL_H_
#define WARDEN_GATEWAY_GATEWAY_INTERNAL_H_

#include <memory>
#include <string>
#include <string_view>

#include "gateway/api_errors.h"
#include "gateway/gateway.h"
#include "net/upstream.h"

namespace warden {

// The error shape for `request` on `path`: /v1/models is both APIs', and is answered in
// Anthropic's shape to a client that names its API version (anthropic-version).
inline ErrorShape ErrorShapeForRequest(const HttpRequest& request, std::string_view path) {
  if (path.starts_with("/v1/models") && request.find("anthropic-version") != request.end())
    return ErrorShape::kAnthropic;
  return ErrorShapeFor(path);
}

// What Gateway::Send brings back from a replica: the connection with its response head read, or
// why there is none.
struct Gateway::Upstream {
  std::unique_ptr<UpstreamConnection> connection;
  bool client_gone = false;
  // The replica answered with something that is not an HTTP response (or not one a proxy may
  // pass on): a 502, with no retry, as it would answer the same again.
  std::string malformed;
  // The connection was made, and then broke (while the request went out, or before a whole
  // response head came back): the replica is up, and took or refused this request.
  bool dropped = false;
  // No connection could be opened for want of the gateway's own resources (IsLocalResourceError):
  // what went wrong. Not the replica's fault, and no other would do better. (A code, not its
  // message: an Upstream is moved a few times on every request.)
  boost::system::error_code local_failure;
  // The replica sent no response head within read_timeout_s: a 504, not retried (it has the
  // request, and may be running it).
  bool timed_out = false;
  // The replica answered before it had read the whole request (an error from a proxy in front of
  // it, say) and closed, resetting the connection under the write: its answer, already in the
  // socket's receive buffer, is relayed; the connection is not kept.
  bool request_cut = false;
  // No connection: the server refused it (nothing listens on its port: it is down, and so are
  // all its ranks), rather than one that timed out (it may be only busy).
  bool refused = false;
  // The gateway's drain ran out of time before a response head came (ReplicaLossWatch::
  // EndRelays): a 503 to send it again, not the replica's failure.
  bool stopped = false;
};

// Read by the official OpenAI and Anthropic clients: "false" keeps them from sending a request
// again on an error they would otherwise retry.
constexpr std::string_view kShouldRetry = "x-should-retry";

// How a request's route is shown (x-warden-route, the access log) and counted: what generates
// nothing (a stored response read, a probe) follows no conversation's turns, so it is balanced
// wherever it had to go.
inline RouteKind ShownKind(const RouteDecision& decision, bool generation) {
  return generation ? decision.kind : RouteKind::kBalanced;
}

// A browser's CORS preflight (OPTIONS with Origin and Access-Control-Request-Method). Browsers
// never send credentials with one, so vLLM's --api-key lets OPTIONS through for its CORS settings
// to answer; the gateway passes preflights on to a replica the same way.
inline bool IsCorsPreflight(const HttpRequest& request) {
  return request.method() == http::verb::options &&
         request.find(http::field::origin) != request.end() &&
         request.find(http::field::access_control_request_method) != request.end();
}

// The stored response a path names (GET or DELETE /v1/responses/{id}[/...]); empty if none.
inline std::string_view StoredResponseId(std::string_view path) {
  constexpr std::string_view kPrefix = "/v1/responses/";
  if (!path.starts_with(kPrefix)) return {};
  path.remove_prefix(kPrefix.size());
  return path.substr(0, path.find('/'));
}

}  // namespace warden

#endif  // WARDEN_GATEWAY_GATEWAY_INTERNAL_H_
