// libFuzzer target: a message from a peer gateway (homes, in-flight counts, stored responses,
// drains), taken as PeerSync::Receive takes it: all or none. A taken message must leave state
// that this gateway's own answer to a pull (AllHomesMessage) carries to another gateway: taken
// there, every home of it.
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/config.h"
#include "gateway/model_state.h"
#include "gateway/peer_sync.h"

namespace {

warden::GatewayConfig Config() {
  warden::GatewayConfig config;
  warden::ModelConfig model;
  model.name = "m";
  model.urls = {"http://127.0.0.1:9"};
  model.data_parallel_size = 4;
  config.models.push_back(model);
  warden::ModelConfig other;
  other.name = "n";
  other.urls = {"http://127.0.0.1:10", "http://127.0.0.1:11"};
  config.models.push_back(other);
  return config;
}

struct Gateway {
  explicit Gateway(boost::asio::io_context& io) {
    const std::vector<boost::asio::any_io_executor> shards = {io.get_executor()};
    for (const warden::ModelConfig& m : config.models)
      models.push_back(std::make_unique<warden::ModelState>(m, shards));
    std::vector<warden::ModelState*> raw;
    for (auto& m : models) raw.push_back(m.get());
    peers = std::make_unique<warden::PeerSync>(config, raw, io.get_executor(),
                                               [this] { return clock += 0.25; });
  }
  warden::GatewayConfig config = Config();
  std::vector<std::unique_ptr<warden::ModelState>> models;
  std::unique_ptr<warden::PeerSync> peers;
  double clock = 1000;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (spdlog::set_level(spdlog::level::off), true);
  (void)quiet;
  // Its own per input, never run: what a taken message posts (waking the sending loops) is
  // dropped with it, not piled up across inputs.
  boost::asio::io_context io;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  Gateway here(io);
  int taken = 0;
  const std::string error = here.peers->Receive(body, &taken);
  if (!error.empty()) return 0;
  if (taken < 0) __builtin_trap();
  Gateway there(io);
  int passed_on = 0;
  if (!there.peers->Receive(here.peers->AllHomesMessage(), &passed_on).empty()) __builtin_trap();
  int known = 0;
  for (const auto& model : here.models)
    known += static_cast<int>(
        model->WithRouter([](warden::ModelRouter& r) { return r.AllHomes(); }).size());
  if (passed_on != known) __builtin_trap();
  return 0;
}
