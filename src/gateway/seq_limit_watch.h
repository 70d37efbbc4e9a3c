// Tells from a replica's scraped counts that vLLM's --max-num-seqs there differs from the
// model's configured max_num_seqs, which vLLM's /metrics does not publish. The overflow limit
// (auto: a quarter of max_num_seqs) depends on it: with the default 256 against replicas that run
// 32, conversations pile up in their home's queue and never overflow.
#pragma once

#include <optional>

namespace warden {

class SeqLimitWatch {
 public:
  // Scrapes in a row that must show the same capped count before it is believed.
  static constexpr int kScrapesToBelieve = 5;

  // What the counts say of the replica's real limit.
  struct Finding {
    int running;  // requests running there
    bool above;   // more than configured run there; else requests wait with that many
                  // running, though its KV cache has room (so vLLM's limit is `running`)
  };

  explicit SeqLimitWatch(int configured) : configured_(configured) {}
  int configured() const { return configured_; }

  // One scrape of the replica: its running and waiting counts and KV-cache use (0..1). A
  // finding once the counts show the limit differs (then each scrape that still shows it).
  std::optional<Finding> Observe(int running, int waiting, double kv_cache_usage);
  // The server may have restarted (a scrape failed): the counts seen before say nothing of it.
  void Forget() { *this = SeqLimitWatch(configured_); }

 private:
  int configured_;
  // The most requests seen running at once: vLLM's limit is not below it, so requests waiting
  // with fewer running wait for something else (the token budget a long prompt's prefill takes).
  int most_running_ = 0;
  int capped_at_ = -1;  // the running count of the streak, -1: none
  int streak_ = 0;
};

}  // namespace warden
