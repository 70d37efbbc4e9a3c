#include "core/protocol/reply_content.h"

#include <algorithm>
#include <new>

namespace warden {

using simdjson::SUCCESS;
namespace od = simdjson::ondemand;

namespace {

constexpr uint64_t kReplySeed = 0x5265706c79;  // "Reply"
constexpr size_t kMaxSpaceRuns = 1 << 16;

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

}  // namespace

void AddToolCallId(std::string_view id, std::vector<std::string>* ids) {
  if (!id.empty() && ids->size() < kMaxKeyedToolCalls &&
      std::find(ids->begin(), ids->end(), id) == ids->end())
    ids->emplace_back(id);
}

ReplyText::ReplyText(std::string* keep) : keep_(keep), state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_64bits_reset_withSeed(state_, kReplySeed + 1);
}

ReplyText::~ReplyText() {
  XXH3_freeState(state_);
}

void ReplyText::append(std::string_view piece) {
  if (keep_) keep_->append(piece);
  if (!started_) {
    while (!piece.empty() && IsSpace(piece.front())) piece.remove_prefix(1);
    if (piece.empty()) return;
    started_ = true;
  }
  size_t text_end = piece.size();
  while (text_end > 0 && IsSpace(piece[text_end - 1])) --text_end;
  if (text_end > 0) HashSpaces();
  XXH3_64bits_update(state_, piece.data(), text_end);
  for (const char c : piece.substr(text_end)) {
    if (!spaces_.empty() && spaces_.back().first == c) {
      ++spaces_.back().second;
    } else {
      if (spaces_.size() == kMaxSpaceRuns) HashSpaces();
      spaces_.emplace_back(c, 1);
    }
  }
}

void ReplyText::HashSpaces() {
  std::string run;
  for (const auto& [c, n] : spaces_) {
    run.assign(std::min<size_t>(n, 4096), c);
    for (size_t left = n; left > 0; left -= std::min(left, run.size()))
      XXH3_64bits_update(state_, run.data(), std::min(left, run.size()));
  }
  spaces_.clear();
}

uint64_t ReplyText::Hash(std::span<const std::string> tool_call_ids) const {
  if (!started_ && tool_call_ids.empty()) return 0;
  uint64_t value = XXH3_64bits_digest(state_);
  for (const std::string& id :
       tool_call_ids.first(std::min(tool_call_ids.size(), kMaxKeyedToolCalls)))
    value = XXH3_64bits_withSeed(id.data(), id.size(), value + 1);
  return value ? value : 1;
}

namespace {

template <typename Text>
bool ReadBlocks(od::array blocks, Text* text, std::vector<std::string>* ids) {
  for (auto element : blocks) {
    od::object block;
    if (element.get_object().get(block) != SUCCESS) continue;
    std::string_view type, block_text, id;
    for (auto field : block) {
      std::string_view key;
      if (field.unescaped_key().get(key) != SUCCESS) return false;
      std::string_view* wanted = key == "type"   ? &type
                                 : key == "text" ? &block_text
                                 : key == "id"   ? &id
                                                 : nullptr;
      if (wanted && field.value().get_string().get(*wanted) != SUCCESS) *wanted = {};
    }
    if (type == "text" || type == "output_text") text->append(block_text);
    if (type == "tool_use" && ids) AddToolCallId(id, ids);
  }
  return true;
}

}  // namespace

bool ReadContentBlocks(od::array blocks, std::string* text, std::vector<std::string>* ids) {
  return ReadBlocks(blocks, text, ids);
}

bool ReadContentBlocks(od::array blocks, ReplyText* text, std::vector<std::string>* ids) {
  return ReadBlocks(blocks, text, ids);
}

void ReadToolCallIds(od::array calls, std::vector<std::string>* ids) {
  for (auto element : calls) {
    od::object call;
    std::string_view id;
    if (element.get_object().get(call) == SUCCESS &&
        call.find_field_unordered("id").get_string().get(id) == SUCCESS)
      AddToolCallId(id, ids);
  }
}

}  // namespace warden
