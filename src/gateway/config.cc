#include "gateway/config.h"

#include <fmt/format.h>
#include <simdjson.h>
#include <stdlib.h>  // mkstemp
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "core/routing/admission_queue.h"
#include "core/routing/policy_factory.h"
#include "gateway/api_errors.h"
#include "net/api_keys.h"
#include "net/host_allowlist.h"
#include "net/server_tls.h"
#include "net/upstream.h"
#include "os/follow_symlinks.h"
#include "os/read_file.h"
#include "util/ascii_case.h"
#include "util/glob.h"
#include "util/on_off.h"

namespace warden {
namespace {

// A config or key file is text a person writes: anything this large is something else.
constexpr uintmax_t kMaxConfigFileBytes = uintmax_t{64} << 20;

// A YAML reading error that names the field.
struct ConfigError {
  std::string message;
  int line = 0;  // where it is (from 1), when not the line of the field the message names
};

[[noreturn]] void Fail(const std::string& field, const std::string& message, int line = 0) {
  throw ConfigError{fmt::format("{}: {}", field, message), line};
}

// The edits (a letter put in, taken out or changed) between `a` and `b` (Levenshtein).
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Checks that `node` is a mapping whose keys are all `allowed`, none given twice (YAML would keep
// the first and drop the others without a word).
void CheckKeys(const YAML::Node& node, const std::string& where,
               std::initializer_list<std::string_view> allowed) {
  if (!node.IsMap()) Fail(where.empty() ? "the file" : where, "expected a mapping");
  std::set<std::string> seen;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (!seen.insert(key).second) {  // the line of its second writing (the first is taken)
      Fail(where.empty() ? key : where + "." + key, "is given twice",
           kv.first.Mark().line >= 0 ? kv.first.Mark().line + 1 : 0);
    }
    bool known = false;
    for (std::string_view a : allowed) known = known || a == key;
    if (!known) {
      std::string list;
      std::string_view closest;
      size_t closest_distance = 3;  // a misspelling: two edits at most
      for (std::string_view a : allowed) {
        list += (list.empty() ? "" : ", ") + std::string(a);
        if (const size_t d = EditDistance(key, a); d < closest_distance) {
          closest = a;
          closest_distance = d;
        }
      }
      Fail(where.empty() ? key : where + "." + key,
           closest.empty() ? fmt::format("unknown field (expected one of: {})", list)
                           : fmt::format("unknown field: did you mean {}? (expected one of: {})",
                                         closest, list),
           kv.first.Mark().line >= 0 ? kv.first.Mark().line + 1 : 0);  // the key's, not its value's
    }
  }
}

// What a field of type T takes, as the error for a value of another kind says it.
template <typename T>
constexpr const char* KindName() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  if constexpr (std::is_integral_v<T>) return "a whole number";
  if constexpr (std::is_floating_point_v<T>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  return "a valid value";
}

template <typename T>
T Read(const YAML::Node& node, const std::string& field) {
  if (node.IsNull()) Fail(field, "has no value");
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const std::string text = node.IsScalar() ? node.Scalar() : std::string();
      const std::string_view digits = std::string_view(text).substr(text.starts_with('-'));
      if (!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit))
        Fail(field, fmt::format("{} is out of range ({} to {})", text,
                                std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
    }
    Fail(field, fmt::format("'{}' is not {}", YAML::Dump(node), KindName<T>()));
  }
}

bool ReadBool(const YAML::Node& node, const std::string& field) {
  const std::string v = Read<std::string>(node, field);
  if (const std::optional<bool> on = ParseOnOff(v)) return *on;
  Fail(field, fmt::format("'{}' must be on/off, true/false or yes/no", v));
}

double ReadPositive(const YAML::Node& node, const std::string& field) {
  const double v = Read<double>(node, field);
  if (!(v > 0) || !std::isfinite(v)) Fail(field, fmt::format("{} must be a number > 0", v));
  return v;
}

int ReadInt(const YAML::Node& node, const std::string& field, int min, int max) {
  // A number past any integer type is told the field's own range too.
  const std::string text = node.IsScalar() ? node.Scalar() : std::string();
  const std::string_view digits = std::string_view(text).substr(text.starts_with('-'));
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(), ::isdigit)) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || v < min || v > max)
      Fail(field, fmt::format("{} must be between {} and {}", text, min, max));
    return static_cast<int>(v);
  }
  const int v = Read<int>(node, field);
  if (v < min || v > max) Fail(field, fmt::format("{} must be between {} and {}", v, min, max));
  return v;
}

std::vector<std::string> ReadStrings(const YAML::Node& node, const std::string& field) {
  if (node.IsScalar()) return {Read<std::string>(node, field)};
  if (!node.IsSequence()) Fail(field, "expected a list of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < node.size(); ++i)
    out.push_back(Read<std::string>(node[i], fmt::format("{}[{}]", field, i)));
  return out;
}

std::vector<std::string> ReadHostPatterns(const YAML::Node& node) {
  std::vector<std::string> patterns = ReadStrings(node, "allowed_hosts");
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (std::string error = CheckHostPattern(patterns[i]); !error.empty())
      Fail(fmt::format("allowed_hosts[{}]", i), error);
  }
  return patterns;
}

void ReadListen(const YAML::Node& node, GatewayConfig* c) {
  std::string error;
  if (!ParseListenAddress(Read<std::string>(node, "listen"), &c->host, &c->port, &error))
    Fail("listen", error);
}

// The keys in a key file (ReadKeyFile), failing with the field's name.
std::vector<std::string> ReadKeys(const std::string& path, const std::string& field) {
  std::vector<std::string> keys;
  std::string error;
  if (!ReadKeyFile(path, &keys, &error)) Fail(field, error);
  return keys;
}

std::string ReadOneKey(const std::string& path, const std::string& field) {
  std::vector<std::string> keys = ReadKeys(path, field);
  if (keys.size() > 1)
    Fail(field, fmt::format("{} holds {} keys; one is expected", path, keys.size()));
  return keys[0];
}

// api_keys: each a key, or {name: ..., key: ...}.
std::vector<ClientKey> ReadClientKeys(const YAML::Node& node) {
  if (!node.IsSequence()) Fail("api_keys", "expected a list of keys");
  std::vector<ClientKey> keys;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string where = fmt::format("api_keys[{}]", i);
    if (!node[i].IsMap()) {
      keys.push_back({"", Read<std::string>(node[i], where)});
      continue;
    }
    CheckKeys(node[i], where, {"name", "key", "max_in_flight", "tokens_per_minute"});
    if (!node[i]["key"]) Fail(where + ".key", "is required");
    ClientKey key{
        .name = node[i]["name"] ? Read<std::string>(node[i]["name"], where + ".name") : "",
        .key = Read<std::string>(node[i]["key"], where + ".key")};
    if (node[i]["max_in_flight"])
      key.max_in_flight = ReadInt(node[i]["max_in_flight"], where + ".max_in_flight", 1, 1 << 20);
    if (node[i]["tokens_per_minute"]) {
      key.tokens_per_minute =
          ReadInt(node[i]["tokens_per_minute"], where + ".tokens_per_minute", 1, 1'000'000'000);
    }
    keys.push_back(std::move(key));
  }
  return keys;
}

// `base` carries the defaults that the file's session section sets for every model.
ModelConfig ReadModel(const YAML::Node& node, const std::string& where, const ModelConfig& base,
                      const ReplacedFiles& replaced) {
  CheckKeys(node, where,
            {"name",
             "aliases",
             "url",
             "urls",
             "data_parallel_size",
             "max_num_seqs",
             "overflow_limit",
             "affinity",
             "when_affinity_off",
             "policy",
             "admission",
             "scrape_interval_s",
             "session_idle_timeout_s",
             "max_sessions",
             "inline_system_as_user",
             "idle_sleep",
             "tls_verify",
             "tls_ca_file",
             "replica_api_key",
             "replica_api_key_file"});
  ModelConfig m = base;
  if (!node["name"]) Fail(where + ".name", "is required");
  m.name = Read<std::string>(node["name"], where + ".name");
  if (node["aliases"]) m.aliases = ReadStrings(node["aliases"], where + ".aliases");
  for (size_t i = 0; i < m.aliases.size(); ++i) {
    if (m.aliases[i].empty()) Fail(fmt::format("{}.aliases[{}]", where, i), "is empty");
  }
  if (node["url"] && node["urls"])
    Fail(where, "give either url (with data_parallel_size) or urls, not both");
  if (node["url"] && node["url"].IsSequence())
    Fail(where + ".url", "is a list: several servers are given as urls (one server: url)");
  if (node["url"]) m.urls = {Read<std::string>(node["url"], where + ".url")};
  if (node["urls"]) m.urls = ReadStrings(node["urls"], where + ".urls");
  // Checked again with the command line's (ValidateGatewayConfig); here the key can be named.
  for (size_t i = 0; i < m.urls.size(); ++i) {
    UpstreamUrl parsed;
    std::string error;
    if (!ParseUpstreamUrl(m.urls[i], &parsed, &error))
      Fail(node["url"] ? where + ".url" : fmt::format("{}.urls[{}]", where, i), error);
  }
  if (node["data_parallel_size"]) {
    m.data_parallel_size =
        ReadInt(node["data_parallel_size"], where + ".data_parallel_size", 1, 1024);
  }
  if (node["max_num_seqs"])
    m.max_num_seqs = ReadInt(node["max_num_seqs"], where + ".max_num_seqs", 1, 1 << 20);
  if (node["overflow_limit"]) {
    const std::string field = where + ".overflow_limit";
    const std::string v = Read<std::string>(node["overflow_limit"], field);
    const std::optional<int> limit = ParseOverflowLimit(v);
    if (!limit)
      Fail(field, fmt::format("'{}' must be auto or a whole number 1 to {}", v, kMaxOverflowLimit));
    m.overflow_limit = *limit;
  }
  if (node["affinity"]) m.affinity = ReadBool(node["affinity"], where + ".affinity");
  if (node["when_affinity_off"]) {
    const std::string v =
        Read<std::string>(node["when_affinity_off"], where + ".when_affinity_off");
    if (v != "engine" && v != "gateway")
      Fail(where + ".when_affinity_off", fmt::format("'{}' must be engine or gateway", v));
    m.engine_balances_when_off = v == "engine";
  }
  if (node["policy"]) m.policy = Read<std::string>(node["policy"], where + ".policy");
  if (node["admission"])
    m.admission = CanonicalAdmission(Read<std::string>(node["admission"], where + ".admission"));
  if (node["scrape_interval_s"])
    m.scrape_interval_s = ReadPositive(node["scrape_interval_s"], where + ".scrape_interval_s");
  if (node["session_idle_timeout_s"]) {
    m.session_idle_timeout_s =
        ReadPositive(node["session_idle_timeout_s"], where + ".session_idle_timeout_s");
  }
  if (node["inline_system_as_user"]) {
    m.inline_system_as_user =
        ReadBool(node["inline_system_as_user"], where + ".inline_system_as_user");
  }
  if (node["idle_sleep"]) m.idle_sleep = ReadBool(node["idle_sleep"], where + ".idle_sleep");
  if (node["max_sessions"])
    m.max_sessions = ReadInt(node["max_sessions"], where + ".max_sessions", 1, 1 << 30);
  if (node["tls_verify"]) m.tls_verify = ReadBool(node["tls_verify"], where + ".tls_verify");
  if (node["tls_ca_file"]) {
    const std::string file = Read<std::string>(node["tls_ca_file"], where + ".tls_ca_file");
    if (!replaced.tls_ca_file) m.tls_ca_file = file;
  }
  if (node["replica_api_key"] && node["replica_api_key_file"])
    Fail(where, "give either replica_api_key or replica_api_key_file, not both");
  if (node["replica_api_key"]) {
    m.replica_api_key = Read<std::string>(node["replica_api_key"], where + ".replica_api_key");
    if (m.replica_api_key.empty()) {
      Fail(where + ".replica_api_key",
           "is empty (leave it out to pass the clients' own credentials on)");
    }
  }
  if (node["replica_api_key_file"]) {
    const std::string field = where + ".replica_api_key_file";
    const std::string file = Read<std::string>(node["replica_api_key_file"], field);
    if (!replaced.replica_api_key_file) m.replica_api_key = ReadOneKey(file, field);
  }
  return m;
}

// Session key headers: names a request's field can have (RFC 9110 §5.6.2 tokens), or patterns.
std::vector<std::string> ReadHeaderNames(const YAML::Node& node, const std::string& field) {
  std::vector<std::string> names = ReadStrings(node, field);
  constexpr std::string_view kTokenPunctuation = "!#$%&'*+-.^_`|~";
  for (size_t i = 0; i < names.size(); ++i) {
    const bool ok =
        !names[i].empty() && std::all_of(names[i].begin(), names[i].end(), [&](char ch) {
          return std::isalnum(static_cast<unsigned char>(ch)) || ch == '?' ||
                 kTokenPunctuation.find(ch) != std::string_view::npos;
        });
    if (!ok) {
      Fail(fmt::format("{}[{}]", field, i),
           fmt::format("'{}' is no header name (letters, digits, and !#$%&'*+-.^_`|~; * and ? as "
                       "wildcards)",
                       names[i]));
    }
  }
  return names;
}

void ReadConfig(const YAML::Node& root, GatewayConfig* c, const ReplacedFiles& replaced) {
  if (root.IsNull()) return;
  CheckKeys(root, "",
            {"listen",
             "body_limit_mb",
             "response_headers",
             "request_ids",
             "connect_timeout_s",
             "threads",
             "max_connections",
             "admin_token",
             "peers",
             "peer_sync_interval_s",
             "drain_delay_s",
             "drain_timeout_s",
             "hand_over_drain_timeout_s",
             "send_timeout_s",
             "read_timeout_s",
             "stream_keepalive_s",
             "admission_max_hold_s",
             "stall_timeout_s",
             "header_timeout_s",
             "access_log",
             "traffic_log",
             "traffic_log_block",
             "otlp_traces_endpoint",
             "api_keys",
             "api_keys_file",
             "allowed_hosts",
             "tls_cert_file",
             "tls_key_file",
             "session",
             "models"});
  if (root["listen"]) ReadListen(root["listen"], c);
  if (root["body_limit_mb"]) {
    const double mb = ReadPositive(root["body_limit_mb"], "body_limit_mb");
    if (mb > kMaxBodyLimitMb)
      Fail("body_limit_mb", fmt::format("{} is over {}", mb, kMaxBodyLimitMb));
    c->body_limit = static_cast<size_t>(mb * (1 << 20));
  }
  if (root["response_headers"])
    c->route_headers = ReadBool(root["response_headers"], "response_headers");
  if (root["request_ids"]) c->request_ids = ReadBool(root["request_ids"], "request_ids");
  if (root["access_log"]) c->access_log = ReadBool(root["access_log"], "access_log");
  if (root["traffic_log"]) {
    c->traffic_log = Read<std::string>(root["traffic_log"], "traffic_log");
    if (c->traffic_log.empty()) Fail("traffic_log", "is empty (leave it out to record nothing)");
  }
  if (root["traffic_log_block"]) {
    c->traffic_log_block = ReadInt(root["traffic_log_block"], "traffic_log_block", 16, 1 << 20);
    if (c->traffic_log_block % 16 != 0)
      Fail("traffic_log_block",
           fmt::format("must be a multiple of 16 tokens, got {}", c->traffic_log_block));
  }
  if (root["otlp_traces_endpoint"]) {
    c->otlp_traces_endpoint =
        Read<std::string>(root["otlp_traces_endpoint"], "otlp_traces_endpoint");
    if (c->otlp_traces_endpoint.empty())
      Fail("otlp_traces_endpoint", "is empty (leave it out to send no spans)");
  }
  if (root["connect_timeout_s"])
    c->connect_timeout_s = ReadPositive(root["connect_timeout_s"], "connect_timeout_s");
  if (root["threads"]) c->threads = ReadInt(root["threads"], "threads", 0, 1024);
  if (root["max_connections"])
    c->max_connections = ReadInt(root["max_connections"], "max_connections", 0, 100'000'000);
  if (root["admin_token"]) {
    c->admin_token = Read<std::string>(root["admin_token"], "admin_token");
    if (c->admin_token.empty())
      Fail("admin_token", "is empty (leave it out to serve the admin API without a token)");
  }
  if (root["api_keys"]) c->api_keys = ReadClientKeys(root["api_keys"]);
  c->inline_api_keys = c->api_keys.size();
  if (root["api_keys_file"] && replaced.api_keys_file) {
    Read<std::string>(root["api_keys_file"], "api_keys_file");
  } else if (root["api_keys_file"]) {
    std::vector<ClientKey> keys;
    std::string error;
    if (!ReadClientKeyFile(Read<std::string>(root["api_keys_file"], "api_keys_file"), &keys, &error,
                           c->inline_api_keys))
      Fail("api_keys_file", error);
    c->api_keys.insert(c->api_keys.end(), keys.begin(), keys.end());
  }
  if (root["peers"]) c->peers = ReadStrings(root["peers"], "peers");
  if (root["allowed_hosts"]) c->allowed_hosts = ReadHostPatterns(root["allowed_hosts"]);
  if (root["tls_cert_file"])
    c->tls_cert_file = Read<std::string>(root["tls_cert_file"], "tls_cert_file");
  if (root["tls_key_file"])
    c->tls_key_file = Read<std::string>(root["tls_key_file"], "tls_key_file");
  if (root["peer_sync_interval_s"]) {
    c->peer_sync_interval_s = ReadPositive(root["peer_sync_interval_s"], "peer_sync_interval_s");
  }
  if (root["drain_delay_s"])
    c->drain_delay_s = Read<double>(root["drain_delay_s"], "drain_delay_s");
  if (root["drain_timeout_s"]) {
    c->drain_timeout_s = Read<double>(root["drain_timeout_s"], "drain_timeout_s");
  }
  if (root["hand_over_drain_timeout_s"]) {
    c->hand_over_drain_timeout_s =
        Read<double>(root["hand_over_drain_timeout_s"], "hand_over_drain_timeout_s");
  }
  if (root["send_timeout_s"])
    c->send_timeout_s = Read<double>(root["send_timeout_s"], "send_timeout_s");
  if (root["read_timeout_s"])
    c->read_timeout_s = Read<double>(root["read_timeout_s"], "read_timeout_s");
  if (root["stream_keepalive_s"])
    c->stream_keepalive_s = Read<double>(root["stream_keepalive_s"], "stream_keepalive_s");
  if (root["admission_max_hold_s"])
    c->admission_max_hold_s = Read<double>(root["admission_max_hold_s"], "admission_max_hold_s");
  if (root["stall_timeout_s"])
    c->stall_timeout_s = Read<double>(root["stall_timeout_s"], "stall_timeout_s");
  if (root["header_timeout_s"])
    c->header_timeout_s = Read<double>(root["header_timeout_s"], "header_timeout_s");
  double idle = 600;
  size_t max_sessions = 100000;
  if (const YAML::Node s = root["session"]) {
    CheckKeys(s, "session",
              {"headers", "body_fields", "key_from_opening", "idle_timeout_s", "max_entries",
               "state_file", "state_save_interval_s"});
    if (s["headers"]) c->session.headers = ReadHeaderNames(s["headers"], "session.headers");
    if (s["body_fields"]) {
      c->session.body_fields = ReadStrings(s["body_fields"], "session.body_fields");
      for (size_t i = 0; i < c->session.body_fields.size(); ++i) {
        if (c->session.body_fields[i].empty())
          Fail(fmt::format("session.body_fields[{}]", i), "is empty: no body field has that name");
      }
    }
    if (s["key_from_opening"])
      c->session.key_from_opening = ReadBool(s["key_from_opening"], "session.key_from_opening");
    if (s["idle_timeout_s"]) {
      c->session_idle_timeout_given = true;
      idle = ReadPositive(s["idle_timeout_s"], "session.idle_timeout_s");
      if (idle > 1e7)
        Fail("session.idle_timeout_s", fmt::format("{} must be at most 1e7 seconds", idle));
    }
    if (s["max_entries"])
      max_sessions = ReadInt(s["max_entries"], "session.max_entries", 1, 1 << 30);
    if (s["state_file"]) {
      const std::string file = Read<std::string>(s["state_file"], "session.state_file");
      if (!replaced.state_file) c->state_file = file;
    }
    if (s["state_save_interval_s"]) {
      c->state_save_interval_s =
          ReadPositive(s["state_save_interval_s"], "session.state_save_interval_s");
    }
  }
  c->model_defaults.session_idle_timeout_s = idle;
  c->model_defaults.max_sessions = max_sessions;
  if (const YAML::Node models = root["models"]) {
    if (!models.IsSequence()) Fail("models", "expected a list of models");
    c->models.clear();
    for (size_t i = 0; i < models.size(); ++i) {
      c->models.push_back(
          ReadModel(models[i], fmt::format("models[{}]", i), c->model_defaults, replaced));
    }
  }
}

}  // namespace

namespace {

// Whether a replica URL's path names the API rather than the server: a first or last segment "v1"
// in any case (a base URL of vLLM's API, or an endpoint pasted whole), or "v1" followed by one of
// the API's paths. Not a "v1" elsewhere: a proxy's own path may have one (Kubernetes' /api/v1/).
bool HasV1Segment(std::string_view path) {
  static constexpr std::string_view kApiPaths[] = {"chat",   "completions", "messages",
                                                   "models", "responses",   "embeddings"};
  const auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = AsciiLower(c);
    return out;
  };
  bool after_v1 = false;
  bool first = true;  // vLLM serves its API at the root: a path that starts with v1 names it
  while (!path.empty()) {
    path.remove_prefix(1);  // the '/'
    const std::string segment = lower(path.substr(0, path.find('/')));
    if (after_v1 &&
        std::find(std::begin(kApiPaths), std::end(kApiPaths), segment) != std::end(kApiPaths))
      return true;
    after_v1 = segment == "v1";
    if (first && after_v1) return true;
    first = false;
    path.remove_prefix(std::min(path.size(), path.find('/')));
  }
  return after_v1;
}

// The line (from 1) of the field a config error names ("models[0].overflow_limit: ..."), in the
// document `root`; 0 when the name is no path in it ("the file", "listen, tls_cert_file").
int LineOfField(const YAML::Node& node, std::string_view path) {
  // (Recursive on const nodes: assigning a yaml-cpp node writes into the tree it refers to.)
  if (path.empty()) return node.Mark().line >= 0 ? node.Mark().line + 1 : 0;
  if (path.front() == '.') return LineOfField(node, path.substr(1));
  if (path.front() == '[') {  // an index: "[3]"
    const size_t close = path.find(']');
    size_t index = 0;
    if (close == std::string_view::npos) return 0;
    const auto [p, ec] = std::from_chars(path.data() + 1, path.data() + close, index);
    if (ec != std::errc() || p != path.data() + close || !node.IsSequence() || index >= node.size())
      return 0;
    return LineOfField(node[index], path.substr(close + 1));
  }
  const size_t end = path.find_first_of(".[");
  const std::string key(path.substr(0, end));
  if (!node.IsMap() || !node[key]) return 0;
  return LineOfField(node[key], end == std::string_view::npos ? "" : path.substr(end));
}

// The error's message ("field: what is wrong") with its line, or the field's when it is one the
// file has.
std::string WithLine(const YAML::Node& root, const ConfigError& error) {
  const std::string& message = error.message;
  if (error.line > 0) return fmt::format("{} (line {})", message, error.line);
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return message;
  const int line = LineOfField(root, std::string_view(message).substr(0, colon));
  if (line == 0) return message;
  return fmt::format("{} (line {})", message, line);
}

// Reads a YAML text's documents without building them, to find where yaml-cpp 0.7 makes no
// progress: on some malformed documents (one starting with ',' or "!,", found by fuzzing) it makes
// empty documents one after another, and LoadAll keeps them until memory runs out (4 GB for the
// three bytes ",\"x"). Returns the line it stalls on, or 0 when the documents end.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { line = mark.line + 1; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  int line = 0;
};

int StallingLine(const std::string& yaml) {
  constexpr int kMostDocuments = 64;  // a config is one; a few more are a mistake said later
  std::istringstream in(yaml);
  YAML::Parser parser(in);
  DocumentStarts starts;
  for (int documents = 0; parser.HandleNextDocument(starts);) {
    if (++documents == kMostDocuments) return std::max(starts.line, 1);
  }
  return 0;
}

}  // namespace

std::optional<int> ParseOverflowLimit(std::string_view text) {
  if (text == "auto") return 0;
  int limit = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), limit);
  if (ec != std::errc() || end != text.data() + text.size() || limit < 1 ||
      limit > kMaxOverflowLimit)
    return std::nullopt;
  return limit;
}

bool ReadGatewayConfig(std::string_view yaml, GatewayConfig* config, std::string* error,
                       const ReplacedFiles& replaced) {
  // YAML text holds no control characters but tab and line ends (YAML 1.2 §5.1); yaml-cpp takes a
  // NUL for the end of its input, and then loops as above on what follows.
  if (const auto bad =
          std::find_if(yaml.begin(), yaml.end(),
                       [](unsigned char ch) {
                         return (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') || ch == 0x7f;
                       });
      bad != yaml.end()) {
    *error = fmt::format("invalid YAML at line {}: control character 0x{:02x} (not text)",
                         1 + std::count(yaml.begin(), bad, '\n'), static_cast<unsigned char>(*bad));
    return false;
  }
  try {
    if (const int line = StallingLine(std::string(yaml))) {
      *error = fmt::format("invalid YAML at line {}: the reader makes no progress there", line);
      return false;
    }
    std::vector<YAML::Node> documents = YAML::LoadAll(std::string(yaml));
    // A trailing "---" (generated files often end so) opens an empty document: not one more.
    std::erase_if(documents, [](const YAML::Node& d) { return d.IsNull(); });
    if (documents.size() > 1) {
      *error = fmt::format("the file holds {} YAML documents (separated by ---); one is expected",
                           documents.size());
      return false;
    }
    if (!documents.empty()) {
      try {
        ReadConfig(documents[0], config, replaced);
      } catch (const ConfigError& e) {
        *error = WithLine(documents[0], e);
        return false;
      }
    }
  } catch (const ConfigError& e) {
    *error = e.message;
    return false;
  } catch (const YAML::Exception& e) {
    *error = fmt::format("invalid YAML at line {}, column {}: {}", e.mark.line + 1,
                         e.mark.column + 1, e.msg);
    return false;
  } catch (const std::exception& e) {  // memory, say: the config is refused, nothing stops
    *error = fmt::format("cannot read the config: {}", e.what());
    return false;
  }
  return true;
}

bool ParseGatewayConfig(std::string_view yaml, GatewayConfig* config, std::string* error) {
  if (!ReadGatewayConfig(yaml, config, error)) return false;
  *error = ValidateGatewayConfig(*config);
  return error->empty();
}

bool LoadGatewayConfig(const std::string& path, GatewayConfig* config, std::string* error,
                       const ReplacedFiles& replaced) {
  std::string text;
  if (!ReadRegularFile(path, kMaxConfigFileBytes, &text, error, /*pipes=*/true)) {
    *error = fmt::format("{}: cannot read the config file: {}", path, *error);
    return false;
  }
  if (!ReadGatewayConfig(text, config, error, replaced)) {
    *error = fmt::format("{}: {}", path, *error);
    return false;
  }
  return true;
}

bool ReadKeyFile(const std::string& path, std::vector<std::string>* lines, std::string* error,
                 std::vector<size_t>* line_numbers, bool may_be_empty) {
  std::string text;
  if (!ReadRegularFile(path, kMaxConfigFileBytes, &text, error, /*pipes=*/true)) {
    *error = fmt::format("cannot read {}: {}", path, *error);
    return false;
  }
  std::istringstream in(text);
  lines->clear();
  if (line_numbers) line_numbers->clear();
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    // A '#' at the start of a line or after a blank starts a comment (a key has no blanks).
    for (size_t at = line.find('#'); at != std::string::npos; at = line.find('#', at + 1)) {
      if (at == 0 || line[at - 1] == ' ' || line[at - 1] == '\t') {
        line.resize(at);
        break;
      }
    }
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    const size_t last = line.find_last_not_of(" \t\r");
    lines->push_back(line.substr(first, last - first + 1));
    if (line_numbers) line_numbers->push_back(number);
  }
  if (lines->empty() && !may_be_empty) {
    *error = fmt::format("{} holds no key", path);
    return false;
  }
  return true;
}

bool ReadClientKeyFile(const std::string& path, std::vector<ClientKey>* keys, std::string* error,
                       size_t inline_keys) {
  std::vector<std::string> lines;
  std::vector<size_t> numbers;
  if (!ReadKeyFile(path, &lines, error, &numbers, /*may_be_empty=*/inline_keys > 0)) {
    if (inline_keys == 0 && error->ends_with("holds no key"))
      *error += " (and api_keys gives none: the gateway would be open to anyone)";
    return false;
  }
  keys->clear();
  for (size_t i = 0; i < lines.size(); ++i) {
    std::istringstream words(lines[i]);
    std::vector<std::string> parts;
    for (std::string w; words >> w;) parts.push_back(w);
    if (parts.size() > 2) {
      *error = fmt::format(
          "{}: line {} has {} words; a line is \"key\" or \"name key\" (a '#' "
          "after a blank starts a comment)",
          path, numbers[i], parts.size());
      return false;
    }
    keys->push_back(parts.size() == 1 ? ClientKey{"", parts[0]} : ClientKey{parts[0], parts[1]});
    keys->back().origin = fmt::format("{} line {}", path, numbers[i]);
  }
  return true;
}

std::string ClientKeyName(const std::vector<ClientKey>& keys, size_t index) {
  return keys[index].name.empty() ? fmt::format("key-{}", index + 1) : keys[index].name;
}

std::string ValidateClientKeys(const std::vector<ClientKey>& keys) {
  std::set<std::string> names, seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string where =
        keys[i].origin.empty() ? fmt::format("api_keys[{}]", i) : keys[i].origin;
    if (std::string e = CheckApiKey(keys[i].key); !e.empty())
      return fmt::format("{}: {}", where, e);
    if (!seen.insert(keys[i].key).second)
      return fmt::format("{}: the same key is given twice", where);
    const std::string name = ClientKeyName(keys, i);
    const bool plain = std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.' ||
             ch == '@';
    });
    if (!plain) {
      return fmt::format("{}: name '{}' may hold letters, digits and - _ . @ only", where, name);
    }
    if (!names.insert(name).second) return fmt::format("{}: name '{}' is given twice", where, name);
  }
  return {};
}

namespace {

// The numbers a model's settings may take, however they were given (file or flags).
std::string ValidateModelNumbers(const ModelConfig& m) {
  if (m.data_parallel_size < 1 || m.data_parallel_size > 1024)
    return fmt::format("data_parallel_size: {} must be 1 to 1024", m.data_parallel_size);
  if (m.max_num_seqs < 1 || m.max_num_seqs > (1 << 20))
    return fmt::format("max_num_seqs: {} must be 1 to {}", m.max_num_seqs, 1 << 20);
  if (m.overflow_limit < 0 || m.overflow_limit > kMaxOverflowLimit) {
    return fmt::format("overflow_limit: {} must be 1 to {} or auto", m.overflow_limit,
                       kMaxOverflowLimit);
  }
  if (!(m.scrape_interval_s >= 0.01 && m.scrape_interval_s <= 3600))
    return fmt::format("scrape_interval_s: {} must be 0.01 to 3600 seconds", m.scrape_interval_s);
  if (!(m.session_idle_timeout_s > 0 && m.session_idle_timeout_s <= 1e7))
    return fmt::format("session_idle_timeout_s: {} must be > 0 and at most 1e7 seconds",
                       m.session_idle_timeout_s);
  if (m.max_sessions < 1) return "max_sessions: must be at least 1";
  return {};
}

}  // namespace

namespace {

// models[i]'s name and aliases: text, and not another model's name or an earlier model's alias.
std::string ValidateModelNames(const GatewayConfig& c, size_t i, const std::string& where) {
  const ModelConfig& m = c.models[i];
  if (m.name.empty()) return where + ".name: must not be empty";
  if (!simdjson::validate_utf8(m.name.data(), m.name.size()))
    return where + ".name: is not valid UTF-8";
  for (const std::string& alias : m.aliases) {
    if (alias.empty()) return where + ".aliases: an alias is empty";  // (--alias '')
    if (!simdjson::validate_utf8(alias.data(), alias.size()))
      return where + ".aliases: an alias is not valid UTF-8";
    if (alias.find(',') != std::string::npos) {  // no model's name has one
      return fmt::format(
          "{}.aliases: '{}' holds a comma: give each name or pattern as an item of a list "
          "([a, b])",
          where, QuotedName(alias, 64));
    }
  }
  for (const std::string& alias : m.aliases) {
    for (size_t j = 0; j < c.models.size(); ++j) {
      if (alias == c.models[j].name && j != i) {
        return fmt::format("{}.aliases: '{}' is models[{}]'s name (requests for it go there)",
                           where, alias, j);
      }
    }
    for (size_t j = 0; j < i; ++j) {
      const auto& earlier = c.models[j].aliases;
      if (std::find(earlier.begin(), earlier.end(), alias) != earlier.end()) {
        return fmt::format(
            "{}.aliases: '{}' is also models[{}]'s alias (the first would take "
            "every name it matches)",
            where, alias, j);
      }
    }
  }
  return {};
}

// A model's replica URLs: valid, each its server's root, each once, and their TLS settings usable.
std::string ValidateModelUrls(const ModelConfig& m, const std::string& where) {
  if (m.urls.empty()) return where + ": needs url (with data_parallel_size) or urls";
  if (m.urls.size() > 1 && m.data_parallel_size > 1) {
    return where +
           ".data_parallel_size: goes with a single url (one server with N ranks), not with urls";
  }
  std::set<std::string> replicas;
  // (a single one most likely came as url)
  const std::string key = where + (m.urls.size() == 1 ? ".url" : ".urls");
  for (const std::string& url : m.urls) {
    UpstreamUrl parsed;
    std::string error;
    if (!ParseUpstreamUrl(url, &parsed, &error)) return key + ": " + error;
    if (HasV1Segment(parsed.base_path)) {
      return fmt::format(
          "{}: '{}': a replica's URL is its server's root (or the path it is served under), "
          "without /v1 or an endpoint (the gateway forwards each request's own path, /v1/... "
          "included)",
          key, url);
    }
    const std::string replica = fmt::format("{}:{}{}", parsed.host, parsed.port, parsed.base_path);
    if (!replicas.insert(replica).second)
      return fmt::format("{}.urls: '{}' is listed twice (one server is one replica)", where, url);
    if (parsed.tls && m.tls_verify &&
        !MakeTlsContext({.verify = true, .ca_file = m.tls_ca_file}, &error)) {
      return where + (m.tls_ca_file.empty() ? ".urls: " : ".tls_ca_file: ") + error;
    }
  }
  // A CA file given for replicas that are all http:// is read all the same: a wrong path is
  // better said now than when a replica moves to https.
  if (std::string error;
      !m.tls_ca_file.empty() && !MakeTlsContext({.verify = true, .ca_file = m.tls_ca_file}, &error))
    return where + ".tls_ca_file: " + error;
  return {};
}

// A model's policy, admission, numbers and replica key.
std::string ValidateModelSettings(const ModelConfig& m, const std::string& where) {
  if (!MakePolicy(m.policy)) {
    return fmt::format("{}.policy: unknown policy '{}' (one of: {})", where, m.policy,
                       PolicyNameList());
  }
  AdmissionOptions admission;
  if (std::string e = ParseAdmission(m.admission, &admission); !e.empty())
    return fmt::format("{}.{}", where, e);
  if (std::string e = ValidateModelNumbers(m); !e.empty()) return fmt::format("{}.{}", where, e);
  if (!m.replica_api_key.empty()) {
    if (std::string e = CheckApiKey(m.replica_api_key); !e.empty())
      return fmt::format("{}.replica_api_key: {}", where, e);
  }
  return {};
}

std::string ValidateModels(const GatewayConfig& c) {
  if (c.models.empty()) return "models: at least one model is required";
  std::set<std::string> names;
  for (size_t i = 0; i < c.models.size(); ++i) {
    const ModelConfig& m = c.models[i];
    const std::string where = fmt::format("models[{}]", i);
    if (std::string e = ValidateModelNames(c, i, where); !e.empty()) return e;
    if (!names.insert(m.name).second)
      return fmt::format("{}.name: '{}' is configured twice", where, m.name);
    if (std::string e = ValidateModelUrls(m, where); !e.empty()) return e;
    if (std::string e = ValidateModelSettings(m, where); !e.empty()) return e;
  }
  return {};
}

// The listener's keys, limits and TLS.
std::string ValidateListener(const GatewayConfig& c) {
  if (std::string e = ValidateClientKeys(c.api_keys); !e.empty()) return e;
  // (Found by review: one with a space or a newline passed, and no request could send it.)
  if (std::string e = c.admin_token.empty() ? "" : CheckApiKey(c.admin_token); !e.empty())
    return "admin_token: " + e;
  if ((!c.api_keys.empty() || !c.admin_token.empty()) && !ApiKeys::Available())
    return "api_keys, admin_token: OpenSSL gives no SHA-256 here (its configuration?): no key "
           "could be checked";
  if (c.body_limit < 1024) return "body_limit_mb: must be at least 1 KiB";
  if (!(c.connect_timeout_s > 0 && c.connect_timeout_s <= 3600))
    return "connect_timeout_s: must be > 0 and at most 3600 seconds";
  if (c.threads < 0 || c.threads > 1024) return "threads: must be 0 (one per core) to 1024";
  if (c.max_connections < 0 || c.max_connections > 100'000'000)
    return "max_connections: must be 0 (from the open-file limit) to 100000000";
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    return c.tls_cert_file.empty() ? "tls_key_file: given without tls_cert_file"
                                   : "tls_cert_file: given without tls_key_file";
  }
  if (std::string error;
      !c.tls_cert_file.empty() && !MakeServerTlsContext(c.tls_cert_file, c.tls_key_file, &error))
    return "tls_cert_file, tls_key_file: " + error;
  return {};
}

// A replica URL that is the gateway's own address: every request would come back to it (and be
// refused, 508) while its /health reads healthy (found by review).
std::string ValidateNotSelf(const GatewayConfig& c) {
  if (c.port == 0) return {};
  for (size_t m = 0; m < c.models.size(); ++m) {
    for (const std::string& url : c.models[m].urls) {
      UpstreamUrl parsed;
      std::string error;
      if (!ParseUpstreamUrl(url, &parsed, &error) || parsed.port != c.port) continue;
      std::string host = parsed.host;
      if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
      // (Listening on every address, the gateway holds the port on each loopback address too:
      // IPv4's for 0.0.0.0, both for ::, which takes IPv4 too.)
      const bool v4_loopback =  // 127.x.y.z, or as IPv6 writes it mapped (::ffff:127.0.0.1)
          host == "localhost" || (IsLoopbackAddress(host) && host.find('.') != std::string::npos);
      const bool local_name = host == "localhost" && (c.host == "127.0.0.1" || c.host == "::1");
      if (host == c.host || local_name || (c.host == "0.0.0.0" && v4_loopback) ||
          (c.host == "::" && (host == "localhost" || IsLoopbackAddress(host)))) {
        return fmt::format(
            "models[{}]: '{}' is this gateway's own address (listen {}:{}): a replica URL is a "
            "vLLM server's",
            m, url, c.host, c.port);
      }
    }
  }
  return {};
}

std::string ValidateTracesEndpoint(const GatewayConfig& c) {
  if (c.otlp_traces_endpoint.empty()) return {};
  UpstreamUrl parsed;
  std::string error;
  if (!ParseUpstreamUrl(c.otlp_traces_endpoint, &parsed, &error))
    return "otlp_traces_endpoint: " + error;
  if (parsed.tls && !MakeTlsContext({}, &error)) return "otlp_traces_endpoint: " + error;
  return {};
}

std::string ValidatePeers(const GatewayConfig& c) {
  std::set<std::string> peers;
  for (const std::string& url : c.peers) {
    UpstreamUrl parsed;
    std::string error;
    if (!ParseUpstreamUrl(url, &parsed, &error)) return "peers: " + error;
    if (HasV1Segment(parsed.base_path)) {
      return fmt::format(
          "peers: '{}': a peer's URL is its gateway's address (or the path a proxy serves it "
          "under), without /v1 (its sync is at /warden/v1/peer/...)",
          url);
    }
    if (parsed.tls && !MakeTlsContext({}, &error)) return "peers: " + error;
    if (!peers.insert(parsed.ToString()).second)
      return fmt::format("peers: '{}' is listed twice", url);
  }
  if (!(c.peer_sync_interval_s >= 0.01 && c.peer_sync_interval_s <= 3600))
    return "peer_sync_interval_s: must be 0.01 to 3600 seconds";
  return {};
}

std::string ValidateTimeouts(const GatewayConfig& c) {
  if (!(c.drain_delay_s >= 0 && c.drain_delay_s <= 3600))
    return "drain_delay_s: must be 0 to 3600 seconds";
  if (!(c.drain_timeout_s >= 0 && c.drain_timeout_s <= 86400))
    return "drain_timeout_s: must be 0 to 86400 seconds";
  if (!(c.hand_over_drain_timeout_s >= 0 && c.hand_over_drain_timeout_s <= 86400))
    return "hand_over_drain_timeout_s: must be 0 to 86400 seconds";
  if (!(c.send_timeout_s >= 1 && c.send_timeout_s <= 86400))
    return "send_timeout_s: must be 1 to 86400 seconds";
  if (!(c.read_timeout_s >= 0 && c.read_timeout_s <= 86400))
    return "read_timeout_s: must be 0 (no limit) to 86400 seconds";
  if (!(c.stream_keepalive_s == 0 ||
        (c.stream_keepalive_s >= 0.05 && c.stream_keepalive_s <= 3600)))
    return "stream_keepalive_s: must be 0 (never) or 0.05 to 3600 seconds";
  if (!(c.admission_max_hold_s == 0 ||
        (c.admission_max_hold_s >= 0.05 && c.admission_max_hold_s <= 86400)))
    return "admission_max_hold_s: must be 0 (no bound) or 0.05 to 86400 seconds";
  if (!(c.stall_timeout_s >= 0 && c.stall_timeout_s <= 86400))
    return "stall_timeout_s: must be 0 (never) to 86400 seconds";
  if (!(c.header_timeout_s >= 1 && c.header_timeout_s <= 86400))
    return "header_timeout_s: must be 1 to 86400 seconds";
  if (!(c.state_save_interval_s >= 0.1 && c.state_save_interval_s <= 86400))
    return "session.state_save_interval_s: must be 0.1 to 86400 seconds";
  return {};
}

// The state file: a regular file or none yet, in a folder where one can be written.
std::string ValidateStateFile(const std::string& state_file) {
  if (state_file.empty()) return {};
  std::error_code ec;
  if (std::filesystem::is_directory(state_file, ec))
    return fmt::format("session.state_file: {} is a directory", state_file);
  // Written where a symlink at the path points (os/follow_symlinks.h), if anything is there
  // a regular file (never /dev/null, which a save would replace).
  const std::filesystem::path file = FollowSymlinks(state_file);
  const auto type = std::filesystem::status(file, ec).type();
  if (!ec && type != std::filesystem::file_type::not_found &&
      type != std::filesystem::file_type::regular) {
    return file == state_file
               ? fmt::format("session.state_file: {} is not a regular file", state_file)
               : fmt::format("session.state_file: {} leads to {}, which is not a regular file",
                             state_file, file.string());
  }
  const std::filesystem::path folder =
      file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
  if (!std::filesystem::is_directory(folder, ec)) {
    // (found by review: a folder systemd's StateDirectory= makes only at the first start was
    // said to be no folder)
    return std::filesystem::exists(folder, ec)
               ? fmt::format("session.state_file: {} is not a folder", folder.string())
               : fmt::format(
                     "session.state_file: the folder {} does not exist (create it first; "
                     "systemd's StateDirectory= does at the unit's first start)",
                     folder.string());
  }
  // Saved by writing a new file beside it and renaming it over the old one: one is made and
  // removed here (permissions alone do not say it for root, or on a read-only or special file
  // system such as /proc).
  std::string probe = (folder / ".warden-state-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    return fmt::format(
        "session.state_file: the folder {} is not writable here (making a file in it failed: {})",
        folder.string(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

}  // namespace

std::string ValidateGatewayConfig(const GatewayConfig& c) {
  for (auto check : {ValidateModels, ValidateListener, ValidateNotSelf, ValidatePeers,
                     ValidateTracesEndpoint, ValidateTimeouts}) {
    if (std::string e = check(c); !e.empty()) return e;
  }
  return ValidateStateFile(c.state_file);
}

bool ParseListenAddress(std::string_view text, std::string* host, uint16_t* port,
                        std::string* error) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    *error = fmt::format("'{}' must be host:port", text);
    return false;
  }
  unsigned value = 0;
  const std::string_view digits = text.substr(colon + 1);
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty() ||
      value > 65535) {
    *error = fmt::format("'{}' has no valid port (0 to 65535)", text);
    return false;
  }
  std::string_view name = text.substr(0, colon);
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  } else if (name.find(':') != std::string_view::npos) {
    *error = fmt::format("'{}': an IPv6 address goes in brackets, e.g. [::1]:8080", text);
    return false;
  }
  if (name.empty()) {
    *error = fmt::format(
        "'{}' has no host: 127.0.0.1 listens on this machine only, 0.0.0.0 on every interface",
        text);
    return false;
  }
  const std::string address = name == "localhost" ? "127.0.0.1" : std::string(name);
  boost::system::error_code bad;
  boost::asio::ip::make_address(address, bad);
  if (bad) {
    *error = fmt::format("'{}': the host must be an IP address (or localhost)", text);
    return false;
  }
  *host = address;
  *port = static_cast<uint16_t>(value);
  return true;
}

std::string HostForUrl(std::string_view host) {
  return host.find(':') == std::string_view::npos ? std::string(host) : fmt::format("[{}]", host);
}

bool GlobMatches(std::string_view pattern, std::string_view name) {
  return GlobMatch(pattern, name, /*ignore_case=*/false);
}

std::vector<std::string> SharedReplicaWarnings(const GatewayConfig& c) {
  std::map<std::string, std::vector<std::string>> models_by_server;
  for (const ModelConfig& m : c.models) {
    for (const std::string& url : m.urls) {
      UpstreamUrl parsed;
      std::string error;
      if (!ParseUpstreamUrl(url, &parsed, &error)) continue;
      for (char& c : parsed.host) c = AsciiLower(c);
      if (parsed.host == "localhost") parsed.host = "127.0.0.1";  // (as a replica's URL means it)
      std::vector<std::string>& models = models_by_server[parsed.ToString()];
      if (models.empty() || models.back() != m.name) models.push_back(m.name);
    }
  }
  std::vector<std::string> warnings;
  for (const auto& [server, models] : models_by_server) {
    if (models.size() < 2) continue;
    warnings.push_back(fmt::format(
        "models {} all name the server {}: each counts only its own requests in flight there "
        "and admits against its whole KV cache, so routing sees part of its load (one model with "
        "aliases shares one count)",
        fmt::join(models, ", "), server));
  }
  return warnings;
}

}  // namespace warden
