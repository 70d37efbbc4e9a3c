#include "sim/api_response.h"

#include <fmt/format.h>

#include <optional>

#include "util/json_escape.h"

namespace warden {
namespace {

std::string_view OpenAiFinish(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "abort";
    case FinishReason::kNone:
      break;
  }
  return "stop";
}

std::string_view AnthropicStop(FinishReason r) {
  return r == FinishReason::kLength ? "max_tokens" : "end_turn";
}

// `created`: chat completions report the tokens written to the cache too; completions do not.
std::string OpenAiUsage(const ReplyUsage& u, bool details, bool created = false) {
  std::string s =
      fmt::format(R"({{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{})",
                  u.prompt_tokens, u.prompt_tokens + u.completion_tokens, u.completion_tokens);
  if (details && created) {
    s += fmt::format(R"(,"prompt_tokens_details":{{"cached_tokens":{},"created_cache_tokens":{}}})",
                     u.cached_tokens, u.created_cache_tokens);
  } else if (details) {
    s += fmt::format(R"(,"prompt_tokens_details":{{"cached_tokens":{}}})", u.cached_tokens);
  }
  s += '}';
  return s;
}

// vLLM's continuous usage: the usage so far, in a stream's every chunk (`enabled`), without the
// prompt-token details the final usage chunk carries.
std::string RunningUsage(bool enabled, int prompt_tokens, int completion_tokens) {
  if (!enabled) return {};
  return fmt::format(R"(,"usage":{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{}}})",
                     prompt_tokens, prompt_tokens + completion_tokens, completion_tokens);
}

class ChatFormatter : public ReplyFormatter {
 public:
  explicit ChatFormatter(ReplyIdentity id) : id_(std::move(id)), model_(JsonString(id_.model)) {}

  std::string StreamToken(std::string_view text, const ReplyUsage& so_far, bool last) override {
    std::string out;
    prompt_tokens_ = so_far.prompt_tokens;
    if (!started_) {
      started_ = true;
      out += Chunk(R"({"role":"assistant","content":""})", "null");
    }
    ++tokens_;
    if (last) {
      last_text_ = text;
    } else if (!text.empty()) {
      out += Chunk(Content(text), "null");
    }
    return out;
  }

  std::string StreamEnd(const ReplyUsage& u) override {
    std::string out;
    if (CallsTool(u)) {  // the whole call in one delta, as vLLM's parsers send a short one
      if (last_text_ && !last_text_->empty()) out += Chunk(Content(*last_text_), "null");
      out += Chunk(fmt::format(R"({{"tool_calls":[{{"index":0,{}}}]}})", ToolCall()), "null");
      last_text_.reset();
    }
    // The last token with the finish reason (an end of sequence adds "": vLLM's natural stop).
    out += Chunk(last_text_ ? Content(*last_text_) : "{}", JsonString(Finish(u)), true);
    if (id_.include_usage) {
      out += fmt::format(
          "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},"
          "\"choices\":[],\"usage\":{}}}\n\n",
          id_.id, id_.created, model_, OpenAiUsage(u, id_.prompt_token_details, true));
    }
    out += "data: [DONE]\n\n";
    return out;
  }

  std::string WholeBody(std::string_view text, const ReplyUsage& u) override {
    return fmt::format(
        "{{\"id\":\"{}\",\"object\":\"chat.completion\",\"created\":{},\"model\":{},\"choices\":[{{"
        "\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":{},\"tool_calls\":[{}]}},"
        "\"logprobs\":null,\"finish_reason\":\"{}\",\"stop_reason\":null}}],\"usage\":{}}}",
        id_.id, id_.created, model_, JsonString(text), CallsTool(u) ? "{" + ToolCall() + "}" : "",
        Finish(u), OpenAiUsage(u, id_.prompt_token_details, true));
  }

 private:
  // As MessagesFormatter's: the call asked for comes after the text, unless max_tokens cut it.
  bool CallsTool(const ReplyUsage& u) const {
    return !id_.tool_use_name.empty() && u.finish != FinishReason::kLength &&
           u.finish != FinishReason::kAborted;  // (cut short, or put to sleep meanwhile)
  }
  std::string_view Finish(const ReplyUsage& u) const {
    return CallsTool(u) ? "tool_calls" : OpenAiFinish(u.finish);
  }
  // The call's fields (without braces): vLLM's id prefix, the input as the arguments' JSON text.
  std::string ToolCall() const {
    std::string_view unique = id_.id;
    if (unique.starts_with("chatcmpl-")) unique.remove_prefix(9);
    return fmt::format(R"("id":"chatcmpl-tool-{}","type":"function","function":{{"name":{},)"
                       R"("arguments":{}}})",
                       unique, JsonString(id_.tool_use_name), JsonString(id_.tool_use_input));
  }

  static std::string Content(std::string_view text) {
    return fmt::format(R"({{"content":{}}})", JsonString(text));
  }

  // `final`: the choice's last chunk, which says its stop reason too.
  std::string Chunk(std::string_view delta, std::string_view finish, bool final = false) {
    return fmt::format(
        "data: {{\"id\":\"{}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},"
        "\"choices\":[{{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":{}{}}}]{}}}"
        "\n\n",
        id_.id, id_.created, model_, delta, finish, final ? ",\"stop_reason\":null" : "",
        RunningUsage(id_.continuous_usage, prompt_tokens_, tokens_));
  }

  ReplyIdentity id_;
  std::string model_;
  std::optional<std::string> last_text_;  // the last token's text, sent with the finish
  bool started_ = false;
  int prompt_tokens_ = 0;
  int tokens_ = 0;  // generated so far
};

class CompletionFormatter : public ReplyFormatter {
 public:
  explicit CompletionFormatter(ReplyIdentity id)
      : id_(std::move(id)), model_(JsonString(id_.model)) {}

  std::string StreamToken(std::string_view text, const ReplyUsage& so_far, bool last) override {
    prompt_tokens_ = so_far.prompt_tokens;
    ++tokens_;
    if (last) last_text_ = text;
    if (last || text.empty()) return {};
    return Chunk(JsonString(text), "null");
  }

  std::string StreamEnd(const ReplyUsage& u) override {
    // The last token with the finish reason, as vLLM sends it.
    std::string out = Chunk(JsonString(last_text_), JsonString(OpenAiFinish(u.finish)), true);
    if (id_.include_usage) {
      out += fmt::format(
          "data: {{\"id\":\"{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},"
          "\"choices\":[],\"usage\":{}}}\n\n",
          id_.id, id_.created, model_, OpenAiUsage(u, id_.prompt_token_details));
    }
    out += "data: [DONE]\n\n";
    return out;
  }

  std::string WholeBody(std::string_view text, const ReplyUsage& u) override {
    return fmt::format(
        "{{\"id\":\"{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},\"choices\":[{{"
        "\"index\":0,\"text\":{},\"logprobs\":null,\"finish_reason\":\"{}\",\"stop_reason\":null}}]"
        ","
        "\"usage\":{}}}",
        id_.id, id_.created, model_, JsonString(text), OpenAiFinish(u.finish),
        OpenAiUsage(u, id_.prompt_token_details));
  }

 private:
  std::string Chunk(std::string_view text, std::string_view finish, bool final = false) {
    return fmt::format(
        "data: {{\"id\":\"{}\",\"object\":\"text_completion\",\"created\":{},\"model\":{},"
        "\"choices\":[{{\"index\":0,\"text\":{},\"logprobs\":null,\"finish_reason\":{}{}}}]{}}}"
        "\n\n",
        id_.id, id_.created, model_, text, finish, final ? ",\"stop_reason\":null" : "",
        RunningUsage(id_.continuous_usage, prompt_tokens_, tokens_));
  }

  ReplyIdentity id_;
  std::string model_;
  std::string last_text_;  // the last token's text, sent with the finish
  int prompt_tokens_ = 0;
  int tokens_ = 0;  // generated so far
};

class MessagesFormatter : public ReplyFormatter {
 public:
  explicit MessagesFormatter(ReplyIdentity id)
      : id_(std::move(id)), model_(JsonString(id_.model)) {}

  std::string StreamToken(std::string_view text, const ReplyUsage& so_far, bool) override {
    std::string out;
    if (!started_) {
      started_ = true;
      // The prompt's usage as message_delta's will say it (as Anthropic's API and vLLM since
      // mid-2026 do), no output yet.
      ReplyUsage opening = so_far;
      opening.completion_tokens = 0;
      out += Event("message_start",
                   fmt::format(R"({{"type":"message_start","message":{{"id":"{}","type":"message",)"
                               R"("role":"assistant","content":[],"model":{},"stop_reason":null,)"
                               R"("stop_sequence":null,"usage":{}}}}})",
                               id_.id, model_, Usage(opening)));
    }
    if (text.empty()) return out;
    if (!block_open_) {
      block_open_ = true;
      out += Event(
          "content_block_start",
          R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})");
    }
    out += Event(
        "content_block_delta",
        fmt::format(
            R"({{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}})",
            JsonString(text)));
    return out;
  }

  std::string StreamEnd(const ReplyUsage& u) override {
    std::string out;
    if (block_open_)
      out += Event("content_block_stop", R"({"type":"content_block_stop","index":0})");
    if (CallsTool(u)) {
      const int index = block_open_ ? 1 : 0;
      out += Event("content_block_start",
                   fmt::format(R"({{"type":"content_block_start","index":{},"content_block":{{)"
                               R"("type":"tool_use","id":"{}","name":{},"input":{{}}}}}})",
                               index, ToolUseId(), JsonString(id_.tool_use_name)));
      out += Event("content_block_delta",
                   fmt::format(R"({{"type":"content_block_delta","index":{},"delta":{{)"
                               R"("type":"input_json_delta","partial_json":{}}}}})",
                               index, JsonString(id_.tool_use_input)));
      out += Event("content_block_stop",
                   fmt::format(R"({{"type":"content_block_stop","index":{}}})", index));
    }
    out += Event(
        "message_delta",
        fmt::format(
            R"({{"type":"message_delta","delta":{{"stop_reason":"{}","stop_sequence":null}},"usage":{}}})",
            Stop(u), Usage(u)));
    out += Event("message_stop", R"({"type":"message_stop"})");
    return out;
  }

  std::string WholeBody(std::string_view text, const ReplyUsage& u) override {
    std::string tool_use;
    if (CallsTool(u)) {
      tool_use = fmt::format(R"(,{{"type":"tool_use","id":"{}","name":{},"input":{}}})",
                             ToolUseId(), JsonString(id_.tool_use_name), id_.tool_use_input);
    }
    return fmt::format(
        R"({{"id":"{}","type":"message","role":"assistant","content":[{{"type":"text","text":{}}}{}],)"
        R"("model":{},"stop_reason":"{}","stop_sequence":null,"usage":{}}})",
        id_.id, JsonString(text), tool_use, model_, Stop(u), Usage(u));
  }

 private:
  // The tool call asked for comes after the text, unless the reply was cut at max_tokens first;
  // the reply then stops for it.
  bool CallsTool(const ReplyUsage& u) const {
    return !id_.tool_use_name.empty() && u.finish != FinishReason::kLength &&
           u.finish != FinishReason::kAborted;  // (cut short, or put to sleep meanwhile)
  }
  std::string_view Stop(const ReplyUsage& u) const {
    return CallsTool(u) ? "tool_use" : AnthropicStop(u.finish);
  }
  std::string ToolUseId() const { return "toolu_" + id_.id; }

  // Anthropic counts input_tokens without the tokens read from or written to the cache.
  std::string Usage(const ReplyUsage& u) const {
    if (!id_.prompt_token_details) {
      return fmt::format(R"({{"input_tokens":{},"output_tokens":{}}})", u.prompt_tokens,
                         u.completion_tokens);
    }
    return fmt::format(R"({{"input_tokens":{},"output_tokens":{},"cache_creation_input_tokens":{},)"
                       R"("cache_read_input_tokens":{}}})",
                       u.prompt_tokens - u.cached_tokens - u.created_cache_tokens,
                       u.completion_tokens, u.created_cache_tokens, u.cached_tokens);
  }

  static std::string Event(std::string_view name, std::string_view data) {
    return fmt::format("event: {}\ndata: {}\n\n", name, data);
  }

  ReplyIdentity id_;
  std::string model_;
  bool started_ = false;
  bool block_open_ = false;
};

// OpenAI's Responses API: one message item with one output_text part; streamed as typed events,
// the usage in the final response.completed.
class ResponsesFormatter : public ReplyFormatter {
 public:
  explicit ResponsesFormatter(ReplyIdentity id)
      : id_(std::move(id)), model_(JsonString(id_.model)), item_id_("msg_" + id_.id) {}

  std::string StreamToken(std::string_view text, const ReplyUsage&, bool) override {
    std::string out;
    if (!started_) {
      started_ = true;
      out +=
          Event("response.created",
                fmt::format(R"({{"type":"response.created","sequence_number":{},"response":{}}})",
                            sequence_++, Response("in_progress", "[]", "null")));
      out += Event(
          "response.in_progress",
          fmt::format(R"({{"type":"response.in_progress","sequence_number":{},"response":{}}})",
                      sequence_++, Response("in_progress", "[]", "null")));
      out += Event("response.output_item.added",
                   fmt::format(R"({{"type":"response.output_item.added","sequence_number":{},)"
                               R"("output_index":0,"item":{}}})",
                               sequence_++, Item("in_progress", "[]")));
      out += Event("response.content_part.added",
                   fmt::format(R"({{"type":"response.content_part.added","sequence_number":{},)"
                               R"("item_id":"{}","output_index":0,"content_index":0,"part":{}}})",
                               sequence_++, item_id_, Part("")));
    }
    if (text.empty()) return out;
    text_.append(text);
    out += Event("response.output_text.delta",
                 fmt::format(R"({{"type":"response.output_text.delta","sequence_number":{},)"
                             R"("item_id":"{}","output_index":0,"content_index":0,"delta":{}}})",
                             sequence_++, item_id_, JsonString(text)));
    return out;
  }

  std::string StreamEnd(const ReplyUsage& u) override {
    std::string out;
    out += Event("response.output_text.done",
                 fmt::format(R"({{"type":"response.output_text.done","sequence_number":{},)"
                             R"("item_id":"{}","output_index":0,"content_index":0,"text":{}}})",
                             sequence_++, item_id_, JsonString(text_)));
    out += Event("response.content_part.done",
                 fmt::format(R"({{"type":"response.content_part.done","sequence_number":{},)"
                             R"("item_id":"{}","output_index":0,"content_index":0,"part":{}}})",
                             sequence_++, item_id_, Part(text_)));
    const std::string item = Item(Status(u), "[" + Part(text_) + "]");
    out += Event("response.output_item.done",
                 fmt::format(R"({{"type":"response.output_item.done","sequence_number":{},)"
                             R"("output_index":0,"item":{}}})",
                             sequence_++, item));
    const std::string_view status = Status(u);
    const std::string event = fmt::format("response.{}", status);
    out += Event(event, fmt::format(R"({{"type":"{}","sequence_number":{},"response":{}}})", event,
                                    sequence_++, Response(status, "[" + item + "]", Usage(u))));
    return out;
  }

  std::string WholeBody(std::string_view text, const ReplyUsage& u) override {
    const std::string item = Item(Status(u), "[" + Part(text) + "]");
    return Response(Status(u), "[" + item + "]", Usage(u));
  }

 private:
  static std::string_view Status(const ReplyUsage& u) {
    return u.finish == FinishReason::kLength ? "incomplete" : "completed";
  }
  std::string Response(std::string_view status, std::string_view output,
                       std::string_view usage) const {
    const std::string_view details =
        status == "incomplete" ? R"({"reason":"max_output_tokens"})" : "null";
    return fmt::format(
        R"({{"id":"{}","object":"response","created_at":{},"model":{},"status":"{}",)"
        R"("incomplete_details":{},"output":{},"usage":{}}})",
        id_.id, id_.created, model_, status, details, output, usage);
  }
  std::string Item(std::string_view status, std::string_view content) const {
    return fmt::format(
        R"({{"id":"{}","type":"message","role":"assistant","status":"{}","content":{}}})", item_id_,
        status, content);
  }
  static std::string Part(std::string_view text) {
    return fmt::format(R"({{"type":"output_text","text":{},"annotations":[]}})", JsonString(text));
  }
  std::string Usage(const ReplyUsage& u) const {
    return fmt::format(
        R"({{"input_tokens":{},"input_tokens_details":{{"cached_tokens":{}}},"output_tokens":{},)"
        R"("output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}})",
        u.prompt_tokens, id_.prompt_token_details ? u.cached_tokens : 0, u.completion_tokens,
        u.prompt_tokens + u.completion_tokens);
  }
  static std::string Event(std::string_view name, std::string_view data) {
    return fmt::format("event: {}\ndata: {}\n\n", name, data);
  }

  ReplyIdentity id_;
  std::string model_;
  std::string item_id_;
  std::string text_;
  int sequence_ = 0;
  bool started_ = false;
};

}  // namespace

std::unique_ptr<ReplyFormatter> MakeReplyFormatter(SimApi api, ReplyIdentity identity) {
  switch (api) {
    case SimApi::kChatCompletions:
      return std::make_unique<ChatFormatter>(std::move(identity));
    case SimApi::kCompletions:
      return std::make_unique<CompletionFormatter>(std::move(identity));
    case SimApi::kMessages:
    case SimApi::kCountTokens:
      return std::make_unique<MessagesFormatter>(std::move(identity));
    case SimApi::kResponses:
      return std::make_unique<ResponsesFormatter>(std::move(identity));
  }
  return nullptr;
}

std::string OpenAiErrorBody(const SimError& e) {
  return fmt::format(R"({{"error":{{"message":{},"type":{},"param":{},"code":{}}}}})",
                     JsonString(e.message), JsonString(e.type),
                     e.param.empty() ? "null" : JsonString(e.param), e.status);
}

std::string AnthropicErrorBody(const SimError& e) {
  return fmt::format(R"({{"type":"error","error":{{"type":{},"message":{}}}}})", JsonString(e.type),
                     JsonString(e.message));
}

}  // namespace warden
