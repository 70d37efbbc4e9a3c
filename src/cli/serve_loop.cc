#include "cli/serve_loop.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "cli/hand_over.h"
#include "cli/start_signals.h"
#include "gateway/gateway.h"
#include "gateway/peer_sync.h"
#include "net/systemd.h"
#include "os/heap_release.h"
#include "util/steady_seconds.h"

namespace warden {
namespace {

using Clock = std::chrono::steady_clock;

// Every so often, free heap over this much is given back to the system (os/heap_release.h).
constexpr auto kHeapReleasePeriod = std::chrono::seconds(5);
constexpr size_t kHeapKeptFree = 32 << 20;
// How long a new gateway started by SIGUSR2 has to say it is ready (restoring a large state file
// and pulling the peers' homes included).
constexpr auto kSuccessorPatience = std::chrono::seconds(60);
// How often a gateway that handed over looks whether its requests in flight changed, to tell its
// successor (which counts them as a peer's).
constexpr auto kSuccessorLoadsPeriod = std::chrono::milliseconds(100);
// Once the drain's time is up, the connections left are cut and given this long to say so in the
// access log.
constexpr auto kCutGrace = std::chrono::milliseconds(500);
constexpr auto kDrainCheckPeriod = std::chrono::milliseconds(20);
// What systemd is told from a stop signal on, until the drain begins (which says so itself).
constexpr std::string_view kStoppingStatus =
    "STOPPING=1\nSTATUS=stopping: out of load balancing, then a drain";
constexpr auto kPeersCheckPeriod = std::chrono::milliseconds(10);

}  // namespace

// The hand-over's result comes back on a thread of its own; it is posted to `io` while the loop
// still exists.
struct ServeLoop::Mailbox {
  std::mutex mu;
  boost::asio::io_context* io;
};

ServeLoop::ServeLoop(const std::vector<std::unique_ptr<IoContext>>& shards, Gateway& gateway,
                     const GatewayConfig& config, Settings settings)
    : shards_(shards),
      io_(*shards[0]),
      gateway_(gateway),
      config_(config),
      settings_(std::move(settings)),
      stop_signals_(io_, SIGINT, SIGTERM),
      hand_over_signal_(io_, SIGUSR2),
      reload_signal_(io_, SIGHUP),
      drain_timer_(io_),
      drain_delay_timer_(io_),
      peers_timer_(io_),
      watchdog_timer_(io_),
      heap_timer_(io_),
      loads_timer_(io_),
      predecessor_end_(io_),
      mailbox_(std::make_shared<Mailbox>()),
      shards_seen_(static_cast<int>(shards.size())) {
  mailbox_->io = &io_;
  ReleaseHeap();
  WaitForStopSignal();
  WaitForHandOverSignal();
  WaitForReloadSignal();
}

ServeLoop::~ServeLoop() {
  std::lock_guard lock(mailbox_->mu);
  mailbox_->io = nullptr;
}

void ServeLoop::Serving(const std::string& base_url) {
  serving_on_ = base_url;
  // Once the old gateway has ended, this one is alone on the output: its lines lose their pid.
  if (const int fd = TakePredecessorLoads(); fd >= 0) {
    gateway_.FollowPredecessor(fd, [this] { LogWithPidUnlessHandingOver(); });
  } else if (settings_.predecessor_end == kPredecessorEnded) {
    LogWithPid(false);
  } else if (settings_.predecessor_end >= 0) {  // (a gateway older than the pipe)
    predecessor_end_.assign(settings_.predecessor_end);
    predecessor_end_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                                [this](const boost::system::error_code& ec) {
                                  if (ec) return;
                                  LogWithPidUnlessHandingOver();
                                  spdlog::info("the gateway handed over from has ended");
                                });
  }
  // A successor says so to the gateway it takes over from, which tells systemd.
  if (!SaySuccessorReady())
    NotifyServiceManager(fmt::format("READY=1\nSTATUS=serving on {}", serving_on_));
  watchdog_period_ = WatchdogPeriod();
  if (watchdog_period_.count() > 0) FeedWatchdog();
  // What was asked for while it started (cli/start_signals.h).
  if (TakeHeldSignal(SIGHUP)) {
    spdlog::info("SIGHUP came while the gateway started: reading the config again now");
    boost::asio::post(io_, [this] { OnReloadSignal(); });
  }
  if (TakeHeldSignal(SIGUSR2)) {
    // (`systemctl kill -s USR2` signals every process of the unit: the old gateway's and this
    // one's, found by review.)
    if (StartedByHandOver()) {
      spdlog::warn(
          "SIGUSR2 came while this gateway started from a hand-over (meant for the one before "
          "it?): no hand-over of this one; send it again for one");
    } else {
      boost::asio::post(io_, [this] { OnHandOverSignal(); });
    }
  }
}

void ServeLoop::LogWithPidUnlessHandingOver() {
  // (While this one hands over in turn, a third gateway shares the output.)
  if (!handing_over_) LogWithPid(false);
}

void ServeLoop::Run() {
  std::vector<std::thread> workers;
  for (size_t i = 1; i < shards_.size(); ++i) {
    workers.emplace_back([shard = shards_[i].get()] {
      auto guard = boost::asio::make_work_guard(*shard);
      shard->run();
    });
  }
  io_.run();
  for (auto& t : workers) t.join();
  // A hand-over's conversations still being written as the gateway stopped (found by review).
  gateway_.WaitForStateWriter();
  RemoveHandOverState(std::exchange(handed_state_, {}));
  // Requests waiting for a body's decoding are then queued on their shards, to go next.
  gateway_.StopDecoding();
  // While the gateway its coroutines refer to still exists (held requests, kept-alive connections).
  for (auto& shard : shards_) shard->DestroyQueuedWork();
}

// --- Stopping: SIGTERM, SIGINT and the drain ---

void ServeLoop::WaitForStopSignal() {
  stop_signals_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    OnStopSignal();
    WaitForStopSignal();
  });
}

void ServeLoop::OnStopSignal() {
  if (delaying_drain_) {  // an impatient second signal: the drain, not a cut
    spdlog::info("second signal: draining now");
    drain_delay_timer_.cancel();
    delaying_drain_ = false;
    return BeginDrain(false);
  }
  if (++stop_signals_seen_ > 1) {
    spdlog::info("another signal: stopping now");
    return StopNow(true);
  }
  if (successor_starting_ > 0) {  // the operator wants a stop, not a new gateway
    spdlog::info("stopping: the new gateway being started is stopped too");
    ::kill(successor_starting_, SIGTERM);
  }
  if (!drain_begun_) return BeginDrainAfterDelay();
  ShortenDrain();  // draining after a hand-over: now no longer than a stop's drain
}

void ServeLoop::ShortenDrain() {
  const auto now = Clock::now();
  drain_deadline_ = std::min(drain_deadline_, now + SteadySeconds(config_.drain_timeout_s));
  gateway_.Drain(drain_deadline_);
  spdlog::info("stopping: the requests on their way get up to {:.0f} s more",
               std::chrono::duration<double>(drain_deadline_ - now).count());
}

// A successor that fails while this gateway drains leaves nobody accepting connections (they wait
// in a socket unit's socket, or are refused). Its exit status is left for systemd, which restarts
// the service (Restart=on-failure) once this process is gone: so this one goes sooner.
void ServeLoop::WatchSuccessor() {
  if (successor_ <= 0) return;
  const SuccessorEnd end = CheckSuccessor(successor_);
  if (!end.ended) return;
  if (end.failed) {
    spdlog::error(
        "the new gateway (pid {}) {} during this one's drain: no gateway accepts new connections; "
        "this one's drain is cut to drain_timeout_s, so that the service manager can start a new "
        "one sooner",
        successor_, end.how);
    ShortenDrain();
  } else {
    spdlog::info("the new gateway (pid {}) {} during this one's drain", successor_, end.how);
  }
  successor_ = -1;
}

void ServeLoop::BeginDrainAfterDelay() {
  if (config_.drain_delay_s <= 0) return BeginDrain(false);
  drain_begun_ = true;  // a stop is under way (no hand-over now)
  delaying_drain_ = true;
  gateway_.AnnounceStop();
  spdlog::info(
      "stopping: serving {} s more with GET /ready saying 503 and responses closing their "
      "connections, then draining (a second signal drains now)",
      config_.drain_delay_s);
  NotifyServiceManager(kStoppingStatus);
  drain_delay_timer_.expires_after(SteadySeconds(config_.drain_delay_s));
  drain_delay_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_ || !delaying_drain_) return;
    delaying_drain_ = false;
    BeginDrain(false);
  });
}

// `handed_over`: a successor serves from now on (and is systemd's main process).
void ServeLoop::BeginDrain(bool handed_over) {
  drain_begun_ = true;
  const double drain_s = handed_over ? config_.hand_over_drain_timeout_s : config_.drain_timeout_s;
  spdlog::info("stopping: no new connections{}; the requests on their way get up to {} s",
               handed_over              ? " (the new gateway takes them)"
               : settings_.sockets_held ? " (they wait in the socket systemd holds, for the next "
                                          "gateway)"
                                        : "",
               drain_s);
  if (!handed_over) NotifyServiceManager("STOPPING=1\nSTATUS=draining the requests on their way");
  drain_deadline_ = Clock::now() + SteadySeconds(drain_s);
  gateway_.Drain(drain_deadline_);
  StopWhenDrained();
}

void ServeLoop::StopWhenDrained() {
  WatchSuccessor();
  // Counted only once every shard has stopped accepting and closed its idle connections.
  const int left = gateway_.draining() ? gateway_.open_connections() : -1;
  const auto now = Clock::now();
  if (left == 0 && (!gateway_.saving_state() || now >= drain_deadline_)) return StopNow(false);
  if (now >= drain_deadline_ && !cut_at_) {
    if (left > 0) spdlog::warn("drain time is up: {} connection(s) cut short", left);
    if (left < 0) {
      spdlog::warn(
          "drain time is up before the listeners stopped accepting{}: every connection "
          "left is cut short",
          gateway_.saving_state() ? " (the state file's save still runs?)" : "");
    }
    gateway_.CutShort();
    cut_at_ = now;
  }
  if (cut_at_ && now >= *cut_at_ + kCutGrace) return StopNow(false);
  drain_timer_.expires_after(kDrainCheckPeriod);
  drain_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) StopWhenDrained();
  });
}

void ServeLoop::StopNow(bool at_once) {
  StopTellingSuccessor();
  if (std::exchange(stopped_, true)) return at_once ? StopShards() : void();
  // (found by review: the old gateway's last lines could not be told from the new one's)
  if (handed_over_) {
    spdlog::info("the gateway handed over from (pid {}) stops{}", ::getpid(),
                 successor_ > 0 ? fmt::format("; pid {} serves", successor_) : std::string());
  }
  gateway_.Stop();
  if (at_once) return StopShards();
  // The peers' last messages (PeerSync's) and the last spans (TraceExporter's) are given up to a
  // second to be answered.
  StopWhenPeersTold(Clock::now() + kLastMessage + std::chrono::milliseconds(100));
}

void ServeLoop::StopWhenPeersTold(Clock::time_point give_up) {
  if (gateway_.PeersTold() || Clock::now() >= give_up) return StopShards();
  peers_timer_.expires_after(kPeersCheckPeriod);
  peers_timer_.async_wait([this, give_up](const boost::system::error_code& ec) {
    if (!ec) StopWhenPeersTold(give_up);
  });
}

void ServeLoop::StopShards() {
  for (auto& shard : shards_) shard->stop();
}

// --- Hand-over: SIGUSR2 ---

void ServeLoop::WaitForHandOverSignal() {
  hand_over_signal_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    WaitForHandOverSignal();
    OnHandOverSignal();
  });
}

void ServeLoop::OnHandOverSignal() {
  if (settings_.demo) {
    spdlog::warn("SIGUSR2: the demo's simulated replicas run in this process: no hand-over");
    return;
  }
  if (handing_over_ || drain_begun_) {
    spdlog::info("SIGUSR2: {}", drain_begun_ ? "stopping already" : "a hand-over is under way");
    if (drain_begun_) SayHandOverStopped();
    return;
  }
  handing_over_ = true;
  gateway_.SetHandingOver(true);  // what the new gateway starts from is written from here on
  LogWithPid();                   // the new gateway logs to the same output from now on
  spdlog::info(
      "SIGUSR2: starting a new gateway on this one's sockets; this one drains once it is ready");
  // What the new gateway starts from, written while this one serves on: the state file first (a
  // successor older than the hand-over's own file reads only that), then the hand-over's file,
  // which the new gateway reads whatever its config says of a state file (found by review: with
  // no state file, or with a config that dropped or moved it, every conversation was placed
  // afresh).
  if (!config_.state_file.empty()) return gateway_.SaveStateNow([this] { PassConversations(); });
  PassConversations();
}

void ServeLoop::PassConversations() {
  if (drain_begun_) return StartSuccessorNow();  // (which gives up)
  std::string path = HandOverStatePath();
  if (path.empty()) {
    spdlog::warn(
        "SIGUSR2: no folder for the conversations (in $RUNTIME_DIRECTORY or the temporary "
        "folder): the new gateway {}",
        config_.state_file.empty()
            ? std::string("places each afresh")
            : fmt::format("keeps them only if its config reads them from {}", config_.state_file));
    return StartSuccessorNow();
  }
  handed_state_ = path;  // removed by whichever comes first: the hand-over's end, or this one's
  gateway_.SaveStateForHandOver(path, [this](bool written) {
    handed_state_written_ = written;
    StartSuccessorNow();
  });
}

// A script waiting for a hand-over's line on stdout gets one when a stop prevents it.
void ServeLoop::SayHandOverStopped() {
  fmt::print("warden hand-over failed: this gateway is stopping\n");
  std::fflush(stdout);
}

void ServeLoop::StartSuccessorNow() {
  if (drain_begun_) {  // stopped while the conversations were written: no new gateway
    RemoveHandOverState(std::exchange(handed_state_, {}));
    handed_state_written_ = false;
    handing_over_ = false;
    SayHandOverStopped();
    return;
  }
  if (!handed_state_written_ && !config_.state_file.empty() && gateway_.state_save_failed()) {
    const double saved = gateway_.state_saved_at();
    spdlog::warn(
        "SIGUSR2: the state file could not be saved (above): the new gateway starts from {}; the "
        "conversations placed since are placed afresh",
        saved > 0 ? fmt::format("the save this gateway made {:.0f} s ago",
                                std::chrono::duration<double>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                        .count() -
                                    saved)
                  : std::string("what the file held before (this gateway saved nothing)"));
  }
  successor_starting_ = StartSuccessor(
      gateway_.listening_fds(), settings_.sockets_held, kSuccessorPatience,
      [mailbox = mailbox_, this](HandOverResult result) {
        std::lock_guard lock(mailbox->mu);
        if (mailbox->io) boost::asio::post(*mailbox->io, [this, result] { HandedOver(result); });
      },
      handed_state_written_ ? handed_state_ : std::string());
}

void ServeLoop::HandedOver(const HandOverResult& result) {
  handing_over_ = false;
  successor_starting_ = -1;
  ReapSuccessor(result);
  // A new gateway reads its conversations as it starts, before it says it is ready; one that did
  // not start, or an older binary that does not read them, leaves them: gone either way.
  RemoveHandOverState(std::exchange(handed_state_, {}));
  handed_state_written_ = false;
  loads_fd_ = result.loads_fd;
  if (drain_begun_) {  // stopped meanwhile: the new gateway was sent the stop too
    StopTellingSuccessor();
    SayHandOverStopped();
    return;
  }
  if (result.pid < 0) {
    gateway_.SetHandingOver(false);
    LogWithPid(false);  // alone on its output again
    spdlog::error("SIGUSR2: {}; this gateway goes on serving", result.error);
    fmt::print("warden hand-over failed: {}\n", result.error);
    std::fflush(stdout);
    return;
  }
  NotifyServiceManager(
      fmt::format("MAINPID={}\nREADY=1\nSTATUS=handed over to pid {}", result.pid, result.pid));
  handed_over_ = true;
  successor_ = result.pid;
  fmt::print("warden handed over to pid {}\n", result.pid);
  std::fflush(stdout);
  TellSuccessorLoads();
  BeginDrain(true);
}

void ServeLoop::TellSuccessorLoads() {
  if (loads_fd_ < 0) return;
  if (loads_pending_.empty()) {
    std::string line = gateway_.InFlightLine();
    if (line != loads_said_) loads_pending_ = loads_said_ = std::move(line);
  }
  while (!loads_pending_.empty()) {
    const ssize_t n = ::write(loads_fd_, loads_pending_.data(), loads_pending_.size());
    if (n > 0) {
      loads_pending_.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      break;  // it reads later
    } else if (!(n < 0 && errno == EINTR)) {
      return StopTellingSuccessor();  // it is gone
    }
  }
  loads_timer_.expires_after(kSuccessorLoadsPeriod);
  loads_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) TellSuccessorLoads();
  });
}

void ServeLoop::StopTellingSuccessor() {
  loads_timer_.cancel();
  if (loads_fd_ >= 0) ::close(loads_fd_);  // its end: none left
  loads_fd_ = -1;
}

// --- SIGHUP, the watchdog, the heap ---

void ServeLoop::WaitForReloadSignal() {
  reload_signal_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    OnReloadSignal();
    WaitForReloadSignal();
  });
}

void ServeLoop::OnReloadSignal() {
  // After a hand-over the new gateway is the service's main process: this one says nothing.
  if (!handed_over_) NotifyServiceManager("RELOADING=1\nSTATUS=reading the config again");
  if (settings_.reload) settings_.reload();
  // Stopping meanwhile (a drain's delay, or the drain): systemd is told so again, not "ready".
  if (!handed_over_) {
    NotifyServiceManager(drain_begun_ ? std::string(kStoppingStatus)
                                      : fmt::format("READY=1\nSTATUS=serving on {}", serving_on_));
  }
}

// A ping at half the period, sent only when every shard has run a check posted to it at the last
// one: a shard stuck in its loop stops the pings, and systemd restarts the gateway.
void ServeLoop::FeedWatchdog() {
  watchdog_timer_.expires_after(watchdog_period_ / 2);
  watchdog_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    // Not from a gateway that handed over: systemd watches the new one.
    if (shards_seen_.exchange(0) == static_cast<int>(shards_.size()) && !handed_over_)
      NotifyServiceManager("WATCHDOG=1");
    for (auto& shard : shards_) boost::asio::post(*shard, [this] { shards_seen_.fetch_add(1); });
    FeedWatchdog();
  });
}

// Memory a burst of large bodies used goes back to the system once it is free and stays free.
void ServeLoop::ReleaseHeap() {
  heap_timer_.expires_after(kHeapReleasePeriod);
  heap_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (const size_t released = ReleaseFreeHeap(kHeapKeptFree))
      spdlog::debug("gave {} MiB of free heap back to the system", released >> 20);
    ReleaseHeap();
  });
}

}  // namespace warden
