// Several gateways in front of the same replicas share where their conversations are homed
// (config `peers`). Every interval a gateway sends each peer, per model, the homes of the
// conversations it routed since its last successful send there; the peer takes them into its
// session table (core/routing/session_table.h: the more recent assignment wins a disagreement).
// So a conversation keeps its replica whichever gateway its next turn reaches, and each gateway's
// placement counts the others' active conversations.
//
// Eventually consistent: a turn that reaches another gateway less than one interval after its
// conversation's first may be placed afresh (the homes then converge). Requests in flight are not
// shared: each gateway counts its own, and reads the engines' queues and KV use from /metrics.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config.h"
#include "net/upstream.h"

namespace warden {

class ModelState;
class PrometheusWriter;

// Where a peer posts its homes.
inline constexpr std::string_view kPeerHomesPath = "/warden/v1/peer/homes";

class PeerSync {
 public:
  // `now`: the gateway's clock in seconds; `unix_at_zero`: the Unix time at which it read 0 (the
  // messages carry Unix times, so peers need only synchronised wall clocks).
  PeerSync(const GatewayConfig& config, std::vector<ModelState*> models,
           boost::asio::any_io_executor executor, std::function<double()> now, double unix_at_zero);
  PeerSync(const PeerSync&) = delete;
  PeerSync& operator=(const PeerSync&) = delete;

  // Starts sending on `executor` (nothing to do without peers). Stop ends it.
  void Start();
  void Stop();

  // A peer's message: takes its homes. Returns an error if the message is malformed or names a
  // model whose replicas differ here; else empty, with the number of homes taken in `taken`.
  std::string Receive(std::string_view body, int* taken);

  // The peers and how sending to them goes, and the homes received: for the admin API.
  boost::json::object Status() const;
  // The same as Prometheus families (warden_peer_*); nothing without peers or homes received.
  void WriteMetrics(PrometheusWriter& w) const;

 private:
  struct Peer {
    std::string url;
    std::unique_ptr<UpstreamPool> pool;
    double synced_until = -1;  // the homes routed up to then have reached this peer
    int64_t homes_sent = 0;
    int64_t sends_ok = 0;
    int64_t sends_failed = 0;
    double last_ok = -1;
    std::string last_error;
  };

  boost::asio::awaitable<void> Loop();
  boost::asio::awaitable<void> SendTo(Peer& peer);
  // The message for the homes routed after `since`; `homes` gets their number.
  std::string Message(double since, int64_t* homes) const;

  std::vector<ModelState*> models_;
  boost::asio::any_io_executor executor_;
  std::function<double()> now_;
  double unix_at_zero_;
  double interval_s_;
  std::string authorization_;
  boost::asio::steady_timer timer_;
  bool stopped_ = false;
  mutable std::mutex mu_;  // guards the peers' counters and received_, read by the admin API
  std::vector<Peer> peers_;
  int64_t received_ = 0;
};

}  // namespace warden
