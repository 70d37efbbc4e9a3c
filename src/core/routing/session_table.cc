#include "core/routing/session_table.h"

#include <cassert>

namespace warden {

SessionTable::SessionTable(size_t max_entries, double idle_timeout_s, int num_replicas)
    : max_entries_(max_entries),
      idle_timeout_s_(idle_timeout_s),
      active_per_replica_(num_replicas, 0) {
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

SessionTable::Entry* SessionTable::Touch(std::string_view key, int home_if_new, double now,
                                         bool* created) {
  ExpireIdle(now);
  auto found = index_.find(key);
  *created = found == index_.end();
  List::iterator it;
  if (*created) {
    if (index_.size() >= max_entries_) EvictOne();
    active_.push_front(Node{std::string(key), Entry{home_if_new, -1, now, true}});
    it = active_.begin();
    index_.emplace(it->key, it);
    if (home_if_new >= 0) ++active_per_replica_[home_if_new];
  } else {
    it = found->second;
    if (it->entry.active) {
      active_.splice(active_.begin(), active_, it);
    } else {
      MakeActive(it);
    }
  }
  it->entry.last_seen = now;
  return &it->entry;
}

void SessionTable::MakeActive(List::iterator it) {
  active_.splice(active_.begin(), idle_, it);
  it->entry.active = true;
  if (it->entry.home >= 0) ++active_per_replica_[it->entry.home];
}

void SessionTable::SetHome(Entry* entry, int replica) {
  if (entry->active && entry->home >= 0) --active_per_replica_[entry->home];
  entry->home = replica;
  if (entry->active && replica >= 0) ++active_per_replica_[replica];
}

void SessionTable::ExpireIdle(double now) {
  while (!active_.empty() && active_.back().entry.last_seen < now - idle_timeout_s_) {
    auto it = std::prev(active_.end());
    it->entry.active = false;
    if (it->entry.home >= 0) --active_per_replica_[it->entry.home];
    idle_.splice(idle_.begin(), active_, it);
  }
}

void SessionTable::EvictOne() {
  List& from = idle_.empty() ? active_ : idle_;
  auto it = std::prev(from.end());
  if (it->entry.active && it->entry.home >= 0) --active_per_replica_[it->entry.home];
  index_.erase(it->key);
  from.erase(it);
}

void SessionTable::Resize(int num_replicas) {
  active_per_replica_.assign(num_replicas, 0);
  for (Node& n : active_) {
    if (n.entry.home >= num_replicas) n.entry.home = -1;
    if (n.entry.home >= 0) ++active_per_replica_[n.entry.home];
  }
  for (Node& n : idle_) {
    if (n.entry.home >= num_replicas) n.entry.home = -1;
  }
}

}  // namespace warden
