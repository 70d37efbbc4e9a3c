#include "core/protocol/inline_system.h"

#include <simdjson.h>

#include <vector>

namespace warden {
namespace {

namespace od = simdjson::ondemand;
using simdjson::SUCCESS;

constexpr std::string_view kSystem = "\"system\"";
constexpr std::string_view kUser = "\"user\"";

// Where each system message's role token lies in `messages` (offsets from `start`).
bool FindSystemRoles(od::array messages, const char* start, std::vector<size_t>* offsets) {
  for (auto element : messages) {
    if (element.error() != SUCCESS) return false;
    od::object message;
    if (element.get_object().get(message) != SUCCESS) continue;
    for (auto field : message) {
      od::raw_json_string key;
      od::value value;
      if (field.key().get(key) != SUCCESS || field.value().get(value) != SUCCESS) return false;
      if (!(key == "role")) continue;
      const std::string_view token = value.raw_json_token();
      if (token.starts_with(kSystem)) offsets->push_back(token.data() - start);
      break;
    }
  }
  return true;
}

}  // namespace

std::optional<std::string> InlineSystemAsUser(std::string_view body) {
  thread_local od::parser parser;
  const simdjson::padded_string padded(body);
  od::document doc;
  od::object root;
  if (parser.iterate(padded).get(doc) != SUCCESS || doc.get_object().get(root) != SUCCESS)
    return std::nullopt;
  std::vector<size_t> offsets;
  for (auto field : root) {
    od::raw_json_string key;
    od::value value;
    if (field.key().get(key) != SUCCESS || field.value().get(value) != SUCCESS) return std::nullopt;
    od::array messages;
    if (!(key == "messages") || value.get_array().get(messages) != SUCCESS) continue;
    if (!FindSystemRoles(messages, padded.data(), &offsets)) return std::nullopt;
    break;
  }
  if (offsets.empty()) return std::nullopt;
  std::string out;
  out.reserve(body.size());
  size_t from = 0;
  for (size_t at : offsets) {
    out.append(body.substr(from, at - from)).append(kUser);
    from = at + kSystem.size();
  }
  out.append(body.substr(from));
  return out;
}

}  // namespace warden
