#include "gateway/state_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/routing/admission_queue.h"
#include "os/follow_symlinks.h"
#include "os/read_file.h"

namespace warden {
namespace json = boost::json;

namespace {

// A setting's value as this version spells it: an admission mode an earlier one saved as typed
// ("recent:04") is the config's "recent:4", not a change of it.
std::string SettingSpelling(std::string_view setting, std::string_view value) {
  return setting == "admission" ? CanonicalAdmission(std::string(value)) : std::string(value);
}

constexpr int kVersion = 1;

json::object ConversationToJson(const SessionTable::SavedConversation& c) {
  json::object o;
  o["key"] = c.key;
  o["home"] = c.home;
  o["last_replica"] = c.last_replica;
  o["idle_s"] = c.idle_s;
  o["context_tokens"] = c.context_tokens;
  if (c.opened_only) o["opened_only"] = true;
  if (c.last_end_replica >= 0) o["last_end_replica"] = c.last_end_replica;
  if (c.last_prompt_tokens > 0) o["last_prompt_tokens"] = c.last_prompt_tokens;
  if (c.retired) o["retired"] = true;
  if (c.left) o["left"] = true;
  if (c.end_idle_s >= 0) o["end_idle_s"] = c.end_idle_s;
  if (c.thread_model != 0) {
    o["thread_model"] = c.thread_model;
    o["thread_body_bytes"] = c.thread_body_bytes;
  }
  return o;
}

// The number at `name` in `o`, or `fallback` when absent; false when present and not a number.
bool ReadNumber(const json::object& o, std::string_view name, double fallback, double* out) {
  const json::value* v = o.if_contains(name);
  if (!v) {
    *out = fallback;
    return true;
  }
  if (!v->is_number()) return false;
  *out = v->to_number<double>();
  return std::isfinite(*out);
}

bool IsUint32(double x) {
  return x >= 0 && x <= double(std::numeric_limits<uint32_t>::max()) && x == std::floor(x);
}

// The longest idle time a state file holds (a conversation idle longer is refused as malformed).
constexpr double kMaxSavedIdleS = 1e11;

bool ConversationFromJson(const json::value& v, double extra_idle_s,
                          SessionTable::SavedConversation* c) {
  const json::object* o = v.if_object();
  if (!o) return false;
  const json::value* key = o->if_contains("key");
  if (!key || !key->is_string() || key->as_string().empty()) return false;
  double home, last, idle, context, last_end, last_prompt, thread_model, thread_bytes, end_idle;
  if (!ReadNumber(*o, "home", -1, &home) || !ReadNumber(*o, "last_replica", -1, &last) ||
      !ReadNumber(*o, "idle_s", 0, &idle) || !ReadNumber(*o, "context_tokens", 0, &context) ||
      !ReadNumber(*o, "last_end_replica", -1, &last_end) ||
      !ReadNumber(*o, "last_prompt_tokens", 0, &last_prompt) ||
      !ReadNumber(*o, "thread_model", 0, &thread_model) ||
      !ReadNumber(*o, "thread_body_bytes", 0, &thread_bytes) ||
      !ReadNumber(*o, "end_idle_s", -1, &end_idle) || end_idle > kMaxSavedIdleS)
    return false;
  // A replica is an index: a hand-edited 1.5 names none.
  if (!(home >= 0 && home < 1e6) || home != std::floor(home) || last != std::floor(last) ||
      last_end != std::floor(last_end) || !(idle >= 0 && idle <= kMaxSavedIdleS) ||
      !(context >= 0 && context <= double(SessionTable::kMaxContextTokens)) ||
      !(last_prompt >= 0 && last_prompt <= double(SessionTable::kMaxContextTokens)))
    return false;
  c->key = std::string(key->as_string());
  c->home = static_cast<int>(home);
  c->last_replica = last >= 0 && last < 1e6 ? static_cast<int>(last) : -1;
  // A save from long ago (or a saved_at far in the past) leaves a conversation idle for longer than
  // any timeout, and no longer than a file can say again.
  c->idle_s = std::min(idle + extra_idle_s, kMaxSavedIdleS);
  c->end_idle_s = end_idle >= 0 ? std::min(end_idle + extra_idle_s, kMaxSavedIdleS) : -1;
  c->context_tokens = static_cast<int64_t>(context);
  c->last_end_replica = last_end >= 0 && last_end < 1e6 ? static_cast<int>(last_end) : -1;
  c->last_prompt_tokens = static_cast<int64_t>(last_prompt);
  // Only a reference (ModelRouter::IsSideRequest): one that is not a 32-bit count is left out.
  if (IsUint32(thread_model) && IsUint32(thread_bytes)) {
    c->thread_model = static_cast<uint32_t>(thread_model);
    c->thread_body_bytes = static_cast<uint32_t>(thread_bytes);
  }
  const auto flag = [&](std::string_view name) {
    const json::value* f = o->if_contains(name);
    return f && f->is_bool() && f->get_bool();
  };
  c->opened_only = flag("opened_only");
  c->retired = flag("retired");
  c->left = flag("left");
  return true;
}

json::object HistoryToJson(const ModelSnapshot& m) {
  json::array buckets;
  for (const ModelSnapshot::HistoryBucket& b : m.history)
    buckets.push_back(json::array{b.start_unix, json::array(b.cached.begin(), b.cached.end()),
                                  json::array(b.computed.begin(), b.computed.end())});
  json::array gaps;
  for (const auto& [from, to] : m.history_gaps) gaps.push_back(json::array{from, to});
  return json::object{{"bucket_s", m.history_bucket_s},
                      {"since", m.history_since},
                      {"buckets", std::move(buckets)},
                      {"gaps", std::move(gaps)}};
}

// A list of `n` token counts (whole numbers, not negative, and far from overflowing a sum of
// them: 2^40 tokens in 10 s is more than any replica reads).
bool ReadCounts(const json::value& v, size_t n, std::vector<int64_t>* out) {
  constexpr int64_t kMaxBucketTokens = int64_t{1} << 40;
  const json::array* a = v.if_array();
  if (!a || a->size() != n) return false;
  out->clear();
  for (const json::value& c : *a) {
    if (!c.is_int64() || c.as_int64() < 0 || c.as_int64() > kMaxBucketTokens) return false;
    out->push_back(c.as_int64());
  }
  return true;
}

// The chart's buckets, each skipped when malformed (a chart is worth less than a conversation's
// home: no damage is reported).
void HistoryFromJson(const json::value& v, size_t slots, ModelSnapshot* m) {
  const json::object* o = v.if_object();
  const json::value* bucket_s = o ? o->if_contains("bucket_s") : nullptr;
  const json::value* since = o ? o->if_contains("since") : nullptr;
  const json::value* buckets = o ? o->if_contains("buckets") : nullptr;
  if (!bucket_s || !bucket_s->is_number() || !since || !since->is_number() || !buckets ||
      !buckets->is_array())
    return;
  const double size = bucket_s->to_number<double>();
  if (!std::isfinite(size) || size <= 0 || !std::isfinite(since->to_number<double>())) return;
  m->history_bucket_s = size;
  m->history_since = since->to_number<double>();
  for (const json::value& b : buckets->as_array()) {
    const json::array* t = b.if_array();
    ModelSnapshot::HistoryBucket bucket;
    if (!t || t->size() != 3 || !(*t)[0].is_number() ||
        !std::isfinite((*t)[0].to_number<double>()) ||
        !ReadCounts((*t)[1], slots, &bucket.cached) ||
        !ReadCounts((*t)[2], slots, &bucket.computed))
      continue;
    bucket.start_unix = (*t)[0].to_number<double>();
    m->history.push_back(std::move(bucket));
  }
  const json::value* gaps = o->if_contains("gaps");
  for (const json::value& g : gaps && gaps->is_array() ? gaps->as_array() : json::array()) {
    const json::array* t = g.if_array();
    if (t && t->size() == 2 && (*t)[0].is_number() && (*t)[1].is_number() &&
        std::isfinite((*t)[0].to_number<double>()) && std::isfinite((*t)[1].to_number<double>()))
      m->history_gaps.emplace_back((*t)[0].to_number<double>(), (*t)[1].to_number<double>());
  }
}

bool ModelFromJson(const json::value& v, double extra_idle_s, ModelSnapshot* m,
                   StateDamage* damage) {
  const json::object* o = v.if_object();
  if (!o) return false;
  const json::value* name = o->if_contains("name");
  const json::value* replicas = o->if_contains("replicas");
  const json::value* conversations = o->if_contains("conversations");
  if (!name || !name->is_string() || !replicas || !replicas->is_array() || !conversations ||
      !conversations->is_array())
    return false;
  m->name = std::string(name->as_string());
  for (const json::value& r : replicas->as_array()) {
    // A replica not named names none here: its conversations are dropped, not the model's.
    if (!r.is_string()) ++damage->replicas;
    m->replicas.emplace_back(r.is_string() ? std::string_view(r.as_string()) : "");
  }
  m->conversations.reserve(conversations->as_array().size());
  for (const json::value& c : conversations->as_array()) {
    SessionTable::SavedConversation saved;
    // One bad entry loses that conversation's home, not the file.
    if (ConversationFromJson(c, extra_idle_s, &saved)) {
      m->conversations.push_back(std::move(saved));
    } else {
      ++damage->conversations;
    }
  }
  if (const json::value* responses = o->if_contains("responses");
      responses && responses->is_array()) {
    // Beside them, where each was stored (a file of an earlier version has none).
    const json::value* stored_on = o->if_contains("response_replicas");
    const json::array* replicas_of =
        stored_on && stored_on->is_array() &&
                stored_on->as_array().size() == responses->as_array().size()
            ? &stored_on->as_array()
            : nullptr;
    for (size_t i = 0; i < responses->as_array().size(); ++i) {
      const json::array* pair = responses->as_array()[i].if_array();
      if (!pair || pair->size() != 2 || !(*pair)[0].is_string() || !(*pair)[1].is_string())
        continue;
      const json::value* replica = replicas_of ? &(*replicas_of)[i] : nullptr;
      m->responses.push_back({std::string((*pair)[0].as_string()),
                              std::string((*pair)[1].as_string()),
                              replica && replica->is_int64() ? int(replica->as_int64()) : -1});
    }
  }
  if (const json::value* draining = o->if_contains("draining"); draining && draining->is_array()) {
    for (const json::value& r : draining->as_array())
      if (r.is_string()) m->draining.emplace_back(r.as_string());
  }
  if (const json::value* at = o->if_contains("drain_changed_at"); at && at->is_number())
    m->drain_changed_at = at->to_number<double>();
  if (const json::value* adapters = o->if_contains("loaded_adapters");
      adapters && adapters->is_array()) {
    for (const json::value& a : adapters->as_array()) {
      const json::array* t = a.if_array();
      if (!t || t->size() < 2 || !(*t)[0].is_string() || !(*t)[1].is_string()) continue;
      const int64_t at = t->size() > 2 && (*t)[2].is_int64() ? (*t)[2].as_int64() : 0;
      m->adapters.push_back(
          {std::string((*t)[0].as_string()), std::string((*t)[1].as_string()), at, true});
    }
  }
  if (const json::value* adapters = o->if_contains("unloaded_adapters");
      adapters && adapters->is_array()) {
    for (const json::value& a : adapters->as_array()) {
      const json::array* t = a.if_array();
      if (t && t->size() == 2 && (*t)[0].is_string() && (*t)[1].is_int64())
        m->adapters.push_back({std::string((*t)[0].as_string()), "", (*t)[1].as_int64(), false});
    }
  }
  if (const json::value* before = o->if_contains("adapters_forgotten_before_us");
      before && before->is_int64())
    m->adapters_forgotten_before_us = before->as_int64();
  if (const json::value* kept = o->if_contains("kept_adapter_updates"); kept && kept->is_array()) {
    for (const json::value& k : kept->as_array()) {
      const json::array* t = k.if_array();
      if (t && t->size() == 3 && (*t)[0].is_string() && (*t)[1].is_string() &&
          (*t)[2].is_string() && ((*t)[2].as_string() == "load" || (*t)[2].as_string() == "unload"))
        m->kept_adapter_updates.push_back({std::string((*t)[0].as_string()),
                                           std::string((*t)[1].as_string()),
                                           (*t)[2].as_string() == "load"});
    }
  }
  if (const json::value* patched = o->if_contains("patched_settings");
      patched && patched->is_array()) {
    for (const json::value& p : patched->as_array()) {
      const json::array* t = p.if_array();
      if (t && t->size() == 3 && (*t)[0].is_string() && (*t)[1].is_string() && (*t)[2].is_string())
        m->patched_settings.push_back({std::string((*t)[0].as_string()),
                                       SettingSpelling((*t)[0].as_string(), (*t)[1].as_string()),
                                       SettingSpelling((*t)[0].as_string(), (*t)[2].as_string())});
    }
  }
  if (const json::value* changes = o->if_contains("setting_changes");
      changes && changes->is_array()) {
    for (const json::value& c : changes->as_array()) {
      const json::array* t = c.if_array();
      if (t && t->size() == 4 && (*t)[0].is_string() && (*t)[1].is_number() &&
          std::isfinite((*t)[1].to_number<double>()) && (*t)[2].is_bool() && (*t)[3].is_string())
        m->setting_changes.push_back({std::string((*t)[0].as_string()), (*t)[1].to_number<double>(),
                                      (*t)[2].get_bool(),
                                      SettingSpelling((*t)[0].as_string(), (*t)[3].as_string())});
    }
  }
  if (const json::value* changes = o->if_contains("changes"); changes && changes->is_array()) {
    for (const json::value& c : changes->as_array()) {
      const json::array* t = c.if_array();
      if (t && t->size() == 3 && (*t)[0].is_number() &&
          std::isfinite((*t)[0].to_number<double>()) && (*t)[1].is_string() && (*t)[2].is_string())
        m->changes.push_back({(*t)[0].to_number<double>(), std::string((*t)[1].as_string()),
                              std::string((*t)[2].as_string())});
    }
  }
  if (const json::value* history = o->if_contains("history"))
    HistoryFromJson(*history, m->replicas.size() + 1, m);
  return true;
}

// Restore's order, whatever the file's (a hand-edited one, say), each key once: its most recent.
void MostRecentFirst(std::vector<SessionTable::SavedConversation>* conversations) {
  std::stable_sort(conversations->begin(), conversations->end(),
                   [](const auto& a, const auto& b) { return a.idle_s < b.idle_s; });
  std::unordered_set<std::string_view> seen;
  std::vector<SessionTable::SavedConversation> unique;
  unique.reserve(conversations->size());  // no reallocation: the views in `seen` stay valid
  for (auto& c : *conversations) {
    if (seen.contains(c.key)) continue;
    unique.push_back(std::move(c));
    seen.insert(unique.back().key);
  }
  *conversations = std::move(unique);
}

}  // namespace

std::string ReplicaId(std::string_view url, int rank) {
  return rank >= 0 ? fmt::format("{}#rank={}", url, rank) : std::string(url);
}

std::string StateToJson(std::span<const ModelSnapshot> models, double unix_time,
                        double writer_start) {
  json::array out_models;
  for (const ModelSnapshot& m : models) {
    json::array replicas(m.replicas.begin(), m.replicas.end());
    json::array conversations;
    conversations.reserve(m.conversations.size());
    for (const auto& c : m.conversations) conversations.push_back(ConversationToJson(c));
    json::array responses, response_replicas;
    responses.reserve(m.responses.size());
    for (const StoredResponse& r : m.responses) {
      responses.push_back(json::array{r.id, r.key});
      response_replicas.push_back(r.replica);
    }
    json::array adapters, unloaded;
    for (const ModelSnapshot::SavedAdapter& a : m.adapters) {
      if (a.loaded) {
        adapters.push_back(
            json::array{json::string(a.name), json::string(a.request_body), a.at_us});
      } else {
        unloaded.push_back(json::array{json::string(a.name), a.at_us});
      }
    }
    json::array kept;
    for (const ModelSnapshot::KeptAdapterUpdate& k : m.kept_adapter_updates)
      kept.push_back(json::array{json::string(k.name), json::string(k.server),
                                 json::string(k.load ? "load" : "unload")});
    json::array patched;
    for (const PatchedSetting& p : m.patched_settings)
      patched.push_back(json::array{json::string(p.setting), json::string(p.value),
                                    json::string(p.config_value)});
    json::array changes;
    for (const ModelSnapshot::SettingChangeTime& c : m.setting_changes)
      changes.push_back(
          json::array{json::string(c.setting), c.at, c.shared, json::string(c.config_value)});
    json::array routing_changes;
    for (const ChangeLog::Change& c : m.changes)
      routing_changes.push_back(json::array{c.unix, json::string(c.what), json::string(c.by)});
    out_models.push_back(
        json::object{{"name", m.name},
                     {"replicas", std::move(replicas)},
                     {"conversations", std::move(conversations)},
                     {"responses", std::move(responses)},
                     {"response_replicas", std::move(response_replicas)},
                     {"draining", json::array(m.draining.begin(), m.draining.end())},
                     {"drain_changed_at", m.drain_changed_at},
                     {"loaded_adapters", std::move(adapters)},
                     {"unloaded_adapters", std::move(unloaded)},
                     {"adapters_forgotten_before_us", m.adapters_forgotten_before_us},
                     {"kept_adapter_updates", std::move(kept)},
                     {"patched_settings", std::move(patched)},
                     {"setting_changes", std::move(changes)},
                     {"changes", std::move(routing_changes)},
                     {"history", HistoryToJson(m)}});
  }
  // The writer's start first: StateFileWriterStart reads only the file's opening.
  json::object root{{"warden_state", kVersion},
                    {"writer_started_at", writer_start},
                    {"saved_at", unix_time},
                    {"models", std::move(out_models)}};
  return json::serialize(root) + "\n";
}

bool ParseState(std::string_view text, double unix_now, std::vector<ModelSnapshot>* models,
                std::string* error, StateDamage* damage) {
  StateDamage ignored;
  if (!damage) damage = &ignored;
  *damage = {};
  boost::system::error_code ec;
  const json::value root = json::parse(text, ec);
  if (ec && text.starts_with("{\"warden_state\"")) {  // written by a gateway, and cut short
    *error =
        fmt::format("a warden state file that is not whole or not valid JSON ({})", ec.message());
    return false;
  }
  const json::object* o = ec ? nullptr : root.if_object();
  const json::value* version = o ? o->if_contains("warden_state") : nullptr;
  if (!version || !version->is_int64()) {
    *error = "not a warden state file";
    return false;
  }
  if (version->as_int64() != kVersion) {
    *error =
        fmt::format("state file version {}, this gateway reads {}", version->as_int64(), kVersion);
    return false;
  }
  double saved_at;
  const json::value* list = o->if_contains("models");
  if (!ReadNumber(*o, "saved_at", unix_now, &saved_at) || !list || !list->is_array()) {
    *error = "a state file needs saved_at (a number) and models (a list)";
    return false;
  }
  const double down_s = std::max(0.0, unix_now - saved_at);
  models->clear();
  for (const json::value& v : list->as_array()) {
    ModelSnapshot m;
    // One bad model loses its own conversations' homes, not the others'.
    if (!ModelFromJson(v, down_s, &m, damage)) {
      ++damage->models;
      continue;
    }
    MostRecentFirst(&m.conversations);
    m.saved_at = saved_at;
    models->push_back(std::move(m));
  }
  return true;
}

std::vector<SessionTable::SavedConversation> MapToReplicas(const ModelSnapshot& saved,
                                                           std::span<const std::string> replicas,
                                                           size_t* dropped) {
  std::unordered_map<std::string_view, int> now_at;
  for (size_t i = 0; i < replicas.size(); ++i) now_at.emplace(replicas[i], static_cast<int>(i));
  // Saved index -> current index (-1: gone).
  std::vector<int> renumber(saved.replicas.size(), -1);
  for (size_t i = 0; i < saved.replicas.size(); ++i) {
    auto it = now_at.find(saved.replicas[i]);
    if (it != now_at.end()) renumber[i] = it->second;
  }
  const auto map = [&](int index) {
    return index >= 0 && index < static_cast<int>(renumber.size()) ? renumber[index] : -1;
  };
  std::vector<SessionTable::SavedConversation> out;
  out.reserve(saved.conversations.size());
  *dropped = 0;
  for (const auto& c : saved.conversations) {
    SessionTable::SavedConversation mapped = c;
    mapped.home = map(c.home);
    mapped.last_replica = map(c.last_replica);
    mapped.last_end_replica = map(c.last_end_replica);
    if (mapped.home < 0) {
      ++*dropped;
      continue;
    }
    out.push_back(std::move(mapped));
  }
  return out;
}

namespace {

// An exclusive flock on the file `path` (made if need be) while it lives, waited for up to
// `patience`: none if the file cannot be opened or the lock is not had by then (a writer stopped
// halfway, say), and the caller goes on without it rather than hang a drain.
class FileLock {
 public:
  FileLock(const std::string& path, std::chrono::milliseconds patience)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    const auto give_up = std::chrono::steady_clock::now() + patience;
    while (fd_ >= 0 && ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= give_up) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // and the lock with it
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

bool WriteFileAtomically(const std::string& named, std::string_view contents, std::string* error,
                         const std::function<bool()>& may_replace) {
  const std::string path = FollowSymlinks(named);
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  if (!ec && type != std::filesystem::file_type::not_found &&
      type != std::filesystem::file_type::regular) {
    *error = fmt::format("{}: not a regular file", path);
    return false;
  }
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    *error = fmt::format("{}: {}", temp, std::strerror(errno));
    return false;
  }
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool written = done == contents.size() && ::fchmod(fd, 0644) == 0 && ::fsync(fd) == 0;
  const int write_errno = errno;
  if (::close(fd) != 0 || !written) {
    *error = fmt::format("{}: {}", temp, std::strerror(written ? errno : write_errno));
    std::remove(temp.c_str());
    return false;
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  {
    // The check and the rename as one step among writers that check (two gateways on one file,
    // the one taking over and the one it replaces): a lock on `<path>.lock`, held for as long.
    constexpr std::chrono::seconds kLockPatience{1};
    std::optional<FileLock> lock;
    if (may_replace) lock.emplace(path + ".lock", kLockPatience);
    if (may_replace && !may_replace()) {
      *error = "refused";
      std::remove(temp.c_str());
      return false;
    }
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
      *error = fmt::format("{}: {}", path, std::strerror(errno));
      std::remove(temp.c_str());
      return false;
    }
  }
  // The rename itself is durable once the directory is.
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return true;
}

double StateFileWriterStart(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) return 0;
  char opening[256];
  const ssize_t n = ::read(fd, opening, sizeof opening - 1);
  ::close(fd);
  if (n <= 0) return 0;
  opening[n] = '\0';
  constexpr std::string_view kField = "\"writer_started_at\":";
  const char* at = std::strstr(opening, kField.data());
  if (!at) return 0;
  const double start = std::strtod(at + kField.size(), nullptr);
  return std::isfinite(start) ? start : 0;
}

bool ReadStateFile(const std::string& path, std::string* text, bool* missing, std::string* error) {
  constexpr uintmax_t kMaxBytes = uintmax_t{1} << 30;
  const bool read = ReadRegularFile(path, kMaxBytes, text, error);
  *missing = !read && *error == "no such file";
  return read;
}

}  // namespace warden
