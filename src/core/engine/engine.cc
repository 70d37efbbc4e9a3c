#include "core/engine/engine.h"

#include <algorithm>
#include <cassert>

#include "core/filler.h"

namespace warden {

Engine::Engine(const EngineProfile& profile)
    : profile_(profile), pool_(profile.num_gpu_blocks), kv_(&pool_, profile.block_size) {
  assert(profile.max_model_len <= profile.kv_capacity_tokens());
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
  waiting_.push_back(seq.get());
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
  (void)now_s;
  scheduled_.clear();
  first_admitted_.clear();
  int budget = profile_.max_num_batched_tokens;
  const bool preempted = ScheduleRunning(&budget);
  // vLLM admits no waiting request in a step that had to preempt.
  if (!preempted) ScheduleWaiting(&budget);

  last_step_ = {};
  for (const Scheduled& s : scheduled_) AddToShape(s);
  if (scheduled_.empty()) return 0;
  step_in_progress_ = true;
  return profile_.time.StepSeconds(last_step_);
}

bool Engine::ScheduleRunning(int* budget) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && *budget > 0;) {
    Sequence* seq = running_[i];
    const int n = std::min(seq->num_tokens() - seq->num_computed, *budget);
    bool allocated = false;
    static const std::vector<BlockId> kNoHits;
    while (!(allocated = kv_.AllocateSlots(seq, n, kNoHits))) {
      Sequence* victim = running_.back();
      running_.pop_back();
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

void Engine::ScheduleWaiting(int* budget) {
  while (!waiting_.empty() && *budget > 0 &&
         static_cast<int>(running_.size()) < profile_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    hit_scratch_.clear();
    const int hit_tokens =
        profile_.enable_prefix_caching ? kv_.FindCachedPrefix(*seq, &hit_scratch_) : 0;
    const int n = std::min(seq->num_tokens() - hit_tokens, *budget);
    const bool admitted = (!profile_.reserve_full_prompt || kv_.CanFitWhole(*seq, hit_scratch_)) &&
                          kv_.AllocateSlots(seq, n, hit_scratch_);
    const bool counted = seq->num_preemptions == 0 && profile_.enable_prefix_caching;
    if (counted && (admitted || profile_.count_every_lookup)) {
      counters_.prefix_cache_queries += seq->num_tokens();
      counters_.prefix_cache_hits += hit_tokens;
    }
    if (!admitted) break;
    waiting_.pop_front();
    running_.push_back(seq);
    if (counted) first_admitted_.push_back(seq->id);
    if (seq->num_cached < 0) seq->num_cached = hit_tokens;
    seq->num_computed = hit_tokens;
    scheduled_.push_back({seq, n, seq->num_computed});
    seq->num_computed += n;
    *budget -= n;
  }
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

void Engine::DiscardKvCache() {
  assert(!step_in_progress_);
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) Preempt(*it);
  running_.clear();
  pool_.ForgetCachedContents();
}

void Engine::Preempt(Sequence* seq) {
  kv_.Free(seq);
  seq->num_computed = 0;
  ++seq->num_preemptions;
  ++counters_.preemptions;
  waiting_.push_front(seq);
}

void Engine::EndStep(double end_s, std::vector<TokenEvent>* events) {
  assert(step_in_progress_);
  step_in_progress_ = false;
  for (const Scheduled& s : scheduled_) {
    Sequence* seq = s.seq;
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
