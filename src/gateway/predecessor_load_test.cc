#include "gateway/predecessor_load.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "gateway/config.h"
#include "gateway/model_state.h"

namespace warden {
namespace {

ModelConfig TwoReplicas(const std::string& name, std::vector<std::string> urls) {
  ModelConfig m;
  m.name = name;
  m.urls = std::move(urls);
  return m;
}

class PredecessorLoadTest : public ::testing::Test {
 protected:
  boost::asio::io_context io;
  ModelState qwen{TwoReplicas("qwen", {"http://a:1", "http://b:1"}), {io.get_executor()}};
  ModelState other{TwoReplicas("other", {"http://c:1", "http://d:1"}), {io.get_executor()}};
  std::vector<ModelState*> models{&qwen, &other};
};

// Replicas are matched by name, not position (the new gateway's config may list them otherwise);
// what the line does not name counts 0.
TEST_F(PredecessorLoadTest, CountsAreMatchedToReplicasByName) {
  const std::string line =
      R"({"models":[{"name":"qwen","replicas":["http://b:1","http://gone:1"],"in_flight":[3,9]},)"
      R"({"name":"retired","replicas":["http://a:1"],"in_flight":[5]}]})";
  const auto counts = ReadInFlightLine(line, models);
  ASSERT_TRUE(counts.has_value());
  EXPECT_EQ(*counts, (std::vector<std::vector<int>>{{0, 3}, {0, 0}}));
}

TEST_F(PredecessorLoadTest, ALineReadsBackAsItWasWritten) {
  const std::string line = InFlightLine(models);
  EXPECT_TRUE(line.ends_with("}\n"));
  EXPECT_NE(line.find(R"("replicas":["http://a:1","http://b:1"],"in_flight":[0,0])"),
            std::string::npos)
      << line;
  EXPECT_EQ(ReadInFlightLine(line, models), (std::vector<std::vector<int>>{{0, 0}, {0, 0}}));
}

TEST_F(PredecessorLoadTest, AMalformedLineIsNone) {
  for (const char* bad : {
           "",
           "not json",
           R"({"models":{}})",
           R"({"models":[{"name":"qwen","replicas":["http://a:1"],"in_flight":[]}]})",
           R"({"models":[{"name":"qwen","replicas":["http://a:1"],"in_flight":[-1]}]})",
           R"({"models":[{"name":"qwen","replicas":[7],"in_flight":[1]}]})",
       }) {
    EXPECT_EQ(ReadInFlightLine(bad, models), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace warden
