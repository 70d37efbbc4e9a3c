// The model names a model's replicas serve beside the configured one, as their /v1/models lists
// them: vLLM's other --served-model-name values, and its LoRA adapters (--lora-modules, or loaded
// at run time), whose entries name the model as their parent. A request naming one of them goes to
// that model's replicas with its name unchanged, and only to the servers that list it. Thread-safe:
// the scrape loops and the adapter updates write, every shard reads.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

struct ServedName {
  std::string name;
  // Listed with a parent model: a LoRA adapter, whose prompts the engine caches apart from the
  // model's. Another served name of the model itself shares the model's cache.
  bool adapter = false;
  // An adapter's "root" as its server lists it: the path vLLM loaded it from.
  std::string root = {};
  bool operator==(const ServedName&) const = default;
};

// An entry of a server's /v1/models: its id, "root", "max_model_len" (0: not said) and whether it
// names a parent model (a LoRA adapter's entry does).
struct ListedModel {
  std::string id;
  std::string root;  // "root": for a LoRA adapter, the lora_path it was loaded from
  int64_t max_model_len = 0;
  bool has_parent = false;
  // What simulates it, for a `warden sim` replica ("warden_simulated"); empty for vLLM.
  std::string simulated = {};
};

// The models a /v1/models body lists; none when it is no such list (an HTML page from a proxy).
std::optional<std::vector<ListedModel>> ReadModelList(const std::string& body);
std::vector<ServedName> NamesOf(const std::vector<ListedModel>& listed);

class ServedNames {
 public:
  // `own`: the model's configured name, never listed here.
  ServedNames(std::string own, size_t servers) : own_(std::move(own)), by_server_(servers) {}

  // What server `server` (one of the model's URLs) lists now, in place of what it listed before.
  void Set(size_t server, std::vector<ServedName> names);
  bool Contains(std::string_view name) const;
  // Whether some server lists `name` as a LoRA adapter.
  bool IsAdapter(std::string_view name) const;
  // Where adapter `name` was loaded from, as the first server listing it says; empty when no
  // server lists it as an adapter with a root.
  std::string RootOf(std::string_view name) const;
  // The servers that do not list `name`, when some server does: a request naming it can only be
  // served by the others. Empty when every server lists it, or none does.
  std::vector<size_t> ServersWithout(std::string_view name) const;
  // The servers that list `name`, in order.
  std::vector<size_t> ServersWith(std::string_view name) const;
  // Every name some server lists, sorted, without the configured one.
  std::vector<std::string> All() const;

 private:
  const std::string own_;
  mutable std::mutex mu_;
  std::vector<std::vector<ServedName>> by_server_;  // mu_
  std::vector<ServedName> all_;                     // mu_: sorted by name, distinct names
};

}  // namespace warden
