// Cross-origin requests as a vLLM API server answers them with its default CORS settings
// (--allowed-origins, --allowed-methods and --allowed-headers all "*", no credentials), through
// Starlette's CORSMiddleware: a browser's preflight gets its answer here, before any API key is
// asked for, and every answer to a request with an Origin says any origin may read it.
#pragma once

#include <optional>

#include "net/cross_origin.h"
#include "net/http_server.h"

namespace warden {

// The answer to a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method);
// nullopt for any other request.
std::optional<HttpResponse> CorsPreflightAnswer(const HttpRequest& request);

}  // namespace warden
