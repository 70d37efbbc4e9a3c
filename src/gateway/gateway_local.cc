// What the gateway answers itself: probes, health, the panel's files and the models lists.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <set>
#include <span>

#include "gateway/adapter_update.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "gateway/peer_sync.h"
#include "gateway/web_assets.h"
#include "net/cross_origin.h"
#include "util/json_escape.h"
#include "util/percent_decode.h"
#include "util/query_string.h"

namespace warden {

// The panel's page and assets (web/, embedded at build time).
HttpResponse PanelResponse(const HttpRequest& request, std::string_view path);
HttpResponse PanelFile(const HttpRequest& request, std::string_view path);

std::optional<HttpResponse> Gateway::LocalResponse(const HttpRequest& request,
                                                   std::string_view path) {
  if (IsAdminPath(path)) return AdminResponse(request, path);
  if (request.target() == "*") {
    // OPTIONS * asks about the server itself (RFC 9110 §9.3.7): the gateway is that server, and a
    // replica may not read the target (found by review: relayed, vLLM answered 404).
    HttpResponse allowed = MakeResponse(request, http::status::ok, "", "text/plain");
    allowed.set(http::field::allow, kAllowedMethods);
    return allowed;
  }
  const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
  const bool own_page = path == "/metrics" || path == "/health" || path == "/ready" ||
                        path == "/panel" || path.starts_with("/panel/");
  if (!get && own_page && request.method() != http::verb::options) {
    // The gateway's own pages: no replica is asked what to do with a POST to them.
    HttpResponse refused = Error(request, ErrorShape::kOpenAi, 405,
                                 "the gateway answers this path itself, to GET or HEAD only");
    refused.set(http::field::allow, "GET, HEAD");
    return refused;
  }
  if (!get) return std::nullopt;
  if (path == "/metrics") {
    return MakeResponse(request, http::status::ok, MetricsText(),
                        "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path == "/health") return MakeResponse(request, http::status::ok, "ok\n", "text/plain");
  if (path == "/ready") return ReadyResponse(request);
  if (path == "/panel" || path.starts_with("/panel/")) return PanelResponse(request, path);
  if (path == "/" && request[http::field::accept].find("text/html") != std::string_view::npos) {
    HttpResponse redirect = MakeResponse(request, http::status::found, "", "text/plain");
    redirect.set(http::field::location, "/panel");
    return redirect;  // a browser: the panel
  }
  if (path == "/" || path == "/api/hello") {
    return MakeResponse(request, http::status::ok, R"({"service":"lm-warden"})");
  }
  if (path == "/v1/models") {
    std::string error;
    std::string body = ModelsListBody(request.target(), &error);
    HttpResponse response =
        error.empty() ? MakeResponse(request, http::status::ok, std::move(body))
                      : Error(request, ErrorShapeForRequest(request, "/v1/models"), 400, error);
    AllowAnyOrigin(request, response);
    return response;
  }
  if (path.starts_with("/v1/models/")) return ModelResponse(request, path);
  return std::nullopt;
}

namespace {

// Why `model` cannot serve a request now, as routing would place it (empty: it can): its servers
// not each checked once yet (nothing is known of them), or no replica in service, nor a healthy
// one that drains while one not drained is out of service (routing then uses it rather than fail).
std::string WhyNotServable(ModelState& model) {
  for (size_t server = 0; server < model.config().urls.size(); ++server)
    if (!model.scrape_schedule().DoneSince(server, 0)) return "its replicas not checked yet";
  const bool serves = model.WithRouter([](ModelRouter& r) {
    if (r.AnyInService({})) return true;
    bool draining_healthy = false, lost = false;
    for (int i = 0; i < r.num_replicas(); ++i) {
      draining_healthy = draining_healthy || (r.healthy(i) && r.draining(i));
      lost = lost || (!r.draining(i) && !r.load(i).healthy);
    }
    return draining_healthy && lost;
  });
  return serves ? std::string() : "no replica in service";
}

}  // namespace

HttpResponse Gateway::ReadyResponse(const HttpRequest& request) {
  const std::vector<std::string> named = QueryValues(request.target(), "model");
  std::vector<ModelState*> asked;
  for (const auto& model : models_) {
    if (named.empty() || named.front() == model->name()) asked.push_back(model.get());
  }
  if (asked.empty()) {
    return MakeResponse(request, http::status::not_found,
                        fmt::format("model {} is not served here\n", QuotedName(named.front())),
                        "text/plain");
  }
  std::string unserved;
  bool any = false;
  for (ModelState* model : asked) {
    if (const std::string why = WhyNotServable(*model); why.empty()) {
      any = true;
    } else {
      unserved += fmt::format("model {}: {}\n", model->name(), why);
    }
  }
  if (drain_begun_.load()) {
    return MakeResponse(request, http::status::service_unavailable,
                        "stopping: send new requests elsewhere\n", "text/plain");
  }
  return MakeResponse(request, any ? http::status::ok : http::status::service_unavailable,
                      (any ? "ready\n" : "") + unserved, "text/plain");
}

constexpr std::string_view kPanelPolicy =
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The panel's buttons change the gateway: no other site may frame it (clickjacking), no browser
// takes its files for another type, and it runs no script but its own.
void ForbidFraming(HttpResponse* res) {
  res->set(http::field::x_frame_options, "DENY");
  res->set("Content-Security-Policy", kPanelPolicy);
  res->set("X-Content-Type-Options", "nosniff");
}

HttpResponse PanelResponse(const HttpRequest& request, std::string_view path) {
  HttpResponse res = PanelFile(request, path);
  ForbidFraming(&res);
  return res;
}

HttpResponse PanelFile(const HttpRequest& request, std::string_view path) {
  constexpr std::string_view kAssets = "/panel/assets/";
  if (path.starts_with(kAssets)) {
    const std::string_view name = path.substr(kAssets.size());
    const WebAsset* asset = FindWebAsset(name);
    if (!asset)
      return MakeResponse(request, http::status::not_found, "no such asset\n", "text/plain");
    const std::string_view type = name.ends_with(".js")    ? "text/javascript; charset=utf-8"
                                  : name.ends_with(".css") ? "text/css; charset=utf-8"
                                                           : "text/html; charset=utf-8";
    HttpResponse res = MakeResponse(request, http::status::ok, std::string(asset->content), type);
    res.set(http::field::cache_control, "no-cache");
    return res;
  }
  const WebAsset* page = FindWebAsset("panel.html");
  return MakeResponse(request, http::status::ok, std::string(page->content),
                      "text/html; charset=utf-8");
}

// One entry of the models list, in a shape both APIs' clients read: OpenAI's (object, created,
// owned_by; vLLM's root and parent: for a LoRA adapter, as vLLM lists one, the path it was loaded
// from and the model; for the model's other names, aliases included, the model and null) and
// Anthropic's (type, display_name, created_at).
std::string Gateway::ModelEntry(std::string_view id, const ModelState& model) const {
  const auto started = std::chrono::floor<std::chrono::seconds>(unix_start_);
  const std::string_view served = model.name();
  const int64_t max_model_len = model.max_model_len();  // vLLM's, once a replica said it
  const bool adapter = model.served_names().IsAdapter(id);
  const std::string root = adapter ? model.served_names().RootOf(id) : std::string();
  return fmt::format(
      R"({{"id":{},"object":"model","created":{},"owned_by":"lm-warden","root":{},"parent":{},)"
      R"({}"type":"model","display_name":{},"created_at":"{:%FT%TZ}"}})",
      JsonString(id), started.time_since_epoch().count(),
      JsonString(root.empty() ? served : std::string_view(root)),
      adapter ? JsonString(served) : std::string("null"),
      max_model_len > 0 ? fmt::format(R"("max_model_len":{},)", max_model_len) : std::string(),
      JsonString(id), fmt::gmtime(std::chrono::system_clock::to_time_t(started)));
}

std::string Gateway::ServedHere() const {
  std::vector<std::string> names;
  for (const auto& m : models_) {
    std::string name = m->name();
    if (const std::vector<std::string> aliases = m->aliases(); !aliases.empty())
      name += fmt::format(" (also {})", fmt::join(aliases, ", "));
    // Adapters may be thousands: counted, not listed.
    if (const size_t others = m->served_names().All().size(); others > 0)
      name += fmt::format(" and {} other name{} its servers list (GET /v1/models)", others,
                          others == 1 ? "" : "s");
    names.push_back(std::move(name));
  }
  return fmt::format("served: {}; names are matched exactly, case included",
                     fmt::join(names, "; "));
}

// The served models, and their aliases that are names (not patterns), which clients may send too.
std::string Gateway::ModelsListBody(std::string_view target, std::string* error) const {
  std::vector<std::string> names, entries;  // in order, each once
  std::set<std::string, std::less<>> listed;
  for (const auto& m : models_) {
    std::vector<std::string> ids = {m->name()};
    for (const std::string& alias : m->aliases()) {
      if (alias.find_first_of("*?") == std::string::npos && alias != m->name())
        ids.push_back(alias);
    }
    // LoRA adapters and other names the replicas serve.
    for (std::string& name : m->served_names().All()) ids.push_back(std::move(name));
    for (const std::string& id : ids) {
      // Each name once, under the model a request naming it goes to.
      if (!listed.insert(id).second || ResolveModel(id) != m.get()) continue;
      entries.push_back(ModelEntry(id, *m));
      names.push_back(id);
    }
  }
  // Anthropic's paging (after_id, before_id, limit), which its clients may use by hand; OpenAI's
  // list has none, and without them every model is listed (found by review: a cursor listed its
  // own model again).
  size_t begin = 0, end = names.size();
  const auto index_of = [&](std::string_view name) {
    const std::vector<std::string> values = QueryValues(target, name);
    if (values.empty()) return std::optional<size_t>();
    const auto it = std::find(names.begin(), names.end(), values.front());
    return std::optional<size_t>(it - names.begin());  // unknown: past the end
  };
  const std::optional<size_t> after = index_of("after_id"), before = index_of("before_id");
  if (after) begin = std::min(names.size(), *after + 1);
  if (before) end = std::max(begin, std::min(end, *before));
  bool has_more = false;
  if (const std::vector<std::string> limit = QueryValues(target, "limit"); !limit.empty()) {
    size_t n = 0;
    const char* const last = limit[0].data() + limit[0].size();
    const auto [p, ec] = std::from_chars(limit[0].data(), last, n);
    if (ec != std::errc() || p != last || n == 0) {  // as Anthropic's API: a 400, not every model
      *error = fmt::format("limit: '{}' is no positive integer", ValidUtf8OrEscaped(limit[0]));
      return {};
    }
    if (end - begin > n) {
      has_more = true;
      if (before && !after) {
        begin = end - n;  // the page just before the cursor
      } else {
        end = begin + n;
      }
    }
  }
  const std::span<const std::string> page(entries.data() + begin, end - begin);
  return fmt::format(R"({{"object":"list","data":[{}],"has_more":{},"first_id":{},"last_id":{}}})",
                     fmt::join(page, ","), has_more,
                     begin < end ? JsonString(names[begin]) : "null",
                     begin < end ? JsonString(names[end - 1]) : "null");
}

// GET /v1/models/{id} (both APIs have it): any name the gateway routes, aliases and patterns'
// matches included.
HttpResponse Gateway::ModelResponse(const HttpRequest& request, std::string_view path) {
  const ErrorShape shape = ErrorShapeForRequest(request, "/v1/models");
  std::string id;
  if (!PercentDecode(path.substr(std::string_view("/v1/models/").size()), &id))
    return Error(request, shape, 400, "the model id is not validly percent-encoded");
  ModelState* model = id.empty() ? nullptr : ResolveModel(id);
  if (!model) {
    return Error(request, shape, 404, fmt::format("model '{}' is not served here", QuotedName(id)));
  }
  HttpResponse response = MakeResponse(request, http::status::ok, ModelEntry(id, *model));
  AllowAnyOrigin(request, response);
  return response;
}

}  // namespace warden
