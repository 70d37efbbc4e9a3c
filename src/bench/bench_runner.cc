#include "bench/bench_runner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "core/protocol/reply_content.h"
#include "core/protocol/response_observer.h"
#include "core/protocol/vllm_metrics_reader.h"
#include "net/upstream.h"
#include "net/upstream_get.h"
#include "report/stage_counts.h"
#include "util/ascii_case.h"
#include "util/first_repeated.h"
#include "util/prometheus.h"
#include "util/stats.h"

namespace warden {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace json = boost::json;

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);
// Times a turn is sent before its session is given up, waiting 0.1 s after the first failure,
// twice as long after each next one (3.1 s in all: a replica restarting, a gateway draining).
constexpr int kTurnAttempts = 6;

// What the engines' own counters said, summed over the replicas that answered.
struct EngineTotals {
  int busy = 0;     // engines with running > 0
  int running = 0;  // requests running over all engines
  bool ok = false;  // some replica answered
  // Per --metrics-url (NaN: it did not answer): a stage's hits are summed over the replicas that
  // answered at both its ends, not lost whole for one that did not.
  std::vector<double> prefix_hits;
  std::vector<double> prefix_queries;
  // warden sim's engines: simulated seconds their steps ended late, and how many said so.
  double late_s = 0;
  int late_engines = 0;
};

// The counters of one stage: a window of time in a variant's continuous run.
struct Window {
  StageCounts counts;
  Clock::time_point start;
  // Per --metrics-url: whether the replica restarted during the stage (its prefix-cache counters
  // went back, as the second-by-second samples saw): its counters then span two processes, and
  // the stage's hit rate leaves it out.
  std::vector<bool> restarted;
  std::vector<double> start_queries;  // the replicas' prefix-cache queries as it started
};

// A variant's run. Sessions go on across stage boundaries, as in the seed's test (which is why its
// overloaded stages still complete sessions): a stage adds sessions to reach its concurrency, and
// its window counts what happens while it lasts.
struct Run {
  uint64_t variant = 0;  // its place in --variants: same sessions, other words (SessionScript)
  bool over = false;
  bool interrupted = false;  // by SIGINT or SIGTERM: the stage under way is not counted
  asio::steady_timer* stage_timer = nullptr;
  uint64_t next_session = 0;
  int wanted_slots = 0;
  int slots = 0;                   // running
  std::vector<char> slot_running;  // by index: a stage starts the ones it wants that are not
  std::exception_ptr slot_error;   // what ended a slot early (the run stops, and says it)
  Window* window = nullptr;
  std::vector<tcp::socket*> sockets;
  std::vector<asio::steady_timer*> backoffs;     // slots waiting to send a turn (a failed one
                                                 // again, or after its tools' pause)
  asio::steady_timer* progress_timer = nullptr;  // the progress lines' pause, while it lasts
  std::string first_error;  // of the stage: what the first failed turn met, to show the user
};

struct Connection {
  explicit Connection(asio::any_io_executor ex) : socket(ex) {}
  tcp::socket socket;
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;  // an https target's
  beast::flat_buffer buffer;
};

// Ends what the slots wait for once the run is over: their turns' connections, and the pauses
// before a turn is sent (a failed one again, up to 1.6 s; the tools' pause), so that the run ends
// at once.
void StopSlots(Run& run) {
  for (tcp::socket* s : run.sockets) {
    boost::system::error_code ignored;
    s->close(ignored);
  }
  for (asio::steady_timer* t : run.backoffs) t->cancel();
  if (run.progress_timer) run.progress_timer->cancel();
}

// --target, then every --also-target.
std::vector<std::string> AllTargets(const BenchOptions& o) {
  std::vector<std::string> targets = {o.target};
  targets.insert(targets.end(), o.also_targets.begin(), o.also_targets.end());
  return targets;
}

// A gateway the sessions' turns are sent to.
struct Target {
  std::string text;
  UpstreamUrl url;
  std::vector<tcp::endpoint> endpoints;
  std::shared_ptr<asio::ssl::context> tls;  // an https target's
  std::unique_ptr<UpstreamPool> admin;
};

class LoadTest {
 public:
  LoadTest(const BenchOptions& o, asio::io_context& io)
      : o_(o),
        io_(io),
        signals_(io, SIGINT, SIGTERM),
        system_(SessionScript::SystemPrompt(o.workload)) {}

  bool Prepare(std::string* error);
  bool SetVariant(const std::string& variant, std::string* error);
  // The Authorization header for the gateways' admin API (empty: none).
  std::string Authorization() const;
  // The models a gateway at `admin` serves, when it has an admin API that lists them and
  // --model is not among them (empty otherwise): what to tell a user who named another.
  std::vector<std::string> ServedInstead(UpstreamPool& admin);
  // The served model --model stands for at a gateway at `admin` that routes it as an alias (empty:
  // none, or not a gateway).
  std::string AliasedModel(UpstreamPool& admin);
  // A simulator's time scale other than --time-scale, as the target says it (a gateway's admin
  // API, or warden sim's /v1/models): every figure would be off by their ratio.
  void WarnIfTimeScaleDiffers();
  // Runs every stage of a variant, sessions carried over from stage to stage, appending each
  // stage's result to `results` and then calling `stage_done`. SIGINT or SIGTERM ends it early,
  // without the stage under way; one that came while no variant ran (the gateways' affinity being
  // set, say) ends the next at its start. A second one (after that) has its default effect.
  void RunVariant(const std::string& variant, uint64_t variant_index,
                  std::vector<StageResult>* results, const std::function<void()>& stage_done);
  bool interrupted() const { return interrupted_; }
  // A stage's every turn failed: the run stopped there.
  bool gave_up() const { return gave_up_; }
  // Each target's affinity as it was before the run, and putting it back.
  bool SaveAffinity(std::string* error);
  void RestoreAffinity();

 private:
  template <typename T>
  T RunSync(asio::awaitable<T> task) {
    T result{};
    asio::co_spawn(io_, std::move(task), [&](std::exception_ptr e, T value) {
      if (e) std::rethrow_exception(e);
      result = std::move(value);
    });
    io_.restart();
    io_.run();
    return result;
  }

  asio::awaitable<EngineTotals> ReadEngines();
  // Waits (10 s at most) for the replicas to run nothing, and each gateway to show it: one still
  // showing the last stage's queues from a scrape before they emptied would place the next
  // variant's first sessions by them (found by review: two of four on one replica at times).
  asio::awaitable<bool> Settle();
  // Whether the gateway at `target` (a target without its admin API: yes) has nothing in flight
  // and scraped its replicas running and queueing nothing.
  asio::awaitable<bool> GatewayShowsIdle(Target& target);
  asio::awaitable<void> Drive(Run& run, const std::string& variant,
                              std::vector<StageResult>* results,
                              const std::function<void()>& stage_done);
  asio::awaitable<void> Slot(Run& run, int index);
  // Runs slot `index` (Slot) until it ends, and stops the run if it fails.
  void StartSlot(Run& run, int index);
  asio::awaitable<bool> Turn(Run& run, const Target& target, Connection& c, Conversation& conv,
                             std::string* text, int* replica);
  asio::awaitable<void> Sampler(Run& run);
  asio::awaitable<void> Progress(Run& run, const std::string& variant);
  // Says when warden sim's replicas ran late over a stage (they fell behind their time scale).
  void WarnIfSimulatorLate(int sessions, const EngineTotals& before,
                           const EngineTotals& after) const;
  StageResult Result(const std::string& variant, const Window& w, const EngineTotals& before,
                     const EngineTotals& after) const;
  double Sim(Clock::duration d) const {
    return std::chrono::duration<double>(d).count() * o_.time_scale;
  }
  Clock::duration Wall(double sim_s) const {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(sim_s / o_.time_scale));
  }

  const BenchOptions& o_;
  asio::io_context& io_;
  // Caught from the start of the run to its end, so that a signal between two steps (setting or
  // restoring the gateways' affinity) stops the run in order rather than ending the process there.
  asio::signal_set signals_;
  const std::string system_;
  // Each run's words are its own (the sizes still follow --seed): a run against a server that
  // served the last one would find that one's prompts in its prefix cache.
  const uint64_t run_salt_ = std::random_device()() | (uint64_t{std::random_device()()} << 32);
  std::vector<Target> targets_;  // o_.target first
  // The model's name in the gateways' admin API: --model, or the model it is an alias of.
  std::string served_model_;
  std::vector<std::unique_ptr<UpstreamPool>> metrics_;
  // Per metrics_: its engines with requests running at its last answer.
  std::vector<int> last_busy_;
  // Per metrics_: whether it was said not to answer (once, even with --quiet).
  std::vector<bool> said_silent_;
  std::vector<std::optional<bool>> saved_affinity_;  // per target; none: not known
  bool interrupted_ = false;
  bool gave_up_ = false;
};

namespace {

// Says that no connection could be made to `target` (from `r`, its admin call); returns false.
bool NothingAnswers(const Target& target, const UpstreamGetResult& r, std::string* error) {
  *error = fmt::format("nothing answers at {}: {}", target.text,
                       r.error.empty() ? "no connection" : r.error);
  return false;
}

}  // namespace

bool LoadTest::Prepare(std::string* error) {
  tcp::resolver resolver(io_);
  for (const std::string& text : AllTargets(o_)) {
    Target t;
    t.text = text;
    if (!ParseUpstreamUrl(text, &t.url, error)) return false;
    if (t.url.tls && !(t.tls = MakeTlsContext({}, error))) return false;
    boost::system::error_code ec;
    for (const auto& r : resolver.resolve(t.url.host, std::to_string(t.url.port), ec))
      t.endpoints.push_back(r.endpoint());
    if (ec || t.endpoints.empty()) {
      *error = fmt::format("--target: cannot resolve {}: {}", text, ec.message());
      return false;
    }
    t.admin = std::make_unique<UpstreamPool>(std::vector<asio::any_io_executor>{io_.get_executor()},
                                             t.url, 256, t.tls);
    targets_.push_back(std::move(t));
  }
  UpstreamPool& admin = *targets_[0].admin;
  // Perhaps an alias: the gateway says of which model (found by review).
  served_model_ = o_.model;
  UpstreamGetResult r =
      RunSync(UpstreamCall(admin, 0, http::verb::get, "/warden/v1/models/" + served_model_, "",
                           std::chrono::seconds(5), Authorization()));
  if (r.status == 404) {
    if (const std::string served = AliasedModel(admin); !served.empty()) {
      served_model_ = served;
      r = RunSync(UpstreamCall(admin, 0, http::verb::get, "/warden/v1/models/" + served_model_, "",
                               std::chrono::seconds(5), Authorization()));
    }
  }
  std::vector<std::string> urls = o_.metrics_urls;
  if (urls.empty()) {
    if (!r.connected) return NothingAnswers(targets_[0], r, error);
    if (r.status == 401) {
      *error = fmt::format(
          "{} refused {}: pass the gateway's admin_token with --admin-token", targets_[0].text,
          o_.admin_token.empty() ? "a request without an admin token" : "that admin token");
      return false;
    }
    if (const std::vector<std::string> served =
            r.status == 404 ? ServedInstead(admin) : std::vector<std::string>();
        !served.empty()) {
      *error = fmt::format("the gateway at {} serves no model '{}' (it serves {}): give --model",
                           targets_[0].text, o_.model, fmt::join(served, ", "));
      return false;
    }
    boost::system::error_code ec;
    const json::value model = r.status == 200 ? json::parse(r.body, ec) : json::value();
    const json::array* replicas = nullptr;
    if (!ec && model.is_object()) {
      if (const json::value* v = model.as_object().if_contains("replicas"))
        replicas = v->if_array();
    }
    // Anything else answering there (not a gateway's admin API) is no source of replica URLs.
    std::set<std::string> seen;
    for (const json::value& replica : replicas ? *replicas : json::array()) {
      const json::value* url =
          replica.is_object() ? replica.as_object().if_contains("url") : nullptr;
      if (url && url->is_string() && seen.insert(std::string(url->as_string())).second)
        urls.push_back(std::string(url->as_string()));
    }
  }
  for (const std::string& url : urls) {
    UpstreamUrl parsed;
    if (!ParseUpstreamUrl(url, &parsed, error)) return false;
    std::shared_ptr<asio::ssl::context> tls;
    if (parsed.tls && !(tls = MakeTlsContext({}, error))) return false;
    metrics_.push_back(std::make_unique<UpstreamPool>(
        std::vector<asio::any_io_executor>{io_.get_executor()}, parsed, 256, tls));
  }
  WarnIfTimeScaleDiffers();
  last_busy_.assign(metrics_.size(), 0);
  said_silent_.assign(metrics_.size(), false);
  if (metrics_.empty()) {  // said even with --quiet: two columns will be empty
    fmt::print(
        stderr,
        "no replica metrics (no admin API at the target and no --metrics-url): replicas busy "
        "and prefix hits will be empty\n");
  }
  return true;
}

std::string LoadTest::AliasedModel(UpstreamPool& admin) {
  const UpstreamGetResult r =
      RunSync(UpstreamCall(admin, 0, http::verb::get, "/v1/models/" + o_.model, "",
                           std::chrono::seconds(5), Authorization()));
  boost::system::error_code ec;
  const json::value card = r.status == 200 ? json::parse(r.body, ec) : json::value();
  const json::value* root =
      !ec && card.is_object() ? card.as_object().if_contains("root") : nullptr;
  if (!root || !root->is_string() || root->as_string() == o_.model) return {};
  return std::string(root->as_string());
}

std::vector<std::string> LoadTest::ServedInstead(UpstreamPool& admin) {
  const UpstreamGetResult r = RunSync(UpstreamCall(admin, 0, http::verb::get, "/warden/v1/models",
                                                   "", std::chrono::seconds(5), Authorization()));
  boost::system::error_code ec;
  const json::value list = r.status == 200 ? json::parse(r.body, ec) : json::value();
  const json::value* models =
      !ec && list.is_object() ? list.as_object().if_contains("models") : nullptr;
  std::vector<std::string> names;
  for (const json::value& m : models && models->is_array() ? models->as_array() : json::array()) {
    const json::value* name = m.is_object() ? m.as_object().if_contains("name") : nullptr;
    if (name && name->is_string()) names.emplace_back(name->as_string());
  }
  if (std::find(names.begin(), names.end(), o_.model) != names.end()) names.clear();
  return names;
}

std::string LoadTest::Authorization() const {
  return o_.admin_token.empty() ? std::string() : "Bearer " + o_.admin_token;
}

bool LoadTest::SetVariant(const std::string& variant, std::string* error) {
  if (variant != "on" && variant != "off") return true;  // a label only
  const std::string body = fmt::format(R"({{"affinity":{}}})", variant == "on" ? "true" : "false");
  for (Target& t : targets_) {
    const UpstreamGetResult r =
        RunSync(UpstreamCall(*t.admin, 0, http::verb::patch, "/warden/v1/models/" + served_model_,
                             body, std::chrono::seconds(5), Authorization()));
    if (r.status != 200) {
      *error = fmt::format("variant {}: PATCH {}/warden/v1/models/{} failed ({}): {}", variant,
                           t.text, served_model_, r.status, r.body);
      return false;
    }
  }
  return true;
}

// The time scale in a simulator's description ("warden sim, profile …, time x20").
std::optional<double> TimeScaleIn(std::string_view said) {
  const size_t at = said.rfind("time x");
  if (at == std::string_view::npos) return std::nullopt;
  double scale = 0;
  const char* first = said.data() + at + 6;
  const auto [end, ec] = std::from_chars(first, said.data() + said.size(), scale);
  if (ec != std::errc() || !(scale > 0)) return std::nullopt;
  return scale;
}

void LoadTest::WarnIfTimeScaleDiffers() {
  UpstreamPool& target = *targets_[0].admin;
  std::string said;
  const auto read = [&](std::string_view path) {
    const UpstreamGetResult r = RunSync(UpstreamCall(target, 0, http::verb::get, std::string(path),
                                                     "", std::chrono::seconds(5), Authorization()));
    boost::system::error_code ec;
    const json::value v = r.status == 200 ? json::parse(r.body, ec) : json::value();
    return ec ? json::value() : v;
  };
  const json::value model = read("/warden/v1/models/" + served_model_);  // a gateway
  if (const json::value* s =
          model.is_object() ? model.as_object().if_contains("simulated") : nullptr;
      s && s->is_string())
    said = s->as_string();
  if (said.empty()) {  // a simulator itself
    const json::value list = read("/v1/models");
    const json::value* data = list.is_object() ? list.as_object().if_contains("data") : nullptr;
    for (const json::value& m : data && data->is_array() ? data->as_array() : json::array()) {
      const json::value* s =
          m.is_object() ? m.as_object().if_contains("warden_simulated") : nullptr;
      if (s && s->is_string()) said = s->as_string();
    }
  }
  const std::optional<double> scale = TimeScaleIn(said);
  if (!scale || std::abs(*scale - o_.time_scale) <= 1e-9 * *scale) return;
  fmt::print(stderr,
             "bench: {} says its replicas are simulated at time x{:g} ({}), and --time-scale is "
             "{:g}: every time and rate measured would be off by {:g}x; pass --time-scale {:g}\n",
             targets_[0].text, *scale, said, o_.time_scale, *scale / o_.time_scale, *scale);
}

bool LoadTest::SaveAffinity(std::string* error) {
  saved_affinity_.assign(targets_.size(), std::nullopt);
  const bool switches = std::any_of(o_.variants.begin(), o_.variants.end(),
                                    [](const std::string& v) { return v == "on" || v == "off"; });
  if (!switches) return true;
  for (size_t i = 0; i < targets_.size(); ++i) {
    const UpstreamGetResult r = RunSync(UpstreamCall(*targets_[i].admin, 0, http::verb::get,
                                                     "/warden/v1/models/" + served_model_, "",
                                                     std::chrono::seconds(5), Authorization()));
    boost::system::error_code ec;
    const json::value model = json::parse(r.body, ec);
    const json::value* affinity =
        !ec && model.is_object() ? model.as_object().if_contains("affinity") : nullptr;
    if (!r.connected) return NothingAnswers(targets_[i], r, error);
    if (r.status != 200 || !affinity || !affinity->is_bool()) {
      *error = fmt::format(
          "variants off and on switch the affinity of a gateway's model, and GET "
          "{}/warden/v1/models/{} answered {}{}: to drive another endpoint, name the variants "
          "otherwise (--variants x) and give the replicas with --metrics-url",
          targets_[i].text, served_model_, r.status,
          r.status == 0 ? " (no answer: " + (r.error.empty() ? "none" : r.error) + ")" : "");
      return false;
    }
    saved_affinity_[i] = affinity->as_bool();
    // Set back at the end of the run, or when it is stopped (Ctrl-C); a run killed outright
    // cannot, so say how.
    // (The token itself is not printed: logs are read by more people than hold it.)
    fmt::print(stderr,
               "bench: {}'s affinity is {}; if the run is killed, set it back with: curl "
               "-X PATCH {}/warden/v1/models/{}{} -d '{{\"affinity\":{}}}'\n",
               targets_[i].text, *saved_affinity_[i] ? "on" : "off", targets_[i].text,
               served_model_,
               o_.admin_token.empty() ? "" : " -H 'Authorization: Bearer <admin token>'",
               *saved_affinity_[i]);
  }
  return true;
}

void LoadTest::RestoreAffinity() {
  for (size_t i = 0; i < saved_affinity_.size(); ++i) {
    if (!saved_affinity_[i]) continue;
    const std::string body = fmt::format(R"({{"affinity":{}}})", *saved_affinity_[i]);
    const UpstreamGetResult r = RunSync(UpstreamCall(*targets_[i].admin, 0, http::verb::patch,
                                                     "/warden/v1/models/" + served_model_, body,
                                                     std::chrono::seconds(5), Authorization()));
    if (r.status != 200) {
      fmt::print(stderr, "bench: could not set {}'s affinity back to {} ({})\n", targets_[i].text,
                 *saved_affinity_[i] ? "on" : "off", r.status);
    }
  }
}

asio::awaitable<EngineTotals> LoadTest::ReadEngines() {
  EngineTotals t;
  t.prefix_hits.assign(metrics_.size(), NAN);
  t.prefix_queries.assign(metrics_.size(), NAN);
  for (size_t i = 0; i < metrics_.size(); ++i) {
    UpstreamPool* pool = metrics_[i].get();
    const UpstreamGetResult r = co_await UpstreamGet(*pool, 0, "/metrics", std::chrono::seconds(5));
    std::vector<PrometheusSample> samples;
    std::string error;
    if (r.status != 200 || !ParsePrometheusText(r.body, &samples, &error)) {
      if (!said_silent_[i]) {
        said_silent_[i] = true;
        fmt::print(
            stderr,
            "{}/metrics: {}: left out of prefix hits while it does not answer, and of "
            "replicas busy unless it is only slow\n",
            pool->url().ToString(),
            r.status != 200 ? (r.status ? fmt::format("answered {}", r.status) : r.error) : error);
      }
      // A replica slow to answer is likely busy: it counts as it was at its last answer, as when
      // the load test could not open a connection itself. One that refuses or errs runs nothing.
      if (r.timed_out || r.local_failure) {
        t.busy += last_busy_[i];
      } else {
        last_busy_[i] = 0;
      }
      continue;
    }
    t.ok = true;
    last_busy_[i] = 0;
    for (const PrometheusSample& s : samples) {
      if (s.name == "vllm:num_requests_running") {
        t.running += static_cast<int>(s.value);
        if (s.value > 0) ++last_busy_[i];
      } else if (s.name == "warden_sim_late_seconds_total") {
        t.late_s += s.value;
        ++t.late_engines;
      }
    }
    // The prefix counters as the gateway reads them (vLLM's older names too): the server's
    // engines summed.
    std::vector<ScrapedMetrics> server;
    if (ReadVllmMetrics(r.body, 1, /*data_parallel=*/false, &server, &error)) {
      t.prefix_hits[i] = server[0].prefix_cache_hits;
      t.prefix_queries[i] = server[0].prefix_cache_queries;
    } else {
      t.prefix_hits[i] = t.prefix_queries[i] = 0;
    }
    t.busy += last_busy_[i];
  }
  co_return t;
}

// Waits (a few seconds at most) for the engines to finish what the previous stage left.
asio::awaitable<bool> LoadTest::Settle() {
  asio::steady_timer timer(io_);
  bool engines_idle = false;
  for (int i = 0; i < 200; ++i) {
    if (interrupted_) co_return false;  // (Ctrl-C: no stage follows)
    if (!engines_idle) {
      const EngineTotals t = co_await ReadEngines();
      engines_idle = !t.ok || t.running == 0;
    }
    if (engines_idle) {
      bool gateways_idle = true;
      for (Target& t : targets_) gateways_idle = gateways_idle && co_await GatewayShowsIdle(t);
      if (gateways_idle) co_return true;
    }
    timer.expires_after(std::chrono::milliseconds(50));
    co_await timer.async_wait(kUseTuple);
  }
  co_return false;
}

asio::awaitable<bool> LoadTest::GatewayShowsIdle(Target& target) {
  if (!target.admin) co_return true;
  const UpstreamGetResult r =
      co_await UpstreamCall(*target.admin, 0, http::verb::get, "/warden/v1/models/" + served_model_,
                            "", std::chrono::seconds(5), Authorization());
  boost::system::error_code ec;
  const json::value model = r.status == 200 ? json::parse(r.body, ec) : json::value();
  const json::value* replicas =
      !ec && model.is_object() ? model.as_object().if_contains("replicas") : nullptr;
  if (!replicas || !replicas->is_array()) co_return true;  // no gateway's admin API
  const auto is_zero = [](const json::object& replica, std::string_view field) {
    const json::value* v = replica.if_contains(field);
    return !v || v->is_null() || (v->is_number() && v->to_number<double>() == 0);
  };
  for (const json::value& replica : replicas->as_array()) {
    if (!replica.is_object()) continue;
    const json::object& o = replica.as_object();
    if (!is_zero(o, "in_flight") || !is_zero(o, "running") || !is_zero(o, "waiting"))
      co_return false;
  }
  co_return true;
}

asio::awaitable<bool> LoadTest::Turn(Run& run, const Target& target, Connection& c,
                                     Conversation& conv, std::string* text, int* replica) {
  const BenchRequest req = conv.NextRequest();
  http::request<http::string_body> request{http::verb::post, target.url.base_path + req.target, 11};
  request.set(http::field::host, target.url.host_header());
  request.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : req.headers) request.set(k, v);
  if (!o_.api_key.empty()) request.set(http::field::authorization, "Bearer " + o_.api_key);
  request.body() = req.body;
  request.prepare_payload();

  for (int attempt = 0; attempt < 2 && !run.over; ++attempt) {
    if (!c.socket.is_open()) {
      auto [ec, endpoint] = co_await asio::async_connect(c.socket, target.endpoints, kUseTuple);
      if (ec) {
        if (run.first_error.empty()) run.first_error = "cannot connect: " + ec.message();
        co_return false;
      }
      c.socket.set_option(tcp::no_delay(true), ec);
      c.buffer.clear();
      c.tls.reset();
      if (target.tls) {
        c.tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(c.socket, *target.tls);
        CheckServerNamed(*c.tls, target.url.host);
        std::tie(ec) = co_await c.tls->async_handshake(asio::ssl::stream_base::client, kUseTuple);
        if (ec) {
          if (run.first_error.empty()) run.first_error = "TLS: " + ec.message();
          c.socket.close(ec);
          co_return false;
        }
      }
    }
    const Clock::time_point sent = Clock::now();
    boost::system::error_code wec, rec;
    if (c.tls) {
      std::tie(wec, std::ignore) = co_await http::async_write(*c.tls, request, kUseTuple);
    } else {
      std::tie(wec, std::ignore) = co_await http::async_write(c.socket, request, kUseTuple);
    }
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    if (!wec && c.tls) {
      std::tie(rec, std::ignore) =
          co_await http::async_read_header(*c.tls, c.buffer, parser, kUseTuple);
    } else if (!wec) {
      std::tie(rec, std::ignore) =
          co_await http::async_read_header(c.socket, c.buffer, parser, kUseTuple);
    }
    if (wec || rec) {  // a kept-alive connection the server had closed: once more on a new one
      boost::system::error_code ignored;
      c.socket.close(ignored);
      continue;
    }
    const auto& res = parser.get();
    const auto replica_header = res.find("x-warden-replica");
    *replica =
        replica_header == res.end() ? -1 : std::atoi(std::string(replica_header->value()).c_str());
    ResponseObserver observer(
        IEquals(res[http::field::content_type].substr(0, 17), "text/event-stream"));
    ReplyText sink(text);
    observer.CaptureText(&sink);
    char piece[16 * 1024];
    bool ok = res.result_int() == 200;
    std::string refusal;  // the start of an error answer's body
    int counted = 0;      // token events already counted in a window
    while (!parser.is_done()) {
      parser.get().body().data = piece;
      parser.get().body().size = sizeof(piece);
      boost::system::error_code ec;
      if (c.tls) {
        std::tie(ec, std::ignore) =
            co_await http::async_read_some(*c.tls, c.buffer, parser, kUseTuple);
      } else {
        std::tie(ec, std::ignore) =
            co_await http::async_read_some(c.socket, c.buffer, parser, kUseTuple);
      }
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        ok = false;
        if (refusal.empty()) refusal = "the response broke off: " + ec.message();
        break;
      }
      const size_t got = sizeof(piece) - parser.get().body().size;
      if (got == 0) continue;
      if (res.result_int() != 200 && refusal.size() < 300)
        refusal.append(piece, std::min(got, 300 - refusal.size()));
      // (Counted as it comes, in the stage it comes in, so that a turn ending after its stage
      // was counted still counts there. An attempt that fails after its first token counts too:
      // the client saw that token, and the turn sent again counts its own.)
      if (observer.Feed(std::string_view(piece, got)))
        run.window->counts.ttfb_s.push_back(Sim(Clock::now() - sent));
      run.window->counts.tokens +=
          observer.token_events() - counted;  // tokens count where they arrive
      counted = observer.token_events();
    }
    observer.Finish();
    // A stream that broke off, or that carried an error inside its 200, is a failed turn.
    if (ok && observer.error_event()) {
      ok = false;
      refusal = "an error event in the stream";
    } else if (ok && !observer.stream_ended()) {
      ok = false;
      refusal = "the stream ended without its end event";
    }
    // Tokens are counted per streamed event as they arrive; several tokens may come in one
    // event, which the usage at the end says.
    if (observer.usage().output_tokens > counted)
      run.window->counts.tokens += observer.usage().output_tokens - counted;
    if (!ok && run.first_error.empty())
      run.first_error = fmt::format("HTTP {} {}", res.result_int(), refusal);
    if (!ok || !parser.keep_alive()) {
      boost::system::error_code ignored;
      c.socket.close(ignored);
    }
    co_return ok&& observer.saw_token();
  }
  co_return false;
}

asio::awaitable<void> LoadTest::Slot(Run& run, int index) {
  std::vector<std::unique_ptr<Connection>> connections;  // one per target
  // Out of run.sockets however the slot ends (StopSlots closes what is there).
  struct Registered {
    Run& run;
    const std::vector<std::unique_ptr<Connection>>& connections;
    ~Registered() {
      for (const auto& c : connections) std::erase(run.sockets, &c->socket);
    }
  } registered{run, connections};
  for (size_t i = 0; i < targets_.size(); ++i) {
    connections.push_back(std::make_unique<Connection>(io_.get_executor()));
    run.sockets.push_back(&connections.back()->socket);
  }
  while (!run.over && index < run.wanted_slots) {
    const uint64_t session = run.next_session++;
    Conversation conv(o_.workload, system_, 0, session, o_.api, o_.model, o_.session_ids,
                      run.variant ^ run_salt_);
    conv.set_system_reminders(o_.system_reminders);
    int previous = -1;
    int failures = 0;  // of the turn being sent
    bool failed = false;
    // A stage of fewer sessions than the one before stops those past its count once the turn
    // they have under way ends (it is counted where it ends).
    while (!conv.done() && !run.over && index < run.wanted_slots) {
      std::string text;
      int replica = -1;
      const size_t t = (session + static_cast<uint64_t>(conv.turn())) % targets_.size();
      const bool ok = co_await Turn(run, targets_[t], *connections[t], conv, &text, &replica);
      if (run.over) break;  // cut at the end of the run
      Window& w = *run.window;
      if (!ok) {
        ++w.counts.errors;
        // The turn is sent again, so that a passing failure leaves every variant running the
        // same sessions; one that keeps failing gives the session up.
        if (++failures == kTurnAttempts) {
          failed = true;
          break;
        }
        asio::steady_timer backoff(io_, std::chrono::milliseconds(100 << (failures - 1)));
        run.backoffs.push_back(&backoff);
        co_await backoff.async_wait(kUseTuple);
        std::erase(run.backoffs, &backoff);
        continue;
      }
      failures = 0;
      ++w.counts.turns;
      if (conv.turn() > 0 && previous >= 0 && replica >= 0) {
        ++w.counts.follow_ups;
        if (replica == previous) ++w.counts.stayed;
      }
      previous = replica;
      conv.RecordReply(text);
      const double tools = conv.done() ? 0 : conv.script().ToolSecondsBefore(conv.turn());
      if (tools > 0) {  // the agent's tools run before its next request
        asio::steady_timer pause(io_, Wall(tools));
        run.backoffs.push_back(&pause);
        co_await pause.async_wait(kUseTuple);
        std::erase(run.backoffs, &pause);
      }
    }
    if (conv.done() && !failed) ++run.window->counts.sessions_completed;
  }
}

void LoadTest::StartSlot(Run& run, int index) {
  run.slot_running[index] = 1;
  ++run.slots;
  asio::co_spawn(io_, Slot(run, index), [&run, index](std::exception_ptr e) {
    run.slot_running[index] = 0;
    --run.slots;
    if (!e || run.slot_error) return;
    run.slot_error = e;  // the run stops, the stage under way not counted: Drive says why
    run.over = run.interrupted = true;
    if (run.stage_timer) run.stage_timer->cancel();
    StopSlots(run);
  });
}

asio::awaitable<void> LoadTest::Sampler(Run& run) {
  asio::steady_timer timer(io_);
  Clock::time_point next = Clock::now();
  std::vector<double> last_queries(metrics_.size(), NAN);  // each replica's previous sample
  const Window* last_window = nullptr;
  // The first sample is a second in: at the run's start nothing has reached the replicas yet.
  while (!run.over) {
    next += Wall(1.0);
    timer.expires_at(next);
    co_await timer.async_wait(kUseTuple);
    if (run.over) break;
    Window* w = run.window;
    const EngineTotals t = co_await ReadEngines();
    if (run.over) break;  // `w` may be gone with the run's windows
    // (A replica that refuses its metrics runs nothing: a sample all the same, while another
    // answers or a slow one counts. With none read, none: the cell is blank, not 0; found by
    // review.)
    if (!metrics_.empty() && w == run.window && (t.ok || t.busy > 0))
      w->counts.busy.push_back(t.busy);
    // A stage's first sample is compared with the stage's own start: a restart just before it
    // belongs to the stage before.
    if (w != last_window && !w->start_queries.empty()) last_queries = w->start_queries;
    last_window = w;
    for (size_t i = 0; i < metrics_.size(); ++i) {
      if (std::isnan(t.prefix_queries[i])) continue;
      if (t.prefix_queries[i] < last_queries[i] && !run.over && w == run.window)
        w->restarted[i] = true;
      last_queries[i] = t.prefix_queries[i];
    }
  }
}

asio::awaitable<void> LoadTest::Progress(Run& run, const std::string& variant) {
  asio::steady_timer timer(io_);
  run.progress_timer = &timer;
  while (!run.over) {
    timer.expires_after(std::chrono::seconds(5));
    co_await timer.async_wait(kUseTuple);
    if (run.over) break;
    const Window& w = *run.window;
    if (w.counts.sessions == 0) continue;  // between two stages
    fmt::print(stderr,
               "  [{}] {} sessions  {:.0f}/{:.0f} s  turns {}  sessions done {}  ttfb p50 {} s "
               " errors {}\n",
               variant, w.counts.sessions, Sim(Clock::now() - w.start), o_.stage_seconds,
               w.counts.turns, w.counts.sessions_completed,
               ProgressFigure(Percentile(w.counts.ttfb_s, 50), 2), w.counts.errors);
  }
  run.progress_timer = nullptr;
}

asio::awaitable<void> LoadTest::Drive(Run& run, const std::string& variant,
                                      std::vector<StageResult>* results,
                                      const std::function<void()>& stage_done) {
  co_await Settle();
  std::deque<Window> windows;
  // Where turns that end between two stages are counted (and dropped). The slots hold a pointer
  // to it, or to a stage's window, until they have seen `over`: it lives as long as `windows`.
  Window between;
  between.restarted.assign(metrics_.size(), false);
  asio::steady_timer timer(io_);
  for (int sessions : o_.stages) {
    if (run.over) break;  // (a signal that came before the variant ran)
    const EngineTotals before = co_await ReadEngines();
    // Stopped before the stage began (a signal while the replicas were read): no stage to start,
    // nor to announce.
    if (run.over) break;
    if (o_.progress)
      fmt::print(stderr, "stage: variant {}, {} sessions, {} s\n", variant, sessions,
                 o_.stage_seconds);
    Window& w = windows.emplace_back();
    w.restarted.assign(metrics_.size(), false);
    w.start_queries = before.prefix_queries;
    w.counts.sessions = sessions;
    w.start = Clock::now();
    run.window = &w;
    if (windows.size() == 1) {
      asio::co_spawn(io_, Sampler(run), asio::detached);
      if (o_.progress) asio::co_spawn(io_, Progress(run, variant), asio::detached);
    }
    run.wanted_slots = sessions;
    // A slot past a smaller stage's count ends after its turn under way: one still running is
    // not started twice, and one that ended is started again.
    if (std::ssize(run.slot_running) < sessions) run.slot_running.resize(sessions, 0);
    for (int slot = 0; slot < sessions; ++slot) {
      if (!run.slot_running[slot]) StartSlot(run, slot);
    }
    timer.expires_at(w.start + Wall(o_.stage_seconds));
    run.stage_timer = &timer;
    co_await timer.async_wait(kUseTuple);
    run.stage_timer = nullptr;
    if (run.interrupted) break;
    // What finishes while the replicas' counters are read (a slow replica can take seconds)
    // belongs to no stage: the stage's figures are over exactly its length.
    run.window = &between;
    const EngineTotals after = co_await ReadEngines();
    results->push_back(Result(variant, w, before, after));
    WarnIfSimulatorLate(sessions, before, after);
    const StageResult r = results->back();
    if (o_.progress) {
      // A figure not measured (no replica metrics; no gateway header telling the replica) is a
      // dash.
      fmt::print(stderr,
                 "  done: {:.0f} sessions/h, {:.0f} tokens/min, ttfb p50 {} s p95 {} s, "
                 "busy {}, hits {} %, stayed {} %, {} turns, {} errors\n",
                 r.sessions_per_hour, r.output_tokens_per_min, ProgressFigure(r.ttfb_p50_s, 2),
                 ProgressFigure(r.ttfb_p95_s, 2), ProgressFigure(r.replicas_busy, 2),
                 ProgressFigure(r.prefix_hit_pct, 1), ProgressFigure(r.stayed_on_replica_pct, 1),
                 r.turns, r.errors);
      if (!run.first_error.empty()) fmt::print(stderr, "  first error: {}\n", run.first_error);
    } else if (r.turns == 0 && !run.first_error.empty()) {  // said even when quiet: the run fails
      fmt::print(stderr, "bench: {} sessions: first error: {}\n", r.sessions, run.first_error);
    }
    run.first_error.clear();
    stage_done();
    // Every turn failed (a key refused, a prompt past the context, no replica in service): the
    // stages after it would too, each for its whole length.
    if (r.turns == 0 && r.errors > 0) {
      gave_up_ = true;
      break;
    }
  }
  run.over = true;
  StopSlots(run);
  // The slots still hold pointers into `windows`: let them see `over` before it goes.
  while (run.slots > 0) {
    timer.expires_after(std::chrono::milliseconds(5));
    co_await timer.async_wait(kUseTuple);
  }
  if (run.slot_error) std::rethrow_exception(run.slot_error);
}

void LoadTest::WarnIfSimulatorLate(int sessions, const EngineTotals& before,
                                   const EngineTotals& after) const {
  if (after.late_engines == 0 || after.late_engines != before.late_engines) return;
  const double share = (after.late_s - before.late_s) / (after.late_engines * o_.stage_seconds);
  if (share < 0.05) return;
  fmt::print(stderr,
             "bench: {} sessions: the simulated replicas fell behind real time, their steps "
             "{:.0f} % late (warden_sim_late_seconds_total): they served less than their engine "
             "model says, so the stage understates them; lower --time-scale\n",
             sessions, 100 * share);
}

StageResult LoadTest::Result(const std::string& variant, const Window& w,
                             const EngineTotals& before, const EngineTotals& after) const {
  StageCounts counts = w.counts;
  bool any = false;
  double queries = 0, hits = 0;
  for (size_t i = 0; i < metrics_.size(); ++i) {
    const double q = after.prefix_queries[i] - before.prefix_queries[i];
    const double h = after.prefix_hits[i] - before.prefix_hits[i];
    // Silent at one end, or restarted in between (seen by the samples, or by counters that went
    // back or do not add up at the stage's ends).
    if (std::isnan(q) || std::isnan(h) || w.restarted[i] || q < 0 || h < 0 || h > q) continue;
    any = true;
    queries += q;
    hits += h;
  }
  if (any) {
    counts.prefix_queries = queries;
    counts.prefix_hits = hits;
  }
  return Summarize(counts, variant, o_.stage_seconds);
}

void LoadTest::RunVariant(const std::string& variant, uint64_t variant_index,
                          std::vector<StageResult>* results,
                          const std::function<void()>& stage_done) {
  Run run;
  run.variant = variant_index;
  signals_.async_wait([&](boost::system::error_code ec, int) {
    if (ec) return;
    signals_.clear();  // a second signal ends the process
    fmt::print(stderr, "bench: stopping (the stage under way is not counted)\n");
    interrupted_ = run.interrupted = run.over = true;
    if (run.stage_timer) run.stage_timer->cancel();
    StopSlots(run);
  });
  asio::co_spawn(io_, Drive(run, variant, results, stage_done), [&](std::exception_ptr e) {
    signals_.cancel();
    if (e) std::rethrow_exception(e);
  });
  io_.restart();
  io_.run();
}

}  // namespace

std::string ValidateBenchOptions(const BenchOptions& o) {
  if (o.stages.empty()) return "--stages: at least one stage";
  for (int s : o.stages) {
    if (s < 1 || s > 10000) return fmt::format("--stages: {} must be 1 to 10000 sessions", s);
  }
  if (!(o.stage_seconds >= 1 && o.stage_seconds <= 1e6))
    return fmt::format("--stage-seconds: must be 1 to 1e6, got {}", o.stage_seconds);
  if (!(o.time_scale >= 1e-3 && o.time_scale <= 1e6))
    return fmt::format("--time-scale: must be 1e-3 to 1e6, got {}", o.time_scale);
  if (o.variants.empty()) return "--variants: at least one variant";
  for (const std::string& v : o.variants) {
    if (v.empty()) return "--variants: a variant needs a name (off, on, or any other)";
    // A name is a cell of results.csv (unquoted) and a line of the report.
    if (std::any_of(v.begin(), v.end(),
                    [](unsigned char c) { return c < 0x20 || c == 0x7f || c == ','; }))
      return fmt::format("--variants: {:?} has a comma or a control character", v);
  }
  if (const auto twice = FirstRepeated(o.variants))
    return fmt::format("--variants: '{}' is named twice (its rows could not be told apart)",
                       *twice);
  std::vector<std::string> metrics_urls;  // as written, without a trailing '/'
  for (std::string_view url : o.metrics_urls) {
    while (url.ends_with('/')) url.remove_suffix(1);
    metrics_urls.emplace_back(url);
  }
  if (const auto twice = FirstRepeated(metrics_urls))
    return fmt::format("--metrics-url: {} is given twice (its replica would count twice)", *twice);
  if (o.model.empty()) return "--model: must not be empty";
  if (o.out.empty()) return "--out: must not be empty";
  if (o.system_reminders && o.api != BenchApi::kAnthropic)
    return "--system-reminders: Anthropic requests only (--api anthropic)";
  return ValidateWorkload(o.workload);
}

bool RunLoadTest(const BenchOptions& o, std::vector<StageResult>* results, std::string* error) {
  asio::io_context io(1);
  LoadTest test(o, io);
  if (!test.Prepare(error)) return false;
  std::string description = fmt::format(
      "warden bench against {} (model {}), {} s per stage, time scale {}, seed {}",
      fmt::join(AllTargets(o), " + "), o.model, o.stage_seconds, o.time_scale, o.workload.seed);
  if (const std::string flags = WorkloadFlags(o.workload); !flags.empty())
    description += "; with " + flags;
  // Written after every stage: a run stopped early (Ctrl-C, a lost machine) keeps what it measured.
  const size_t all_stages = o.stages.size() * o.variants.size();
  const auto write_so_far = [&] {
    if (results->size() == all_stages) return;  // written once more below, as the whole run
    std::string write_error;
    const std::string partial =
        fmt::format("{} (in progress: {} of {} stages)", description, results->size(), all_stages);
    if (!WriteResultTables(*results, o.out, partial, &write_error))
      fmt::print(stderr, "bench: results so far not written: {}\n", write_error);
  };
  if (!test.SaveAffinity(error)) return false;
  for (size_t v = 0; v < o.variants.size(); ++v) {
    if (!test.SetVariant(o.variants[v], error)) {
      test.RestoreAffinity();
      return false;
    }
    try {
      test.RunVariant(o.variants[v], v, results, write_so_far);
    } catch (const std::exception& e) {  // a slot's failure (StartSlot): the stage under way
      test.RestoreAffinity();            // is not counted
      *error = fmt::format("a session failed ({}); {} stages finished, in {}/", e.what(),
                           results->size(), o.out);
      return false;
    }
    if (test.gave_up()) break;
    // A signal after the last stage ended stops nothing: the run is whole.
    if (test.interrupted() && results->size() < all_stages) {
      test.RestoreAffinity();
      *error = results->empty() ? std::string("stopped before any stage finished")
                                : fmt::format("stopped early; the {} stages finished are in {}/",
                                              results->size(), o.out);
      return false;
    }
  }
  test.RestoreAffinity();
  if (!WriteResults(*results, o.out, description, {}, error)) return false;
  for (const StageResult& r : *results) {
    if (r.turns == 0 && r.errors > 0) {
      *error = fmt::format(
          "variant {}, {} sessions: every turn failed ({} errors){}; results in {}/", r.variant,
          r.sessions, r.errors,
          results->size() < all_stages ? ", so the stages after it were not run" : "", o.out);
      return false;
    }
    if (r.turns == 0) {  // a stage may be shorter than a turn: said, not failed
      fmt::print(stderr,
                 "bench: variant {}, {} sessions: no turn ended within the stage (the target "
                 "stopped answering, or a turn takes longer than --stage-seconds)\n",
                 r.variant, r.sessions);
    }
  }
  return true;
}

}  // namespace warden
