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

TEST(NormalisedPath, TheViewIsThePathItselfUnlessItNeedsNormalising) {
  std::string storage;
  const std::string_view clean = "/v1/chat/completions";
  EXPECT_EQ(NormalisedPathView(clean, &storage).data(), clean.data());
  EXPECT_EQ(NormalisedPathView("/v1/.hidden", &storage), "/v1/.hidden");
  for (std::string_view path : {"/v1/chat/completion%73", "//v1/chat/completions",
                                "/v1/chat/./completions", "/v1/chat/completions//", "/v1/x/.."}) {
    const std::string_view view = NormalisedPathView(path, &storage);
    EXPECT_EQ(view, NormalisedPath(path)) << path;
    EXPECT_EQ(view.data(), storage.data()) << path;
  }
}

}  // namespace
}  // namespace warden
