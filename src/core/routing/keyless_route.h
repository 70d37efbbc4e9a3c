// Which conversation a request keyed by its opening and replies belongs to.
//
// A keyless conversation is known by its opening and the replies its requests carry
// (SessionKeyConfig::key_from_opening): its first request by what it came with, its later ones by
// that and the first reply the gateway saw it get (ContinuedOpeningKey). So a request may be
// known by its whole key, by a shorter one (the conversation was first seen with fewer replies, or
// a reply changed), or not at all.
#pragma once

#include <string_view>

#include "core/routing/session_key.h"
#include "core/routing/session_table.h"

namespace warden {

struct KeylessRoute {
  std::string_view key;  // the key to route by: one of the request's
  // The request opens a conversation (RouteRequest::opens_conversation): placed as a new one, and
  // named by the reply it gets.
  bool opens = false;
  // The key the conversation opened under, the same for all its turns: what stands for it where
  // that must not change from turn to turn (a hashing policy's ring, admission's reservations).
  std::string_view stands_for;
};

// For a request with SessionKey::shorter_keys: routed by its whole key when that is known, unless
// that conversation was handed over to its later turns or its opening request is still running
// (then this request is another that began the same way, and opens one); else by the longest
// shorter key that is known; else it opens a conversation under its whole key (unless that key
// grows no further: replies_full).
KeylessRoute RouteKeyless(const SessionTable& sessions, const SessionKey& key);

}  // namespace warden
