#include "gateway/traffic_log.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/routing/prompt_hasher.h"
#include "core/workload/trace.h"

namespace warden {
namespace {

constexpr int kChunkTokens = static_cast<int>(kPromptChunkBytes / kPromptBytesPerToken);
// A prompt long enough that the chat template's tokens do not skew its bytes a token.
constexpr int kLearnFromTokens = 1000;
constexpr size_t kWriteAt = 32 << 10;  // bytes of lines kept before they are written

uint64_t RandomSalt() {
  uint64_t salt = 0;
  if (getrandom(&salt, sizeof salt, 0) != static_cast<ssize_t>(sizeof salt))
    salt = std::hash<const void*>()(&salt) ^ 0x9e3779b97f4a7c15ULL;
  return salt;
}

}  // namespace

std::unique_ptr<TrafficLog> TrafficLog::Open(const std::string& path, int block_tokens,
                                             double unix_ms_at_zero, std::string* error) {
  if (block_tokens < kChunkTokens || block_tokens % kChunkTokens != 0 || block_tokens > 1 << 20) {
    *error = fmt::format("traffic_log_block: must be a multiple of {} tokens, at most {}, got {}",
                         kChunkTokens, 1 << 20, block_tokens);
    return nullptr;
  }
  const int fd = OpenToAppend(path, error);
  if (fd < 0) return nullptr;
  return std::unique_ptr<TrafficLog>(new TrafficLog(fd, block_tokens, unix_ms_at_zero));
}

bool TrafficLog::CouldOpen(const std::string& path, std::string* error) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    *error = fmt::format("cannot open {} for appending: {}", path, std::strerror(EISDIR));
    return false;
  }
  if (::access(path.c_str(), W_OK) == 0) return true;
  if (errno == ENOENT) {  // to be made: its folder must take it
    const size_t slash = path.rfind('/');
    const std::string folder =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    if (::access(folder.c_str(), W_OK | X_OK) == 0) return true;
  }
  *error = fmt::format("cannot open {} for appending: {}", path, std::strerror(errno));
  return false;
}

int TrafficLog::OpenToAppend(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) *error = fmt::format("cannot open {} for appending: {}", path, std::strerror(errno));
  return fd;
}

bool TrafficLog::Reopen(const std::string& path, std::string* error) {
  FlushIfDue(-1);
  const int fd = OpenToAppend(path, error);
  if (fd < 0) return false;
  std::lock_guard write_lock(write_mu_);
  ::close(std::exchange(fd_, fd));
  return true;
}

TrafficLog::TrafficLog(int fd, int block_tokens, double unix_ms_at_zero)
    : fd_(fd),
      block_tokens_(block_tokens),
      unix_ms_at_zero_(unix_ms_at_zero),
      salt_(RandomSalt()),
      next_id_(static_cast<uint64_t>(std::max(0.0, unix_ms_at_zero)) * 1000) {}

TrafficLog::~TrafficLog() {
  FlushIfDue(-1);
  ::close(fd_);
}

TrafficLog::Turn::Turn(Turn&& other) noexcept
    : log_(std::exchange(other.log_, nullptr)),
      conversation_(other.conversation_),
      arrived_s_(other.arrived_s_),
      delay_ms_(other.delay_ms_),
      side_(other.side_),
      answered_(other.answered_) {}

TrafficLog::Turn::~Turn() {
  if (!log_ || answered_) return;
  std::lock_guard lock(log_->mu_);
  log_->End(*this, -1);
}

void TrafficLog::Turn::MarkSide() {
  if (!log_ || side_ || answered_) return;
  std::lock_guard lock(log_->mu_);
  log_->End(*this, -1);
  side_ = true;
}

void TrafficLog::Turn::Answered(double now_s) {
  if (!log_ || answered_) return;
  std::lock_guard lock(log_->mu_);
  log_->End(*this, now_s);
  answered_ = true;
}

TrafficLog::Turn TrafficLog::Begin(std::string_view conversation, double now_s) {
  if (conversation.empty()) return Turn(this, 0, now_s, -1);
  // (0 stands for none: a key hashing to it shares that.)
  const uint64_t id =
      std::max<uint64_t>(1, XXH3_64bits_withSeed(conversation.data(), conversation.size(), salt_));
  std::lock_guard lock(mu_);
  if (conversations_.size() >= kMostConversations && !conversations_.contains(id))
    conversations_.clear();
  Conversation& c = conversations_[id];
  // The time since its last answer, when nothing of it was under way.
  const double delay_ms =
      c.in_flight == 0 && c.last_end >= 0 ? std::max(0.0, now_s - c.last_end) * 1000 : -1;
  ++c.in_flight;
  return Turn(this, id, now_s, delay_ms);
}

void TrafficLog::End(Turn& turn, double ended_s) {
  if (turn.conversation_ == 0 || turn.side_) return;  // (a side request ended as it was routed)
  const auto it = conversations_.find(turn.conversation_);
  if (it == conversations_.end()) return;  // forgotten meanwhile
  Conversation& c = it->second;
  if (c.in_flight > 0) --c.in_flight;
  if (ended_s >= 0) c.last_end = std::max(c.last_end, ended_s);
}

uint64_t TrafficLog::BlockId(uint64_t chain_hash) {
  if (block_ids_.size() >= kMostBlocks) block_ids_.clear();
  const auto [it, added] = block_ids_.emplace(chain_hash, next_id_);
  if (added) ++next_id_;
  return it->second;
}

size_t TrafficLog::ChunksPerBlock(std::string_view model, const Entry& e) {
  if (const auto it = chunks_per_block_.find(std::string(model)); it != chunks_per_block_.end())
    return it->second;
  const size_t reckoned = static_cast<size_t>(block_tokens_ / kChunkTokens);
  // Learnt from a whole prompt the replica counted (a turn on a stored response carries only its
  // new part's bytes).
  if (e.input_tokens < kLearnFromTokens || e.prompt_bytes == 0 || !e.input_counted ||
      e.continues_stored)
    return reckoned;
  const double bytes_per_token =
      std::clamp(static_cast<double>(e.prompt_bytes) / e.input_tokens, 1.0, 16.0);
  const auto chunks = static_cast<size_t>(
      std::max(1.0, std::round(block_tokens_ * bytes_per_token / kPromptChunkBytes)));
  chunks_per_block_.emplace(std::string(model), chunks);
  return chunks;
}

void TrafficLog::Record(Turn& turn, const Entry& e) {
  if (turn.log_ != this) return;  // recorded already
  turn.log_ = nullptr;
  TraceRequest r;
  r.timestamp_ms = unix_ms_at_zero_ + turn.arrived_s_ * 1000;
  r.input_length = std::max(1, e.input_tokens);
  r.output_length = std::max(0, e.output_tokens);
  if (turn.conversation_ != 0 && !turn.side_) {
    r.session_id = fmt::format("{:016x}", turn.conversation_);
    r.delay_ms = turn.delay_ms_;
  }
  const size_t most =
      (static_cast<size_t>(r.input_length) + static_cast<size_t>(block_tokens_) - 1) /
      static_cast<size_t>(block_tokens_);
  bool due = false;
  {
    std::lock_guard lock(mu_);
    Conversation* c = nullptr;
    if (const auto it = conversations_.find(turn.conversation_);
        it != conversations_.end() && !turn.side_)
      c = &it->second;
    // A turn on a stored response carries only its new part: its blocks go on from its
    // conversation's, and are known by that place too (the same new text elsewhere is another
    // prefix).
    uint64_t place = 0;
    if (e.continues_stored && c) {
      r.hash_ids.assign(c->last_ids.begin(),
                        c->last_ids.begin() + std::min(c->last_ids.size(), most));
      if (!r.hash_ids.empty()) place = (r.hash_ids.back() + 1) * 0x9e3779b97f4a7c15ULL;
    }
    // Each block is known by its last chunk's hash, which is chained to all before it (the last
    // block may be short); no more blocks than the prompt's tokens fill.
    const size_t per_block = ChunksPerBlock(e.model, e);
    for (size_t end = per_block; end - per_block < e.chunks.size() && r.hash_ids.size() < most;
         end += per_block) {
      r.hash_ids.push_back(BlockId(e.chunks[std::min(end, e.chunks.size()) - 1] ^ place));
    }
    if (c) c->last_ids = r.hash_ids;
    if (!turn.answered_) End(turn, e.ended_s);
    pending_ += TraceLine(r);
    ++pending_lines_;
    due = pending_.size() >= kWriteAt;
  }
  if (due) FlushIfDue(-1);
}

void TrafficLog::FlushIfDue(double now_s) {
  std::lock_guard write_lock(write_mu_);
  std::string batch;
  uint64_t batch_lines = 0;
  {
    std::lock_guard lock(mu_);
    if (now_s >= 0 && now_s - last_flush_s_ < 1) return;
    if (now_s >= 0) last_flush_s_ = now_s;
    batch.swap(pending_);
    batch_lines = std::exchange(pending_lines_, 0);
  }
  if (batch.empty()) return;
  std::string_view rest = batch;
  int write_error = 0;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd_, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      write_error = n < 0 ? errno : ENOSPC;
      break;
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  // A full disk, say: what did not go is lost, and a line cut short is ended, so that the lines
  // written after it are read apart from it.
  const auto lost = static_cast<uint64_t>(std::count(rest.begin(), rest.end(), '\n'));
  if (!rest.empty() && rest.size() < batch.size() && batch[batch.size() - rest.size() - 1] != '\n')
      [[maybe_unused]]
    const ssize_t ended = ::write(fd_, "\n", 1);
  std::lock_guard lock(mu_);
  lines_ += batch_lines - lost;
  failed_ += lost;
  const bool failing = !rest.empty();
  if (failing && !failing_) {
    spdlog::warn(
        "traffic log: cannot write: {}; {} line(s) lost (counted in "
        "warden_traffic_log_lines_total{{written=\"false\"}}), and so on until it can",
        std::strerror(write_error), lost);
  } else if (!failing && failing_) {
    spdlog::info("traffic log: written again");
  }
  failing_ = failing;
}

bool TrafficLog::failing() const {
  std::lock_guard lock(mu_);
  return failing_;
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
