#include "core/chat_template.h"

#include "core/tokenizer.h"

namespace warden {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
  }
  return "user";
}

void BeginMessage(Role role, std::vector<TokenId>* out) {
  out->push_back(kImStart);
  out->push_back(WordToken(RoleName(role)));
  out->push_back(kNewline);
}

void EndMessage(std::vector<TokenId>* out) {
  out->push_back(kImEnd);
  out->push_back(kNewline);
}

void AppendMessage(Role role, std::string_view text, std::vector<TokenId>* out) {
  BeginMessage(role, out);
  Tokenize(text, out);
  EndMessage(out);
}

void AppendGenerationPrompt(std::vector<TokenId>* out) {
  BeginMessage(Role::kAssistant, out);
}

bool IsAttributionBlock(std::string_view text) {
  return text.starts_with("x-anthropic-billing-header:");
}

}  // namespace warden
