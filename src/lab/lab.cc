#include "lab/lab.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "core/chat_template.h"
#include "core/engine/engine.h"
#include "core/routing/admission_queue.h"
#include "core/routing/model_router.h"
#include "core/routing/policy_factory.h"
#include "core/tokenizer.h"
#include "lab/lab_run.h"
#include "report/stage_counts.h"
#include "util/first_repeated.h"
#include "util/stats.h"

namespace warden {
namespace {

// The load test's sessions: stages of N concurrent sessions in closed loop, each turn sent when
// the one before it ends; subagents when asked for.
class SessionRun : public LabRun {
 public:
  SessionRun(const LabOptions& o, const EngineProfile& profile,
             std::vector<std::unique_ptr<Engine>>* engines, HitBound* bound,
             const std::string& policy, const std::string& admission,
             std::vector<LabRequest>* requests, uint64_t words)
      : LabRun(o, profile, engines, bound, policy, admission, requests), words_(words) {
    BeginMessage(Role::kSystem, &system_tokens_);
    Tokenize(SessionScript::SystemPrompt(o.workload), &system_tokens_);
    EndMessage(&system_tokens_);
    BeginMessage(Role::kSystem, &subagent_system_tokens_);
    Tokenize(FillerText(o.workload.seed * 977 + 5, o.subagent_system_tokens),
             &subagent_system_tokens_);
    EndMessage(&subagent_system_tokens_);
  }

  std::vector<StageResult> Run(const std::string& variant) {
    variant_ = variant;
    std::vector<StageResult> results;
    double t = now_;
    Begin(t);
    for (int sessions : o_.stages) {
      Window w;
      w.counts.sessions = sessions;
      w.start = t;
      Measure(&w);
      wanted_ = sessions;
      // Slots a smaller stage left idle first, then new ones.
      for (int s = 0; s < std::min(sessions, static_cast<int>(slots_.size())); ++s) {
        if (slots_[s].idle) StartSession(s, t);
      }
      while (static_cast<int>(slots_.size()) < sessions) {
        slots_.emplace_back();
        StartSession(static_cast<int>(slots_.size()) - 1, t);
      }
      const double end = t + o_.stage_seconds;
      RunUntil(end);
      results.push_back(Result(variant, w, o_.stage_seconds));
      t = end;
    }
    Measure(nullptr);
    DropUnfinished();
    return results;
  }

 private:
  void StartSession(int s, double t) {
    Slot& slot = slots_[s];
    slot.idle = false;
    slot.session = next_session_++;
    slot.script = std::make_unique<SessionScript>(o_.workload, 0, slot.session, words_);
    slot.active = 0;
    slot.subagents_done = 0;
    Conversation& c = slot.conversation();
    Restart(&c, slot.script->id(), slot.session, system_tokens_);
    AppendMessage(Role::kUser, slot.script->UserText(0), &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  static void Restart(Conversation* c, std::string key, uint64_t id,
                      const std::vector<TokenId>& system) {
    c->key = std::move(key);
    c->id = id;
    c->tokens = system;
    c->hashes.clear();
    c->turn = 0;
    c->previous_replica = -1;
  }

  // A subagent: the same session id with an agent id (its own affinity key), its own system
  // prompt (shared by all subagents), a task, then turns of tool results; the parent waits.
  void StartSubagent(int s, double t) {
    Slot& slot = slots_[s];
    const int n = ++slot.subagents_done;
    slot.active = 1;
    Conversation& c = slot.conversation();
    Restart(&c, fmt::format("{}:agent-{}", slot.script->id(), n),
            (uint64_t{1} << 40) + slot.session * 16 + static_cast<uint64_t>(n),
            subagent_system_tokens_);
    AppendMessage(Role::kUser, FillerText(SubagentSeed(slot, 0), o_.subagent_task_tokens),
                  &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  // The words of a subagent's request: its own, and the run's on warm engines (words_).
  uint64_t SubagentSeed(const Slot& slot, int turn) const {
    return SubagentSizeSeed(slot, turn) + words_ * 0x9e3779b97f4a7c15ULL;  // (0: a run of its own)
  }
  // What every policy's run shares of a subagent's request (its tools' pause).
  uint64_t SubagentSizeSeed(const Slot& slot, int turn) const {
    return XXH3_64bits_withSeed(&slot.session, sizeof slot.session,
                                o_.workload.seed * 131 + slot.subagents_done * 17 + turn);
  }

  void TurnEnded(int s, double t) override {
    Slot& slot = slots_[s];
    Conversation& c = slot.conversation();
    c.previous_replica = slot.replica;
    EndMessage(&c.tokens);
    ExtendBlockHashes(c.tokens, profile_.block_size, &c.hashes);
    bound_.Record(slot.replica, c.hashes);
    ++c.turn;
    const bool session_done = slot.active == 0 && c.turn >= slot.script->turns();
    if (session_done && window_) ++window_->counts.sessions_completed;
    // A stage of fewer sessions than the one before stops those past its count once their turn
    // under way ends, as the bench does.
    if (s >= wanted_) {
      slot.idle = true;  // until a larger stage wants it again
      return;
    }
    if (session_done) return StartSession(s, t);
    if (slot.active == 0 && slot.subagents_done < o_.subagents && c.turn == slot.subagents_done + 1)
      return StartSubagent(s, t);
    const double pause = slot.active == 1 ? ToolPause(SubagentSizeSeed(slot, c.turn) ^ 0x70017ULL,
                                                      o_.workload.tool_seconds)
                                          : slot.script->ToolSecondsBefore(c.turn);
    if (pause > 0) return Push(t + pause, kDue, s, 0);  // the agent's tools run first
    NextTurn(s, t);
  }

  // The pause before slot s's next request is over.
  void Due(int s, int, double t) override {
    if (s >= wanted_) {
      slots_[s].idle = true;  // the stage wants fewer sessions now
      return;
    }
    NextTurn(s, t);
  }

  void NextTurn(int s, double t) {
    if (slots_[s].active == 1) return NextSubagentTurn(s, t);
    NextMainTurn(s, t);
  }

  void NextMainTurn(int s, double t) {
    Slot& slot = slots_[s];
    slot.active = 0;
    Conversation& c = slot.conversation();
    AppendMessage(Role::kUser, slot.script->UserText(c.turn), &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  void NextSubagentTurn(int s, double t) {
    Slot& slot = slots_[s];
    Conversation& c = slot.conversation();
    if (c.turn >= o_.subagent_turns) return NextMainTurn(s, t);
    AppendMessage(Role::kUser, FillerText(SubagentSeed(slot, c.turn), o_.workload.turn_tokens),
                  &c.tokens);
    AppendGenerationPrompt(&c.tokens);
    SendTurn(s, t);
  }

  std::vector<TokenId> system_tokens_;
  std::vector<TokenId> subagent_system_tokens_;
  uint64_t
      words_;  // the sessions' words (SessionScript's variant): 0, or the run's on warm engines
  int wanted_ = 0;
  uint64_t next_session_ = 0;
};

}  // namespace

namespace {

// The most tokens a conversation can reach (prompt and reply), jitter and template included: a
// session's, or a subagent's.
int64_t LongestConversation(const LabOptions& o) {
  constexpr int64_t kTemplatePerMessage = 16;  // role markers and the like, generously
  const WorkloadOptions& w = o.workload;
  const int64_t turn =
      int64_t{w.turn_tokens} + w.turn_jitter + w.max_output_tokens + 2 * kTemplatePerMessage;
  const int64_t session = int64_t{w.system_tokens} + w.first_message_tokens +
                          w.first_message_jitter + kTemplatePerMessage + int64_t{w.turns} * turn;
  const int64_t subagent = o.subagents == 0
                               ? 0
                               : int64_t{o.subagent_system_tokens} + o.subagent_task_tokens +
                                     kTemplatePerMessage + int64_t{o.subagent_turns} * turn;
  return std::max(session, subagent);
}

}  // namespace

std::string ValidateLabOptions(const LabOptions& o) {
  if (!FindProfile(o.profile)) return fmt::format("--profile: unknown profile '{}'", o.profile);
  if (o.replicas < 1 || o.replicas > 256)
    return fmt::format("--replicas: must be 1 to 256, got {}", o.replicas);
  if (o.stages.empty()) return "--stages: at least one stage";
  if (o.stages.size() > 1000)
    return fmt::format("--stages: at most 1000 stages, got {}", o.stages.size());
  for (int s : o.stages) {
    // Each session holds its prompt and block hashes: 10,000 take about 1.3 GB.
    if (s < 1 || s > 10000) return fmt::format("--stages: {} must be 1 to 10000 sessions", s);
  }
  // (Flags left out are 0, or -1 for the latency: the profile's.)
  if (o.kv_tokens < 0 || o.kv_tokens > 50'000'000)
    return fmt::format("--kv-tokens: must be 1 to 50000000 tokens (0: the profile's), got {}",
                       o.kv_tokens);
  if (std::string e = CheckKvOffloading(o.kv_offloading_gib, *FindProfile(o.profile)); !e.empty())
    return e;
  if (o.max_num_seqs < 0 || o.max_num_seqs > 100'000)
    return fmt::format("--max-num-seqs: must be 1 to 100000 (0: the profile's), got {}",
                       o.max_num_seqs);
  if (!(o.stage_seconds >= 1 && o.stage_seconds <= 1e6))
    return fmt::format("--stage-seconds: must be 1 to 1e6, got {}", o.stage_seconds);
  if (o.policies.empty()) return "--policy: at least one policy";
  // As their rows are named (with --admission's mode where a policy names none).
  std::vector<std::string> labels;
  for (const std::string& p : o.policies) labels.push_back(SplitPolicySpec(p, o.admission).label);
  if (const auto twice = FirstRepeated(labels))
    return fmt::format("--policy: '{}' is named twice (its rows could not be told apart)", *twice);
  // The flag's own value first: an error in it is not one policy's.
  AdmissionOptions flag_admission;
  if (std::string e = ParseAdmission(o.admission, &flag_admission); !e.empty()) return "--" + e;
  for (const std::string& p : o.policies) {
    const PolicySpec spec = SplitPolicySpec(p, o.admission);
    if (!MakeLabPolicy(spec.policy))
      return fmt::format("--policy: unknown policy '{}' (one of: {})", spec.policy,
                         LabPolicyNameList());
    AdmissionOptions admission;
    if (std::string e = ParseAdmission(spec.admission, &admission); !e.empty())
      return fmt::format("--policy {}: {}", p, e);
  }
  if (!(o.scrape_interval_s >= 0.001 && o.scrape_interval_s <= 3600))
    return "--scrape-interval: must be 0.001 to 3600 seconds";
  if (!(o.admission_max_hold_s == 0 ||
        (o.admission_max_hold_s >= 0.05 && o.admission_max_hold_s <= 86400)))
    return "--admission-max-hold: must be 0 (no bound) or 0.05 to 86400 seconds";
  if (o.overflow_limit < 0) return "--overflow-limit: must be >= 1, or 0 for auto";
  if (!(o.latency_jitter >= 0 && o.latency_jitter < 1))
    return "--latency-jitter: must be in [0, 1)";
  if (!((o.api_latency_s >= 0 && o.api_latency_s <= 3600) || o.api_latency_s == -1))
    return "--api-latency: must be 0 to 3600 seconds";
  if (o.reply_tokens < 1) return "--reply-tokens: must be >= 1";
  if (o.workload.turns < 1) return fmt::format("--turns: must be >= 1, got {}", o.workload.turns);
  if (o.subagents < 0 || o.subagents >= o.workload.turns)
    return fmt::format("--subagents: must be 0 to turns - 1 ({}), got {}", o.workload.turns - 1,
                       o.subagents);
  if (o.subagent_turns < 1) return "--subagent-turns: must be >= 1";
  if (o.subagent_system_tokens < 1 || o.subagent_task_tokens < 1)
    return "--subagent-system-tokens, --subagent-task-tokens: must be >= 1";

  for (double f : o.replica_slowdown) {
    if (!(f > 0 && f <= 1000)) return "--slow-replica: the factor must be > 0 and at most 1000";
  }
  return ValidateWorkload(o.workload);
}

std::string LabRequestsCsv(const std::vector<LabRequest>& requests) {
  std::string out =
      "variant,sessions,session,subagent,turn,replica,route,sent_s,held_s,ttft_s,prompt_tokens,"
      "cached_tokens,output_tokens\n";
  for (const LabRequest& r : requests) {
    fmt::format_to(std::back_inserter(out), "{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{},{},{}\n",
                   r.variant, r.sessions, r.session, r.subagent ? 1 : 0, r.turn, r.replica, r.route,
                   r.sent_s, r.held_s, r.ttft_s, r.prompt_tokens, r.cached_tokens, r.output_tokens);
  }
  return out;
}

bool RunLab(const LabOptions& o, std::vector<StageResult>* results, std::string* error,
            std::vector<LabRequest>* requests) {
  if (std::string e = ValidateLabOptions(o); !e.empty()) {
    *error = e;
    return false;
  }
  const EngineProfile profile = LabProfile(o);
  if (LongestConversation(o) > profile.max_model_len) {
    // (A context cut to the KV cache's size: a --kv-tokens too small is what to change.)
    *error = fmt::format(
        "the sessions grow past the profile's max_model_len ({} tokens, at most the KV cache{}): "
        "shorten them{}",
        profile.max_model_len,
        o.kv_tokens > 0
            ? fmt::format(", --kv-tokens {} in blocks of {}", o.kv_tokens, profile.block_size)
            : "",
        o.kv_tokens > 0 ? ", or give the replicas a larger --kv-tokens" : "");
    return false;
  }
  LabEngines cluster(o, profile);
  for (size_t index = 0; index < o.policies.size(); ++index) {
    const std::string& policy = o.policies[index];
    cluster.Ready();
    const PolicySpec spec = SplitPolicySpec(policy, o.admission);
    // On warm engines each policy's sessions have words of their own, as the bench's variants
    // do: none finds its prompts in what the one before left (found by review).
    SessionRun run(o, profile, cluster.engines(), cluster.bound(), spec.policy, spec.admission,
                   requests, o.warm ? index : 0);
    for (StageResult& r : run.Run(spec.label)) {
      if (o.progress) {
        fmt::print(stderr,
                   "  {} {} sessions: {:.0f} tokens/min, ttfb p50 {} s p95 {} s, hits "
                   "{} % (bound {} %, any placement's {} %), stayed {}\n",
                   r.variant, r.sessions, r.output_tokens_per_min, ProgressFigure(r.ttfb_p50_s, 2),
                   ProgressFigure(r.ttfb_p95_s, 2), ProgressFigure(r.prefix_hit_pct, 1),
                   ProgressFigure(r.upper_bound_hit_pct, 1),
                   ProgressFigure(r.any_placement_bound_hit_pct, 1),
                   std::isnan(r.stayed_on_replica_pct)
                       ? std::string("–")
                       : fmt::format("{:.1f} %", r.stayed_on_replica_pct));
      }
      results->push_back(std::move(r));
    }
  }
  return true;
}

}  // namespace warden
