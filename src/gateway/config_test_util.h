// For config tests: a GatewayConfig read from YAML text as a file would be.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "gateway/config.h"

namespace warden {

// The config the text gives (no defaults' model: the text's models only); a failure to read it
// fails the test.
inline GatewayConfig FromFile(const std::string& yaml) {
  GatewayConfig c;
  c.models.clear();
  std::string error;
  EXPECT_TRUE(ReadGatewayConfig(yaml, &c, &error)) << error;
  return c;
}

}  // namespace warden
