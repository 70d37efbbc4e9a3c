#include "core/routing/session_table.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace warden {

size_t SessionTable::KeyHash::operator()(std::string_view key) const noexcept {
  return XXH3_64bits(key.data(), key.size());
}

SessionTable::SessionTable(size_t max_entries, double idle_timeout_s, int num_replicas)
    : max_entries_(max_entries),
      idle_timeout_s_(idle_timeout_s),
      active_per_replica_(num_replicas, 0),
      context_per_replica_(num_replicas, 0) {
  assert(max_entries >= 1 && idle_timeout_s > 0 && num_replicas >= 1);
}

SessionTable::Entry* SessionTable::Find(std::string_view key) {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &it->second->entry;
}

const SessionTable::Entry* SessionTable::Find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &it->second->entry;
}

SessionTable::List::iterator SessionTable::Front(std::string_view key, bool* created) {
  ++version_;
  auto found = index_.find(key);
  *created = found == index_.end();
  if (*created) {
    if (index_.size() >= max_entries_) EvictOne();
    Entry entry;  // no home yet: counted nowhere
    entry.active = true;
    active_.push_front(Node{std::string(key), entry});
    index_.emplace(active_.begin()->key, active_.begin());
    return active_.begin();
  }
  return ToFront(found->second);
}

SessionTable::List::iterator SessionTable::ToFront(List::iterator it) {
  if (it->entry.active) {
    active_.splice(active_.begin(), active_, it);
  } else {
    MakeActive(it);
  }
  return it;
}

SessionTable::Entry* SessionTable::Touch(std::string_view key, int home_if_new, double now,
                                         bool* created) {
  ExpireIdle(now);
  Entry& e = Front(key, created)->entry;
  if (*created) SetHome(&e, home_if_new, now);
  MarkSeenHere(&e, now);
  return &e;
}

SessionTable::Entry* SessionTable::TouchKnown(std::string_view key, double now) {
  const auto found = index_.find(key);
  if (found == index_.end()) return nullptr;
  // A key no conversation goes on under (a retired opening whose own first turn ends now, say):
  // its end is no sighting of a conversation.
  if (found->second->entry.uncounted) return &found->second->entry;
  ExpireIdle(now);  // (a splice: the node found stays where `found` says)
  ++version_;
  Entry& e = ToFront(found->second)->entry;
  MarkSeenHere(&e, now);
  return &e;
}

void SessionTable::MarkSeenHere(Entry* e, double now) {
  if (e->uncounted) {  // a turn under it: it stands for a conversation again
    e->uncounted = false;
    --uncounted_;
  }
  e->last_seen = now;
  e->local_change = now;
  e->news_from = kHere;
}

SessionTable::List::iterator SessionTable::SeenAt(std::string_view key, double seen, List* unplaced,
                                                  bool* created, bool* later) {
  ++version_;
  auto found = index_.find(key);
  *created = found == index_.end();
  *later = false;
  if (*created) {
    Entry entry;  // no home yet: counted nowhere
    entry.active = true;
    entry.last_seen = seen;
    unplaced->push_back(Node{std::string(key), entry, /*unplaced=*/true});
    const List::iterator it = std::prev(unplaced->end());
    index_.emplace(it->key, it);
    return it;
  }
  List::iterator it = found->second;
  if (seen <= it->entry.last_seen) return it;
  *later = true;
  it->entry.last_seen = seen;
  if (it->entry.uncounted) {  // a turn came under it at the peer: it counts again, as here
    it->entry.uncounted = false;
    --uncounted_;
  }
  if (it->unplaced) return it;
  if (!it->entry.active) MakeActive(it);
  it->unplaced = true;
  unplaced->splice(unplaced->end(), active_, it);
  return it;
}

void SessionTable::Place(List* unplaced) {
  const auto later = [](const Node& a, const Node& b) {
    return a.entry.last_seen > b.entry.last_seen;
  };
  for (Node& n : *unplaced) n.unplaced = false;
  unplaced->sort(later);
  // Each after those seen at the same time or later: merge keeps active_'s first among equals,
  // sort keeps the order of arrival.
  active_.merge(*unplaced, later);
}

SessionTable::Entry* SessionTable::Learn(const SharedHome& peer, double now) {
  Learn(std::span(&peer, 1), now);
  return Find(peer.key);
}

size_t SessionTable::Learn(std::span<const SharedHome> homes, double now, int from) {
  ExpireIdle(now);
  const int replicas = static_cast<int>(active_per_replica_.size());
  List unplaced;
  size_t taken = 0;
  try {
    for (const SharedHome& peer : homes) {
      if (peer.home < 0 || peer.home >= replicas || peer.key.empty()) continue;
      if (LearnOne(peer, now, from, &unplaced)) ++taken;
    }
  } catch (...) {  // out of memory: what was learned is placed, so the table stays whole
    Place(&unplaced);
    throw;
  }
  Place(&unplaced);
  ExpireIdle(now);  // a sighting older than the idle timeout: known, not active
  // Past the bound only now, so that the least recently seen go, whether learned or not.
  while (index_.size() > max_entries_) EvictOne();
  return taken;
}

bool SessionTable::LearnOne(const SharedHome& peer, double now, int from, List* unplaced) {
  // A sighting less than this much later than the one known here is the same one, told back (a
  // gateway restored from its state file hears its own conversations from its peers, their times
  // a hair apart after the trip through Unix time): not counted as taken.
  constexpr double kSameSightingS = 0.5;
  const Entry* known = Find(peer.key);
  const double seen_before = known ? known->last_seen : -std::numeric_limits<double>::infinity();
  bool created, seen_later;
  Entry& e =
      SeenAt(peer.key, std::min(peer.last_seen, now), unplaced, &created, &seen_later)->entry;
  // A home a turn has finished on (its context is known) beats one placed without that
  // knowledge, by a gateway that had not heard of the conversation yet (it just started, say);
  // between two of a kind the later assignment wins.
  const bool theirs_known = peer.context_tokens > 0, ours_known = e.context_tokens > 0;
  const bool later =
      peer.home_since > e.home_since || (peer.home_since == e.home_since && peer.home < e.home);
  bool news = created;
  if (e.home < 0 || (theirs_known && !ours_known) || (theirs_known == ours_known && later)) {
    news = news || e.home != peer.home;
    SetHome(&e, peer.home, peer.home_since);
  }
  // The context of the later turn to end wins (a compacted conversation's shrinks); strictly
  // later, so two peers whose messages cross do not swap theirs for ever. A peer of an earlier
  // version says no time: a conversation's context grows turn by turn, so the larger one is the
  // later.
  const bool timed = std::isfinite(peer.context_at);
  // The turn known here, told back (by a peer, to a gateway restored from its state file), its
  // end a hair apart after the trip through Unix time: no news. (A turn sent again that ends the
  // same way later is.)
  const bool told_back = timed && peer.context_tokens == e.context_tokens &&
                         peer.last_prompt_tokens == e.last_prompt_tokens &&
                         peer.last_end_replica == e.last_end_replica &&
                         std::abs(peer.context_at - e.last_end) < kSameSightingS;
  if (!told_back && (timed ? peer.context_tokens > 0 && peer.context_at > e.last_end
                           : peer.context_tokens > e.context_tokens)) {
    news = true;
    SetContext(&e, peer.context_tokens);
    if (timed) {
      e.last_end = peer.context_at;
      e.last_end_replica = InRange(peer.last_end_replica) ? peer.last_end_replica : -1;
      e.last_prompt_tokens = peer.last_prompt_tokens;
    } else {
      // A later turn than any seen here ended at the peer, when and where the message does not
      // say (none of ours is the latest then: not passed on as such). Its latest turn, for the
      // stayed-on-replica count, ran there on its home as far as it says; unknown if the two
      // gateways disagree on the home.
      e.last_end = -std::numeric_limits<double>::infinity();
      e.last_end_replica = -1;
      e.last_prompt_tokens = 0;
      e.last_replica = e.home == peer.home ? e.home : -1;
    }
  }
  // A later turn routed at the peer: where it went, and what it asked for (side requests are
  // told apart against it).
  if (seen_later && InRange(peer.last_replica)) e.last_replica = peer.last_replica;
  if ((created || seen_later) && peer.thread_model != 0) {
    e.thread_model = peer.thread_model;
    e.thread_body_bytes = peer.thread_body_bytes;
  }
  // Passed on (to a peer that restarted, or a third one), but not back and forth: an unchanged
  // home is no news. Never after the last sighting (ChangedSince stops at older ones).
  if (news) {
    e.local_change = e.last_seen;
    // No news for the peer only if what it sent is all there is: a home or context of our own, or
    // a later sighting here, is news for it too.
    const bool as_sent = e.home == peer.home && e.home_since == peer.home_since &&
                         e.context_tokens == peer.context_tokens &&
                         e.last_seen <= std::min(peer.last_seen, now);
    e.news_from = as_sent ? from : kHere;
  }
  return news || (seen_later && e.last_seen - seen_before >= kSameSightingS);
}

std::vector<SessionTable::SharedHome> SessionTable::ChangedSince(double since) const {
  double through;
  return ChangedSince(since, std::numeric_limits<size_t>::max(), &through);
}

SessionTable::SharedHome SessionTable::SharedHomeOf(const Node& n) {
  const Entry& e = n.entry;
  const bool ended = e.context_tokens > 0 && std::isfinite(e.last_end);
  return {.key = n.key,
          .home = e.home,
          .home_since = e.home_since,
          .context_tokens = e.context_tokens,
          .last_seen = e.last_seen,
          .context_at = ended ? e.last_end : -std::numeric_limits<double>::infinity(),
          .last_end_replica = ended ? e.last_end_replica : -1,
          .last_prompt_tokens = ended ? e.last_prompt_tokens : 0,
          .last_replica = e.last_replica,
          .thread_model = e.thread_model,
          .thread_body_bytes = e.thread_body_bytes};
}

std::vector<SessionTable::SharedHome> SessionTable::AllHomes() const {
  std::vector<SharedHome> out;
  out.reserve(active_.size() + idle_.size());
  for (const List* list : {&active_, &idle_}) {
    for (const Node& n : *list) {
      if (n.entry.home >= 0) out.push_back(SharedHomeOf(n));
    }
  }
  return out;
}

std::vector<SessionTable::SharedHome> SessionTable::ChangedSince(double since, size_t limit,
                                                                 double* through, int to) const {
  assert(limit >= 1);
  std::vector<const Node*> changed;
  // Most recently seen first, and a local change is a sighting: stop at the first older one.
  for (const Node& n : active_) {
    if (n.entry.last_seen <= since) break;
    if (n.entry.local_change > since && n.entry.home >= 0 &&
        (to == kHere || n.entry.news_from != to))
      changed.push_back(&n);
  }
  *through = std::numeric_limits<double>::infinity();
  if (changed.size() > limit) {
    const auto earlier = [](const Node* a, const Node* b) {
      return a->entry.local_change < b->entry.local_change;
    };
    // The `limit` earliest, then those routed at the same moment as the last of them; a backlog
    // is sent in many slices, so only the slice is sorted.
    std::nth_element(changed.begin(), changed.begin() + (limit - 1), changed.end(), earlier);
    *through = changed[limit - 1]->entry.local_change;
    const auto tied = std::partition(changed.begin() + limit, changed.end(), [&](const Node* n) {
      return n->entry.local_change == *through;
    });
    changed.erase(tied, changed.end());
    std::sort(changed.begin(), changed.end(), earlier);
  }
  std::vector<SharedHome> out;
  out.reserve(changed.size());
  for (const Node* n : changed) out.push_back(SharedHomeOf(*n));
  return out;
}

std::vector<SessionTable::SavedConversation> SessionTable::Save(double now) const {
  std::vector<SavedConversation> out;
  out.reserve(index_.size());
  for (const List* list : {&active_, &idle_}) {
    for (const Node& n : *list) {
      if (n.entry.home < 0) continue;
      // A retired conversation is idle, however recently it was seen: so it comes back.
      const double idle = std::max(0.0, now - n.entry.last_seen);
      out.push_back(
          {n.key, n.entry.home, n.entry.last_replica,
           n.entry.active ? idle : std::max(idle, std::nextafter(idle_timeout_s_, 1e300)),
           n.entry.context_tokens, n.entry.opened_only, n.entry.last_end_replica,
           n.entry.last_prompt_tokens, n.entry.handed_over, n.entry.uncounted, n.entry.thread_model,
           n.entry.thread_body_bytes,
           std::isfinite(n.entry.last_end) ? std::max(0.0, now - n.entry.last_end) : -1.0});
    }
  }
  return out;
}

size_t SessionTable::Restore(std::span<const SavedConversation> saved, double now) {
  const int replicas = static_cast<int>(active_per_replica_.size());
  size_t restored = 0;
  // Least recently seen first, each to the front of its list: the lists keep their order, and
  // past max_entries the oldest go first.
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
    if (it->home < 0 || it->home >= replicas || index_.contains(it->key)) continue;
    if (index_.size() >= max_entries_) EvictOne();
    Entry e;
    e.home = it->home;
    e.last_replica = it->last_replica < replicas ? it->last_replica : -1;
    e.last_end_replica = it->last_end_replica < replicas ? it->last_end_replica : -1;
    e.last_prompt_tokens = std::clamp<int64_t>(it->last_prompt_tokens, 0, kMaxContextTokens);
    e.last_seen = now - std::max(0.0, it->idle_s);
    e.home_since = e.last_seen;
    // (A file of an earlier version keeps no turn's end: the last sighting stands for it.)
    e.last_end = it->end_idle_s >= 0 ? now - it->end_idle_s : e.last_seen;
    e.context_tokens = it->context_tokens;
    e.opened_only = it->opened_only;
    e.local_change = e.last_seen;  // the peers are told of it (they may have lost it too)
    e.handed_over = it->retired;
    e.uncounted = it->left;
    e.thread_model = it->thread_model;
    e.thread_body_bytes = it->thread_body_bytes;
    e.active = it->idle_s <= idle_timeout_s_ && !e.uncounted;
    if (e.uncounted) ++uncounted_;
    List& list = e.active ? active_ : idle_;
    list.push_front(Node{it->key, e});
    index_.emplace(list.begin()->key, list.begin());
    Count(e, +1);
    ++restored;
  }
  if (restored > 0) ++version_;
  // Past max_entries the oldest restored went again (into an empty table, as at a start, all
  // evictions are of those): they do not count.
  return std::min(restored, index_.size());
}

void SessionTable::MakeActive(List::iterator it) {
  active_.splice(active_.begin(), idle_, it);
  it->entry.active = true;
  Count(it->entry, +1);
}

void SessionTable::Count(const Entry& e, int sign) {
  if (!e.active || e.home < 0) return;
  active_per_replica_[e.home] += sign;
  if (!e.opened_only) context_per_replica_[e.home] += sign * e.context_tokens;
}

size_t SessionTable::RecentContext(double since, std::span<int64_t> context_per_replica) const {
  size_t recent = 0;
  for (const Node& node : active_) {
    const Entry& e = node.entry;
    if ((e.last_seen < since && !e.turn_in_flight) || !e.active || e.home < 0) continue;
    ++recent;
    if (!e.opened_only) context_per_replica[e.home] += e.context_tokens;
  }
  return recent;
}

void SessionTable::SetContext(Entry* entry, int64_t tokens) {
  ++version_;
  Count(*entry, -1);
  entry->context_tokens = tokens;
  Count(*entry, +1);
}

void SessionTable::SetOpenedOnly(Entry* entry, bool opened_only) {
  ++version_;
  Count(*entry, -1);
  entry->opened_only = opened_only;
  Count(*entry, +1);
}

void SessionTable::SetHome(Entry* entry, int replica, double now) {
  ++version_;
  Count(*entry, -1);
  entry->home = replica;
  entry->home_since = now;
  Count(*entry, +1);
}

void SessionTable::ExpireIdle(double now) {
  while (!active_.empty() && active_.back().entry.last_seen < now - idle_timeout_s_) {
    auto it = std::prev(active_.end());
    Count(it->entry, -1);
    it->entry.active = false;
    idle_.splice(idle_.begin(), active_, it);
  }
}

void SessionTable::Retire(std::string_view key) {
  const auto found = index_.find(key);
  if (found == index_.end()) return;
  found->second->entry.handed_over = true;
  Leave(key);
}

void SessionTable::Leave(std::string_view key) {
  const auto found = index_.find(key);
  if (found == index_.end()) return;
  Entry& e = found->second->entry;
  if (!e.uncounted) {
    ++version_;
    ++uncounted_;
  }
  e.uncounted = true;
  Deactivate(key);
}

void SessionTable::Deactivate(std::string_view key) {
  const auto found = index_.find(key);
  if (found == index_.end() || !found->second->entry.active) return;
  ++version_;
  const List::iterator it = found->second;
  Count(it->entry, -1);
  it->entry.active = false;
  idle_.splice(idle_.begin(), active_, it);
}

void SessionTable::EvictOne() {
  List& from = idle_.empty() ? active_ : idle_;
  auto it = std::prev(from.end());
  Count(it->entry, -1);
  // An uncounted entry is no conversation of its own: that goes on under its other key.
  if (it->entry.uncounted) {
    --uncounted_;
  } else {
    ++evicted_;
    if (it->entry.active) ++evicted_active_;
  }
  index_.erase(it->key);
  from.erase(it);
}

void SessionTable::SetLimits(size_t max_entries, double idle_timeout_s) {
  max_entries_ = max_entries;
  idle_timeout_s_ = idle_timeout_s;
  if (index_.size() > max_entries_) ++version_;  // what a state file saves changes
  while (index_.size() > max_entries_) EvictOne();
}

}  // namespace warden
