#include "gateway/adapter_update.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>

#include "gateway/api_errors.h"

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

bool Done(const ServerAdapterResult& s, bool load) {
  if (s.listed_after) return *s.listed_after == load;
  return s.status >= 200 && s.status < 300;
}

std::string WhatWentWrong(const ServerAdapterResult& s) {
  if (s.status == 0) return fmt::format("{}: no answer ({})", s.url, s.body);
  return fmt::format("{}: {} {}", s.url, s.status, MessageOf(s.body));
}

}  // namespace

bool IsAdapterLoadPath(std::string_view path) {
  return path == "/v1/load_lora_adapter";
}

bool IsAdapterUpdatePath(std::string_view path) {
  return IsAdapterLoadPath(path) || path == "/v1/unload_lora_adapter";
}

std::string AdapterNameOf(const std::string& body) {
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(body, ec);
  const boost::json::object* o = ec ? nullptr : doc.if_object();
  const boost::json::value* name = o ? o->if_contains("lora_name") : nullptr;
  return name && name->is_string() ? std::string(name->as_string()) : std::string();
}

AdapterUpdateAnswer SummariseAdapterUpdate(std::string_view model, std::string_view adapter,
                                           bool load,
                                           const std::vector<ServerAdapterResult>& servers) {
  size_t done = 0;
  const ServerAdapterResult* first_failure = nullptr;
  std::string failures;
  for (const ServerAdapterResult& s : servers) {
    if (Done(s, load)) {
      ++done;
      continue;
    }
    if (!first_failure) first_failure = &s;
    failures += (failures.empty() ? "" : "; ") + WhatWentWrong(s);
  }
  const std::string_view verb = load ? "added" : "removed";
  if (!first_failure) {
    return {200,
            fmt::format("Success: LoRA adapter '{}' {} successfully on {} server{} of model '{}'.",
                        adapter, verb, servers.size(), servers.size() == 1 ? "" : "s", model),
            true};
  }
  if (done == 0) {
    // FastAPI's answer for a route it does not have: vLLM serves these only when told to.
    if (first_failure->status == 404 && MessageOf(first_failure->body) == "Not Found")
      return {404, ErrorBody(ErrorShape::kOpenAi, 404,
                             fmt::format("{} has no such endpoint: vLLM loads and unloads LoRA "
                                         "adapters while it runs only when started with "
                                         "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
                                         first_failure->url))};
    if (first_failure->status == 0)
      return {502, ErrorBody(ErrorShape::kOpenAi, 502, WhatWentWrong(*first_failure))};
    return {first_failure->status, first_failure->body};
  }
  return {502, ErrorBody(ErrorShape::kOpenAi, 502,
                         fmt::format("LoRA adapter '{}' was {} on {} of {} servers of model '{}', "
                                     "not on {}. Send the request again: the servers where it "
                                     "was {} count as done",
                                     adapter, verb, done, servers.size(), model, failures, verb))};
}

void LoadedAdapters::Loaded(std::string name, std::string request_body) {
  std::lock_guard lock(mu_);
  EraseLocked(name);
  adapters_.push_back({std::move(name), std::move(request_body)});
}

void LoadedAdapters::Unloaded(std::string_view name) {
  std::lock_guard lock(mu_);
  EraseLocked(name);
}

void LoadedAdapters::EraseLocked(std::string_view name) {
  std::erase_if(adapters_, [&](const Adapter& a) { return a.name == name; });
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
