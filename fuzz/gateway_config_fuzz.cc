// libFuzzer target: a config file. It must be read or refused with a reason; an exception out of
// the reader, or a refusal without one, is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "gateway/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  warden::GatewayConfig config;
  std::string error;
  bool read = false;
  try {
    read = warden::ParseGatewayConfig(yaml, &config, &error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "an exception left the config reader: %s\n", e.what());
    __builtin_trap();
  }
  if (!read && error.empty()) __builtin_trap();
  return 0;
}
