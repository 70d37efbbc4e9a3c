#include "cli/sim_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <memory>

#include "cli/engine_flags.h"
#include "cli/flag_checks.h"
#include "cli/listen_failure.h"
#include "net/io_context.h"
#include "os/file_limit.h"
#include "sim/sim_server.h"

namespace warden {
namespace {

int RunSim(const SimOptions& options, const std::string& balancer_name) {
  RaiseOpenFileLimit();  // a server for many connections, like the gateway
  SimOptions opts = options;
  if (!ParseDpBalancerMode(balancer_name, &opts.balancer)) {
    fmt::print(stderr, "--dp-balancer: unknown balancer '{}' (vllm-dp or vllm-dp-fresh)\n",
               balancer_name);
    return 2;
  }
  if (const std::string error = ValidateSimOptions(opts); !error.empty()) {
    fmt::print(stderr, "{}\n", error);
    return 2;
  }
  IoContext io(1);
  Simulator sim(io, opts);
  std::vector<uint16_t> ports;
  try {
    ports = sim.Start();
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", ListenFailure(e, opts.host, opts.port));
    return 1;
  }
  const EngineProfile& p = sim.profile();
  spdlog::info("SIMULATED vLLM replicas: no GPU, no model; generated text is filler");
  spdlog::info("profile {}: {}; KV cache {} tokens per rank, max_num_seqs {}, time x{}", p.name,
               p.description, p.kv_capacity_tokens(), p.max_num_seqs, opts.time_scale);
  for (size_t i = 0; i < ports.size(); ++i) {
    const int ranks = opts.data_parallel_size;
    fmt::print("warden-sim listening http://{}:{} model={} ranks={}\n", opts.host, ports[i],
               opts.model, ranks);
  }
  std::fflush(stdout);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int) {
    spdlog::info("stopping");
    sim.Stop();
    io.stop();
  });
  io.run();
  io.DestroyQueuedWork();  // while the simulator its coroutines refer to still exists
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  struct Flags {
    SimOptions options;
    std::string balancer = "vllm-dp";
    bool no_details = false;
    bool no_prefix_caching = false;
    std::vector<std::string> lora_modules;  // NAME=PATH
    std::string scheduling_policy = "fcfs";
    bool list = false;
  };
  auto flags = std::make_shared<Flags>();
  SimOptions* options = &flags->options;
  CLI::App* cmd = app.add_subcommand(
      "sim", "Simulated vLLM replicas (prefix cache, scheduler, timing) behind vLLM's HTTP API");
  cmd->add_option("--host", options->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", options->port,
                  "Port (the first of --servers consecutive ports; 0 picks free ports)")
      ->capture_default_str();
  cmd->add_option("--model", options->model, "Served model name")->capture_default_str();
  AddEngineFlags(cmd, {.profile = &options->profile,
                       .reply_tokens = &options->reply_tokens,
                       .api_latency_s = &options->api_latency_s,
                       .kv_offloading_gib = &options->kv_offloading_gib,
                       .reserve_full_prompt = &options->reserve_full_prompt});
  cmd->add_option("--data-parallel-size,--dp", options->data_parallel_size,
                  "Data-parallel ranks behind one port (vLLM's --data-parallel-size)")
      ->capture_default_str();
  cmd->add_option("--servers", options->servers,
                  "Independent single-rank servers on consecutive ports (one vllm serve per GPU)")
      ->capture_default_str();
  cmd->add_option("--time-scale", options->time_scale, "Run this many times faster than real time")
      ->capture_default_str();
  cmd->add_option(
         "--dp-balancer", flags->balancer,
         "Data-parallel balancer: vllm-dp (vLLM 0.26, dense models: engines never publish "
         "their counts, round-robin per API server) or vllm-dp-fresh (the engines' counts, "
         "published 100 ms after the last publication when they changed, else every 5 s)")
      ->capture_default_str();
  cmd->add_flag("--no-prompt-tokens-details", flags->no_details,
                "Leave cached_tokens out of usage (vLLM without --enable-prompt-tokens-details)");
  cmd->add_flag("--no-enable-prefix-caching", flags->no_prefix_caching,
                "As vLLM's: no prefix cache (every prompt computed whole; /metrics says "
                "enable_prefix_caching=\"False\")");
  cmd->add_option("--scheduling-policy", flags->scheduling_policy,
                  "As vLLM's: fcfs (the default) or priority (the waiting queue in order of each "
                  "request's \"priority\", lower first, then arrival; the lowest priority is "
                  "preempted first). With fcfs a request naming a priority other than 0 is refused")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  cmd->add_option("--lora-modules", flags->lora_modules,
                  "As vLLM's: LoRA adapters served beside the model, as NAME=PATH (the path is "
                  "not read); requests may name them as their model")
      ->expected(1, -1);
  cmd->add_flag("--runtime-lora-updating", options->runtime_lora_updating,
                "As vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (also read here): POST "
                "/v1/load_lora_adapter and /v1/unload_lora_adapter add and remove adapters")
      ->envname("VLLM_ALLOW_RUNTIME_LORA_UPDATING");
  cmd->add_option("--lora-load-seconds", options->lora_load_s,
                  "How long loading a LoRA adapter at run time takes (reading or downloading "
                  "it), in simulated seconds; updates of one adapter name wait for each other, "
                  "as in vLLM")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag(
      "--enable-sleep-mode", options->sleep_mode,
      "As vLLM's, with VLLM_SERVER_DEV_MODE=1: POST /sleep?level=0|1|2&mode=abort|wait|keep "
      "puts the server's engines to sleep (level 1 and 2 lose the prefix cache; requests "
      "wait), POST /wake_up[?tags=weights&tags=kv_cache] wakes them, GET /is_sleeping");
  cmd->add_option("--http-timeout-keep-alive", options->keep_alive_s,
                  "As vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE: a kept-alive connection that sends no "
                  "next request for this many (wall-clock) seconds is closed")
      ->capture_default_str();
  cmd->add_option("--sleep-idle-ttl", options->sleep_idle_ttl_s,
                  "As vLLM's (with --enable-sleep-mode): asleep (level 1) after this many "
                  "simulated seconds without an inference request; the next one wakes it");
  cmd->add_option("--wake-up-seconds", options->wake_up_s,
                  "How long a wake from sleep level 1 or 2 takes (the weights back over PCIe, "
                  "the KV cache allocated again), in simulated seconds; POST /wake_up answers, "
                  "and waiting requests start, once awake")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--api-key", options->api_keys,
                  "As vLLM's --api-key (repeatable): requests to /v1/... other than OPTIONS need "
                  "Authorization: Bearer <key>, else 401");
  cmd->add_flag("--strict-max-tokens", options->strict_max_tokens,
                "Refuse a request whose prompt and max_tokens exceed the context, as vLLM does "
                "(default: cut max_tokens to fit)");
  cmd->add_flag("--no-auto-tool-choice", options->no_auto_tool_choice,
                "As vLLM started without --enable-auto-tool-choice and --tool-call-parser: a "
                "request offering tools with the choice left to the model (every Claude Code "
                "turn) is refused with vLLM's 400");
  cmd->add_flag("--enable-force-include-usage", options->force_include_usage,
                "As vLLM's: every OpenAI stream carries usage, a running count in each chunk and "
                "the whole (with the cached share) in a last chunk");
  cmd->add_flag("--merge-inline-system", options->render.merge_inline_system,
                "Render Anthropic system messages inside \"messages\" into the system prompt, as "
                "vLLM does for a chat template that refuses a system message after the first "
                "(default: only the leading ones; the others stay where they are)");
  cmd->add_flag("--list-profiles", flags->list, "Print the hardware profiles and exit");
  RefuseFlagsAsValues(cmd);
  cmd->callback([flags]() {
    if (flags->list) {
      for (const EngineProfile& p : Profiles()) {
        fmt::print("{:18} {} (KV {} tokens, max_num_seqs {}, max_num_batched_tokens {})\n", p.name,
                   p.description, p.kv_capacity_tokens(), p.max_num_seqs, p.max_num_batched_tokens);
      }
      throw CLI::Success();
    }
    flags->options.prompt_token_details = !flags->no_details;
    flags->options.prefix_caching = !flags->no_prefix_caching;
    flags->options.lora_modules = flags->lora_modules;
    flags->options.priority_scheduling = flags->scheduling_policy == "priority";
    const int rc = RunSim(flags->options, flags->balancer);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace warden
