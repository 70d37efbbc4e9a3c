#include "core/routing/keyless_route.h"

namespace warden {

KeylessRoute RouteKeyless(const SessionTable& sessions, const SessionKey& key) {
  if (const SessionTable::Entry* entry = sessions.Find(key.key)) {
    return {key.key, entry->handed_over};
  }
  for (const std::string& shorter : key.shorter_keys) {
    if (sessions.Find(shorter)) return {shorter, false};
  }
  return {key.key, !key.replies_full};
}

}  // namespace warden
