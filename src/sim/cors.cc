#include "sim/cors.h"

namespace warden {

std::optional<HttpResponse> CorsPreflightAnswer(const HttpRequest& request) {
  if (request.method() != http::verb::options || request.find(http::field::origin) == request.end())
    return std::nullopt;
  const auto method = request.find(http::field::access_control_request_method);
  if (method == request.end()) return std::nullopt;
  HttpResponse response =
      MakeResponse(request, http::status::ok, "OK", "text/plain; charset=utf-8");
  response.set(http::field::access_control_allow_origin, "*");
  response.set(http::field::access_control_allow_methods,
               "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  response.set(http::field::access_control_max_age, "600");
  const auto headers = request.find(http::field::access_control_request_headers);
  if (headers != request.end())
    response.set(http::field::access_control_allow_headers, headers->value());
  return response;
}

}  // namespace warden
