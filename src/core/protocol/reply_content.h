// What a reply is known by, read from either side of the exchange: the text of its content blocks
// and the ids of the tool calls it made. The gateway reads them from a response as it passes and,
// later, from the request that sends that reply back, and the two must agree.
// Pure: no I/O.
#pragma once

#include <simdjson.h>
#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace warden {

// A reply is known by its first tool calls' ids only: a reply that makes more is as rare as it
// is long, and the list is searched for each id added.
inline constexpr size_t kMaxKeyedToolCalls = 256;

// Adds a tool call's id to `ids`, once (some engines repeat it in every piece of a streamed call),
// and only while there are fewer than kMaxKeyedToolCalls.
void AddToolCallId(std::string_view id, std::vector<std::string>* ids);

// The text of a reply, read piece by piece: hashed as it comes, so that a reply of any length is
// known by its hash (ReplyHash, core/routing/session_key.h) without being held; also kept whole in
// `keep` if that is not null.
class ReplyText {
 public:
  explicit ReplyText(std::string* keep = nullptr);
  ~ReplyText();
  ReplyText(const ReplyText&) = delete;
  ReplyText& operator=(const ReplyText&) = delete;

  // Named as std::string's is: the readers of a reply's parts fill either.
  void append(std::string_view piece);
  // The text appended so far, with leading and trailing white space left out, and the tool calls'
  // ids (the first kMaxKeyedToolCalls), hashed; 0 when there is neither text nor id. The same
  // value for the same text whatever its pieces, unless it ends with white space that changes
  // character more than 65,536 times (then that is hashed too, not held).
  uint64_t Hash(std::span<const std::string> tool_call_ids) const;

 private:
  void HashSpaces();

  std::string* keep_;
  XXH3_state_t* state_;
  bool started_ = false;  // a character other than white space was appended
  // White space after the last other character, as runs of one character: hashed if text
  // follows.
  std::vector<std::pair<char, size_t>> spaces_;
};

// Appends the text of a content array's text blocks ({"type":"text"}, the Responses API's
// "output_text") to `text`, and the ids of its tool-use blocks to `ids` (if not null); other
// blocks (thinking, images, tool results) are left out. Returns false on a malformed block.
bool ReadContentBlocks(simdjson::ondemand::array blocks, std::string* text,
                       std::vector<std::string>* ids);
bool ReadContentBlocks(simdjson::ondemand::array blocks, ReplyText* text,
                       std::vector<std::string>* ids);

// The ids of OpenAI "tool_calls" into `ids`.
void ReadToolCallIds(simdjson::ondemand::array calls, std::vector<std::string>* ids);

}  // namespace warden
