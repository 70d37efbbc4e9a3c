// Which conversation a request belongs to: the affinity key, from what clients already send.
//
// Precedence (as Claude Code, LiteLLM and other gateways read it): the X-Claude-Code-Session-Id
// header; metadata.user_id in the body (a JSON string with "session_id", or the older
// "user_<hash>_account_<uuid>_session_<uuid>" form); configured headers; configured top-level body
// fields; last, when none of these is there, the conversation's opening (below). A Claude Code
// subagent (x-claude-code-agent-id) is a conversation of its own: its key is
// "session:agent". Requests of class "auxiliary" (titles, classifiers) share no prefix with the
// conversation and are placed by load. Pure: no I/O; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

// Longer keys are replaced by a hash of themselves ("hashed:<32 hex digits>"), so that what a
// client sends cannot make the session table's memory grow without bound; so are keys that are
// not UTF-8 (headers are bytes), which the state file and the peers' JSON could not carry.
inline constexpr size_t kMaxSessionKeyBytes = 256;

struct HeaderView {
  std::string_view name;  // any case
  std::string_view value;
};

struct SessionKeyConfig {
  // Header names (case-insensitive; '*' matches any run of characters) read after Claude Code's,
  // in this order. Codex sends its conversation id as "session_id".
  std::vector<std::string> headers = {"x-session-id", "session_id", "session-id"};
  // Top-level body fields read last (strings only), in this order: OpenAI's "prompt_cache_key"
  // (what OpenAI's own API routes on; Codex sends its conversation id there), then "user".
  std::vector<std::string> body_fields = {"prompt_cache_key", "user"};
  // A request with none of the keys above is keyed by its conversation's opening: the system
  // prompt (without Claude Code's attribution block), the tools and the messages up to and
  // including the first user message. Every turn of a conversation resends that opening
  // unchanged. The first turn is keyed by the opening alone and placed as a new conversation; the
  // later turns by the opening and the text of the first reply, which the gateway reads from the
  // first turn's response and homes where that turn ran (ContinuedOpeningKey). So conversations
  // that open identically stay apart unless their first replies are the same too (then their
  // prefixes are). A conversation whose first request already holds replies (an agent that opens
  // with a canned exchange, as Qwen Code does) is keyed the same way one reply further: by its
  // opening, the replies it came with and the first reply it got (up to kKeyedReplies in all).
  // Off: such requests are placed by load alone.
  bool key_from_opening = true;
  bool operator==(const SessionKeyConfig&) const = default;
};

// How many replies after its opening a keyless conversation's key follows at most (see
// SessionKeyConfig::key_from_opening).
inline constexpr int kKeyedReplies = 4;

// What the gateway reads from a request body, in one pass.
struct BodyFacts {
  std::string model;
  // Where the model's JSON string (quotes included) lies in the body, to rewrite an alias.
  size_t model_offset = 0;
  size_t model_length = 0;
  bool model_in_form = false;  // read from a multipart form's field: the name there is not quoted
  bool model_not_string = false;  // "model" is there, and not a string (a number, null, ...)
  // ... or a string that is no valid JSON text (a bad escape, or an escaped lone surrogate).
  bool model_not_text = false;
  bool stream = false;
  // The sequences asked for ("n", OpenAI's APIs): the answer's usage sums their output.
  int sequences = 1;
  std::string metadata_user_id;  // raw metadata.user_id string, if any
  std::string body_field_key;    // the earliest configured body field present, if any
  size_t body_field_rank = 0;    // its place in SessionKeyConfig::body_fields
  // Only when asked for (ReadBodyFacts' hash_prompt): the prompt's chunk hashes (prompt_hasher.h)
  // and its size in bytes of JSON text.
  std::vector<uint64_t> prompt_hashes;
  size_t prompt_bytes = 0;
  // Only when asked for (ReadBodyFacts' hash_opening): a hash of the conversation's opening (see
  // SessionKeyConfig::key_from_opening); 0 when the body has no user message to end it.
  uint64_t opening_hash = 0;
  bool opening_continued = false;  // messages follow the opening: not the conversation's first turn
  // With hash_opening, in a later turn: the hashes (ReplyHash) of the first replies after the
  // opening, in order, up to kKeyedReplies of them. A reply is a run of the assistant's messages
  // (or Responses API output items) up to the next user message or tool result; the list stops
  // at the first reply with neither text nor tool calls.
  std::array<uint64_t, kKeyedReplies> reply_hashes{};
  int replies = 0;                   // how many of reply_hashes are filled
  std::string previous_response_id;  // a Responses API request continuing a stored response
};

// For a request naming a LoRA adapter, whose prompts the engine caches apart from the model's and
// every other adapter's: makes its prompt hashes and its opening's hash (so its key, when keyed by
// its opening) its adapter's own, so that the same prompt under two adapters is neither one
// conversation nor one cached prefix.
void SeparateAdapterPrompts(std::string_view adapter, BodyFacts* facts);

struct BodyReadOptions {
  bool hash_prompt = false;   // fill prompt_hashes and prompt_bytes (prefix-aware policies)
  bool hash_opening = false;  // fill opening_hash (a keyless conversation's key)
  // Only the model is needed (the key comes from Claude Code's header, which outranks the body).
  // A body that opens with the model, as Claude Code's do ({"model":"claude-…",), is then read no
  // further, and not checked further: the engine parses it anyway and answers a malformed one with
  // a 400 in the API's own shape. Saves simdjson's pass over the whole body (12 µs for 86 KB,
  // growing with the conversation). Ignored with hash_prompt or hash_opening.
  bool model_only = false;
};

// Parses `body` (a JSON object) for BodyFacts. `capacity` is the size of the buffer holding body;
// when it leaves simdjson's padding (64 bytes) past the body, the body is parsed in place without a
// copy. Returns false and fills `error` when the body is not a well-formed JSON object (as far as
// it is read: see model_only; values the facts do not need are skipped, not checked).
bool ReadBodyFacts(std::string_view body, size_t capacity, const SessionKeyConfig& config,
                   BodyFacts* facts, std::string* error, BodyReadOptions options = {});

// kPreviousResponse: the conversation of the stored response a Responses API request continues
// from (the gateway remembers it: response_chain.h).
enum class KeySource {
  kNone,
  kClaudeCodeHeader,
  kMetadataUserId,
  kHeader,
  kBodyField,
  kOpening,
  kPreviousResponse
};
inline constexpr size_t kKeySourceCount = 7;

struct SessionKey {
  std::string key;  // empty when the request carries none
  KeySource source = KeySource::kNone;
  // A later turn keyed by its opening and first reply (ContinuedOpeningKey): the key of its first
  // turn, the opening's alone. Its conversation is known by it where the reply was not seen (the
  // gateway restarted, or the client changed the reply), and it stands for the conversation in
  // what must not change between its first turn and the next (a hashing policy's ring, admission's
  // reservations). Empty otherwise.
  std::string opening_key;
  // Keyed by its opening and replies: the keys of the same conversation with fewer of its replies,
  // the most first (ending with opening_key). A conversation first seen with fewer replies than
  // this request carries is known by one of them.
  std::vector<std::string> shorter_keys;
  // Keyed by its opening and kKeyedReplies replies: its key grows no further.
  bool replies_full = false;
  bool auxiliary = false;  // x-claude-code-request-class: auxiliary

  // Whether the request should stick to its conversation's replica.
  bool sticky() const { return !key.empty() && !auxiliary; }
};

// A request's affinity key, in SPEC order: Claude Code's session header, metadata.user_id, the
// configured headers, then the configured body fields (and, where allowed, the conversation's
// opening); `session:agent` for a subagent; the class hint read for auxiliary requests.
SessionKey ExtractSessionKey(std::span<const HeaderView> headers, const BodyFacts& body,
                             const SessionKeyConfig& config);

// A hash of what a reply is known by: its text, trimmed of whitespace at both ends (clients differ
// in what they keep of it), and the ids of its tool calls in their order (engines make them
// unique: replies alike but for them still differ). 0 when there is neither. Taken both from a
// request (BodyFacts::reply_hash) and from the response a conversation's first turn got.
uint64_t ReplyHash(std::string_view text, std::span<const std::string> tool_call_ids = {});
// The key of a conversation keyed by its opening, past its first turn: `first_turn_key` (the key
// ExtractSessionKey gave the first turn) with the first reply's hash (ReplyHash, not 0).
std::string ContinuedOpeningKey(std::string_view first_turn_key, uint64_t reply_hash);
// The first turn's key in a key made by ContinuedOpeningKey (unless it had to be hashed for its
// length); empty for any other key.
std::string_view FirstTurnKeyOf(std::string_view key);
// The reply hash in a key made by ContinuedOpeningKey (as FirstTurnKeyOf finds it); 0 for any
// other key.
uint64_t ReplyHashOf(std::string_view key);

// Whether the headers alone key the request (Claude Code's header or a configured one), so that
// its opening need not be hashed.
bool HeadersCarryKey(std::span<const HeaderView> headers, const SessionKeyConfig& config);
// Whether Claude Code's session header keys the request: nothing in the body can outrank it, so
// the body is read for its model only (BodyReadOptions::model_only).
bool ClaudeCodeHeaderKeys(std::span<const HeaderView> headers);

// The session id inside a metadata.user_id value: the "session_id" of a JSON object string, or the
// text after "_session_". Empty when neither is there.
std::string SessionIdFromUserId(std::string_view user_id);

// Case-insensitive glob match ('*' any run of characters, '?' any one).
bool HeaderNameMatches(std::string_view pattern, std::string_view name);

// The source as the admin API's key_sources and the metrics' source label name it.
std::string_view KeySourceName(KeySource source);

}  // namespace warden
