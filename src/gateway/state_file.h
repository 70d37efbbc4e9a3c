// The gateway's state file: where each model's conversations are homed, saved so that a restarted
// gateway sends their next turns back to the replicas whose prefix caches hold their histories
// (placed afresh, each would compute its whole history again).
//
// Replicas are named by URL and data-parallel rank, not by position, so a file still applies
// after the config's replica list is reordered or grows; conversations homed on a replica that is
// no longer configured are dropped. Time is saved as idle seconds plus the Unix time of the save,
// so the time the gateway was down counts as idle time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/routing/response_chain.h"
#include "core/routing/session_table.h"
#include "gateway/change_log.h"
#include "gateway/patched_settings.h"

namespace warden {

struct ModelSnapshot {
  std::string name;
  std::vector<std::string> replicas;  // the replica at each index, as ReplicaId names it
  std::vector<SessionTable::SavedConversation> conversations;  // most recently seen first
  // Responses API: the responses known, oldest first, each with the index in `replicas` of the
  // replica that stored it (-1: not known) (core/routing/response_chain.h).
  std::vector<StoredResponse> responses;
  // The replicas drained through the admin API (as ReplicaId names them): they stay drained.
  std::vector<std::string> draining;
  double drain_changed_at = 0;  // Unix time an operator last drained or took back one (0: never)
  // The LoRA adapters loaded (in the order loaded) and unloaded through the gateway or its peers
  // (gateway/adapter_update.h): name, the body of the request that loaded it, the Unix time.
  struct SavedAdapter {
    std::string name;
    std::string request_body;  // empty when unloaded
    int64_t at_us = 0;         // Unix microseconds; 0 in files of earlier versions
    bool loaded = true;
  };
  std::vector<SavedAdapter> adapters;
  int64_t adapters_forgotten_before_us = 0;  // LoadedAdapters::forgotten_before_us
  // Adapter updates through the gateway that a server missed, kept to be sent to it later: the
  // adapter, the server's URL, and whether it is a reload in place (else an unload).
  struct KeptAdapterUpdate {
    std::string name;
    std::string server;
    bool load = false;
  };
  std::vector<KeptAdapterUpdate> kept_adapter_updates;
  // The settings changed through the admin API, and the config's values then (patched_settings.h).
  std::vector<PatchedSetting> patched_settings;
  // When each setting last changed (Unix time), and whether through the admin API (here or at a
  // peer: shared with the peers) or by the config (ModelState::SharedSettings).
  struct SettingChangeTime {
    std::string setting;
    double at = 0;
    bool shared = false;
    std::string config_value;  // what the config gave it then (PatchedSetting's form)
    bool operator==(const SettingChangeTime&) const = default;
  };
  std::vector<SettingChangeTime> setting_changes;
  // What changed in the model's routing (the panel's chart markers), oldest first.
  std::vector<ChangeLog::Change> changes;
  // The panel's chart (prompt tokens per replica over the last hour, core/routing/
  // token_history.h): its buckets that counted any, oldest first, each with its start (Unix time)
  // and its tokens per replica as `replicas` names them, then those the engine's balancer placed.
  struct HistoryBucket {
    double start_unix = 0;
    std::vector<int64_t> cached, computed;  // replicas.size() + 1 each
  };
  double history_bucket_s = 0;  // 0: no history saved (a file of an earlier version)
  double history_since = 0;     // Unix time the chart's counts start from
  std::vector<HistoryBucket> history;
  // Since then, the times it counted nothing, the gateway being down (Unix from, to).
  std::vector<std::pair<double, double>> history_gaps;
  double saved_at = 0;  // Unix time of the save (read from the file, not written per model)
};

// How the state file names a replica: its URL, with "#rank=N" for a rank of a data-parallel server.
std::string ReplicaId(std::string_view url, int rank);

// The state file's text for `models`, saved at `unix_time` by a gateway started at
// `writer_start` (Unix seconds).
std::string StateToJson(std::span<const ModelSnapshot> models, double unix_time,
                        double writer_start = 0);

// What of a state file ParseState had to skip as malformed (a hand-edited file, say).
struct StateDamage {
  size_t models = 0;         // whole models
  size_t conversations = 0;  // conversations of the models read
  size_t replicas = 0;       // replicas not named (their conversations are then dropped)
  bool any() const { return models + conversations + replicas > 0; }
};

// Parses a state file written by StateToJson; each conversation's idle time grows by the time
// from the save to `unix_now`. Returns false with a reason when the text is not such a file;
// else what it skipped as malformed goes in `*damage` (if given).
bool ParseState(std::string_view text, double unix_now, std::vector<ModelSnapshot>* models,
                std::string* error, StateDamage* damage = nullptr);

// The saved model's conversations with their homes (and last replicas) renumbered to `replicas`,
// the current ones by ReplicaId; those homed on a replica not among them are dropped (counted
// in `*dropped`).
std::vector<SessionTable::SavedConversation> MapToReplicas(const ModelSnapshot& saved,
                                                           std::span<const std::string> replicas,
                                                           size_t* dropped);

// Writes `contents` to `path` through a temporary file (a unique name beside it) renamed over it,
// the file and then its directory synced, so a reader, a crash or a power cut never leaves half a
// file. A symlink at `path` stays: the file it names is written (FollowSymlinks); what is there
// already must be a regular file (a device or a pipe is never replaced). With `may_replace`, the
// rename happens only if it returns true just before it (else false, with error "refused").
// Returns false with a reason.
bool WriteFileAtomically(const std::string& path, std::string_view contents, std::string* error,
                         const std::function<bool()>& may_replace = {});

// The start time (Unix seconds) of the gateway that wrote the state file at `path`, read from
// the file's opening; 0 when there is no such file or it does not say. A gateway writes over a
// state file only if this is not later than its own start: a newer gateway, started in its
// place, owns the file.
double StateFileWriterStart(const std::string& path);

// Reads a state file: a regular file of at most 1 GiB. Returns false with a reason; `*missing`
// tells whether it failed because there is no such file yet.
bool ReadStateFile(const std::string& path, std::string* text, bool* missing, std::string* error);

}  // namespace warden
