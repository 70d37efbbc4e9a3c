// The JSON admin API under /warden/v1/ (the panel reads the same JSON).
#include <fmt/format.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <optional>
#include <set>

#include "core/routing/admission_queue.h"
#include "core/routing/policy_factory.h"
#include "gateway/api_errors.h"
#include "gateway/config_reload.h"
#include "gateway/gateway.h"
#include "gateway/peer_sync.h"
#include "net/cross_origin.h"
#include "net/json_text.h"
#include "os/system_time.h"
#include "util/percent_decode.h"

namespace warden {
namespace json = boost::json;
namespace {

// The LoRA adapters the model's servers list: each with the servers (by their place in the
// model's URLs) that list it, and whether the gateway keeps it loaded on all of them (it was
// loaded through the gateway).
// `pending_updates`: the updates through the gateway a server missed, to be sent when it is back
// (LoadedAdapters::KeepForLater), each as {server, update: "unload" | "reload in place"}.
json::array LoraAdaptersJson(const ModelState& model) {
  std::vector<std::string> managed;
  for (const LoadedAdapters::Adapter& a : model.loaded_adapters().All()) managed.push_back(a.name);
  const std::vector<LoadedAdapters::KeptUpdate> kept = model.loaded_adapters().AllKept();
  const auto pending = [&](const std::string& name) {
    json::array updates;
    for (const LoadedAdapters::KeptUpdate& k : kept) {
      if (k.name != name) continue;
      updates.push_back(
          json::object{{"server", k.server}, {"update", k.load ? "reload in place" : "unload"}});
    }
    return updates;
  };
  json::array adapters;
  for (const std::string& name : model.served_names().All()) {
    if (!model.served_names().IsAdapter(name)) continue;
    adapters.push_back(
        json::object{{"name", name},
                     {"servers", json::value_from(model.served_names().ServersWith(name))},
                     {"loaded_through_gateway",
                      std::find(managed.begin(), managed.end(), name) != managed.end()},
                     {"pending_updates", pending(name)}});
  }
  // Loaded through the gateway, and listed by no server now (all were down, say).
  for (const std::string& name : managed) {
    if (model.served_names().Contains(name)) continue;
    adapters.push_back(json::object{{"name", name},
                                    {"servers", json::array{}},
                                    {"loaded_through_gateway", true},
                                    {"pending_updates", pending(name)}});
  }
  return adapters;
}

json::value RateOrNull(double rate) {
  return rate < 0 ? json::value(nullptr) : json::value(rate);
}

// The times the chart knows nothing of (ModelState::HistoryExtent), as Unix [from, to].
// (`unix_start`: the Unix time of Now() == 0. A Unix time is unix_start + a Now() value, never
// the Unix time of now less the time since, which rounds differently from one read to the next.)
json::array Gaps(const ModelState::HistoryExtent& extent, double unix_start) {
  json::array gaps;
  for (const auto& [from, to] : extent.gaps)
    gaps.push_back(json::array{unix_start + from, unix_start + to});
  return gaps;
}

// The chart's data: prompt tokens per replica and bucket over the last hour.
json::object HistoryJson(const std::vector<TokenHistory::Bucket>& window, double bucket_s,
                         const ModelState::HistoryExtent& extent, double now, double unix_start) {
  // The last slot: requests placed by the engine's own balancer.
  const size_t slots = window.empty() ? 0 : window.front().cached.size();
  json::array per_replica;
  json::object engine_balanced;
  int64_t cached = 0, computed = 0;
  for (size_t r = 0; r < slots; ++r) {
    json::array c, k;
    for (const auto& b : window) {
      c.push_back(b.cached[r]);
      k.push_back(b.computed[r]);
      cached += b.cached[r];
      computed += b.computed[r];
    }
    json::object series{{"cached", std::move(c)}, {"computed", std::move(k)}};
    if (r + 1 < slots) {
      per_replica.push_back(std::move(series));
    } else {
      engine_balanced = std::move(series);
    }
  }
  const double first_start = window.empty() ? now : window.front().start_s;
  return json::object{
      {"bucket_s", bucket_s},
      {"start_unix", unix_start + first_start},
      // Before this, the chart knows nothing: the gateway's start, or earlier with the hour before
      // a restart read from its state file.
      {"since_unix", unix_start + extent.since},
      // ... and the times since then it counted nothing, the gateway being down: [from, to].
      {"gaps", Gaps(extent, unix_start)},
      {"now_unix", unix_start + now},  // the last bucket is still filling: how far it has got
      {"replicas", std::move(per_replica)},
      {"engine_balanced", std::move(engine_balanced)},
      {"cached_tokens", cached},
      {"computed_tokens", computed},
      {"cached_share",
       RateOrNull(cached + computed > 0 ? double(cached) / double(cached + computed) : -1)}};
}

// The model's settings, names and request counts by kind (beside its replicas').
void AddModelSettings(ModelState& model, ModelRouter& r, double unix_start, json::object& m) {
  m["name"] = model.name();
  m["policy"] = r.policy().name();
  json::array policies;  // what PATCH takes
  for (std::string_view name : PolicyNames()) policies.emplace_back(name);
  policies.emplace_back("sglang-cache-aware:cli");  // (warden:tpr=N takes a number)
  m["policies"] = std::move(policies);
  m["affinity"] = r.settings().affinity;
  m["overflow_limit"] = r.settings().overflow_limit;
  m["overflow_limit_auto"] = r.overflow_limit_auto();
  m["max_num_seqs"] = model.max_num_seqs();
  m["scrape_interval_s"] = model.scrape_interval_s();
  m["session_idle_timeout_s"] = r.sessions().idle_timeout_s();
  m["max_sessions"] = r.sessions().max_entries();
  m["started_unix"] = unix_start;  // the gateway's start: its counters count from there
  m["layout"] = model.config().data_parallel() ? "data-parallel" : "replicas";
  if (const std::string simulated = model.simulated(); simulated.empty()) {
    m["simulated"] = nullptr;
  } else {
    m["simulated"] = simulated;
  }
  m["aliases"] = json::value_from(model.aliases());
  m["served_names"] = json::value_from(model.served_names().All());
  m["lora_adapters"] = LoraAdaptersJson(model);
  m["sessions"] = json::object{{"known", r.sessions().conversations()},
                               {"active", r.sessions().active()},
                               {"evicted", r.sessions().evicted()},
                               {"evicted_active", r.sessions().evicted_active()}};
  json::object key_sources;
  for (size_t s = 0; s < kKeySourceCount; ++s) {
    const auto source = static_cast<KeySource>(s);
    key_sources[KeySourceName(source)] = model.key_source_count(source);
  }
  m["key_sources"] = std::move(key_sources);
  m["inline_system_as_user"] = model.inline_system_as_user();
  m["idle_sleep"] = model.idle_sleep();
  m["inline_system_rewrites"] = model.inline_system_rewrites();
  m["follow_up_turns"] = r.follow_up_turns();
  m["routed_to_draining"] = r.routed_to_draining();
  m["stayed_on_replica"] = RateOrNull(
      r.follow_up_turns() > 0 ? double(r.stayed_turns()) / double(r.follow_up_turns()) : -1);
}

// Replica `i`'s row: its state, its counters and its last scrape. `recent_context`: the context
// of its conversations seen lately (the working set's window).
json::object ReplicaJson(ModelState& model, ModelRouter& r, int i, double now,
                         int64_t recent_context) {
  const ReplicaLoad& load = r.load(i);
  const ReplicaCounters& c = r.counters(i);
  const ScrapedMetrics& s = r.scraped(i);
  json::object o;
  o["index"] = i;
  o["url"] = model.ReplicaUrl(i);
  o["rank"] = model.target(i).rank >= 0 ? json::value(model.target(i).rank) : json::value(nullptr);
  o["healthy"] = r.healthy(i);
  o["draining"] = r.draining(i);
  o["in_flight"] = load.in_flight;
  o["peer_in_flight"] = load.peer_in_flight;
  o["held"] = r.admission().held(i);
  o["reserved"] = r.admission().reserved(i);
  o["held_too_long"] = r.admission().held_too_long(i);
  o["requests"] = c.requests;
  o["sticky"] = c.sticky;
  o["overflow"] = c.overflow;
  o["new"] = c.new_conversations;
  o["rehomed"] = c.rehomed;
  o["balanced"] = c.balanced;
  o["failed"] = c.failed;
  o["error_answers"] = c.error_answers;
  o["client_error_answers"] = c.client_error_answers;
  // Its last answers were server errors (ModelRouter::failing): passed over for a while.
  o["failing"] = r.failing(i, now);
  // Why its health checks fail, and since when (null while they pass).
  if (const auto problem = model.HealthProblemOf(i)) {
    o["unhealthy_since_unix"] = problem->since_unix;
    o["health_problem"] = problem->what;
  } else {
    o["unhealthy_since_unix"] = nullptr;
    o["health_problem"] = nullptr;
  }
  o["active_conversations"] = load.active_conversations;
  // Its engines sleep (vLLM's sleep mode), at its last scrape: out of service, or, with
  // idle_sleep, in service and woken by its next request.
  o["asleep"] = s.asleep.value_or(false);
  // Asleep at its last scrape, and a request was sent to it since (idle_sleep): waking. Not one
  // put to sleep through the gateway, which no request wakes (found by review).
  bool slept_by_hand = false;
  for (size_t p = 0; p < model.pools().size(); ++p)
    if (model.pools()[p].get() == model.target(i).pool) slept_by_hand = model.slept_by_hand(p);
  o["waking"] = s.asleep.value_or(false) && !r.TakenAsleep(i, now) && !slept_by_hand;
  // A replica that does not answer its health check: its last scrape is no current figure.
  const bool answers = r.healthy(i);
  o["running"] = answers ? json::value(s.running) : json::value(nullptr);
  o["waiting"] = answers ? json::value(s.waiting) : json::value(nullptr);
  o["kv_cache_usage"] = answers ? json::value(s.kv_cache_usage) : json::value(nullptr);
  o["prefix_hit_rate"] = RateOrNull(r.prefix_hit_rate(i));
  o["external_prefix_hit_rate"] = RateOrNull(r.external_prefix_hit_rate(i));
  o["cached_prompt_tokens"] = c.cached_prompt_tokens;
  o["computed_prompt_tokens"] = c.computed_prompt_tokens;
  o["usage_unknown"] = c.usage_unknown;
  o["cut_without_usage"] = c.cut_without_usage;
  o["cache_reported"] = c.cache_reported;
  o["cache_unreported"] = c.cache_unreported;
  o["returning_turns"] = c.returning_turns;
  o["history_tokens"] = c.history_tokens;
  o["history_cached_tokens"] = c.history_cached_tokens;
  o["kv_cache_tokens"] = s.kv_cache_tokens();
  // vLLM's CPU offloading: GiB of host memory an engine keeps prompts in (null: none published).
  o["kv_offloading_gib"] =
      s.kv_offloading_gib > 0 ? json::value(s.kv_offloading_gib) : json::value(nullptr);
  o["prefix_caching"] = s.prefix_caching ? json::value(*s.prefix_caching) : json::value(nullptr);
  o["active_context_tokens"] = r.sessions().active_context_on(i);
  o["recent_context_tokens"] = recent_context;
  return o;
}

// The requests placed by the engine's own balancer, counted apart from the replicas'.
json::object EngineBalancedJson(const ModelRouter& r) {
  const ReplicaCounters& d = r.delegated();
  return json::object{{"requests", d.requests},
                      {"in_flight", r.delegated_in_flight()},
                      {"failed", d.failed},
                      {"error_answers", d.error_answers},
                      {"client_error_answers", d.client_error_answers},
                      {"usage_unknown", d.usage_unknown},
                      {"cut_without_usage", d.cut_without_usage},
                      {"cache_reported", d.cache_reported},
                      {"cache_unreported", d.cache_unreported},
                      {"cached_prompt_tokens", d.cached_prompt_tokens},
                      {"computed_prompt_tokens", d.computed_prompt_tokens}};
}

// The model's sums over its replicas (and the engine's balancer, for requests and tokens).
struct ModelSums {
  int64_t requests = 0, sticky = 0, homed = 0, cached = 0, computed = 0, history = 0,
          history_cached = 0;
  int64_t kv_total = 0, context_total = 0, recent_total = 0, replicas_over = 0,
          healthy_replicas = 0;

  void AddReplica(const ReplicaCounters& c) {
    requests += c.requests;
    sticky += c.sticky;
    homed += c.sticky + c.overflow + c.rehomed;
    cached += c.cached_prompt_tokens;
    computed += c.computed_prompt_tokens;
    history += c.history_tokens;
    history_cached += c.history_cached_tokens;
  }
  // A replica that is down lends no cache; its conversations still need one (they move).
  void AddWorkingSet(bool healthy, int64_t kv_cache_tokens, int64_t active_context,
                     int64_t recent_context) {
    context_total += active_context;
    recent_total += recent_context;
    if (!healthy) return;
    ++healthy_replicas;
    kv_total += kv_cache_tokens;
    if (kv_cache_tokens > 0 && recent_context > kv_cache_tokens) ++replicas_over;
  }
  void AddDelegated(const ReplicaCounters& d) {
    requests += d.requests;
    cached += d.cached_prompt_tokens;
    computed += d.computed_prompt_tokens;
  }

  json::object Totals() const {
    return json::object{
        {"requests", requests},
        {"sticky", sticky},
        // Of the turns of conversations already placed, the share that went home: first turns
        // and requests placed by load alone have no home to go to, and would dilute it.
        {"sticky_share", RateOrNull(homed > 0 ? double(sticky) / double(homed) : -1)},
        {"cached_prompt_tokens", cached},
        {"computed_prompt_tokens", computed},
        {"cached_share",
         RateOrNull(cached + computed > 0 ? double(cached) / double(cached + computed) : -1)}};
  }
  // Whether the recent context fits the healthy replicas' caches: yes while their size is not
  // published (nothing to judge by), no when none is healthy and something is going on.
  bool Fits() const {
    if (healthy_replicas == 0) return recent_total == 0;
    return kv_total == 0 || (recent_total <= kv_total && replicas_over == 0);
  }
  // The seed's rule of thumb: the conversations going on x their context against the KV cache.
  json::object WorkingSet(const ModelRouter& r, double recent_window_s, size_t recent) const {
    return json::object{
        {"active_conversations", r.sessions().active()},
        {"active_context_tokens", context_total},
        {"recent_window_s", recent_window_s},
        {"recent_conversations", recent},
        {"recent_context_tokens", recent_total},
        {"kv_cache_tokens", kv_total},
        {"ratio", RateOrNull(kv_total > 0 ? double(recent_total) / double(kv_total) : -1)},
        {"fits", Fits()},
        {"healthy_replicas", healthy_replicas},
        {"replicas_over", replicas_over}};
  }
};

json::object ModelJson(ModelState& model, double now, double unix_start) {
  std::vector<TokenHistory::Bucket> window;
  double bucket_s = 0;
  json::object m = model.WithRouter([&](ModelRouter& r) {
    json::object m;
    AddModelSettings(model, r, unix_start, m);
    // The seed's rule of thumb is about the conversations going on now: those seen in the last
    // tenth of the idle timeout (a minute by default), not every one still within it.
    const double recent_window_s = r.sessions().idle_timeout_s() / 10;
    std::vector<int64_t> recent_context(r.num_replicas(), 0);
    const size_t recent = r.sessions().RecentContext(now - recent_window_s, recent_context);
    ModelSums sums;
    json::array replicas;
    for (int i = 0; i < r.num_replicas(); ++i) {
      replicas.push_back(ReplicaJson(model, r, i, now, recent_context[i]));
      sums.AddReplica(r.counters(i));
      sums.AddWorkingSet(r.healthy(i), r.scraped(i).kv_cache_tokens(),
                         r.sessions().active_context_on(i), recent_context[i]);
    }
    // Of the previous turn's prompt, the share turns back on its replica read from the cache.
    m["history_read_from_cache"] =
        RateOrNull(sums.history > 0 ? double(sums.history_cached) / double(sums.history) : -1);
    m["replicas"] = std::move(replicas);
    m["working_set"] = sums.WorkingSet(r, recent_window_s, recent);
    window = r.history().Window(now);  // copied here, turned into JSON outside the lock
    bucket_s = r.history().bucket_s();
    m["when_affinity_off"] =
        model.config().data_parallel() && model.engine_balances_when_off() ? "engine" : "gateway";
    m["engine_balanced"] = EngineBalancedJson(r);
    sums.AddDelegated(r.delegated());
    m["totals"] = sums.Totals();
    // What admission's claims are made of, as learned from the replicas' usage.
    m["admission_estimates"] = json::object{{"tokens_per_chunk", r.admission().tokens_per_block()},
                                            {"reply_tokens", r.admission().reply_tokens()}};
    // The same measure, for the replicas' caches counted in chunks by a prefix-aware policy.
    m["prefix_tokens_per_chunk"] = r.chunk_tokens();
    return m;
  });
  m["admission"] = model.admission();
  json::object patched;  // setting -> what a PATCH set and what the config says
  for (const PatchedSetting& p : model.Patched())
    patched[p.setting] = json::object{{"value", p.value}, {"config", p.config_value}};
  m["patched"] = std::move(patched);
  json::object history = HistoryJson(window, bucket_s, model.history_extent(), now, unix_start);
  // The changes the chart marks: those within its window.
  json::array changes;
  for (const ChangeLog::Change& c : model.changes().Since(history["start_unix"].as_double()))
    changes.push_back(json::object{{"unix", c.unix}, {"what", c.what}, {"by", c.by}});
  m["changes"] = std::move(changes);
  m["history"] = std::move(history);
  return m;
}

// Reads {"replicas": [{"index": i, "draining": bool}, ...]} into `draining` (replica, draining).
// Returns an error message or empty.
std::string ReadReplicaPatch(const json::value& value, int num_replicas,
                             std::vector<std::pair<int, bool>>* draining) {
  constexpr std::string_view kShape = R"(replicas: must be [{"index": i, "draining": bool}, ...])";
  if (!value.is_array()) return std::string(kShape);
  for (const json::value& item : value.get_array()) {
    const json::object* o = item.if_object();
    const json::value* index = o ? o->if_contains("index") : nullptr;
    const json::value* drain = o ? o->if_contains("draining") : nullptr;
    if (!index || !drain || !drain->is_bool() || o->size() != 2) return std::string(kShape);
    if (!index->is_int64() || index->get_int64() < 0 || index->get_int64() >= num_replicas) {
      return fmt::format("replicas: index must be a whole number from 0 to {}", num_replicas - 1);
    }
    const int i = static_cast<int>(index->get_int64());
    if (std::any_of(draining->begin(), draining->end(),
                    [i](const auto& d) { return d.first == i; }))
      return fmt::format("replicas: index {} is given twice", i);
    draining->emplace_back(i, drain->get_bool());
  }
  return {};
}

// A key some object in `value` gives twice, if any (Boost.JSON keeps the last one silently).
// REQUIRES: `value` well formed (simdjson's on-demand reader is not asked on after an error).
std::optional<std::string> KeyGivenTwice(simdjson::ondemand::value value) {
  simdjson::ondemand::object object;
  simdjson::ondemand::array array;
  if (value.get_object().get(object) == simdjson::SUCCESS) {
    std::set<std::string> keys;
    for (auto field : object) {
      std::string_view key;
      simdjson::ondemand::value inner;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return std::nullopt;
      if (!keys.insert(std::string(key)).second) return std::string(key);
      if (field.value().get(inner) != simdjson::SUCCESS) return std::nullopt;
      if (std::optional<std::string> twice = KeyGivenTwice(inner)) return twice;
    }
  } else if (value.get_array().get(array) == simdjson::SUCCESS) {
    for (auto element : array) {
      simdjson::ondemand::value inner;
      if (element.get(inner) != simdjson::SUCCESS) return std::nullopt;
      if (std::optional<std::string> twice = KeyGivenTwice(inner)) return twice;
    }
  }
  return std::nullopt;
}

std::optional<std::string> KeyGivenTwice(std::string_view body) {
  simdjson::ondemand::parser parser;
  const simdjson::padded_string padded(body);
  simdjson::ondemand::document doc;
  simdjson::ondemand::value root;
  if (parser.iterate(padded).get(doc) != simdjson::SUCCESS ||
      doc.get_value().get(root) != simdjson::SUCCESS)
    return std::nullopt;
  return KeyGivenTwice(root);
}

// "a, b, c": the policies' names, for an error message.
// Applies {"affinity": bool, "overflow_limit": N|"auto", "policy": name, "replicas": [{"index":
// i, "draining": bool}]}, all or nothing. Returns an error message or empty.
std::string ApplyPatch(ModelState& model, std::string_view body, double unix_now,
                       ModelState::SettingsFrom from) {
  boost::system::error_code ec;
  json::value doc = json::parse(body, ec);
  if (ec || !doc.is_object()) return "the body must be a JSON object";
  if (std::optional<std::string> twice = KeyGivenTwice(body))
    return fmt::format("{}: is given twice", ValidUtf8OrEscaped(*twice));
  const json::object& o = doc.get_object();
  ModelSettingsChange change;
  std::vector<std::pair<int, bool>> draining;
  for (const auto& [key, value] : o) {
    if (key == "replicas") {
      std::string error = ReadReplicaPatch(value, model.num_replicas(), &draining);
      if (!error.empty()) return error;
    } else if (key == "affinity") {
      if (!value.is_bool()) return "affinity: must be true or false";
      change.affinity = value.get_bool();
    } else if (key == "overflow_limit") {
      if (value.is_string() && value.get_string() == "auto") {
        change.overflow_limit = 0;
      } else if (value.is_int64() && value.get_int64() >= 1 &&
                 value.get_int64() <= kMaxOverflowLimit) {
        change.overflow_limit = static_cast<int>(value.get_int64());
      } else {
        return fmt::format("overflow_limit: must be an integer from 1 to {} or \"auto\"",
                           kMaxOverflowLimit);
      }
    } else if (key == "policy") {
      const std::unique_ptr<RoutingPolicy> policy =
          value.is_string() ? MakePolicy(value.get_string()) : nullptr;
      if (!policy) return fmt::format("policy: must be one of {}", PolicyNameList());
      change.policy = std::string(value.get_string());  // "warden:tpr=N" keeps its option
    } else if (key == "admission") {
      AdmissionOptions options;
      if (!value.is_string()) {
        return "admission: must be a string: \"off\", \"fifo\", \"recent:K\" (K >= 0) or "
               "\"reserve:N[:SECONDS]\" (N >= 2, 0 < SECONDS <= 3600)";
      }
      // (ParseAdmission's message names the value refused, as the config's check does.)
      if (std::string error = ParseAdmission(std::string(value.get_string()), &options);
          !error.empty())
        return ValidUtf8OrEscaped(error);
      change.admission = CanonicalAdmission(std::string(value.get_string()));
    } else {
      return fmt::format(
          "{}: unknown field (affinity, overflow_limit, policy, admission, replicas)",
          std::string_view(key));
    }
  }
  // (A value it already had is no change: the log says nothing, as the changes list.)
  const ModelSettingsChange changed = model.ApplySettings(change, from, unix_now);
  if (changed.affinity) {
    spdlog::info("model {}: affinity {} from now on", model.name(),
                 *changed.affinity ? "on" : "off");
  }
  if (changed.overflow_limit) {
    spdlog::info("model {}: overflow limit {} from now on", model.name(),
                 *changed.overflow_limit == 0 ? std::string("auto")
                                              : std::to_string(*changed.overflow_limit));
  }
  if (changed.policy)
    spdlog::info("model {}: policy {} from now on", model.name(), *changed.policy);
  if (changed.admission)
    spdlog::info("model {}: admission {} from now on", model.name(), *changed.admission);
  if (!draining.empty()) model.SetDraining(draining, unix_now, from);
  for (const auto& [replica, drain] : draining) {
    spdlog::info("model {}: replica {} ({}) {}", model.name(), replica, model.ReplicaUrl(replica),
                 drain ? "draining: no more requests go there" : "back in service");
  }
  return {};
}

HttpResponse Json(const HttpRequest& request, http::status status, const json::value& v) {
  return MakeResponse(request, status, JsonText(v));
}

bool IsGetOrHead(const HttpRequest& request) {
  return request.method() == http::verb::get || request.method() == http::verb::head;
}

HttpResponse AdminError(const HttpRequest& request, http::status status, std::string_view message) {
  return Json(request, status, json::object{{"error", json::object{{"message", message}}}});
}

// 405, with the methods the endpoint takes (RFC 9110 §15.5.6).
HttpResponse MethodNotAllowed(const HttpRequest& request, std::string_view allow) {
  HttpResponse res =
      AdminError(request, http::status::method_not_allowed, fmt::format("use {}", allow));
  res.set(http::field::allow, allow);
  return res;
}

}  // namespace

bool Gateway::ApplyModelSettings(const ModelSettingsChange& change) {
  ModelState* model = FindModel(change.model);
  if (!model) return false;
  model->ApplySettings(change, ModelState::SettingsFrom::kConfigFile, SystemUnixTime());
  if (change.aliases) model->SetAliases(*change.aliases);
  NoteIfPolicyReadsPrefixes(*model);
  return true;
}

// Each client key's usage since start (what /metrics has as warden_client_*), and the requests
// refused for want of a key. `keys_required`: the gateway has api_keys at all.
json::object Gateway::ClientsJson() const {
  const std::shared_ptr<const ClientTable> table = Clients();
  json::array clients;
  for (const ClientTable::Client& client : table->clients()) {
    const ClientTable::Counts& c = *client.counts;
    const int64_t cached = c.cached_tokens.load(), computed = c.computed_tokens.load();
    clients.push_back(json::object{
        {"name", client.name},
        {"requests", c.requests.load()},
        {"prompt_tokens", cached + computed},
        {"cached_prompt_tokens", cached},
        {"computed_prompt_tokens", computed},
        {"output_tokens", c.output_tokens.load()},
        {"in_flight", c.in_flight.load()},
        {"max_in_flight", client.max_in_flight},
        {"limited", c.limited.load()},
        {"tokens_per_minute", client.tokens_per_minute},
        {"budget_left", client.tokens_per_minute
                            ? json::value(std::floor(client.counts->budget.Left(Now())))
                            : json::value(nullptr)},
        {"budget_limited", c.budget_limited.load()}});
  }
  return json::object{{"keys_required", !table->empty()},
                      {"unauthorized", unauthorized_.load()},
                      {"clients", std::move(clients)}};
}

std::optional<HttpResponse> Gateway::RefuseUnknownHost(const HttpRequest& request) {
  const std::string_view authority = TargetAuthority(request.target());
  const std::string_view host =
      authority.empty() ? FirstFieldValue(request, http::field::host) : authority;
  if (allowed_hosts_.Allows(host)) return std::nullopt;
  const std::string message = fmt::format(
      "this gateway answers to {} only, not to '{}' (a web page that points its own name at this "
      "machine could use it as its own site): add the name to allowed_hosts (--allowed-host)",
      allowed_hosts_.Describe(), ValidUtf8OrEscaped(HostName(host).value_or(host)));
  const std::string_view path = TargetPath(request.target());
  if (IsAdminPath(path)) return AdminError(request, http::status::forbidden, message);
  if (path.starts_with("/v1/")) return Error(request, ErrorShapeFor(path), 403, message);
  return MakeResponse(request, http::status::forbidden, message + "\n", "text/plain");
}

std::optional<HttpResponse> Gateway::RefuseAdminRequest(const HttpRequest& request) {
  if (!admin_keys_.empty() && !admin_keys_.AcceptsBearer(request[http::field::authorization])) {
    const bool given = !request[http::field::authorization].empty();
    HttpResponse res = AdminError(request, http::status::unauthorized,
                                  given ? "the admin token given is not this gateway's admin_token"
                                        : "admin token required: Authorization: Bearer <token>");
    res.set(http::field::www_authenticate, R"(Bearer realm="warden")");
    return res;
  }
  if (!IsGetOrHead(request) && CrossOrigin(request)) {
    return AdminError(request, http::status::forbidden,
                      "a change from a page of another origin is refused (the panel, curl and "
                      "peers send none)");
  }
  return std::nullopt;
}

HttpResponse Gateway::AdminResponse(const HttpRequest& request, std::string_view path) {
  if (std::optional<HttpResponse> refused = RefuseAdminRequest(request)) {
    refused->set("X-Content-Type-Options", "nosniff");
    return std::move(*refused);
  }
  HttpResponse res = AdminAnswer(request, path);
  res.set("X-Content-Type-Options", "nosniff");
  res.set(http::field::cache_control, "no-store");
  return res;
}

HttpResponse Gateway::AdminAnswer(const HttpRequest& request, std::string_view path) {
  constexpr std::string_view kModels = "/warden/v1/models";
  if (path == kModels || path == std::string(kModels) + "/") {
    if (!IsGetOrHead(request)) return MethodNotAllowed(request, "GET, HEAD");
    json::array models;
    for (auto& m : models_) models.push_back(ModelJson(*m, Now(), UnixTime(0)));
    return Json(request, http::status::ok, json::object{{"models", std::move(models)}});
  }
  if (path.starts_with(std::string(kModels) + "/")) {
    std::string name;  // percent-encoded by the panel and most clients
    if (!PercentDecode(path.substr(kModels.size() + 1), &name))
      return AdminError(request, http::status::bad_request, "malformed %-escape in the model name");
    ModelState* model = FindModel(name);
    if (!model) {
      return AdminError(request, http::status::not_found,
                        fmt::format("no model '{}'", QuotedName(name)));
    }
    if (request.method() == http::verb::patch && handing_over_.load(std::memory_order_relaxed)) {
      // (Found by review: answered 200 here, and lost: a drained replica back in service.)
      HttpResponse response = AdminError(
          request, http::status::service_unavailable,
          "a hand-over to a new gateway is under way (SIGUSR2): a change made here now would not "
          "reach it; send it again in a moment");
      response.set(http::field::retry_after, "1");
      return response;
    }
    if (request.method() == http::verb::patch) {
      // (The panel says it sends the change: its list of changes says who made each.)
      const auto from = request["X-Warden-Via"] == "panel" ? ModelState::SettingsFrom::kPanel
                                                           : ModelState::SettingsFrom::kAdminApi;
      if (std::string error = ApplyPatch(*model, request.body(), SystemUnixTime(), from);
          !error.empty()) {
        return AdminError(request, http::status::bad_request, error);
      }
      NoteIfPolicyReadsPrefixes(*model);
      peer_sync_->Nudge();  // a drain reaches the peers now, not at the next interval
    } else if (!IsGetOrHead(request)) {
      return MethodNotAllowed(request, "GET, HEAD, PATCH");
    }
    return Json(request, http::status::ok, ModelJson(*model, Now(), UnixTime(0)));
  }
  if (path == kPeerHomesPath) {
    if (!peer_sync_->enabled()) {
      return AdminError(request, http::status::not_found,
                        "this gateway has no peers: list them in `peers` to share homes");
    }
    if (IsGetOrHead(request)) {  // a peer that starts: every home known here
      HttpResponse response =
          MakeResponse(request, http::status::ok, peer_sync_->AllHomesMessage());
      return response;
    }
    if (request.method() != http::verb::post) return MethodNotAllowed(request, "GET, HEAD, POST");
    int taken = 0;
    std::vector<std::string> not_served;
    if (std::string error = peer_sync_->Receive(request.body(), &taken, &not_served);
        !error.empty())
      return AdminError(request, http::status::bad_request, error);
    json::object answer{{"taken", taken}, {"instance", peer_sync_->instance()}};
    // The sender says so: a model name that differs between peers shares nothing.
    if (!not_served.empty()) answer["models_not_served"] = json::value_from(not_served);
    return Json(request, http::status::ok, std::move(answer));
  }
  if (path == "/warden/v1/peers") {
    if (!IsGetOrHead(request)) return MethodNotAllowed(request, "GET, HEAD");
    return Json(request, http::status::ok, peer_sync_->Status());
  }
  if (path == "/warden/v1/clients") {
    if (!IsGetOrHead(request)) return MethodNotAllowed(request, "GET, HEAD");
    return Json(request, http::status::ok, ClientsJson());
  }
  return AdminError(request, http::status::not_found,
                    fmt::format("no admin endpoint {}", ValidUtf8OrEscaped(path)));
}

}  // namespace warden
