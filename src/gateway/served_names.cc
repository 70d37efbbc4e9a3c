#include "gateway/served_names.h"

#include <algorithm>
#include <boost/json.hpp>

namespace warden {
namespace {

bool ByName(const ServedName& a, const ServedName& b) {
  return a.name < b.name;
}

// The entry for `name` in `names`, sorted by name (its adapter one first among equal names).
const ServedName* Find(const std::vector<ServedName>& names, std::string_view name) {
  const auto at =
      std::lower_bound(names.begin(), names.end(), name,
                       [](const ServedName& n, std::string_view v) { return n.name < v; });
  return at != names.end() && at->name == name ? &*at : nullptr;
}

bool Lists(const std::vector<ServedName>& names, std::string_view name) {
  return Find(names, name) != nullptr;
}

}  // namespace

std::optional<std::vector<ListedModel>> ReadModelList(const std::string& body) {
  boost::system::error_code ec;
  const boost::json::value doc = boost::json::parse(body, ec);
  const boost::json::array* data = nullptr;
  if (ec || !doc.is_object() || !doc.as_object().contains("data") ||
      !(data = doc.at("data").if_array()))
    return std::nullopt;
  std::vector<ListedModel> listed;
  for (const boost::json::value& entry : *data) {
    const boost::json::object* model = entry.if_object();
    const boost::json::value* id = model ? model->if_contains("id") : nullptr;
    if (!id || !id->is_string()) continue;
    const boost::json::value* length = model->if_contains("max_model_len");
    const boost::json::value* parent = model->if_contains("parent");
    const boost::json::value* root = model->if_contains("root");
    const boost::json::value* simulated = model->if_contains("warden_simulated");
    listed.push_back({std::string(id->as_string()),
                      root && root->is_string() ? std::string(root->as_string()) : std::string(),
                      length && length->is_int64() ? std::max<int64_t>(0, length->as_int64()) : 0,
                      parent && parent->is_string() && !parent->as_string().empty(),
                      simulated && simulated->is_string() ? std::string(simulated->as_string())
                                                          : std::string()});
  }
  return listed;
}

std::vector<ServedName> NamesOf(const std::vector<ListedModel>& listed) {
  std::vector<ServedName> names;
  for (const ListedModel& m : listed)
    names.push_back({m.id, m.has_parent, m.has_parent ? m.root : std::string()});
  return names;
}

void ServedNames::Set(size_t server, std::vector<ServedName> names) {
  std::lock_guard lock(mu_);
  if (server >= by_server_.size()) return;
  // Sorted, so that a lookup is a binary search: a server may list thousands of adapters, and
  // the admin API and /v1/models look each one up.
  std::stable_sort(names.begin(), names.end(), ByName);
  by_server_[server] = std::move(names);
  all_.clear();
  for (const std::vector<ServedName>& listed : by_server_) {
    for (const ServedName& n : listed)
      if (n.name != own_) all_.push_back(n);
  }
  // An adapter on any server counts as one (sorted first among equal names, so unique keeps it).
  std::sort(all_.begin(), all_.end(), [](const ServedName& a, const ServedName& b) {
    return a.name != b.name ? a.name < b.name : a.adapter > b.adapter;
  });
  all_.erase(std::unique(all_.begin(), all_.end(),
                         [](const ServedName& a, const ServedName& b) { return a.name == b.name; }),
             all_.end());
}

bool ServedNames::Contains(std::string_view name) const {
  std::lock_guard lock(mu_);
  return Lists(all_, name);
}

bool ServedNames::IsAdapter(std::string_view name) const {
  std::lock_guard lock(mu_);
  const ServedName* found = Find(all_, name);
  return found && found->adapter;
}

std::string ServedNames::RootOf(std::string_view name) const {
  std::lock_guard lock(mu_);
  const ServedName* found = Find(all_, name);
  return found && found->adapter ? found->root : std::string();
}

std::vector<size_t> ServedNames::ServersWithout(std::string_view name) const {
  std::lock_guard lock(mu_);
  std::vector<size_t> without;
  for (size_t s = 0; s < by_server_.size(); ++s) {
    if (!Lists(by_server_[s], name)) without.push_back(s);
  }
  if (without.size() == by_server_.size()) without.clear();
  return without;
}

std::vector<size_t> ServedNames::ServersWith(std::string_view name) const {
  std::lock_guard lock(mu_);
  std::vector<size_t> with;
  for (size_t s = 0; s < by_server_.size(); ++s) {
    if (Lists(by_server_[s], name)) with.push_back(s);
  }
  return with;
}

std::vector<std::string> ServedNames::All() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> names;
  for (const ServedName& n : all_) names.push_back(n.name);
  return names;
}

}  // namespace warden
