#include "core/routing/admission_queue.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <limits>

namespace warden {

std::string ParseAdmission(const std::string& text, AdmissionOptions* options) {
  *options = AdmissionOptions{};
  if (text == "off") return {};
  options->enabled = true;
  if (text == "fifo") {
    options->most_recent_first = false;
    return {};
  }
  const char* end = text.data() + text.size();
  const auto read_int = [end](const char* begin, int* value) -> const char* {
    const auto [ptr, ec] = std::from_chars(begin, end, *value);
    return ec == std::errc() && *value >= 0 ? ptr : nullptr;
  };
  if (text.starts_with("recent:")) {
    if (read_int(text.data() + 7, &options->max_bypass) == end) return {};
  } else if (text.starts_with("reserve:")) {
    options->most_recent_first = false;
    const char* p = read_int(text.data() + 8, &options->reserve_turns);
    if (p == end && options->reserve_turns >= 2) return {};
    if (p != nullptr && p != end && *p == ':' && options->reserve_turns >= 2) {
      const auto [ptr, ec] = std::from_chars(p + 1, end, options->reserve_s);
      if (ec == std::errc() && ptr == end && options->reserve_s > 0 && options->reserve_s <= 3600)
        return {};
    }
  }
  return "admission: expected off, fifo, recent:K (K >= 0) or reserve:N[:SECONDS] (N >= 2, "
         "0 < SECONDS <= 3600), got '" +
         text + "'";
}

std::string CanonicalAdmission(const std::string& text) {
  AdmissionOptions o;
  if (!ParseAdmission(text, &o).empty()) return text;
  if (!o.enabled) return "off";
  if (o.reserve_turns > 0) {
    return o.reserve_s == AdmissionOptions{}.reserve_s
               ? fmt::format("reserve:{}", o.reserve_turns)
               : fmt::format("reserve:{}:{}", o.reserve_turns, o.reserve_s);
  }
  return o.most_recent_first ? fmt::format("recent:{}", o.max_bypass) : "fifo";
}

AdmissionQueue::AdmissionQueue(int replicas, double block_tokens, double reply_tokens,
                               AdmissionOptions options)
    : options_(options),
      block_tokens_(block_tokens),
      reply_tokens_(reply_tokens),
      replicas_(replicas) {}

void AdmissionQueue::SetCapacity(int replica, int64_t kv_tokens, std::vector<uint64_t>* released) {
  Replica& r = replicas_[replica];
  const bool more_room = r.capacity > 0 && (kv_tokens <= 0 || kv_tokens > r.capacity);
  r.capacity = kv_tokens;
  if (more_room && !r.held.empty()) Release(replica, released);
}

double AdmissionQueue::Claim(const Replica& r, const Request& request) const {
  size_t shared = 0;
  while (shared < request.blocks.size() && r.blocks_in_use.contains(request.blocks[shared]))
    ++shared;
  return static_cast<double>(request.blocks.size() - shared) * block_tokens_ + reply_tokens_;
}

double AdmissionQueue::claimed_tokens(int replica) const {
  const Replica& r = replicas_[replica];
  return static_cast<double>(r.blocks_in_use.size()) * block_tokens_ +
         (r.admitted + r.reserved) * reply_tokens_;
}

bool AdmissionQueue::Fits(int replica, double claim) const {
  const Replica& r = replicas_[replica];
  if ((r.admitted == 0 && r.reserved == 0) || r.capacity <= 0) return true;
  return claimed_tokens(replica) + claim <= static_cast<double>(r.capacity);
}

void AdmissionQueue::Learn(const Admitted& a, int prompt_tokens, int output_tokens) {
  constexpr double kWeight = 0.1;  // of each new observation
  if (prompt_tokens > 0 && a.blocks.size() >= 4) {
    // The prompt's last partial block is not hashed: count it as half a block.
    const double per_block = prompt_tokens / (static_cast<double>(a.blocks.size()) + 0.5);
    block_tokens_ += kWeight * (per_block - block_tokens_);
  }
  if (output_tokens >= 0) reply_tokens_ += kWeight * (output_tokens - reply_tokens_);
}

void AdmissionQueue::Admit(int replica, Request request, int turns_in_a_row) {
  Replica& r = replicas_[replica];
  ++r.admitted;
  for (uint64_t b : request.blocks) ++r.blocks_in_use[b];
  admitted_[request.id] = {replica, std::move(request.blocks),
                           request.reserves ? request.conversation : 0, turns_in_a_row};
}

void AdmissionQueue::FreeBlocks(Replica& r, const std::vector<uint64_t>& blocks) {
  for (uint64_t b : blocks) {
    if (--r.blocks_in_use[b] == 0) r.blocks_in_use.erase(b);
  }
}

int AdmissionQueue::Unreserve(std::unordered_map<uint64_t, Reservation>::iterator it) {
  const int replica = it->second.turn.replica;
  Replica& r = replicas_[replica];
  --r.reserved;
  FreeBlocks(r, it->second.turn.blocks);
  reserved_.erase(it);
  return replica;
}

bool AdmissionQueue::Offer(int replica, Request request, double now,
                           std::vector<uint64_t>* released) {
  Replica& r = replicas_[replica];
  if (const auto it = reserved_.find(request.conversation);
      request.conversation != 0 && it != reserved_.end()) {
    const int turns = it->second.turn.turns_in_a_row + 1;
    const bool here = it->second.turn.replica == replica;
    // Admitted before the reservation's blocks are freed, so that the shared ones stay counted.
    if (here) Admit(replica, std::move(request), turns);
    // The room the reservation kept beyond what the turn claims may let held requests in (the
    // turn went elsewhere, or is smaller than the last: after a compaction, say).
    Release(Unreserve(it), released);
    if (here) return true;
  }
  if (!options_.enabled || (r.held.empty() && Fits(replica, Claim(r, request)))) {
    Admit(replica, std::move(request));
    return true;
  }
  const double since = request.arrived >= 0 ? std::min(request.arrived, now) : now;
  const auto place = std::upper_bound(r.held.begin(), r.held.end(), since,
                                      [](double t, const Held& h) { return t < h.since; });
  r.held.insert(place, {std::move(request), 0, since});
  return false;
}

size_t AdmissionQueue::Next(const Replica& r) const {
  if (!options_.most_recent_first) return 0;
  size_t pick = 0;
  for (size_t i = 0; i < r.held.size(); ++i) {
    if (r.held[i].bypassed >= options_.max_bypass) return i;
    if (r.held[i].request.last_active > r.held[pick].request.last_active) pick = i;
  }
  return pick;
}

void AdmissionQueue::Done(uint64_t id, int prompt_tokens, int output_tokens,
                          std::vector<uint64_t>* released, double now, bool completed) {
  const auto it = admitted_.find(id);
  if (it == admitted_.end()) return;
  const double block_tokens = block_tokens_, reply_tokens = reply_tokens_;
  Learn(it->second, prompt_tokens, output_tokens);
  // Smaller estimates make every held request's claim smaller, wherever it waits.
  const bool claims_shrank = block_tokens_ < block_tokens || reply_tokens_ < reply_tokens;
  const int replica = it->second.replica;
  Replica& r = replicas_[replica];
  --r.admitted;
  const uint64_t conversation = it->second.conversation;
  // A turn that failed keeps nothing: its client may not come back.
  if (conversation != 0 && completed && it->second.turns_in_a_row < options_.reserve_turns) {
    if (const auto old = reserved_.find(conversation); old != reserved_.end()) {
      const int other = Unreserve(old);
      if (other != replica) Release(other, released);
    }
    ++r.reserved;
    reserved_[conversation] = {std::move(it->second), now + options_.reserve_s};
  } else {
    FreeBlocks(r, it->second.blocks);
  }
  admitted_.erase(it);
  Release(replica, released);
  if (claims_shrank) ReleaseEverywhere(released);
}

void AdmissionQueue::Expire(double now, std::vector<uint64_t>* released) {
  ExpireReservations(now, released);
  LetInOverdue(now, released);
}

void AdmissionQueue::LetInOverdue(double now, std::vector<uint64_t>* released) {
  for (int replica = 0; replica < static_cast<int>(replicas_.size()); ++replica) {
    std::vector<Held>& held = replicas_[replica].held;  // in arrival order
    while (!held.empty() && held.front().since + max_hold_s_ <= now) {
      Request request = std::move(held.front().request);
      held.erase(held.begin());
      ++replicas_[replica].held_too_long;
      released->push_back(request.id);
      Admit(replica, std::move(request));
    }
  }
}

void AdmissionQueue::ExpireReservations(double now, std::vector<uint64_t>* released) {
  for (auto it = reserved_.begin(); it != reserved_.end();) {
    const auto next = std::next(it);
    if (it->second.expires <= now) Release(Unreserve(it), released);
    it = next;
  }
}

void AdmissionQueue::SetOptions(const AdmissionOptions& options, double now,
                                std::vector<uint64_t>* released) {
  options_ = options;
  if (!options_.enabled) options_.reserve_turns = 0;
  if (options_.reserve_turns == 0)
    ExpireReservations(std::numeric_limits<double>::infinity(), released);
  for (auto& [conversation, reservation] : reserved_)
    reservation.expires = std::min(reservation.expires, now + options_.reserve_s);
  ReleaseEverywhere(released);
}

void AdmissionQueue::StopReserving(std::vector<uint64_t>* released) {
  options_.reserve_turns = 0;
  ExpireReservations(std::numeric_limits<double>::infinity(), released);
}

void AdmissionQueue::GiveUpReservations(int replica, std::vector<uint64_t>* released) {
  if (replicas_[replica].reserved == 0) return;
  for (auto it = reserved_.begin(); it != reserved_.end();) {
    const auto next = std::next(it);
    if (it->second.turn.replica == replica) Unreserve(it);
    it = next;
  }
  Release(replica, released);
}

double AdmissionQueue::next_expiry() const {
  double earliest = std::numeric_limits<double>::infinity();
  for (const auto& [conversation, reservation] : reserved_)
    earliest = std::min(earliest, reservation.expires);
  for (const Replica& r : replicas_) {
    if (!r.held.empty()) earliest = std::min(earliest, r.held.front().since + max_hold_s_);
  }
  return earliest;
}

void AdmissionQueue::Release(int replica, std::vector<uint64_t>* released) {
  Replica& r = replicas_[replica];
  while (!r.held.empty()) {
    const size_t pick = Next(r);
    if (options_.enabled && !Fits(replica, Claim(r, r.held[pick].request))) break;
    for (size_t i = 0; i < pick; ++i) ++r.held[i].bypassed;
    Request request = std::move(r.held[pick].request);
    r.held.erase(r.held.begin() + static_cast<std::ptrdiff_t>(pick));
    released->push_back(request.id);
    Admit(replica, std::move(request));
  }
}

void AdmissionQueue::ReleaseEverywhere(std::vector<uint64_t>* released) {
  for (int replica = 0; replica < static_cast<int>(replicas_.size()); ++replica) {
    if (!replicas_[replica].held.empty()) Release(replica, released);
  }
}

bool AdmissionQueue::Cancel(uint64_t id, std::vector<uint64_t>* released) {
  for (int replica = 0; replica < static_cast<int>(replicas_.size()); ++replica) {
    std::vector<Held>& held = replicas_[replica].held;
    for (auto it = held.begin(); it != held.end(); ++it) {
      if (it->request.id != id) continue;
      held.erase(it);
      Release(replica, released);
      return true;
    }
  }
  return false;
}

}  // namespace warden
