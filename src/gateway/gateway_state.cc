// The gateway's state file: conversations' homes kept across a restart (state_file.h).
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>

#include "gateway/gateway.h"
#include "gateway/state_file.h"
#include "os/follow_symlinks.h"
#include "os/system_time.h"
#include "util/steady_seconds.h"

namespace warden {
namespace {

// Moves (or, with `copy`, copies) a state file that cannot be used fully to a name of its own,
// `<path>.unreadable.<unix time>` (then `.2`, `.3`, ... within one second), so that neither the
// first save nor a file set aside before is written over. Returns the name; `ec` says a failure.
std::string SetAside(const std::string& named, double unix_time, bool copy, std::error_code* ec) {
  // A link to a regular file stays, to the file saved next; anything else is not moved.
  std::string path = FollowSymlinks(named);
  if (!std::filesystem::is_regular_file(path, *ec)) path = named;
  const std::string stem = fmt::format("{}.unreadable.{:.0f}", path, unix_time);
  std::string aside = stem;
  for (int n = 2; std::filesystem::exists(std::filesystem::symlink_status(aside, *ec)) && n < 100;
       ++n)
    aside = fmt::format("{}.{}", stem, n);
  if (copy) {
    std::filesystem::copy_file(path, aside, *ec);  // fails rather than overwrite
  } else {
    std::filesystem::rename(path, aside, *ec);
  }
  return aside;
}

}  // namespace

void Gateway::RestoreState() {
  saved_versions_.assign(models_.size(), 0);
  // The old gateway's conversations as it handed over are the freshest there are: read in place
  // of the state file, if this config has one (its first save then writes them).
  if (!handed_over_state_.empty()) {
    const double handing_writer = StateFileWriterStart(handed_over_state_);
    const bool read = RestoreStateFrom(handed_over_state_, /*handed_over=*/true);
    std::error_code ec;  // read once: a hand-over from this gateway writes its own
    std::filesystem::remove(handed_over_state_, ec);
    std::filesystem::remove(std::filesystem::path(handed_over_state_).parent_path(), ec);
    handed_over_state_.clear();
    if (read) {
      // A state file the old gateway saved just before (its writer's start is the hand-over
      // file's): its time is the last save's, as at a start from it. (Found by review: the
      // save-time metric read 0 after every hand-over; then, an unrelated file's time.)
      if (!config_.state_file.empty() && handing_writer > 0 &&
          StateFileWriterStart(config_.state_file) == handing_writer) {
        NoteStateFileSavedAt(config_.state_file);
      }
      return;
    }
  }
  if (!config_.state_file.empty()) RestoreStateFrom(config_.state_file, /*handed_over=*/false);
}

void Gateway::NoteStateFileSavedAt(const std::string& path) {
  std::error_code ec;
  const auto modified = std::filesystem::last_write_time(path, ec);
  if (ec) return;
  state_saved_at_ =
      std::chrono::duration<double>(std::chrono::file_clock::to_sys(modified).time_since_epoch())
          .count();
}

bool Gateway::RestoreStateFrom(const std::string& path, bool handed_over) {
  std::string text, error;
  bool missing = false;
  if (!ReadStateFile(path, &text, &missing, &error)) {
    if (handed_over) {
      spdlog::warn("hand-over: cannot read the conversations the old gateway left in {} ({}){}",
                   path, error, config_.state_file.empty() ? ": each is placed afresh" : "");
      return false;
    }
    if (missing) {
      spdlog::info("state file {}: none yet, starting with no conversations", path);
      return true;
    }
    // Kept aside rather than written over by the first save (a file of another user, say).
    std::error_code ec;
    const std::string aside = SetAside(path, UnixTime(Now()), /*copy=*/false, &ec);
    spdlog::warn("state file {}: cannot read it ({}); starting with no conversations{}", path,
                 error,
                 ec ? fmt::format(" (nor can it be set aside: {})", ec.message())
                    : fmt::format(" (the file is kept as {})", aside));
    return false;
  }
  const double now = Now();
  std::vector<ModelSnapshot> saved;
  StateDamage damage;
  if (!ParseState(text, UnixTime(now), &saved, &error, &damage)) {
    if (handed_over) {
      spdlog::warn("hand-over: the conversations the old gateway left in {}: {}{}", path, error,
                   config_.state_file.empty() ? "; each is placed afresh" : "");
      return false;
    }
    // Kept aside rather than written over by the first save: it may be worth a look.
    std::error_code ec;
    const std::string aside = SetAside(path, UnixTime(now), /*copy=*/false, &ec);
    spdlog::warn("state file {}: {}; starting with no conversations{}", path, error,
                 ec ? "" : fmt::format(" (the file is kept as {})", aside));
    return false;
  }
  // The file's own save, until this gateway writes one: an idle gateway that restored it still
  // says how old it is.
  if (!damage.any() && !handed_over) NoteStateFileSavedAt(path);
  if (damage.any() && !handed_over) {
    // What could be read is used; the file as it was is kept (the first save writes over it).
    std::error_code ec;
    const std::string aside = SetAside(path, UnixTime(now), /*copy=*/true, &ec);
    spdlog::warn(
        "state file {}: skipped as malformed: {} model(s), {} conversation(s), {} replica "
        "name(s){}",
        path, damage.models, damage.conversations, damage.replicas,
        ec ? "" : fmt::format(" (the file as it was is kept as {})", aside));
  }
  const std::string source = handed_over ? "hand-over" : "state file " + path;
  std::vector<std::pair<ModelState*, size_t>> restarts;  // each model's conversations restored
  for (const ModelSnapshot& m : saved) {
    ModelState* model = FindModel(m.name);
    if (!model) {
      spdlog::info("{}: model {} is no longer served, its {} conversation(s) dropped", source,
                   m.name, m.conversations.size());
      continue;
    }
    size_t dropped = 0;
    const size_t restored = model->Restore(m, now, UnixTime(now), &dropped);
    state_restored_ += restored;
    restarts.emplace_back(model, restored);
    // Past the session table's bound (max_entries), the least recently seen are left out. (Below
    // it, entries are fewer only as a conversation's opening entry, handed over to its later turns,
    // is not one of its own.)
    const bool full = model->WithRouter(
        [&](ModelRouter& r) { return r.sessions().size() >= model->config().max_sessions; });
    const size_t left_out =
        full ? m.conversations.size() - std::min(m.conversations.size(), dropped + restored) : 0;
    spdlog::info(
        "{}: model {}: {} conversation(s) keep their replicas{}{}", source, m.name, restored,
        dropped > 0
            ? fmt::format(
                  " ({} dropped: their replicas are not served now, or the file names none)",
                  dropped)
            : "",
        left_out > 0 ? fmt::format(" ({} left out: the session table holds {} at most, "
                                   "max_sessions / session.max_entries)",
                                   left_out, model->config().max_sessions)
                     : "");
  }
  for (size_t i = 0; i < models_.size(); ++i) {
    // (A restore that dropped a PATCH is saved at the next turn, not only when something else
    // changes: else the restart after would bring it back.)
    // (What a hand-over passed is saved at once, to a state file configured only now.)
    saved_versions_[i] =
        handed_over ? 0
                    : models_[i]->StateVersion() - (models_[i]->RestoreChangedSettings() ? 1 : 0);
  }
  // On the chart, where the counts start again; noted after the versions, so that it is saved.
  for (const auto& [model, restored] : restarts) {
    model->changes().Note(
        UnixTime(now),
        fmt::format("gateway restarted: {} conversations kept their replicas", restored),
        handed_over ? "hand-over" : "state file");
  }
  return true;
}

namespace {

// Posts a function to an io_context when it goes, unless it was taken.
struct PostAtExit {
  asio::io_context& io;
  std::function<void()> fn;
  ~PostAtExit() {
    if (fn) asio::post(io, std::move(fn));
  }
};

}  // namespace

void Gateway::SaveState(SaveWhen when, std::function<void()> then) {
  PostAtExit then_at_exit{*shards_[0], std::move(then)};
  if (config_.state_file.empty()) return;
  std::unique_lock lock(state_mu_, std::defer_lock);
  if (when == SaveWhen::kPeriodic) {
    // A drain's save (on the drainer's thread) holds the lock while it writes: the shard's tick
    // does not wait for it.
    if (!lock.try_lock()) return;
  } else {
    lock.lock();
  }
  if (state_saved_final_) return;
  switch (when) {
    case SaveWhen::kPeriodic:  // a slow disk: the next tick tries again
      if (state_draining_ || state_writes_pending_ > 0) return;
      break;
    case SaveWhen::kNow:  // written on the writer's thread, which then posts `then`
      if (state_draining_) return;
      break;
    case SaveWhen::kDrain:  // written before Drain returns; no periodic save after this
      state_draining_ = true;
      if (state_writer_.joinable()) state_writer_.join();  // a periodic save under way
      break;
    case SaveWhen::kFinal:
      state_saved_final_ = true;
      if (state_writer_.joinable()) state_writer_.join();
      break;
  }
  std::vector<uint64_t> versions;
  for (auto& m : models_) versions.push_back(m->StateVersion());
  const bool failed_before = state_write_failed_.exchange(false);
  if (versions == saved_versions_ && !failed_before) {
    // Nothing new, but a save may be under way: `then` once it is written (a hand-over's
    // successor reads the file, found by review).
    if (when == SaveWhen::kNow && state_writes_pending_ > 0 && then_at_exit.fn) {
      StartStateWriter([this, then = std::exchange(then_at_exit.fn, nullptr)] {
        asio::post(*shards_[0], then);
      });
    }
    return;
  }
  const double now = Now();
  std::vector<ModelSnapshot> snapshots;
  for (auto& m : models_) snapshots.push_back(m->Snapshot(now, UnixTime(now)));
  saved_versions_ = std::move(versions);
  // Serializing and syncing a large table takes a while: not on the shard's thread.
  // (The writer posts `then`, on its thread or, with none to be had, on this one.)
  StartStateWriter([this, snapshots = std::move(snapshots), unix_time = UnixTime(now),
                    then = std::exchange(then_at_exit.fn, nullptr)] {
    WriteState(snapshots, unix_time);
    if (then) asio::post(*shards_[0], then);
  });
  if (when != SaveWhen::kPeriodic && when != SaveWhen::kNow && state_writer_.joinable())
    state_writer_.join();
}

void Gateway::WaitForStateWriter() {
  std::lock_guard lock(state_mu_);
  if (state_writer_.joinable()) state_writer_.join();
}

void Gateway::SaveStateForHandOver(std::string path, std::function<void(bool)> saved) {
  const double now = Now();
  std::vector<ModelSnapshot> snapshots;
  for (auto& m : models_) snapshots.push_back(m->Snapshot(now, UnixTime(now)));
  std::lock_guard lock(state_mu_);
  // (After a save of the state file under way, done or not; a periodic save skips its tick
  // rather than wait for this one.)
  StartStateWriter([this, path = std::move(path), snapshots = std::move(snapshots),
                    unix_time = UnixTime(now), saved = std::move(saved)] {
    std::string error;
    bool written = false;
    try {
      written = WriteFileAtomically(path, StateToJson(snapshots, unix_time, UnixTime(0)), &error);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!written)
      spdlog::warn("SIGUSR2: cannot write the conversations for the new gateway to {}: {}", path,
                   error);
    asio::post(*shards_[0], [saved, written] { saved(written); });
  });
}

bool Gateway::StartStateWriter(std::function<void()> write) {
  ++state_writes_pending_;
  // (Both held apart from the new thread's function until that thread exists: else a thread that
  // cannot be had takes them with it.)
  auto previous = std::make_shared<std::thread>(std::move(state_writer_));
  auto job = std::make_shared<std::function<void()>>(std::move(write));
  try {
    state_writer_ = std::thread([this, job, previous] {
      if (previous->joinable()) previous->join();
      (*job)();
      --state_writes_pending_;
    });
    return true;
  } catch (const std::system_error& e) {  // no thread to be had: written here
    spdlog::warn("state file: no writer thread ({}), writing on the shard", e.what());
    if (previous->joinable()) previous->join();
    (*job)();
    --state_writes_pending_;
    return false;
  }
}

void Gateway::WriteState(const std::vector<ModelSnapshot>& snapshots, double unix_time) {
  std::string error;
  bool written = false;
  // A gateway started after this one (in its place, during its drain) owns the file from its
  // first save on; one started before (the one this one replaced) does not.
  const double started = UnixTime(0);
  // A start in the future is no successor's but a clock that moved (or a file from elsewhere).
  const auto newest_writer = [&] {
    const double theirs = StateFileWriterStart(config_.state_file);
    return theirs <= started || theirs > SystemUnixTime();
  };
  try {
    written = WriteFileAtomically(config_.state_file, StateToJson(snapshots, unix_time, started),
                                  &error, newest_writer);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (written) {
    state_saved_at_ = unix_time;
    ++state_saves_;
    state_write_failed_ = false;  // (an earlier one's failure is mended)
  } else if (error == "refused") {
    ++state_save_refusals_;
    spdlog::info("state file: a gateway started after this one has saved it; it stays theirs");
  } else {
    ++state_save_failures_;
    state_write_failed_ = true;  // the next save writes even if nothing changed
    spdlog::warn("state file: cannot save: {}", error);
  }
}

asio::awaitable<void> Gateway::TrafficLogLoop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!stopped_) {
    timer.expires_after(std::chrono::seconds(1));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    traffic_log_->FlushIfDue(Now());
  }
}

asio::awaitable<void> Gateway::SaveStateLoop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto interval = SteadySeconds(config_.state_save_interval_s);
  while (!stopped_) {
    timer.expires_after(interval);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!stopped_) SaveState(SaveWhen::kPeriodic);
  }
}

}  // namespace warden
