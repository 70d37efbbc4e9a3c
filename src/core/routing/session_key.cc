#include "core/routing/session_key.h"

#include <fmt/format.h>
#include <simdjson.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // XXH3 with AVX2/AVX-512 picked at run time
#define WARDEN_XXH3_WITH_SEED XXH3_64bits_withSeed_dispatch
#else
#include <xxhash.h>
#define WARDEN_XXH3_WITH_SEED XXH3_64bits_withSeed
#endif

#include "core/protocol/inline_data.h"
#include "core/protocol/reply_content.h"
#include "core/routing/prompt_hasher.h"
#include "util/ascii_case.h"
#include "util/glob.h"
#include "util/trim.h"

namespace warden {
namespace {

std::string_view FindHeader(std::span<const HeaderView> headers, std::string_view name) {
  for (const HeaderView& h : headers) {
    if (IEquals(h.name, name)) return h.value;
  }
  return {};
}

// Keys are written into JSON (the state file, peers' messages), which must be UTF-8; headers are
// bytes.
bool IsUtf8(std::string_view s) {
  return simdjson::validate_utf8(s.data(), s.size());
}

std::string_view Trim(std::string_view s) {
  return TrimBlanks(s);
}

// The length of the JSON string token at the start of `raw` (quotes included), or 0.
size_t StringTokenLength(std::string_view raw) {
  if (raw.empty() || raw[0] != '"') return 0;
  for (size_t i = 1; i < raw.size(); ++i) {
    if (raw[i] == '\\') {
      ++i;
    } else if (raw[i] == '"') {
      return i + 1;
    }
  }
  return 0;
}

// A running hash of text pieces; each piece seeds the next, so pieces cannot run together.
struct ChainHash {
  uint64_t value = 0;
  void Feed(std::string_view text) {
    value = WARDEN_XXH3_WITH_SEED(text.data(), text.size(), value + 1);
  }
};

// What a reply is known by: its text, and the ids of the tool calls it made (an engine makes them
// unique, and clients send them back as they got them).
struct Reply {
  std::string text;
  std::vector<std::string> tool_call_ids;
};

// The prompt's parts as raw JSON text, in the body's order; hashed in the template's order.
struct PromptParts {
  std::vector<std::string_view> system;
  std::string_view tools, messages, prompt;
  bool want_opening = false;
  // The system blocks and the tools as the opening's key reads them: without cache_control marks.
  ChainHash opening_system, opening_tools;
  ChainHash opening_messages;      // the messages up to and including the first user message
  bool opening_found = false;      // a user message ended the opening
  bool opening_continued = false;  // more messages follow it: a later turn
  // The replies after the opening, up to kKeyedReplies: each a run of the assistant's messages
  // (or Responses API output items) up to the next user message or tool result.
  bool in_reply = false;  // the last message read was part of replies.back()
  std::vector<Reply> replies;
};

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Claude Code's attribution block varies between versions and requests; vLLM strips it.
bool IsAttributionBlock(std::string_view raw) {
  return raw.size() < 512 && raw.find("x-anthropic-billing-header") != std::string_view::npos;
}

// The raw text of an array or other value (consumes it).
bool RawValue(simdjson::ondemand::value value, std::string_view* raw) {
  simdjson::ondemand::array array;
  if (value.get_array().get(array) == simdjson::SUCCESS) return array.raw_json().get(*raw) == 0;
  *raw = value.raw_json_token();
  return true;
}

// The text from `start` up to the document's current token, without the whitespace before it.
bool TextUpToHere(simdjson::ondemand::document& doc, const char* start, std::string_view* text) {
  const char* here;
  if (doc.current_location().get(here) != simdjson::SUCCESS) return false;
  *text = TrimRight(std::string_view(start, static_cast<size_t>(here - start)));
  return true;
}

// The raw text of any value (consumes it), without the whitespace after it.
bool RawOf(simdjson::ondemand::value value, std::string_view* raw) {
  simdjson::ondemand::json_type type;
  if (value.type().get(type) != simdjson::SUCCESS) return false;
  if (type == simdjson::ondemand::json_type::object) {
    simdjson::ondemand::object object;
    if (value.get_object().get(object) != simdjson::SUCCESS ||
        object.raw_json().get(*raw) != simdjson::SUCCESS)
      return false;
  } else if (type == simdjson::ondemand::json_type::array) {
    if (!RawValue(value, raw)) return false;
  } else {
    *raw = value.raw_json_token();
  }
  *raw = TrimRight(*raw);  // the whitespace before the next token is no part of it
  return true;
}

bool FeedRaw(simdjson::ondemand::value value, ChainHash* hash) {
  std::string_view raw;
  if (!RawOf(value, &raw)) return false;
  hash->Feed(raw);
  return true;
}

// An object's fields into the opening's hash, leaving out cache_control marks: Anthropic clients
// (Claude Code among them) move them to the newest message every turn, and may set them on the
// system blocks and tools differently from turn to turn.
bool FeedFieldsWithoutMarks(simdjson::ondemand::object fields, ChainHash* hash) {
  for (auto field : fields) {
    std::string_view key;
    simdjson::ondemand::value value;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    if (key == "cache_control") continue;
    hash->Feed(key);
    if (field.value().get(value) != simdjson::SUCCESS || !FeedRaw(value, hash)) return false;
  }
  return true;
}

// One element of an array of blocks (content, system, tools) into the opening's hash (objects
// without their marks); `raw`: its text, all of it.
bool FeedBlock(simdjson::ondemand::value block, simdjson::ondemand::document& doc, ChainHash* hash,
               std::string_view* raw) {
  const char* start = block.raw_json_token().data();
  simdjson::ondemand::object fields;
  if (block.get_object().get(fields) != simdjson::SUCCESS) {
    if (!RawOf(block, raw)) return false;
    hash->Feed(*raw);
    return true;
  }
  return FeedFieldsWithoutMarks(fields, hash) && TextUpToHere(doc, start, raw);
}

// A message's content into the opening's hash, without cache_control marks.
bool FeedContent(simdjson::ondemand::value content, simdjson::ondemand::document& doc,
                 ChainHash* hash) {
  simdjson::ondemand::array blocks;
  if (content.get_array().get(blocks) != simdjson::SUCCESS) return FeedRaw(content, hash);
  for (auto element : blocks) {
    simdjson::ondemand::value block;
    std::string_view raw;
    if (element.get(block) != simdjson::SUCCESS || !FeedBlock(block, doc, hash, &raw)) return false;
  }
  return true;
}

// The system prompt's blocks, but Claude Code's attribution block (PromptParts::system), and for
// the opening's key each without its cache_control marks.
bool ReadSystem(simdjson::ondemand::value value, simdjson::ondemand::document& doc,
                PromptParts* parts) {
  simdjson::ondemand::array blocks;
  if (value.get_array().get(blocks) != simdjson::SUCCESS) {
    parts->system.push_back(value.raw_json_token());
    parts->opening_system.Feed(parts->system.back());
    return true;
  }
  for (auto block : blocks) {
    simdjson::ondemand::value element;
    if (block.get(element) != simdjson::SUCCESS) return false;
    std::string_view raw;
    ChainHash hash;
    if (parts->want_opening) {
      if (!FeedBlock(element, doc, &hash, &raw)) return false;
    } else {
      simdjson::ondemand::object object;
      if (element.get_object().get(object) == simdjson::SUCCESS) {
        if (object.raw_json().get(raw) != simdjson::SUCCESS) return false;
      } else {
        raw = element.raw_json_token();
      }
    }
    if (IsAttributionBlock(raw)) continue;
    parts->system.push_back(raw);
    parts->opening_system.Feed(
        std::string_view(reinterpret_cast<const char*>(&hash.value), sizeof hash.value));
  }
  return true;
}

// The tools (PromptParts::tools), and for the opening's key each without its cache_control marks.
bool ReadTools(simdjson::ondemand::value value, simdjson::ondemand::document& doc,
               PromptParts* parts) {
  simdjson::ondemand::array tools;
  if (!parts->want_opening || value.get_array().get(tools) != simdjson::SUCCESS) {
    if (!RawValue(value, &parts->tools)) return false;
    parts->opening_tools.Feed(parts->tools);
    return true;
  }
  const char* start = value.raw_json_token().data();
  for (auto element : tools) {
    simdjson::ondemand::value tool;
    std::string_view raw;
    if (element.get(tool) != simdjson::SUCCESS ||
        !FeedBlock(tool, doc, &parts->opening_tools, &raw))
      return false;
  }
  return TextUpToHere(doc, start, &parts->tools);
}

// One message into the opening's hash; `user` tells whether it was a user message.
bool FeedMessage(simdjson::ondemand::object message, simdjson::ondemand::document& doc,
                 ChainHash* hash, bool* user) {
  for (auto field : message) {
    std::string_view key, raw;
    simdjson::ondemand::value value;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS ||
        field.value().get(value) != simdjson::SUCCESS) {
      return false;
    }
    hash->Feed(key);
    if (key == "content") {
      if (!FeedContent(value, doc, hash)) return false;
      continue;
    }
    if (!RawOf(value, &raw)) return false;
    hash->Feed(raw);
    // (Claude Code 2.1.154 and later also sends "ctx" and "msg", which vLLM takes as "user".)
    if (key == "role") *user = raw == "\"user\"" || raw == "\"ctx\"" || raw == "\"msg\"";
  }
  return true;
}

// A message (or Responses API item) after the opening: the assistant's messages, and the
// Responses API's function calls and reasoning, make up a reply (PromptParts::replies); a message
// of another kind after them ends it.
bool ReadReply(simdjson::ondemand::object message, PromptParts* parts) {
  std::string_view role, type, call_id;
  Reply reply;
  for (auto field : message) {
    std::string_view key, text;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    simdjson::ondemand::value value;
    if (field.value().get(value) != simdjson::SUCCESS) return false;
    simdjson::ondemand::array array;
    if (key == "role" || key == "type" || key == "call_id") {
      std::string_view* wanted = key == "role" ? &role : key == "type" ? &type : &call_id;
      if (value.get_string().get(*wanted) != simdjson::SUCCESS) *wanted = {};
    } else if (key == "content" && value.get_string().get(text) == simdjson::SUCCESS) {
      reply.text.append(text);
    } else if (key == "content" && value.get_array().get(array) == simdjson::SUCCESS) {
      if (!ReadContentBlocks(array, &reply.text, &reply.tool_call_ids)) return false;
    } else if (key == "tool_calls" && value.get_array().get(array) == simdjson::SUCCESS) {
      ReadToolCallIds(array, &reply.tool_call_ids);
    }
  }
  const bool replying = role == "assistant" || type == "function_call" || type == "reasoning";
  if (!replying) {
    parts->in_reply = false;
    return true;
  }
  if (!parts->in_reply) parts->replies.emplace_back();
  parts->in_reply = true;
  Reply& into = parts->replies.back();
  into.text.append(reply.text);
  for (std::string& id : reply.tool_call_ids) into.tool_call_ids.push_back(std::move(id));
  if (type == "function_call" && !call_id.empty()) into.tool_call_ids.emplace_back(call_id);
  return true;
}

// Whether the replies read so far are all the key can follow: the last one is over.
bool RepliesRead(const PromptParts& parts) {
  return parts.replies.size() >= static_cast<size_t>(kKeyedReplies) && !parts.in_reply;
}

// The messages array message by message, hashing the ones up to the first user message.
bool ReadMessagesAndOpening(simdjson::ondemand::value value, simdjson::ondemand::document& doc,
                            PromptParts* parts) {
  const char* start = value.raw_json_token().data();
  simdjson::ondemand::array messages;
  if (value.get_array().get(messages) != simdjson::SUCCESS)
    return RawValue(value, &parts->messages);
  for (auto element : messages) {
    if (element.error() != simdjson::SUCCESS) return false;
    simdjson::ondemand::object message;
    if (parts->opening_found) {
      parts->opening_continued = true;
      if (!RepliesRead(*parts) && element.get_object().get(message) == simdjson::SUCCESS &&
          !ReadReply(message, parts))
        return false;
      continue;
    }
    if (element.get_object().get(message) != simdjson::SUCCESS) continue;
    if (!FeedMessage(message, doc, &parts->opening_messages, &parts->opening_found)) return false;
  }
  return TextUpToHere(doc, start, &parts->messages);
}

// The Responses API's "input": a string is the one user message, and so the whole opening; an
// array of items reads like chat messages (an item with "role":"user" ends the opening). A string
// is hashed as the message {"role":"user","content":<string>} would be: a client that sends its
// history as items later starts it with that message.
bool ReadInput(simdjson::ondemand::value value, simdjson::ondemand::document& doc,
               PromptParts* parts) {
  const std::string_view raw = TrimRight(value.raw_json_token());
  std::string_view text;
  if (value.get_string().get(text) != simdjson::SUCCESS) {
    return parts->want_opening ? ReadMessagesAndOpening(value, doc, parts)
                               : RawValue(value, &parts->messages);
  }
  parts->messages = raw;
  if (parts->want_opening) {
    for (std::string_view piece :
         {std::string_view("role"), std::string_view("\"user\""), std::string_view("content"), raw})
      parts->opening_messages.Feed(piece);
    parts->opening_found = true;
  }
  return true;
}

bool ReadPromptPart(std::string_view key, simdjson::ondemand::value value,
                    simdjson::ondemand::document& doc, PromptParts* parts) {
  if (key == "system" || key == "instructions") return ReadSystem(value, doc, parts);
  if (key == "tools") return ReadTools(value, doc, parts);
  if (key == "messages") {
    return parts->want_opening ? ReadMessagesAndOpening(value, doc, parts)
                               : RawValue(value, &parts->messages);
  }
  if (key == "input") return ReadInput(value, doc, parts);
  return RawValue(value, &parts->prompt);  // "prompt" (completions)
}

// 0 when there is no user message to end the opening.
uint64_t HashOpening(const PromptParts& parts) {
  if (!parts.opening_found) return 0;
  ChainHash h;
  for (const uint64_t part :
       {parts.opening_system.value, parts.opening_tools.value, parts.opening_messages.value})
    h.Feed(std::string_view(reinterpret_cast<const char*>(&part), sizeof part));
  return h.value ? h.value : 1;
}

// Feeds `json` to the hasher with each long run of inline data (an image's base64) as a stand-in
// of the tokens a vision model reads it as: its hash, so that two images differ, then filler.
void FeedWithInlineData(std::string_view json, PromptHasher* hasher) {
  static const std::string kFiller(kMostInlineDataTokens * kPromptBytesPerToken, '.');
  size_t at = 0;
  for (const InlineDataRun& run : LongInlineData(json)) {
    hasher->Feed(json.substr(at, run.offset - at));
    const std::string_view data = json.substr(run.offset, run.length);
    const std::string digest = fmt::format("{:016x}", XXH3_64bits(data.data(), data.size()));
    hasher->Feed(digest);
    const size_t bytes = static_cast<size_t>(InlineDataTokens(data)) * kPromptBytesPerToken;
    hasher->Feed(
        std::string_view(kFiller).substr(0, bytes > digest.size() ? bytes - digest.size() : 0));
    at = run.offset + run.length;
  }
  hasher->Feed(json.substr(at));
}

void HashPrompt(const PromptParts& parts, BodyFacts* facts) {
  PromptHasher hasher;
  for (std::string_view s : parts.system) FeedWithInlineData(s, &hasher);
  FeedWithInlineData(parts.tools, &hasher);
  FeedWithInlineData(parts.messages, &hasher);
  FeedWithInlineData(parts.prompt, &hasher);
  facts->prompt_bytes = hasher.bytes();
  facts->prompt_hashes = hasher.TakeHashes();
}

bool ReadFacts(simdjson::ondemand::document& doc, const SessionKeyConfig& config,
               const char* body_start, BodyFacts* facts, PromptParts* parts) {
  simdjson::ondemand::object root;
  if (doc.get_object().get(root) != simdjson::SUCCESS) return false;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key) != simdjson::SUCCESS) return false;
    simdjson::ondemand::value value;
    if (field.value().get(value) != simdjson::SUCCESS) return false;
    if (parts && (key == "system" || key == "tools" || key == "messages" || key == "prompt" ||
                  key == "instructions" || key == "input")) {
      if (!ReadPromptPart(key, value, doc, parts)) return false;
    } else if (key == "model") {
      const std::string_view raw = value.raw_json_token();
      std::string_view model;
      bool null = false;
      if (value.is_null().get(null) == simdjson::SUCCESS && null) {
        // As no model: vLLM's field is optional, null included (its served model then).
      } else if (value.get_string().get(model) == simdjson::SUCCESS) {
        facts->model = model;
        facts->model_offset = static_cast<size_t>(raw.data() - body_start);
        facts->model_length = StringTokenLength(raw);
      } else {
        facts->model_not_string = true;
        facts->model_not_text = raw.starts_with('"');
      }
    } else if (key == "stream") {
      bool stream;
      if (value.get_bool().get(stream) == simdjson::SUCCESS) facts->stream = stream;
    } else if (key == "n") {
      int64_t n;
      if (value.get_int64().get(n) == simdjson::SUCCESS && n > 1)
        facts->sequences = static_cast<int>(std::min<int64_t>(n, 1 << 16));
    } else if (key == "previous_response_id") {
      std::string_view id;
      if (value.get_string().get(id) == simdjson::SUCCESS) facts->previous_response_id = id;
    } else if (key == "metadata") {
      simdjson::ondemand::object metadata;
      if (value.get_object().get(metadata) != simdjson::SUCCESS) continue;
      for (auto m : metadata) {
        std::string_view mkey;
        if (m.unescaped_key().get(mkey) != simdjson::SUCCESS) return false;
        std::string_view user_id;
        if (mkey == "user_id" && m.value().get_string().get(user_id) == simdjson::SUCCESS) {
          facts->metadata_user_id = user_id;
        }
      }
    } else {
      const size_t ranks =
          facts->body_field_key.empty() ? config.body_fields.size() : facts->body_field_rank;
      for (size_t rank = 0; rank < ranks; ++rank) {
        std::string_view v;
        if (key == config.body_fields[rank] && value.get_string().get(v) == simdjson::SUCCESS &&
            !v.empty()) {
          facts->body_field_key = v;
          facts->body_field_rank = rank;
          break;
        }
      }
    }
  }
  return true;
}

// The first configured header present with a value.
std::string_view ConfiguredHeaderKey(std::span<const HeaderView> headers,
                                     const SessionKeyConfig& config) {
  for (const std::string& pattern : config.headers) {
    for (const HeaderView& h : headers) {
      if (HeaderNameMatches(pattern, h.name) && !Trim(h.value).empty()) return Trim(h.value);
    }
  }
  return {};
}

// `prefix` and `hash` in 16 hex digits.
std::string HexKey(std::string key, uint64_t hash) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int shift = 60; shift >= 0; shift -= 4) key.push_back(kHex[(hash >> shift) & 15]);
  return key;
}

std::string OpeningKey(uint64_t hash) {
  return HexKey("opening:", hash);
}

std::string HashedKey(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return HexKey(HexKey("hashed:", h.high64), h.low64);
}

// Over-long keys and keys that are not UTF-8 are replaced by their hash (kMaxSessionKeyBytes).
void Bound(std::string* key) {
  if (key->size() > kMaxSessionKeyBytes || !IsUtf8(*key)) *key = HashedKey(*key);
}

}  // namespace

namespace {

// Recognises a body that opens with its model, {"model":"NAME", (JSON whitespace allowed between
// the tokens), and reads NAME. Only the plain case: a name with escapes, control characters or
// invalid UTF-8, or any other opening, returns false and the body is parsed in full.
bool ReadLeadingModel(std::string_view body, BodyFacts* facts) {
  size_t i = 0;
  const auto skip_space = [&] {
    while (i < body.size() &&
           (body[i] == ' ' || body[i] == '\n' || body[i] == '\r' || body[i] == '\t'))
      ++i;
  };
  const auto expect = [&](std::string_view token) {
    skip_space();
    if (body.substr(i, token.size()) != token) return false;
    i += token.size();
    return true;
  };
  if (!expect("{") || !expect("\"model\"") || !expect(":") || !expect("\"")) return false;
  const size_t start = i;
  const size_t end = body.find('"', start);
  if (end == std::string_view::npos) return false;
  const std::string_view name = body.substr(start, end - start);
  for (const char c : name) {
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20) return false;
  }
  if (!simdjson::validate_utf8(name.data(), name.size())) return false;
  i = end + 1;
  skip_space();
  if (i >= body.size() || (body[i] != ',' && body[i] != '}')) return false;
  facts->model = name;
  facts->model_offset = start - 1;
  facts->model_length = name.size() + 2;
  return true;
}

// Why a body is not one JSON object, where it is not the JSON itself (RFC 8259 §8.1).
std::string MalformedBodyMessage(std::string_view body) {
  if (body.starts_with("\xEF\xBB\xBF"))
    return "malformed JSON body: it starts with a byte order mark (JSON text sent over a network "
           "must not)";
  if (!simdjson::validate_utf8(body.data(), body.size()))
    return "malformed JSON body: it is not valid UTF-8";
  return "malformed JSON body: expected one JSON object";
}

}  // namespace

bool ReadBodyFacts(std::string_view body, size_t capacity, const SessionKeyConfig& config,
                   BodyFacts* facts, std::string* error, BodyReadOptions options) {
  if (options.model_only && !options.hash_prompt && !options.hash_opening &&
      ReadLeadingModel(body, facts))
    return true;
  thread_local simdjson::ondemand::parser parser;
  simdjson::padded_string copy;
  simdjson::padded_string_view view;
  if (capacity >= body.size() + simdjson::SIMDJSON_PADDING) {
    view = simdjson::padded_string_view(body.data(), body.size(), capacity);
  } else {
    copy = simdjson::padded_string(body);
    view = copy;
  }
  simdjson::ondemand::document doc;
  PromptParts parts;
  parts.want_opening = options.hash_opening;
  const bool read_parts = options.hash_prompt || options.hash_opening;
  // current_location() fails once the whole document has been consumed: anything after the root
  // object is trailing garbage.
  if (parser.iterate(view).get(doc) != simdjson::SUCCESS ||
      !ReadFacts(doc, config, view.data(), facts, read_parts ? &parts : nullptr) ||
      doc.current_location().error() == simdjson::SUCCESS) {
    *error = MalformedBodyMessage(body);
    return false;
  }
  if (options.hash_prompt) HashPrompt(parts, facts);
  if (options.hash_opening) {
    facts->opening_hash = HashOpening(parts);
    facts->opening_continued = parts.opening_continued;
    for (const Reply& reply : parts.replies) {
      const uint64_t hash = ReplyHash(reply.text, reply.tool_call_ids);
      if (hash == 0 || facts->replies == kKeyedReplies) break;
      facts->reply_hashes[facts->replies++] = hash;
    }
  }
  return true;
}

std::string SessionIdFromUserId(std::string_view user_id) {
  user_id = Trim(user_id);
  if (!user_id.empty() && user_id.front() == '{') {
    thread_local simdjson::ondemand::parser parser;
    simdjson::padded_string padded(user_id);
    simdjson::ondemand::document doc;
    simdjson::ondemand::object obj;
    if (parser.iterate(padded).get(doc) != simdjson::SUCCESS ||
        doc.get_object().get(obj) != simdjson::SUCCESS) {
      return {};
    }
    for (auto field : obj) {
      std::string_view key, value;
      if (field.unescaped_key().get(key) != simdjson::SUCCESS) return {};
      if (key == "session_id" && field.value().get_string().get(value) == simdjson::SUCCESS) {
        return std::string(value);
      }
    }
    return {};
  }
  constexpr std::string_view kMarker = "_session_";
  const size_t at = user_id.rfind(kMarker);
  if (at == std::string_view::npos) return {};
  return std::string(user_id.substr(at + kMarker.size()));
}

bool HeaderNameMatches(std::string_view pattern, std::string_view name) {
  return GlobMatch(pattern, name, /*ignore_case=*/true);
}

namespace {

// Claude Code's headers, in one pass over the request's (the first of each name counts).
struct ClaudeCodeHeaders {
  std::string_view session_id, agent_id, request_class;
};

ClaudeCodeHeaders ReadClaudeCodeHeaders(std::span<const HeaderView> headers) {
  constexpr std::string_view kPrefix = "x-claude-code-";
  ClaudeCodeHeaders out;
  for (const HeaderView& h : headers) {
    if (h.name.size() <= kPrefix.size() || !IEquals(h.name.substr(0, kPrefix.size()), kPrefix))
      continue;
    const std::string_view name = h.name.substr(kPrefix.size());
    std::string_view* field = IEquals(name, "session-id")      ? &out.session_id
                              : IEquals(name, "agent-id")      ? &out.agent_id
                              : IEquals(name, "request-class") ? &out.request_class
                                                               : nullptr;
    if (field && field->data() == nullptr) *field = h.value;
  }
  return out;
}

}  // namespace

void SeparateAdapterPrompts(std::string_view adapter, BodyFacts* facts) {
  const uint64_t salt = XXH3_64bits(adapter.data(), adapter.size()) | 1;
  for (uint64_t& hash : facts->prompt_hashes) hash ^= salt;
  if (facts->opening_hash != 0) facts->opening_hash = (facts->opening_hash ^ salt) | 1;
}

SessionKey ExtractSessionKey(std::span<const HeaderView> headers, const BodyFacts& body,
                             const SessionKeyConfig& config) {
  SessionKey result;
  const ClaudeCodeHeaders claude_code = ReadClaudeCodeHeaders(headers);
  result.auxiliary = IEquals(Trim(claude_code.request_class), "auxiliary");

  if (std::string_view v = Trim(claude_code.session_id); !v.empty()) {
    result.key = v;
    result.source = KeySource::kClaudeCodeHeader;
  } else if (std::string id = SessionIdFromUserId(body.metadata_user_id); !id.empty()) {
    result.key = std::move(id);
    result.source = KeySource::kMetadataUserId;
  } else if (std::string_view v = ConfiguredHeaderKey(headers, config); !v.empty()) {
    result.key = v;
    result.source = KeySource::kHeader;
  } else if (!body.body_field_key.empty()) {
    result.key = body.body_field_key;
    result.source = KeySource::kBodyField;
  } else if (config.key_from_opening && body.opening_hash != 0) {
    result.key = OpeningKey(body.opening_hash);
    result.source = KeySource::kOpening;
  }
  if (!result.key.empty()) {
    if (std::string_view agent = Trim(claude_code.agent_id); !agent.empty()) {
      result.key += ':';
      result.key += agent;
    }
    Bound(&result.key);
    if (result.source == KeySource::kOpening && body.opening_continued && body.replies > 0) {
      result.opening_key = result.key;
      for (int i = 0; i < body.replies; ++i) {
        result.shorter_keys.insert(result.shorter_keys.begin(), result.key);
        result.key = ContinuedOpeningKey(result.key, body.reply_hashes[i]);
      }
      result.replies_full = body.replies == kKeyedReplies;
    }
  }
  return result;
}

uint64_t ReplyHash(std::string_view text, std::span<const std::string> tool_call_ids) {
  ReplyText reply;
  reply.append(text);
  return reply.Hash(tool_call_ids);
}

std::string ContinuedOpeningKey(std::string_view first_turn_key, uint64_t reply_hash) {
  std::string key = HexKey(std::string(first_turn_key) + ":", reply_hash);
  Bound(&key);
  return key;
}

std::string_view FirstTurnKeyOf(std::string_view key) {
  constexpr std::string_view kOpening = "opening:";
  constexpr size_t kHashDigits = 16, kFirstTurnMin = kOpening.size() + kHashDigits;
  if (!key.starts_with(kOpening) || key.size() < kFirstTurnMin + 1 + kHashDigits) return {};
  const size_t colon = key.size() - kHashDigits - 1;
  if (key[colon] != ':') return {};
  for (const char c : key.substr(colon + 1)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return {};
  }
  return key.substr(0, colon);
}

uint64_t ReplyHashOf(std::string_view key) {
  const std::string_view first = FirstTurnKeyOf(key);
  if (first.empty()) return 0;
  uint64_t hash = 0;
  for (const char c : key.substr(first.size() + 1))
    hash = hash << 4 | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  return hash;
}

bool HeadersCarryKey(std::span<const HeaderView> headers, const SessionKeyConfig& config) {
  return ClaudeCodeHeaderKeys(headers) || !ConfiguredHeaderKey(headers, config).empty();
}

bool ClaudeCodeHeaderKeys(std::span<const HeaderView> headers) {
  return !Trim(FindHeader(headers, "x-claude-code-session-id")).empty();
}

std::string_view KeySourceName(KeySource source) {
  switch (source) {
    case KeySource::kNone:
      return "none";
    case KeySource::kClaudeCodeHeader:
      return "claude-code-header";
    case KeySource::kMetadataUserId:
      return "metadata.user_id";
    case KeySource::kHeader:
      return "header";
    case KeySource::kBodyField:
      return "body-field";
    case KeySource::kOpening:
      return "opening";
    case KeySource::kPreviousResponse:
      return "previous-response";
  }
  return "none";
}

}  // namespace warden
