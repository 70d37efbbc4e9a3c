// Several gateways in front of the same replicas share where their conversations are homed
// (config `peers`). A gateway sends each peer, every interval, per model, the homes of the
// conversations it routed since its last acknowledged send there; the peer takes them into its
// session table (core/routing/session_table.h: a home a turn finished on beats a fresh placement,
// else the more recent assignment wins a disagreement).
// So a conversation keeps its replica whichever gateway its next turn reaches, and each gateway's
// placement counts the others' active conversations.
//
// Each message also carries which replicas an operator drained (admin API) and when: a peer takes
// the flags if they changed after its own, so a drain or resume on one gateway holds on all.
// The same for a model's affinity, overflow limit and policy set through the admin API: a PATCH on
// one gateway holds on all (a change by a gateway's own config file, on SIGHUP, is its own).
// Each message also carries the LoRA adapters loaded and unloaded through the sender or its own
// peers, each with its time: the receiver takes what is newer than what it knows
// (LoadedAdapters::Merge), so every gateway keeps them on every server.
// Each message also carries the sender's requests in flight per replica; a gateway adds its peers'
// latest counts to its own when it places and overflows (ReplicaLoad::peer_in_flight), and drops a
// peer's counts when it has not heard from it for five intervals (at least a second).
//
// Gateways rank themselves among the peers that answered (by instance id) and each prefers its
// own share of the replicas (the rank-th of as many equal parts) among equally loaded ones, so
// that two placing new conversations at the same moment pick different replicas while both have
// room in their shares. A new home is sent at once (a request's end within a tenth of the
// interval).
//
// A gateway that starts asks its peers for every home they know before it listens
// (PullFromPeers), then sends its first message; one that hears from an instance it does
// not know (a peer that started or restarted) wakes every sending loop, so the newcomer is sent
// every active home at once rather than after a backoff. A peer that did not answer the start's
// request (hung, say) but was running is asked again once it answers a message: idle homes come
// only that way.
//
// Eventually consistent: a turn that reaches another gateway less than one interval after its
// conversation's first may be placed afresh (the homes then converge), and two gateways placing
// new conversations at the same moment on unequally loaded replicas may pick the same one.
// Messages carry Unix times, so peers need synchronised wall clocks (NTP); a time from the future
// is taken as now.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/routing/response_chain.h"
#include "core/routing/session_table.h"
#include "gateway/config.h"
#include "net/upstream.h"

namespace warden {

class ModelState;
class PrometheusWriter;

// Where a peer posts its homes.
inline constexpr std::string_view kPeerHomesPath = "/warden/v1/peer/homes";

// Between two messages to a peer that does not answer: the interval, doubled per failure, at most
// this (or the interval, if longer). A try costs a connection at most this often; after a split
// both sides are backing off, and the first of them to try again ends it (a peer heard from
// after stale_s_ wakes every loop).
inline constexpr double kMaxPeerBackoffS = 1;

// Homes per model in one message: a peer that was away long, or restarted, is sent what it
// missed in slices of this many (about 0.5 MB of JSON), one after the other.
inline constexpr size_t kMaxHomesPerMessage = 5000;
// A peer's slices, once cut for its body limit, are tried twice as large again after this long
// (its limit may have been raised), and cut again if still over.
inline constexpr double kMaxHomesGrowBackS = 300;
// The homes a message to a peer may carry after one it took, sent `now`: `max_homes` doubled
// (up to kMaxHomesPerMessage) once kMaxHomesGrowBackS have passed since `cut_at`, when it was
// last cut or grown (found by review: one 413 halved the slices for the process's life).
size_t MaxHomesAfterTaken(size_t max_homes, double cut_at, double now);
// How long a stopping gateway waits for a peer to answer its last message: it holds the exit.
inline constexpr std::chrono::milliseconds kLastMessage{1000};
// How long a peer that did not answer at start is waited for when asked for every home again,
// and how many times it is asked.
inline constexpr std::chrono::milliseconds kLatePull{10000};
inline constexpr int kLatePulls = 3;
// How long a peer's sending loop waits before its next periodic message.
double PeerSendWait(double interval_s, int failures_in_a_row);

class PeerSync {
 public:
  // `now`: the gateway's steady clock, in seconds.
  PeerSync(const GatewayConfig& config, std::vector<ModelState*> models,
           boost::asio::any_io_executor executor, std::function<double()> now);
  PeerSync(const PeerSync&) = delete;
  PeerSync& operator=(const PeerSync&) = delete;

  // Starts one sending loop per peer on `executor`. Stop ends them, each after a last message to
  // its peer if the peer has been answering (up to kLastMessage).
  void Start();
  void Stop();
  // Whether every loop has ended (Stop's last messages answered or given up). Thread-safe.
  bool Stopped() const { return loops_running_.load() == 0; }

  // Something the peers should hear before the next interval (a request ended, a drain): sent
  // within a tenth of the interval. `new_home`: a conversation was homed here (new, or re-homed),
  // sent at once (within a hundredth, and 5 ms), so that the peers count it when they place their
  // own new conversations: two gateways placing within the tenth's 20 ms put them on one replica.
  // Peers that are not answering wait for their backoff. Any thread; cheap without peers.
  void Nudge(bool new_home = false);

  // Whether peers are configured: only then are their messages taken.
  bool enabled() const { return !peers_.empty(); }
  // Identifies this process to its peers: one that restarts is sent every home again.
  const std::string& instance() const { return instance_; }

  // Before the gateway listens: asks every peer for all the homes it knows, idle ones too (GET on
  // kPeerHomesPath), and takes them, waiting at most `budget` in all. A gateway that starts (a
  // restart without a state file, say) then places no known conversation afresh, as it could in
  // the moment before its peers' pushes arrive. Returns the homes taken. Runs its own event loop:
  // call it before the gateway's threads run.
  int PullFromPeers(std::chrono::milliseconds budget);
  // Every home this gateway knows, in a peer message's shape: the answer to a pull.
  std::string AllHomesMessage() const;

  // A peer's message: takes its homes, all or none. Returns an error if the message is malformed
  // or names a model whose replicas differ here; else empty, with the homes taken in `taken`.
  // `not_served`, if given: the models the message names that this gateway does not serve.
  std::string Receive(std::string_view body, int* taken,
                      std::vector<std::string>* not_served = nullptr);

  // The gateway this one took over from (a hand-over) has `in_flight` requests per model (models'
  // order) and replica: counted as a peer's until the next call, or ForgetPredecessor (its
  // end). Works with no peers too. Any thread.
  void SetPredecessorInFlight(std::vector<std::vector<int>> in_flight);
  void ForgetPredecessor();

  // The peers and how sending to them goes, and the homes received: for the admin API.
  boost::json::object Status() const;
  // The same as Prometheus families (warden_peer_*); nothing without peers.
  void WriteMetrics(PrometheusWriter& w) const;

 private:
  // Logs, once, a gateway that keeps sending here though it is not among the peers.
  void NoteSender(const std::string& instance);
  // `sender`, when given: the sending gateway's instance, if the message names it.
  std::string ReceiveMessage(std::string_view body, int* taken,
                             std::vector<std::string>* not_served, std::string* sender = nullptr);
  struct Peer {
    std::string url;
    std::unique_ptr<UpstreamPool> pool;
    std::unique_ptr<boost::asio::steady_timer> timer;
    // The homes with news up to then have reached this peer (-infinity: none yet).
    double synced_until = -std::numeric_limits<double>::infinity();
    std::string instance;  // the peer's process, from its answers
    bool self = false;     // the peer is this gateway (a config listing every gateway)
    std::vector<std::string> not_served;  // the models it said it does not serve
    int failures_in_a_row = 0;
    int failed_before_wake = 0;  // failures in a row before WakeAll reset the count
    bool nudged = false;         // something to send before the next interval
    bool urgent = false;         // ... at once: a new home (Nudge)
    double last_send = -1;
    int64_t homes_sent = 0;
    int64_t sends_ok = 0;
    int64_t sends_failed = 0;
    double last_ok = -1;
    std::string last_error;
    // At most this many homes (and responses) per model in a message: halved each time the
    // peer refuses one as over its body limit, doubled again after each kMaxHomesGrowBackS
    // with none refused (when it was last cut or grown).
    size_t max_homes = 0;
    double max_homes_cut_at = 0;
    // Per model, the version of its LoRA adapters' records the peer has (Message).
    std::vector<uint64_t> adapters_acked;
    // It answered the request for every home it knows (PullFrom), or was not running then
    // (refused the connection). Else it is asked again, beside the messages, after an answer to
    // one (up to kLatePulls times): only pulled homes include its idle ones.
    bool pulled = false;
    bool pulling = false;  // a late pull is on its way
    int late_pulls = 0;
  };

  boost::asio::awaitable<void> Loop(Peer& peer);
  // Asks the peer for every home it knows through `pool`, waiting at most `longest`, and takes
  // them (Peer::pulled once it answered). Returns the homes taken.
  boost::asio::awaitable<int> PullFrom(Peer& peer, UpstreamPool& pool,
                                       std::chrono::milliseconds longest, bool at_start);
  // After the peer answered a message: starts a late pull beside the loop if it is owed one.
  void PullLateIfOwed(Peer& peer);
  // A message came from a gateway not heard from before (a new or restarted peer): every peer's
  // loop sends now, without its backoff, so the newcomer learns every home before it places
  // conversations it does not know.
  void WakeAll();
  // Sends the peer its next message, waiting for the answer at most `longest` (and at most 5
  // intervals).
  boost::asio::awaitable<void> SendTo(
      Peer& peer, std::chrono::milliseconds longest = std::chrono::milliseconds::max());
  // The message for the homes routed after `since`, at most `max_homes` per model; `homes` gets
  // their number, `through` when the last was routed if some are left for the next message (else
  // +infinity).
  // News that came from the peer numbered `to` (SourceOf) is left out.
  // The LoRA adapters' records of a model go only when they changed (LoadedAdapters::version)
  // since `adapters_acked` (per model; empty: never sent); `adapters_sent` gets the versions sent.
  std::string Message(double since, size_t max_homes, int to, int64_t* homes, double* through,
                      const std::vector<uint64_t>& adapters_acked,
                      std::vector<uint64_t>* adapters_sent) const;
  // The number the session tables know a peer instance's news by (SessionTable::Learn); kHere
  // for none, or past a bound on the instances remembered.
  int SourceOf(const std::string& instance);
  // What a message says of one model: homes, and the Responses API's responses made (id, key).
  struct ModelNews {
    std::vector<SessionTable::SharedHome> homes;
    std::vector<StoredResponse> responses;
    bool with_adapters = true;
  };
  // The message for `news` per model (models_ order).
  std::string MessageOf(const std::vector<ModelNews>& news) const;
  // Hands each model the sum of its peers' requests in flight, leaving out peers not heard from
  // for stale_s_.
  void ApplyPeerLoads();
  // Orders this gateway among the peers that answered (by instance), so that their policies'
  // rotations among equally loaded replicas start apart. Only on shard 0.
  void ApplyRank();
  // Unix time minus the steady clock: what to add to a steady time to get a Unix time.
  double UnixOffset() const;

  std::vector<ModelState*> models_;
  boost::asio::any_io_executor executor_;
  std::function<double()> now_;
  double interval_s_;
  std::string authorization_;
  std::string instance_;
  bool stopped_ = false;
  std::atomic<int> loops_running_{0};
  std::atomic<bool> nudge_posted_{false};   // a Nudge is on its way to the executor
  std::atomic<bool> urgent_posted_{false};  // ... one with a new home
  mutable std::mutex mu_;  // guards the peers' counters and received_, read by the admin API
  std::vector<Peer> peers_;
  int64_t received_ = 0;
  // Per sender (its instance; empty: unnamed), now_() when a refusal of its message was last
  // logged; none once one of its messages is taken.
  std::unordered_map<std::string, double> refusal_warned_;
  int rank_ = 0;  // ApplyRank's, for the admin API
  int gateways_ = 1;
  // Senders not among the peers' instances: when each was first heard (negative once logged).
  std::unordered_map<std::string, double> strangers_;
  struct PeerLoad {
    double at = 0;                            // when its last message came
    double stale_s = 0;                       // forgotten this long after it
    std::vector<std::vector<int>> in_flight;  // per model (models_ order), per replica
  };
  std::unordered_map<std::string, PeerLoad> peer_loads_;  // by the peer's instance
  // Keeps `load` as gateway `id`'s latest, within kMaxPeerLoads; returns whether the gateway is
  // new, or back after going quiet (its messages then wake every loop). REQUIRES: mu_ held.
  bool KeepPeerLoad(const std::string& id, PeerLoad load);
  double stale_s_;
  std::vector<std::string> ranked_;               // the instances ApplyRank last ordered
  std::unordered_map<std::string, int> sources_;  // SourceOf's numbers
  // Instances whose counts kMaxPeerLoads pushed out of peer_loads_: when their last message came,
  // and how long after it they would have been forgotten (not new when heard again before).
  struct PushedOut {
    double at;
    double stale_s;
  };
  std::unordered_map<std::string, PushedOut> pushed_out_;
};

}  // namespace warden
