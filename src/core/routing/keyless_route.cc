#include "core/routing/keyless_route.h"

namespace warden {
namespace {

// The key a conversation known by `key` opened under: a key a reply named (ContinuedOpeningKey)
// stands for the one before it.
std::string_view OpenedUnder(std::string_view key) {
  const std::string_view first = FirstTurnKeyOf(key);
  return first.empty() ? key : first;
}

}  // namespace

KeylessRoute RouteKeyless(const SessionTable& sessions, const SessionKey& key) {
  if (const SessionTable::Entry* entry = sessions.Find(key.key)) {
    const bool opens = entry->handed_over || entry->opening_in_flight;
    return {key.key, opens, opens ? std::string_view(key.key) : OpenedUnder(key.key)};
  }
  for (const std::string& shorter : key.shorter_keys) {
    if (sessions.Find(shorter)) return {shorter, false, OpenedUnder(shorter)};
  }
  const bool opens = !key.replies_full;
  return {key.key, opens, opens ? std::string_view(key.key) : OpenedUnder(key.key)};
}

}  // namespace warden
