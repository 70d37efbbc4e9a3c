#include "gateway/predecessor_load.h"

#include <boost/json.hpp>

#include "gateway/model_state.h"

namespace warden {

namespace json = boost::json;

namespace {

constexpr int64_t kMostInFlight = 1000000;  // a replica's count, as a peer's is bounded

}  // namespace

std::string InFlightLine(const std::vector<ModelState*>& models) {
  json::array list;
  for (ModelState* model : models) {
    json::array replicas, counts;
    model->WithRouter([&](ModelRouter& r) {
      for (int i = 0; i < r.num_replicas(); ++i) counts.push_back(r.load(i).in_flight);
    });
    for (int i = 0; i < model->num_replicas(); ++i)
      replicas.push_back(json::string(model->ReplicaStateId(i)));
    list.push_back(json::object{{"name", model->name()},
                                {"replicas", std::move(replicas)},
                                {"in_flight", std::move(counts)}});
  }
  return json::serialize(json::object{{"models", std::move(list)}}) + "\n";
}

std::optional<std::vector<std::vector<int>>> ReadInFlightLine(
    std::string_view line, const std::vector<ModelState*>& models) {
  boost::system::error_code ec;
  const json::value message = json::parse(line, ec);
  const json::object* root = ec ? nullptr : message.if_object();
  const json::value* list = root ? root->if_contains("models") : nullptr;
  if (!list || !list->is_array()) return std::nullopt;
  std::vector<std::vector<int>> out;
  for (ModelState* model : models) out.emplace_back(model->num_replicas(), 0);
  for (const json::value& item : list->as_array()) {
    const json::object* m = item.if_object();
    const json::value* name = m ? m->if_contains("name") : nullptr;
    const json::value* replicas = m ? m->if_contains("replicas") : nullptr;
    const json::value* counts = m ? m->if_contains("in_flight") : nullptr;
    if (!name || !name->is_string() || !replicas || !replicas->is_array() || !counts ||
        !counts->is_array() || replicas->as_array().size() != counts->as_array().size())
      return std::nullopt;
    for (size_t k = 0; k < models.size(); ++k) {
      if (models[k]->name() != name->as_string()) continue;
      for (size_t j = 0; j < replicas->as_array().size(); ++j) {
        const json::value& id = replicas->as_array()[j];
        const json::value& n = counts->as_array()[j];
        if (!id.is_string() || !n.is_int64() || n.as_int64() < 0 || n.as_int64() > kMostInFlight)
          return std::nullopt;
        for (int i = 0; i < models[k]->num_replicas(); ++i) {
          if (models[k]->ReplicaStateId(i) == id.as_string())
            out[k][i] = static_cast<int>(n.as_int64());
        }
      }
    }
  }
  return out;
}

}  // namespace warden
