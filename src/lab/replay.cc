#include "lab/replay.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/tokens.h"
#include "lab/lab_run.h"
#include "util/split_mix.h"

namespace warden {
namespace {

// The trace as the replay uses it: requests that fit a replica, in timestamp order, each with its
// session and its session's next request.
struct Plan {
  struct Entry {
    const TraceRequest* request;
    double at_s;        // its timestamp, from the first, after the speed-up
    int session;        // index into keys, or -1
    int position = 0;   // within its session
    int previous = -1;  // the session's request before it
    int next = -1;      // the session's next request (an index into entries)
    bool last = true;   // the session's last
    int output = 1;     // tokens to generate: at least 1, within the context
  };
  std::vector<Entry> entries;
  std::vector<std::string> keys;
  int conversations = 0;      // sessions, and requests without one
  std::vector<int> openings;  // each conversation's first request, in order
  int tokens_per_id = 0;
};

// The tokens each hash id stands for: block_tokens, unless the trace's ids run past its prompts
// (ids of a tokenizer's blocks reckoned from bytes, by a gateway older than the one that learns
// its model's bytes a token): then each id stands for its share of them, so that what two
// prompts share keeps its place in their length. (Ids that name only a prompt's first blocks, the
// rest its own, are as they say.)
int TokensPerId(const std::vector<const TraceRequest*>& requests, int block_tokens) {
  double tokens = 0, ids = 0;
  size_t with_ids = 0, over = 0;
  for (const TraceRequest* t : requests) {
    if (t->hash_ids.empty()) continue;
    const auto n = static_cast<int64_t>(t->hash_ids.size());
    ++with_ids;
    // Ids past its prompt's end (a trace may name only a prompt's cached prefix: fewer is fine).
    if ((n - 1) * block_tokens >= t->input_length) ++over;
    tokens += t->input_length;
    ids += static_cast<double>(n) - 0.5;  // the last one half full, on average
  }
  if (with_ids == 0 || over * 10 < with_ids) return block_tokens;
  return static_cast<int>(
      std::clamp(std::round(tokens / ids), 1.0, static_cast<double>(block_tokens)));
}

// The most a replay may span, or wait between two turns, in simulated seconds (its scrapes and
// samples tick every second of it): a Unix time beside relative ones would otherwise make years.
constexpr double kLongestReplay = 1e7;
// The most windows a replay's trace may be cut into (--trace-window), for each policy.
constexpr double kMostWindows = 100'000;

// When each request comes, in ms: its timestamp; a session's request without one (aiperf writes
// them for a session's first turn only), its delay after the session's request before it in the
// file; another without one, with the line before it.
std::vector<double> ArrivalTimes(const std::vector<TraceRequest>& trace) {
  std::vector<double> at(trace.size());
  std::unordered_map<std::string_view, double> session_at;
  double line_before = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& t = trace[i];
    double when = line_before;
    if (t.timestamp_ms >= 0) {
      when = t.timestamp_ms;
    } else if (auto it = session_at.find(t.session_id);
               !t.session_id.empty() && it != session_at.end()) {
      when = it->second + std::max(0.0, t.delay_ms);
    }
    at[i] = when;
    line_before = when;
    if (!t.session_id.empty()) session_at[t.session_id] = when;
  }
  return at;
}

bool MakePlan(const std::vector<TraceRequest>& trace, const ReplayOptions& r, int max_model_len,
              Plan* plan, ReplayNotes* notes, std::string* error) {
  const std::vector<double> at = ArrivalTimes(trace);
  const double first = at.empty() ? 0 : *std::min_element(at.begin(), at.end());
  std::vector<size_t> order;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& t = trace[i];
    if (t.input_length + 1 > max_model_len) {
      ++notes->too_long;
      continue;
    }
    const double span_s = (at[i] - first) / 1000 / r.speed;
    const double delay_s = std::max(0.0, t.delay_ms) / 1000 / r.speed;
    if (span_s > kLongestReplay || delay_s > kLongestReplay) {
      *error = fmt::format(
          "request {} of the trace comes {:.3g} s after its first, or {:.3g} s after the turn "
          "before it, at --trace-speed {}: more than {:.0e} s (timestamps in Unix time beside "
          "relative ones?)",
          i + 1, span_s, delay_s, r.speed, kLongestReplay);
      return false;
    }
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return at[a] < at[b]; });
  std::vector<const TraceRequest*> kept;
  for (size_t i : order) kept.push_back(&trace[i]);
  plan->tokens_per_id = r.fit_blocks ? TokensPerId(kept, r.block_tokens) : r.block_tokens;
  notes->tokens_per_id = plan->tokens_per_id;
  // A closed loop adds a session's delays up: their sum is bounded too.
  std::unordered_map<std::string_view, double> waited_s;
  for (size_t i : order) {
    const TraceRequest& t = trace[i];
    if (t.session_id.empty() || t.delay_ms < 0) continue;
    double& sum = waited_s[t.session_id];
    sum += t.delay_ms / 1000 / r.speed;
    if (sum > kLongestReplay) {
      *error = fmt::format(
          "session {} of the trace waits {:.3g} s in all between its turns at --trace-speed {}: "
          "more than {:.0e} s",
          t.session_id, sum, r.speed, kLongestReplay);
      return false;
    }
  }
  std::unordered_map<std::string_view, int> session_of;
  std::vector<int> last_of;  // per session, its latest entry so far
  for (size_t i : order) {
    const TraceRequest* t = &trace[i];
    Plan::Entry e{t, (at[i] - first) / 1000 / r.speed, -1};
    e.output = std::clamp(t->output_length, 1, max_model_len - t->input_length);
    const int index = static_cast<int>(plan->entries.size());
    if (!t->session_id.empty()) {
      auto [it, added] = session_of.emplace(t->session_id, static_cast<int>(plan->keys.size()));
      if (added) {
        plan->keys.push_back(t->session_id);
        last_of.push_back(-1);
      }
      e.session = it->second;
      if (const int before = last_of[e.session]; before >= 0) {
        plan->entries[before].next = index;
        plan->entries[before].last = false;
        e.position = plan->entries[before].position + 1;
        e.previous = before;
      }
      last_of[e.session] = index;
    } else {
      ++plan->conversations;
    }
    if (e.position == 0) plan->openings.push_back(index);
    plan->entries.push_back(e);
  }
  plan->conversations += static_cast<int>(plan->keys.size());
  notes->requests = static_cast<int>(plan->entries.size());
  notes->sessions = plan->conversations;
  notes->trace_seconds = plan->entries.empty() ? 0 : plan->entries.back().at_s;
  return true;
}

// `count` tokens standing for the block with this id: the same for the same id.
// `words`: 0, or a run's own on warm engines (no run finds another's prompts cached).
void AppendBlock(uint64_t id, int count, std::vector<TokenId>* out, uint64_t words) {
  uint64_t x = XXH3_64bits_withSeed(&id, sizeof id, 0x7261636554ULL + words);
  for (int i = 0; i < count; ++i) {
    const uint64_t z = SplitMix64(x + static_cast<uint64_t>(i) * kSplitMixGamma);
    out->push_back(kFirstWordToken + static_cast<TokenId>(z % (TokenId{1} << 30)));
  }
}

class TraceRun : public LabRun {
 public:
  TraceRun(const LabOptions& o, const EngineProfile& profile,
           std::vector<std::unique_ptr<Engine>>* engines, HitBound* bound,
           const std::string& policy, const std::string& admission,
           std::vector<LabRequest>* requests, const Plan& plan, const ReplayOptions& r,
           std::vector<ReplayWindow>* windows, uint64_t words)
      : LabRun(o, profile, engines, bound, policy, admission, requests),
        words_(words),
        plan_(plan),
        r_(r),
        windows_(r.window_s > 0 ? windows : nullptr),
        last_replica_(plan.keys.size(), -1) {
    slots_.resize(plan.entries.size());
  }

  StageResult Run(const std::string& variant) {
    variant_ = variant;
    Begin(now_);
    Window w;
    w.counts.sessions =
        r_.concurrency > 0 ? std::min(r_.concurrency, plan_.conversations) : plan_.conversations;
    w.start = now_;
    start_ = now_;
    Measure(&w);
    if (r_.concurrency > 0) {
      while (next_opening_ < std::min<size_t>(plan_.openings.size(), r_.concurrency))
        Push(start_, kDue, plan_.openings[next_opening_++], 0);
    } else {
      for (int i = 0; i < static_cast<int>(plan_.entries.size()); ++i) {
        const Plan::Entry& e = plan_.entries[i];
        if (!r_.closed_loop || e.position == 0) Push(start_ + e.at_s, kDue, i, 0);
      }
    }
    if (windows_) OpenSlice(now_);
    RunUntil(std::numeric_limits<double>::infinity());
    if (windows_) CloseSlice(now_);
    StageResult result = Result(variant, w, std::max(now_ - start_, 1.0));
    Measure(nullptr);
    DropUnfinished();
    return result;
  }

 private:
  static constexpr int kSliceEnds = -1;  // a Due event's index: the window counting now ends

  void OpenSlice(double t) {
    window_now_ = {};
    window_now_.start = t;
    slice_conversations_.clear();
    MeasureSlice(&window_now_);
    Push(t + r_.window_s, kDue, kSliceEnds, 0);
  }

  void CloseSlice(double t) {
    MeasureSlice(nullptr);
    // (Not an empty one the replay ended at the start of.)
    const StageCounts& c = window_now_.counts;
    if (t <= window_now_.start && c.ttfb_s.empty() && c.turns == 0 && c.tokens == 0) return;
    window_now_.counts.sessions = static_cast<int>(slice_conversations_.size());
    windows_->push_back({window_now_.start - start_,
                         Result(variant_, window_now_, std::max(t - window_now_.start, 1.0))});
  }

  void Due(int i, int, double t) override {
    if (i == kSliceEnds) {
      CloseSlice(t);
      OpenSlice(t);
      return;
    }
    const Plan::Entry& e = plan_.entries[i];
    Slot& slot = slots_[i];
    Conversation& c = slot.conversation();
    const int own = static_cast<int>(plan_.keys.size()) + i;  // a request without a session
    c.key = e.session >= 0 ? plan_.keys[e.session] : std::string();
    c.id = static_cast<uint64_t>(e.session >= 0 ? e.session : own);
    c.turn = e.position;
    c.previous_replica = e.session >= 0 ? last_replica_[e.session] : -1;
    c.tokens.clear();
    if (!ContinueConversation(i, &c.tokens)) BuildPrompt(i, &c.tokens);
    c.hashes.clear();
    slot.session = c.id;
    slot.max_output = slot.reply_tokens = e.output;
    if (windows_) slice_conversations_.insert(c.id);
    SendTurn(i, t);
    if (e.session < 0) return;
    SessionState& session = sessions_[e.session];
    ++session.in_flight;
    session.all_sent = e.last;
    if (!r_.closed_loop || e.next < 0) return;
    if (plan_.entries[e.next].request->delay_ms < 0) {
      // The next turn began while this one ran: as long after it as in the trace.
      Push(t + plan_.entries[e.next].at_s - e.at_s, kDue, e.next, 0);
    } else {
      session.waiting = e.next;  // its delay runs once nothing of the session is under way
    }
  }

  void TurnEnded(int s, double t) override {
    ++ended_;
    const Plan::Entry& e = plan_.entries[s];
    Slot& slot = slots_[s];
    Conversation& c = slot.conversation();
    // The bound holds the reply's blocks too, as the engine's cache does.
    ExtendBlockHashes(c.tokens, profile_.block_size, &c.hashes);
    bound_.Record(slot.replica, c.hashes);
    bool conversation_over = e.session < 0;
    if (e.session >= 0) {
      SessionState& session = sessions_[e.session];
      --session.in_flight;
      last_replica_[e.session] = slot.replica;
      // Its prompt and reply, for the session's next turn (ContinueConversation): of the latest
      // turn in the session's order to have ended.
      if (s > session.ended.request) {
        session.ended.request = s;
        session.ended.tokens = std::move(c.tokens);
      }
      if (session.in_flight == 0 && session.waiting >= 0) {
        const int next = std::exchange(session.waiting, -1);
        Push(t + plan_.entries[next].request->delay_ms / 1000 / r_.speed, kDue, next, 0);
      }
      conversation_over = session.in_flight == 0 && session.all_sent;
      if (conversation_over) sessions_.erase(e.session);
    }
    std::vector<TokenId>().swap(c.tokens);
    std::vector<BlockHash>().swap(c.hashes);
    if (!conversation_over) return;
    EachWindow([](StageCounts& counts) { ++counts.sessions_completed; });
    // With a concurrency, the trace's next conversation begins.
    if (r_.concurrency > 0 && next_opening_ < plan_.openings.size())
      Push(t, kDue, plan_.openings[next_opening_++], 0);
  }

  bool Done() const override { return ended_ == plan_.entries.size(); }

  // A turn that goes on from the one before it (its ids are those of the turn before but for that
  // one's last, which its prompt filled up, and more; or neither has ids and it is longer): the
  // turn before's prompt and the reply it got here, then tokens of its own. So it finds in the
  // cache what a conversation's next turn finds in vLLM's, the reply included, rather than
  // recomputing a last block and a reply the trace's ids cannot name (and keeping both twice).
  bool ContinueConversation(int i, std::vector<TokenId>* tokens) const {
    const Plan::Entry& e = plan_.entries[i];
    if (e.previous < 0) return false;
    const auto session = sessions_.find(e.session);
    if (session == sessions_.end() || session->second.ended.request != e.previous) return false;
    const std::vector<TokenId>& before = session->second.ended.tokens;
    const std::vector<uint64_t>& ids = e.request->hash_ids;
    const std::vector<uint64_t>& ids_before = plan_.entries[e.previous].request->hash_ids;
    // With one id or none before, the ids cannot tell: its length must hold the turn before.
    const bool extends =
        ids_before.size() <= 1
            ? ids.size() >= ids_before.size() &&
                  e.request->input_length >= static_cast<int>(before.size())
            : ids.size() >= ids_before.size() &&
                  std::equal(ids_before.begin(), ids_before.end() - 1, ids.begin());
    if (!extends) return false;
    const int length = e.request->input_length;
    tokens->assign(before.begin(),
                   before.begin() + std::min<size_t>(before.size(), static_cast<size_t>(length)));
    const int rest = length - static_cast<int>(tokens->size());
    if (rest > 0) AppendBlock((uint64_t{1} << 63) | static_cast<uint64_t>(i), rest, tokens, words_);
    return true;
  }

  void BuildPrompt(int i, std::vector<TokenId>* tokens) const {
    const TraceRequest& request = *plan_.entries[i].request;
    const int length = request.input_length;
    tokens->reserve(length);
    for (uint64_t id : request.hash_ids) {
      const int room = length - static_cast<int>(tokens->size());
      if (room <= 0) break;
      AppendBlock(id, std::min(room, plan_.tokens_per_id), tokens, words_);
    }
    // Past its ids: its own tokens, shared with no other request.
    const int rest = length - static_cast<int>(tokens->size());
    if (rest > 0) AppendBlock((uint64_t{1} << 63) | static_cast<uint64_t>(i), rest, tokens, words_);
  }

  const uint64_t words_;  // AppendBlock's
  const Plan& plan_;
  const ReplayOptions& r_;
  std::vector<ReplayWindow>* windows_;  // null: no windows
  Window window_now_;                   // the window counting now
  std::unordered_set<uint64_t> slice_conversations_;
  std::vector<int> last_replica_;  // per session, where its latest request ran
  struct SessionState {
    int in_flight = 0;
    bool all_sent = false;  // its last request has been sent
    int waiting = -1;       // a turn whose delay runs once none of the session is in flight
    struct {
      int request = -1;             // the latest (in the session's order) to have ended
      std::vector<TokenId> tokens;  // its prompt and its reply
    } ended;
  };
  std::unordered_map<int, SessionState> sessions_;  // by session, until its conversation is over
  size_t ended_ = 0;
  size_t next_opening_ = 0;  // with a concurrency: the next conversation to begin
  double start_ = 0;
};

}  // namespace

std::string ReplayWindowsCsv(const std::vector<ReplayWindow>& windows) {
  std::string out =
      fmt::format("window_start_s,window_s,{},upper_bound_hit_pct,any_placement_bound_hit_pct\n",
                  kResultsCsvHeader);
  auto share = [](double pct) {
    return std::isnan(pct) ? std::string() : fmt::format("{:.1f}", pct);
  };
  for (const ReplayWindow& w : windows) {
    std::string row = ResultsCsv({w.result});
    row.erase(0, row.find('\n') + 1);
    row.pop_back();
    out += fmt::format("{:.0f},{:.0f},{},{},{}\n", w.start_s, w.result.stage_seconds, row,
                       share(w.result.upper_bound_hit_pct),
                       share(w.result.any_placement_bound_hit_pct));
  }
  return out;
}

std::string ValidateReplayOptions(const ReplayOptions& r) {
  if (r.block_tokens < 1 || r.block_tokens > 1'000'000)
    return fmt::format("--trace-block: must be 1 to 1000000 tokens, got {}", r.block_tokens);
  if (!(r.speed > 0 && r.speed <= 1e6))
    return fmt::format("--trace-speed: must be more than 0 and at most 1e6, got {}", r.speed);
  if (r.concurrency < 0 || r.concurrency > 100'000)
    return fmt::format("--trace-concurrency: must be 1 to 100000 (0: the recorded starts), got {}",
                       r.concurrency);
  if (!(r.window_s == 0 || (r.window_s >= 1 && r.window_s <= kLongestReplay)))
    return fmt::format("--trace-window: must be 1 to {:g} seconds (0: none), got {}",
                       kLongestReplay, r.window_s);
  if (r.concurrency > 0 && !r.closed_loop)
    return "--trace-concurrency: a conversation begins when another ends, so not with "
           "--trace-open-loop";
  return {};
}

bool RunReplay(const LabOptions& o, const ReplayOptions& r, const std::vector<TraceRequest>& trace,
               std::vector<StageResult>* results, ReplayNotes* notes, std::string* error,
               std::vector<LabRequest>* requests, std::vector<ReplayWindow>* windows) {
  std::string e = ValidateLabOptions(o);
  if (e.empty()) e = ValidateReplayOptions(r);
  if (!e.empty()) {
    *error = e;
    return false;
  }
  const EngineProfile profile = LabProfile(o);
  *notes = {};
  Plan plan;
  if (!MakePlan(trace, r, profile.max_model_len, &plan, notes, error)) return false;
  if (r.window_s > 0 && notes->trace_seconds / r.window_s > kMostWindows) {
    *error = fmt::format(
        "--trace-window: {:g} s cuts the trace's {:.0f} s into more than {} windows a policy",
        r.window_s, notes->trace_seconds, kMostWindows);
    return false;
  }
  if (plan.entries.empty()) {
    *error = trace.empty() ? "the trace has no requests"
                           : fmt::format(
                                 "every request of the trace is longer than a replica's "
                                 "context ({} tokens)",
                                 profile.max_model_len);
    return false;
  }
  LabEngines cluster(o, profile);
  for (size_t index = 0; index < o.policies.size(); ++index) {
    const std::string& policy = o.policies[index];
    cluster.Ready();
    const PolicySpec spec = SplitPolicySpec(policy, o.admission);
    TraceRun run(o, profile, cluster.engines(), cluster.bound(), spec.policy, spec.admission,
                 requests, plan, r, windows, o.warm ? index : 0);
    StageResult result = run.Run(spec.label);
    if (o.progress) {
      fmt::print(stderr,
                 "  {}: {:.0f} tokens/min, ttfb p50 {} s p95 {} s, hits {} % (bound {} %, "
                 "any placement's {} %), "
                 "{:.0f} s\n",
                 result.variant, result.output_tokens_per_min, ProgressFigure(result.ttfb_p50_s, 2),
                 ProgressFigure(result.ttfb_p95_s, 2), ProgressFigure(result.prefix_hit_pct, 1),
                 ProgressFigure(result.upper_bound_hit_pct, 1),
                 ProgressFigure(result.any_placement_bound_hit_pct, 1), result.stage_seconds);
    }
    results->push_back(std::move(result));
  }
  return true;
}

}  // namespace warden
