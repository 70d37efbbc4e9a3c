#include "gateway/config_overrides.h"

#include <gtest/gtest.h>

#include <fstream>

#include "gateway/config_test_util.h"

namespace warden {
namespace {

constexpr const char* kOneModel = R"(
session:
  idle_timeout_s: 2
  max_entries: 7
models:
  - name: qwen3-4b-dp4
    aliases: ["claude-*"]
    url: http://127.0.0.1:8000
    data_parallel_size: 4
    max_num_seqs: 32
)";

TEST(ConfigOverrides, AllowedHostFlagsReplaceTheFilesAndMustBeNames) {
  GatewayConfig c = FromFile(std::string("allowed_hosts: [gpubox]\n") + kOneModel);
  ConfigOverrides o;
  o.allowed_hosts = {"*.lan", "gw"};
  ASSERT_EQ(ApplyConfigOverrides(o, &c), "");
  EXPECT_EQ(c.allowed_hosts, (std::vector<std::string>{"*.lan", "gw"}));
  o.allowed_hosts = {"gw:8080"};
  EXPECT_NE(ApplyConfigOverrides(o, &c).find("--allowed-host: 'gw:8080'"), std::string::npos);
}

// --port (as `warden sim` has) changes the port alone, on the file's host; with --listen, which
// gives one already, it is refused rather than one of them dropped.
TEST(ConfigOverrides, APortAloneKeepsTheFilesHostAndDoesNotGoWithListen) {
  GatewayConfig c = FromFile(std::string("listen: 0.0.0.0:9000\n") + kOneModel);
  ConfigOverrides o;
  o.port = 59000;
  ASSERT_EQ(ApplyConfigOverrides(o, &c), "");
  EXPECT_EQ(c.host, "0.0.0.0");
  EXPECT_EQ(c.port, 59000);
  o.port = 65536;
  EXPECT_EQ(ApplyConfigOverrides(o, &c), "--port: must be from 0 (any free port) to 65535");
  o.port = 8081;
  o.listen = "127.0.0.1:8082";
  EXPECT_NE(ApplyConfigOverrides(o, &c).find("give one of them"), std::string::npos);
}

TEST(ConfigOverrides, ModelFlagsChangeTheFilesOnlyModelAndKeepTheRest) {
  GatewayConfig c = FromFile(kOneModel);
  ConfigOverrides o;
  o.model = "other";
  o.data_parallel_size = 2;
  o.aliases = {"gpt-*"};
  ASSERT_EQ(ApplyConfigOverrides(o, &c), "");
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "other");
  EXPECT_EQ(c.models[0].num_replicas(), 2);
  EXPECT_EQ(c.models[0].aliases, std::vector<std::string>{"gpt-*"});
  EXPECT_EQ(c.models[0].urls, std::vector<std::string>{"http://127.0.0.1:8000"});
  EXPECT_EQ(c.models[0].max_num_seqs, 32);
  EXPECT_EQ(c.models[0].session_idle_timeout_s, 2);
  EXPECT_EQ(ValidateGatewayConfig(c), "");
}

TEST(ConfigOverrides, AUrlReplacesTheFilesReplicasButNotItsModel) {
  GatewayConfig c = FromFile(kOneModel);
  ConfigOverrides o;
  o.urls = {"http://127.0.0.1:9000"};
  ASSERT_EQ(ApplyConfigOverrides(o, &c), "");
  EXPECT_EQ(c.models[0].name, "qwen3-4b-dp4");
  EXPECT_EQ(c.models[0].urls, std::vector<std::string>{"http://127.0.0.1:9000"});
  EXPECT_EQ(c.models[0].num_replicas(), 1);  // the flags' replicas: --dp not given, one
  EXPECT_EQ(c.models[0].aliases, std::vector<std::string>{"claude-*"});
  GatewayConfig two_servers = FromFile(kOneModel);
  ConfigOverrides urls;
  urls.urls = {"http://127.0.0.1:9000", "http://127.0.0.1:9001"};
  ASSERT_EQ(ApplyConfigOverrides(urls, &two_servers), "");
  EXPECT_EQ(ValidateGatewayConfig(two_servers), "");  // not the file's data_parallel_size 4
  EXPECT_EQ(two_servers.models[0].num_replicas(), 2);
}

TEST(ConfigOverrides, AModelFromFlagsTakesTheFilesSessionSettings) {
  GatewayConfig c = FromFile("session:\n  idle_timeout_s: 2\n  max_entries: 7\n");
  ConfigOverrides o;
  o.model = "m";
  o.urls = {"http://127.0.0.1:8000"};
  o.data_parallel_size = 4;
  ASSERT_EQ(ApplyConfigOverrides(o, &c), "");
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].session_idle_timeout_s, 2);
  EXPECT_EQ(c.models[0].max_sessions, 7u);
  EXPECT_EQ(c.models[0].num_replicas(), 4);
}

TEST(ConfigOverrides, ModelFlagsAreRefusedWhereTheyDoNotSayWhichModelOrWhichReplicas) {
  GatewayConfig two = FromFile(
      "models:\n  - {name: a, url: 'http://127.0.0.1:1'}\n  - {name: b, url: "
      "'http://127.0.0.1:2'}\n");
  ConfigOverrides url;
  url.urls = {"http://127.0.0.1:3"};
  EXPECT_NE(ApplyConfigOverrides(url, &two).find("the config file has 2"), std::string::npos);

  GatewayConfig none;
  none.models.clear();
  ConfigOverrides no_url;
  no_url.model = "m";
  no_url.data_parallel_size = 2;
  EXPECT_NE(ApplyConfigOverrides(no_url, &none).find("given with --url"), std::string::npos);
  ConfigOverrides no_name;
  no_name.urls = {"http://127.0.0.1:3"};
  EXPECT_NE(ApplyConfigOverrides(no_name, &none).find("--url needs --model"), std::string::npos);
}

TEST(ConfigOverrides, FlagsWinOverTheFileAndBadValuesAreRefusedNotDropped) {
  GatewayConfig c = FromFile(kOneModel);
  ConfigOverrides o;
  o.max_num_seqs = 64;
  o.overflow_limit = "3";
  o.affinity = "off";
  o.inline_system_as_user = "on";
  o.threads = 2;
  o.drain_timeout_s = 5;
  o.header_timeout_s = 20;
  ASSERT_EQ(ApplyConfigOverrides(o, &c), "");
  EXPECT_EQ(c.models[0].max_num_seqs, 64);
  EXPECT_EQ(c.models[0].effective_overflow_limit(), 3);
  EXPECT_FALSE(c.models[0].affinity);
  EXPECT_TRUE(c.models[0].inline_system_as_user);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.drain_timeout_s, 5);
  EXPECT_EQ(c.header_timeout_s, 20);

  const auto validated = [](ConfigOverrides bad) {
    GatewayConfig c = FromFile(kOneModel);
    std::string error = ApplyConfigOverrides(bad, &c);
    return error.empty() ? ValidateGatewayConfig(c) : error;
  };
  ConfigOverrides zero_seqs;
  zero_seqs.max_num_seqs = 0;
  EXPECT_NE(validated(zero_seqs).find("max_num_seqs: 0"), std::string::npos);
  ConfigOverrides zero_scrape;
  zero_scrape.scrape_interval_s = 0;
  EXPECT_NE(validated(zero_scrape).find("scrape_interval_s: 0"), std::string::npos);
  ConfigOverrides negative_threads;
  negative_threads.threads = -1;
  EXPECT_NE(validated(negative_threads).find("threads"), std::string::npos);
  ConfigOverrides negative_drain;
  negative_drain.drain_timeout_s = -1;
  EXPECT_NE(validated(negative_drain).find("drain_timeout_s"), std::string::npos);
  ConfigOverrides short_header;
  short_header.header_timeout_s = 0.5;
  EXPECT_NE(validated(short_header).find("header_timeout_s: must be 1 to 86400"),
            std::string::npos);
  ConfigOverrides zero_body;
  zero_body.body_limit_mb = 0;
  EXPECT_NE(validated(zero_body).find("--body-limit-mb"), std::string::npos);
  ConfigOverrides huge_limit;
  huge_limit.overflow_limit = "2000000";  // what the admin API would refuse to set back
  EXPECT_NE(validated(huge_limit)
                .find("--overflow-limit: '2000000' must be auto or a whole "
                      "number 1 to 1048576"),
            std::string::npos);
  ConfigOverrides not_utf8;
  not_utf8.model = "bad\xffname";  // it would go into /metrics labels and JSON
  EXPECT_NE(validated(not_utf8).find("name: is not valid UTF-8"), std::string::npos);
  ConfigOverrides maybe;
  maybe.affinity = "maybe";
  EXPECT_NE(validated(maybe).find("--affinity: 'maybe'"), std::string::npos);
  ConfigOverrides no_log;  // refused as the file's traffic_log: "" is (found by review)
  no_log.traffic_log = "";
  EXPECT_EQ(validated(no_log),
            "--traffic-log: is empty (to record nothing, leave traffic_log out of the config)");
}

// --api-keys-file takes the place of the config's api_keys_file; the config's own api_keys stay.
TEST(ConfigOverrides, KeyFilesFromFlagsReplaceTheFilesKeys) {
  const std::string clients = ::testing::TempDir() + "flag-client-keys";
  const std::string configured = ::testing::TempDir() + "config-client-keys";
  const std::string replicas = ::testing::TempDir() + "flag-replica-key";
  std::ofstream(clients) << "sk-flag-1\nbob sk-flag-2\n";
  std::ofstream(configured) << "sk-file\n";
  std::ofstream(replicas) << "sk-vllm\n";
  GatewayConfig c = FromFile(std::string(kOneModel) +
                             "api_keys: [{name: ci, key: sk-inline, max_in_flight: 2}]\n" +
                             "api_keys_file: " + configured + "\n");
  ASSERT_EQ(c.api_keys.size(), 2u);
  ConfigOverrides o;
  o.api_keys_file = clients;
  o.replica_api_key_file = replicas;
  ASSERT_EQ(ApplyConfigOverrides(o, &c), "");
  EXPECT_EQ(c.api_keys, (std::vector<ClientKey>{
                            {"ci", "sk-inline", 2}, {"", "sk-flag-1"}, {"bob", "sk-flag-2"}}));
  EXPECT_EQ(c.models[0].replica_api_key, "sk-vllm");
  o.api_keys_file = "/nonexistent/keys";
  EXPECT_NE(ApplyConfigOverrides(o, &c).find("--api-keys-file: cannot read /nonexistent/keys"),
            std::string::npos);
}

}  // namespace
}  // namespace warden
