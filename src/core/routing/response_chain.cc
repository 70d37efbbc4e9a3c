#include "core/routing/response_chain.h"

namespace warden {

void ResponseChain::Remember(std::string_view id, std::string_view key) {
  if (id.empty() || key.empty()) return;
  const auto [it, inserted] = keys_.try_emplace(std::string(id), key);
  if (!inserted) {
    it->second = key;
    return;
  }
  order_.emplace_back(id);
  if (order_.size() > capacity_) {
    keys_.erase(order_.front());
    order_.pop_front();
  }
}

std::vector<std::pair<std::string, std::string>> ResponseChain::Entries() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(order_.size());
  for (const std::string& id : order_) out.emplace_back(id, keys_.at(id));
  return out;
}

std::string_view ResponseChain::KeyOf(std::string_view id) const {
  const auto it = keys_.find(std::string(id));
  return it == keys_.end() ? std::string_view() : std::string_view(it->second);
}

}  // namespace warden
