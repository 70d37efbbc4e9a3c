// The gateway's state file: conversations' homes kept across a restart (state_file.h).
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <thread>

#include "gateway/gateway.h"
#include "gateway/state_file.h"

namespace warden {

void Gateway::RestoreState() {
  saved_versions_.assign(models_.size(), 0);
  const std::string& path = config_.state_file;
  if (path.empty()) return;
  std::string text, error;
  bool missing = false;
  if (!ReadStateFile(path, &text, &missing, &error)) {
    if (missing)
      spdlog::info("state file {}: none yet, starting with no conversations", path);
    else
      spdlog::warn("state file {}: cannot read it ({}); starting with no conversations", path,
                   error);
    return;
  }
  const double now = Now();
  std::vector<ModelSnapshot> saved;
  if (!ParseState(text, UnixTime(now), &saved, &error)) {
    spdlog::warn("state file {}: {}; starting with no conversations", path, error);
    return;
  }
  for (const ModelSnapshot& m : saved) {
    ModelState* model = FindModel(m.name);
    if (!model) {
      spdlog::info("state file {}: model {} is no longer served, its {} conversations dropped",
                   path, m.name, m.conversations.size());
      continue;
    }
    size_t dropped = 0;
    const size_t restored = model->Restore(m, now, &dropped);
    state_restored_ += restored;
    spdlog::info("state file {}: model {}: {} conversations keep their replicas{}", path, m.name,
                 restored,
                 dropped > 0 ? fmt::format(" ({} dropped: their replicas are gone)", dropped) : "");
  }
  for (size_t i = 0; i < models_.size(); ++i)
    saved_versions_[i] =
        models_[i]->WithRouter([](ModelRouter& r) { return r.sessions().version(); });
}

void Gateway::SaveState(bool last) {
  if (config_.state_file.empty()) return;
  std::lock_guard lock(state_mu_);
  // After its last save a draining gateway writes no more: the gateway started in its place may
  // already be saving to the same file.
  if (state_saved_last_) return;
  state_saved_last_ = last;
  std::vector<uint64_t> versions;
  for (auto& m : models_)
    versions.push_back(m->WithRouter([](ModelRouter& r) { return r.sessions().version(); }));
  if (versions != saved_versions_) {
    const double now = Now();
    std::vector<ModelSnapshot> snapshots;
    for (auto& m : models_) snapshots.push_back(m->Snapshot(now));
    saved_versions_ = std::move(versions);
    // Serializing and syncing a large table takes a while: not on the shard's thread.
    if (state_writer_.joinable()) state_writer_.join();
    state_writer_ =
        std::thread([this, snapshots = std::move(snapshots), unix_time = UnixTime(now)] {
          std::string error;
          if (WriteFileAtomically(config_.state_file, StateToJson(snapshots, unix_time), &error)) {
            state_saved_at_ = unix_time;
            ++state_saves_;
          } else {
            ++state_save_failures_;
            spdlog::warn("state file: cannot save: {}", error);
          }
        });
  }
  if (last && state_writer_.joinable()) state_writer_.join();
}

asio::awaitable<void> Gateway::SaveStateLoop() {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto interval =
      std::chrono::milliseconds(static_cast<int64_t>(config_.state_save_interval_s * 1000));
  while (!stopped_) {
    timer.expires_after(interval);
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!stopped_) SaveState();
  }
}

}  // namespace warden
