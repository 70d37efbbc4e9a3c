#include "core/workload/trace.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

std::vector<TraceRequest> Parse(std::string_view text) {
  std::vector<TraceRequest> requests;
  std::string error;
  EXPECT_TRUE(ParseTrace(text, &requests, &error)) << error;
  return requests;
}

std::string ErrorOf(std::string_view text) {
  std::vector<TraceRequest> requests;
  std::string error;
  EXPECT_FALSE(ParseTrace(text, &requests, &error));
  return error;
}

TEST(Trace, ReadsMooncakesLines) {
  const auto r = Parse(
      "{\"timestamp\": 0, \"input_length\": 6755, \"output_length\": 500, \"hash_ids\": [0, 1, "
      "2]}\n"
      "\n"
      "{\"timestamp\": 3052, \"input_length\": 2287, \"output_length\": 316, \"hash_ids\": [0, "
      "42]}");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].input_length, 6755);
  EXPECT_EQ(r[0].output_length, 500);
  EXPECT_EQ(r[0].hash_ids, (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_TRUE(r[0].session_id.empty());
  EXPECT_LT(r[0].delay_ms, 0);
  EXPECT_DOUBLE_EQ(r[1].timestamp_ms, 3052);
  EXPECT_EQ(r[1].hash_ids, (std::vector<uint64_t>{0, 42}));
}

TEST(Trace, ReadsAiperfsSessionsAndDelays) {
  const auto r = Parse(
      "{\"timestamp\": 10.5, \"session_id\": \"abc\", \"delay\": 1200, \"input_length\": 10}\n"
      "{\"session_id\": 7, \"input_length\": 10, \"output_length\": 4.0}\n");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0].timestamp_ms, 10.5);
  EXPECT_EQ(r[0].session_id, "abc");
  EXPECT_DOUBLE_EQ(r[0].delay_ms, 1200);
  EXPECT_EQ(r[1].session_id, "7");
  EXPECT_LT(r[1].timestamp_ms, 0);  // none
  EXPECT_EQ(r[1].output_length, 4);
}

TEST(Trace, AWrittenLineReadsBackTheSame) {
  TraceRequest w;
  w.timestamp_ms = 1733500000123;
  w.session_id = "0123456789abcdef";
  w.delay_ms = 2500;
  w.input_length = 21000;
  w.output_length = 312;
  w.hash_ids = {5, 6, 7, 90};
  const std::string line = TraceLine(w);
  EXPECT_EQ(line.back(), '\n');
  const auto r = Parse(line);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_DOUBLE_EQ(r[0].timestamp_ms, w.timestamp_ms);
  EXPECT_EQ(r[0].session_id, w.session_id);
  EXPECT_DOUBLE_EQ(r[0].delay_ms, w.delay_ms);
  EXPECT_EQ(r[0].input_length, w.input_length);
  EXPECT_EQ(r[0].output_length, w.output_length);
  EXPECT_EQ(r[0].hash_ids, w.hash_ids);
}

TEST(Trace, ADelayWithoutASessionIsNotWritten) {
  TraceRequest w;
  w.delay_ms = 10;
  w.input_length = 1;
  EXPECT_EQ(TraceLine(w).find("delay"), std::string::npos);
}

TEST(Trace, ErrorsNameTheLineAndTheField) {
  EXPECT_EQ(ErrorOf("{\"input_length\": 1}\n{\"output_length\": 4}\n"),
            "line 2: input_length: missing (a trace of texts, not token counts, cannot be replayed "
            "here)");
  EXPECT_NE(ErrorOf("{\"input_length\": 0}").find("line 1: input_length"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"input_length\": 2.5}").find("input_length"), std::string::npos);
  EXPECT_NE(ErrorOf("{\"input_length\": 5, \"timestamp\": -1}").find("timestamp"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"input_length\": 5, \"hash_ids\": [1, -2]}").find("hash_ids"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"input_length\": 5, \"session_id\": [1]}").find("session_id"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"input_length\": 5}\n{\"input_length\": 5,,}").find("line 2: not JSON"),
            std::string::npos);
  EXPECT_NE(ErrorOf("[1, 2]").find("not a JSON object"), std::string::npos);
}

TEST(Trace, ALineCutShortCanBeLeftOut) {
  std::vector<TraceRequest> requests;
  std::string error;
  int not_json = 0;
  ASSERT_TRUE(ParseTrace("{\"input_length\": 5}\n{\"input_len\n{\"input_length\": 6}\n", &requests,
                         &error, &not_json))
      << error;
  EXPECT_EQ(not_json, 1);
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].input_length, 6);
  // A line that is JSON but wrong is refused all the same; so is one with a number no count or
  // time can be (it is not cut short).
  EXPECT_FALSE(ParseTrace("{\"input_length\": -5}\n", &requests, &error, &not_json));
  for (const char* line : {"{\"timestamp\": 1e400, \"input_length\": 5}\n",
                           "{\"input_length\": 5, \"hash_ids\": [18446744073709551616]}\n"}) {
    EXPECT_FALSE(ParseTrace(line, &requests, &error, &not_json)) << line;
    EXPECT_EQ(error.rfind("line 1: a number out of range", 0), 0u) << error;
  }
  EXPECT_EQ(not_json, 1);
}

}  // namespace
}  // namespace warden
