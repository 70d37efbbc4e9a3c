// The model names a model's replicas serve beside the configured one, as their /v1/models lists
// them: vLLM's other --served-model-name values, and its LoRA adapters (--lora-modules, or loaded
// at run time), whose entries name the model as their parent. A request naming one of them goes to
// that model's replicas with its name unchanged. Thread-safe: the scrape loops write, every shard
// reads.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

class ServedNames {
 public:
  // `own`: the model's configured name, never listed here.
  ServedNames(std::string own, size_t servers) : own_(std::move(own)), by_server_(servers) {}

  // What server `server` (one of the model's URLs) lists now, in place of what it listed before.
  void Set(size_t server, std::vector<std::string> names);
  bool Contains(std::string_view name) const;
  // Every name some server lists, sorted, without the configured one.
  std::vector<std::string> All() const;

 private:
  const std::string own_;
  mutable std::mutex mu_;
  std::vector<std::vector<std::string>> by_server_;  // mu_
  std::vector<std::string> all_;                     // mu_: sorted, distinct
};

}  // namespace warden
