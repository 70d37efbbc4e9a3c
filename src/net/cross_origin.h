// Whether a browser sent the request from a page of another origin than the gateway's. A web page
// could otherwise change the gateway, or what its replicas serve, through a user's browser (a
// "simple" POST, with a text/plain body, needs no CORS preflight). Browsers say where a request
// comes from in Sec-Fetch-Site (Fetch Metadata), and older ones in Origin (RFC 6454 §7), which
// must then name the gateway (its Host, or the X-Forwarded-Host of a proxy in front that rewrites
// Host); curl, SDKs and peers send neither.
#pragma once

#include "net/http_server.h"

namespace warden {

bool CrossOrigin(const HttpRequest& request);

// Adds what vLLM's default CORS settings (Starlette's CORSMiddleware, any origin, no credentials)
// add to the answer of a request that carries an Origin, so that a page of any site may read it.
template <class Fields>
void AllowAnyOrigin(const HttpRequest& request, Fields& response_fields) {
  if (request.find(http::field::origin) != request.end())
    response_fields.set(http::field::access_control_allow_origin, "*");
}

}  // namespace warden
