// libFuzzer target: a client's request body, read for its facts as the gateway reads it
// (ReadBodyFacts, with each combination of options, in place and copied), then keyed
// (ExtractSessionKey). Byte 0 picks the options. A body must be read or refused with a reason.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/routing/session_key.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  // In place needs simdjson's padding past the body; the reader copies when it is not there.
  const bool padded = (mode & 1) != 0;
  std::vector<char> buffer(input.size() + (padded ? 64 : 0));
  if (!input.empty()) std::memcpy(buffer.data(), input.data(), input.size());
  const std::string_view body(buffer.data(), input.size());

  warden::SessionKeyConfig config;
  warden::BodyReadOptions options;
  options.hash_prompt = (mode & 2) != 0;
  options.hash_opening = (mode & 4) != 0;
  options.model_only = (mode & 8) != 0;
  warden::BodyFacts facts;
  std::string error;
  const bool read = warden::ReadBodyFacts(body, buffer.size(), config, &facts, &error, options);
  if (!read && error.empty()) __builtin_trap();
  if (!read) return 0;
  if (facts.model_offset + facts.model_length > body.size()) __builtin_trap();

  std::vector<warden::HeaderView> headers;
  if (mode & 16) headers.push_back({"x-claude-code-agent-id", "agent"});
  if (mode & 32) headers.push_back({"x-claude-code-request-class", "auxiliary"});
  const warden::SessionKey key = warden::ExtractSessionKey(headers, facts, config);
  (void)key.sticky();
  (void)warden::SessionIdFromUserId(facts.metadata_user_id);
  if (!key.key.empty()) (void)warden::FirstTurnKeyOf(key.key);
  return 0;
}
