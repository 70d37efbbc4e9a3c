#include "gateway/peer_sync.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <chrono>

#include "gateway/model_state.h"
#include "net/upstream_get.h"
#include "util/prometheus.h"

namespace warden {
namespace asio = boost::asio;
namespace json = boost::json;

PeerSync::PeerSync(const GatewayConfig& config, std::vector<ModelState*> models,
                   asio::any_io_executor executor, std::function<double()> now, double unix_at_zero)
    : models_(std::move(models)),
      executor_(executor),
      now_(std::move(now)),
      unix_at_zero_(unix_at_zero),
      interval_s_(config.peer_sync_interval_s),
      authorization_(config.admin_token.empty() ? "" : "Bearer " + config.admin_token),
      timer_(executor) {
  for (const std::string& url : config.peers) {
    UpstreamUrl parsed;
    std::string error;
    ParseUpstreamUrl(url, &parsed, &error);  // the config was validated
    Peer peer;
    peer.url = url;
    peer.pool = std::make_unique<UpstreamPool>(std::vector<asio::any_io_executor>{executor}, parsed,
                                               /*max_idle=*/0);
    peers_.push_back(std::move(peer));
  }
}

void PeerSync::Start() {
  if (!peers_.empty()) asio::co_spawn(executor_, Loop(), asio::detached);
}

void PeerSync::Stop() {
  asio::dispatch(executor_, [this] {
    stopped_ = true;
    timer_.cancel();
  });
}

asio::awaitable<void> PeerSync::Loop() {
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(interval_s_));
  while (!stopped_) {
    timer_.expires_after(interval);
    auto [ec] = co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec || stopped_) co_return;
    for (Peer& peer : peers_) co_await SendTo(peer);
  }
}

asio::awaitable<void> PeerSync::SendTo(Peer& peer) {
  const double now = now_();
  int64_t homes = 0;
  std::string body = Message(peer.synced_until, &homes);
  const auto timeout =
      std::chrono::milliseconds(std::max<int64_t>(1000, static_cast<int64_t>(interval_s_ * 5000)));
  const UpstreamGetResult r =
      co_await UpstreamCall(*peer.pool, 0, boost::beast::http::verb::post, kPeerHomesPath,
                            std::move(body), timeout, authorization_);
  std::lock_guard lock(mu_);
  if (r.status >= 200 && r.status < 300) {
    peer.synced_until = now;
    peer.homes_sent += homes;
    ++peer.sends_ok;
    peer.last_ok = now;
    peer.last_error.clear();
    co_return;
  }
  ++peer.sends_failed;
  std::string error = r.status == 0 ? "no response" : fmt::format("HTTP {}: {}", r.status, r.body);
  if (error != peer.last_error) spdlog::warn("peer {}: {}", peer.url, error);
  peer.last_error = std::move(error);
}

std::string PeerSync::Message(double since, int64_t* homes) const {
  json::array models;
  *homes = 0;
  for (ModelState* model : models_) {
    const std::vector<SessionTable::SharedHome> routed =
        model->WithRouter([&](ModelRouter& r) { return r.HomesRoutedSince(since); });
    json::array list;
    for (const SessionTable::SharedHome& h : routed) {
      list.push_back(json::array{json::string(h.key), h.home, unix_at_zero_ + h.home_since});
    }
    *homes += static_cast<int64_t>(routed.size());
    models.push_back(json::object{
        {"name", model->name()}, {"replicas", model->num_replicas()}, {"homes", std::move(list)}});
  }
  return json::serialize(json::object{{"models", std::move(models)}});
}

namespace {

// One model's part of a peer's message, read into `homes`. Returns an error or empty.
std::string ReadModelHomes(const json::object& m, int replicas_here, double unix_at_zero,
                           std::vector<SessionTable::SharedHome>* homes) {
  const json::value* replicas = m.if_contains("replicas");
  if (!replicas || !replicas->is_int64() || replicas->as_int64() != replicas_here) {
    return fmt::format("{} replicas here, {} at the peer: peers must share the replicas",
                       replicas_here, replicas ? json::serialize(*replicas) : "none");
  }
  const json::value* list = m.if_contains("homes");
  if (!list || !list->is_array()) return "homes: expected a list";
  for (const json::value& item : list->as_array()) {
    const json::array* h = item.if_array();
    if (!h || h->size() != 3 || !(*h)[0].is_string() || !(*h)[1].is_int64() ||
        !(*h)[2].is_number()) {
      return "homes: each is [key, replica, unix time]";
    }
    homes->push_back({std::string((*h)[0].as_string()), static_cast<int>((*h)[1].as_int64()),
                      (*h)[2].to_number<double>() - unix_at_zero});
  }
  return {};
}

}  // namespace

std::string PeerSync::Receive(std::string_view body, int* taken) {
  *taken = 0;
  boost::system::error_code ec;
  const json::value message = json::parse(body, ec);
  const json::value* models =
      ec || !message.is_object() ? nullptr : message.as_object().if_contains("models");
  if (!models || !models->is_array()) return "expected {\"models\": [...]}";
  for (const json::value& item : models->as_array()) {
    const json::object* m = item.if_object();
    const json::value* name = m ? m->if_contains("name") : nullptr;
    if (!name || !name->is_string()) return "models: each needs a name";
    ModelState* model = nullptr;
    for (ModelState* candidate : models_) {
      if (candidate->name() == name->as_string()) model = candidate;
    }
    if (!model) continue;  // a model only the peer serves
    std::vector<SessionTable::SharedHome> homes;
    if (std::string e = ReadModelHomes(*m, model->num_replicas(), unix_at_zero_, &homes);
        !e.empty()) {
      return fmt::format("model {}: {}", model->name(), e);
    }
    const double now = now_();
    *taken += model->WithRouter([&](ModelRouter& r) { return r.LearnHomes(homes, now); });
  }
  std::lock_guard lock(mu_);
  received_ += *taken;
  return {};
}

json::object PeerSync::Status() const {
  std::lock_guard lock(mu_);
  json::array peers;
  for (const Peer& p : peers_) {
    peers.push_back(
        json::object{{"url", p.url},
                     {"homes_sent", p.homes_sent},
                     {"sends_ok", p.sends_ok},
                     {"sends_failed", p.sends_failed},
                     {"last_ok_unix", p.last_ok < 0 ? json::value(nullptr)
                                                    : json::value(unix_at_zero_ + p.last_ok)},
                     {"last_error", p.last_error}});
  }
  return json::object{
      {"sync_interval_s", interval_s_}, {"peers", std::move(peers)}, {"homes_received", received_}};
}

void PeerSync::WriteMetrics(PrometheusWriter& w) const {
  std::lock_guard lock(mu_);
  if (peers_.empty() && received_ == 0) return;
  w.Family("warden_peer_homes_sent_total", "counter",
           "Conversation homes sent to a peer gateway and acknowledged.");
  for (const Peer& p : peers_)
    w.Sample("warden_peer_homes_sent_total", {{"peer", p.url}}, double(p.homes_sent));
  w.Family("warden_peer_sends_failed_total", "counter",
           "Messages to a peer gateway that got no 2xx answer (retried with the next).");
  for (const Peer& p : peers_)
    w.Sample("warden_peer_sends_failed_total", {{"peer", p.url}}, double(p.sends_failed));
  w.Family("warden_peer_homes_received_total", "counter",
           "Conversation homes taken from peer gateways.");
  w.Sample("warden_peer_homes_received_total", {}, double(received_));
}

}  // namespace warden
