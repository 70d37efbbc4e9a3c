#include "core/protocol/context_overflow.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "util/json_escape.h"

namespace warden {
namespace {

// The number that ends just before `at` in `s` (digits, skipping spaces); -1 if none.
long NumberBefore(std::string_view s, size_t at) {
  size_t end = at;
  while (end > 0 && s[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(s[begin - 1]))) --begin;
  long n = -1;
  if (begin == end || std::from_chars(s.data() + begin, s.data() + end, n).ec != std::errc())
    return -1;
  return n;
}

// The number just before the first of `words` found in `s`; -1 if none is.
long NumberBeforeAny(std::string_view s, std::initializer_list<std::string_view> words) {
  for (const std::string_view w : words) {
    if (const size_t at = s.find(w); at != std::string_view::npos) {
      if (const long n = NumberBefore(s, at); n >= 0) return n;
    }
  }
  return -1;
}

// The error's message in either API's error shape, or vLLM's older {"message": ...}.
std::string_view ErrorMessage(simdjson::dom::element root) {
  std::string_view message;
  if (root["error"]["message"].get(message) == simdjson::SUCCESS) return message;
  if (root["message"].get(message) == simdjson::SUCCESS) return message;
  return {};
}

// The number right after the first `word` in `s`; -1 if none.
long NumberAfter(std::string_view s, std::string_view word) {
  const size_t at = s.find(word);
  if (at == std::string_view::npos) return -1;
  const std::string_view rest = s.substr(at + word.size());
  long n = -1;
  if (std::from_chars(rest.data(), rest.data() + rest.size(), n).ec != std::errc()) return -1;
  return n;
}

// The number right after the first '=' in `s` that a digit follows; -1 if none.
long NumberAfterEquals(std::string_view s) {
  for (size_t at = s.find('='); at != std::string_view::npos; at = s.find('=', at + 1)) {
    if (at + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[at + 1])))
      return NumberAfter(s.substr(at), "=");
  }
  return -1;
}

// vLLM's wordings since its renderer (vllm/renderers/params.py): "You passed N input tokens and
// requested K output tokens. However, the model's context length is only M tokens, resulting in a
// maximum input length of X tokens." (N counted up to X + 1 only); the same with "N input
// characters" and "(at most Y characters)" when the text alone is too long; "max_tokens=K cannot
// be greater than max_model_len=max_total_tokens=M".
std::optional<ContextOverflow> ParseRendererOverflow(std::string_view message) {
  ContextOverflow o;
  o.max_context = NumberAfter(message, "context length is only ");
  if (o.max_context > 0) {
    o.output_tokens = NumberBeforeAny(message, {" output tokens"});
    const long room = NumberAfter(message, "maximum input length of ");
    if (const long tokens = NumberBeforeAny(message, {" input tokens"}); tokens >= 0) {
      o.prompt_tokens = tokens;
      o.prompt_at_least = room >= 0 && tokens > room;
      return o;
    }
    const long chars = NumberBeforeAny(message, {" input characters"});
    if (chars < 0) return std::nullopt;
    // Its tokens, at the characters a token the error gives (none with no room left: then it
    // says only that there is a prompt).
    const long max_chars = NumberAfter(message, "(at most ");
    const double tokens = room > 0 && max_chars > 0 ? double(chars) * room / max_chars : 1;
    o.prompt_tokens = static_cast<long>(std::clamp(tokens, 1.0, double(int64_t{1} << 40)));
    o.prompt_at_least = true;
    return o;
  }
  // "max_tokens=K cannot be greater than max_model_len=M" (or max_completion_tokens, or
  // max_model_len=max_total_tokens=M), and since vLLM's VLLMValidationError a "(parameter=...,
  // value=K)" after it: K is the first number after a '=' before the words, M the first after.
  const size_t greater = message.find("cannot be greater than");
  if (greater == std::string_view::npos) return std::nullopt;
  o.output_tokens = NumberAfterEquals(message.substr(0, greater));
  o.max_context = NumberAfterEquals(message.substr(greater));
  if (o.max_context <= 0 || o.output_tokens < 0) return std::nullopt;
  o.prompt_at_least = true;  // not counted at all
  return o;
}

}  // namespace

std::optional<ContextOverflow> ParseContextOverflow(std::string_view message) {
  // "Input length (N) exceeds model's maximum context length (M).": vLLM's check when it sets
  // max_tokens itself (vllm/entrypoints/utils.py), which a multimodal model reaches first.
  if (const long prompt = NumberAfter(message, "Input length ("); prompt >= 0) {
    ContextOverflow o;
    o.prompt_tokens = prompt;
    o.max_context = NumberAfter(message, "maximum context length (");
    if (o.max_context > 0) return o;
  }
  constexpr std::string_view kMaximum = "maximum context length is ";
  const size_t at = message.find(kMaximum);
  if (at == std::string_view::npos) return ParseRendererOverflow(message);
  ContextOverflow o;
  o.prompt_at_least = message.find("at least") != std::string_view::npos;
  const std::string_view rest = message.substr(at + kMaximum.size());
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), o.max_context);
  if (ec != std::errc() || o.max_context <= 0) return std::nullopt;
  const std::string_view after = rest.substr(end - rest.data());
  // "your request has N input tokens", "your prompt contains [at least] N input tokens",
  // "(N in the messages, K in the completion)", "you requested N tokens in the messages"; "you
  // requested K output tokens", or, before it all, "'max_tokens' ... is too large: K".
  o.prompt_tokens = NumberBeforeAny(
      after, {" input tokens", " in the messages", " tokens in the messages", " in the prompt"});
  if (o.prompt_tokens < 0) return std::nullopt;
  o.output_tokens =
      NumberBeforeAny(after, {" output tokens", " in the completion", " for the completion"});
  constexpr std::string_view kTooLarge = "is too large: ";
  if (const size_t large = message.find(kTooLarge);
      o.output_tokens < 0 && large != std::string_view::npos) {
    const std::string_view k = message.substr(large + kTooLarge.size());
    long n = -1;
    if (std::from_chars(k.data(), k.data() + k.size(), n).ec == std::errc() && n >= 0)
      o.output_tokens = n;
  }
  return o;
}

bool PromptCountedInPart(std::string_view error_body) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(error_body.data(), error_body.size()).get(root) != simdjson::SUCCESS)
    return false;
  const std::optional<ContextOverflow> o = ParseContextOverflow(ErrorMessage(root));
  return o && o->prompt_at_least;
}

std::optional<std::string> AnthropicContextError(std::string_view error_body,
                                                 long estimated_prompt_tokens, bool counted) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(error_body.data(), error_body.size()).get(root) != simdjson::SUCCESS)
    return std::nullopt;
  const std::string_view original = ErrorMessage(root);
  const std::optional<ContextOverflow> o = ParseContextOverflow(original);
  if (!o) return std::nullopt;
  const bool estimated = o->prompt_at_least && estimated_prompt_tokens > o->prompt_tokens;
  const long prompt = estimated ? estimated_prompt_tokens : o->prompt_tokens;
  std::string message;
  if (prompt >= o->max_context) {
    // A prompt of the context's size leaves no room for a token: its maximum is one less (found
    // by review: "32768 tokens > 32768 maximum" told Claude Code there was nothing to cut).
    const long maximum = prompt == o->max_context ? o->max_context - 1 : o->max_context;
    message = "prompt is too long: " + std::to_string(prompt) + " tokens > " +
              std::to_string(maximum) + " maximum";
  } else if (o->output_tokens >= 0 && o->output_tokens > o->max_context - prompt) {
    message = "input length and `max_tokens` exceed context limit: " + std::to_string(prompt) +
              " + " + std::to_string(o->output_tokens) + " > " + std::to_string(o->max_context) +
              ", decrease input length or `max_tokens` and try again";
  } else {
    return std::nullopt;
  }
  if (estimated) {
    message += counted ? " (the prompt's tokens as the replica's count_tokens counts them)"
                       : " (the prompt's tokens estimated from the request's size)";
  }
  message += " (the replica said: ";
  message += original;
  message += ")";
  std::string body = R"({"type":"error","error":{"type":"invalid_request_error","message":)";
  AppendJsonString(&body, message);
  body += "}}";
  return body;
}

}  // namespace warden
