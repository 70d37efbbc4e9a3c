// Hardware profiles: what one simulated replica can hold and how long its steps take.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace warden {

// The shape of one engine step, all the time model needs to price it.
struct StepShape {
  int prefill_tokens = 0;      // prompt tokens computed in this step (all chunks)
  double prefill_pairs = 0;    // query-key pairs those tokens attend to (causal)
  int decode_seqs = 0;         // sequences generating one token each
  int64_t decode_context = 0;  // context tokens the decoding sequences read
  bool empty() const { return prefill_tokens == 0 && decode_seqs == 0; }
};

// Cost of a step: a fixed part (reading the weights once, launching kernels), a part per prompt
// token (the linear layers: compute-bound), a part per query-key pair of prefill attention, a part
// per decoding sequence (sampling, the LM head) and a part per context token a decoding sequence
// reads (its KV state: memory-bound).
struct TimeModel {
  double step_fixed_s = 0;
  double prefill_token_s = 0;
  double prefill_pair_s = 0;
  double decode_seq_s = 0;
  double decode_context_token_s = 0;

  double StepSeconds(const StepShape& s) const {
    return step_fixed_s + prefill_token_s * s.prefill_tokens + prefill_pair_s * s.prefill_pairs +
           decode_seq_s * s.decode_seqs +
           decode_context_token_s * static_cast<double>(s.decode_context);
  }
};

struct EngineProfile {
  std::string name;
  std::string description;
  int block_size = 16;
  int num_gpu_blocks = 0;  // KV-cache capacity, in blocks
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  int max_model_len = 0;
  TimeModel time;
  // Latency outside the engine on the way in: network to the client and the API server's work
  // (parsing, templating, tokenizing). Added before a request reaches the engine.
  double api_latency_s = 0;
  // vLLM's --enable-prefix-caching (on by default; --no-enable-prefix-caching turns it off): off,
  // no request reads a cached block, and the prefix-cache counters do not move.
  bool enable_prefix_caching = true;
  // vLLM's scheduler_reserve_full_isl (on by default since about 0.19): a waiting request is
  // admitted only when blocks for its whole prompt are free, not just for its first chunk, so
  // that chunked prefill does not admit more than the cache can hold and then preempt.
  bool reserve_full_prompt = true;
  // vLLM before PR #48860 (July 2026; whether 0.26.0 has it is not known) counted a waiting
  // request's prefix-cache lookup in vllm:prefix_cache_queries/hits at every step it was looked
  // up and not admitted, not once: the hit rate then leans towards the requests kept waiting.
  bool count_every_lookup = false;
  // vLLM's --scheduling-policy priority (the default is fcfs): the waiting queue is ordered by each
  // request's `priority` (lower first), then by arrival; when a running request needs a block and
  // none is free, the running request of the lowest priority (largest value, latest arrival among
  // equals) is preempted rather than the last admitted. Under fcfs a request naming a priority
  // other than 0 is refused, as vLLM refuses it.
  bool priority_scheduling = false;
  // The KV state of one token (every layer's keys and values), bytes: what offloading moves.
  double kv_bytes_per_token = 0;
  // vLLM's native CPU offloading of the KV cache (--kv-offloading-size, GiB; 0: off): prompt
  // blocks are copied to CPU memory as they are computed and read back instead of recomputed
  // (cpu_kv_tier.h), at kv_load_bytes_per_s from host to device.
  double kv_offloading_gib = 0;
  double kv_load_bytes_per_s = 0;

  int kv_capacity_tokens() const { return (num_gpu_blocks - 1) * block_size; }
  // The CPU tier's blocks: its bytes over a block's (0: no offloading).
  int cpu_offload_blocks() const {
    if (kv_offloading_gib <= 0 || kv_bytes_per_token <= 0) return 0;
    return static_cast<int>(kv_offloading_gib * (1 << 30) / (kv_bytes_per_token * block_size));
  }
  // Seconds to read `tokens` of offloaded KV state back into the GPU.
  double LoadSeconds(int tokens) const {
    return kv_load_bytes_per_s > 0 ? tokens * kv_bytes_per_token / kv_load_bytes_per_s : 0;
  }
};

// An error naming --kv-offloading-size, or empty: 0 (none), or from one of `profile`'s blocks
// to 16 TiB.
std::string CheckKvOffloading(double gib, const EngineProfile& profile);

// The named profiles; the first is the default.
std::span<const EngineProfile> Profiles();

// The profile called `name`, or nullptr.
const EngineProfile* FindProfile(std::string_view name);

inline constexpr std::string_view kDefaultProfile = "a4000-qwen3-4b";

}  // namespace warden
