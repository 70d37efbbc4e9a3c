#include "bench/conversation.h"

#include <fmt/format.h>

#include "util/json_escape.h"

namespace warden {

Conversation::Conversation(const WorkloadOptions& workload, const std::string& system,
                           uint64_t stage, uint64_t index, BenchApi api, std::string model,
                           bool session_ids, uint64_t variant)
    : script_(workload, stage, index, variant),
      workload_(workload),
      system_(system),
      api_(api),
      model_(std::move(model)),
      session_ids_(session_ids) {
  messages_.reserve(64 * 1024);
}

std::string Conversation::UserMessages() const {
  std::string user =
      fmt::format(R"({{"role":"user","content":{}}})", JsonString(script_.UserText(turn_)));
  if (system_reminders_ && api_ == BenchApi::kAnthropic) {
    fmt::format_to(
        std::back_inserter(user),
        R"(,{{"role":"system","content":"<total_tokens>{} tokens left</total_tokens>"}})",
        1000000 - 1000 * turn_);
  }
  return user;
}

BenchRequest Conversation::NextRequest() const {
  BenchRequest r;
  const std::string user = UserMessages();
  const std::string messages = messages_.empty() ? user : messages_ + "," + user;
  if (api_ == BenchApi::kAnthropic) {
    r.target = "/v1/messages?beta=true";
    const std::string user_id = fmt::format(
        R"({{"device_id":"{:064x}","account_uuid":"","session_id":"{}"}})", 0, script_.id());
    r.body = fmt::format(
        R"({{"model":{},"max_tokens":{},"stream":true,"system":[{{"type":"text","text":{}}},)"
        R"({{"type":"text","text":{},"cache_control":{{"type":"ephemeral"}}}}],"messages":[{}])",
        JsonString(model_), workload_.max_output_tokens, JsonString(script_.AttributionLine()),
        JsonString(system_), messages);
    if (session_ids_) r.body += fmt::format(R"(,"metadata":{{"user_id":{}}})", JsonString(user_id));
    r.body += '}';
    r.headers = {{"anthropic-version", "2023-06-01"}, {"x-app", "cli"}};
    if (session_ids_) r.headers.emplace_back("X-Claude-Code-Session-Id", script_.id());
  } else {
    r.target = "/v1/chat/completions";
    r.body = fmt::format(
        R"({{"model":{},"max_tokens":{},"stream":true,"stream_options":{{"include_usage":true}},)"
        R"("messages":[{{"role":"system","content":{}}},{}])",
        JsonString(model_), workload_.max_output_tokens, JsonString(system_), messages);
    if (session_ids_) {
      r.body += fmt::format(R"(,"user":{})", JsonString(script_.id()));
      r.headers = {{"X-Session-Id", script_.id()}};
    }
    r.body += '}';
  }
  return r;
}

void Conversation::RecordReply(const std::string& text) {
  if (!messages_.empty()) messages_ += ',';
  fmt::format_to(std::back_inserter(messages_), R"({},{{"role":"assistant","content":{}}})",
                 UserMessages(), JsonString(text));
  ++turn_;
}

}  // namespace warden
