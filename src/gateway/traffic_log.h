// The gateway's traffic as a trace (core/workload/trace.h): one line per generation request a
// replica answered whole, with its conversation (a hash of its key), when it came, how long after
// its conversation's previous answer, its prompt's and reply's sizes and its prompt's block ids,
// so that `warden lab --trace` can replay it under every policy. No text: the ids are numbers the
// gateway gives each distinct block of prompt (by the chained hashes of prompt_hasher.h, 4 bytes
// of JSON to a token), in the order it first sees them, as Mooncake's traces number theirs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

namespace warden {

class TrafficLog {
 public:
  // `block_tokens`: tokens per id, a multiple of 16 (prompt_hasher.h's chunk). `unix_ms_at_zero`:
  // the Unix time, in ms, of the clock the entries' times are on at 0.
  static std::unique_ptr<TrafficLog> Open(const std::string& path, int block_tokens,
                                          double unix_ms_at_zero, std::string* error);
  ~TrafficLog();
  TrafficLog(const TrafficLog&) = delete;
  TrafficLog& operator=(const TrafficLog&) = delete;

  struct Entry {
    double arrived_s = 0;              // when the request came in
    double ended_s = 0;                // when its answer ended
    std::string_view conversation;     // its conversation's key; empty: none
    std::span<const uint64_t> chunks;  // its prompt's chunk hashes (prompt_hasher.h)
    int input_tokens = 0;
    int output_tokens = 0;
  };
  // Appends the entry's line. Safe from any thread. A failed write is counted, not raised.
  void Record(const Entry& entry);
  uint64_t lines() const;
  uint64_t failed_writes() const;

 private:
  TrafficLog(std::FILE* file, int block_tokens, double unix_ms_at_zero);
  uint64_t BlockId(uint64_t chain_hash);

  // Past this many remembered blocks (or conversations) the memory starts afresh: later prompts
  // then share no ids with earlier ones (their ids stay distinct).
  static constexpr size_t kMostRemembered = 4'000'000;

  std::FILE* const file_;
  const size_t chunks_per_block_;
  const double unix_ms_at_zero_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint64_t> block_ids_;
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, double> last_end_;  // per conversation, its latest answer's end
  uint64_t lines_ = 0;
  uint64_t failed_ = 0;
};

}  // namespace warden
