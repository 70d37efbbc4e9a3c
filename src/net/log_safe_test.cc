#include "net/log_safe.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(LogSafe, PrintableTextIsLeftAsItIs) {
  std::string scratch;
  const std::string_view text = "/v1/chat/completions?x=1 key=abc";
  EXPECT_EQ(LogSafe(text, scratch).data(), text.data());  // (no copy)
}

// What a terminal would act on, or what makes a log binary to grep, is written as \xHH.
TEST(LogSafe, ControlAndNonAsciiBytesAreEscaped) {
  std::string scratch;
  EXPECT_EQ(LogSafe("/v1/\x1b[2JFAKE\r[info] ok", scratch), "/v1/\\x1b[2JFAKE\\x0d[info] ok");
  EXPECT_EQ(LogSafe(std::string_view("mod\0els", 7), scratch), "mod\\x00els");
  EXPECT_EQ(LogSafe("caf\xc3\xa9\x7f", scratch), "caf\\xc3\\xa9\\x7f");
}

}  // namespace
}  // namespace warden
