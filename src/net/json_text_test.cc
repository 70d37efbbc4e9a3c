#include "net/json_text.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <limits>

namespace warden {
namespace {

namespace json = boost::json;

TEST(JsonText, WritesDoublesAsPlainDecimals) {
  const json::value v = json::object{{"interval_s", 1.0},
                                     {"usage", 0.0},
                                     {"share", 0.25},
                                     {"started_unix", 1796458055.2218003},
                                     {"tiny", 1e-7},
                                     {"list", json::array{1.5, -2.0, 3}},
                                     {"name", "a \"quoted\"\n name"},
                                     {"count", 42},
                                     {"on", true},
                                     {"none", nullptr},
                                     {"nested", json::object{{"x", 2.5}}}};
  const std::string text = JsonText(v);
  EXPECT_EQ(text, R"({"interval_s":1.0,"usage":0.0,"share":0.25,"started_unix":1796458055.2218003,)"
                  R"("tiny":1e-07,"list":[1.5,-2.0,3],"name":"a \"quoted\"\n name","count":42,)"
                  R"("on":true,"none":null,"nested":{"x":2.5}})");
  // The same values read back, doubles as doubles.
  const json::value back = json::parse(text);
  EXPECT_EQ(back.at("started_unix").as_double(), 1796458055.2218003);
  EXPECT_EQ(back.at("name").as_string(), "a \"quoted\"\n name");
  EXPECT_EQ(back.at("interval_s").as_double(), 1.0);
  EXPECT_EQ(back.at("list").at(1).as_double(), -2.0);
}

TEST(JsonText, WritesWhatJsonCannotSayAsNull) {
  EXPECT_EQ(JsonText(json::array{std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::quiet_NaN()}),
            "[null,null]");
  EXPECT_EQ(JsonText(json::object{}), "{}");
  EXPECT_EQ(JsonText(json::array{}), "[]");
}

}  // namespace
}  // namespace warden
