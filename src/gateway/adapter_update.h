// Loading or unloading a LoRA adapter on every server of a model at once. vLLM loads an adapter on
// the one server a request reaches (POST /v1/load_lora_adapter, /v1/unload_lora_adapter, with
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True); behind a gateway that spreads requests over several
// servers, an adapter loaded on one of them would be missing on the others. The gateway sends the
// request to each server and tells the client one answer, made here.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/served_names.h"

namespace warden {

// The two paths, as vLLM serves them.
bool IsAdapterUpdatePath(std::string_view path);
bool IsAdapterLoadPath(std::string_view path);

// The body's "lora_name"; empty when it has none (vLLM then refuses the request itself).
std::string AdapterNameOf(const std::string& body);

// What one server made of the request.
struct ServerAdapterResult {
  std::string url;
  int status = 0;    // 0: no answer
  std::string body;  // its answer, or with status 0 what went wrong
  // Whether its /v1/models lists the adapter afterwards; unknown when it was not read.
  std::optional<bool> listed_after;
};

// The answer for the client: a text line on success as vLLM's, else an error body.
struct AdapterUpdateAnswer {
  int status = 200;
  std::string body;
  bool text = false;  // a plain text body (else JSON)
};

// One answer from every server's. A server is done when its list of models afterwards says so
// (the adapter listed after a load, absent after an unload), or, unread, when it answered 2xx: so
// a server that already had the adapter (or, unloading, did not) counts as done, and sending the
// request again after a partial failure finishes the job. Every server done: 200. None: the first
// failing server's answer as it is (a single server's answer passes unchanged). Some: 502, naming
// the servers that failed and what they said.
AdapterUpdateAnswer SummariseAdapterUpdate(std::string_view model, std::string_view adapter,
                                           bool load,
                                           const std::vector<ServerAdapterResult>& servers);

// The adapters loaded through the gateway, with the request that loaded them: loaded again on a
// server that comes back without them (a restarted vLLM has forgotten the adapters loaded while it
// ran). Thread-safe: the shards and the scrape loops share it.
class LoadedAdapters {
 public:
  struct Adapter {
    std::string name;
    std::string request_body;  // of /v1/load_lora_adapter
  };
  void Loaded(std::string name, std::string request_body);
  void Unloaded(std::string_view name);
  // The adapters `listed` (what a server serves now) lacks, in the order they were loaded.
  std::vector<Adapter> MissingFrom(const std::vector<ServedName>& listed) const;

 private:
  void EraseLocked(std::string_view name);  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::vector<Adapter> adapters_;  // mu_
};

}  // namespace warden
