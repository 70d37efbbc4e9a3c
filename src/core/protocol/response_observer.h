// Reads a proxied response on the side, without holding it up: when the first generated token goes
// by, and the usage the engine reports at the end (prompt tokens, and how many of them were read
// from the prefix cache). Understands OpenAI (chat, completions, responses) and Anthropic bodies,
// streamed (SSE) or whole.
// Pure: no I/O. Not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

class ReplyText;

struct ObservedUsage {
  int prompt_tokens = -1;  // -1: not reported
  int cached_tokens = -1;  // -1: not reported
  int output_tokens = -1;  // -1: not reported
  // The figures are an Anthropic message_start's, or a running count on an OpenAI chunk with
  // choices (vLLM's continuous usage stats): the prompt's size, with the share read from the
  // cache still to come at the stream's end (message_delta, or the last chunk, whose choices are
  // empty). A stream cut before that tells no split, unless its start gave it (an Anthropic
  // message_start with cache_read_input_tokens, as Anthropic's API and recent vLLM send it).
  bool preliminary = false;
  bool anthropic = false;  // read from Anthropic's usage (input_tokens, cache_read_input_tokens)
};

class ResponseObserver {
 public:
  // `sse`: the body is a server-sent event stream (lines up to max_json_bytes are read);
  // otherwise one JSON document, kept (up to max_json_bytes) until Finish.
  explicit ResponseObserver(bool sse, size_t max_json_bytes = 4 << 20)
      : sse_(sse), max_json_bytes_(max_json_bytes) {}

  // Feeds the next piece of the body. Returns true if the first generated token arrived in it.
  bool Feed(std::string_view data);
  // The body has ended.
  void Finish();

  // Also collect the generated text into `sink`, from a stream's deltas or a whole body's content,
  // and the ids of the tool calls made into `tool_call_ids` if not null (every event is then
  // parsed, not only the first ones: for load-test clients, and for the gateway only on the first
  // turns of conversations keyed by their opening).
  void CaptureText(ReplyText* sink, std::vector<std::string>* tool_call_ids = nullptr) {
    text_ = sink;
    tool_call_ids_ = tool_call_ids;
  }

  bool saw_token() const { return saw_token_; }
  // Events that carried generated output (one per token with vLLM's default streaming).
  int token_events() const { return token_events_; }
  const ObservedUsage& usage() const { return usage_; }
  // Whether a stream said it ended: OpenAI's [DONE], Anthropic's message_stop (in vLLM's spelling,
  // its type first), the Responses API's response.completed or response.incomplete, or an error
  // event. Always: whether a stream carried an error event (an engine's error inside a 200
  // stream: Anthropic's `error` event, OpenAI's {"error": ...}, the Responses API's
  // response.failed; after the first token, one that starts so, or that type anywhere in an
  // event with a usage).
  bool stream_ended() const { return stream_ended_; }
  bool error_event() const { return error_event_; }
  // The id of a Responses API response (from response.created, or the whole body); else empty.
  const std::string& response_id() const { return response_id_; }

 private:
  // Adds to the SSE line being received; a line longer than max_json_bytes is skipped whole.
  void AppendToLine(std::string_view data);
  void OnSseLine(std::string_view line);
  void OnSseData(std::string_view data);
  // Whether an event past the first token carries generated output, by its API's marker.
  bool IsTokenEvent(std::string_view data);
  void ParseJson(std::string_view json, bool look_for_token);
  // A whole body's usage (or, over max_json_bytes, the kept tail's) from its last "usage" key,
  // without a parse of the rest. False if it cannot be told that the root holds that key.
  bool ReadLastUsage();

  // The tail of a whole body over max_json_bytes that is kept for its usage.
  static constexpr size_t kKeptTail = 64 << 10;

  const bool sse_;
  const size_t max_json_bytes_;
  std::string pending_;  // an incomplete SSE line, or the JSON body so far
  bool saw_token_ = false;
  bool token_in_this_feed_ = false;
  bool json_too_large_ = false;
  bool line_too_long_ = false;  // skipping the rest of an SSE line
  bool skip_lf_ = false;        // the last line ended in CR: a LF next is part of its end
  int token_events_ = 0;
  int token_marker_ = -1;  // the API marker IsTokenEvent found last (-1: none yet)
  bool stream_ended_ = false;
  bool error_event_ = false;
  ReplyText* text_ = nullptr;
  std::vector<std::string>* tool_call_ids_ = nullptr;
  ObservedUsage usage_;
  std::string response_id_;
};

}  // namespace warden
