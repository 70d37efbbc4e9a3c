// `warden sim`: simulated vLLM replicas behind vLLM's HTTP API.
//
// Two layouts, as vLLM offers them: one server with N data-parallel ranks (vLLM's balancer, in
// each of the N API servers `vllm serve` 0.26 starts; rank pinning with X-data-parallel-rank), or
// N independent servers on N ports, one rank each.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/dp_balancer.h"
#include "core/engine/profile.h"
#include "net/scaled_clock.h"
#include "sim/api_request.h"

namespace warden {

struct SimOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: pick free ports
  std::string model = "qwen3-4b";
  std::string profile = std::string(kDefaultProfile);
  int data_parallel_size = 1;  // ranks behind one port
  int servers = 1;             // independent servers on consecutive ports (one rank each)
  double time_scale = 1;
  DpBalancer::Mode balancer = DpBalancer::Mode::kStale;
  int reply_tokens = 300;  // natural reply length; max_tokens may cut it shorter
  bool prompt_token_details = true;
  // As vLLM: a request whose prompt and max_tokens together exceed the context is refused (400).
  // Off: max_tokens is cut to the room left, so that clients asking for more than a small model's
  // context holds (Claude Code asks for 32,000) work against the demo.
  bool strict_max_tokens = false;
  // As a vLLM started without --enable-auto-tool-choice and --tool-call-parser: a request that
  // offers tools and leaves the choice to the model (every Claude Code turn) is refused with
  // vLLM's 400.
  bool no_auto_tool_choice = false;
  // As vLLM's --enable-force-include-usage: every OpenAI stream carries its usage, the running
  // count in every chunk (without the cached share) and the whole in a last chunk.
  bool force_include_usage = false;
  SimRenderOptions render;
  double api_latency_s = -1;  // < 0: the profile's
  size_t body_limit = 64 * 1024 * 1024;
  // As vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE (uvicorn's keep-alive timeout): a kept-alive
  // connection that sends no next request for this many wall-clock seconds is closed.
  int keep_alive_s = 5;
  // As vLLM's --api-key: requests outside its public endpoints (/health, /metrics, /version, ...)
  // need "Authorization: Bearer <one of them>", else 401. Empty: none needed.
  std::vector<std::string> api_keys;
  // As vLLM's --no-enable-prefix-caching when false: no prefix cache, and /metrics says so.
  bool prefix_caching = true;
  // As vLLM's --no-scheduler-reserve-full-isl when false: a waiting request is let in once its
  // first chunk fits, not only when its whole prompt does (EngineProfile::reserve_full_prompt).
  bool reserve_full_prompt = true;
  // As vLLM's --scheduling-policy priority when true (EngineProfile::priority_scheduling); with
  // fcfs, vLLM's default, a request naming a priority other than 0 is refused (400).
  bool priority_scheduling = false;
  // As vLLM's --kv-offloading-size (GiB per engine; 0: none): native CPU offloading of the KV
  // cache (EngineProfile::kv_offloading_gib).
  double kv_offloading_gib = 0;
  // As vLLM's --lora-modules, NAME=PATH each (PATH, not read, is listed as its root; NAME alone
  // stands for NAME=/adapters/NAME): LoRA adapters served beside the model (its /v1/models lists
  // them with the model as their parent). A request naming one is answered under that name,
  // and its prompt's blocks are cached apart from the model's and from every other adapter's.
  std::vector<std::string> lora_modules;
  // As vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: POST /v1/load_lora_adapter and
  // /v1/unload_lora_adapter add and remove adapters while it runs, each server on its own.
  bool runtime_lora_updating = false;
  // How long a load takes there (reading, or downloading, the adapter), in simulated seconds. As
  // in vLLM, updates of one adapter name run one after the other: an unload sent during a load
  // waits for it.
  double lora_load_s = 0;
  // As vLLM's --enable-sleep-mode (with VLLM_SERVER_DEV_MODE=1): POST /sleep and /wake_up, GET
  // /is_sleeping.
  bool sleep_mode = false;
  // As vLLM's --sleep-idle-ttl (with sleep_mode): asleep (level 1) after this many simulated
  // seconds without an inference request, woken by the next. 0: never.
  double sleep_idle_ttl_s = 0;
  // How long waking from level 1 or 2 takes, in simulated seconds: the weights come back over
  // PCIe (about half a second for the default profile's 8 GB) and the KV cache is allocated again.
  // A wake from level 0 (a pause) is at once. POST /wake_up answers, and requests start, once
  // awake.
  double wake_up_s = 1;
};

// Checks options; returns an error naming the option, or empty.
std::string ValidateSimOptions(const SimOptions& options);

class SimServer;

// All the simulated servers of one `warden sim` run, on one io_context.
class Simulator {
 public:
  // REQUIRES: ValidateSimOptions(options) is empty.
  Simulator(boost::asio::io_context& io, const SimOptions& options);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Binds every server; returns the bound ports in order. Throws when a port cannot be bound.
  std::vector<uint16_t> Start();
  void Stop();

  const EngineProfile& profile() const { return profile_; }
  const ScaledClock& clock() const { return clock_; }

 private:
  SimOptions options_;
  EngineProfile profile_;
  ScaledClock clock_;
  std::vector<std::unique_ptr<SimServer>> servers_;
};

}  // namespace warden
