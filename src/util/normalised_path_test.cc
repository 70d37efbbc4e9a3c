#include "util/normalised_path.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(NormalisedPath, ReadsThePathAsServersAndProxiesDo) {
  EXPECT_EQ(NormalisedPath("/v1/load_lora_adapter"), "/v1/load_lora_adapter");
  EXPECT_EQ(NormalisedPath("/v1/load%5Flora_adapter"), "/v1/load_lora_adapter");
  EXPECT_EQ(NormalisedPath("/v1/unload%5flora%5Fadapter"), "/v1/unload_lora_adapter");
  EXPECT_EQ(NormalisedPath("//v1//load_lora_adapter"), "/v1/load_lora_adapter");
  EXPECT_EQ(NormalisedPath("/v1/./load_lora_adapter"), "/v1/load_lora_adapter");
  EXPECT_EQ(NormalisedPath("/x/../v1/load_lora_adapter"), "/v1/load_lora_adapter");
  EXPECT_EQ(NormalisedPath("/../../v1/models"), "/v1/models");
  EXPECT_EQ(NormalisedPath("/v1/%2e%2e/v1/models"), "/v1/models");
  EXPECT_EQ(NormalisedPath("/adapters/"), "/adapters/");
  EXPECT_EQ(NormalisedPath(""), "/");
  EXPECT_EQ(NormalisedPath("/"), "/");
  EXPECT_EQ(NormalisedPath("/v1/bad%zzescape"), "/v1/bad%zzescape");  // left as it is
  EXPECT_EQ(NormalisedPath("/v1/%zz/load%5Flora_adapter%"), "/v1/%zz/load_lora_adapter%");
}

}  // namespace
}  // namespace warden
