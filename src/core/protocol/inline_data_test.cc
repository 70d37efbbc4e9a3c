#include "core/protocol/inline_data.h"

#include <gtest/gtest.h>

#include <string>

namespace warden {
namespace {

TEST(InlineData, FindsAnthropicSourcesAndDataUrlsInAnySpacing) {
  const std::string image(4000, 'Q'), pdf(2000, 'J');
  const std::string body =
      R"({"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64",)"
      R"("media_type":"image/png","data":")" +
      image + R"("}},{"type":"image_url","image_url":{"url": "data:image/png;base64,)" + pdf +
      R"("}},{"type":"document","source": {"data": ")" + image + R"(", "type": "base64"}}]}]})";
  const std::vector<InlineDataRun> runs = LongInlineData(body);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(body.substr(runs[0].offset, runs[0].length), image);
  EXPECT_EQ(body.substr(runs[1].offset, runs[1].length), pdf);
  EXPECT_EQ(body.substr(runs[2].offset, runs[2].length), image);
  EXPECT_EQ(
      EstimateTokensWithInlineData(body),
      static_cast<long>((body.size() - 2 * image.size() - pdf.size()) / 4 + 3 * kInlineDataTokens));
}

TEST(InlineData, ShortOrUnendedOrNonStringDataIsText) {
  EXPECT_TRUE(LongInlineData(R"({"data":"short"})").empty());
  EXPECT_TRUE(LongInlineData(R"({"data":")" + std::string(2000, 'x')).empty());  // cut short
  EXPECT_TRUE(LongInlineData(R"({"data":{"a":")" + std::string(2000, 'x') + R"("}})").empty());
  EXPECT_EQ(EstimateTokensWithInlineData(R"({"data":"short"})"), 4);
  EXPECT_TRUE(LongInlineData("").empty());
  // Prose under a "data" key (a tool's input, a text document), and base64 that is text (a tool
  // result): read as text by the model, so counted as text (found by review).
  std::string prose;
  while (prose.size() < 5000) prose += "the quick brown fox ";
  EXPECT_TRUE(LongInlineData(R"({"input":{"data":")" + prose + R"("}})").empty());
  EXPECT_TRUE(
      LongInlineData(R"({"type":"tool_result","content":")" + std::string(5000, 'Q') + R"("})")
          .empty());
  // A data: URL in HTML that a tool returned: its end is an escaped quote (found by review).
  EXPECT_TRUE(LongInlineData(R"({"content":"<img src=\"data:image/png;base64,)" +
                             std::string(5000, 'A') + R"(\">"})")
                  .empty());
}

}  // namespace
}  // namespace warden
