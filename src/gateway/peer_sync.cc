#include "gateway/peer_sync.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <utility>

#include "gateway/adapter_update.h"
#include "gateway/api_errors.h"
#include "gateway/model_state.h"
#include "net/upstream_get.h"
#include "os/system_time.h"
#include "util/prometheus.h"
#include "util/steady_seconds.h"

namespace warden {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// How many gateways' in-flight counts are kept (restarts make new ones; the oldest heard from goes
// first). Past it, live gateways push each other out and their requests go uncounted.
constexpr size_t kMaxPeerLoads = 256;
// Gateway instances numbered (SourceOf) and known to have sent a message: they change only as
// gateways restart, a few in a process's life.
constexpr size_t kMaxSources = 4096;
constexpr double kMaxTrustedPeerIntervalS = 60;
constexpr int64_t kMaxPeerInFlight = 1000000;  // a peer's count of a replica's requests

std::string RandomInstance() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

}  // namespace

PeerSync::PeerSync(const GatewayConfig& config, std::vector<ModelState*> models,
                   asio::any_io_executor executor, std::function<double()> now)
    : models_(std::move(models)),
      executor_(executor),
      now_(std::move(now)),
      interval_s_(config.peer_sync_interval_s),
      authorization_(config.admin_token.empty() ? "" : "Bearer " + config.admin_token),
      instance_(RandomInstance()),
      stale_s_(std::max(1.0, 5 * config.peer_sync_interval_s)) {
  for (const std::string& url : config.peers) {
    UpstreamUrl parsed;
    std::string error;
    ParseUpstreamUrl(url, &parsed, &error);  // the config was validated
    Peer peer;
    peer.url = url;
    peer.max_homes = kMaxHomesPerMessage;
    // An https peer's certificate is checked against the system's authorities.
    peer.pool = std::make_unique<UpstreamPool>(std::vector<asio::any_io_executor>{executor}, parsed,
                                               /*max_idle=*/0,
                                               parsed.tls ? MakeTlsContext({}, &error) : nullptr);
    peer.timer = std::make_unique<asio::steady_timer>(executor);
    peers_.push_back(std::move(peer));
  }
}

void PeerSync::Start() {
  for (Peer& peer : peers_) {
    ++loops_running_;
    asio::co_spawn(executor_, Loop(peer), [this](std::exception_ptr) { --loops_running_; });
  }
}

void PeerSync::Stop() {
  asio::dispatch(executor_, [this] {
    stopped_ = true;
    for (Peer& peer : peers_) peer.timer->cancel();
  });
}

size_t MaxHomesAfterTaken(size_t max_homes, double cut_at, double now) {
  if (max_homes >= kMaxHomesPerMessage || now - cut_at < kMaxHomesGrowBackS) return max_homes;
  return std::min(kMaxHomesPerMessage, max_homes * 2);
}

void PeerSync::WakeAll() {
  asio::post(executor_, [this] {
    for (Peer& peer : peers_) {
      {
        std::lock_guard lock(mu_);
        // It may be the peer that was not answering, back.
        peer.failed_before_wake += std::exchange(peer.failures_in_a_row, 0);
      }
      peer.nudged = true;
      peer.timer->cancel();
    }
  });
}

void PeerSync::Nudge(bool new_home) {
  if (peers_.empty()) return;
  std::atomic<bool>& posted = new_home ? urgent_posted_ : nudge_posted_;
  if (posted.exchange(true)) return;
  asio::post(executor_, [this, new_home, &posted] {
    posted = false;
    for (Peer& peer : peers_) {
      if (peer.failures_in_a_row > 0 || (peer.nudged && (peer.urgent || !new_home))) continue;
      peer.nudged = true;
      peer.urgent = peer.urgent || new_home;
      peer.timer->cancel();  // a loop waiting wakes now; one sending goes again when done
    }
  });
}

double PeerSendWait(double interval_s, int failures_in_a_row) {
  if (failures_in_a_row == 0) return interval_s;
  const double backoff = interval_s * std::pow(2.0, std::min(failures_in_a_row, 16));
  return std::max(interval_s, std::min(kMaxPeerBackoffS, backoff));
}

double PeerSync::UnixOffset() const {
  return SystemUnixTime() - now_();
}

asio::awaitable<void> PeerSync::Loop(Peer& peer) {
  for (;;) {
    if (peer.self) {  // nothing to send; the other peers' counts still go stale in time
      if (stopped_) co_return;
      peer.timer->expires_after(SteadySeconds(interval_s_));
      co_await peer.timer->async_wait(asio::as_tuple(asio::use_awaitable));
      ApplyPeerLoads();
      continue;
    }
    if (stopped_) {
      // A last message, so that the peers hear of the requests that ended in the drain (their
      // in-flight counts, the turns' contexts) now, not when this gateway's counts go stale.
      if (peer.last_send >= 0 && peer.failures_in_a_row == 0) co_await SendTo(peer, kLastMessage);
      co_return;
    }
    if (peer.failures_in_a_row > 0) peer.nudged = peer.urgent = false;  // waits its turn
    // The first message goes at once: a peer that sees a new instance sends back every home.
    // Nudged: go now, but not more often than ten times an interval (requests ending), or a
    // hundred for a new home (many new homes at once).
    const auto gap = [&] {
      return peer.urgent ? std::min(interval_s_ / 10, std::max(interval_s_ / 100, 0.005))
                         : interval_s_ / 10;
    };
    const double wait = peer.last_send < 0 ? 0
                        : peer.nudged      ? gap() - (now_() - peer.last_send)
                                           : PeerSendWait(interval_s_, peer.failures_in_a_row);
    if (wait > 0) {
      peer.timer->expires_after(SteadySeconds(wait));
      co_await peer.timer->async_wait(asio::as_tuple(asio::use_awaitable));  // or a nudge
      if (stopped_) continue;
      if (peer.nudged && now_() - peer.last_send < gap()) continue;
    }
    peer.nudged = peer.urgent = false;
    peer.last_send = now_();
    co_await SendTo(peer);
    PullLateIfOwed(peer);
    ApplyPeerLoads();  // a peer gone quiet stops weighing
    ApplyRank();
  }
}

namespace {

// The model names a peer's answer says it does not serve: strings only, at most 64 of at most 256
// bytes (the answer is the peer's, not to be trusted with the log or the admin API's memory).
std::vector<std::string> ModelNames(const json::value* list) {
  std::vector<std::string> names;
  const json::array* items = list ? list->if_array() : nullptr;
  if (!items) return names;
  for (const json::value& item : *items) {
    if (names.size() == 64) break;
    if (item.is_string() && item.as_string().size() <= 256)
      names.push_back(ValidUtf8OrEscaped(item.as_string()));
  }
  return names;
}

// A peer's answer as the log and the admin API show it: its opening, valid UTF-8 (found by review:
// a body of up to 16 MB went into both as it came).
std::string PeerAnswer(std::string_view body) {
  constexpr size_t kShown = 1000;
  if (body.size() <= kShown) return ValidUtf8OrEscaped(body);
  return ValidUtf8OrEscaped(body.substr(0, kShown)) + fmt::format("... ({} bytes)", body.size());
}

// What went wrong with a message to a peer, for the log and the admin API.
std::string PeerError(const UpstreamGetResult& r) {
  if (r.status == 0) return r.error.empty() ? "no response" : "no response: " + r.error;
  if (r.status < 300) return "an answer without an instance: is it a warden gateway?";
  const std::string body = PeerAnswer(r.body);
  if (r.status == 401) return fmt::format("HTTP 401 (peers share one admin_token): {}", body);
  if (r.status == 404)
    return fmt::format("HTTP 404 (is it a warden gateway, with peers of its own?): {}", body);
  return fmt::format("HTTP {}: {}", r.status, body);
}

}  // namespace

asio::awaitable<void> PeerSync::SendTo(Peer& peer, std::chrono::milliseconds longest) {
  const double now = now_();
  int64_t homes = 0;
  double through = 0;
  std::vector<uint64_t> adapters_sent;
  std::string body = Message(peer.synced_until, peer.max_homes, SourceOf(peer.instance), &homes,
                             &through, peer.adapters_acked, &adapters_sent);
  const auto timeout =
      std::min(longest, std::chrono::milliseconds(std::clamp<int64_t>(
                            static_cast<int64_t>(interval_s_ * 5000), 1000, 10000)));
  const UpstreamGetResult r =
      co_await UpstreamCall(*peer.pool, 0, boost::beast::http::verb::post, kPeerHomesPath,
                            std::move(body), timeout, authorization_);
  std::string instance;
  std::vector<std::string> not_served;  // the models the peer said it does not serve
  if (r.status >= 200 && r.status < 300) {
    boost::system::error_code ec;
    const json::value answer = json::parse(r.body, ec);
    const json::value* id =
        ec || !answer.is_object() ? nullptr : answer.as_object().if_contains("instance");
    if (id && id->is_string()) instance = std::string(id->as_string());
    const json::value* unserved =
        ec || !answer.is_object() ? nullptr : answer.as_object().if_contains("models_not_served");
    not_served = ModelNames(unserved);
  }
  std::lock_guard lock(mu_);
  if (r.status == 413 && peer.max_homes > 1) {
    // Over the peer's body limit (body_limit_mb, which its peer messages are under too): smaller
    // slices, at once, until they pass.
    peer.max_homes /= 2;
    peer.max_homes_cut_at = now;
    ++peer.sends_failed;
    peer.nudged = true;
    spdlog::warn("peer {}: a message was over its body limit: now at most {} homes a message",
                 peer.url, peer.max_homes);
    co_return;
  }
  if (instance.empty()) {
    ++peer.sends_failed;
    ++peer.failures_in_a_row;
    std::string error = PeerError(r);
    if (error != peer.last_error) spdlog::warn("peer {}: {}", peer.url, error);
    peer.last_error = std::move(error);
    co_return;
  }
  if (instance == instance_) {  // this gateway itself, listed among its peers: not sent to again
    if (!peer.self) spdlog::info("peer {} is this gateway itself: left out", peer.url);
    peer.self = true;
    co_return;
  }
  // A peer that restarted has lost what it was sent: send it every home again next time.
  const bool restarted = !peer.instance.empty() && peer.instance != instance;
  peer.instance = std::move(instance);
  peer.synced_until = restarted ? -std::numeric_limits<double>::infinity() : std::min(now, through);
  peer.adapters_acked = restarted ? std::vector<uint64_t>{} : std::move(adapters_sent);
  // Every home again right away to a restarted peer; the next slice right after this one.
  if (restarted || through < now) peer.nudged = true;
  peer.homes_sent += homes;
  ++peer.sends_ok;
  if (const size_t grown = MaxHomesAfterTaken(peer.max_homes, peer.max_homes_cut_at, now);
      grown != peer.max_homes) {
    peer.max_homes = grown;
    peer.max_homes_cut_at = now;
  }
  if (const int missed = peer.failures_in_a_row + peer.failed_before_wake; missed > 0)
    spdlog::info("peer {}: answering again, after {} message(s) that did not reach it", peer.url,
                 missed);
  peer.failures_in_a_row = peer.failed_before_wake = 0;
  peer.last_ok = now;
  peer.last_error.clear();
  if (not_served != peer.not_served && !not_served.empty()) {
    spdlog::warn(
        "peer {} serves no model named {}: those conversations' homes are not shared with it "
        "(peers serve the same models under the same names)",
        peer.url, fmt::join(not_served, ", "));
  }
  peer.not_served = std::move(not_served);
}

std::string PeerSync::Message(double since, size_t max_homes, int to, int64_t* homes,
                              double* through, const std::vector<uint64_t>& adapters_acked,
                              std::vector<uint64_t>* adapters_sent) const {
  std::vector<ModelNews> news;
  *homes = 0;
  *through = std::numeric_limits<double>::infinity();
  for (size_t m = 0; m < models_.size(); ++m) {
    ModelState* model = models_[m];
    double homes_through, responses_through;
    ModelNews& n = news.emplace_back();
    // (Read before the records are: a change in between is sent again next time.)
    const uint64_t adapters = model->loaded_adapters().version();
    n.with_adapters = m >= adapters_acked.size() || adapters_acked[m] != adapters;
    adapters_sent->push_back(adapters);
    n.homes = model->WithRouter(
        [&](ModelRouter& r) { return r.HomesRoutedSince(since, max_homes, &homes_through, to); });
    n.responses = model->ResponsesMadeSince(since, max_homes, &responses_through);
    *through = std::min({*through, homes_through, responses_through});
    *homes += static_cast<int64_t>(n.homes.size());
  }
  return MessageOf(news);
}

std::string PeerSync::AllHomesMessage() const {
  std::vector<ModelNews> all;
  for (ModelState* model : models_) {
    all.push_back(
        {model->WithRouter([](ModelRouter& r) { return r.AllHomes(); }), model->AllResponses()});
  }
  return MessageOf(all);
}

std::string PeerSync::MessageOf(const std::vector<ModelNews>& news) const {
  const double offset = UnixOffset();
  json::array models;
  for (size_t m = 0; m < models_.size(); ++m) {
    ModelState* model = models_[m];
    const std::vector<int> in_flight = model->WithRouter([](ModelRouter& r) {
      std::vector<int> counts;
      for (int i = 0; i < r.num_replicas(); ++i) counts.push_back(r.load(i).in_flight);
      return counts;
    });
    json::array list, seen, turns, threads, responses;
    for (const SessionTable::SharedHome& h : news[m].homes) {
      list.push_back(
          json::array{json::string(h.key), h.home, offset + h.home_since, h.context_tokens});
      seen.push_back(offset + h.last_seen);
      turns.push_back(
          json::array{std::isfinite(h.context_at) ? json::value(offset + h.context_at) : nullptr,
                      h.last_end_replica, h.last_prompt_tokens, h.last_replica});
      threads.push_back(json::array{h.thread_model, h.thread_body_bytes});
    }
    models.push_back(json::object{{"name", model->name()},
                                  {"replicas", model->num_replicas()},
                                  // Checked against the receiver's own list (ReadReplicaOrder).
                                  {"replica_urls", json::value_from(model->config().urls)},
                                  {"homes", std::move(list)},
                                  // Beside the homes, not in them: a peer of the previous version
                                  // refuses homes of five elements, and ignores this.
                                  {"seen", std::move(seen)},
                                  // Each home's latest turns (TurnsOf; a peer of an earlier
                                  // version ignores them).
                                  {"turns", std::move(turns)},
                                  // Each home's latest turn's model and body size (the same).
                                  {"threads", std::move(threads)},
                                  {"in_flight", json::value_from(in_flight)}});
    // Which replicas an operator drained, and when (none ever: left out).
    if (const ModelState::DrainState drain = model->Draining(); drain.changed_at > 0) {
      json::array flags;
      for (bool d : drain.draining) flags.push_back(d);
      models.back().as_object()["draining"] = std::move(flags);
      models.back().as_object()["drain_changed_at"] = drain.changed_at;
      // Each flag's own time (a peer of the previous version ignores it, and takes the latest for
      // all).
      models.back().as_object()["drain_changed_at_each"] = json::value_from(drain.changed_at_each);
    }
    // The settings changed through the admin API, here or at a peer (none: left out; a peer of
    // an earlier version ignores them).
    if (const std::vector<ModelState::SharedSetting> settings = model->SharedSettings();
        !settings.empty()) {
      json::array list;
      for (const ModelState::SharedSetting& s : settings)
        list.push_back(json::array{json::string(s.setting), json::string(s.value), s.at});
      models.back().as_object()["settings"] = std::move(list);
    }
    // The LoRA adapters loaded and unloaded through this gateway or the ones it heard from (a
    // peer of an earlier version ignores them): each gateway then keeps them on every server.
    if (const std::vector<LoadedAdapters::Record> records =
            news[m].with_adapters ? model->loaded_adapters().Records()
                                  : std::vector<LoadedAdapters::Record>{};
        !records.empty()) {
      json::array adapters;
      for (const LoadedAdapters::Record& r : records) {
        json::object a{{"name", r.name}, {"at_us", r.at_us}};
        if (r.loaded) a["request"] = r.request_body;
        adapters.push_back(std::move(a));
      }
      models.back().as_object()["lora_adapters"] = std::move(adapters);
    }
    if (!news[m].responses.empty()) {
      json::array stored_on;
      for (const StoredResponse& r : news[m].responses) {
        responses.push_back(json::array{json::string(r.id), json::string(r.key)});
        stored_on.push_back(r.replica);
      }
      models.back().as_object()["responses"] = std::move(responses);
      // Beside them, as "seen" is: a peer of an earlier version ignores it.
      models.back().as_object()["response_replicas"] = std::move(stored_on);
    }
  }
  // The interval goes too: a peer keeps this gateway's counts for five of them, not of its own.
  return json::serialize(json::object{
      {"instance", instance_}, {"sync_interval_s", interval_s_}, {"models", std::move(models)}});
}

int PeerSync::PullFromPeers(std::chrono::milliseconds budget) {
  asio::io_context io;
  int taken_in_all = 0;
  for (Peer& peer : peers_) {
    asio::co_spawn(
        io,
        [&, pulled = &peer]() -> asio::awaitable<void> {
          UpstreamUrl parsed;
          std::string error;
          ParseUpstreamUrl(pulled->url, &parsed, &error);  // the config was validated
          UpstreamPool pool(std::vector<asio::any_io_executor>{io.get_executor()}, parsed,
                            /*max_idle=*/0, parsed.tls ? MakeTlsContext({}, &error) : nullptr);
          // Given up a little before the budget, so that a peer that does not answer is said.
          taken_in_all += co_await PullFrom(*pulled, pool, budget * 9 / 10, /*at_start=*/true);
        },
        asio::detached);
  }
  io.run_for(budget);
  return taken_in_all;
}

void PeerSync::PullLateIfOwed(Peer& peer) {
  // It did not answer at start: its idle homes, which no message carries, are asked for now,
  // beside the loop (a large table, or a peer slow to answer, holds no message up).
  if (peer.pulled || peer.pulling || peer.self || peer.failures_in_a_row > 0 ||
      peer.instance.empty() || stopped_)
    return;
  if (peer.late_pulls == kLatePulls) {
    peer.pulled = true;  // given up
    spdlog::warn(
        "peer {}: did not answer {} requests for every home it knows; the homes of its idle "
        "conversations are not known here (their next turns here may be placed afresh)",
        peer.url, kLatePulls);
    return;
  }
  ++peer.late_pulls;
  peer.pulling = true;
  asio::co_spawn(
      executor_,
      [this, &peer]() -> asio::awaitable<void> {
        co_await PullFrom(peer, *peer.pool, kLatePull, /*at_start=*/false);
        peer.pulling = false;
      },
      asio::detached);
}

asio::awaitable<int> PeerSync::PullFrom(Peer& peer, UpstreamPool& pool,
                                        std::chrono::milliseconds longest, bool at_start) {
  // Every home a peer knows, at about 100 bytes each: room for millions.
  constexpr uint64_t kLargestPull = uint64_t{1} << 30;
  const UpstreamGetResult r =
      co_await UpstreamCall(pool, 0, boost::beast::http::verb::get, kPeerHomesPath, "", longest,
                            authorization_, kLargestPull);
  // No answer (hung, busy, unreachable): asked again once it answers. One not running (or this
  // gateway itself, not listening yet) has no homes this one lacks, but what its state file
  // restores (those it sends as their turns come).
  peer.pulled = r.status != 0 || r.refused;
  if (r.status != 200) {
    spdlog::info(
        "peer {}: no homes to {} ({}{})", peer.url,
        at_start ? "start from" : "take after its first answer",
        r.status == 0 ? r.error : fmt::format("HTTP {}", r.status),
        at_start && r.refused ? ": not running, or this gateway itself, not listening yet" : "");
    co_return 0;
  }
  int taken = 0;
  std::string sender;
  // Said once, here, with the peer's name (Receive would say it unnamed as well).
  if (std::string e = ReceiveMessage(r.body, &taken, nullptr, &sender); !e.empty()) {
    spdlog::warn("peer {}: its homes were not taken: {}", peer.url, e);
    std::lock_guard lock(mu_);
    refusal_warned_[sender] = now_();  // its first message, refused the same way, is not said again
    co_return 0;
  }
  {
    // Known before its first message's answer: the homes just taken from it are not sent back
    // to it (SendTo leaves out what came from the peer it sends to).
    std::lock_guard lock(mu_);
    if (peer.instance.empty() && sender != instance_) peer.instance = sender;
  }
  spdlog::info(
      "peer {}: {} homes taken from it {} (new here, or with a later home, context or turn there)",
      peer.url, taken, at_start ? "at start" : "after its first answer (none at start)");
  co_return taken;
}

namespace {

// The peer's requests in flight per replica, if its message has them (else `in_flight` is left
// empty). Returns an error or empty.
std::string ReadInFlight(const json::object& m, int replicas_here, std::vector<int>* in_flight) {
  const json::value* list = m.if_contains("in_flight");
  if (!list) return {};
  const json::array* counts = list->if_array();
  if (!counts || static_cast<int>(counts->size()) != replicas_here)
    return "in_flight: expected one count per replica";
  for (const json::value& n : *counts) {
    if (!n.is_int64() || n.as_int64() < 0 || n.as_int64() > kMaxPeerInFlight)
      return fmt::format("in_flight: counts are whole numbers from 0 to {}", kMaxPeerInFlight);
    in_flight->push_back(static_cast<int>(n.as_int64()));
  }
  return {};
}

// Takes a peer's drain flags for `model` if an operator changed them there after here. Clocks
// may differ between machines; a time more than a day ahead of `unix_now` is not believed.
void TakeDraining(ModelState& model, const ModelState::DrainState& drain, double unix_now) {
  std::vector<double> believed = drain.changed_at_each;
  for (double& at : believed)
    if (at > unix_now + 86400) at = 0;
  for (int replica : model.TakePeerDraining(drain.draining, believed)) {
    spdlog::info(
        "model {}: replica {} ({}) {}, as a peer's operator said", model.name(), replica,
        model.ReplicaUrl(replica),
        drain.draining[replica] ? "draining: no more requests go there" : "back in service");
  }
}

// The peer's drain flags and the Unix time of their last change, if its message has them (else
// `drain` is left empty). Returns an error or empty.
std::string ReadDraining(const json::object& m, int replicas_here,
                         std::optional<ModelState::DrainState>* drain) {
  const json::value* flags = m.if_contains("draining");
  const json::value* at = m.if_contains("drain_changed_at");
  if (!flags && !at) return {};
  const json::array* list = flags ? flags->if_array() : nullptr;
  if (!list || static_cast<int>(list->size()) != replicas_here || !at || !at->is_number())
    return "draining: expected a flag per replica, with drain_changed_at";
  ModelState::DrainState d;
  for (const json::value& f : *list) {
    if (!f.is_bool()) return "draining: expected a flag per replica, with drain_changed_at";
    d.draining.push_back(f.get_bool());
  }
  d.changed_at = at->to_number<double>();
  // Each flag's time; from a peer of the previous version, the latest change's for all.
  d.changed_at_each.assign(d.draining.size(), d.changed_at);
  if (const json::value* each = m.if_contains("drain_changed_at_each")) {
    const json::array* times = each->if_array();
    if (!times || times->size() != d.draining.size())
      return "drain_changed_at_each: expected a time per replica";
    for (size_t i = 0; i < times->size(); ++i) {
      if (!(*times)[i].is_number()) return "drain_changed_at_each: expected a time per replica";
      d.changed_at_each[i] = (*times)[i].to_number<double>();
    }
  }
  *drain = std::move(d);
  return {};
}

// The settings changed through the peer's admin API, with their times, if its message has them
// (a peer of an earlier version sends none). An entry or a value this gateway does not take (a
// policy of a later version) is skipped. Returns an error or empty.
std::string ReadSettings(const json::object& m, std::vector<ModelState::SharedSetting>* settings) {
  const json::value* v = m.if_contains("settings");
  if (!v) return {};
  const json::array* list = v->if_array();
  if (!list) return "settings: expected a list of [setting, value, time]";
  for (const json::value& item : *list) {
    // An entry this gateway cannot read (of a later version, say) is skipped, not the message.
    const json::array* t = item.if_array();
    if (!t || t->size() < 3 || !(*t)[0].is_string() || !(*t)[1].is_string() ||
        !(*t)[2].is_number() || !std::isfinite((*t)[2].to_number<double>()))
      continue;
    const std::string_view setting = (*t)[0].as_string(), value = (*t)[1].as_string();
    ModelSettingsChange valid;
    if (!SettingChange(setting, value, &valid)) continue;
    settings->push_back({std::string(setting), std::string(value), (*t)[2].to_number<double>()});
  }
  return {};
}

// Takes a peer's settings for `model` if set there after here. A time more than a day ahead of
// `unix_now` is not believed.
void TakeSettings(ModelState& model, std::vector<ModelState::SharedSetting> settings,
                  double unix_now) {
  for (ModelState::SharedSetting& s : settings)
    if (s.at > unix_now + 86400) s.at = 0;
  for (const ModelState::SharedSetting& s : model.TakePeerSettings(settings)) {
    spdlog::info("model {}: {} {}, as a peer's operator said (through its admin API)", model.name(),
                 s.setting, s.value);
  }
}

// Peers name replicas by index: the same servers listed in another order would send a
// conversation to a different one on each side. The same URLs in another order is refused; other
// URLs may be other names for the same servers (or a peer of an earlier version sends none).
std::string ReadReplicaOrder(const json::object& m, const std::vector<std::string>& here) {
  const json::value* given = m.if_contains("replica_urls");
  if (!given) return {};
  const json::array* list = given->if_array();
  if (!list) return "replica_urls: expected a list of URLs";
  std::vector<std::string> there;
  for (const json::value& url : *list) {
    if (!url.is_string()) return "replica_urls: expected a list of URLs";
    there.emplace_back(url.as_string());
  }
  if (there == here) return {};
  std::vector<std::string> a = there, b = here;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) return {};
  return fmt::format(
      "the same replicas in another order (here {}; at the peer {}): peers list them in one "
      "order, as replicas are named by their place",
      fmt::join(here, ", "), fmt::join(there, ", "));
}

// One model's part of a peer's message, read into `homes` with times on this gateway's clock
// (`offset` converts; times after `now` are taken as `now`). Returns an error or empty.
std::string ReadModelHomes(const json::object& m, int replicas_here, double offset, double now,
                           std::vector<SessionTable::SharedHome>* homes) {
  const json::value* replicas = m.if_contains("replicas");
  if (!replicas || !replicas->is_int64() || replicas->as_int64() != replicas_here) {
    return fmt::format("{} replicas here, {} at the peer: peers must share the replicas",
                       replicas_here, replicas ? json::serialize(*replicas) : "none");
  }
  const json::value* list = m.if_contains("homes");
  if (!list || !list->is_array()) return "homes: expected a list";
  // When the sender last saw each conversation (Unix times, one per home); a peer of an older
  // version sends none, and its homes count as seen now.
  const json::array* seen_list = nullptr;
  if (const json::value* seen = m.if_contains("seen")) {
    seen_list = seen->if_array();
    const bool shaped = seen_list && seen_list->size() == list->as_array().size() &&
                        std::all_of(seen_list->begin(), seen_list->end(),
                                    [](const json::value& t) { return t.is_number(); });
    if (!shaped) return "seen: expected one time per home";
  }
  // Each home's latest turns: [when the latest to end ended (Unix time, or null), where it ran,
  // its prompt tokens, where the latest routed went]; a peer of an older version sends none.
  const json::array* turns_list = nullptr;
  if (const json::value* turns = m.if_contains("turns")) {
    turns_list = turns->if_array();
    const auto shaped = [&](const json::value& t) {
      const json::array* a = t.if_array();
      return a && a->size() == 4 && ((*a)[0].is_null() || (*a)[0].is_number()) &&
             (*a)[1].is_int64() && (*a)[2].is_int64() && (*a)[3].is_int64();
    };
    if (!turns_list || turns_list->size() != list->as_array().size() ||
        !std::all_of(turns_list->begin(), turns_list->end(), shaped))
      return "turns: expected one [unix time or null, replica, prompt tokens, replica] per home";
  }
  // Each home's latest turn's [model (hashed), body bytes] (ModelRouter::IsSideRequest); a peer
  // of an older version sends none.
  const json::array* threads_list = nullptr;
  if (const json::value* threads = m.if_contains("threads")) {
    threads_list = threads->if_array();
    const auto shaped = [](const json::value& t) {
      const json::array* a = t.if_array();
      const auto count = [](const json::value& v) {
        return v.is_uint64() || (v.is_int64() && v.get_int64() >= 0);
      };
      return a && a->size() == 2 && count((*a)[0]) && count((*a)[1]) &&
             (*a)[0].to_number<uint64_t>() <= UINT32_MAX &&
             (*a)[1].to_number<uint64_t>() <= UINT32_MAX;
    };
    if (!threads_list || threads_list->size() != list->as_array().size() ||
        !std::all_of(threads_list->begin(), threads_list->end(), shaped))
      return "threads: expected one [model, body bytes] per home";
  }
  const size_t first = homes->size();
  for (const json::value& item : list->as_array()) {
    const json::array* h = item.if_array();
    // The context came later: a peer that sends none is read too.
    const bool shaped = h && (h->size() == 3 || h->size() == 4) && (*h)[0].is_string() &&
                        (*h)[1].is_int64() && (*h)[2].is_number() &&
                        (h->size() == 3 || (*h)[3].is_int64());
    if (!shaped) return "homes: each is [key, replica, unix time, context tokens]";
    if ((*h)[0].as_string().size() > kMaxSessionKeyBytes)
      return fmt::format("homes: a key is longer than {} bytes", kMaxSessionKeyBytes);
    const int64_t replica = (*h)[1].as_int64();
    const double since = (*h)[2].to_number<double>();
    if (replica < 0 || replica >= replicas_here)
      return fmt::format("homes: no replica {}", replica);
    const size_t at = homes->size() - first;
    const double seen = seen_list ? (*seen_list)[at].to_number<double>() : offset + now;
    if (!std::isfinite(since) || !std::isfinite(seen))
      return "homes: the times must be finite numbers";
    const int64_t context =
        h->size() >= 4 ? std::clamp<int64_t>((*h)[3].as_int64(), 0, SessionTable::kMaxContextTokens)
                       : 0;
    SessionTable::SharedHome home{std::string((*h)[0].as_string()), static_cast<int>(replica),
                                  std::min(since - offset, now), context,
                                  std::min(seen - offset, now)};
    if (turns_list) {
      const json::array& t = (*turns_list)[at].as_array();
      const auto replica_or_none = [&](const json::value& v) {
        const int64_t r = v.as_int64();
        return r >= 0 && r < replicas_here ? static_cast<int>(r) : -1;
      };
      if (!t[0].is_null()) {
        const double ended = t[0].to_number<double>();
        if (!std::isfinite(ended)) return "turns: the times must be finite numbers";
        home.context_at = std::min(ended - offset, now);
      }
      home.last_end_replica = replica_or_none(t[1]);
      home.last_prompt_tokens =
          std::clamp<int64_t>(t[2].as_int64(), 0, SessionTable::kMaxContextTokens);
      home.last_replica = replica_or_none(t[3]);
    }
    if (threads_list) {
      const json::array& t = (*threads_list)[at].as_array();
      home.thread_model = static_cast<uint32_t>(t[0].to_number<uint64_t>());
      home.thread_body_bytes = static_cast<uint32_t>(t[1].to_number<uint64_t>());
    }
    homes->push_back(std::move(home));
  }
  return {};
}

// The responses of a model's part of a peer's message, if it has them: (response id, conversation
// key), and the replica that stored each where the peer says (an earlier version does not).
// Returns an error or empty.
// The peer's LoRA adapter loads and unloads, if its message has them. Returns an error or empty.
std::string ReadLoraAdapters(const json::object& m, std::vector<LoadedAdapters::Record>* records) {
  const json::value* list = m.if_contains("lora_adapters");
  if (!list) return {};
  if (!list->is_array()) return "lora_adapters: expected a list";
  for (const json::value& item : list->as_array()) {
    const json::object* a = item.if_object();
    const json::value* name = a ? a->if_contains("name") : nullptr;
    const json::value* at = a ? a->if_contains("at_us") : nullptr;
    const json::value* request = a ? a->if_contains("request") : nullptr;
    if (!name || !name->is_string() || name->as_string().empty() || !at || !at->is_int64() ||
        (request && !request->is_string()))
      return "lora_adapters: each is {name, at_us, and request when loaded}";
    records->push_back({std::string(name->as_string()),
                        request ? std::string(request->as_string()) : std::string(), at->as_int64(),
                        request != nullptr});
  }
  return {};
}

std::string ReadResponses(const json::object& m, int replicas,
                          std::vector<StoredResponse>* responses) {
  const json::value* list = m.if_contains("responses");
  if (!list) return {};
  if (!list->is_array()) return "responses: expected a list";
  const json::value* stored_on = m.if_contains("response_replicas");
  if (stored_on &&
      (!stored_on->is_array() || stored_on->as_array().size() != list->as_array().size()))
    return "response_replicas: expected one replica per response";
  constexpr size_t kMaxIdBytes = 1024;
  for (const json::value& item : list->as_array()) {
    const json::array* pair = item.if_array();
    const bool shaped = pair && pair->size() == 2 && (*pair)[0].is_string() &&
                        (*pair)[1].is_string() && !(*pair)[0].as_string().empty() &&
                        !(*pair)[1].as_string().empty();
    if (!shaped) return "responses: each is [response id, conversation key]";
    if ((*pair)[0].as_string().size() > kMaxIdBytes ||
        (*pair)[1].as_string().size() > kMaxSessionKeyBytes)
      return "responses: an id or key is too long";
    int replica = -1;
    if (stored_on) {
      const json::value& r = stored_on->as_array()[responses->size()];
      if (!r.is_int64() || r.as_int64() < -1 || r.as_int64() >= replicas)
        return "response_replicas: each is a replica's index, or -1";
      replica = static_cast<int>(r.as_int64());
    }
    responses->push_back(
        {std::string((*pair)[0].as_string()), std::string((*pair)[1].as_string()), replica});
  }
  return {};
}

}  // namespace

void PeerSync::NoteSender(const std::string& instance) {
  // A listed peer that restarted sends before this gateway has heard its new instance (from the
  // answer to the message this one sends it at once, as to any new instance): a sender is judged
  // once it has been unknown this long.
  constexpr double kGraceS = 2;
  std::lock_guard lock(mu_);
  if (std::any_of(peers_.begin(), peers_.end(),
                  [&](const Peer& p) { return p.instance == instance; })) {
    strangers_.erase(instance);
    return;
  }
  if (strangers_.size() >= 4096) strangers_.clear();  // instances of a peer restarting forever
  const auto [it, first] = strangers_.try_emplace(instance, now_());
  if (it->second < 0 || now_() - it->second < std::max(kGraceS, 20 * interval_s_)) return;
  it->second = -1;
  spdlog::warn(
      "a gateway not among this one's peers, or listed but not answering (instance {}), sends it "
      "homes: they are taken, but it hears nothing back from here (homes, drains); list it in "
      "peers, under an address this gateway reaches",
      instance);
}

std::string PeerSync::Receive(std::string_view body, int* taken,
                              std::vector<std::string>* not_served) {
  std::string sender;
  std::string error = ReceiveMessage(body, taken, not_served, &sender);
  // Said here too, not only by the sender: the operator may be reading either log.
  std::lock_guard lock(mu_);
  // Once a minute at most per sender while its refusals go on (their texts differ: found by
  // review, a line a second as a peer's backlog was sent again and again), however many messages
  // other peers have taken meanwhile (found by review: a healthy peer's made it a line a second);
  // at once after one of its own taken.
  if (error.empty()) {
    refusal_warned_.erase(sender);
    return error;
  }
  if (refusal_warned_.size() >= 4096) refusal_warned_.clear();  // made-up instances
  const auto [it, first] = refusal_warned_.try_emplace(sender, now_());
  if (first || now_() - it->second >= 60) {
    spdlog::warn("a peer's message refused: {}{} (more refusals in the next minute not logged)",
                 sender.empty() ? "" : "instance " + sender + ": ", error);
    it->second = now_();
  }
  return error;
}

std::string PeerSync::ReceiveMessage(std::string_view body, int* taken,
                                     std::vector<std::string>* not_served, std::string* sender) {
  *taken = 0;
  boost::system::error_code ec;
  const json::value message = json::parse(body, ec);
  const json::value* models =
      ec || !message.is_object() ? nullptr : message.as_object().if_contains("models");
  if (!models || !models->is_array()) return "expected {\"models\": [...]}";
  const json::value* instance = message.as_object().if_contains("instance");
  if (instance && !instance->is_string()) return "instance: expected a string";
  if (instance && sender) *sender = std::string(instance->as_string());
  // A config shared by every gateway lists each as its own peer: nothing taken (its own load
  // would count twice); the answer's instance tells the sender it is itself.
  if (instance && instance->as_string() == instance_) return {};
  const double offset = UnixOffset();
  struct Update {
    ModelState* model;
    std::vector<SessionTable::SharedHome> homes;
    std::vector<StoredResponse> responses;
    std::optional<ModelState::DrainState> drain;
    std::vector<LoadedAdapters::Record> adapters;
    std::vector<ModelState::SharedSetting> settings;
  };
  std::vector<Update> updates;
  const int from = instance ? SourceOf(std::string(instance->as_string())) : SessionTable::kHere;
  PeerLoad load;
  load.at = now_();
  load.stale_s = stale_s_;
  if (const json::value* interval = message.as_object().if_contains("sync_interval_s");
      interval && interval->is_number()) {
    const double sender = interval->to_number<double>();
    // (Trusted up to a minute: a sender's counts weigh for five of its intervals at most.)
    if (sender > 0 && sender <= 3600)
      load.stale_s = std::max(stale_s_, 5 * std::min(sender, kMaxTrustedPeerIntervalS));
  }
  load.in_flight.resize(models_.size());
  for (const json::value& item : models->as_array()) {
    const json::object* m = item.if_object();
    const json::value* name = m ? m->if_contains("name") : nullptr;
    if (!name || !name->is_string()) return "models: each needs a name";
    const auto model = std::find_if(models_.begin(), models_.end(), [&](ModelState* candidate) {
      return candidate->name() == name->as_string();
    });
    if (model == models_.end()) {  // a model only the peer serves (said once, 64 at most)
      if (not_served && not_served->size() < 64 && name->as_string().size() <= 256 &&
          std::find(not_served->begin(), not_served->end(), name->as_string()) == not_served->end())
        not_served->emplace_back(name->as_string());
      continue;
    }
    const auto named_before = [&](const Update& u) { return u.model == *model; };
    if (std::any_of(updates.begin(), updates.end(), named_before))
      return fmt::format("model {} is named twice", (*model)->name());
    std::vector<SessionTable::SharedHome> homes;
    const int replicas = (*model)->num_replicas();
    std::string e = ReadReplicaOrder(*m, (*model)->config().urls);
    if (e.empty()) e = ReadModelHomes(*m, replicas, offset, now_(), &homes);
    if (e.empty()) e = ReadInFlight(*m, replicas, &load.in_flight[model - models_.begin()]);
    std::vector<StoredResponse> responses;
    if (e.empty()) e = ReadResponses(*m, replicas, &responses);
    std::optional<ModelState::DrainState> drain;
    if (e.empty()) e = ReadDraining(*m, replicas, &drain);
    std::vector<LoadedAdapters::Record> adapters;
    if (e.empty()) e = ReadLoraAdapters(*m, &adapters);
    std::vector<ModelState::SharedSetting> settings;
    if (e.empty()) e = ReadSettings(*m, &settings);
    if (!e.empty()) return fmt::format("model {}: {}", (*model)->name(), e);
    updates.push_back({*model, std::move(homes), std::move(responses), std::move(drain),
                       std::move(adapters), std::move(settings)});
  }
  // (After the message is read whole: one refused is said so, and takes nothing.)
  if (instance) NoteSender(std::string(instance->as_string()));
  for (const Update& u : updates) {
    if (u.drain) TakeDraining(*u.model, *u.drain, SystemUnixTime());
    if (!u.settings.empty()) TakeSettings(*u.model, u.settings, SystemUnixTime());
    // A change more than a day ahead of this clock is not believed, as for drains and settings
    // (found by review: one at the end of time won over every later change of that name).
    const int64_t believed_until_us = UnixMicros() + int64_t{86400} * 1'000'000;
    for (const LoadedAdapters::Record& r : u.adapters) {
      if (r.at_us > believed_until_us) continue;
      if (!u.model->loaded_adapters().Merge(r, u.model->pools().size())) continue;
      spdlog::info("model {}: LoRA adapter '{}' {} through a peer gateway", u.model->name(), r.name,
                   r.loaded ? "loaded (kept on every server)" : "unloaded");
    }
    for (const StoredResponse& r : u.responses)
      u.model->RememberResponse(r.id, r.key, r.replica, now_, /*news=*/false);
    // In slices, so that a large message (a peer back after a long absence) does not hold the
    // router's lock for long. The clock is read under the lock, as routing reads it.
    constexpr size_t kSlice = 1000;
    const std::span<const SessionTable::SharedHome> homes(u.homes);
    for (size_t at = 0; at < homes.size(); at += kSlice) {
      const auto slice = homes.subspan(at, std::min(kSlice, homes.size() - at));
      *taken +=
          u.model->WithRouter([&](ModelRouter& r) { return r.LearnHomes(slice, now_(), from); });
    }
    // A later key and its first turn's may have come in different slices: once all are learned,
    // the hand-overs again (LearnHomes did those within each slice).
    for (size_t at = 0; homes.size() > kSlice && at < homes.size(); at += kSlice) {
      const auto slice = homes.subspan(at, std::min(kSlice, homes.size() - at));
      u.model->WithRouter([&](ModelRouter& r) { r.HandOverFirstTurns(slice, now_()); });
    }
  }
  bool new_instance = false;
  {
    std::lock_guard lock(mu_);
    received_ += *taken;
    if (instance && !instance->as_string().empty()) {
      new_instance = KeepPeerLoad(std::string(instance->as_string()), std::move(load));
    }
  }
  ApplyPeerLoads();
  if (new_instance) WakeAll();
  return {};
}

bool PeerSync::KeepPeerLoad(const std::string& id, PeerLoad load) {
  // New, or back after it went quiet for stale_s; not one pushed out by the bound (past it,
  // waking every loop for each made each message a burst of messages: found by review).
  const auto kept = peer_loads_.find(id);
  bool new_instance = kept == peer_loads_.end() || load.at - kept->second.at > kept->second.stale_s;
  if (const auto out = pushed_out_.find(id); out != pushed_out_.end()) {
    new_instance = load.at - out->second.at > out->second.stale_s;
    pushed_out_.erase(out);
  }
  // Gateways restart now and then; a flood of made-up instances does not grow this past a bound:
  // the quiet ones go first, then the one heard from longest ago.
  if (!peer_loads_.contains(id) && peer_loads_.size() >= kMaxPeerLoads) {
    std::erase_if(peer_loads_,
                  [&](const auto& p) { return load.at - p.second.at > p.second.stale_s; });
  }
  if (!peer_loads_.contains(id) && peer_loads_.size() >= kMaxPeerLoads) {
    const auto oldest =
        std::min_element(peer_loads_.begin(), peer_loads_.end(),
                         [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
    if (pushed_out_.size() >= kMaxSources) pushed_out_.clear();
    pushed_out_.emplace(oldest->first, PushedOut{oldest->second.at, oldest->second.stale_s});
    peer_loads_.erase(oldest);
  }
  peer_loads_[id] = std::move(load);
  return new_instance;
}

int PeerSync::SourceOf(const std::string& instance) {
  if (instance.empty()) return SessionTable::kHere;
  std::lock_guard lock(mu_);
  if (const auto it = sources_.find(instance); it != sources_.end()) return it->second;
  if (sources_.size() >= kMaxSources) return SessionTable::kHere;
  const int number = static_cast<int>(sources_.size());
  sources_.emplace(instance, number);
  return number;
}

void PeerSync::ApplyRank() {
  std::vector<std::string> ids = {instance_};
  {
    std::lock_guard lock(mu_);
    for (const Peer& p : peers_) {
      if (!p.instance.empty() && !p.self) ids.push_back(p.instance);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());  // one gateway listed at two URLs
  if (ids == ranked_) return;
  ranked_ = ids;
  const int rank = static_cast<int>(std::find(ids.begin(), ids.end(), instance_) - ids.begin());
  {
    std::lock_guard lock(mu_);
    rank_ = rank;
    gateways_ = static_cast<int>(ids.size());
  }
  for (ModelState* model : models_) {
    model->WithRouter([&](ModelRouter& r) {
      r.SetGatewayRank(rank, static_cast<int>(ids.size()));
      return 0;
    });
  }
}

// (Keyed by a name no instance has: instances are hex digits.)
constexpr std::string_view kPredecessor = "predecessor";

void PeerSync::SetPredecessorInFlight(std::vector<std::vector<int>> in_flight) {
  {
    std::lock_guard lock(mu_);
    PeerLoad& load = peer_loads_[std::string(kPredecessor)];
    load.at = now_();
    load.stale_s = std::numeric_limits<double>::infinity();  // until ForgetPredecessor
    load.in_flight = std::move(in_flight);
  }
  ApplyPeerLoads();
}

void PeerSync::ForgetPredecessor() {
  {
    std::lock_guard lock(mu_);
    peer_loads_.erase(std::string(kPredecessor));
  }
  ApplyPeerLoads();
}

void PeerSync::ApplyPeerLoads() {
  // Summed and applied under one lock: a sum made before a peer's newer count, applied after it,
  // would bring back a request that had ended (found by review: shard 0's loop and a message on
  // another shard). The model's lock is taken inside this one, never the other way round.
  std::lock_guard lock(mu_);
  const double now = now_();
  std::erase_if(peer_loads_, [&](const auto& p) { return now - p.second.at > p.second.stale_s; });
  std::vector<int> totals;
  for (size_t m = 0; m < models_.size(); ++m) {
    std::vector<int64_t> sums(models_[m]->num_replicas(), 0);
    for (const auto& [instance, load] : peer_loads_) {
      for (size_t i = 0; i < load.in_flight[m].size() && i < sums.size(); ++i)
        sums[i] += load.in_flight[m][i];
    }
    totals.clear();  // so is the sum of many gateways' counts
    for (int64_t sum : sums)
      totals.push_back(static_cast<int>(std::min<int64_t>(sum, kMaxPeerInFlight)));
    models_[m]->WithRouter([&](ModelRouter& r) { r.SetPeerInFlight(totals); });
  }
}

json::object PeerSync::Status() const {
  std::lock_guard lock(mu_);
  const double offset = UnixOffset();
  json::array peers;
  for (const Peer& p : peers_) {
    peers.push_back(json::object{
        {"url", p.url},
        {"instance", p.self ? instance_ : p.instance},
        {"self", p.self},
        {"homes_sent", p.homes_sent},
        {"sends_ok", p.sends_ok},
        {"sends_failed", p.sends_failed},
        // (a wake-up sets the count aside, to say how many it missed once it answers)
        {"failures_in_a_row", p.failures_in_a_row + p.failed_before_wake},
        {"last_ok_unix", p.last_ok < 0 ? json::value(nullptr) : json::value(offset + p.last_ok)},
        {"last_error", p.last_error},
        {"models_not_served", json::value_from(p.not_served)}});
  }
  return json::object{{"instance", instance_},
                      {"sync_interval_s", interval_s_},
                      // This gateway's place among those that answered: where its placement's
                      // rotation starts, so that gateways placing at once spread out.
                      {"rank", rank_},
                      {"gateways", gateways_},
                      {"peers", std::move(peers)},
                      {"homes_received", received_}};
}

void PeerSync::WriteMetrics(PrometheusWriter& w) const {
  std::lock_guard lock(mu_);
  if (peers_.empty()) return;
  // A peers list shared by every gateway names this one too: it is no peer of its own.
  std::vector<const Peer*> others;
  for (const Peer& p : peers_) {
    if (!p.self) others.push_back(&p);
  }
  w.Family("warden_peer_up", "gauge",
           "1 while the last message to a peer gateway was answered, else 0.");
  for (const Peer* p : others) {
    w.Sample("warden_peer_up", {{"peer", p->url}},
             p->last_ok >= 0 && p->failures_in_a_row + p->failed_before_wake == 0 ? 1.0 : 0.0);
  }
  w.Family("warden_peer_homes_sent_total", "counter",
           "Conversation homes sent to a peer gateway and acknowledged.");
  for (const Peer* p : others)
    w.Sample("warden_peer_homes_sent_total", {{"peer", p->url}}, double(p->homes_sent));
  w.Family("warden_peer_sends_failed_total", "counter",
           "Messages to a peer gateway that got no answer or an error (retried, backing off).");
  for (const Peer* p : others)
    w.Sample("warden_peer_sends_failed_total", {{"peer", p->url}}, double(p->sends_failed));
  w.Family("warden_peer_homes_received_total", "counter",
           "Conversation homes from peer gateways that told this one something (a conversation, a "
           "home, a longer context or a later turn).");
  w.Sample("warden_peer_homes_received_total", {}, double(received_));
}

}  // namespace warden
