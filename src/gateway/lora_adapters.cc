// The gateway's part in LoRA adapters: loading and unloading them on every server of a model
// (adapter_update.h), and learning at once the names the servers serve when a request names one
// the gateway does not know.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/adapter_update.h"
#include "gateway/gateway.h"

namespace warden {
namespace {

namespace http = boost::beast::http;

// vLLM loads an adapter from disk, or first downloads it from the Hugging Face Hub.
constexpr std::chrono::milliseconds kAdapterUpdateTimeout{300'000};
// A client waits on these before its 404: short.
constexpr std::chrono::milliseconds kModelListTimeout{2'000};
constexpr double kRelearnIntervalS = 1;

bool Lists(const std::vector<ServedName>& names, std::string_view name) {
  return std::any_of(names.begin(), names.end(),
                     [&](const ServedName& n) { return n.name == name; });
}

}  // namespace

asio::awaitable<std::vector<UpstreamGetResult>> Gateway::CallEveryServer(
    ModelState& model, int shard, http::verb method, std::string path, std::string body,
    std::chrono::milliseconds timeout) {
  const auto executor = co_await asio::this_coro::executor;
  const auto call = [&](UpstreamPool& pool) {
    return asio::co_spawn(
        executor,
        UpstreamCall(pool, shard, method, path, body, timeout, model.replica_authorization()),
        asio::deferred);
  };
  std::vector<decltype(call(*model.pools()[0]))> calls;
  for (const auto& pool : model.pools()) calls.push_back(call(*pool));
  auto [order, failures, results] =
      co_await asio::experimental::make_parallel_group(std::move(calls))
          .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
  for (size_t i = 0; i < results.size(); ++i) {
    if (!failures[i]) continue;
    results[i] = UpstreamGetResult{};
    results[i].error = "the call failed";
  }
  co_return results;
}

asio::awaitable<void> Gateway::UpdateAdapters(HttpExchange& ex, int shard, ModelState& model) {
  const HttpRequest& request = ex.request();
  const std::string path(TargetPath(request.target()));
  const bool load = IsAdapterLoadPath(path);
  const std::string adapter = AdapterNameOf(request.body());
  const std::vector<UpstreamGetResult> answers = co_await CallEveryServer(
      model, shard, http::verb::post, path, request.body(), kAdapterUpdateTimeout);
  // What each server serves now, whatever it answered (it may have had the adapter already).
  const std::vector<UpstreamGetResult> lists =
      co_await CallEveryServer(model, shard, http::verb::get, "/v1/models", "", kModelListTimeout);
  std::vector<ServerAdapterResult> results(answers.size());
  for (size_t s = 0; s < answers.size(); ++s) {
    ServerAdapterResult& r = results[s];
    r.url = model.pools()[s]->url().ToString();
    r.status = answers[s].status;
    r.body = r.status != 0 ? answers[s].body : answers[s].error;
    const std::optional<std::vector<ListedModel>> listed =
        lists[s].status == 200 ? ReadModelList(lists[s].body) : std::nullopt;
    if (!listed) continue;
    std::vector<ServedName> names = NamesOf(*listed);
    if (!adapter.empty()) r.listed_after = Lists(names, adapter);
    model.served_names().Set(s, std::move(names));
  }
  const AdapterUpdateAnswer answer = SummariseAdapterUpdate(model.name(), adapter, load, results);
  // Remembered once some server has it, forgotten once some server let it go.
  const bool changed =
      std::any_of(results.begin(), results.end(), [&](const ServerAdapterResult& r) {
        return r.listed_after ? *r.listed_after == load : r.status >= 200 && r.status < 300;
      });
  if (changed && !adapter.empty()) {
    if (load) {
      model.loaded_adapters().Loaded(adapter, request.body());
    } else {
      model.loaded_adapters().Unloaded(adapter);
    }
  }
  if (answer.status == 200) {
    spdlog::info("model {}: {}", model.name(), answer.body);
  } else {
    spdlog::warn("model {}: {} LoRA adapter '{}': {} {}", model.name(),
                 load ? "loading" : "unloading", adapter, answer.status, answer.body);
  }
  HttpResponse response =
      answer.text ? MakeResponse(request, static_cast<http::status>(answer.status), answer.body,
                                 "text/plain; charset=utf-8")
                  : MakeResponse(request, static_cast<http::status>(answer.status), answer.body);
  co_await ex.Respond(std::move(response));
}

asio::awaitable<void> Gateway::LoadAdaptersAgain(ModelState& model, size_t server,
                                                 std::vector<ServedName> listed) {
  const std::vector<LoadedAdapters::Adapter> missing = model.loaded_adapters().MissingFrom(listed);
  if (missing.empty()) co_return;
  UpstreamPool& pool = *model.pools()[server];
  for (const LoadedAdapters::Adapter& adapter : missing) {
    const UpstreamGetResult r = co_await UpstreamCall(
        pool, 0, http::verb::post, "/v1/load_lora_adapter", adapter.request_body,
        kAdapterUpdateTimeout, model.replica_authorization());
    if (r.status == 200) {
      spdlog::info(
          "model {}: {} came back without LoRA adapter '{}', loaded through the gateway: "
          "loaded it again",
          model.name(), pool.url().ToString(), adapter.name);
    } else {
      spdlog::warn(
          "model {}: {} came back without LoRA adapter '{}', loaded through the gateway, "
          "and did not load it again: {} {}",
          model.name(), pool.url().ToString(), adapter.name, r.status,
          r.status != 0 ? r.body : r.error);
    }
  }
  const UpstreamGetResult names = co_await UpstreamCall(
      pool, 0, http::verb::get, "/v1/models", {}, kModelListTimeout, model.replica_authorization());
  const std::optional<std::vector<ListedModel>> relisted =
      names.status == 200 ? ReadModelList(names.body) : std::nullopt;
  if (relisted) model.served_names().Set(server, NamesOf(*relisted));
}

asio::awaitable<bool> Gateway::RelearnServedNames(int shard) {
  const double now = Now();
  double last = served_names_relearnt_at_.load();
  if (now - last < kRelearnIntervalS ||
      !served_names_relearnt_at_.compare_exchange_strong(last, now))
    co_return false;
  for (const auto& model : models_) {
    const std::vector<UpstreamGetResult> lists = co_await CallEveryServer(
        *model, shard, http::verb::get, "/v1/models", "", kModelListTimeout);
    for (size_t s = 0; s < lists.size(); ++s) {
      const std::optional<std::vector<ListedModel>> listed =
          lists[s].status == 200 ? ReadModelList(lists[s].body) : std::nullopt;
      if (listed) model->served_names().Set(s, NamesOf(*listed));
    }
  }
  co_return true;
}

}  // namespace warden
