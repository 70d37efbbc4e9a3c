#include "core/protocol/adapter_request.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(AdapterRequest, ReadsTheFieldsOfTheRightTypeAndRefusesWhatIsNoObject) {
  const std::optional<AdapterRequest> r =
      ParseAdapterRequest(R"({"lora_name":"sql","lora_path":"/a/sql","load_inplace":true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->name, "sql");
  EXPECT_EQ(r->path, "/a/sql");
  EXPECT_TRUE(r->inplace);
  EXPECT_EQ(ParseAdapterRequest(R"({"lora_path":"/a/sql"})")->name, "");
  EXPECT_EQ(ParseAdapterRequest(R"({"lora_name":7,"load_inplace":"yes"})")->name, "");
  EXPECT_FALSE(ParseAdapterRequest(R"({"lora_name":7,"load_inplace":"yes"})")->inplace);
  EXPECT_FALSE(ParseAdapterRequest("not json"));
  EXPECT_FALSE(ParseAdapterRequest(R"(["sql"])"));
}

}  // namespace
}  // namespace warden
