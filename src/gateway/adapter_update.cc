#include "gateway/adapter_update.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>

#include "gateway/api_errors.h"
#include "util/normalised_path.h"

namespace warden {
namespace {

constexpr size_t kQuotedBytes = 300;  // of an answer that is not vLLM's error shape

// The message of a vLLM error body ({"error":{"message":...}}, or older {"message":...}), or the
// body itself, cut short.
std::string MessageOf(const std::string& body) {
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(body, ec);
  if (const boost::json::object* o = ec ? nullptr : doc.if_object()) {
    const boost::json::value* error = o->if_contains("error");
    const boost::json::object* inner = error ? error->if_object() : nullptr;
    const boost::json::value* message = inner ? inner->if_contains("message") : nullptr;
    if (!message) message = o->if_contains("message");
    if (!message) message = o->if_contains("detail");
    if (message && message->is_string()) return std::string(message->as_string());
  }
  std::string text = body.substr(0, kQuotedBytes);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return ValidUtf8OrEscaped(text);
}

// FastAPI's answer for a route it does not have: vLLM registers these only when told to.
bool NoSuchRoute(const ServerAdapterResult& s) {
  return s.status == 404 && MessageOf(s.body) == "Not Found";
}

std::string WhatWentWrong(const ServerAdapterResult& s) {
  if (s.status == 0) return fmt::format("{}: no answer ({})", s.url, s.body);
  if (NoSuchRoute(s)) {
    return fmt::format(
        "{} has no such endpoint: vLLM loads and unloads LoRA adapters while it runs only when "
        "started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
        s.url);
  }
  if (s.status == 401 || s.status == 403) {
    return fmt::format("{}: {} {} (the replica refused the gateway's key: its replica_api_key)",
                       s.url, s.status, MessageOf(s.body));
  }
  const std::string message = MessageOf(s.body);
  if (s.status == 400 && !s.listed_root.empty() &&
      message.find("has already been loaded") != std::string::npos) {
    // Loaded there from another path (directly, or from its start): said, with the way out.
    return fmt::format("{}: {} {} (from {}; \"load_inplace\": true replaces it)", s.url, s.status,
                       message, s.listed_root);
  }
  return fmt::format("{}: {} {}", s.url, s.status, message);
}

enum class Outcome { kDone, kAlready, kDeferred, kFailed };

Outcome OutcomeOf(const ServerAdapterResult& s, const AdapterRequest& request, bool load) {
  if (s.status >= 200 && s.status < 300) return Outcome::kDone;
  if (s.deferred) return Outcome::kDeferred;
  const std::string message = MessageOf(s.body);
  if (load && !request.inplace && s.status == 400 &&
      message.find("has already been loaded") != std::string::npos && s.listed != false &&
      (s.listed_root.empty() || s.listed_root == request.path))
    return Outcome::kAlready;
  if (!load && s.status == 404 && message.find("cannot be found") != std::string::npos &&
      s.listed != true)
    return Outcome::kAlready;
  // A server that cannot load or unload at run time, but already is as asked (it lists the
  // adapter from its start, from the same path, for a load; it does not list it, for an unload).
  if (NoSuchRoute(s) && s.listed == load && !request.inplace &&
      (!load || s.listed_root.empty() || s.listed_root == request.path))
    return Outcome::kAlready;
  return Outcome::kFailed;
}

}  // namespace

AdapterPath ClassifyAdapterPath(std::string_view raw) {
  std::string storage;
  return ClassifyNormalisedAdapterPath(NormalisedPathView(raw, &storage));
}

AdapterPath ClassifyNormalisedAdapterPath(std::string_view normalised) {
  if (normalised.size() > 1 && normalised.ends_with('/')) normalised.remove_suffix(1);
  if (normalised == "/v1/load_lora_adapter") return AdapterPath::kLoad;
  if (normalised == "/v1/unload_lora_adapter") return AdapterPath::kUnload;
  if (normalised == "/adapters" || normalised.starts_with("/adapters/"))
    return AdapterPath::kSageMaker;
  return AdapterPath::kNone;
}

namespace {

AdapterUpdateAnswer Summarise(std::string_view model, const AdapterRequest& request, bool load,
                              const std::vector<ServerAdapterResult>& servers) {
  size_t done = 0, already = 0;
  const ServerAdapterResult* first_failure = nullptr;
  const ServerAdapterResult* first_already = nullptr;
  const ServerAdapterResult* first_deferred = nullptr;
  std::string failures, deferred;
  bool may_pass = false;  // a failure another try may get past (no answer, a server error)
  for (const ServerAdapterResult& s : servers) {
    switch (OutcomeOf(s, request, load)) {
      case Outcome::kDone:
        ++done;
        break;
      case Outcome::kAlready:
        ++already;
        if (!first_already) first_already = &s;
        break;
      case Outcome::kDeferred:
        if (!first_deferred) first_deferred = &s;
        deferred += (deferred.empty() ? "" : ", ") + s.url;
        break;
      case Outcome::kFailed:
        if (!first_failure) first_failure = &s;
        failures += (failures.empty() ? "" : "; ") + WhatWentWrong(s);
        may_pass = may_pass || s.status == 0 || s.status >= 500;
        break;
    }
  }
  const bool took_effect = done + already > 0;
  if (!took_effect && !first_failure) first_failure = first_deferred;  // nothing will follow
  const std::string_view verb = load ? "added" : "removed";
  if (!first_failure && done > 0) {
    const size_t reached = done + already;
    std::string text =
        fmt::format("Success: LoRA adapter '{}' {} successfully on {} server{} of model '{}'.",
                    request.name, verb, reached, reached == 1 ? "" : "s", model);
    if (!deferred.empty()) {
      text += fmt::format(" Down, so not yet: {}; the gateway sends it there when it is back.",
                          deferred);
    }
    return {200, std::move(text), true, took_effect};
  }
  if (!first_failure && first_already && NoSuchRoute(*first_already)) {
    // Already as asked on servers that cannot load or unload while they run: said as vLLM says
    // it, not with their bare "Not Found" for the endpoint.
    const int status = load ? 400 : 404;
    return {status,
            ErrorBody(ErrorShape::kOpenAi, status,
                      load ? fmt::format("The lora adapter '{}' has already been loaded (from its "
                                         "servers' start).",
                                         request.name)
                           : fmt::format("The lora adapter '{}' cannot be found.", request.name)),
            false, took_effect};
  }
  if (!first_failure && first_already)
    return {first_already->status, first_already->body, false, took_effect};
  if (!first_failure) {
    return {502, ErrorBody(ErrorShape::kOpenAi, 502, "the model has no server to send it to")};
  }
  if (done + already == 0) {
    const bool passed_on = first_failure->status != 0 && !NoSuchRoute(*first_failure) &&
                           first_failure->status != 401 && first_failure->status != 403;
    if (passed_on) return {first_failure->status, first_failure->body};
    // (A 404 for an endpoint the replicas lack: no model is missing, so no "model_not_found".)
    const bool no_route = NoSuchRoute(*first_failure);
    const int status = no_route ? 404 : 502;
    return {status, ErrorBody(ErrorShape::kOpenAi, status, WhatWentWrong(*first_failure),
                              no_route ? ErrorCode::kUnknownPath : ErrorCode::kByStatus)};
  }
  if (!deferred.empty()) failures += fmt::format("; down, sent when back: {}", deferred);
  return {502,
          ErrorBody(
              ErrorShape::kOpenAi, 502,
              fmt::format("LoRA adapter '{}' was {} on {} of {} servers of model '{}'; on "
                          "the others it failed: {}. {}",
                          request.name, verb, done + already, servers.size(), model, failures,
                          may_pass ? fmt::format("Send the request again to try those again: "
                                                 "the servers where it was {} count as done",
                                                 verb)
                                   : fmt::format("The servers where it was {} keep it so", verb))),
          false, took_effect};
}

}  // namespace

AdapterUpdateAnswer SummariseAdapterUpdate(std::string_view model, const AdapterRequest& request,
                                           bool load,
                                           const std::vector<ServerAdapterResult>& servers) {
  AdapterUpdateAnswer answer = Summarise(model, request, load, servers);
  for (size_t s = 0; s < servers.size(); ++s) {
    const Outcome outcome = OutcomeOf(servers[s], request, load);
    if (outcome == Outcome::kDone) ++answer.done;
    if (outcome == Outcome::kDeferred || outcome == Outcome::kFailed) answer.missed.push_back(s);
  }
  return answer;
}

int64_t UnixMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void LoadedAdapters::Loaded(std::string name, std::string request_body, int64_t now_us) {
  std::lock_guard lock(mu_);
  const int64_t at_us = StampLocked(name, now_us);
  EraseLocked(name);
  DropKeptLocked(name);
  std::erase_if(unloads_, [&](const Unload& u) { return u.name == name; });
  adapters_.push_back({std::move(name), std::move(request_body), at_us});
}

std::optional<LoadedAdapters::Adapter> LoadedAdapters::Take(std::string_view name, int64_t now_us,
                                                            int64_t* taken_at_us) {
  std::lock_guard lock(mu_);
  *taken_at_us = StampLocked(name, now_us);
  DropKeptLocked(name);
  const auto it = std::find_if(adapters_.begin(), adapters_.end(),
                               [&](const Adapter& a) { return a.name == name; });
  std::optional<Adapter> taken;
  if (it != adapters_.end()) {
    taken = std::move(*it);
    adapters_.erase(it);
  }
  AddUnloadLocked(std::string(name), *taken_at_us);
  return taken;
}

void LoadedAdapters::UndoTake(std::string_view name, std::optional<Adapter> taken,
                              int64_t taken_at_us) {
  std::lock_guard lock(mu_);
  if (LastChangeLocked(name) != taken_at_us) return;  // a peer's newer load or unload
  std::erase_if(unloads_, [&](const Unload& u) { return u.name == name; });
  ++version_;
  if (!taken) return;
  // Just after the unload, which peers may have heard of: a real change made since beats it.
  taken->at_us = taken_at_us + 1;
  adapters_.push_back(std::move(*taken));
}

std::vector<LoadedAdapters::Record> LoadedAdapters::Records() const {
  std::lock_guard lock(mu_);
  std::vector<Record> records;
  for (const Adapter& a : adapters_) records.push_back({a.name, a.request_body, a.at_us, true});
  for (const Unload& u : unloads_) records.push_back({u.name, "", u.at_us, false});
  return records;
}

bool LoadedAdapters::Merge(const Record& record, size_t servers) {
  std::lock_guard lock(mu_);
  if (record.at_us <= std::max(LastChangeLocked(record.name), forgotten_before_us_)) return false;
  EraseLocked(record.name);
  DropKeptLocked(record.name);
  std::erase_if(unloads_, [&](const Unload& u) { return u.name == record.name; });
  if (record.loaded) {
    adapters_.push_back({record.name, record.request_body, record.at_us});
    return true;
  }
  AddUnloadLocked(record.name, record.at_us);
  for (size_t s = 0; s < servers; ++s) kept_.push_back({record.name, s, false});
  return true;
}

int64_t LoadedAdapters::forgotten_before_us() const {
  std::lock_guard lock(mu_);
  return forgotten_before_us_;
}

void LoadedAdapters::set_forgotten_before_us(int64_t at_us) {
  std::lock_guard lock(mu_);
  forgotten_before_us_ = std::max(forgotten_before_us_, at_us);
}

int64_t LoadedAdapters::LastChangeLocked(std::string_view name) const {
  int64_t last = 0;
  for (const Adapter& a : adapters_)
    if (a.name == name) last = std::max(last, a.at_us);
  for (const Unload& u : unloads_)
    if (u.name == name) last = std::max(last, u.at_us);
  return last;
}

int64_t LoadedAdapters::StampLocked(std::string_view name, int64_t now_us) const {
  return std::max({now_us, LastChangeLocked(name) + 1, forgotten_before_us_ + 1});
}

void LoadedAdapters::EraseLocked(std::string_view name) {
  ++version_;
  std::erase_if(adapters_, [&](const Adapter& a) { return a.name == name; });
}

void LoadedAdapters::AddUnloadLocked(std::string name, int64_t at_us) {
  ++version_;
  std::erase_if(unloads_, [&](const Unload& u) { return u.name == name; });
  // In time order, so that every gateway forgets the same ones.
  const auto after = std::upper_bound(unloads_.begin(), unloads_.end(), at_us,
                                      [](int64_t t, const Unload& u) { return t < u.at_us; });
  unloads_.insert(after, {std::move(name), at_us});
  if (unloads_.size() > kKeptUnloads) {
    forgotten_before_us_ = std::max(forgotten_before_us_, unloads_.front().at_us);
    unloads_.erase(unloads_.begin());
  }
}

bool LoadedAdapters::IsLoaded(std::string_view name) const {
  std::lock_guard lock(mu_);
  return std::any_of(adapters_.begin(), adapters_.end(),
                     [&](const Adapter& a) { return a.name == name; });
}

bool LoadedAdapters::Has(const Adapter& adapter) const {
  std::lock_guard lock(mu_);
  return std::any_of(adapters_.begin(), adapters_.end(), [&](const Adapter& a) {
    return a.name == adapter.name && a.request_body == adapter.request_body;
  });
}

std::vector<LoadedAdapters::Adapter> LoadedAdapters::All() const {
  std::lock_guard lock(mu_);
  return adapters_;
}

uint64_t LoadedAdapters::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

void LoadedAdapters::KeepForLater(KeptUpdate update) {
  std::lock_guard lock(mu_);
  if (std::find(kept_.begin(), kept_.end(), update) != kept_.end()) return;
  ++version_;
  kept_.push_back(std::move(update));
}

std::vector<LoadedAdapters::KeptUpdate> LoadedAdapters::UpdatesDue(
    size_t server, const std::vector<ServedName>& listed) {
  std::lock_guard lock(mu_);
  std::vector<KeptUpdate> due;
  std::erase_if(kept_, [&](const KeptUpdate& u) {
    if (u.server != server) return false;
    const bool listed_there = std::any_of(listed.begin(), listed.end(),
                                          [&](const ServedName& n) { return n.name == u.name; });
    if (listed_there) due.push_back(u);
    if (!listed_there) ++version_;
    return !listed_there;
  });
  return due;
}

bool LoadedAdapters::Kept(const KeptUpdate& update) const {
  std::lock_guard lock(mu_);
  return std::find(kept_.begin(), kept_.end(), update) != kept_.end();
}

void LoadedAdapters::Done(const KeptUpdate& update) {
  std::lock_guard lock(mu_);
  if (std::erase(kept_, update) > 0) ++version_;
}

std::vector<LoadedAdapters::KeptUpdate> LoadedAdapters::AllKept() const {
  std::lock_guard lock(mu_);
  return kept_;
}

void LoadedAdapters::DropKeptLocked(std::string_view name) {
  if (std::erase_if(kept_, [&](const KeptUpdate& u) { return u.name == name; }) > 0) ++version_;
}

std::vector<LoadedAdapters::Adapter> LoadedAdapters::MissingFrom(
    const std::vector<ServedName>& listed) const {
  std::lock_guard lock(mu_);
  std::vector<Adapter> missing;
  for (const Adapter& a : adapters_) {
    if (std::none_of(listed.begin(), listed.end(),
                     [&](const ServedName& n) { return n.name == a.name; }))
      missing.push_back(a);
  }
  return missing;
}

}  // namespace warden
