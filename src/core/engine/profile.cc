#include "core/engine/profile.h"

#include <fmt/format.h>

#include <vector>

namespace warden {
namespace {

// Constants are derived in docs/engine-model.md; the comments give the short form.
std::vector<EngineProfile> MakeProfiles() {
  std::vector<EngineProfile> p;

  // The seed's machine, per replica: RTX A4000 (16 GiB, 448 GB/s, ~77 TFLOPS dense fp16 tensor),
  // Qwen3-4B bf16 (8.05 GB of weights, 36 layers x 8 KV heads x 128 dims: 144 KiB of KV per token).
  EngineProfile a4000;
  a4000.name = "a4000-qwen3-4b";
  a4000.description = "RTX A4000 16 GiB + Qwen3-4B bf16, max_num_seqs 32 (the seed's machine)";
  a4000.block_size = 16;
  a4000.num_gpu_blocks = 2313;  // 37,000 tokens of KV cache (+ the null block)
  a4000.max_num_seqs = 32;
  a4000.max_num_batched_tokens = 2048;
  a4000.max_model_len = 32768;
  a4000.time.step_fixed_s = 0.026;             // 8.05 GB / (448 GB/s x 0.75) + ~2 ms of launches
  a4000.time.prefill_token_s = 0.000160;       // 7.2 GFLOP/token / (77 TFLOPS x 0.6)
  a4000.time.prefill_pair_s = 1.3e-8;          // 36 x 4 x 4096 FLOP/pair / (77 TFLOPS x 0.6)
  a4000.time.decode_seq_s = 0.0002;            // sampling, LM head, per-sequence bookkeeping
  a4000.time.decode_context_token_s = 4.4e-7;  // 144 KiB / (448 GB/s x 0.75)
  a4000.api_latency_s = 0.20;                  // the seed's client measured over the internet
  a4000.kv_bytes_per_token = 147456;           // 36 x 8 x 128 x 2 (K and V) x 2 bytes
  a4000.kv_load_bytes_per_s = 20e9;            // PCIe 4.0 x16 (~25 GB/s) with pinned memory
  p.push_back(a4000);

  // A large data-centre GPU: H100 SXM 80 GB (3.35 TB/s, ~989 TFLOPS dense bf16) with Llama-3.1-8B
  // bf16 (16 GB of weights, 32 layers x 8 KV heads x 128 dims: 128 KiB of KV per token).
  EngineProfile h100;
  h100.name = "h100-llama3-8b";
  h100.description = "H100 SXM 80 GB + Llama-3.1-8B bf16, vLLM's H100 defaults";
  h100.block_size = 16;
  h100.num_gpu_blocks = 26625;  // 426,000 tokens: (72 - 16 - 4) GiB / 128 KiB
  h100.max_num_seqs = 1024;
  h100.max_num_batched_tokens = 8192;
  h100.max_model_len = 131072;
  h100.time.step_fixed_s = 0.0075;       // 16 GB / (3.35 TB/s x 0.75) + ~1 ms
  h100.time.prefill_token_s = 0.000030;  // 15 GFLOP/token / (989 TFLOPS x 0.5)
  h100.time.prefill_pair_s = 1.06e-9;    // 32 x 4 x 4096 FLOP/pair / (989 TFLOPS x 0.5)
  h100.time.decode_seq_s = 0.00003;
  h100.time.decode_context_token_s = 5.2e-8;  // 128 KiB / (3.35 TB/s x 0.75)
  h100.api_latency_s = 0.01;                  // clients on the same network
  h100.kv_bytes_per_token = 131072;           // 32 x 8 x 128 x 2 x 2 bytes
  h100.kv_load_bytes_per_s = 50e9;            // PCIe 5.0 x16: vLLM's offloading blog's ~50 GB/s
  p.push_back(h100);

  // A tiny replica for tests: a cache of 64 blocks, 4 sequences, fast steps.
  EngineProfile tiny;
  tiny.name = "tiny";
  tiny.description = "a toy replica for tests: 64 blocks of 16 tokens, max_num_seqs 4";
  tiny.block_size = 16;
  tiny.num_gpu_blocks = 65;
  tiny.max_num_seqs = 4;
  tiny.max_num_batched_tokens = 256;
  tiny.max_model_len = 1024;
  tiny.time.step_fixed_s = 0.010;
  tiny.time.prefill_token_s = 0.0001;
  tiny.time.decode_seq_s = 0.001;
  tiny.api_latency_s = 0;
  tiny.kv_bytes_per_token = 1024;
  tiny.kv_load_bytes_per_s = 1e9;
  p.push_back(tiny);
  return p;
}

}  // namespace

std::span<const EngineProfile> Profiles() {
  static const std::vector<EngineProfile> profiles = MakeProfiles();
  return profiles;
}

std::string CheckKvOffloading(double gib, const EngineProfile& profile) {
  if (!(gib >= 0 && gib <= 16384))
    return fmt::format("--kv-offloading-size: must be 0 (none) to 16384 GiB, got {:g}", gib);
  EngineProfile with = profile;
  with.kv_offloading_gib = gib;
  if (gib > 0 && with.cpu_offload_blocks() < 1) {
    return fmt::format("--kv-offloading-size: {:g} GiB holds not one block of {}'s KV cache", gib,
                       profile.name);
  }
  return {};
}

const EngineProfile* FindProfile(std::string_view name) {
  for (const EngineProfile& p : Profiles()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace warden
