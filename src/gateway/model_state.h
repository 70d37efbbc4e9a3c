// Everything the gateway holds for one model: its config, its routing state (behind a lock: the
// gateway runs on several threads) and its upstream connection pools.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/routing/model_router.h"
#include "gateway/config.h"
#include "net/upstream.h"

namespace warden {

// Where a replica's requests go.
struct ReplicaTarget {
  UpstreamPool* pool;
  int rank;  // >= 0: sent with X-data-parallel-rank (layout a); -1: none (layout b)
};

class ModelState {
 public:
  // REQUIRES: config validated (ValidateGatewayConfig).
  // One executor per gateway shard (thread).
  ModelState(const ModelConfig& config, const std::vector<boost::asio::any_io_executor>& shards);
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  const ModelConfig& config() const { return config_; }
  const std::string& name() const { return config_.name; }
  int num_replicas() const { return static_cast<int>(targets_.size()); }
  const ReplicaTarget& target(int replica) const { return targets_[replica]; }
  const std::vector<std::unique_ptr<UpstreamPool>>& pools() const { return pools_; }
  // The replicas a pool serves: all ranks of a data-parallel server, or the one replica.
  std::vector<int> ReplicasOf(size_t pool_index) const;
  std::string ReplicaUrl(int replica) const;

  // Runs f(router) under the model's lock and returns what f returns.
  template <typename F>
  auto WithRouter(F&& f) {
    std::lock_guard lock(mu_);
    return f(router_);
  }

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
  ModelConfig config_;
  std::mutex mu_;
  ModelRouter router_;
  std::vector<int64_t> scrape_errors_;
  std::vector<std::unique_ptr<UpstreamPool>> pools_;
  std::vector<ReplicaTarget> targets_;
};

}  // namespace warden
