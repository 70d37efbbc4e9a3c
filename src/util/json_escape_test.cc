#include "util/json_escape.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(JsonString, EscapesWhatJsonMustAndPassesTheRestAsItIs) {
  EXPECT_EQ(JsonString(""), R"("")");
  EXPECT_EQ(JsonString("plain text"), R"("plain text")");
  EXPECT_EQ(JsonString("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(JsonString("\n\r\t"), R"("\n\r\t")");
  EXPECT_EQ(JsonString(std::string_view("\x01x\x1f", 3)), R"("\u0001x\u001f")");
  EXPECT_EQ(JsonString(std::string_view("a\0b", 3)), R"("a\u0000b")");
  EXPECT_EQ(JsonString("h\xC3\xA9llo \xE2\x9C\x93"), "\"h\xC3\xA9llo \xE2\x9C\x93\"");  // UTF-8
  std::string out = "[";
  AppendJsonString(&out, "x\"");
  EXPECT_EQ(out, "[\"x\\\"\"");  // appended, not replaced
}

}  // namespace
}  // namespace warden
