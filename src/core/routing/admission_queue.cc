#include "core/routing/admission_queue.h"

#include <charconv>

namespace warden {

std::string ParseAdmission(const std::string& text, AdmissionOptions* options) {
  *options = AdmissionOptions{};
  if (text == "off") return {};
  options->enabled = true;
  if (text == "fifo") {
    options->most_recent_first = false;
    return {};
  }
  const std::string prefix = "recent:";
  if (text.starts_with(prefix)) {
    const char* begin = text.data() + prefix.size();
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(begin, end, options->max_bypass);
    if (ec == std::errc() && ptr == end && options->max_bypass >= 0) return {};
  }
  return "admission: expected off, fifo or recent:K (K >= 0), got '" + text + "'";
}

AdmissionQueue::AdmissionQueue(int replicas, double block_tokens, double reply_tokens,
                               AdmissionOptions options)
    : options_(options),
      block_tokens_(block_tokens),
      reply_tokens_(reply_tokens),
      replicas_(replicas) {}

void AdmissionQueue::SetCapacity(int replica, int64_t kv_tokens) {
  replicas_[replica].capacity = kv_tokens;
}

double AdmissionQueue::Claim(const Replica& r, const Request& request) const {
  size_t shared = 0;
  while (shared < request.blocks.size() && r.blocks_in_use.contains(request.blocks[shared]))
    ++shared;
  return static_cast<double>(request.blocks.size() - shared) * block_tokens_ + reply_tokens_;
}

double AdmissionQueue::claimed_tokens(int replica) const {
  const Replica& r = replicas_[replica];
  return static_cast<double>(r.blocks_in_use.size()) * block_tokens_ + r.admitted * reply_tokens_;
}

bool AdmissionQueue::Fits(int replica, double claim) const {
  const Replica& r = replicas_[replica];
  if (r.admitted == 0 || r.capacity <= 0) return true;
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

void AdmissionQueue::Admit(int replica, Request request) {
  Replica& r = replicas_[replica];
  ++r.admitted;
  for (uint64_t b : request.blocks) ++r.blocks_in_use[b];
  admitted_[request.id] = {replica, std::move(request.blocks)};
}

bool AdmissionQueue::Offer(int replica, Request request) {
  Replica& r = replicas_[replica];
  if (!options_.enabled || (r.held.empty() && Fits(replica, Claim(r, request)))) {
    Admit(replica, std::move(request));
    return true;
  }
  r.held.push_back({std::move(request), 0});
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
                          std::vector<uint64_t>* released) {
  const auto it = admitted_.find(id);
  if (it == admitted_.end()) return;
  Learn(it->second, prompt_tokens, output_tokens);
  const int replica = it->second.replica;
  Replica& r = replicas_[replica];
  --r.admitted;
  for (uint64_t b : it->second.blocks) {
    if (--r.blocks_in_use[b] == 0) r.blocks_in_use.erase(b);
  }
  admitted_.erase(it);
  Release(replica, released);
}

void AdmissionQueue::Release(int replica, std::vector<uint64_t>* released) {
  Replica& r = replicas_[replica];
  while (!r.held.empty()) {
    const size_t pick = Next(r);
    if (!Fits(replica, Claim(r, r.held[pick].request))) break;
    for (size_t i = 0; i < pick; ++i) ++r.held[i].bypassed;
    Request request = std::move(r.held[pick].request);
    r.held.erase(r.held.begin() + static_cast<std::ptrdiff_t>(pick));
    released->push_back(request.id);
    Admit(replica, std::move(request));
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
