#include "cli/serve_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "cli/flag_checks.h"
#include "cli/hand_over.h"
#include "cli/listen_failure.h"
#include "cli/serve_loop.h"
#include "cli/start_signals.h"
#include "gateway/config_overrides.h"
#include "gateway/config_reload.h"
#include "gateway/gateway.h"
#include "gateway/state_file.h"
#include "net/host_allowlist.h"
#include "net/io_context.h"
#include "net/systemd.h"
#include "os/file_limit.h"
#include "os/system_time.h"
#include "sim/sim_server.h"

namespace warden {
namespace {

struct ServeFlags {
  std::string config_path;
  ConfigOverrides overrides;
  bool demo = false;
  double time_scale = 1;
  std::string demo_balancer = "vllm-dp";
  bool demo_settings_given = false;  // --time-scale or --demo-balancer
  bool check = false;                // --check: read and check the config, start nothing
  bool check_replicas = false;       // --check-replicas: and ask each server once
};

constexpr std::string_view kDemoModel = "qwen3-4b-dp4";
// Under this limit on open files the log warns: a few hundred streams would exhaust it.
constexpr uint64_t kFewOpenFiles = 4096;

// The embedded demo goes with no replicas of the user's own; its settings with nothing else.
std::string CheckDemoFlags(const ServeFlags& f, const GatewayConfig& file, bool demo) {
  const ConfigOverrides& o = f.overrides;
  if (demo && !o.urls.empty())
    return "--demo runs simulated replicas of its own: it does not go with --url";
  if (demo && o.names_a_model()) {
    return fmt::format(
        "--demo serves {} on 4 simulated ranks: --model, --dp and --alias are for real replicas "
        "given with --url",
        kDemoModel);
  }
  if (demo && !file.models.empty())
    return "--demo runs simulated replicas of its own: the config file's models do not go with it";
  if (!demo && f.demo_settings_given)
    return "--time-scale and --demo-balancer are for --demo's simulated replicas: give --demo, or "
           "leave them out with real replicas";
  return {};
}

// The config file as it reads now (for SIGHUP); nothing without one.
std::string ReadConfigAgain(const ServeFlags& flags, GatewayConfig* fresh) {
  std::string error;
  if (!flags.config_path.empty() &&
      !LoadGatewayConfig(flags.config_path, fresh, &error, flags.overrides.replaced_files()))
    return error;
  return {};
}

// The clients' keys as the config file (`fresh`, as it reads now) and --api-keys-file give them.
std::string ClientKeysNow(const ServeFlags& flags, const GatewayConfig& fresh,
                          std::vector<ClientKey>* keys) {
  *keys = fresh.api_keys;
  if (flags.overrides.api_keys_file) {  // in place of the config's api_keys_file
    std::vector<ClientKey> from_file;
    std::string error;
    if (!ReadClientKeyFile(*flags.overrides.api_keys_file, &from_file, &error,
                           fresh.inline_api_keys))
      return "--api-keys-file: " + error;
    keys->resize(std::min(fresh.inline_api_keys, keys->size()));
    keys->insert(keys->end(), from_file.begin(), from_file.end());
  }
  return {};
}

// Applies what a reload changes at once and names what it does not. False when the file is
// refused as a whole (what a start would refuse): then nothing of it is applied.
bool ApplyReload(ReloadPlan plan, Gateway& gateway, const std::string& path,
                 GatewayConfig* last_read, bool flags_given) {
  if (!plan.error.empty()) {
    spdlog::error(
        "SIGHUP: {} is not applied{}: {} (the client keys and the TLS certificate stay "
        "as they were too)",
        path, flags_given ? " (read with the command line's flags)" : "", plan.error);
    return false;
  }
  if (plan.access_log) {
    gateway.SetAccessLog(*plan.access_log, [on = *plan.access_log, path] {
      spdlog::info("SIGHUP: the access log {}, as {} now says", on ? "on" : "off", path);
    });
  }
  for (const ModelSettingsChange& change : plan.applied) {
    const ModelState* model = gateway.FindModel(change.model);
    if (!model || !gateway.ApplyModelSettings(change)) continue;
    spdlog::info("SIGHUP: model {}: {}, as {} now says", change.model,
                 Describe(change, model->max_num_seqs(), model->SettingsNow().overflow_limit == 0),
                 path);
  }
  // Said when what they win over changes, not at every reload.
  static std::vector<std::string> overridden_before;
  if (!plan.overridden.empty() && plan.overridden != overridden_before) {
    // (a file that does not name a setting leaves it to its default, which a flag wins over too)
    spdlog::info(
        "SIGHUP: the command line's flags still decide {}, whatever {} says or leaves to "
        "its default",
        fmt::join(plan.overridden, ", "), path);
  }
  overridden_before = plan.overridden;
  if (!plan.needing_restart.empty()) {
    spdlog::warn(
        "SIGHUP: {} in {}: not applied, a reload reads the client keys, the TLS certificate, the "
        "access log and each model's settings but its replicas (URLs, data-parallel size), TLS "
        "and API key to them; for the rest, SIGUSR2 hands over to a new gateway without a "
        "moment of downtime, or restart it (draining changes at once through the admin API)",
        fmt::join(plan.needing_restart, ", "), path);
  }
  *last_read = std::move(plan.now_running);
  return true;
}

// The models and their replicas as configured, and what the listener's settings leave open. With
// `gateway`, the settings in effect (a restart keeps those a PATCH set, patched_settings.h).
void LogWhatIsServed(const GatewayConfig& config, const Gateway* gateway = nullptr) {
  for (ModelConfig m : config.models) {
    if (const ModelState* state = gateway ? gateway->FindModel(m.name) : nullptr) {
      const ModelSettingsChange now = state->SettingsNow();
      m.affinity = now.affinity.value_or(m.affinity);
      m.overflow_limit = now.overflow_limit.value_or(m.overflow_limit);
      m.policy = now.policy.value_or(m.policy);
      m.admission = now.admission.value_or(m.admission);
    }
    spdlog::info(
        "model {}: {} replica(s) at {}{}, policy {}, affinity {}, overflow limit {}{}, admission "
        "{}",
        m.name, m.num_replicas(), fmt::join(m.urls, ", "),
        m.data_parallel() ? fmt::format(" (data-parallel size {})", m.data_parallel_size) : "",
        m.policy, m.affinity ? "on" : "off", m.effective_overflow_limit(),
        // The auto limit's source, which an operator who left it out should see (found by review).
        m.overflow_limit == 0 ? fmt::format(" (auto: max_num_seqs {} / 4)", m.max_num_seqs) : "",
        m.admission);
  }
  for (const std::string& warning : SharedReplicaWarnings(config)) spdlog::warn("{}", warning);
  for (const ModelConfig& m : config.models) {
    if (!m.replica_api_key.empty())
      spdlog::info("model {}: the replicas' API key goes with every request to them", m.name);
  }
  const bool loopback = IsLoopbackAddress(config.host);
  const bool tls = !config.tls_cert_file.empty();
  if (!config.api_keys.empty() && !loopback && config.admin_token.empty()) {
    spdlog::warn(
        "listening on {} with api_keys but no admin_token: whoever reaches it can use the "
        "admin API (drain replicas, switch affinity) and send it peers' messages",
        config.host);
  }
  if (!config.api_keys.empty()) {
    spdlog::info(
        "the model API needs one of {} API key(s): Authorization: Bearer <key>, or "
        "x-api-key: <key>",
        config.api_keys.size());
  } else if (!loopback) {
    spdlog::warn("listening on {} without api_keys: whoever reaches it can use the replicas{}",
                 config.host,
                 config.admin_token.empty()
                     ? ", and, with no admin_token, the admin API (drain replicas, switch "
                       "affinity) and the peers' messages"
                     : "");
  }
  if (!loopback && !tls) {
    spdlog::warn(
        "listening on {} over plain http: API keys and conversations cross the network "
        "unencrypted; give tls_cert_file and tls_key_file (or put a TLS proxy in front)",
        config.host);
  }
  if (!loopback && config.allowed_hosts.empty()) {
    spdlog::warn(
        "listening on {} without allowed_hosts: the gateway answers any host name, so a web page "
        "that points its own name at this address can use it from a browser on this network; "
        "list the names clients use in allowed_hosts",
        config.host);
  }
}

// A listening socket passed by socket activation sets where the gateway listens: its address
// and port replace the config's listen (which is said when it differs). False when `fd` has no
// address.
bool ListenWherePassed(int fd, GatewayConfig* config) {
  boost::asio::ip::tcp::endpoint bound;
  socklen_t length = static_cast<socklen_t>(bound.capacity());
  if (::getsockname(fd, bound.data(), &length) != 0) return false;
  bound.resize(length);
  const std::string host = bound.address().to_string();
  if (config->port != 0 && (host != config->host || bound.port() != config->port)) {
    spdlog::warn(
        "listening on the socket it was passed ({}:{}), not on listen {}:{}: a socket passed by "
        "systemd or by a hand-over keeps its address; to listen elsewhere, change the socket unit "
        "or restart the gateway (SIGTERM, then start it)",
        host, bound.port(), config->host, config->port);
  }
  config->host = host;
  config->port = bound.port();
  return true;
}

// --check: what a start would make of the state file, said (a warning for one it would set aside;
// the start goes on without it all the same).
void CheckStateFile(const std::string& path) {
  std::string text, error;
  bool missing = false;
  if (!ReadStateFile(path, &text, &missing, &error)) {
    if (missing) {
      spdlog::info("state file {}: none yet", path);
    } else {
      spdlog::warn(
          "state file {}: cannot read it ({}): a start would set it aside and begin with "
          "no conversations",
          path, error);
    }
    return;
  }
  std::vector<ModelSnapshot> saved;
  StateDamage damage;
  if (!ParseState(text, SystemUnixTime(), &saved, &error, &damage)) {
    spdlog::warn("state file {}: {}: a start would set it aside and begin with no conversations",
                 path, error);
    return;
  }
  size_t conversations = 0;
  for (const ModelSnapshot& m : saved) conversations += m.conversations.size();
  if (damage.any()) {
    spdlog::warn(
        "state file {}: a start would skip as malformed {} model(s), {} conversation(s), "
        "{} replica name(s)",
        path, damage.models, damage.conversations, damage.replicas);
  }
  spdlog::info("state file {}: {} conversation(s) of {} model(s) to restore", path, conversations,
               saved.size());
}

// --check: what `serve` would read at start (the config, its key and certificate files), said
// to be right or not, with nothing started: before a restart, or in a deployment's CI.
// With `replicas`, each server is asked once, all at the same time (--check-replicas): 3 if one is
// not as configured.
int CheckOnly(const GatewayConfig& config, bool replicas) {
  boost::asio::io_context io;
  std::unique_ptr<Gateway> gateway;
  GatewayConfig checked = config;
  checked.traffic_log.clear();  // checked above, and not made: nothing is started
  try {
    gateway = std::make_unique<Gateway>(std::vector{&io}, checked);  // reads the TLS files
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 2;
  }
  LogWhatIsServed(config);
  if (!config.state_file.empty()) CheckStateFile(config.state_file);
  fmt::print("configuration OK: {} model(s), {} replica(s), to listen on {}; nothing started\n",
             config.models.size(),
             std::accumulate(config.models.begin(), config.models.end(), 0,
                             [](int n, const ModelConfig& m) { return n + m.num_replicas(); }),
             fmt::format("{}:{}", HostForUrl(config.host), config.port));
  if (!replicas) return 0;
  constexpr auto kAnswerTime = std::chrono::seconds(5);
  int servers = 0, wrong = 0;
  for (const ModelConfig& m : config.models) {
    ModelState* model = gateway->FindModel(m.name);
    for (size_t pool = 0; pool < model->pools().size(); ++pool, ++servers) {
      boost::asio::co_spawn(io, gateway->CheckServer(*model, pool, kAnswerTime),
                            [&](std::exception_ptr e, bool right) { wrong += e || !right; });
    }
  }
  io.run();
  if (wrong == 0) {
    fmt::print("replicas OK: {} server(s) answer as configured\n", servers);
    return 0;
  }
  fmt::print("replicas NOT OK: {} of {} server(s) not as configured (above)\n", wrong, servers);
  return 3;
}

// The embedded default's simulated replicas, on a thread of their own, stopped when this goes.
class DemoReplicas {
 public:
  ~DemoReplicas() {
    io_.stop();
    if (thread_.joinable()) thread_.join();
    io_.DestroyQueuedWork();  // while the simulator its coroutines refer to still exists
  }

  // The simulated world runs faster than the gateway's clock: so do conversations going idle
  // (unless the config file says how soon).
  static double IdleTimeout(const ServeFlags& flags) {
    return ModelConfig{}.session_idle_timeout_s / flags.time_scale;
  }

  // Starts the replicas and sets `model` to serve them; an error when the flags are wrong.
  std::string Start(const ServeFlags& flags, ModelConfig* model) {
    SimOptions options;
    options.port = 0;
    options.model = std::string(kDemoModel);
    options.data_parallel_size = 4;
    options.time_scale = flags.time_scale;
    options.runtime_lora_updating = true;  // so that POST /v1/load_lora_adapter can be tried
    if (!ParseDpBalancerMode(flags.demo_balancer, &options.balancer))
      return fmt::format("--demo-balancer: unknown balancer '{}' (vllm-dp or vllm-dp-fresh)",
                         flags.demo_balancer);
    if (std::string error = ValidateSimOptions(options); !error.empty()) return error;
    sim_ = std::make_unique<Simulator>(io_, options);
    const uint16_t port = sim_->Start()[0];
    thread_ = std::thread([this] { io_.run(); });
    ModelConfig& m = *model;
    m.name = std::string(kDemoModel);
    m.aliases = {"claude-*", "qwen3-4b"};
    m.urls = {fmt::format("http://127.0.0.1:{}", port)};
    m.data_parallel_size = 4;
    m.max_num_seqs = sim_->profile().max_num_seqs;
    m.session_idle_timeout_s = IdleTimeout(flags);
    m.simulated =
        fmt::format("warden sim, profile {}, time x{}", sim_->profile().name, flags.time_scale);
    return {};
  }

 private:
  IoContext io_{1};
  std::unique_ptr<Simulator> sim_;
  std::thread thread_;
};

std::string NamedByFlag(const std::string& error);

// The command line's flags checked on a stand-in for the demo's model, before its simulated
// replicas start.
std::string CheckFlagsForDemo(const ServeFlags& flags, const GatewayConfig& config) {
  GatewayConfig scratch = config;
  ModelConfig stand_in;
  stand_in.name = std::string(kDemoModel);
  stand_in.urls = {"http://127.0.0.1:1"};
  stand_in.data_parallel_size = 4;
  scratch.models = {stand_in};
  std::string error = ApplyConfigOverrides(flags.overrides, &scratch);
  if (error.empty() && !(error = ValidateGatewayConfig(scratch)).empty())
    error = "command line: " + NamedByFlag(error);
  return error;
}

// A config error about a value a flag set (`models[0].scrape_interval_s: ...`), named by the flag
// (`--scrape-interval: ...`); others as they are.
std::string NamedByFlag(const std::string& error) {
  static constexpr std::pair<std::string_view, std::string_view> kFlagOf[] = {
      {"listen", "--listen"},
      {"data_parallel_size", "--dp"},
      {"max_num_seqs", "--max-num-seqs"},
      {"overflow_limit", "--overflow-limit"},
      {"scrape_interval_s", "--scrape-interval"},
      {"threads", "--threads"},
      {"max_connections", "--max-connections"},
      {"body_limit_mb", "--body-limit-mb"},
      {"peer_sync_interval_s", "--peer-sync-interval"},
      {"drain_delay_s", "--drain-delay"},
      {"drain_timeout_s", "--drain-timeout"},
      {"hand_over_drain_timeout_s", "--hand-over-drain-timeout"},
      {"send_timeout_s", "--send-timeout"},
      {"read_timeout_s", "--read-timeout"},
      {"stream_keepalive_s", "--stream-keepalive"},
      {"admission_max_hold_s", "--admission-max-hold"},
      {"stall_timeout_s", "--stall-timeout"},
      {"header_timeout_s", "--header-timeout"},
      {"session.state_save_interval_s", "--state-save-interval"},
      {"state_save_interval_s", "--state-save-interval"}};
  const size_t colon = error.find(':');
  if (colon == std::string::npos) return error;
  std::string_view key = std::string_view(error).substr(0, colon);
  if (key.starts_with("models[")) {
    const size_t dot = key.find("].");
    if (dot == std::string_view::npos) return error;
    key.remove_prefix(dot + 2);
  }
  for (const auto& [name, flag] : kFlagOf) {
    if (key == name) return std::string(flag) + error.substr(colon);
  }
  return error;
}

// The configuration `serve` runs: the config file, the demo's simulated replicas (started into
// `demo_replicas`) or the command line's models, and the flags over them. An error names where it
// comes from.
std::string ResolveServeConfig(const ServeFlags& flags, GatewayConfig* config, bool* demo,
                               DemoReplicas* demo_replicas) {
  config->models.clear();
  bool file_checked = false;
  if (!flags.config_path.empty()) {
    std::string error;
    if (!LoadGatewayConfig(flags.config_path, config, &error, flags.overrides.replaced_files()))
      return error;
    // The file alone first, so that an error is blamed on the file or on the flags rightly (a file
    // with no model is completed by --url).
    file_checked = !config->models.empty();
    if (file_checked && !(error = ValidateGatewayConfig(*config)).empty())
      return flags.config_path + ": " + error;
  }
  *demo = flags.demo || (flags.config_path.empty() && !flags.overrides.names_a_model());
  if (std::string error = CheckDemoFlags(flags, *config, *demo); !error.empty()) return error;
  if (*demo && (flags.check || flags.check_replicas)) {
    return flags.demo ? "--check checks the replicas of a config or of --model and --url, not "
                        "--demo's simulated ones"
                      : "--check checks a config: give --config, or --model and --url";
  }
  if (*demo) {
    if (std::string error = CheckFlagsForDemo(flags, *config); !error.empty()) return error;
    ModelConfig m = config->model_defaults;  // the file's session settings
    if (std::string error = demo_replicas->Start(flags, &m); !error.empty()) return error;
    if (config->session_idle_timeout_given)
      m.session_idle_timeout_s = config->model_defaults.session_idle_timeout_s;
    config->models = {m};
    config->demo_idle_timeout_s = DemoReplicas::IdleTimeout(flags);
    spdlog::warn("DEMO: the replicas are SIMULATED ({}): no GPU, no model, replies are filler text",
                 m.simulated);
  }
  if (std::string error = ApplyConfigOverrides(flags.overrides, config); !error.empty())
    return error;
  if (std::string error = ValidateGatewayConfig(*config); !error.empty()) {
    if (config->models.empty() && !flags.config_path.empty())  // and no flags that give one
      return fmt::format(
          "{}: models: at least one model is required (or give --model and --url, or --demo for "
          "simulated replicas)",
          flags.config_path);
    if (flags.config_path.empty() || file_checked)  // the flags' values, named as given
      return "command line: " + NamedByFlag(error);
    return fmt::format("{} with the command line: {}", flags.config_path, error);
  }
  return {};
}

// SIGHUP: the clients' keys are read again (a key given out or taken back needs no restart), and
// the models' affinity, overflow limit and policy, the access log and the TLS certificate.
// `last_read` is what the next reload compares with.
void Reload(const ServeFlags& flags, bool demo, bool tls, Gateway& gateway,
            GatewayConfig* last_read) {
  gateway.ReopenTrafficLog();  // (a log rotation's signal, whatever the config now says)
  std::vector<ClientKey> keys;
  GatewayConfig fresh;
  fresh.models.clear();
  std::error_code ec;
  const bool pipe = !flags.config_path.empty() && std::filesystem::is_fifo(flags.config_path, ec);
  std::string error;
  if (pipe) {
    // Read whole at start (a shell's <(...)): nothing is left to read, and an empty config
    // would be taken for one that sets nothing. The key file a flag gives and the TLS
    // certificate are read again all the same.
    spdlog::warn(
        "SIGHUP: {} is a pipe, read once at start: its settings stay as they were (give a file to "
        "reload them)",
        flags.config_path);
    fresh = *last_read;
  } else {
    error = ReadConfigAgain(flags, &fresh);
  }
  if (!error.empty()) {
    spdlog::error(
        "SIGHUP: {} is not applied: {} (the client keys and the TLS certificate stay as they were "
        "too)",
        flags.config_path, error);
    return;
  }
  if (!flags.config_path.empty() && !pipe &&
      !ApplyReload(PlanReload(*last_read, fresh, flags.overrides, demo), gateway, flags.config_path,
                   last_read, !(flags.overrides == ConfigOverrides{}))) {
    return;
  }
  error = ClientKeysNow(flags, fresh, &keys);
  if (error.empty()) {
    error = gateway.ReloadClientKeys(keys, [count = keys.size()] {
      if (count == 0) {
        spdlog::info("SIGHUP: no client key configured: the model API stays open");
      } else {
        spdlog::info("SIGHUP: {} client key(s) read again; new requests need one of them", count);
      }
    });
  }
  if (!error.empty()) spdlog::error("SIGHUP: the client keys stay as they were: {}", error);
  if (tls) {
    // From the files the gateway started with: other paths need a restart (warned above).
    const std::string tls_error = gateway.ReloadTls(
        [cert = gateway.config().tls_cert_file, key = gateway.config().tls_key_file] {
          spdlog::info("SIGHUP: TLS certificate read again from {} and {}; new connections use it",
                       cert, key);
        });
    if (!tls_error.empty())
      spdlog::error("SIGHUP: the TLS certificate stays as it was: {}", tls_error);
  }
}

// Where clients reach a gateway listening on `host`: a wildcard (every address of the machine) is
// no address to connect to; the machine's name is, from the others.
std::string ReachableHost(const std::string& host) {
  if (host != "0.0.0.0" && host != "::") return HostForUrl(host);
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') return name;
  return "127.0.0.1";
}

// Where the gateway listens, its panel and its APIs, on stdout (`local`: the URL on this machine,
// when it listens on every address); and the log's warnings about the open-file limit.
void SayWhereServed(const std::string& base, const std::string& local, const FileLimit& files) {
  if (files.now > files.before)
    spdlog::info("open files: limit raised from {} to {} (the hard limit)", files.before,
                 files.now);
  if (files.now < kFewOpenFiles) {
    spdlog::warn(
        "open files: the limit is {}, about {} requests in progress at most (two descriptors "
        "each); raise the hard limit (systemd: LimitNOFILE=, shell: ulimit -Hn)",
        files.now, files.now / 2);
  }
  fmt::print("warden listening {}\n", base);
  if (!local.empty()) fmt::print("  (on every address of this machine; on it, {} too)\n", local);
  fmt::print("  panel:     {}/panel\n", base);
  fmt::print("  API:       {}/v1/messages, {}/v1/chat/completions, {}/v1/responses\n", base, base,
             base);
  fmt::print("             (Claude Code: ANTHROPIC_BASE_URL={}; Codex: base_url = \"{}/v1\")\n",
             base, base);
  fmt::print("  admin API: {}/warden/v1/models\n", base);
  fmt::print("  metrics:   {}/metrics\n", base);
  std::fflush(stdout);
}

// One io_context per thread: a shard serves its own connections start to end, like an nginx
// worker, so no request hops between threads (only a compressed body's decoding is done
// elsewhere, the request waiting for it on its shard). A socket is only ever used by its shard's
// thread (other threads post to the shard), so socket operations need no locks; posting still does.
std::vector<std::unique_ptr<IoContext>> MakeShards(const GatewayConfig& config) {
  const int threads =
      config.threads > 0 ? config.threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::unique_ptr<IoContext>> shards;
  for (int i = 0; i < threads; ++i)
    shards.push_back(std::make_unique<IoContext>(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO));
  return shards;
}

// Starts the gateway's listeners: on the sockets passed, or where the config says. Returns the
// port, or 0 after saying why it cannot listen.
uint16_t StartListening(Gateway& gateway, const GatewayConfig& config,
                        const std::vector<int>& passed_listeners) {
  try {
    return gateway.Start(passed_listeners);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", ListenFailure(e, config.host, config.port));
    return 0;
  }
}

int RunServe(const ServeFlags& flags) {
  HoldStartSignals();  // a reload or a hand-over asked for while it starts: done once it serves
  if (StartedByHandOver()) LogWithPid();  // the old gateway logs to the same output meanwhile
  const int predecessor_end = OpenPredecessorEnd();
  const FileLimit files = RaiseOpenFileLimit();
  DemoReplicas demo_replicas;  // declared first: stopped after the gateway
  GatewayConfig config;
  bool demo = false;
  if (std::string error = ResolveServeConfig(flags, &config, &demo, &demo_replicas);
      !error.empty()) {
    fmt::print(stderr, "{}\n", error);
    return 2;
  }
  // The traffic log's file, as --check says it and before anything starts.
  if (std::string error;
      !config.traffic_log.empty() && !TrafficLog::CouldOpen(config.traffic_log, &error)) {
    fmt::print(stderr, "{}traffic_log: {}\n",
               flags.config_path.empty() ? "" : flags.config_path + ": ", error);
    return 2;
  }
  if (flags.check || flags.check_replicas) return CheckOnly(config, flags.check_replicas);
  // (Conversation keys nobody will read: a new gateway reads its file within a minute.)
  if (const int stale = RemoveStaleHandOverStates(std::chrono::minutes(10)); stale > 0)
    spdlog::info("removed {} hand-over folder(s) left by a gateway killed during a hand-over",
                 stale);
  std::string passed_error;
  const std::vector<int> passed_listeners = TakePassedListeners(&passed_error);
  if (!passed_error.empty() ||
      (!passed_listeners.empty() && !ListenWherePassed(passed_listeners[0], &config))) {
    fmt::print(
        stderr, "{}\n",
        passed_error.empty() ? "the socket passed (LISTEN_FDS) has no address" : passed_error);
    return 2;
  }
  // Connections wait in the sockets while no gateway accepts: a socket unit's.
  const bool sockets_held = !passed_listeners.empty() && SocketsHeldBySystemd();
  const std::vector<std::unique_ptr<IoContext>> shards = MakeShards(config);
  std::vector<boost::asio::io_context*> shard_ptrs;
  for (auto& shard : shards) shard_ptrs.push_back(shard.get());
  std::unique_ptr<Gateway> gateway;
  try {
    gateway = std::make_unique<Gateway>(shard_ptrs, config);
  } catch (const std::exception& e) {  // a certificate file changed since it was checked, say
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  // Started by a hand-over: the old gateway's conversations.
  if (std::string handed = HandedOverState(); !handed.empty())
    gateway->HandedOverStateFrom(std::move(handed));
  const uint16_t port = StartListening(*gateway, config, passed_listeners);
  if (port == 0) return 1;
  GatewayConfig last_read = config;
  const bool tls = !config.tls_cert_file.empty();
  ServeLoop loop(shards, *gateway, config,
                 {.demo = demo,
                  .sockets_held = sockets_held,
                  .reload = [&] { Reload(flags, demo, tls, *gateway, &last_read); },
                  .predecessor_end = predecessor_end});
  const char* scheme = tls ? "https" : "http";
  const std::string base = fmt::format("{}://{}:{}", scheme, ReachableHost(config.host), port);
  const std::string local = ReachableHost(config.host) != HostForUrl(config.host)
                                ? fmt::format("{}://127.0.0.1:{}", scheme, port)
                                : "";
  LogWhatIsServed(config, gateway.get());
  SayWhereServed(base, local, files);
  loop.Serving(base);
  loop.Run();
  // A state file whose last save failed lacks the homes since the last one that worked: not a
  // clean stop (found by review: it exited 0, and a service manager saw nothing wrong).
  if (gateway->state_save_failed()) {
    spdlog::error(
        "state file: the last save failed (above): {} lacks the conversations' homes "
        "since the last save that worked; exiting with 1",
        config.state_file);
    return 1;
  }
  return 0;
}

// A flag whose value is kept only when it is given.
template <typename T>
void AddOptional(CLI::App* cmd, const std::string& name, std::optional<T>& target,
                 const std::string& help) {
  cmd->add_option_function<T>(
      name, [&target](const T& value) { target = value; }, help);
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "The gateway: session-affine, load-aware routing to vLLM replicas");
  // An empty path (an unset variable in a unit file) is an error, not the demo (found by review).
  cmd->add_option("--config,-c", flags->config_path, "YAML config file (see README)")
      ->check([](const std::string& path) {
        return path.empty() ? std::string("an empty path: name the config file") : std::string();
      });
  ConfigOverrides& o = flags->overrides;
  AddOptional(cmd, "--listen", o.listen, "host:port to listen on (default 127.0.0.1:8080)");
  AddOptional(cmd, "--port", o.port,
              "The port alone, on the config's host or 127.0.0.1 (or --listen HOST:PORT)");
  AddOptional(cmd, "--model", o.model,
              "Served model name: with --url, the model they define; with a config file of one "
              "model, its new name");
  cmd->add_option("--url", o.urls,
                  "Replica URL; repeat for several servers, or give one with --data-parallel-size");
  cmd->add_option("--alias", o.aliases, "Other model names (glob) mapped to --model; repeatable");
  AddOptional(cmd, "--data-parallel-size,--dp", o.data_parallel_size,
              "Ranks behind a single --url");
  AddOptional(cmd, "--max-num-seqs", o.max_num_seqs,
              "The replicas' max_num_seqs (sets the auto overflow limit)");
  AddOptional(cmd, "--overflow-limit", o.overflow_limit, "auto (max_num_seqs/4) or N");
  AddOptional(cmd, "--affinity", o.affinity, "on or off");
  AddOptional(cmd, "--policy", o.policy, "Routing policy");
  AddOptional(cmd, "--admission", o.admission,
              "Hold requests at the gateway while their replica's KV cache is committed: off "
              "(default), fifo, recent:K (most recently active conversation first, none "
              "passed over more than K times) or reserve:N[:SECONDS] (first come first served, "
              "but a conversation's turns go back to back in runs of up to N >= 2: between "
              "them its room is kept for SECONDS, 1 by default, while the client sends the "
              "next)");
  AddOptional(
      cmd, "--when-affinity-off", o.when_affinity_off,
      "Data-parallel layout with affinity off: engine (vLLM's own balancer places requests, the "
      "default) or gateway (least-loaded here)");
  AddOptional(cmd, "--key-from-opening", o.key_from_opening,
              "on (default) or off: a request without a session id is keyed by its "
              "conversation's opening (system prompt, tools, first user message)");
  AddOptional(cmd, "--scrape-interval", o.scrape_interval_s,
              "Seconds between health checks and metric scrapes");
  AddOptional(cmd, "--inline-system-as-user", o.inline_system_as_user,
              "on or off (default): pass Anthropic requests' system messages inside "
              "\"messages\" on as user messages, for models whose chat template refuses a "
              "system message after the first (vLLM then merges them into the system prompt, "
              "and nothing of the conversation is read from the cache)");
  AddOptional(cmd, "--idle-sleep", o.idle_sleep,
              "on or off (default): the replicas run with vLLM's --sleep-idle-ttl, so a server "
              "whose engines sleep wakes at its next request and stays in service");
  AddOptional(cmd, "--tls-ca-file", o.tls_ca_file,
              "Replicas at https:// URLs: check their certificates against the authorities in "
              "this PEM file instead of the system's");
  AddOptional(cmd, "--tls-verify", o.tls_verify,
              "on (default) or off: check https replicas' certificates and names");
  AddOptional(cmd, "--api-keys-file", o.api_keys_file,
              "A file of API keys, one per line: requests to the model API need one of them "
              "(Authorization: Bearer <key>, or x-api-key: <key>)");
  AddOptional(cmd, "--replica-api-key-file", o.replica_api_key_file,
              "A file holding the replicas' API key (vLLM's --api-key): sent to them in place of "
              "the clients' credentials");
  AddOptional(cmd, "--body-limit-mb", o.body_limit_mb, "Largest request body accepted (MiB)");
  AddOptional(cmd, "--threads", o.threads, "Worker threads (0: one per core)");
  AddOptional(cmd, "--max-connections", o.max_connections,
              "Client connections kept open at most (0: from the open-file limit)");
  cmd->add_option("--allowed-host", o.allowed_hosts,
                  "A host name the gateway answers to on every path (others get 403), beside IP "
                  "addresses, localhost, *.localhost, *.local, *.internal and the machine's own "
                  "name (wildcards; repeatable; * for any). Default: any, or on a loopback listen "
                  "address only those");
  AddOptional(cmd, "--tls-cert-file", o.tls_cert_file,
              "Serve clients over TLS (https) with this certificate chain (PEM); needs "
              "--tls-key-file. SIGHUP reads both again");
  AddOptional(cmd, "--tls-key-file", o.tls_key_file,
              "The private key (PEM) of --tls-cert-file's certificate");
  cmd->add_option("--peer", o.peers,
                  "Another gateway in front of the same replicas (base URL; repeatable): the "
                  "two share where each conversation is homed");
  AddOptional(cmd, "--peer-sync-interval", o.peer_sync_interval_s,
              "Seconds between sending the peers the homes of the conversations routed here "
              "(default 0.2)");
  AddOptional(cmd, "--state-file", o.state_file,
              "Save where each conversation is homed to this file (periodically and at exit) "
              "and restore it at start, so a restart keeps conversations on their replicas");
  AddOptional(cmd, "--drain-delay", o.drain_delay_s,
              "On SIGTERM/SIGINT, seconds to go on serving with GET /ready saying 503 before the "
              "drain, so that a load balancer takes the gateway out first (default 0)");
  AddOptional(cmd, "--drain-timeout", o.drain_timeout_s,
              "On SIGTERM/SIGINT, seconds the requests in progress get to finish (default 30; "
              "another signal during the drain stops at once)");
  AddOptional(cmd, "--hand-over-drain-timeout", o.hand_over_drain_timeout_s,
              "After a hand-over to a new gateway (SIGUSR2), seconds the old one's requests in "
              "progress get to finish (default 600)");
  AddOptional(cmd, "--send-timeout", o.send_timeout_s,
              "Seconds a client may read nothing of its response before it is cut off and its "
              "request ended upstream (default 60)");
  AddOptional(cmd, "--read-timeout", o.read_timeout_s,
              "Seconds a replica may send nothing (no response head, or no byte of its body) "
              "before its connection is closed: 504, or a cut response (default 0: no limit)");
  AddOptional(cmd, "--stream-keepalive", o.stream_keepalive_s,
              "Seconds a generation stream may wait for its first event before its head goes "
              "to the client with a keepalive, and more every 15 s, so that clients' timeouts on "
              "the head do not send it again (default 120; 0: never)");
  AddOptional(cmd, "--admission-max-hold", o.admission_max_hold_s,
              "Seconds admission may hold a request before it goes to its replica whatever room "
              "there is, so that its client gets a head before its own timeout (default 240; 0: "
              "no bound)");
  AddOptional(cmd, "--stall-timeout", o.stall_timeout_s,
              "Seconds a replica may hold requests with no response head and no work counted in "
              "its metrics (a hung engine whose /health answers) before it is held out of service "
              "and what waits there is routed again (default 60; 0: never)");
  AddOptional(cmd, "--header-timeout", o.header_timeout_s,
              "Seconds a client connection may take to send a request's head, waiting on a kept-"
              "alive connection included, before it is closed (default 60)");
  cmd->add_flag("--access-log", o.access_log,
                "Log a line per request: method, target, status, time; for a routed one its "
                "model, replica, route, key source, tokens and time to first token");
  AddOptional(cmd, "--traffic-log", o.traffic_log,
              "Append a line per generation request a replica answered to this file (a trace "
              "that warden lab --trace replays: sizes and block ids, no text)");
  AddOptional(cmd, "--otlp-traces-endpoint", o.otlp_traces_endpoint,
              "An OpenTelemetry collector's OTLP/HTTP traces endpoint (as vLLM's flag, e.g. "
              "http://localhost:4318/v1/traces): a span per request relayed to a replica, in the "
              "client's trace (its traceparent), which the replica's spans join");
  AddOptional(cmd, "--state-save-interval", o.state_save_interval_s,
              "Seconds between saves of the state file when conversations changed (default "
              "30)");
  cmd->add_flag("--check", flags->check,
                "Read and check the config (and the files it names) as serve would, say what it "
                "would serve, and exit: 0 if it is right, 2 if not; nothing is started");
  cmd->add_flag("--check-replicas", flags->check_replicas,
                "--check, then ask each replica server once (/health, /v1/models, /metrics) "
                "whether it serves the model as configured: exit 3 if one does not");
  cmd->add_flag(
      "--demo", flags->demo,
      "Start 4 simulated replicas (qwen3-4b-dp4 on the seed's machine) and route to them");
  CLI::Option* time_scale =
      cmd->add_option("--time-scale", flags->time_scale,
                      "With --demo: run the simulated replicas this much faster")
          ->capture_default_str();
  CLI::Option* balancer = cmd->add_option("--demo-balancer", flags->demo_balancer,
                                          "With --demo: the simulated server's own balancer")
                              ->capture_default_str();
  // A repeatable flag takes one value each time, and its help says one ("--url TEXT", not
  // "TEXT ...", which read as "--url a b"). (CLI11 would also take several after one flag, and
  // expand "[a,b]": "--alias '[]' --check" took --check for the alias and started the gateway.)
  for (CLI::Option* option : cmd->get_options()) {
    if (option->get_items_expected_max() > 1) {
      option->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      option->allow_extra_args(false);
    }
  }
  RefuseFlagsAsValues(cmd);
  cmd->callback([flags, time_scale, balancer]() {
    flags->demo_settings_given = time_scale->count() > 0 || balancer->count() > 0;
    const int rc = RunServe(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace warden
