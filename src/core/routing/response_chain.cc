#include "core/routing/response_chain.h"

#include <limits>

namespace warden {

void ResponseChain::Remember(std::string_view id, std::string_view key, double at, bool news,
                             int replica) {
  if (id.empty() || key.empty()) return;
  const auto [it, inserted] =
      keys_.try_emplace(std::string(id), Made{std::string(key), at, news, replica});
  if (!inserted) {
    it->second.key = key;
    if (replica >= 0) it->second.replica = replica;
    return;
  }
  order_.emplace_back(id);
  if (order_.size() > capacity_) {
    keys_.erase(order_.front());
    order_.pop_front();
  }
}

void ResponseChain::SetCapacity(size_t capacity) {
  capacity_ = capacity;
  while (order_.size() > capacity_) {
    keys_.erase(order_.front());
    order_.pop_front();
  }
}

std::vector<StoredResponse> ResponseChain::Entries() const {
  std::vector<StoredResponse> out;
  out.reserve(order_.size());
  for (const std::string& id : order_) {
    const Made& made = keys_.at(id);
    out.push_back({id, made.key, made.replica});
  }
  return out;
}

std::vector<StoredResponse> ResponseChain::NewsSince(double since, size_t limit,
                                                     double* through) const {
  *through = std::numeric_limits<double>::infinity();
  // The first id made after `since`: the newest are at the back.
  size_t first = order_.size();
  while (first > 0 && keys_.at(order_[first - 1]).at > since) --first;
  std::vector<StoredResponse> out;
  for (size_t i = first; i < order_.size(); ++i) {
    const Made& made = keys_.at(order_[i]);
    if (!made.news) continue;
    if (out.size() >= limit && made.at > *through) break;  // the rest, in the next message
    out.push_back({order_[i], made.key, made.replica});
    if (out.size() == limit) *through = made.at;
  }
  if (first == order_.size() || keys_.at(order_.back()).at <= *through)
    *through = std::numeric_limits<double>::infinity();
  return out;
}

int ResponseChain::ReplicaOf(std::string_view id) const {
  const auto it = keys_.find(std::string(id));
  return it == keys_.end() ? -1 : it->second.replica;
}

void ResponseChain::SetTokens(std::string_view id, int64_t tokens) {
  if (const auto it = keys_.find(std::string(id)); it != keys_.end()) it->second.tokens = tokens;
}

int64_t ResponseChain::TokensOf(std::string_view id) const {
  const auto it = keys_.find(std::string(id));
  return it == keys_.end() ? 0 : it->second.tokens;
}

std::string_view ResponseChain::KeyOf(std::string_view id) const {
  const auto it = keys_.find(std::string(id));
  return it == keys_.end() ? std::string_view() : std::string_view(it->second.key);
}

}  // namespace warden
