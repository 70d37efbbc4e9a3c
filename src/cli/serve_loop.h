// A started gateway's life until it stops: its threads, and the signals an operator (or systemd)
// sends it.
//
// - SIGTERM or SIGINT: no new connections, and the requests on their way get up to
//   `drain_timeout_s` to finish (a stream cut short costs its client the whole turn); another
//   signal then stops at once. With `drain_delay_s`, the gateway first serves on that long with
//   GET /ready saying 503 and responses closing their connections (a second signal cuts the delay
//   short).
// - SIGUSR2: a new gateway from the same command line takes over the sockets (hand_over.h), and
//   this one drains for `hand_over_drain_timeout_s` once the new one is ready. Should the new one
//   fail meanwhile (a crash), nothing accepts connections: the drain is cut to `drain_timeout_s`,
//   so that the service manager, which sees the failure once this process is gone, starts another.
// - SIGHUP: the caller's reload runs, between systemd's RELOADING=1 and READY=1.
// Beside those: systemd's watchdog pings (under WatchdogSec=) and free heap given back.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "net/io_context.h"

namespace warden {

class Gateway;
struct HandOverResult;

class ServeLoop {
 public:
  struct Settings {
    bool demo = false;  // the simulated replicas run in this process: no hand-over
    // The sockets are a systemd socket unit's: connections wait in them for the next gateway.
    bool sockets_held = false;
    std::function<void()> reload;  // SIGHUP's work, on shard 0's thread
    // OpenPredecessorEnd's (cli/hand_over.h): the gateway handed over from, when it gives no pipe.
    int predecessor_end = -1;
  };

  // Handles the signals from here on: whoever started the gateway may stop it. `shards[0]` runs
  // the signals and timers. `shards`, `gateway` and `config` must outlive this object.
  ServeLoop(const std::vector<std::unique_ptr<IoContext>>& shards, Gateway& gateway,
            const GatewayConfig& config, Settings settings);
  ~ServeLoop();

  ServeLoop(const ServeLoop&) = delete;
  ServeLoop& operator=(const ServeLoop&) = delete;

  // The gateway listens at `base_url`: tells systemd (or the gateway that started this one) it is
  // ready, and starts the watchdog's pings.
  void Serving(const std::string& base_url);

  // Runs every shard, one thread each, until the gateway has stopped, then destroys the work still
  // queued on them while the gateway it refers to exists.
  void Run();

 private:
  struct Mailbox;

  void WaitForStopSignal();
  void OnStopSignal();
  void BeginDrain(bool handed_over);
  // A stop's drain, after drain_delay_s of serving with GET /ready saying 503.
  void BeginDrainAfterDelay();
  void StopWhenDrained();
  void ShortenDrain();
  void WatchSuccessor();
  void StopNow(bool at_once);
  void StopWhenPeersTold(std::chrono::steady_clock::time_point give_up);
  void StopShards();

  void WaitForHandOverSignal();
  // The gateway handed over from has ended: this one's lines lose their pid.
  void LogWithPidUnlessHandingOver();
  void OnHandOverSignal();
  // Writes the conversations to a file of the hand-over's own, then starts the successor.
  void PassConversations();
  void StartSuccessorNow();
  void SayHandOverStopped();
  void HandedOver(const HandOverResult& result);

  void WaitForReloadSignal();
  void OnReloadSignal();
  void FeedWatchdog();
  void ReleaseHeap();
  // After a hand-over: tells the new gateway this one's requests in flight whenever they change
  // (gateway/predecessor_load.h), until this one stops or the new one is gone.
  void TellSuccessorLoads();
  void StopTellingSuccessor();

  const std::vector<std::unique_ptr<IoContext>>& shards_;
  IoContext& io_;  // shards_[0]
  Gateway& gateway_;
  const GatewayConfig& config_;
  const Settings settings_;
  std::string serving_on_;  // the base URL, once said

  boost::asio::signal_set stop_signals_;
  boost::asio::signal_set hand_over_signal_;
  boost::asio::signal_set reload_signal_;
  boost::asio::steady_timer drain_timer_;
  boost::asio::steady_timer drain_delay_timer_;
  boost::asio::steady_timer peers_timer_;
  boost::asio::steady_timer watchdog_timer_;
  boost::asio::steady_timer heap_timer_;
  boost::asio::steady_timer loads_timer_;
  boost::asio::posix::stream_descriptor predecessor_end_;

  int stop_signals_seen_ = 0;
  bool stopped_ = false;
  bool drain_begun_ = false;
  bool delaying_drain_ = false;  // serving on before the drain (drain_delay_s)
  std::chrono::steady_clock::time_point drain_deadline_;
  std::optional<std::chrono::steady_clock::time_point> cut_at_;  // connections left were cut

  bool handing_over_ = false;
  // The file of conversations for the new gateway, while a hand-over is under way;
  // `handed_state_written_` once it is written.
  std::string handed_state_;
  bool handed_state_written_ = false;
  bool handed_over_ = false;       // systemd's main process is the new gateway
  pid_t successor_starting_ = -1;  // a hand-over's new gateway, until it is ready or gone
  pid_t successor_ = -1;           // the new gateway handed over to, while it runs
  // Where the hand-over's waiting thread posts its result; closed when this object goes.
  std::shared_ptr<Mailbox> mailbox_;
  int loads_fd_ = -1;          // the pipe to the new gateway (HandOverResult::loads_fd)
  std::string loads_said_;     // the last line given to it
  std::string loads_pending_;  // of that, what the pipe has not taken yet

  std::chrono::microseconds watchdog_period_{0};
  std::atomic<int> shards_seen_;  // shards that ran the check posted at the last ping
};

}  // namespace warden
