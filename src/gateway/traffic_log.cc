#include "gateway/traffic_log.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/routing/prompt_hasher.h"
#include "core/workload/trace.h"

namespace warden {

std::unique_ptr<TrafficLog> TrafficLog::Open(const std::string& path, int block_tokens,
                                             double unix_ms_at_zero, std::string* error) {
  constexpr int kChunkTokens = static_cast<int>(kPromptChunkBytes / kPromptBytesPerToken);
  if (block_tokens < kChunkTokens || block_tokens % kChunkTokens != 0 || block_tokens > 1 << 20) {
    *error = fmt::format("traffic_log_block: must be a multiple of {} tokens, at most {}, got {}",
                         kChunkTokens, 1 << 20, block_tokens);
    return nullptr;
  }
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (!file) {
    *error = fmt::format("cannot open {} for appending: {}", path, std::strerror(errno));
    return nullptr;
  }
  return std::unique_ptr<TrafficLog>(new TrafficLog(file, block_tokens, unix_ms_at_zero));
}

TrafficLog::TrafficLog(std::FILE* file, int block_tokens, double unix_ms_at_zero)
    : file_(file),
      chunks_per_block_(static_cast<size_t>(block_tokens) * kPromptBytesPerToken /
                        kPromptChunkBytes),
      unix_ms_at_zero_(unix_ms_at_zero) {}

TrafficLog::~TrafficLog() {
  std::fclose(file_);
}

uint64_t TrafficLog::BlockId(uint64_t chain_hash) {
  if (block_ids_.size() >= kMostRemembered) block_ids_.clear();
  const auto [it, added] = block_ids_.emplace(chain_hash, next_id_);
  if (added) ++next_id_;
  return it->second;
}

void TrafficLog::Record(const Entry& e) {
  TraceRequest r;
  r.timestamp_ms = unix_ms_at_zero_ + e.arrived_s * 1000;
  r.input_length = std::max(1, e.input_tokens);
  r.output_length = std::max(0, e.output_tokens);
  const uint64_t conversation =
      e.conversation.empty() ? 0 : XXH3_64bits(e.conversation.data(), e.conversation.size());
  if (!e.conversation.empty()) r.session_id = fmt::format("{:016x}", conversation);
  std::string line;
  {
    std::lock_guard lock(mu_);
    // Each block is known by its last chunk's hash, which is chained to all before it (the last
    // block may be short).
    for (size_t end = chunks_per_block_; end - chunks_per_block_ < e.chunks.size();
         end += chunks_per_block_) {
      r.hash_ids.push_back(BlockId(e.chunks[std::min(end, e.chunks.size()) - 1]));
    }
    if (!e.conversation.empty()) {
      if (last_end_.size() >= kMostRemembered) last_end_.clear();
      auto [it, added] = last_end_.emplace(conversation, e.ended_s);
      // The delay from the previous answer's end, when it ended before this request came (a
      // request sent while another of its conversation ran has none).
      if (!added && it->second <= e.arrived_s) r.delay_ms = (e.arrived_s - it->second) * 1000;
      if (!added) it->second = std::max(it->second, e.ended_s);
    }
    line = TraceLine(r);
    const bool written =
        std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
    written ? ++lines_ : ++failed_;
  }
}

uint64_t TrafficLog::lines() const {
  std::lock_guard lock(mu_);
  return lines_;
}

uint64_t TrafficLog::failed_writes() const {
  std::lock_guard lock(mu_);
  return failed_;
}

}  // namespace warden
