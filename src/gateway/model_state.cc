#include "gateway/model_state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/routing/policy_factory.h"
#include "os/system_time.h"
#include "util/steady_seconds.h"

namespace warden {
namespace {

ModelRouterOptions RouterOptions(const ModelConfig& c) {
  ModelRouterOptions o;
  o.settings.affinity = c.affinity;
  o.settings.overflow_limit = c.effective_overflow_limit();
  o.overflow_limit_auto = c.overflow_limit == 0;
  o.max_sessions = c.max_sessions;
  o.session_idle_timeout_s = c.session_idle_timeout_s;
  ParseAdmission(c.admission, &o.admission);  // validated before
  return o;
}

}  // namespace

ModelState::ModelState(const ModelConfig& config,
                       const std::vector<boost::asio::any_io_executor>& shards)
    : config_(config),
      replica_authorization_(config.replica_api_key.empty() ? ""
                                                            : "Bearer " + config.replica_api_key),
      aliases_(config.aliases),
      router_(config.num_replicas(), MakePolicy(config.policy), RouterOptions(config)),
      scrape_errors_(config.num_replicas(), 0),
      responses_(std::max<size_t>(1, config.max_sessions)),
      served_names_(config.name, config.urls.size()),
      patched_(config),
      drain_changed_at_(config.num_replicas(), 0.0),
      admission_enabled_(config.admission != "off"),
      max_num_seqs_(config.max_num_seqs),
      scrape_interval_s_(config.scrape_interval_s),
      engine_balances_when_off_(config.engine_balances_when_off),
      inline_system_as_user_(config.inline_system_as_user),
      idle_sleep_(config.idle_sleep),
      admission_(config.admission),
      policy_(config.policy),
      expiry_timer_(shards.front()),
      scrape_schedule_(config.urls.size()) {
  lost_ = std::make_unique<std::atomic<bool>[]>(config.num_replicas());
  lost_since_ =
      std::make_unique<std::atomic<std::chrono::steady_clock::rep>[]>(config.num_replicas());
  stalled_ = std::make_unique<std::atomic<bool>[]>(config.num_replicas());
  answered_at_ =
      std::make_unique<std::atomic<std::chrono::steady_clock::rep>[]>(config.num_replicas());
  std::shared_ptr<boost::asio::ssl::context> tls;  // one for the model's https replicas
  for (const std::string& url : config.urls) {
    UpstreamUrl parsed;
    std::string error;
    ParseUpstreamUrl(url, &parsed, &error);  // validated before
    if (parsed.tls && !tls) {
      tls = MakeTlsContext({.verify = config.tls_verify, .ca_file = config.tls_ca_file}, &error);
      if (!tls) throw std::runtime_error(fmt::format("model {}: {}", config.name, error));
    }
    pools_.push_back(
        std::make_unique<UpstreamPool>(shards, parsed, 256, parsed.tls ? tls : nullptr));
  }
  names_read_asked_ = std::make_unique<std::atomic<bool>[]>(pools_.size());
  slept_by_hand_ = std::make_unique<std::atomic<uint64_t>[]>(pools_.size());
  if (config.data_parallel()) {
    for (int r = 0; r < config.data_parallel_size; ++r) targets_.push_back({pools_[0].get(), r});
  } else {
    for (auto& p : pools_) targets_.push_back({p.get(), -1});
  }
  std::vector<int> server_of(targets_.size());
  for (size_t r = 0; r < targets_.size(); ++r) server_of[r] = static_cast<int>(ServerOf(r));
  router_.SetServers(server_of);
}

std::shared_ptr<AdmissionWaiter> ModelState::Admit(int replica, uint64_t id,
                                                   std::span<const uint64_t> blocks,
                                                   std::string_view key, bool reserves,
                                                   const boost::asio::any_io_executor& executor,
                                                   std::string_view continues, double waited_s) {
  std::lock_guard lock(mu_);
  AdmissionQueue::Request request;
  request.id = id;
  AppendStoredHistoryBlocks(continues, &request.blocks);
  request.blocks.insert(request.blocks.end(), blocks.begin(), blocks.end());
  request.last_active = router_.LastActive(key, replica);
  // 0 is "no conversation" to admission: a key hashing to it loses its reservations, nothing else.
  request.conversation = key.empty() ? 0 : XXH3_64bits(key.data(), key.size());
  request.reserves = reserves;
  if (waited_s > 0) request.arrived = Now() - waited_s;
  released_.clear();
  const bool admitted = router_.admission().Offer(replica, std::move(request), Now(), &released_);
  WakeReleased();
  if (admitted) return nullptr;
  auto waiter = std::make_shared<AdmissionWaiter>(executor);
  waiters_[id] = waiter;
  return waiter;
}

void ModelState::AppendStoredHistoryBlocks(std::string_view continues,
                                           std::vector<uint64_t>* blocks) const {
  // At most a context's worth (a million tokens when the replicas' is not known): a replica's
  // usage said any size up to 2^29.
  const int64_t bound = usage_bound() > 0 ? usage_bound() : int64_t{1} << 20;
  const int64_t tokens = std::min(continues.empty() ? 0 : responses_.TokensOf(continues), bound);
  if (tokens <= 0) return;
  const double per_block = std::max(1.0, router_.admission().tokens_per_block());
  const auto count = static_cast<size_t>(std::ceil(static_cast<double>(tokens) / per_block));
  // Hashes of their own, chained from the response's id: the history is the conversation's, and
  // a later turn continuing the same response claims the same blocks.
  blocks->reserve(blocks->size() + count);
  uint64_t hash = XXH3_64bits(continues.data(), continues.size());
  for (size_t i = 0; i < count; ++i) {
    hash = XXH3_64bits_withSeed(&i, sizeof i, hash);
    blocks->push_back(hash);
  }
}

double ModelState::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ModelState::AdmissionDone(uint64_t id, int prompt_tokens, int output_tokens, bool completed) {
  std::lock_guard lock(mu_);
  // No next turn comes to a replica drained or lost meanwhile: nothing is kept there for it.
  const int replica = router_.admission().admitted_on(id);
  if (replica >= 0 && (router_.draining(replica) || lost(replica))) completed = false;
  released_.clear();
  router_.admission().Done(id, prompt_tokens, output_tokens, &released_, Now(), completed);
  WakeReleased();
}

void ModelState::WakeReleased() {
  for (uint64_t next : released_) {
    auto it = waiters_.find(next);
    if (it == waiters_.end()) continue;
    std::shared_ptr<AdmissionWaiter> waiter = std::move(it->second);
    waiters_.erase(it);
    boost::asio::post(waiter->timer.get_executor(), [waiter] {
      waiter->released = true;
      waiter->timer.cancel();
    });
  }
  const double next = router_.admission().next_expiry();
  if (next == std::numeric_limits<double>::infinity() || next == expiry_armed_) return;
  expiry_armed_ = next;
  // The timer is touched on its own (single-threaded) shard only.
  boost::asio::post(expiry_timer_.get_executor(), [this, next] {
    expiry_timer_.expires_at(start_ + SteadySeconds(next));
    expiry_timer_.async_wait([this, next](const boost::system::error_code& ec) {
      if (!ec) OnExpiryTimer(next);
    });
  });
}

void ModelState::OnExpiryTimer(double when) {
  std::lock_guard lock(mu_);
  if (expiry_armed_ == when) expiry_armed_ = -1;
  released_.clear();
  const auto held_too_long = [&] {
    int64_t n = 0;
    for (int i = 0; i < num_replicas(); ++i) n += router_.admission().held_too_long(i);
    return n;
  };
  const int64_t before = held_too_long();
  router_.admission().Expire(Now(), &released_);
  if (const int64_t let_in = held_too_long() - before; let_in > 0 && Now() >= quiet_until_) {
    quiet_until_ = Now() + 60;  // (a line a minute at most)
    spdlog::warn(
        "model {}: {} request(s) held {:g} s (admission_max_hold_s) let in whatever the room: "
        "admission cannot keep up with the load (warden_admission_held_too_long_total)",
        name(), let_in, router_.admission().max_hold_s());
  }
  WakeReleased();
}

void ModelState::StopReserving() {
  std::lock_guard lock(mu_);
  reserving_stopped_ = true;
  released_.clear();
  router_.admission().StopReserving(&released_);
  WakeReleased();
}

bool ModelState::CancelHeld(uint64_t id) {
  std::lock_guard lock(mu_);
  released_.clear();
  if (!router_.admission().Cancel(id, &released_)) return false;
  waiters_.erase(id);
  WakeReleased();
  return true;
}

void ModelState::SetAdmissionMaxHold(double seconds) {
  std::lock_guard lock(mu_);
  router_.admission().SetMaxHold(seconds);
}

bool ModelState::AliasMatches(std::string_view requested) const {
  std::lock_guard lock(aliases_mu_);
  return std::any_of(aliases_.begin(), aliases_.end(),
                     [&](const std::string& alias) { return GlobMatches(alias, requested); });
}

std::vector<int> ModelState::ReplicasOf(size_t pool_index) const {
  std::vector<int> replicas;
  for (int r = 0; r < num_replicas(); ++r) {
    if (targets_[r].pool == pools_[pool_index].get()) replicas.push_back(r);
  }
  return replicas;
}

size_t ModelState::ServerOf(int replica) const {
  size_t server = 0;
  while (server < pools_.size() && pools_[server].get() != targets_[replica].pool) ++server;
  return server;
}

void ModelState::SetEnginesPresent(size_t server, int engines, double now_unix) {
  std::lock_guard lock(simulated_mu_);
  if (engines_present_.size() <= server) engines_present_.resize(server + 1);
  EnginesPresent& present = engines_present_[server];
  if (present.engines != engines) present = {engines, now_unix};
}

std::optional<ModelState::HealthProblem> ModelState::HealthProblemOf(int replica) const {
  const size_t server = ServerOf(replica);
  std::lock_guard lock(simulated_mu_);
  if (server < health_problems_.size() && health_problems_[server]) return health_problems_[server];
  const int rank = targets_[replica].rank;
  if (server < engines_present_.size() && engines_present_[server].engines >= 0 &&
      rank >= engines_present_[server].engines) {
    return HealthProblem{engines_present_[server].since_unix,
                         fmt::format("no rank {}: the server has {} data-parallel engine(s)", rank,
                                     engines_present_[server].engines)};
  }
  return std::nullopt;
}

std::string ModelState::ReplicaUrl(int replica) const {
  const ReplicaTarget& t = targets_[replica];
  return t.pool->url().ToString();
}

std::string ModelState::ReplicaStateId(int replica) const {
  return ReplicaId(ReplicaUrl(replica), targets_[replica].rank);
}

ModelSettingsChange ModelState::ApplySettings(const ModelSettingsChange& change, SettingsFrom from,
                                              double unix_now) {
  std::lock_guard lock(mu_);
  const ModelSettingsChange differs = WhatDiffers(change);
  SetConfigOnlySettings(change);
  SetRouterSettings(change);
  const bool admin = from != SettingsFrom::kConfigFile;
  changes_.Note(unix_now, Describe(differs, max_num_seqs(), router_.overflow_limit_auto()),
                std::string(ChangedBy(from)));
  if (admin) {
    patched_.Patched(change);
  } else {
    patched_.Configured(change);
  }
  for (const auto& [setting, value] : SettingValues(change)) {
    SettingClock& clock = setting_clocks_[setting];
    // Later than any change taken before, even from a peer whose clock runs ahead.
    clock.at = std::max(unix_now, clock.at + 0.001);
    clock.shared = admin;
    ++settings_version_;
  }
  return differs;
}

ModelSettingsChange ModelState::RouterSettings() const {
  ModelSettingsChange now;
  now.affinity = router_.settings().affinity;
  now.overflow_limit = router_.overflow_limit_auto() ? 0 : router_.settings().overflow_limit;
  now.policy = policy_;
  now.admission = admission_;
  return now;
}

ModelSettingsChange ModelState::WhatDiffers(const ModelSettingsChange& change) const {
  const ModelSettingsChange now = RouterSettings();
  ModelSettingsChange d;
  const auto keep = [](const auto& wanted, const auto& current, auto* out) {
    if (wanted && *wanted != current) *out = wanted;
  };
  keep(change.affinity, *now.affinity, &d.affinity);
  keep(change.overflow_limit, *now.overflow_limit, &d.overflow_limit);
  keep(change.policy, *now.policy, &d.policy);
  keep(change.admission, *now.admission, &d.admission);
  keep(change.aliases, aliases(), &d.aliases);
  keep(change.max_num_seqs, max_num_seqs(), &d.max_num_seqs);
  keep(change.scrape_interval_s, scrape_interval_s(), &d.scrape_interval_s);
  keep(change.session_idle_timeout_s, router_.sessions().idle_timeout_s(),
       &d.session_idle_timeout_s);
  keep(change.max_sessions, router_.sessions().max_entries(), &d.max_sessions);
  keep(change.engine_balances_when_off, engine_balances_when_off(), &d.engine_balances_when_off);
  keep(change.inline_system_as_user, inline_system_as_user(), &d.inline_system_as_user);
  keep(change.idle_sleep, idle_sleep(), &d.idle_sleep);
  return d;
}

void ModelState::NoteDrain(int replica, bool draining, double at, const char* by) {
  changes_.Note(
      at, fmt::format("replica {} {}", replica, draining ? "draining" : "back in service"), by);
}

std::string ModelState::ReplicasOfServer(size_t server, size_t first, size_t last) const {
  std::vector<int> replicas = ReplicasOf(server);
  if (last < replicas.size()) replicas.resize(last);
  replicas.erase(replicas.begin(), replicas.begin() + std::min(first, replicas.size()));
  if (replicas.size() == 1) return fmt::format("replica {}", replicas[0]);
  if (replicas.empty()) return fmt::format("server {}", server);
  return fmt::format("replicas {}-{}", replicas.front(), replicas.back());
}

std::vector<ModelState::SharedSetting> ModelState::SharedSettings() const {
  std::lock_guard lock(mu_);
  std::vector<SharedSetting> out;
  for (auto& [setting, value] : SettingValues(RouterSettings())) {
    const auto clock = setting_clocks_.find(setting);
    if (clock != setting_clocks_.end() && clock->second.shared)
      out.push_back({setting, std::move(value), clock->second.at});
  }
  return out;
}

std::vector<ModelState::SharedSetting> ModelState::TakePeerSettings(
    const std::vector<SharedSetting>& settings) {
  std::lock_guard lock(mu_);
  const auto now = SettingValues(RouterSettings());
  std::vector<SharedSetting> changed;
  for (const SharedSetting& s : settings) {
    ModelSettingsChange change;
    if (!SettingChange(s.setting, s.value, &change)) continue;  // (checked as the message is read)
    SettingClock& clock = setting_clocks_[s.setting];
    const auto current =
        std::find_if(now.begin(), now.end(), [&](const auto& v) { return v.first == s.setting; });
    const bool same = current != now.end() && current->second == s.value;
    // Two changes stamped alike (each gateway stamps after the latest it knows) are told apart by
    // their values, the same way on every gateway: the greater wins.
    if (s.at < clock.at ||
        (s.at == clock.at && (same || current == now.end() || s.value < current->second)))
      continue;
    clock = {s.at, true};
    ++settings_version_;
    if (same) continue;
    changes_.Note(s.at,
                  Describe(WhatDiffers(change), max_num_seqs(), router_.overflow_limit_auto()),
                  "a peer");
    SetRouterSettings(change);
    patched_.Patched(change);
    changed.push_back(s);
  }
  return changed;
}

void ModelState::SetConfigOnlySettings(const ModelSettingsChange& change) {
  if (change.max_num_seqs) {
    max_num_seqs_.store(*change.max_num_seqs, std::memory_order_relaxed);
    seq_limit_warned_.store(false);  // a limit still wrong is said again
    if (router_.overflow_limit_auto())
      router_.SetOverflowLimit(std::max(1, *change.max_num_seqs / 4), true);
  }
  if (change.scrape_interval_s)
    scrape_interval_s_.store(*change.scrape_interval_s, std::memory_order_relaxed);
  if (change.session_idle_timeout_s || change.max_sessions) {
    const size_t max_sessions = change.max_sessions.value_or(router_.sessions().max_entries());
    router_.SetSessionLimits(
        max_sessions, change.session_idle_timeout_s.value_or(router_.sessions().idle_timeout_s()));
    if (change.max_sessions) responses_.SetCapacity(std::max<size_t>(1, max_sessions));
  }
  if (change.engine_balances_when_off)
    engine_balances_when_off_.store(*change.engine_balances_when_off, std::memory_order_relaxed);
  if (change.inline_system_as_user)
    inline_system_as_user_.store(*change.inline_system_as_user, std::memory_order_relaxed);
  if (change.idle_sleep) idle_sleep_.store(*change.idle_sleep, std::memory_order_relaxed);
}

void ModelState::SetRouterSettings(const ModelSettingsChange& change) {
  if (change.affinity) router_.SetAffinity(*change.affinity);
  if (change.overflow_limit) {
    const int limit =
        change.overflow_limit_auto() ? std::max(1, max_num_seqs() / 4) : *change.overflow_limit;
    router_.SetOverflowLimit(limit, change.overflow_limit_auto());
  }
  // (The policy already running keeps its memory: what it placed where, what it counts in flight.)
  if (change.policy && *change.policy != policy_) {
    if (std::unique_ptr<RoutingPolicy> policy = MakePolicy(*change.policy)) {
      router_.SetPolicy(std::move(policy));
      policy_ = *change.policy;
      if (router_.policy().uses_prefix() && hash_prompts_flag_) hash_prompts_flag_->store(true);
    }
  }
  if (change.admission && *change.admission != admission_) SetAdmission(*change.admission);
}

void ModelState::SetAdmission(const std::string& mode) {
  AdmissionOptions options;
  if (!ParseAdmission(mode, &options).empty()) return;  // (validated before)
  if (reserving_stopped_) options.reserve_turns = 0;
  admission_ = mode;
  if (options.enabled && hash_prompts_flag_) hash_prompts_flag_->store(true);
  admission_enabled_.store(options.enabled, std::memory_order_relaxed);
  released_.clear();
  router_.admission().SetOptions(options, Now(), &released_);
  WakeReleased();
}

std::string_view ModelState::ChangedBy(SettingsFrom from) {
  switch (from) {
    case SettingsFrom::kAdminApi:
      return "admin API";
    case SettingsFrom::kPanel:
      return "panel";
    case SettingsFrom::kConfigFile:
      break;
  }
  return "SIGHUP";
}

void ModelState::SetDraining(std::span<const std::pair<int, bool>> changes, double changed_at,
                             SettingsFrom from) {
  std::lock_guard lock(mu_);
  for (const auto& [replica, draining] : changes) {
    if (router_.draining(replica) != draining)
      NoteDrain(replica, draining, changed_at, ChangedBy(from).data());  // (a literal)
    router_.SetDraining(replica, draining);
    // Later than any change taken before, even from a peer whose clock runs ahead: it wins there.
    double& at = drain_changed_at_[replica];
    at = std::max(changed_at, at + 0.001);
  }
}

ModelState::DrainState ModelState::Draining() const {
  std::lock_guard lock(mu_);
  DrainState state;
  for (int i = 0; i < router_.num_replicas(); ++i) state.draining.push_back(router_.draining(i));
  state.changed_at_each = drain_changed_at_;
  state.changed_at = *std::max_element(drain_changed_at_.begin(), drain_changed_at_.end());
  return state;
}

std::vector<int> ModelState::TakePeerDraining(const std::vector<bool>& draining,
                                              const std::vector<double>& changed_at_each) {
  std::lock_guard lock(mu_);
  std::vector<int> changed;
  if (std::ssize(draining) != router_.num_replicas() || draining.size() != changed_at_each.size())
    return changed;
  for (int i = 0; i < router_.num_replicas(); ++i) {
    // Two changes stamped alike (each gateway stamps after the latest it knows) settle the same
    // way on every gateway: the drain wins.
    if (changed_at_each[i] < drain_changed_at_[i] ||
        (changed_at_each[i] == drain_changed_at_[i] && (router_.draining(i) || !draining[i])))
      continue;
    drain_changed_at_[i] = changed_at_each[i];
    if (router_.draining(i) == draining[i]) continue;
    NoteDrain(i, draining[i], changed_at_each[i], "a peer");
    router_.SetDraining(i, draining[i]);
    changed.push_back(i);
  }
  return changed;
}

ModelSnapshot ModelState::Snapshot(double now, double unix_now) {
  ModelSnapshot m;
  m.name = config_.name;
  for (int i = 0; i < num_replicas(); ++i) m.replicas.push_back(ReplicaStateId(i));
  std::lock_guard lock(mu_);
  m.conversations = router_.sessions().Save(now);
  m.responses = responses_.Entries();
  for (int i = 0; i < num_replicas(); ++i)
    if (router_.draining(i)) m.draining.push_back(m.replicas[i]);
  m.drain_changed_at = *std::max_element(drain_changed_at_.begin(), drain_changed_at_.end());
  for (LoadedAdapters::Record& r : loaded_adapters_.Records())
    m.adapters.push_back({std::move(r.name), std::move(r.request_body), r.at_us, r.loaded});
  m.adapters_forgotten_before_us = loaded_adapters_.forgotten_before_us();
  m.patched_settings = patched_.entries();
  for (const auto& [setting, clock] : setting_clocks_)
    m.setting_changes.push_back({setting, clock.at, clock.shared, patched_.config_value(setting)});
  for (LoadedAdapters::KeptUpdate& k : loaded_adapters_.AllKept())
    m.kept_adapter_updates.push_back({std::move(k.name), config_.urls[k.server], k.load});
  m.changes = changes_.Since(-std::numeric_limits<double>::infinity());
  const TokenHistory& history = router_.history();
  m.history_bucket_s = history.bucket_s();
  m.history_since = unix_now - (now - history_extent_.since);
  for (const auto& [from, to] : history_extent_.gaps)
    if (to > now - history.window_s())
      m.history_gaps.emplace_back(unix_now - (now - from), unix_now - (now - to));
  for (TokenHistory::Bucket& b : history.Window(now)) {
    const auto any = [](const std::vector<int64_t>& v) {
      return std::any_of(v.begin(), v.end(), [](int64_t n) { return n != 0; });
    };
    if (any(b.cached) || any(b.computed))
      m.history.push_back(
          {unix_now - (now - b.start_s), std::move(b.cached), std::move(b.computed)});
  }
  return m;
}

size_t ModelState::Restore(const ModelSnapshot& saved, double now, double unix_now,
                           size_t* dropped) {
  std::vector<std::string> replicas;
  for (int i = 0; i < num_replicas(); ++i) replicas.push_back(ReplicaStateId(i));
  const auto mapped = MapToReplicas(saved, replicas, dropped);
  for (const ModelSnapshot::SavedAdapter& a : saved.adapters) {
    // (A file of an earlier version has no times: its loads are taken as made now.)
    if (a.at_us == 0 && a.loaded) {
      loaded_adapters_.Loaded(a.name, a.request_body, UnixMicros());
    } else {
      loaded_adapters_.Merge({a.name, a.request_body, a.at_us, a.loaded}, /*servers=*/0);
    }
  }
  // After the records: the floor keeps out unloads forgotten, not loads the file holds (an
  // adapter loaded long ago may be older than the unloads forgotten since).
  loaded_adapters_.set_forgotten_before_us(saved.adapters_forgotten_before_us);
  for (const ModelSnapshot::KeptAdapterUpdate& k : saved.kept_adapter_updates) {
    const auto url = std::find(config_.urls.begin(), config_.urls.end(), k.server);
    if (url != config_.urls.end())  // (a server no longer configured: nothing to send it)
      loaded_adapters_.KeepForLater({k.name, size_t(url - config_.urls.begin()), k.load});
  }
  std::lock_guard lock(mu_);
  for (const StoredResponse& r : saved.responses) {
    // The replica as the file named it, where it is now.
    int replica = -1;
    if (r.replica >= 0 && r.replica < std::ssize(saved.replicas)) {
      const auto it = std::find(replicas.begin(), replicas.end(), saved.replicas[r.replica]);
      if (it != replicas.end()) replica = static_cast<int>(it - replicas.begin());
    }
    responses_.Remember(r.id, r.key, 0, false, replica);
  }
  // The file keeps the latest change's time (a time from the future, a clock that ran ahead, is
  // taken as now: it would make every peer's later change look older).
  std::fill(drain_changed_at_.begin(), drain_changed_at_.end(),
            std::min(saved.drain_changed_at, SystemUnixTime()));
  for (int i = 0; i < num_replicas(); ++i) {
    if (std::find(saved.draining.begin(), saved.draining.end(), replicas[i]) !=
        saved.draining.end()) {
      router_.SetDraining(i, true);
      spdlog::info("model {}: replica {} ({}) still draining, as saved", config_.name, i,
                   ReplicaUrl(i));
    }
  }
  RestorePatchedSettings(saved.patched_settings, saved.setting_changes);
  changes_.Restore(saved.changes);
  RestoreHistory(saved, replicas, now, unix_now);
  return router_.RestoreSessions(mapped, now);
}

void ModelState::RestoreHistory(const ModelSnapshot& saved, std::span<const std::string> replicas,
                                double now, double unix_now) {
  const TokenHistory& history = router_.history();
  if (saved.history_bucket_s != history.bucket_s()) return;  // none saved, or another chart
  // Saved slot -> slot here (-1: a replica no longer configured); the last is the engine's.
  std::vector<int> slot_of(saved.replicas.size() + 1, -1);
  for (size_t i = 0; i < saved.replicas.size(); ++i) {
    const auto it = std::find(replicas.begin(), replicas.end(), saved.replicas[i]);
    if (it != replicas.end()) slot_of[i] = static_cast<int>(it - replicas.begin());
  }
  slot_of.back() = num_replicas();
  bool restored = false;
  bool dropped = false;  // counts of a replica no longer configured (its server moved, say)
  for (const ModelSnapshot::HistoryBucket& b : saved.history) {
    // Where it falls on this gateway's clock: each saved bucket counted at its middle (at now for
    // the one that was still filling).
    const double start = now - (unix_now - b.start_unix);
    if (start > now || start + history.bucket_s() <= now - history.window_s()) continue;
    const double at = std::clamp(start + history.bucket_s() / 2,
                                 now - history.window_s() + history.bucket_s(), now);
    for (size_t i = 0; i < slot_of.size() && i < b.cached.size(); ++i) {
      if (slot_of[i] < 0) {
        dropped = dropped || b.cached[i] > 0 || b.computed[i] > 0;
        continue;
      }
      router_.RestoreHistory(slot_of[i], b.cached[i], b.computed[i], at);
      restored = restored || b.cached[i] > 0 || b.computed[i] > 0;
    }
  }
  const double since = now - (unix_now - saved.history_since);
  // (Nothing of the saved counts came back: the chart does not claim to know that time. Found by
  // review: it drew a run whose replicas all moved as an hour of no traffic.)
  if (!restored && (dropped || since <= now - history.window_s())) return;
  history_extent_.since =
      std::max(now - history.window_s(), std::min(since, history_extent_.since));
  // Unknown: the gaps it had, and the time from its save to now (the gateway was down).
  const auto clock = [&](double unix_time) { return now - (unix_now - unix_time); };
  for (const auto& [from, to] : saved.history_gaps)
    if (clock(to) > history_extent_.since && from < to)
      history_extent_.gaps.emplace_back(clock(from), clock(to));
  if (saved.saved_at > 0 && clock(saved.saved_at) < now)
    history_extent_.gaps.emplace_back(std::max(clock(saved.saved_at), history_extent_.since), now);
}

void ModelState::RestorePatchedSettings(
    const std::vector<PatchedSetting>& saved,
    const std::vector<ModelSnapshot::SettingChangeTime>& changes) {
  // The times, so that a peer's PATCH older than one kept here does not undo it (a time from the
  // future, a clock that ran ahead, is taken as now).
  const double unix_now = SystemUnixTime();
  for (const ModelSnapshot::SettingChangeTime& c : changes) {
    if (!IsPatchableSetting(c.setting)) continue;
    // A setting the config has changed since is the config's: a change made now, here, that a
    // peer's older PATCH does not undo (and not sent to the peers).
    if (c.config_value != patched_.config_value(c.setting)) {
      setting_clocks_[c.setting] = {unix_now, false};
      restore_changed_settings_ = true;
    } else {
      setting_clocks_[c.setting] = {std::min(c.at, unix_now), c.shared};
    }
  }
  std::vector<PatchedSetting> dropped;
  const ModelSettingsChange change = patched_.Restore(saved, &dropped);
  SetRouterSettings(change);
  for (const auto& [setting, value] : SettingValues(change)) {
    spdlog::info(
        "model {}: {} {} as set through the admin API before the restart (the config says "
        "{}; a SIGHUP that finds the file changed it, or a PATCH, sets it again)",
        config_.name, setting, value,
        std::find_if(saved.begin(), saved.end(), [&](const PatchedSetting& p) {
          return p.setting == setting;
        })->config_value);
  }
  for (const PatchedSetting& p : dropped) {
    ModelSettingsChange valid;
    const std::string why = p.config_value.empty() ? "not a setting a PATCH changes"
                            : !SettingChange(p.setting, p.value, &valid)
                                ? "not a value this gateway takes"
                                : fmt::format("the config says {} now", p.config_value);
    spdlog::info("model {}: {} {}, set through the admin API before the restart, is dropped: {}",
                 config_.name, p.setting, p.value, why);
    // The config's value is a change made now, here: a peer's older PATCH does not undo it.
    if (!p.config_value.empty()) setting_clocks_[p.setting] = {unix_now, false};
    restore_changed_settings_ = true;
  }
}

}  // namespace warden
