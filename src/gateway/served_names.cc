#include "gateway/served_names.h"

#include <algorithm>

namespace warden {

void ServedNames::Set(size_t server, std::vector<std::string> names) {
  std::lock_guard lock(mu_);
  if (server >= by_server_.size()) return;
  by_server_[server] = std::move(names);
  all_.clear();
  for (const std::vector<std::string>& listed : by_server_) {
    for (const std::string& name : listed)
      if (name != own_) all_.push_back(name);
  }
  std::sort(all_.begin(), all_.end());
  all_.erase(std::unique(all_.begin(), all_.end()), all_.end());
}

bool ServedNames::Contains(std::string_view name) const {
  std::lock_guard lock(mu_);
  return std::binary_search(all_.begin(), all_.end(), name);
}

std::vector<std::string> ServedNames::All() const {
  std::lock_guard lock(mu_);
  return all_;
}

}  // namespace warden
