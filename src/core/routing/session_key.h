// Which conversation a request belongs to: the affinity key, from what clients already send.
//
// Precedence (as Claude Code, LiteLLM and other gateways read it): the X-Claude-Code-Session-Id
// header; metadata.user_id in the body (a JSON string with "session_id", or the older
// "user_<hash>_account_<uuid>_session_<uuid>" form); configured headers; configured top-level body
// fields. A Claude Code subagent (x-claude-code-agent-id) is a conversation of its own: its key is
// "session:agent". Requests of class "auxiliary" (titles, classifiers) share no prefix with the
// conversation and are placed by load. Pure: no I/O; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

struct HeaderView {
  std::string_view name;  // any case
  std::string_view value;
};

struct SessionKeyConfig {
  // Header names (case-insensitive; '*' matches any run of characters) read after Claude Code's.
  std::vector<std::string> headers = {"x-session-id"};
  // Top-level body fields read last (strings only), e.g. OpenAI's "user".
  std::vector<std::string> body_fields = {"user"};
};

// What the gateway reads from a request body, in one pass.
struct BodyFacts {
  std::string model;
  // Where the model's JSON string (quotes included) lies in the body, to rewrite an alias.
  size_t model_offset = 0;
  size_t model_length = 0;
  bool stream = false;
  std::string metadata_user_id;  // raw metadata.user_id string, if any
  std::string body_field_key;    // the first configured body field found, if any
  // Only when asked for (ReadBodyFacts' hash_prompt): the prompt's chunk hashes (prompt_hasher.h)
  // and its size in bytes of JSON text.
  std::vector<uint64_t> prompt_hashes;
  size_t prompt_bytes = 0;
};

// Parses `body` (a JSON object) for BodyFacts. `capacity` is the size of the buffer holding body;
// when it leaves simdjson's padding (64 bytes) past the body, the body is parsed in place without a
// copy. With hash_prompt, also hashes the prompt for prefix-aware policies. Returns false and
// fills `error` when the body is not a well-formed JSON object.
bool ReadBodyFacts(std::string_view body, size_t capacity, const SessionKeyConfig& config,
                   BodyFacts* facts, std::string* error, bool hash_prompt = false);

enum class KeySource { kNone, kClaudeCodeHeader, kMetadataUserId, kHeader, kBodyField };

struct SessionKey {
  std::string key;  // empty when the request carries none
  KeySource source = KeySource::kNone;
  bool auxiliary = false;  // x-claude-code-request-class: auxiliary

  // Whether the request should stick to its conversation's replica.
  bool sticky() const { return !key.empty() && !auxiliary; }
};

SessionKey ExtractSessionKey(std::span<const HeaderView> headers, const BodyFacts& body,
                             const SessionKeyConfig& config);

// The session id inside a metadata.user_id value: the "session_id" of a JSON object string, or the
// text after "_session_". Empty when neither is there.
std::string SessionIdFromUserId(std::string_view user_id);

// Case-insensitive glob match ('*' only).
bool HeaderNameMatches(std::string_view pattern, std::string_view name);

std::string_view KeySourceName(KeySource source);

}  // namespace warden
