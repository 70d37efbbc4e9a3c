// The gateway's traffic as a trace (core/workload/trace.h): one line per generation request a
// replica answered whole, or streamed until its client stopped it (with the tokens that came
// then), with its conversation (a salted hash of its key), when it came, how long
// after its conversation's previous answer, its prompt's and reply's sizes and its prompt's block
// ids, so that `warden lab --trace` can replay it under every policy. No text: the ids are numbers
// the gateway gives each distinct block of prompt (by the chained hashes of prompt_hasher.h), in
// the order it first sees them, as Mooncake's traces number theirs.
//
// A block is `block_tokens` tokens: as many bytes of the request's JSON as that many of its model's
// tokens take, learnt from the first answer of 1,000 prompt tokens or more (4 bytes a token until
// then), so that a line's ids cover its input_length as Mooncake's do. Ids are numbered from the
// log's opening time (in ms, times 1,000), so that a restart or a successor appending to the same
// file gives none of its blocks an id an earlier process gave another; its salt differs too, so a
// conversation that goes on across them is two sessions in the trace. Lines are kept and written
// by FlushIfDue (once a second) and when the log closes, whole lines to a write, outside the lock
// that requests take.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace warden {

class TrafficLog {
 public:
  // `block_tokens`: tokens per id, a multiple of 16 (prompt_hasher.h's chunk). `unix_ms_at_zero`:
  // the Unix time, in ms, of the clock the entries' times are on at 0.
  static std::unique_ptr<TrafficLog> Open(const std::string& path, int block_tokens,
                                          double unix_ms_at_zero, std::string* error);
  // Whether Open could append to `path`, without creating it (`warden serve --check`).
  static bool CouldOpen(const std::string& path, std::string* error);
  ~TrafficLog();
  TrafficLog(const TrafficLog&) = delete;
  TrafficLog& operator=(const TrafficLog&) = delete;

  // A request as it comes: whether its conversation had a request in flight then decides its
  // line's delay. Ends (unrecorded) when destroyed; the log must outlive it.
  class Turn {
   public:
    Turn(Turn&& other) noexcept;
    Turn& operator=(Turn&&) = delete;
    ~Turn();
    // Routed as a side request under its conversation's key (a title, a summary): it no longer
    // counts as its conversation's turn under way, and its line carries no session.
    void MarkSide();
    // Its answer is whole, its last bytes about to go to the client: the conversation's next
    // turn may come at once, and its delay counts from `now_s`. Record keeps the line later.
    void Answered(double now_s);

   private:
    friend class TrafficLog;
    Turn(TrafficLog* log, uint64_t conversation, double arrived_s, double delay_ms)
        : log_(log), conversation_(conversation), arrived_s_(arrived_s), delay_ms_(delay_ms) {}
    TrafficLog* log_;
    uint64_t conversation_;  // 0: none
    double arrived_s_;
    double delay_ms_;  // < 0: none
    bool side_ = false;
    bool answered_ = false;  // (ended in its conversation)
  };
  // `conversation`: its key; empty: none. Safe from any thread.
  Turn Begin(std::string_view conversation, double now_s);

  struct Entry {
    double ended_s = 0;                // when its answer ended
    std::string_view model;            // the served model (its tokenizer's bytes a token)
    std::span<const uint64_t> chunks;  // its prompt's chunk hashes (prompt_hasher.h)
    size_t prompt_bytes = 0;           // the JSON they were taken from
    int input_tokens = 0;
    bool input_counted = false;  // input_tokens is the replica's count, not a guess
    int output_tokens = 0;
    // It carries only what follows a stored response (previous_response_id): its ids go on from
    // its conversation's last request's.
    bool continues_stored = false;
  };
  // Keeps the turn's line (once; the turn is then ended). Safe from any thread.
  void Record(Turn& turn, const Entry& entry);
  // Writes the lines kept, if a second has passed since the last write (`now_s` < 0: at once).
  // A failed write is counted, not raised. Safe from any thread.
  void FlushIfDue(double now_s);
  // Writes what is kept, then appends to the file now at `path` (a log rotation moved the old
  // one away). Returns false with an error, and keeps the old file, when it cannot be opened.
  bool Reopen(const std::string& path, std::string* error);
  uint64_t lines() const;  // written to the file
  uint64_t failed_writes() const;
  // Whether the latest batch failed to be written whole (a full disk, say): the log says so at the
  // first failure of a run of them, and again once a batch goes whole.
  bool failing() const;

 private:
  TrafficLog(int fd, int block_tokens, double unix_ms_at_zero);
  static int OpenToAppend(const std::string& path, std::string* error);
  uint64_t BlockId(uint64_t chain_hash);
  size_t ChunksPerBlock(std::string_view model, const Entry& e);
  void End(Turn& turn, double ended_s);  // REQUIRES: mu_ held

  // Past this many remembered blocks (or conversations) the memory starts afresh: later prompts
  // then share no ids with earlier ones (their ids stay distinct).
  static constexpr size_t kMostBlocks = 4'000'000;
  static constexpr size_t kMostConversations = 100'000;

  struct Conversation {
    int in_flight = 0;
    double last_end = -1;            // its latest answer's end; < 0: none yet
    std::vector<uint64_t> last_ids;  // its latest line's
  };

  int fd_;  // opened to append; changed under write_mu_
  const int block_tokens_;
  const double unix_ms_at_zero_;
  const uint64_t salt_;  // of the conversations' hashes: a key cannot be confirmed by guessing
  mutable std::mutex mu_;
  std::mutex write_mu_;  // one batch written at a time, in the order kept
  std::unordered_map<uint64_t, uint64_t> block_ids_;
  uint64_t next_id_;
  std::unordered_map<uint64_t, Conversation> conversations_;
  std::unordered_map<std::string, size_t> chunks_per_block_;  // by model, once learnt
  double last_flush_s_ = 0;
  std::string pending_;  // lines not yet written
  uint64_t pending_lines_ = 0;
  uint64_t lines_ = 0;
  uint64_t failed_ = 0;
  bool failing_ = false;  // guarded by mu_
};

}  // namespace warden
