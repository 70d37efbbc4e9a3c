#include "core/protocol/inline_system.h"

#include <simdjson.h>

#include <cstring>
#include <vector>

namespace warden {
namespace {

namespace od = simdjson::ondemand;
using simdjson::SUCCESS;

constexpr std::string_view kSystem = "\"system\"";
constexpr std::string_view kUser = "\"user\"";
// The parser's room for a larger document is not kept for the smaller ones that follow.
constexpr size_t kKeptRoom = 1 << 20;

// Where the role token of each system message that does not lead `messages` lies (offsets from
// `start`).
bool FindInlineSystemRoles(od::array messages, const char* start, std::vector<size_t>* offsets) {
  bool leading = true;
  for (auto element : messages) {
    if (element.error() != SUCCESS) return false;
    od::object message;
    if (element.get_object().get(message) != SUCCESS) {
      leading = false;
      continue;
    }
    std::string_view role_token;
    for (auto field : message) {
      std::string_view key;
      od::value value;
      if (field.unescaped_key().get(key) != SUCCESS || field.value().get(value) != SUCCESS)
        return false;
      if (key != "role") continue;
      role_token = value.raw_json_token();
      break;
    }
    const bool system = role_token.starts_with(kSystem);
    if (system && !leading) offsets->push_back(role_token.data() - start);
    leading = leading && system;
  }
  return true;
}

// The offsets of the role tokens to change; empty when the body is not as expected.
std::vector<size_t> RolesToChange(const std::string& body) {
  thread_local od::parser parser;
  if (body.size() + simdjson::SIMDJSON_PADDING <= kKeptRoom && parser.capacity() > kKeptRoom)
    parser = od::parser{};
  simdjson::padded_string copy;
  simdjson::padded_string_view view;
  if (body.capacity() >= body.size() + simdjson::SIMDJSON_PADDING) {
    view = simdjson::padded_string_view(body.data(), body.size(), body.capacity());
  } else {
    copy = simdjson::padded_string(body);
    view = copy;
  }
  std::vector<size_t> offsets;
  od::document doc;
  od::object root;
  if (parser.iterate(view).get(doc) != SUCCESS || doc.get_object().get(root) != SUCCESS) return {};
  for (auto field : root) {
    std::string_view key;
    od::value value;
    if (field.unescaped_key().get(key) != SUCCESS || field.value().get(value) != SUCCESS) return {};
    od::array messages;
    if (key != "messages" || value.get_array().get(messages) != SUCCESS) continue;
    if (!FindInlineSystemRoles(messages, view.data(), &offsets)) return {};
    break;
  }
  return offsets;
}

}  // namespace

int InlineSystemAsUser(std::string* body) {
  const std::vector<size_t> offsets = RolesToChange(*body);
  if (offsets.empty()) return 0;
  // Each change shortens the body: what follows it moves left by the changes so far.
  char* data = body->data();
  size_t shift = 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    const size_t at = offsets[i];
    std::memcpy(data + at - shift, kUser.data(), kUser.size());
    shift += kSystem.size() - kUser.size();
    const size_t from = at + kSystem.size();
    const size_t to = i + 1 < offsets.size() ? offsets[i + 1] : body->size();
    std::memmove(data + from - shift, data + from, to - from);
  }
  body->resize(body->size() - shift);
  return static_cast<int>(offsets.size());
}

}  // namespace warden
