// Everything the gateway holds for one model: its config, its routing state (behind a lock: the
// gateway runs on several threads) and its upstream connection pools.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/routing/model_router.h"
#include "core/routing/response_chain.h"
#include "core/routing/session_key.h"
#include "gateway/adapter_update.h"
#include "gateway/change_log.h"
#include "gateway/config.h"
#include "gateway/config_reload.h"
#include "gateway/patched_settings.h"
#include "gateway/scrape_schedule.h"
#include "gateway/served_names.h"
#include "gateway/state_file.h"
#include "net/upstream.h"

namespace warden {

// Where a replica's requests go.
struct ReplicaTarget {
  UpstreamPool* pool;
  int rank;  // >= 0: sent with X-data-parallel-rank (layout a); -1: none (layout b)
};

// A request held by admission: woken on its own shard when it is let in.
struct AdmissionWaiter {
  explicit AdmissionWaiter(const boost::asio::any_io_executor& executor) : timer(executor) {}
  boost::asio::steady_timer timer;
  bool released = false;  // touched on the timer's executor only
};

class ModelState {
 public:
  // REQUIRES: config validated (ValidateGatewayConfig).
  // One executor per gateway shard (thread).
  ModelState(const ModelConfig& config, const std::vector<boost::asio::any_io_executor>& shards);
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  // The config the model started with. The settings a reload changes (config_reload.h) are read
  // from the accessors below and SettingsNow instead.
  const ModelConfig& config() const { return config_; }
  // vLLM's --max-num-seqs on each replica (config max_num_seqs, read again on SIGHUP).
  int max_num_seqs() const { return max_num_seqs_.load(std::memory_order_relaxed); }
  // How often the replicas' /health and /metrics are read (config scrape_interval_s).
  double scrape_interval_s() const { return scrape_interval_s_.load(std::memory_order_relaxed); }
  // Config when_affinity_off: engine (true) or gateway.
  bool engine_balances_when_off() const {
    return engine_balances_when_off_.load(std::memory_order_relaxed);
  }
  bool inline_system_as_user() const {
    return inline_system_as_user_.load(std::memory_order_relaxed);
  }
  // Config idle_sleep: a sleeping server wakes at its next request (vLLM's --sleep-idle-ttl).
  bool idle_sleep() const { return idle_sleep_.load(std::memory_order_relaxed); }
  const std::string& name() const { return config_.name; }
  // "Bearer <the replicas' API key>", sent with every request to them; empty when they need none.
  const std::string& replica_authorization() const { return replica_authorization_; }
  int num_replicas() const { return static_cast<int>(targets_.size()); }
  const ReplicaTarget& target(int replica) const { return targets_[replica]; }
  const std::vector<std::unique_ptr<UpstreamPool>>& pools() const { return pools_; }
  // The replicas a pool serves: all ranks of a data-parallel server, or the one replica.
  std::vector<int> ReplicasOf(size_t pool_index) const;
  // The index of the pool (one of the model's URLs) that serves `replica`.
  size_t ServerOf(int replica) const;
  std::string ReplicaUrl(int replica) const;
  // The replica as the state file names it (state_file.h): URL, and rank in the data-parallel
  // layout.
  std::string ReplicaStateId(int replica) const;

  // Runs f(router) under the model's lock and returns what f returns.
  template <typename F>
  auto WithRouter(F&& f) {
    std::lock_guard lock(mu_);
    return f(router_);
  }
  // Runs f(router, released) under the model's lock, then wakes the held requests whose ids f
  // appended to `released` (a scrape that found more room, say).
  template <typename F>
  void WithRouterReleasing(F&& f) {
    std::lock_guard lock(mu_);
    released_.clear();
    f(router_, &released_);
    WakeReleased();
  }

  bool admission_enabled() const { return admission_enabled_.load(std::memory_order_relaxed); }
  // The admission mode now (config `admission`, or a PATCH's): off, fifo, recent:K, reserve:N...
  std::string admission() const {
    std::lock_guard lock(mu_);
    return admission_;
  }
  // Set when admission is on, now or later (it needs the prompts' block hashes): the gateway's
  // flag, which outlives this model state.
  void set_hash_prompts_flag(std::atomic<bool>* flag) {
    hash_prompts_flag_ = flag;
    if (admission_enabled()) flag->store(true);
  }
  // Whether the restore from a state file dropped a PATCH or re-dated a setting the config changed
  // meanwhile: the file is then saved again, so that the next restart does not bring them back.
  bool RestoreChangedSettings() const {
    std::lock_guard lock(mu_);
    return restore_changed_settings_;
  }
  // The settings in effect: affinity, overflow limit (0: auto), policy and admission.
  ModelSettingsChange SettingsNow() const {
    std::lock_guard lock(mu_);
    return RouterSettings();
  }
  // Offers a routed request to admission. Returns nullptr when it is let in at once; otherwise a
  // waiter, woken on `executor` with released = true when it is let in. `key`: the request's
  // affinity key, empty when it follows no conversation (nothing is reserved for it); `reserves`:
  // false when its room is not kept for the next turn (AdmissionQueue::Request::reserves).
  // `continues`: the stored response a Responses API request goes on from (its
  // previous_response_id), whose conversation it claims room for too. `waited_s`: since the
  // request came (a hold's bound counts from then: AdmissionQueue::Request::arrived).
  std::shared_ptr<AdmissionWaiter> Admit(int replica, uint64_t id, std::span<const uint64_t> blocks,
                                         std::string_view key, bool reserves,
                                         const boost::asio::any_io_executor& executor,
                                         std::string_view continues = {}, double waited_s = 0);
  // The admitted request `id` ended (usage < 0: unknown, or it failed): frees its claim and wakes
  // the requests let in.
  void AdmissionDone(uint64_t id, int prompt_tokens = -1, int output_tokens = -1,
                     bool completed = false);
  // The gateway is draining: reservations are given up (no next turn will come) and none made.
  void StopReserving();
  // The client of a held request went away: true if it was still held (now dropped); false if it
  // was let in meanwhile (the caller then owes AdmissionDone).
  bool CancelHeld(uint64_t id);
  // No request is held longer than `seconds` (the gateway's admission_max_hold_s): past it, it
  // goes to its replica, where a stream's client gets its head and keepalives.
  void SetAdmissionMaxHold(double seconds);

  // Frees an admitted request's claim however the request ends (an exception included), unless
  // Done was called with its usage first.
  class AdmissionClaim {
   public:
    AdmissionClaim(ModelState& model, uint64_t id) : model_(model), id_(id) {}
    ~AdmissionClaim() { Done(); }
    AdmissionClaim(const AdmissionClaim&) = delete;
    AdmissionClaim& operator=(const AdmissionClaim&) = delete;
    void Done(int prompt_tokens = -1, int output_tokens = -1, bool completed = false) {
      if (id_ != 0)
        model_.AdmissionDone(std::exchange(id_, 0), prompt_tokens, output_tokens, completed);
    }

   private:
    ModelState& model_;
    uint64_t id_;
  };

  // Where a change of the model's settings comes from: an operator's PATCH (through the panel, or
  // any other client of the admin API), kept in the state file while the config says what it
  // said then (patched_settings.h), or the config file read again on SIGHUP, which wins over what
  // a PATCH set.
  enum class SettingsFrom { kAdminApi, kPanel, kConfigFile };
  // Who made such a change, as the changes list says it.
  static std::string_view ChangedBy(SettingsFrom from);
  // Applies `change` (validated) at once, made at `unix_now`: later than any change before, so
  // that peers take an admin API change (SharedSettings) and a config's change is not undone by
  // a peer's earlier one. Returns the settings it changed: those `change` gives a value they had
  // not.
  ModelSettingsChange ApplySettings(const ModelSettingsChange& change, SettingsFrom from,
                                    double unix_now);
  // A setting as peers exchange it: set through the admin API (here or at a peer) at `at` (Unix
  // time), its value written as in a config file (PatchedSetting).
  struct SharedSetting {
    std::string setting;
    std::string value;
    double at = 0;
    bool operator==(const SharedSetting&) const = default;
  };
  // The settings last set through the admin API, here or at a peer, not by the config since.
  std::vector<SharedSetting> SharedSettings() const;
  // Takes a peer's settings set after the last change here (as a PATCH here: patched_settings.h).
  // Returns those whose value changed.
  std::vector<SharedSetting> TakePeerSettings(const std::vector<SharedSetting>& settings);
  // The settings a PATCH changed that the config has not changed since.
  std::vector<PatchedSetting> Patched() const {
    std::lock_guard lock(mu_);
    return patched_.entries();
  }

  // Drains replicas or takes them back (replica, draining), an operator's change made here at
  // `changed_at` (Unix time), stamped later than any change taken before. Between peers the most
  // recent change wins (TakePeerDraining).
  void SetDraining(std::span<const std::pair<int, bool>> changes, double changed_at,
                   SettingsFrom from = SettingsFrom::kAdminApi);
  // Every replica's drain flag and when an operator last changed it (Unix time; 0: never), and
  // the latest of those times.
  struct DrainState {
    std::vector<bool> draining;
    std::vector<double> changed_at_each;
    double changed_at = 0;
  };
  DrainState Draining() const;
  // A peer's drain flags (one per replica, each changed at its time in `changed_at_each`): each
  // taken if changed there later than here, so that operators changing different replicas through
  // different gateways at once both have their way. Returns the replicas whose flag changed.
  std::vector<int> TakePeerDraining(const std::vector<bool>& draining,
                                    const std::vector<double>& changed_at_each);

  // The conversations' homes, for the state file, as of `now` (the gateway's clock; Unix time
  // `unix_now`).
  ModelSnapshot Snapshot(double now, double unix_now);
  // Changes whenever what Snapshot saves does (not every change of a conversation's idle time).
  uint64_t StateVersion() {
    const uint64_t adapters = loaded_adapters_.version();
    std::lock_guard lock(mu_);
    return router_.sessions().version() + router_.drain_changes() + adapters + patched_.version() +
           settings_version_ + changes_.noted() + router_.history().version();
  }
  // Takes back the homes a state file saved for this model (renumbered to the current replicas).
  // Returns how many were restored; `*dropped`: how many were homed on replicas now gone.
  // The chart's hour before the restart is restored too.
  size_t Restore(const ModelSnapshot& saved, double now, double unix_now, size_t* dropped);
  // What the chart's history knows, on the gateway's clock: it counts prompt tokens from `since`
  // (0, the gateway's start, or earlier with the hour before a restart restored from the state
  // file), except during `gaps` (from, to), the gateway being down between a save and a restart.
  struct HistoryExtent {
    double since = 0;
    std::vector<std::pair<double, double>> gaps;
  };
  HistoryExtent history_extent() const {
    std::lock_guard lock(mu_);
    return history_extent_;
  }

  // Responses API: response `id` was made for the conversation keyed `key` / the key of the
  // conversation response `id` was made for (empty: unknown). See core/routing/response_chain.h.
  // `now`: the gateway's clock, read under the lock, so that the responses are in the order of
  // their times as the peers' messages take them (ResponseChain::NewsSince); `news`: made here
  // (sent to the peers), not told by a peer.
  // `replica`: the one that stored it (-1: not known).
  // `tokens`: the conversation's through it (its prompt and reply; 0: not known).
  template <typename Clock>
  void RememberResponse(std::string_view id, std::string_view key, int replica, const Clock& now,
                        bool news, int64_t tokens = 0) {
    std::lock_guard lock(mu_);
    responses_.Remember(id, key, now(), news, replica);
    if (tokens > 0) responses_.SetTokens(id, tokens);
  }
  // The responses made here after `since`, for the peers (ResponseChain::NewsSince).
  std::vector<StoredResponse> ResponsesMadeSince(double since, size_t limit,
                                                 double* through) const {
    std::lock_guard lock(mu_);
    return responses_.NewsSince(since, limit, through);
  }
  // Every response known here, oldest first.
  std::vector<StoredResponse> AllResponses() const {
    std::lock_guard lock(mu_);
    return responses_.Entries();
  }
  std::string ConversationOfResponse(std::string_view id) {
    std::lock_guard lock(mu_);
    return std::string(responses_.KeyOf(id));
  }
  // The replica that stored response `id` (-1: not known).
  int ReplicaOfResponse(std::string_view id) {
    std::lock_guard lock(mu_);
    return responses_.ReplicaOf(id);
  }

  // Generation requests by where their session key came from (KeySource), so an operator can see
  // whether clients are keyed at all. Lock-free: counted on every request.
  void CountKeySource(KeySource source) {
    key_sources_[static_cast<size_t>(source)].fetch_add(1, std::memory_order_relaxed);
  }
  int64_t key_source_count(KeySource source) const {
    return key_sources_[static_cast<size_t>(source)].load(std::memory_order_relaxed);
  }
  // Requests passed on with their inline system messages as user messages (inline_system_as_user).
  void CountInlineSystemRewrite() {
    inline_system_rewrites_.fetch_add(1, std::memory_order_relaxed);
  }
  int64_t inline_system_rewrites() const {
    return inline_system_rewrites_.load(std::memory_order_relaxed);
  }

  // What simulates the replicas: the demo's (config), or what a `warden sim` server says of itself
  // in its /v1/models (the first server that does); empty for real ones.
  std::string simulated() const {
    std::lock_guard lock(simulated_mu_);
    for (const std::string& text : simulated_)
      if (!text.empty()) return text;
    return config_.simulated;
  }
  // What server `server` (one of the model's URLs) says simulates it; empty: nothing (vLLM).
  void SetSimulated(size_t server, std::string text) {
    std::lock_guard lock(simulated_mu_);
    if (simulated_.size() <= server) simulated_.resize(server + 1);
    simulated_[server] = std::move(text);
  }

  // Why server `server` (one of the model's URLs) fails its health checks, and since when (Unix
  // time), for the admin API and the panel; nullopt while it passes them. Thread-safe.
  struct HealthProblem {
    double since_unix = 0;
    std::string what;  // "cannot connect for /health (Connection refused)", "/health answered 503"
  };
  void SetHealthProblem(size_t server, std::optional<HealthProblem> problem) {
    std::lock_guard lock(simulated_mu_);
    if (health_problems_.size() <= server) health_problems_.resize(server + 1);
    health_problems_[server] = std::move(problem);
  }
  // A data-parallel server with fewer engines than configured (its /metrics): the ranks from
  // `engines` on do not exist there, and their problem says so, since `now_unix` (kept while the
  // count stays). -1: none missing. Thread-safe.
  void SetEnginesPresent(size_t server, int engines, double now_unix);
  // The problem of the server replica `replica` is on, or of its rank when the server lacks it.
  std::optional<HealthProblem> HealthProblemOf(int replica) const;

  // What changed in the model's routing while the gateway ran (settings, drains, replicas down or
  // back), for the panel's chart. The settings and drains are noted by this class; the rest by
  // what sees it.
  ChangeLog& changes() { return changes_; }
  const ChangeLog& changes() const { return changes_; }
  // "replica 2", "replicas 0-3": the replicas of server `server` (one of the model's URLs), or
  // those of its ranks from `first` up to (not including) `last`.
  std::string ReplicasOfServer(size_t server, size_t first = 0,
                               size_t last = std::numeric_limits<size_t>::max()) const;

  // The model's aliases (config `aliases`: names or glob patterns clients may send for it), read
  // again on SIGHUP. Thread-safe.
  std::vector<std::string> aliases() const {
    std::lock_guard lock(aliases_mu_);
    return aliases_;
  }
  bool AliasMatches(std::string_view requested) const;
  void SetAliases(std::vector<std::string> aliases) {
    std::lock_guard lock(aliases_mu_);
    aliases_ = std::move(aliases);
  }

  // The names the replicas serve beside the configured one (LoRA adapters, other served names).
  ServedNames& served_names() { return served_names_; }
  const ServedNames& served_names() const { return served_names_; }

  // The LoRA adapters loaded through the gateway, to load again on a server back from a restart.
  // Set while an adapter update through the gateway runs: one at a time (lora_adapters.cc).
  std::atomic<bool>& adapter_update_running() { return adapter_update_running_; }
  // Servers whose adapters are being loaded again (or unloaded) now (ReconcileAdapters).
  std::atomic<int>& adapter_reconciles() { return adapter_reconciles_; }
  LoadedAdapters& loaded_adapters() { return loaded_adapters_; }
  const LoadedAdapters& loaded_adapters() const { return loaded_adapters_; }

  // The context length the replicas serve (vLLM's /v1/models "max_model_len"), read once a
  // replica answers; 0 until then, or when it does not say.
  int64_t max_model_len() const { return max_model_len_.load(std::memory_order_relaxed); }
  void set_max_model_len(int64_t tokens) {
    max_model_len_.store(tokens, std::memory_order_relaxed);
  }
  // Server `server`'s context length (0: it does not say). The most tokens a request's usage can
  // count (DropImplausibleUsage) is the largest of them once every server has said: 0 until then.
  void set_server_model_len(size_t server, int64_t tokens) {
    std::lock_guard lock(simulated_mu_);
    if (server_model_lens_.size() < pools_.size()) server_model_lens_.resize(pools_.size());
    server_model_lens_[server] = tokens;
    int64_t largest = 0;
    for (int64_t len : server_model_lens_) {
      if (len <= 0) return usage_bound_.store(0, std::memory_order_relaxed);
      largest = std::max(largest, len);
    }
    usage_bound_.store(largest, std::memory_order_relaxed);
  }
  int64_t usage_bound() const { return usage_bound_.load(std::memory_order_relaxed); }

  // True the first time only: the log says once per model that turns back on their replica read
  // little of their history from its cache.
  bool FirstHistoryMissed() {
    return !history_missed_warned_.load(std::memory_order_relaxed) &&
           !history_missed_warned_.exchange(true);
  }
  // True the first time only: the log says once per model that the engine leaves out cached tokens.
  bool FirstCacheUnreported() {
    return !cache_unreported_warned_.load(std::memory_order_relaxed) &&
           !cache_unreported_warned_.exchange(true);
  }
  // The same for a replica that refused a request's tools for want of vLLM's
  // --enable-auto-tool-choice (every Claude Code turn offers tools).
  bool FirstToolChoiceRefused() {
    return !tool_choice_warned_.load(std::memory_order_relaxed) &&
           !tool_choice_warned_.exchange(true);
  }
  // The same for a replica whose counts show another --max-num-seqs than the configured one.
  bool FirstSeqLimitWarning() {
    return !seq_limit_warned_.load(std::memory_order_relaxed) && !seq_limit_warned_.exchange(true);
  }
  // Whether a request routed to a draining replica (RouteDecision::to_draining) begins a spell of
  // them: the first for a minute (at `now`, seconds), so that the log says it once a spell, not
  // once a request (each may first go to a replica in service that drops it).
  bool BeginsDrainingSpell(bool to_draining, double now) {
    if (!to_draining) return false;
    return now - last_to_draining_.exchange(now, std::memory_order_relaxed) >= kDrainingSpellGapS;
  }
  static constexpr double kDrainingSpellGapS = 60;

  // Whether the scrape holds the replica for lost: its /health answered an error, or nothing
  // several times in a row (not a one-off slow answer, nor a request's failure). Requests waiting
  // on a lost replica's answer are routed again (replica_loss_watch.h).
  void SetLost(int replica, bool lost) {
    if (lost && !lost_[replica].load(std::memory_order_relaxed)) {
      lost_since_[replica].store(std::chrono::steady_clock::now().time_since_epoch().count(),
                                 std::memory_order_relaxed);
    }
    lost_[replica].store(lost, std::memory_order_relaxed);
  }
  bool lost(int replica) const { return lost_[replica].load(std::memory_order_relaxed); }
  // Since when the replica is lost (meaningful while lost()).
  std::chrono::steady_clock::time_point lost_since(int replica) const {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(lost_since_[replica].load(std::memory_order_relaxed)));
  }
  // Whether the scrape holds the replica stalled (StallWatch; it is lost then too): streams it
  // has begun are cut as well, with an error event, since it does no work.
  void SetStalled(int replica, bool stalled) {
    stalled_[replica].store(stalled, std::memory_order_relaxed);
  }
  bool stalled(int replica) const { return stalled_[replica].load(std::memory_order_relaxed); }
  // A response head came from the replica now (StallWatch: a replica that answers is not hung).
  void NoteAnswered(int replica) {
    answered_at_[replica].store(std::chrono::steady_clock::now().time_since_epoch().count(),
                                std::memory_order_relaxed);
  }
  std::chrono::steady_clock::time_point answered_at(int replica) const {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(answered_at_[replica].load(std::memory_order_relaxed)));
  }

  // Whether server `server`, serving `listed`, lacks an adapter loaded through the gateway, or
  // missed an update of one it lists (LoadedAdapters::KeepForLater).
  bool AdaptersToReconcile(size_t server, const std::vector<ServedName>& listed) {
    return !loaded_adapters_.MissingFrom(listed).empty() ||
           !loaded_adapters_.UpdatesDue(server, listed).empty();
  }
  // A read of server `server`'s names outside its scrape loop found adapters loaded through the
  // gateway missing there (it restarted between two health checks): its loop reads them again at
  // its next scrape, and loads what it lacks (TakeNamesReadAsked says so once).
  void AskNamesRead(size_t server) { names_read_asked_[server].store(true); }
  bool TakeNamesReadAsked(size_t server) { return names_read_asked_[server].exchange(false); }
  // When each server is scraped (its loop's rounds, and rounds asked for out of turn).
  ScrapeSchedule& scrape_schedule() { return scrape_schedule_; }
  // Server `server` was put to sleep through the gateway (POST /sleep): by hand, so a request
  // would not wake it even with idle_sleep on; out of service until a scrape round begun since
  // (numbered as ScrapeSchedule::Begin) reads it awake. (Not shared with peer gateways.)
  void SetSleptByHand(size_t server) {
    slept_by_hand_[server].store(scrape_schedule_.begun(server) + 1);
  }
  void NotAsleepAtRound(size_t server, uint64_t round) {
    uint64_t since = slept_by_hand_[server].load();
    while (since != 0 && round >= since &&
           !slept_by_hand_[server].compare_exchange_weak(since, 0)) {
    }
  }
  bool slept_by_hand(size_t server) const { return slept_by_hand_[server].load() != 0; }

  // Scrape failures per replica (under the lock, like the router).
  void CountScrapeError(int replica) {
    std::lock_guard lock(mu_);
    ++scrape_errors_[replica];
  }
  int64_t scrape_errors(int replica) {
    std::lock_guard lock(mu_);
    return scrape_errors_[replica];
  }

 private:
  // Blocks standing for the conversation stored through response `continues` (none when it is
  // empty or its size unknown), REQUIRES: mu_ held.
  void AppendStoredHistoryBlocks(std::string_view continues, std::vector<uint64_t>* blocks) const;

  ModelConfig config_;
  std::string replica_authorization_;
  mutable std::mutex mu_;
  ChangeLog changes_;
  HistoryExtent history_extent_;     // guarded by mu_
  mutable std::mutex simulated_mu_;  // also health_problems_
  mutable std::mutex aliases_mu_;
  std::vector<std::string> aliases_;                           // aliases_mu_
  std::vector<std::string> simulated_;                         // simulated_mu_, per server
  std::vector<std::optional<HealthProblem>> health_problems_;  // simulated_mu_, per server
  struct EnginesPresent {
    int engines = -1;  // -1: as configured
    double since_unix = 0;
  };
  std::vector<EnginesPresent> engines_present_;  // simulated_mu_, per server
  ModelRouter router_;
  std::vector<int64_t> scrape_errors_;
  ResponseChain responses_;
  std::array<std::atomic<int64_t>, kKeySourceCount> key_sources_{};
  std::atomic<int64_t> inline_system_rewrites_{0};
  std::atomic<bool> cache_unreported_warned_{false};
  std::atomic<bool> tool_choice_warned_{false};
  std::atomic<bool> seq_limit_warned_{false};
  std::atomic<bool> history_missed_warned_{false};
  std::atomic<double> last_to_draining_{-1e300};
  std::atomic<int64_t> max_model_len_{0};
  std::vector<int64_t> server_model_lens_;  // simulated_mu_: per server, as it said (0: not)
  std::atomic<int64_t> usage_bound_{0};
  ServedNames served_names_;
  LoadedAdapters loaded_adapters_;
  std::atomic<bool> adapter_update_running_{false};
  std::atomic<int> adapter_reconciles_{0};
  std::unique_ptr<std::atomic<bool>[]> lost_;
  std::unique_ptr<std::atomic<std::chrono::steady_clock::rep>[]> lost_since_;
  std::unique_ptr<std::atomic<bool>[]> stalled_;
  std::unique_ptr<std::atomic<std::chrono::steady_clock::rep>[]> answered_at_;
  std::unique_ptr<std::atomic<bool>[]> names_read_asked_;  // per server
  // Per server: the first scrape round that may find it awake (0: not put to sleep so).
  std::unique_ptr<std::atomic<uint64_t>[]> slept_by_hand_;
  PatchedSettings patched_;  // mu_
  // Per setting: when it last changed (Unix time) and whether through the admin API (shared with
  // the peers) or by the config (mu_).
  struct SettingClock {
    double at = 0;
    bool shared = false;
  };
  std::map<std::string, SettingClock, std::less<>> setting_clocks_;
  // Per replica, the Unix time of the last drain change, here or a peer's (mu_).
  std::vector<double> drain_changed_at_;
  std::atomic<bool> admission_enabled_{false};
  std::atomic<int> max_num_seqs_;
  std::atomic<double> scrape_interval_s_;
  std::atomic<bool> engine_balances_when_off_, inline_system_as_user_, idle_sleep_;
  std::string admission_;          // mu_
  std::string policy_;             // mu_: as configured or set ("warden:tpr=4" keeps its option)
  uint64_t settings_version_ = 0;  // mu_: counts the changes of setting_clocks_
  bool restore_changed_settings_ = false;  // mu_: the restore dropped or re-dated a setting
  bool reserving_stopped_ = false;         // mu_: the gateway drains, no reservation from now on
  std::atomic<bool>* hash_prompts_flag_ = nullptr;
  std::unordered_map<uint64_t, std::shared_ptr<AdmissionWaiter>> waiters_;
  std::vector<uint64_t> released_;
  // Admission's reservations expire on a timer of the first shard (admission_queue.h).
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  boost::asio::steady_timer expiry_timer_;
  ScrapeSchedule scrape_schedule_;
  double expiry_armed_ = -1;  // when the timer fires (under mu_); < 0: not armed
  double quiet_until_ = 0;    // no warning of requests held too long before then (under mu_)

  // Seconds since the model state was made: admission's clock.
  double Now() const;
  // Wakes the waiters of the requests in released_, and arms the expiry timer for admission's
  // next reservation (under mu_).
  void WakeReleased();
  void OnExpiryTimer(double when);
  // Sets the settings only a config file changes (a SIGHUP's) that `change` names (under mu_).
  void SetConfigOnlySettings(const ModelSettingsChange& change);
  // Sets the router's settings that `change` names (under mu_).
  void SetRouterSettings(const ModelSettingsChange& change);
  // Switches admission to `mode` (validated), letting in what the new mode lets in (under mu_).
  void SetAdmission(const std::string& mode);
  // The router's settings now, each of them (under mu_).
  ModelSettingsChange RouterSettings() const;
  void NoteDrain(int replica, bool draining, double at, const char* by);
  // The part of `change` that differs from the settings in effect. REQUIRES: mu_ held.
  ModelSettingsChange WhatDiffers(const ModelSettingsChange& change) const;
  // The chart's buckets of a state file, on this gateway's clock; `replicas` as ReplicaStateId
  // names them. Called with mu_ held.
  void RestoreHistory(const ModelSnapshot& saved, std::span<const std::string> replicas, double now,
                      double unix_now);
  // Applies the PATCHes a state file saved that the config has not changed since (under mu_).
  void RestorePatchedSettings(const std::vector<PatchedSetting>& saved,
                              const std::vector<ModelSnapshot::SettingChangeTime>& changes);
  std::vector<std::unique_ptr<UpstreamPool>> pools_;
  std::vector<ReplicaTarget> targets_;
};

}  // namespace warden
