#include "core/protocol/response_observer.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

#include "core/protocol/reply_content.h"

namespace warden {
namespace {

using simdjson::SUCCESS;
namespace od = simdjson::ondemand;

// Room for JSON documents kept from one parse to the next, per thread.
constexpr size_t kKeptRoom = 1 << 20;

// A thread's parsers, and a document copied with simdjson's padding past its end.
struct ParseRoom {
  od::parser parser;
  simdjson::dom::parser validator;  // see ParseJson
  std::string padded;
  simdjson::padded_string_view view;
};

// This thread's room, holding a padded copy of `json` (in a buffer kept from parse to parse).
ParseRoom& RoomFor(std::string_view json) {
  thread_local ParseRoom room;
  if (json.size() + simdjson::SIMDJSON_PADDING <= kKeptRoom) {
    // A large document's room is not kept for the small ones that follow.
    if (room.padded.capacity() > kKeptRoom) std::string().swap(room.padded);
    if (room.parser.capacity() > kKeptRoom) room.parser = od::parser{};
    if (room.validator.capacity() > kKeptRoom) room.validator = simdjson::dom::parser{};
  }
  room.padded.assign(json);
  room.padded.reserve(json.size() + simdjson::SIMDJSON_PADDING);
  room.view =
      simdjson::padded_string_view(room.padded.data(), room.padded.size(), room.padded.capacity());
  return room;
}

// A count the counters can take: not negative, and small enough that the three an Anthropic
// usage adds up stay within an int (a larger one is not believed).
bool IsTokenCount(int64_t n) {
  return n >= 0 && n <= std::numeric_limits<int>::max() / 4;
}

// Reads a usage object of either API into `out`, in one pass over its fields. Returns whether it
// read to the object's end.
bool ReadUsage(od::object usage, ObservedUsage* out) {
  out->preliminary = false;
  int64_t completion = -1, output = -1, prompt = -1, cached = -1, input = -1, read = -1;
  int64_t created = 0;
  bool responses_api = false;  // input_tokens with input_tokens_details: cache reads included
  for (auto field : usage) {
    od::raw_json_string key;  // compared as written (engines escape no key), not copied
    if (field.key().get(key) != SUCCESS) return false;
    od::value value;
    if (field.value().get(value) != SUCCESS) return false;
    int64_t n;
    od::object details;
    if (key == "prompt_tokens_details" || key == "input_tokens_details") {
      if (value.get_object().get(details) == SUCCESS &&
          details.find_field_unordered("cached_tokens").get_int64().get(n) == SUCCESS &&
          IsTokenCount(n)) {
        cached = n;
      }
      if (key == "input_tokens_details") responses_api = true;
    } else if (value.get_int64().get(n) != SUCCESS || !IsTokenCount(n)) {
      continue;
    } else if (key == "completion_tokens") {
      completion = n;
    } else if (key == "output_tokens") {
      output = n;
    } else if (key == "prompt_tokens") {
      prompt = n;
    } else if (key == "input_tokens") {
      input = n;
    } else if (key == "cache_read_input_tokens") {
      read = n;
    } else if (key == "cache_creation_input_tokens") {
      created = n;
    }
  }
  if (completion >= 0) out->output_tokens = static_cast<int>(completion);
  if (output >= 0) out->output_tokens = static_cast<int>(output);
  if (prompt >= 0 || (responses_api && input >= 0)) {  // OpenAI chat/completions, responses
    out->prompt_tokens = static_cast<int>(prompt >= 0 ? prompt : input);
    out->cached_tokens = static_cast<int>(cached);
    out->anthropic = false;
    return true;
  }
  if (input < 0) return true;  // e.g. a message_delta with output_tokens only
  // Anthropic: input_tokens excludes what was read from or written to the cache.
  out->prompt_tokens = static_cast<int>(input + std::max<int64_t>(read, 0) + created);
  out->cached_tokens = read >= 0 ? static_cast<int>(read) : -1;
  out->anthropic = true;
  return true;
}

// Whether an array has an element.
bool HasElement(od::value value) {
  od::array array;
  if (value.get_array().get(array) != SUCCESS) return false;
  for (auto element : array) {
    (void)element;
    return true;
  }
  return false;
}

// The usage of a whole body or event, in one pass over the root's fields: "usage", an Anthropic
// message_start's {"message": {"usage": {...}}}, or a Responses API event's
// {"response": {"usage": {...}}} (response.completed, response.incomplete). In a stream
// (`stream_event`), usage beside choices is a running count (vLLM's continuous usage stats, on
// every chunk with --enable-force-include-usage): the cached share comes only with the last. In
// either order of the two fields.
void ReadRootUsage(od::object root, ObservedUsage* out, std::string* response_id,
                   bool stream_event) {
  std::string_view type, id;
  bool choices = false;
  ObservedUsage message_usage;
  bool message_has_usage = false;
  bool has_usage = false;
  for (auto field : root) {
    od::raw_json_string key;
    if (field.key().get(key) != SUCCESS) return;
    od::value value;
    if (field.value().get(value) != SUCCESS) return;
    od::object object;
    if (key == "type") {
      if (value.get_string().get(type) != SUCCESS) type = {};
    } else if (key == "id") {
      if (value.get_string().get(id) != SUCCESS) id = {};
    } else if (key == "object") {  // a whole Responses API body: {"id", ..., "object":"response"}
      std::string_view object_type;
      if (value.get_string().get(object_type) == SUCCESS && object_type == "response")
        response_id->assign(id);
    } else if (key == "choices" && stream_event) {
      choices = HasElement(value);
    } else if (key == "usage" && value.get_object().get(object) == SUCCESS) {
      ReadUsage(object, out);
      has_usage = true;
      if (choices || !stream_event) break;  // (else choices may still follow)
    } else if (key == "response" && value.get_object().get(object) == SUCCESS) {
      od::object usage;
      if (object.find_field_unordered("usage").get_object().get(usage) == SUCCESS)
        ReadUsage(usage, out);
      return;
    } else if (key == "message" && value.get_object().get(object) == SUCCESS) {
      od::object usage;
      if (object.find_field_unordered("usage").get_object().get(usage) == SUCCESS) {
        message_usage = *out;
        ReadUsage(usage, &message_usage);
        message_has_usage = true;
      }
    }
  }
  if (has_usage) {
    out->preliminary = choices;
    return;
  }
  if (message_has_usage && type == "message_start") {
    *out = message_usage;
    out->preliminary = true;
  }
}

// Appends a non-empty string field to `text` (if not null); returns whether there was one.
bool NonEmptyString(od::object& obj, std::string_view key, ReplyText* text = nullptr) {
  std::string_view s;
  if (obj.find_field_unordered(key).get_string().get(s) != SUCCESS || s.empty()) return false;
  if (text) text->append(s);
  return true;
}

// Whether an OpenAI choice carries generated output (its text goes to `text`, and its tool calls'
// ids to `ids`, if not null).
bool ChoiceHasToken(od::object choice, ReplyText* text, std::vector<std::string>* ids) {
  if (NonEmptyString(choice, "text", text)) return true;  // completions
  od::object delta;
  if (choice.find_field_unordered("delta").get_object().get(delta) != SUCCESS) return false;
  bool token = NonEmptyString(delta, "content", text) ||
               NonEmptyString(delta, "reasoning_content") || NonEmptyString(delta, "reasoning");
  if (token && !ids) return true;
  od::array calls;  // a delta may carry text and the start of a tool call at once
  if (delta.find_field_unordered("tool_calls").get_array().get(calls) != SUCCESS) return token;
  if (ids) ReadToolCallIds(calls, ids);
  return true;
}

// Whether a Responses API event is generated output: response.output_text.delta, and the deltas
// of reasoning, refusals and function-call arguments (its text goes to `text`, if not null).
bool ResponsesDelta(std::string_view type, od::object& root, ReplyText* text) {
  if (!type.starts_with("response.") || !type.ends_with(".delta")) return false;
  return NonEmptyString(root, "delta", type == "response.output_text.delta" ? text : nullptr);
}

// Whether an Anthropic event is a content delta (its text goes to `text`, if not null).
bool AnthropicDelta(od::object& root, ReplyText* text) {
  od::object delta;
  if (root.find_field_unordered("delta").get_object().get(delta) != SUCCESS) return true;
  NonEmptyString(delta, "text", text);
  return true;
}

// The first choice's output: a chat message's content and tool calls, or a completion's text.
void AppendChoiceText(od::array choices, ReplyText* text, std::vector<std::string>* ids) {
  for (auto element : choices) {
    od::object choice;
    if (element.get_object().get(choice) != SUCCESS) return;
    for (auto field : choice) {
      std::string_view key, s;
      if (field.unescaped_key().get(key) != SUCCESS) return;
      od::object message;
      if (key == "text" && field.value().get_string().get(s) == SUCCESS) {
        text->append(s);
      } else if (key == "message" && field.value().get_object().get(message) == SUCCESS) {
        for (auto m : message) {
          std::string_view mkey;
          od::array calls;
          if (m.unescaped_key().get(mkey) != SUCCESS) return;
          if (mkey == "content" && m.value().get_string().get(s) == SUCCESS) {
            text->append(s);
          } else if (mkey == "tool_calls" && ids && m.value().get_array().get(calls) == SUCCESS) {
            ReadToolCallIds(calls, ids);
          }
        }
      }
    }
    return;
  }
}

// The output of a whole (not streamed) body: Anthropic's content blocks, OpenAI's first choice,
// the Responses API's output messages.
void AppendBodyText(od::object root, ReplyText* text, std::vector<std::string>* ids) {
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key) != SUCCESS) return;
    od::array array;
    if (field.value().get_array().get(array) != SUCCESS) continue;
    if (key == "content") {
      ReadContentBlocks(array, text, ids);
    } else if (key == "choices") {
      AppendChoiceText(array, text, ids);
    } else if (key == "output") {  // messages' text, function calls' ids
      for (auto element : array) {
        od::object item;
        if (element.get_object().get(item) != SUCCESS) continue;
        std::string_view type, call_id;
        for (auto f : item) {
          std::string_view k;
          od::array content;
          if (f.unescaped_key().get(k) != SUCCESS) return;
          if (k == "type" && f.value().get_string().get(type) != SUCCESS) type = {};
          if (k == "call_id" && f.value().get_string().get(call_id) != SUCCESS) call_id = {};
          if (k == "content" && f.value().get_array().get(content) == SUCCESS)
            ReadContentBlocks(content, text, nullptr);
        }
        if (type == "function_call" && ids) AddToolCallId(call_id, ids);
      }
    }
  }
}

}  // namespace

namespace {

// Where the first CR or LF in `text` is (npos: none). Two memchr scans, rather than
// find_first_of, which calls memchr once per byte of `text`: a stream's events are a few hundred
// bytes each, and that loop was a third of a relayed stream's instructions.
size_t LineEnd(std::string_view text) {
  if (text.empty()) return std::string_view::npos;  // (memchr is given no null pointer)
  const char* begin = text.data();
  const auto* lf = static_cast<const char*>(std::memchr(begin, '\n', text.size()));
  const size_t before_lf = lf ? static_cast<size_t>(lf - begin) : text.size();
  if (const auto* cr = static_cast<const char*>(std::memchr(begin, '\r', before_lf)))
    return static_cast<size_t>(cr - begin);
  return lf ? before_lf : std::string_view::npos;
}

// A text looked for in every event of a stream, found by one byte of it that is rare in the events
// (`anchor`): memchr jumps to each place that byte is, where the whole text is then compared.
// glibc's memmem builds a skip table on every call (most of its cost on an event of a few hundred
// bytes), string_view::find stops at every byte that begins the text (every quote, for a JSON
// key), and a Boyer-Moore-Horspool search moves a byte or two at a time through events full of
// the text's common letters ("usage": every 'e').
class Marker {
 public:
  constexpr Marker(std::string_view text, char anchor) : text_(text), at_(text.find(anchor)) {}

  bool In(std::string_view data) const {
    if (data.size() < text_.size()) return false;
    const char* p = data.data() + at_;
    // Where the anchor is when the text ends the data.
    const char* const last = data.data() + (data.size() - text_.size()) + at_;
    while (p <= last) {
      p = static_cast<const char*>(std::memchr(p, text_[at_], static_cast<size_t>(last - p) + 1));
      if (p == nullptr) return false;
      if (std::memcmp(p - at_, text_.data(), text_.size()) == 0) return true;
      ++p;
    }
    return false;
  }

 private:
  std::string_view text_;
  size_t at_;  // where the anchor is in the text
};

constexpr Marker kUsageKey("\"usage\"", 'g');
constexpr Marker kAnthropicDelta("content_block_delta", '_');
constexpr Marker kOpenAiContentDelta("\"delta\":{\"content\"", '{');
constexpr Marker kResponsesTextDelta("response.output_text.delta", '_');
// The Responses API's last events, which carry the usage: a whole response, one cut at its token
// limit, one that failed.
constexpr Marker kResponsesCompleted(R"("type":"response.completed")", '.');
constexpr Marker kResponsesIncomplete(R"("type":"response.incomplete")", '.');
constexpr Marker kResponsesFailed(R"("type":"response.failed")", '.');
// In a whole Responses API body ("object":"response"); rarely in others (as a key of a tool's
// input, say, where it costs a whole parse).
constexpr Marker kResponseWord(R"("response")", 'p');
// The token events' markers, one per API.
const Marker* const kTokenMarkers[] = {&kAnthropicDelta, &kOpenAiContentDelta,
                                       &kResponsesTextDelta};

}  // namespace

bool ResponseObserver::Feed(std::string_view data) {
  token_in_this_feed_ = false;
  if (!sse_) {
    // Past the limit only the tail is kept, which holds the usage (Finish).
    if (!json_too_large_ && pending_.size() + data.size() > max_json_bytes_) json_too_large_ = true;
    pending_.append(data);
    if (json_too_large_ && pending_.size() > kKeptTail)
      pending_.erase(0, pending_.size() - kKeptTail);
    return false;
  }
  // Lines end in LF, CRLF or a lone CR (the SSE format allows all three).
  while (!data.empty()) {
    if (std::exchange(skip_lf_, false) && data.front() == '\n') {
      data.remove_prefix(1);
      continue;
    }
    const size_t end = LineEnd(data);
    if (end == std::string_view::npos) {
      AppendToLine(data);
      break;
    }
    if (line_too_long_) {  // its end: the next line is read again
      line_too_long_ = false;
    } else if (pending_.empty()) {
      OnSseLine(data.substr(0, end));
    } else {
      pending_.append(data.substr(0, end));
      OnSseLine(pending_);
      pending_.clear();
    }
    skip_lf_ = data[end] == '\r';
    data.remove_prefix(end + 1);
  }
  return token_in_this_feed_;
}

void ResponseObserver::Finish() {
  // A stream's last line without its line end is an event cut off: the SSE format discards it.
  if (!sse_ && !json_too_large_ && !pending_.empty()) {
    // The usage alone is read where it is (a parse of the whole body was a tenth of a small
    // request's instructions), unless the text is wanted or the body may be a Responses API
    // response, whose id is read too.
    if (text_ || kResponseWord.In(pending_) || !ReadLastUsage()) ParseJson(pending_, false);
  } else if (!sse_ && json_too_large_) {
    ReadLastUsage();
  }
  std::string().swap(pending_);
}

namespace {

// Where the JSON value that starts at `json[start]` ends: past the '}' or ']' that closes it at
// depth 0, or, with `closes` set, past the first closer that takes the depth below 0 (the end of
// the object `start` is inside). npos if there is none.
size_t StructureEnd(std::string_view json, size_t start, bool closes = false) {
  int depth = closes ? 1 : 0;
  for (size_t i = start; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '"') {  // a string: to its closing quote, escapes skipped
      for (++i; i < json.size() && json[i] != '"'; ++i)
        if (json[i] == '\\') ++i;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

constexpr std::string_view kUsageKeyText = R"("usage")";

// Where the last `"usage"` in `json` starts, found from the end by its rarest letter (npos: none).
size_t LastUsageKey(std::string_view json) {
  constexpr size_t kAnchor = 4;  // the 'g'
  size_t searched = json.size();
  while (searched > kAnchor) {
    const void* g = memrchr(json.data() + kAnchor, 'g', searched - kAnchor);
    if (g == nullptr) return std::string_view::npos;
    const size_t at = static_cast<size_t>(static_cast<const char*>(g) - json.data()) - kAnchor;
    if (json.substr(at).starts_with(kUsageKeyText)) return at;
    searched = at + kAnchor;
  }
  return std::string_view::npos;
}

bool IsJsonSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// Where the object of the last "usage" key in a JSON document starts, if that key can be its
// root's (npos if not).
size_t LastUsageObject(std::string_view json) {
  const size_t key = LastUsageKey(json);
  if (key == std::string_view::npos) return key;
  // A key's quote is not escaped (an escaped one would end a string named "...\"usage").
  size_t backslashes = 0;
  while (backslashes < key && json[key - 1 - backslashes] == '\\') ++backslashes;
  if (backslashes % 2 == 1) return std::string_view::npos;
  const size_t colon = json.find_first_not_of(" \t\r\n", key + kUsageKeyText.size());
  if (colon == std::string_view::npos || json[colon] != ':') return std::string_view::npos;
  const size_t start = json.find_first_not_of(" \t\r\n", colon + 1);
  if (start == std::string_view::npos || json[start] != '{') return std::string_view::npos;
  return start;
}

// Whether `tail` closes one object and ends the document: what follows the value of a root's
// field (a tool's input in a reply's content, say, would leave its own closers and the root's).
bool ClosesTheRoot(std::string_view tail) {
  const size_t end = StructureEnd(tail, 0, /*closes=*/true);
  if (end == std::string_view::npos || tail[end - 1] != '}') return false;
  for (size_t i = end; i < tail.size(); ++i)
    if (!IsJsonSpace(tail[i])) return false;
  return true;
}

}  // namespace

bool ResponseObserver::ReadLastUsage() {
  // A body's usage comes after its content in every API's answer (vLLM writes the fields in
  // order), and a key "usage" cannot be inside a string, whose quotes are escaped: the last one
  // is the root's, when the object it is in ends the body. That holds for the tail kept of a
  // body over max_json_bytes too, whose head (and text) is lost. The usage object and what
  // follows it are parsed; a body of a few hundred bytes had its parse of the whole as a tenth
  // of a small request's instructions.
  const std::string_view body = pending_;
  const size_t start = LastUsageObject(body);
  if (start == std::string_view::npos) return false;
  ParseRoom& room = RoomFor(body.substr(start));
  od::document doc;
  od::object object;
  ObservedUsage usage = usage_;
  if (room.parser.iterate(room.view).get(doc) != SUCCESS ||
      doc.get_object().get(object) != SUCCESS || !ReadUsage(object, &usage))
    return false;
  const char* after = nullptr;  // the usage object's end (the document read so far)
  if (doc.current_location().get(after) != SUCCESS) return false;
  if (!ClosesTheRoot(body.substr(start + static_cast<size_t>(after - room.padded.data()))))
    return false;
  usage_ = usage;
  return true;
}

void ResponseObserver::AppendToLine(std::string_view data) {
  if (line_too_long_) return;
  if (pending_.size() + data.size() > max_json_bytes_) {  // not read: no event of ours is so long
    line_too_long_ = true;
    std::string().swap(pending_);
    return;
  }
  pending_.append(data);
}

void ResponseObserver::OnSseLine(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!line.starts_with("data:")) return;
  line.remove_prefix(5);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  OnSseData(line);
}

namespace {

// JSON written with a space after its first key's colon (Python's json.dumps, a proxy that
// re-encodes events) or before it, where vLLM writes compact JSON: the quick checks of the
// token events read compact JSON only.
bool Spaced(std::string_view data) {
  if (data.size() < 2 || data[0] != '{') return false;
  if (data[1] == ' ' || data[1] == '\n' || data[1] == '\t' || data[1] == '\r') return true;
  const size_t colon = data.find("\":", 1);
  return colon != std::string_view::npos && colon + 2 < data.size() &&
         (data[colon + 2] == ' ' || data[colon + 2] == '\t');
}

}  // namespace

void ResponseObserver::OnSseData(std::string_view data) {
  if (data == "[DONE]") stream_ended_ = true;
  if (data.empty() || data == "[DONE]") return;
  // After the first token only usage matters: skip the parse for the many token deltas (unless the
  // text is wanted).
  if (saw_token_ && !text_ && Spaced(data)) {  // parsed whole, as rare as it is: end, errors, usage
    ParseJson(data, /*look_for_token=*/true);
    return;
  }
  if (saw_token_ && !text_ && !kUsageKey.In(data)) {
    // vLLM's error events mid-stream: OpenAI {"error": {...}}, Anthropic {"type":"error",...},
    // each the stream's last word (OpenAI's [DONE] may follow).
    if (data.starts_with("{\"error\"") || data.starts_with("{\"type\":\"error\"")) {
      error_event_ = true;
      stream_ended_ = true;
      return;
    }
    if (data.starts_with("{\"type\":\"message_stop\"")) {
      stream_ended_ = true;
      return;
    }
    if (IsTokenEvent(data)) ++token_events_;
    return;
  }
  // The Responses API's last event carries the usage, read in one forward pass that stops at the
  // response (its type comes after it in the OpenAI types' order): its end is seen in the text
  // (found by review: a reply cut at its token limit, or failed, was taken for broken off).
  if (saw_token_ && !text_ && (kResponsesCompleted.In(data) || kResponsesIncomplete.In(data))) {
    stream_ended_ = true;
  } else if (saw_token_ && !text_ && kResponsesFailed.In(data)) {
    stream_ended_ = error_event_ = true;
  }
  ParseJson(data, !saw_token_ || text_);
}

bool ResponseObserver::IsTokenEvent(std::string_view data) {
  // A stream speaks one API: the marker found last is looked for first, and the others only
  // when it is not there (each look is a pass over the event).
  if (token_marker_ >= 0 && kTokenMarkers[token_marker_]->In(data)) return true;
  for (int i = 0; i < static_cast<int>(std::size(kTokenMarkers)); ++i) {
    if (i != token_marker_ && kTokenMarkers[i]->In(data)) {
      token_marker_ = i;
      return true;
    }
  }
  return false;
}

namespace {

// Whether an event ends a stream, and whether it is an error (see stream_ended, error_event).
void NoteEndOrError(od::object& root, std::string_view type, bool* ended, bool* error) {
  if (type == "message_stop" || type == "response.completed" || type == "response.incomplete")
    *ended = true;
  od::value value;
  if (type == "error" || type == "response.failed" ||
      root.find_field_unordered("error").get(value) == SUCCESS) {
    *error = true;
    *ended = true;  // its last word (OpenAI's [DONE] may follow)
  }
}

}  // namespace

void ResponseObserver::ParseJson(std::string_view json, bool look_for_token) {
  ParseRoom& room = RoomFor(json);
  const simdjson::padded_string_view view = room.view;
  // simdjson 3.0's on-demand reader finds a malformed document (cut off, unbalanced, a field
  // without a value) out only as it walks it: asked on after an error it reads through a null
  // pointer, and a search that wraps round an object assumes it well formed (found by fuzzing:
  // one bad event from a replica crashed the gateway). So a document walked with searches (an
  // event before the first token, or all of them when the text is wanted) is checked whole
  // first. The usage alone (whole bodies, a stream's last events) is read in one forward pass,
  // which stops at the first error: checking those too cost 5 K instructions a request.
  if ((text_ || look_for_token) &&
      room.validator.parse(view.data(), view.size(), false).error() != SUCCESS) {
    return;
  }
  od::document doc;
  od::object root;
  if (room.parser.iterate(view).get(doc) != SUCCESS || doc.get_object().get(root) != SUCCESS)
    return;

  if (!look_for_token) {
    ReadRootUsage(root, &usage_, &response_id_, sse_);
    if (!text_ || sse_) return;
    doc.rewind();  // a second pass, for the text
    if (doc.get_object().get(root) == SUCCESS) AppendBodyText(root, text_, tool_call_ids_);
    return;
  }
  std::string_view type;
  const bool has_type = root.find_field_unordered("type").get_string().get(type) == SUCCESS;
  NoteEndOrError(root, has_type ? type : "", &stream_ended_, &error_event_);
  bool token = has_type && (type == "content_block_delta" ? AnthropicDelta(root, text_)
                                                          : ResponsesDelta(type, root, text_));
  od::object block;  // Anthropic: a tool call's id comes in its block's start
  std::string_view block_type, id;
  if (tool_call_ids_ && has_type && type == "content_block_start" &&
      root.find_field_unordered("content_block").get_object().get(block) == SUCCESS &&
      block.find_field_unordered("type").get_string().get(block_type) == SUCCESS &&
      block_type == "tool_use" &&
      block.find_field_unordered("id").get_string().get(id) == SUCCESS) {
    AddToolCallId(id, tool_call_ids_);
  }
  od::object item;  // Responses API: a function call's id comes as its item is added
  if (tool_call_ids_ && has_type && type == "response.output_item.added" &&
      root.find_field_unordered("item").get_object().get(item) == SUCCESS &&
      item.find_field_unordered("type").get_string().get(block_type) == SUCCESS &&
      block_type == "function_call" &&
      item.find_field_unordered("call_id").get_string().get(id) == SUCCESS) {
    AddToolCallId(id, tool_call_ids_);
  }
  od::object created;  // Responses API: the response's id comes first, in response.created
  if (has_type && type == "response.created" &&
      root.find_field_unordered("response").get_object().get(created) == SUCCESS &&
      created.find_field_unordered("id").get_string().get(id) == SUCCESS) {
    response_id_.assign(id);
  }
  od::array choices;
  bool has_choice = false;
  if (!token && root.find_field_unordered("choices").get_array().get(choices) == SUCCESS) {
    for (auto choice : choices) {
      has_choice = true;
      od::object c;
      if (choice.get_object().get(c) != SUCCESS) break;
      // With n > 1 each event carries one choice: the reply is the first choice's, as a whole
      // body's is (found by review: all choices' text mixed named no reply a client sent back).
      int64_t index = 0;
      const bool first =
          c.find_field_unordered("index").get_int64().get(index) != SUCCESS || index == 0;
      if (ChoiceHasToken(c, first ? text_ : nullptr, first ? tool_call_ids_ : nullptr))
        token = true;
      break;  // the first choice is enough
    }
  }
  if (token) {
    ++token_events_;
    if (!saw_token_) {
      saw_token_ = true;
      token_in_this_feed_ = true;
    }
  }
  od::object usage;
  if (root.find_field_unordered("usage").get_object().get(usage) == SUCCESS) {
    ReadUsage(usage, &usage_);
    // A running count (see ReadRootUsage), or the opening count older vLLMs put beside an
    // Anthropic message_start's message rather than in it.
    usage_.preliminary = sse_ && (has_choice || (has_type && type == "message_start"));
    return;
  }
  od::object response;  // Responses API: {"response": {"usage": {...}}}
  if (has_type && type.starts_with("response.") &&
      root.find_field_unordered("response").get_object().get(response) == SUCCESS &&
      response.find_field_unordered("usage").get_object().get(usage) == SUCCESS) {
    ReadUsage(usage, &usage_);
    return;
  }
  od::object message;  // Anthropic message_start: {"message": {"usage": {...}}}
  if (has_type && type == "message_start" &&
      root.find_field_unordered("message").get_object().get(message) == SUCCESS &&
      message.find_field_unordered("usage").get_object().get(usage) == SUCCESS) {
    ReadUsage(usage, &usage_);
    usage_.preliminary = true;
  }
}

}  // namespace warden
