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

#include "core/protocol/adapter_request.h"
#include "gateway/served_names.h"

namespace warden {

enum class AdapterPath {
  kNone,
  kLoad,    // POST /v1/load_lora_adapter
  kUnload,  // POST /v1/unload_lora_adapter
  // SageMaker's /adapters and /adapters/{name}, which vLLM also serves: they would load or unload
  // on the one server reached.
  kSageMaker,
};
// What a request path is, read as the servers read it (NormalisedPath): "/v1/load%5Flora_adapter"
// is the load too.
AdapterPath ClassifyAdapterPath(std::string_view path);
// The same for a path normalised already (NormalisedPathView): escapes are not decoded twice.
AdapterPath ClassifyNormalisedAdapterPath(std::string_view normalised);

// What one server made of the request.
struct ServerAdapterResult {
  std::string url;
  int status = 0;    // 0: no answer (or not sent: see body)
  std::string body;  // its answer, or with status 0 what went wrong
  // Whether its /v1/models lists the adapter afterwards (unknown when it was not read), and the
  // adapter's "root" there (vLLM lists the lora_path it was loaded from).
  std::optional<bool> listed = {};
  std::string listed_root = {};
  // Not sent: the server was down. The gateway sends it when the server is back (a load through
  // LoadedAdapters::MissingFrom, an unload or a reload in place through
  // LoadedAdapters::KeepForLater).
  bool deferred = false;
};

// The answer for the client: a text line on success as vLLM's, else an error body.
struct AdapterUpdateAnswer {
  int status = 200;
  std::string body;
  bool text = false;  // a plain text body (else JSON)
  // Some server has the adapter as asked now (loaded from this request, or unloaded): the
  // gateway remembers (or forgets) the load.
  bool took_effect = false;
  size_t done = 0;  // servers that did it (2xx)
  // The servers (indices) that were down, gave no answer or failed: a kept update's candidates.
  std::vector<size_t> missed = {};
};

// One answer from every server's. A server either did it (2xx), or was already as asked (a load
// refused with vLLM's "has already been loaded" while it lists the adapter from the same
// lora_path, not in place; an unload refused with "cannot be found" while it does not list it),
// or was down (deferred), or failed. Some did it and none failed: 200, a line of text that names
// the servers down, if any. All reached already as asked: the first such server's answer (vLLM's
// 400 or 404), unchanged. Some failed: 502 naming them and what they said, unless none is as
// asked, when the first failure's answer is passed on (a single server is transparent), explained
// when it is FastAPI's 404 for a route vLLM did not register, or the replica refused the gateway's
// key. When no server is as asked, the servers down count as failures: nothing will follow.
AdapterUpdateAnswer SummariseAdapterUpdate(std::string_view model, const AdapterRequest& request,
                                           bool load,
                                           const std::vector<ServerAdapterResult>& servers);

// Unix time in microseconds: what LoadedAdapters stamps its changes with (an integer, so that it
// survives a JSON round trip exactly).
int64_t UnixMicros();

// The adapters loaded through the gateway, with the request that loaded them: loaded again on a
// server that comes back without them (a restarted vLLM has forgotten the adapters loaded while it
// ran). Each load and unload carries the Unix time it was made at, so that peer gateways can
// share them (Records, Merge): for each name, the most recent wins. A change made here is stamped
// after anything known of its name, so that it wins over a peer whose clock runs ahead.
// Thread-safe: the shards, the scrape loops and the peers' messages share it.
class LoadedAdapters {
 public:
  struct Adapter {
    std::string name;
    std::string request_body;  // of /v1/load_lora_adapter
    int64_t at_us = 0;         // when it was loaded (UnixMicros)
  };
  // Loaded now (`now_us`, or just after the name's last change if that is later).
  void Loaded(std::string name, std::string request_body, int64_t now_us);
  // Forgets `name`, unloaded now, returning what was remembered of it and, in `*taken_at_us`,
  // the time the unload was stamped with.
  std::optional<Adapter> Take(std::string_view name, int64_t now_us, int64_t* taken_at_us);
  // An unload that took effect nowhere: the unload Take stamped `taken_at_us` is forgotten, and
  // what it took (if anything) given back just after it, unless a newer load or unload of the
  // name came meanwhile (from a peer).
  void UndoTake(std::string_view name, std::optional<Adapter> taken, int64_t taken_at_us);

  // What is known of one name, for peers and the state file: loaded by `request_body`, or
  // unloaded, through a gateway at `at_us`.
  struct Record {
    std::string name;
    std::string request_body;  // empty when unloaded
    int64_t at_us = 0;
    bool loaded = true;
  };
  // Every name's record, unloads included (the most recent kKeptUnloads of those).
  std::vector<Record> Records() const;
  // Takes `record` if it is newer than what is known of its name, and than the unloads forgotten
  // (below); returns whether it did. A newer unload is kept for every server (KeepForLater), so
  // that a server loaded meanwhile (by a gateway cut off from the one that unloaded) loses it too.
  bool Merge(const Record& record, size_t servers);
  // Unloads beyond this many are forgotten, oldest first; what is not newer than the newest of
  // them is refused by Merge, so that a peer that missed the unload cannot bring the load back.
  static constexpr size_t kKeptUnloads = 256;
  int64_t forgotten_before_us() const;  // for the state file
  void set_forgotten_before_us(int64_t at_us);

  // Whether `adapter` is remembered, loaded by the same request.
  bool Has(const Adapter& adapter) const;
  // Whether an adapter called `name` is remembered as loaded, by whatever request.
  bool IsLoaded(std::string_view name) const;
  // The adapters `listed` (what a server serves now) lacks, in the order they were loaded.
  std::vector<Adapter> MissingFrom(const std::vector<ServedName>& listed) const;
  std::vector<Adapter> All() const;

  // An update that took effect but did not reach `server` (down, no answer, or it failed there),
  // kept to be sent when a read of its names shows it is still due (ReconcileAdapters): an unload
  // while the server still lists the adapter; a reload in place (`load_inplace`) while it lists it
  // (one it lacks is loaded anyway: MissingFrom). The next update of the name through the gateway
  // replaces it.
  struct KeptUpdate {
    std::string name;
    size_t server = 0;
    bool load = false;  // a reload in place, with the remembered request; else an unload
    bool operator==(const KeptUpdate&) const = default;
  };
  void KeepForLater(KeptUpdate update);
  // The updates kept for `server` that `listed` (what it serves now) still needs; the others are
  // dropped.
  std::vector<KeptUpdate> UpdatesDue(size_t server, const std::vector<ServedName>& listed);
  // Whether `update` is still kept (not replaced by a newer update of its name since).
  bool Kept(const KeptUpdate& update) const;
  // `update` reached its server.
  void Done(const KeptUpdate& update);
  std::vector<KeptUpdate> AllKept() const;  // for the state file

  // Grows with every change (for the state file: saved again when it moved).
  uint64_t version() const;

 private:
  // When `name` was last loaded or unloaded (0: never).
  int64_t LastChangeLocked(std::string_view name) const;  // REQUIRES: mu_ held
  // A local change's time: `now_us`, or just after the name's last change.
  int64_t StampLocked(std::string_view name, int64_t now_us) const;  // REQUIRES: mu_ held
  void EraseLocked(std::string_view name);                           // REQUIRES: mu_ held
  void AddUnloadLocked(std::string name, int64_t at_us);             // REQUIRES: mu_ held
  void DropKeptLocked(std::string_view name);                        // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::vector<Adapter> adapters_;  // mu_
  struct Unload {
    std::string name;
    int64_t at_us;
  };
  std::vector<Unload> unloads_;      // mu_, oldest first
  int64_t forgotten_before_us_ = 0;  // mu_: the newest unload forgotten
  std::vector<KeptUpdate> kept_;     // mu_
  uint64_t version_ = 0;             // mu_
};

}  // namespace warden
