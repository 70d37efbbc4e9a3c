#include "core/engine/engine.h"

#include <algorithm>
#include <cassert>

#include "core/filler.h"

namespace warden {
namespace {

// A read back from CPU memory due at t is done at a step that begins at t less this: the driver's
// clock adds the wait to its own time, which may round below t.
constexpr double kTimeSlack = 1e-9;
// A read back takes at least this long (a profile without a bandwidth reads back in no time).
constexpr double kShortestCopySeconds = 1e-6;

}  // namespace

Engine::Engine(const EngineProfile& profile)
    : profile_(profile), pool_(profile.num_gpu_blocks), kv_(&pool_, profile.block_size) {
  assert(profile.max_model_len <= profile.kv_capacity_tokens());
  if (profile.cpu_offload_blocks() > 0 && profile.enable_prefix_caching)
    cpu_ = std::make_unique<CpuKvTier>(profile.cpu_offload_blocks());
}

RequestId Engine::Add(NewRequest request, double now_s) {
  assert(!request.prompt.empty());
  auto seq = std::make_unique<Sequence>();
  seq->id = next_id_++;
  seq->num_prompt_tokens = static_cast<int>(request.prompt.size());
  seq->tokens = std::move(request.prompt);
  seq->tokens.reserve(seq->tokens.size() + std::min(request.max_output_tokens, 4096));
  seq->max_output_tokens = std::max(1, request.max_output_tokens);
  seq->stop_after_tokens = std::max(1, request.reply_tokens);
  seq->output_seed = request.output_seed;
  seq->arrival_s = now_s;
  if (request.cache_namespace != 0)
    seq->hash_root = kRootBlockHash ^ (request.cache_namespace * 0x9e3779b97f4a7c15ULL);
  ExtendBlockHashes(seq->tokens, profile_.block_size, &seq->block_hashes, seq->hash_root);
  seq->priority = request.priority;
  Enqueue(seq.get(), /*preempted=*/false);
  const RequestId id = seq->id;
  sequences_.emplace(id, std::move(seq));
  return id;
}

void Engine::Abort(RequestId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end() || it->second->finished) return;
  Finish(it->second.get(), FinishReason::kAborted);
  if (!step_in_progress_) sequences_.erase(it);
}

double Engine::BeginStep(double now_s) {
  assert(!step_in_progress_);
  scheduled_.clear();
  first_admitted_.clear();
  int budget = profile_.max_num_batched_tokens;
  const bool preempted = ScheduleRunning(&budget);
  // vLLM admits no waiting request in a step that had to preempt, unless nothing was left to
  // run (the engine schedules again at once): a request reading its prefix back holds blocks no
  // preemption frees, so the last one running may have had to give way (found by review).
  if (!preempted || scheduled_.empty()) ScheduleWaiting(&budget, now_s);

  last_step_ = {};
  for (const Scheduled& s : scheduled_) AddToShape(s);
  if (scheduled_.empty()) {
    // Nothing to compute while blocks come back from CPU memory: a step that only waits for them,
    // no longer than an engine step, so that a request that comes meanwhile is soon scheduled
    // (vLLM's engine keeps polling its connector).
    double wait = UntilLoaded(now_s);
    if (profile_.time.step_fixed_s > 0) wait = std::min(wait, profile_.time.step_fixed_s);
    step_in_progress_ = wait > 0;
    return wait;
  }
  step_in_progress_ = true;
  return profile_.time.StepSeconds(last_step_);
}

double Engine::UntilLoaded(double now_s) const {
  double first = 0;
  for (const Sequence* seq : waiting_) {
    if (seq->loaded_at_s > now_s + kTimeSlack && (first == 0 || seq->loaded_at_s - now_s < first))
      first = seq->loaded_at_s - now_s;
  }
  return first;
}

bool Engine::ScheduleRunning(int* budget) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && *budget > 0;) {
    Sequence* seq = running_[i];
    const int n = std::min(seq->num_tokens() - seq->num_computed, *budget);
    bool allocated = false;
    static const std::vector<BlockId> kNoHits;
    while (!(allocated = kv_.AllocateSlots(seq, n, kNoHits))) {
      const size_t at = VictimIndex();
      Sequence* victim = running_[at];
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(at));
      if (at < i) {  // (priority scheduling) scheduled earlier in this step: undone
        Unschedule(victim, budget);
        --i;
      }
      Preempt(victim);
      preempted = true;
      if (victim == seq) break;
    }
    if (!allocated) break;
    scheduled_.push_back({seq, n, seq->num_computed});
    seq->num_computed += n;
    *budget -= n;
    ++i;
  }
  return preempted;
}

// First come, first served, in two passes as vLLM's scheduler does it: the requests whose prefix
// is back from CPU memory first (its skipped_waiting), then the queue, where one whose prefix is
// still on its way is passed over, keeping its place (WAITING_FOR_REMOTE_KVS). Every admission
// leaves free the blocks the reads back under way still need for their whole prompts (vLLM's
// reserved blocks for in-flight loads, PR #44560), so that none of them waits for ever for room
// a later request took.
void Engine::ScheduleWaiting(int* budget, double now_s) {
  int reserved = 0;
  for (const Sequence* seq : waiting_) {
    if (seq->loaded_at_s >= 0) reserved += kv_.BlocksToFinish(*seq);
  }
  for (const bool back_first : {true, false}) {
    if (back_first && !cpu_) continue;  // (nothing is read back without a CPU tier)
    for (size_t i = 0; i < waiting_.size();) {
      if (*budget <= 0 || static_cast<int>(running_.size()) >= profile_.max_num_seqs) return;
      Sequence* seq = waiting_[i];
      const bool loading = seq->loaded_at_s >= 0;
      const bool back = loading && seq->loaded_at_s <= now_s + kTimeSlack;
      if (back_first ? !back : loading) {
        ++i;
        continue;
      }
      const Admission a =
          back ? AdmitLoaded(seq, budget, &reserved) : Admit(seq, budget, now_s, &reserved);
      if (a == Admission::kNoRoom) return;
      if (a == Admission::kLoading) {
        ++i;
        continue;
      }
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

// A request whose prefix is back: its blocks are held, its prefix computed.
Engine::Admission Engine::AdmitLoaded(Sequence* seq, int* budget, int* reserved) {
  const int others = *reserved - kv_.BlocksToFinish(*seq);
  const int n = std::min(seq->num_tokens() - seq->num_computed, *budget);
  static const std::vector<BlockId> kNoHits;
  if (!kv_.AllocateSlots(seq, n, kNoHits, others)) return Admission::kNoRoom;
  *reserved = others;
  seq->loaded_at_s = -1;
  Run(seq, n, budget);
  return Admission::kAdmitted;
}

Engine::Admission Engine::Admit(Sequence* seq, int* budget, double now_s, int* reserved) {
  hit_scratch_.clear();
  const int hit_tokens =
      profile_.enable_prefix_caching ? kv_.FindCachedPrefix(*seq, &hit_scratch_) : 0;
  const bool counted = seq->num_preemptions == 0 && profile_.enable_prefix_caching;
  if (cpu_) {
    const Admission a = StartLoad(seq, hit_scratch_, now_s, counted, reserved);
    if (a != Admission::kAdmitted) return a;  // (kAdmitted: nothing to read back)
  }
  const int n = std::min(seq->num_tokens() - hit_tokens, *budget);
  const bool admitted =
      (!profile_.reserve_full_prompt || kv_.CanFitWhole(*seq, hit_scratch_, *reserved)) &&
      kv_.AllocateSlots(seq, n, hit_scratch_, *reserved);
  if (counted && (admitted || profile_.count_every_lookup))
    CountLookup(*seq, hit_tokens, 0, /*external=*/admitted);
  if (!admitted) return Admission::kNoRoom;
  if (counted) first_admitted_.push_back(seq->id);
  if (seq->num_cached < 0) seq->num_cached = hit_tokens;
  seq->num_computed = hit_tokens;
  Run(seq, n, budget);
  return Admission::kAdmitted;
}

void Engine::Run(Sequence* seq, int n, int* budget) {
  running_.push_back(seq);
  scheduled_.push_back({seq, n, seq->num_computed});
  seq->num_computed += n;
  *budget -= n;
}

// kLoading: the blocks the CPU tier holds after `hit_blocks` are being read back; kAdmitted: it
// holds none (the request is admitted as any other); kNoRoom: the cache lacks room for it whole.
Engine::Admission Engine::StartLoad(Sequence* seq, const std::vector<BlockId>& hit_blocks,
                                    double now_s, bool counted, int* reserved) {
  const int block = profile_.block_size;
  const int hit = static_cast<int>(hit_blocks.size());
  // At least the last token is computed, as with the GPU's hits.
  const int loaded_blocks =
      cpu_->CountInARow(seq->block_hashes, hit, (seq->num_tokens() - 1) / block);
  cpu_->Touch(std::span(seq->block_hashes).first(seq->num_prompt_tokens / block));
  if (loaded_blocks == 0) return Admission::kAdmitted;
  const int loaded = loaded_blocks * block;
  // Room for the whole request, whatever the engine's admission rule, so that once its prefix is
  // back it can go on; the blocks read back are taken now, and found by others only once there.
  const bool room = kv_.CanFitWhole(*seq, hit_blocks, *reserved) &&
                    kv_.AllocateSlots(seq, loaded, hit_blocks, *reserved, /*cache=*/false);
  if (counted && (room || profile_.count_every_lookup))
    CountLookup(*seq, hit * block, room ? loaded : 0, /*external=*/room);
  if (!room) return Admission::kNoRoom;
  if (counted) first_admitted_.push_back(seq->id);
  if (seq->num_cached < 0) seq->num_cached = hit * block + loaded;
  seq->num_computed = hit * block + loaded;
  // One copy at a time over the bus, and never done within the step that starts it.
  copies_done_at_ = std::max(copies_done_at_, now_s) +
                    std::max(profile_.LoadSeconds(loaded), kShortestCopySeconds);
  seq->loaded_at_s = copies_done_at_;
  *reserved += kv_.BlocksToFinish(*seq);
  return Admission::kLoading;
}

void Engine::CountLookup(const Sequence& seq, int hit_tokens, int loaded_tokens, bool external) {
  counters_.prefix_cache_queries += seq.num_tokens();
  counters_.prefix_cache_hits += hit_tokens;
  if (!cpu_ || !external) return;
  counters_.external_prefix_cache_queries += seq.num_tokens() - hit_tokens;
  counters_.external_prefix_cache_hits += loaded_tokens;
}

void Engine::Offload(Sequence* seq) {
  const int full = std::min(seq->num_computed, seq->num_prompt_tokens) / profile_.block_size;
  for (; seq->num_stored_blocks < full; ++seq->num_stored_blocks)
    cpu_->Store(seq->block_hashes[seq->num_stored_blocks]);
}

void Engine::AddToShape(const Scheduled& s) {
  const bool decoding = s.num_new_tokens == 1 && s.seq->num_output_tokens() > 0 &&
                        s.computed_before == s.seq->num_tokens() - 1;
  if (decoding) {
    ++last_step_.decode_seqs;
    last_step_.decode_context += s.computed_before + 1;
  } else {
    last_step_.prefill_tokens += s.num_new_tokens;
    last_step_.prefill_pairs +=
        static_cast<double>(s.num_new_tokens) * (s.computed_before + (s.num_new_tokens + 1) / 2.0);
  }
}

void Engine::ClockRestarted() {
  assert(running_.empty() && waiting_.empty());
  copies_done_at_ = 0;
}

void Engine::DiscardKvCache() {
  assert(!step_in_progress_);
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) Preempt(*it);
  running_.clear();
  copies_done_at_ = 0;              // (copies under way are dropped)
  for (Sequence* seq : waiting_) {  // those whose prefix was being read back start over
    if (seq->loaded_at_s < 0) continue;
    kv_.Free(seq);
    seq->num_computed = 0;
    seq->loaded_at_s = -1;
    ++seq->num_preemptions;  // (its lookup was counted)
  }
  pool_.ForgetCachedContents();
}

void Engine::Preempt(Sequence* seq) {
  kv_.Free(seq);
  seq->num_computed = 0;
  ++seq->num_preemptions;
  ++counters_.preemptions;
  Enqueue(seq, /*preempted=*/true);
}

void Engine::Enqueue(Sequence* seq, bool preempted) {
  if (!profile_.priority_scheduling) {
    if (preempted) {
      waiting_.push_front(seq);
    } else {
      waiting_.push_back(seq);
    }
    return;
  }
  const auto later = [seq](const Sequence* w) {
    return std::pair(w->priority, w->arrival_s) > std::pair(seq->priority, seq->arrival_s);
  };
  waiting_.insert(std::find_if(waiting_.begin(), waiting_.end(), later), seq);
}

size_t Engine::VictimIndex() const {
  if (!profile_.priority_scheduling) return running_.size() - 1;
  const auto lower = [](const Sequence* a, const Sequence* b) {
    return std::pair(a->priority, a->arrival_s) < std::pair(b->priority, b->arrival_s);
  };
  return static_cast<size_t>(std::max_element(running_.begin(), running_.end(), lower) -
                             running_.begin());
}

void Engine::Unschedule(Sequence* seq, int* budget) {
  const auto it = std::find_if(scheduled_.begin(), scheduled_.end(),
                               [seq](const Scheduled& s) { return s.seq == seq; });
  assert(it != scheduled_.end());
  *budget += it->num_new_tokens;
  seq->num_computed = it->computed_before;
  scheduled_.erase(it);
}

void Engine::EndStep(double end_s, std::vector<TokenEvent>* events) {
  assert(step_in_progress_);
  step_in_progress_ = false;
  for (const Scheduled& s : scheduled_) {
    Sequence* seq = s.seq;
    if (cpu_) Offload(seq);
    if (seq->finished) continue;
    if (seq->num_computed == seq->num_tokens()) AppendToken(seq, end_s, events);
  }
  scheduled_.clear();
  for (RequestId id : to_erase_) sequences_.erase(id);
  to_erase_.clear();
}

void Engine::AppendToken(Sequence* seq, double now_s, std::vector<TokenEvent>* events) {
  const int index = seq->num_output_tokens();
  FinishReason finish = FinishReason::kNone;
  TokenId token;
  if (index + 1 >= seq->stop_after_tokens && seq->stop_after_tokens <= seq->max_output_tokens) {
    token = kImEnd;
    finish = FinishReason::kStop;
  } else {
    token = GeneratedWord(seq->output_seed, index).token;
    if (index + 1 >= seq->max_output_tokens) finish = FinishReason::kLength;
  }
  seq->tokens.push_back(token);
  ExtendBlockHashes(seq->tokens, profile_.block_size, &seq->block_hashes, seq->hash_root);
  ++counters_.generation_tokens;
  if (index == 0) {
    seq->first_token_s = now_s;
    counters_.prompt_tokens += seq->num_prompt_tokens;
    counters_.ttft.Observe(now_s - seq->arrival_s);
  }
  events->push_back(
      {seq->id, token, index, finish, seq->num_prompt_tokens, std::max(0, seq->num_cached)});
  if (finish != FinishReason::kNone) Finish(seq, finish);
}

void Engine::Finish(Sequence* seq, FinishReason reason) {
  seq->finished = true;
  switch (reason) {
    case FinishReason::kStop:
      ++counters_.requests_stopped;
      break;
    case FinishReason::kLength:
      ++counters_.requests_length;
      break;
    default:
      ++counters_.requests_aborted;
      break;
  }
  auto running = std::find(running_.begin(), running_.end(), seq);
  if (running != running_.end()) {
    running_.erase(running);
  } else {
    auto waiting = std::find(waiting_.begin(), waiting_.end(), seq);
    if (waiting != waiting_.end()) waiting_.erase(waiting);
  }
  kv_.Free(seq);
  if (step_in_progress_ || reason != FinishReason::kAborted) to_erase_.push_back(seq->id);
}

}  // namespace warden
