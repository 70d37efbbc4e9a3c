// The gateway's part in LoRA adapters: loading and unloading them on every server of a model
// (adapter_update.h), loading them again on a server back from a restart, and learning at once
// the names the servers serve when a request names one the gateway does not know.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/adapter_update.h"
#include "gateway/gateway.h"
#include "gateway/server_calls.h"
#include "util/json_escape.h"

namespace warden {
namespace {

namespace http = boost::beast::http;

// vLLM loads an adapter from disk, or first downloads it from the Hugging Face Hub.
constexpr std::chrono::milliseconds kAdapterUpdateTimeout{300'000};
// A client waits on these before its 404: short.
constexpr std::chrono::milliseconds kModelListTimeout{2'000};
constexpr double kRelearnIntervalS = 1;
constexpr std::chrono::milliseconds kRelearnPoll{20};
constexpr size_t kMaxAdapterRequestBytes = 64 * 1024;
// How long a request naming an adapter that the servers are loading again waits for it.
constexpr double kAdapterReloadWaitS = 60;

// What a /v1/models answer lists; none when it is not such a list.
std::optional<std::vector<ListedModel>> Listed(const UpstreamGetResult& r) {
  return r.status == 200 ? ReadModelList(r.body) : std::nullopt;
}

// Holds a model's adapter updates to one at a time: what the gateway remembers of them must follow
// the order they took effect in (vLLM too does one at a time per adapter name). An update takes
// at most the servers' answer time; the next waits for it.
class AdapterUpdateTurn {
 public:
  static asio::awaitable<AdapterUpdateTurn> Take(std::atomic<bool>& running) {
    asio::steady_timer poll(co_await asio::this_coro::executor);
    bool idle = false;
    while (!running.compare_exchange_strong(idle, true)) {
      idle = false;
      poll.expires_after(kRelearnPoll);
      co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    co_return AdapterUpdateTurn(running);
  }
  AdapterUpdateTurn(AdapterUpdateTurn&& other) noexcept
      : running_(std::exchange(other.running_, nullptr)) {}
  AdapterUpdateTurn& operator=(AdapterUpdateTurn&&) = delete;
  ~AdapterUpdateTurn() {
    if (running_) *running_ = false;
  }

 private:
  explicit AdapterUpdateTurn(std::atomic<bool>& running) : running_(&running) {}
  std::atomic<bool>* running_;
};

}  // namespace

// Requests naming an adapter go to it before an alias (ResolveModel): one named like a model, a
// name its replicas serve it under or an alias of it would never get them, or take an alias's
// requests away from the model. Not a name a pattern matches: adapters are resolved first so that
// they work under `--alias '*'` (found by review: refusing those refused every adapter there).
std::string Gateway::NameTakenByAModel(std::string_view name) const {
  for (const auto& m : models_) {
    if (m->name() == name) return "the name of a model served here";
    if (m->served_names().Contains(name) && !m->served_names().IsAdapter(name))
      return fmt::format("a name the replicas serve model '{}' under", m->name());
    for (const std::string& alias : m->aliases()) {
      if (alias == name)
        return fmt::format("an alias of model '{}', whose requests it would take", m->name());
    }
  }
  return {};
}

asio::awaitable<void> Gateway::UpdateAdapters(HttpExchange& ex, int shard, ModelState& model,
                                              bool load) {
  const HttpRequest& request = ex.request();
  if (handing_over_.load(std::memory_order_relaxed)) {
    // As a PATCH: the new gateway keeps the adapters written at SIGUSR2, and would load an
    // adapter unloaded here since back on every server (found by review).
    HttpResponse response = Error(
        request, ErrorShape::kOpenAi, 503,
        "a hand-over to a new gateway is under way (SIGUSR2): a LoRA adapter loaded or unloaded "
        "here now would not be known to it; send the request again in a moment");
    response.set(http::field::retry_after, "1");
    co_await ex.Respond(std::move(response));
    co_return;
  }
  if (load && request.body().size() > kMaxAdapterRequestBytes) {
    // (It is kept, saved and sent to the peers with every message.)
    HttpResponse response =
        Error(request, ErrorShape::kOpenAi, 413,
              fmt::format("a LoRA adapter's load request may have {} KiB at most",
                          kMaxAdapterRequestBytes / 1024));
    co_await ex.Respond(std::move(response));
    co_return;
  }
  const AdapterRequest asked = ParseAdapterRequest(request.body()).value_or(AdapterRequest{});
  if (std::string taken_by = load ? NameTakenByAModel(asked.name) : ""; !taken_by.empty()) {
    HttpResponse response =
        Error(request, ErrorShape::kOpenAi, 400,
              fmt::format("a LoRA adapter cannot be named '{}': {}", asked.name, taken_by));
    co_await ex.Respond(std::move(response));
    co_return;
  }
  std::optional<AdapterUpdateTurn> turn =
      co_await AdapterUpdateTurn::Take(model.adapter_update_running());
  // A server that does not answer is not sent the request (it would hold the answer for as long
  // as its connection takes to fail); a load or an unload reaches it later, at a read of its
  // names (ReconcileAdapters).
  std::vector<ServerAdapterResult> results(model.pools().size());
  std::vector<size_t> up;
  for (size_t s = 0; s < results.size(); ++s) {
    results[s].url = model.pools()[s]->url().ToString();
    if (ServerHealthy(model, s)) {
      up.push_back(s);
    } else {
      results[s].body = "its health checks fail: not sent";
      results[s].deferred = true;
    }
  }
  std::vector<ServerCall> calls;
  const std::string via = ViaAfter(request);
  for (size_t s : up) calls.push_back(CallTo(model, s, via));
  // Forgotten before an unload is sent, so that no server is given it again meanwhile; taken back
  // if it is still there.
  int64_t taken_at_us = 0;
  const std::optional<LoadedAdapters::Adapter> unloading =
      load ? std::nullopt : model.loaded_adapters().Take(asked.name, UnixMicros(), &taken_at_us);
  const auto connect_timeout = ConnectTimeout();
  const std::vector<UpstreamGetResult> answers = co_await CallServers(
      calls, shard, http::verb::post, load ? "/v1/load_lora_adapter" : "/v1/unload_lora_adapter",
      request.body(), kAdapterUpdateTimeout, connect_timeout);
  // What each server serves now, whatever it answered.
  const std::vector<UpstreamGetResult> lists = co_await CallServers(
      calls, shard, http::verb::get, "/v1/models", "", kModelListTimeout, connect_timeout);
  for (size_t i = 0; i < up.size(); ++i) {
    ServerAdapterResult& r = results[up[i]];
    r.status = answers[i].status;
    r.body = r.status != 0 ? answers[i].body : answers[i].error;
    const std::optional<std::vector<ListedModel>> listed = Listed(lists[i]);
    if (!listed) continue;
    const auto entry = std::find_if(listed->begin(), listed->end(),
                                    [&](const ListedModel& m) { return m.id == asked.name; });
    r.listed = entry != listed->end();
    if (entry != listed->end()) r.listed_root = entry->root;
    model.served_names().Set(up[i], NamesOf(*listed));
  }
  const AdapterUpdateAnswer answer = SummariseAdapterUpdate(model.name(), asked, load, results);
  if (load && answer.took_effect && !asked.name.empty())
    model.loaded_adapters().Loaded(asked.name, request.body(), UnixMicros());
  if (!load && !answer.took_effect)
    model.loaded_adapters().UndoTake(asked.name, unloading, taken_at_us);
  // A server the unload did not reach, or that failed it, may still have the adapter at a later
  // read of its names (an unload of a name the gateway never loaded and no server had is not
  // kept); likewise an in-place reload.
  const bool keep = load ? answer.took_effect && asked.inplace
                         : answer.took_effect && (unloading || answer.done > 0);
  for (size_t s : keep ? answer.missed : std::vector<size_t>{})
    model.loaded_adapters().KeepForLater({asked.name, s, load});
  if (answer.status == 200) {
    spdlog::info("model {}: {}", model.name(), answer.body);
  } else {
    spdlog::warn("model {}: {} LoRA adapter '{}': {} {}", model.name(),
                 load ? "loading" : "unloading", asked.name, answer.status, answer.body);
  }
  turn.reset();  // (the client may take its time reading the answer)
  HttpResponse response =
      answer.text ? MakeResponse(request, static_cast<http::status>(answer.status), answer.body,
                                 "text/plain; charset=utf-8")
                  : MakeResponse(request, static_cast<http::status>(answer.status), answer.body);
  co_await ex.Respond(std::move(response));
}

asio::awaitable<void> Gateway::SendKeptUpdate(ModelState& model, size_t server,
                                              LoadedAdapters::KeptUpdate update) {
  // In the model's turn, as a client's update (so that the two do not cross).
  const AdapterUpdateTurn turn = co_await AdapterUpdateTurn::Take(model.adapter_update_running());
  UpstreamPool& pool = *model.pools()[server];
  const auto connect_timeout = ConnectTimeout();
  std::string body = "{\"lora_name\":" + JsonString(update.name) + "}";
  if (update.load) {  // the reload in place, as remembered
    const std::vector<LoadedAdapters::Adapter> all = model.loaded_adapters().All();
    const auto it = std::find_if(all.begin(), all.end(), [&](const LoadedAdapters::Adapter& a) {
      return a.name == update.name;
    });
    if (it == all.end()) co_return;  // unloaded since (which dropped the kept reload)
    body = it->request_body;
  }
  // Replaced by a newer update of the name since: not this one.
  if (!model.loaded_adapters().Kept(update)) co_return;
  const std::string path = update.load ? "/v1/load_lora_adapter" : "/v1/unload_lora_adapter";
  const UpstreamGetResult r =
      co_await UpstreamCall(pool, 0, http::verb::post, path, body, kAdapterUpdateTimeout,
                            model.replica_authorization(), 16 << 20, connect_timeout);
  const std::string_view what = update.load ? "reloaded in place" : "unloaded";
  // (An unload's 404: gone meanwhile.)
  if (r.status == 200 || (!update.load && r.status == 404)) {
    model.loaded_adapters().Done(update);
    spdlog::info("model {}: {} missed LoRA adapter '{}' being {} through the gateway: {} now",
                 model.name(), pool.url().ToString(), update.name, what,
                 update.load ? "reloaded it in place" : "unloaded it");
  } else {
    spdlog::warn(
        "model {}: {} missed LoRA adapter '{}' being {} through the gateway, and failed it again: "
        "{} {} (tried again at its next read of names)",
        model.name(), pool.url().ToString(), update.name, what, r.status,
        r.status != 0 ? r.body : r.error);
  }
}

asio::awaitable<void> Gateway::ReconcileAdapters(ModelState& model, size_t server,
                                                 std::vector<ServedName> listed,
                                                 std::shared_ptr<bool> busy) {
  ++model.adapter_reconciles();
  struct Done {
    std::shared_ptr<bool> busy;
    std::atomic<int>& reconciles;
    ~Done() {
      *busy = false;
      --reconciles;
    }
  } done{std::move(busy), model.adapter_reconciles()};
  UpstreamPool& pool = *model.pools()[server];
  const auto connect_timeout = ConnectTimeout();
  for (const LoadedAdapters::KeptUpdate& update :
       model.loaded_adapters().UpdatesDue(server, listed)) {
    co_await SendKeptUpdate(model, server, update);
  }
  const std::vector<LoadedAdapters::Adapter> missing = model.loaded_adapters().MissingFrom(listed);
  for (const LoadedAdapters::Adapter& adapter : missing) {
    // Each load in the model's turn, as a client's update (so that the two do not cross).
    const AdapterUpdateTurn turn = co_await AdapterUpdateTurn::Take(model.adapter_update_running());
    // Unloaded through the gateway (or loaded again otherwise) since: not this load.
    if (!model.loaded_adapters().Has(adapter)) continue;
    const UpstreamGetResult r = co_await UpstreamCall(
        pool, 0, http::verb::post, "/v1/load_lora_adapter", adapter.request_body,
        kAdapterUpdateTimeout, model.replica_authorization(), 16 << 20, connect_timeout);
    if (r.status == 200 && !model.loaded_adapters().IsLoaded(adapter.name)) {
      // Unloaded through the gateway while this load ran: the server, still loading, answered
      // that unload with "cannot be found".
      std::string unload = "{\"lora_name\":" + JsonString(adapter.name) + "}";
      co_await UpstreamCall(pool, 0, http::verb::post, "/v1/unload_lora_adapter", std::move(unload),
                            kAdapterUpdateTimeout, model.replica_authorization(), 16 << 20,
                            connect_timeout);
      spdlog::info(
          "model {}: {}: LoRA adapter '{}' was unloaded while it was loaded again there: "
          "unloaded it",
          model.name(), pool.url().ToString(), adapter.name);
    } else if (r.status == 200) {
      spdlog::info("model {}: {} lacks LoRA adapter '{}', loaded through the gateway: loaded it",
                   model.name(), pool.url().ToString(), adapter.name);
    } else if (r.status == 400 && r.body.find("has already been loaded") != std::string::npos) {
      // Loaded meanwhile, by a peer gateway that saw it lacking too, say.
      spdlog::info("model {}: {} lacks LoRA adapter '{}': it was loaded there meanwhile",
                   model.name(), pool.url().ToString(), adapter.name);
    } else {
      spdlog::warn(
          "model {}: {} lacks LoRA adapter '{}', loaded through the gateway, and did not load it: "
          "{} {} (tried again at its next read of names)",
          model.name(), pool.url().ToString(), adapter.name, r.status,
          r.status != 0 ? r.body : r.error);
    }
  }
  const UpstreamGetResult names =
      co_await UpstreamCall(pool, 0, http::verb::get, "/v1/models", {}, kModelListTimeout,
                            model.replica_authorization(), 16 << 20, connect_timeout);
  if (const std::optional<std::vector<ListedModel>> relisted = Listed(names))
    model.served_names().Set(server, NamesOf(*relisted));
}

asio::awaitable<void> Gateway::RelearnServedNames(int shard) {
  bool idle = false;
  if (!relearning_.compare_exchange_strong(idle, true)) {
    // Another request's read is under way: its outcome is this one's too.
    asio::steady_timer poll(co_await asio::this_coro::executor);
    const double give_up = Now() + 2 * kModelListTimeout.count() / 1000.0;
    while (relearning_.load() && Now() < give_up) {
      poll.expires_after(kRelearnPoll);
      co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    co_return;
  }
  struct Done {
    std::atomic<bool>& relearning;
    ~Done() { relearning = false; }
  } done{relearning_};
  if (Now() - served_names_relearnt_at_.load() < kRelearnIntervalS) co_return;
  std::vector<ServerCall> calls;
  std::vector<std::pair<ModelState*, size_t>> servers;
  for (const auto& model : models_) {
    for (size_t s = 0; s < model->pools().size(); ++s) {
      if (!ServerHealthy(*model, s)) continue;  // (it would hold every waiting request)
      calls.push_back(CallTo(*model, s, via_));
      servers.emplace_back(model.get(), s);
    }
  }
  const std::vector<UpstreamGetResult> lists = co_await CallServers(
      calls, shard, http::verb::get, "/v1/models", "", kModelListTimeout, kModelListTimeout);
  for (size_t i = 0; i < lists.size(); ++i) {
    const std::optional<std::vector<ListedModel>> listed = Listed(lists[i]);
    if (!listed) continue;
    auto [model, server] = servers[i];
    model->served_names().Set(server, NamesOf(*listed));
    // Its scrape loop loads what it lacks (one load at a time per server).
    if (model->AdaptersToReconcile(server, NamesOf(*listed))) model->AskNamesRead(server);
  }
  served_names_relearnt_at_ = Now();
}

asio::awaitable<ModelState*> Gateway::AwaitAdapterReload(std::string_view name,
                                                         bool* still_missing) {
  *still_missing = false;
  ModelState* model = nullptr;
  for (const auto& m : models_) {
    if (m->loaded_adapters().IsLoaded(name)) {
      model = m.get();
      break;
    }
  }
  if (!model) co_return nullptr;
  asio::steady_timer poll(co_await asio::this_coro::executor);
  const double started = Now();
  // Its scrape loops load it again (ReconcileAdapters) and then list it: within a read of names
  // or two one has begun, and it is waited for while one runs (a load may take minutes), not once
  // none does (found by review: a load that failed for good held every request for 60 s).
  const double reload_begins_by = started + 2 * model->scrape_interval_s() + 2;
  while (!model->served_names().Contains(name)) {
    const bool reloading = model->adapter_reconciles().load() > 0;
    if (!model->loaded_adapters().IsLoaded(name) || Now() >= started + kAdapterReloadWaitS ||
        (!reloading && Now() >= reload_begins_by)) {
      *still_missing = model->loaded_adapters().IsLoaded(name);
      co_return nullptr;
    }
    poll.expires_after(kRelearnPoll);
    co_await poll.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  co_return model;
}

}  // namespace warden
