#include "gateway/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace warden {
namespace {

TEST(GatewayConfig, ReadsBothLayoutsAndDefaults) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(R"(
listen: 0.0.0.0:9000
session:
  headers: [x-session-id, "x-*-session-id"]
  idle_timeout_s: 120
  key_from_opening: OFF
  state_file: /tmp/warden-state.json
  state_save_interval_s: 10
models:
  - name: qwen3-4b-dp4
    aliases: ["claude-*"]
    url: http://127.0.0.1:8000
    data_parallel_size: 4
    max_num_seqs: 32
  - name: big
    urls: [http://10.0.0.1:8000, http://10.0.0.2:8000/v]
    overflow_limit: 3
    affinity: False
    when_affinity_off: gateway
    admission: recent:04
    inline_system_as_user: Yes
    idle_sleep: on
  - name: remote
    urls: [https://gpu1.example.com, https://gpu2.example.com:8443]
    tls_verify: off
)",
                                 &c, &error))
      << error;
  EXPECT_EQ(c.host, "0.0.0.0");
  EXPECT_TRUE(c.request_ids);  // every request gets an id unless the file says otherwise
  EXPECT_EQ(c.drain_timeout_s, 30);
  EXPECT_EQ(c.drain_delay_s, 0);                // a stop drains at once unless asked to wait
  EXPECT_EQ(c.hand_over_drain_timeout_s, 600);  // a hand-over's old gateway waits longer
  EXPECT_EQ(c.port, 9000);
  ASSERT_EQ(c.models.size(), 3u);
  EXPECT_TRUE(c.models[0].tls_verify);
  EXPECT_FALSE(c.models[2].tls_verify);
  EXPECT_EQ(c.models[2].num_replicas(), 2);
  EXPECT_TRUE(c.models[0].data_parallel());
  EXPECT_EQ(c.models[0].num_replicas(), 4);
  EXPECT_EQ(c.models[0].effective_overflow_limit(), 8);  // auto: 32 / 4
  EXPECT_EQ(c.models[0].session_idle_timeout_s, 120);
  EXPECT_EQ(c.models[1].num_replicas(), 2);
  EXPECT_EQ(c.models[1].effective_overflow_limit(), 3);
  EXPECT_FALSE(c.models[1].affinity);
  EXPECT_FALSE(c.models[1].engine_balances_when_off);
  EXPECT_FALSE(c.models[0].inline_system_as_user);
  EXPECT_TRUE(c.models[1].inline_system_as_user);
  EXPECT_FALSE(c.models[0].idle_sleep);
  EXPECT_TRUE(c.models[1].idle_sleep);
  EXPECT_EQ(c.models[0].admission, "off");
  EXPECT_EQ(c.models[1].admission, "recent:4");  // as peers and the panel spell it
  EXPECT_EQ(c.session.headers.size(), 2u);
  EXPECT_FALSE(c.session.key_from_opening);
  EXPECT_TRUE(GatewayConfig().session.key_from_opening);
  EXPECT_EQ(c.state_file, "/tmp/warden-state.json");
  EXPECT_EQ(c.state_save_interval_s, 10);
  EXPECT_EQ(GatewayConfig().state_file, "");  // nothing saved unless asked
}

struct BadConfig {
  const char* yaml;
  const char* error_contains;
};

class GatewayConfigRejects : public ::testing::TestWithParam<BadConfig> {};

TEST_P(GatewayConfigRejects, WithAnErrorNamingTheField) {
  GatewayConfig c;
  std::string error;
  EXPECT_FALSE(ParseGatewayConfig(GetParam().yaml, &c, &error));
  EXPECT_NE(error.find(GetParam().error_contains), std::string::npos) << error;
}

INSTANTIATE_TEST_SUITE_P(
    BadFiles, GatewayConfigRejects,
    ::testing::Values(
        BadConfig{"models: []", "models: at least one model"},
        BadConfig{"modles: []", "modles: unknown field"},
        BadConfig{"models:\n  - name: m\n", "models[0]: needs url"},
        BadConfig{"models:\n  - name: m\n    url: https://x:1\n    tls_ca_file: /nonexistent.pem\n",
                  "models[0].tls_ca_file: cannot read the CA file /nonexistent.pem"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    tls_ca_file: /nonexistent.pem\n",
                  "models[0].tls_ca_file: cannot read the CA file /nonexistent.pem"},
        BadConfig{"models:\n  - name: m\n    url: ftp://x:1\n",
                  "expected http://host:port or https"},
        BadConfig{"models:\n  - name: m\n    url: http://x:99999\n", "bad port"},
        BadConfig{"models:\n  - name: m\n    urls: ['127.0.0.1:8000']\n",
                  "models[0].urls[0]: expected http://host:port or https"},
        BadConfig{"models:\n  - name: m\n    urls: ['http://a:1', 'b:2']\n",
                  "models[0].urls[1]: expected http://host:port or https"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    overflow_limit: 0\n",
                  "models[0].overflow_limit: '0' must be auto or a whole number 1 to 1048576"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    overflow_limit: Auto\n",
                  "models[0].overflow_limit: 'Auto' must be auto or a whole number"},
        BadConfig{"session:\n  body_fields: [user, '']\n", "session.body_fields[1]: is empty"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    affinity: maybe\n",
                  "models[0].affinity: 'maybe' must be on/off"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    policy: magic\n",
                  "unknown policy 'magic'"},
        BadConfig{
            "models:\n  - name: m\n    urls: [http://a:1, http://b:1]\n    data_parallel_size: 2\n",
            "data_parallel_size: goes with a single url"},
        BadConfig{"models:\n  - {name: m, url: 'http://a:1'}\n  - {name: m, url: 'http://b:1'}\n",
                  "'m' is configured twice"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    admission: lifo\n",
                  "models[0].admission: expected off, fifo, recent:K"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    scrape_interval_s: .inf\n",
                  "scrape_interval_s: inf must be a number > 0"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    scrape_interval_s: 0.0001\n",
                  "scrape_interval_s: 0.0001 must be 0.01 to 3600 seconds"},
        BadConfig{"body_limit_mb: 1e300\nmodels:\n  - name: m\n    url: http://x:1\n",
                  "body_limit_mb: 1e+300 is over"},
        BadConfig{"models:\n  - name:\n    url: http://x:1\n", "models[0].name: has no value"},
        BadConfig{"models:\n  - name: m\n    url: 'http://[::1'\n", "bad host in 'http://[::1'"},
        BadConfig{"listen: nowhere\n", "listen: 'nowhere' must be host:port"},
        BadConfig{"session:\n  state_file: /tmp\nmodels:\n  - name: m\n    url: http://x:1\n",
                  "session.state_file: /tmp is a directory"},
        BadConfig{"session:\n  state_save_interval_s: 0.001\nmodels:\n  - name: m\n    url: "
                  "http://x:1\n",
                  "session.state_save_interval_s: must be 0.1 to 86400 seconds"},
        BadConfig{"models: [\n", "invalid YAML"},
        BadConfig{"- a\n- b\n", "the file: expected a mapping"},
        BadConfig{"listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", "listen: is given twice"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    max_num_seqs: 32\n    "
                  "max_num_seqs: 64\n",
                  "models[0].max_num_seqs: is given twice"},
        BadConfig{"models: [{name: m, url: 'http://x:1'}]\n---\nlisten: 127.0.0.1:1\n",
                  "2 YAML documents"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1/v1\n", "models[0].url: 'http"},
        // An endpoint pasted whole, and /v1 in capitals (found by review).
        BadConfig{"models:\n  - name: m\n    url: http://x:1/v1/chat/completions\n",
                  "without /v1 or an endpoint"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1/V1/\n", "without /v1 or an endpoint"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1/vllm/v1/Messages\n",
                  "without /v1 or an endpoint"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1/v1/audio/transcriptions\n",
                  "without /v1 or an endpoint"},
        BadConfig{"listen: 0.0.0.0:9000\nmodels:\n  - name: m\n    url: "
                  "'http://[::ffff:127.0.0.1]:9000'\n",
                  "is this gateway's own address"},
        BadConfig{"models:\n  - name: m\n    url: 'http://x:1/?q=1'\n",
                  "a query in a server's URL"},
        BadConfig{"models:\n  - name: m\n    url: 'http://x:1#top'\n",
                  "a fragment in a server's URL"},
        BadConfig{"models:\n  - name: m\n    url: 'http://x:1/a b'\n", "a space in a server's URL"},
        BadConfig{"models:\n  - name: m\n    url: 'http://::1:8000'\n",
                  "an IPv6 address goes in brackets"},
        BadConfig{"listen: 127.0.0.1:8080\nmodels:\n  - name: m\n    url: http://localhost:8080\n",
                  "models[0]: 'http://localhost:8080' is this gateway's own address"},
        BadConfig{"listen: 0.0.0.0:9000\nmodels:\n  - name: m\n    urls: [http://127.0.0.1:8000, "
                  "'http://127.0.0.1:9000']\n",
                  "is this gateway's own address"},
        BadConfig{"session:\n  idle_timeout_s: 2e7\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "session.idle_timeout_s: 20000000 must be at most 1e7"},
        BadConfig{"models:\n  - name: m\n    urls: [http://x:1, 'http://x:1/']\n",
                  "'http://x:1/' is listed twice"},
        BadConfig{"models:\n  - {name: a, url: 'http://x:1', aliases: ['claude-*']}\n  - {name: "
                  "b, url: 'http://x:2', aliases: ['claude-*']}\n",
                  "models[1].aliases: 'claude-*' is also models[0]'s alias"},
        BadConfig{"admin_token: ''\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "admin_token: is empty"},
        BadConfig{"admin_token: |\n  secret\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "admin_token: may hold printable ASCII only, without spaces"},
        BadConfig{"admin_token: ' tok '\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "admin_token: may hold printable ASCII only, without spaces"},
        BadConfig{"allowed_hosts: [gpubox, 'http://gpubox:8080']\nmodels: [{name: m, url: "
                  "'http://x:1'}]\n",
                  "allowed_hosts[1]: 'http://gpubox:8080' is not a host name"},
        BadConfig{"threads: 2000\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "threads: 2000 must be between 0 and 1024"},
        BadConfig{"session:\n  state_file: /nonexistent/folder/state.json\nmodels: [{name: m, "
                  "url: 'http://x:1'}]\n",
                  "session.state_file: the folder /nonexistent/folder does not exist"},
        BadConfig{"listen: '::1:80'\n", "an IPv6 address goes in brackets"},
        BadConfig{"tls_key_file: k.pem\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "tls_key_file: given without tls_cert_file"},
        BadConfig{"tls_cert_file: /nonexistent/c.pem\ntls_key_file: /nonexistent/k.pem\n"
                  "models: [{name: m, url: 'http://x:1'}]\n",
                  "tls_cert_file, tls_key_file: cannot read the certificate file "
                  "/nonexistent/c.pem"},
        BadConfig{"peers: [http://h:1, 'http://h:1/']\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "peers: 'http://h:1/' is listed twice"},
        BadConfig{"max_connections: -1\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "max_connections: -1 must be between 0 and 100000000"},
        BadConfig{"peers: ['http://h:1/v1']\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "peers: 'http://h:1/v1': a peer's URL is its gateway's address"},
        BadConfig{
            "models:\n  - name: m\n    url: http://x:1\n    overflow_limit: 2000000\n",
            "models[0].overflow_limit: '2000000' must be auto or a whole number 1 to 1048576"},
        BadConfig{"listen: example.com:80\n", "the host must be an IP address"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    max_num_seqs: abc\n",
                  "models[0].max_num_seqs: 'abc' is not a whole number"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    max_num_seqs: 99999999999\n",
                  "models[0].max_num_seqs: 99999999999 must be between 1 and 1048576"},
        BadConfig{"models:\n  - name: m\n    url: http://x:1\n    affinity: maybe\n",
                  "models[0].affinity: 'maybe' must be on/off, true/false or yes/no"},
        BadConfig{"drain_timeout_s: soon\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "drain_timeout_s: 'soon' is not a number"},
        BadConfig{"hand_over_drain_timeout_s: -1\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "hand_over_drain_timeout_s: must be 0 to 86400 seconds"},
        BadConfig{"drain_delay_s: 7200\nmodels: [{name: m, url: 'http://x:1'}]\n",
                  "drain_delay_s: must be 0 to 3600 seconds"},
        BadConfig{
            "models:\n  - name: m\n    url: [http://x:1]\n",
            "models[0].url: is a list: several servers are given as urls (one server: url)"}));

// One reading of an overflow limit for the file, the flags and the saved settings (found by
// review: the flag's took any number >= 1, the file's up to the bound).
TEST(GatewayConfig, AnOverflowLimitIsAutoOrAWholeNumberUpToTheBound) {
  EXPECT_EQ(ParseOverflowLimit("auto"), 0);
  EXPECT_EQ(ParseOverflowLimit("1"), 1);
  EXPECT_EQ(ParseOverflowLimit("1048576"), kMaxOverflowLimit);
  for (const char* bad : {"", "0", "-1", "1048577", "3.5", "8 ", "Auto", "99999999999"})
    EXPECT_EQ(ParseOverflowLimit(bad), std::nullopt) << bad;
}

// A state file is saved by a new file renamed over it: a folder the gateway cannot write in is
// refused at start, rather than every save failing. Root writes anywhere, so the check runs in a
// child process that gives up root (as a service's User= does).
TEST(GatewayConfig, AStateFileInAFolderItCannotWriteIsRefused) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / fmt::format("warden-ro-{}", ::getpid());
  std::filesystem::create_directory(folder);
  std::filesystem::permissions(
      folder, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  const std::string yaml = fmt::format(
      "session: {{state_file: {}/state.json}}\nmodels: [{{name: m, url: 'http://x:1'}}]\n",
      folder.string());
  const std::string expected =
      fmt::format("session.state_file: the folder {} is not writable here", folder.string());
  EXPECT_EXIT(
      {
        if (::geteuid() == 0 && ::setuid(65534) != 0) std::_Exit(2);  // nobody
        GatewayConfig c;
        std::string error;
        const bool refused = !ParseGatewayConfig(yaml, &c, &error);
        std::fprintf(stderr, "%s\n", error.c_str());
        std::_Exit(refused && error.find(expected) != std::string::npos ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "not writable here");
  std::filesystem::remove(folder);
}

// Permissions do not say it for root: a folder no file can be made in (/proc) is refused too.
TEST(GatewayConfig, AStateFileWhereNoFileCanBeMadeIsRefusedEvenForRoot) {
  GatewayConfig c;
  std::string error;
  EXPECT_FALSE(ParseGatewayConfig(
      "session: {state_file: /proc/state.json}\nmodels: [{name: m, url: 'http://x:1'}]\n", &c,
      &error));
  EXPECT_NE(error.find("session.state_file: the folder /proc is not writable here"),
            std::string::npos)
      << error;
}

// A state file is replaced at every save: a path that is, or whose symlink leads to, anything but a
// regular file (/dev/null, a pipe) is refused rather than replaced (and a link to a regular file,
// or to none yet, is fine).
TEST(GatewayConfig, AStateFileThatIsNoRegularFileIsRefused) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / fmt::format("warden-nonfile-{}", ::getpid());
  std::filesystem::create_directory(folder);
  std::filesystem::create_symlink("/dev/null", folder / "to-null.json");
  std::filesystem::create_symlink("saved.json", folder / "to-file.json");
  const auto parse = [](const std::string& path, std::string* error) {
    GatewayConfig c;
    return ParseGatewayConfig(
        fmt::format("session: {{state_file: '{}'}}\nmodels: [{{name: m, url: 'http://x:1'}}]\n",
                    path),
        &c, error);
  };
  std::string error;
  EXPECT_FALSE(parse("/dev/null", &error));
  EXPECT_NE(error.find("session.state_file: /dev/null is not a regular file"), std::string::npos)
      << error;
  const std::string link = (folder / "to-null.json").string();
  EXPECT_FALSE(parse(link, &error));
  EXPECT_NE(error.find(fmt::format("session.state_file: {} leads to /dev/null, which is not a "
                                   "regular file",
                                   link)),
            std::string::npos)
      << error;
  EXPECT_TRUE(parse((folder / "to-file.json").string(), &error)) << error;
  std::filesystem::remove_all(folder);
}

TEST(GatewayConfig, ReadsAClientKeysTokenBudget) {
  GatewayConfig c;
  std::string error;
  const std::string model = "models:\n  - name: m\n    url: http://127.0.0.1:8000\n";
  ASSERT_TRUE(ParseGatewayConfig(
      "api_keys: [{name: ci, key: sk-ci, tokens_per_minute: 50000}, sk-open]\n" + model, &c,
      &error))
      << error;
  ASSERT_EQ(c.api_keys.size(), 2u);
  EXPECT_EQ(c.api_keys[0].tokens_per_minute, 50000);
  EXPECT_EQ(c.api_keys[1].tokens_per_minute, 0);  // none
  EXPECT_FALSE(ParseGatewayConfig(
      "api_keys: [{name: ci, key: sk-ci, tokens_per_minute: 0}]\n" + model, &c, &error));
  EXPECT_NE(error.find("api_keys[0].tokens_per_minute"), std::string::npos) << error;
}

TEST(GatewayConfig, ReadsTheTrafficLog) {
  const std::string models = "models:\n  - name: m\n    url: http://127.0.0.1:8000\n";
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(models, &c, &error)) << error;
  EXPECT_EQ(c.traffic_log, "");  // none unless asked for
  EXPECT_EQ(c.traffic_log_block, 512);
  ASSERT_TRUE(ParseGatewayConfig(
      "traffic_log: /var/log/warden/trace.jsonl\ntraffic_log_block: 64\n" + models, &c, &error))
      << error;
  EXPECT_EQ(c.traffic_log, "/var/log/warden/trace.jsonl");
  EXPECT_EQ(c.traffic_log_block, 64);
  EXPECT_FALSE(ParseGatewayConfig("traffic_log: ''\n" + models, &c, &error));
  EXPECT_NE(error.find("traffic_log"), std::string::npos) << error;
  EXPECT_FALSE(ParseGatewayConfig("traffic_log_block: 100\n" + models, &c, &error));
  EXPECT_NE(error.find("traffic_log_block: must be a multiple of 16 tokens, got 100"),
            std::string::npos)
      << error;
}

TEST(GatewayConfig, ReadsTheTracesEndpointAndRefusesOneThatIsNoUrl) {
  const std::string models = "models:\n  - name: m\n    url: http://127.0.0.1:8000\n";
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(models, &c, &error)) << error;
  EXPECT_EQ(c.otlp_traces_endpoint, "");  // no spans unless asked for
  ASSERT_TRUE(ParseGatewayConfig("otlp_traces_endpoint: http://127.0.0.1:4318/v1/traces\n" + models,
                                 &c, &error))
      << error;
  EXPECT_EQ(c.otlp_traces_endpoint, "http://127.0.0.1:4318/v1/traces");
  EXPECT_FALSE(ParseGatewayConfig("otlp_traces_endpoint: ''\n" + models, &c, &error));
  EXPECT_NE(error.find("otlp_traces_endpoint"), std::string::npos) << error;
  EXPECT_FALSE(ParseGatewayConfig("otlp_traces_endpoint: collector:4318\n" + models, &c, &error));
  EXPECT_EQ(error.rfind("otlp_traces_endpoint: ", 0), 0u) << error;
}

TEST(GatewayConfig, RequestIdsCanBeTurnedOff) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(
      "request_ids: off\nmodels:\n  - name: m\n    url: http://127.0.0.1:8000\n", &c, &error))
      << error;
  EXPECT_FALSE(c.request_ids);
  EXPECT_FALSE(ParseGatewayConfig(
      "request_ids: sometimes\nmodels:\n  - name: m\n    url: http://127.0.0.1:8000\n", &c,
      &error));
  EXPECT_NE(error.find("request_ids"), std::string::npos) << error;
}

TEST(GatewayConfig, ATrailingDocumentMarkerIsNoSecondDocument) {
  GatewayConfig c;
  std::string error;
  EXPECT_TRUE(ParseGatewayConfig("models: [{name: m, url: 'http://x:1'}]\n---\n", &c, &error))
      << error;
}

TEST(GatewayConfig, ListensOnLocalhostAndBracketedIpv6) {
  std::string host, error;
  uint16_t port = 0;
  ASSERT_TRUE(ParseListenAddress("localhost:8080", &host, &port, &error)) << error;
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(ParseListenAddress("[::1]:9000", &host, &port, &error)) << error;
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(HostForUrl(host), "[::1]");
  EXPECT_FALSE(ParseListenAddress(":9000", &host, &port, &error));
  EXPECT_NE(error.find("has no host"), std::string::npos) << error;
}

TEST(GatewayConfig, AFileThatCannotBeReadSaysWhy) {
  GatewayConfig c;
  std::string error;
  EXPECT_FALSE(LoadGatewayConfig("/nonexistent/warden.yaml", &c, &error));
  EXPECT_EQ(error, "/nonexistent/warden.yaml: cannot read the config file: no such file");
  EXPECT_FALSE(LoadGatewayConfig("/tmp", &c, &error));
  EXPECT_NE(error.find("it is a directory"), std::string::npos) << error;
  // Read whole, it would never end (found by review: 1 GB in 6 s).
  EXPECT_FALSE(LoadGatewayConfig("/dev/zero", &c, &error));
  EXPECT_EQ(error, "/dev/zero: cannot read the config file: not a regular file");
}

TEST(GatewayConfig, ReadsAllowedHosts) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(
      "allowed_hosts: [gpubox, '*.lan']\nmodels: [{name: m, url: 'http://x:1'}]\n", &c, &error))
      << error;
  EXPECT_EQ(c.allowed_hosts, (std::vector<std::string>{"gpubox", "*.lan"}));
}

TEST(GatewayConfig, ReadsPeersAndRejectsBadOnes) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(R"(
peers: [http://10.0.0.2:8080, http://10.0.0.3:8080]
peer_sync_interval_s: 0.5
models:
  - name: m
    url: http://127.0.0.1:8000
)",
                                 &c, &error))
      << error;
  EXPECT_EQ(c.peers.size(), 2u);
  EXPECT_EQ(c.peer_sync_interval_s, 0.5);
  GatewayConfig bad;
  EXPECT_FALSE(ParseGatewayConfig("peers: [not a url]\nmodels: [{name: m, url: http://h:1}]\n",
                                  &bad, &error));
  EXPECT_NE(error.find("peers"), std::string::npos) << error;
  GatewayConfig fast;
  EXPECT_FALSE(ParseGatewayConfig(
      "peers: [http://h:1]\npeer_sync_interval_s: 0.001\nmodels: [{name: m, url: http://h:1}]\n",
      &fast, &error));
  EXPECT_NE(error.find("peer_sync_interval_s"), std::string::npos) << error;
}

// A file in the test's temporary folder holding `text`; returns its path.
std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(GatewayConfig, ReadsApiKeysFromTheFileAndFromKeyFiles) {
  const std::string client_keys = WriteTempFile(
      "client-keys", "# the team's keys\n\n  alice  sk-team-1  # laptop\nsk-team-2\r\nsk#3\n");
  const std::string replica_key = WriteTempFile("replica-key", "# vLLM's --api-key\nsk-vllm\n");
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(fmt::format(R"(
api_keys: [sk-inline, {{name: ci, key: sk-ci, max_in_flight: 4}}]
api_keys_file: {}
models:
  - name: a
    url: http://127.0.0.1:8000
    replica_api_key_file: {}
  - name: b
    url: http://127.0.0.1:8001
    replica_api_key: sk-other
  - name: c
    url: http://127.0.0.1:8002
)",
                                             client_keys, replica_key),
                                 &c, &error))
      << error;
  EXPECT_EQ(c.api_keys,
            (std::vector<ClientKey>{{"", "sk-inline"},
                                    {"ci", "sk-ci", 4},
                                    {"alice", "sk-team-1"},
                                    {"", "sk-team-2"},
                                    {"", "sk#3"}}));  // (a '#' inside a key is the key's)
  EXPECT_EQ(ClientKeyName(c.api_keys, 0), "key-1");
  EXPECT_EQ(ClientKeyName(c.api_keys, 2), "alice");
  EXPECT_EQ(ClientKeyName(c.api_keys, 3), "key-4");
  EXPECT_EQ(c.models[0].replica_api_key, "sk-vllm");
  EXPECT_EQ(c.models[1].replica_api_key, "sk-other");
  EXPECT_EQ(c.models[2].replica_api_key, "");

  // Emptied beside api_keys, the file revokes its keys (found by review: the last one could not
  // be revoked); alone, an empty file is refused (RefusesKeysThatCannotBeUsed).
  const std::string emptied = WriteTempFile("emptied-keys", "# all revoked\n");
  ASSERT_TRUE(ParseGatewayConfig(fmt::format("api_keys: [sk-inline]\napi_keys_file: {}\nmodels: "
                                             "[{{name: a, url: 'http://127.0.0.1:8000'}}]\n",
                                             emptied),
                                 &c, &error))
      << error;
  EXPECT_EQ(c.api_keys, (std::vector<ClientKey>{{"", "sk-inline"}}));
}

// Replica URLs the checks for /v1 and for the gateway's own address must not refuse (found by
// review): a proxy's path with a "v1" of its own, and IPv6's loopback beside an IPv4 listener.
TEST(GatewayConfig, AcceptsProxyPathsAndAnotherLoopbackOnTheSamePort) {
  GatewayConfig c;
  std::string error;
  EXPECT_TRUE(ParseGatewayConfig(
      "listen: 0.0.0.0:8001\nmodels:\n  - name: m\n    urls: ['http://127.0.0.1:8003/api/v1/"
      "namespaces/default/services/vllm:8000/proxy', 'http://[::1]:8001', "
      "'http://127.0.0.2:8002/v1beta']\n",
      &c, &error))
      << error;
  EXPECT_TRUE(ParseGatewayConfig(
      "listen: 127.0.0.1:8000\nmodels:\n  - name: m\n    url: 'http://127.0.0.2:8000'\n", &c,
      &error))
      << error;
  EXPECT_FALSE(ParseGatewayConfig(
      "listen: '[::]:8000'\nmodels:\n  - name: m\n    url: 'http://127.0.0.1:8000'\n", &c, &error));
  EXPECT_NE(error.find("this gateway's own address"), std::string::npos) << error;
}

// An error about a field names its line (found by review: only YAML's own errors did).
TEST(GatewayConfig, AnErrorNamesTheLineOfItsField) {
  GatewayConfig c;
  std::string error;
  EXPECT_FALSE(ParseGatewayConfig(
      "listen: 127.0.0.1:8080\nmodels:\n  - name: a\n    url: http://x:1\n  - name: b\n"
      "    url: http://x:2\n    overflow_limt: 4\n",
      &c, &error));
  EXPECT_NE(error.find("models[1].overflow_limt: unknown field: did you mean overflow_limit?"),
            std::string::npos)
      << error;
  EXPECT_TRUE(error.ends_with("(line 7)")) << error;
  // A misspelled key is named at its own line, not at the block under it (found by review).
  EXPECT_FALSE(ParseGatewayConfig(
      "models:\n  - name: a\n    url: http://x:1\nsesion:\n  idle_timeout_s: 60\n", &c, &error));
  EXPECT_NE(error.find("sesion: unknown field: did you mean session?"), std::string::npos) << error;
  EXPECT_TRUE(error.ends_with("(line 4)")) << error;
  EXPECT_FALSE(
      ParseGatewayConfig("models:\n  - name: a\n    url: http://x:1\n    max_num_seqs: "
                         "lots\n",
                         &c, &error));
  EXPECT_TRUE(error.ends_with("(line 4)")) << error;
  EXPECT_FALSE(ParseGatewayConfig("- a\n- b\n", &c, &error));
  EXPECT_EQ(error.find("(line"), std::string::npos) << error;  // "the file": no field's line
  // A key given twice: the line of the second, which YAML would have dropped.
  EXPECT_FALSE(ParseGatewayConfig(
      "models:\n  - name: a\n    url: http://x:1\n    max_num_seqs: 4\n    max_num_seqs: 8\n", &c,
      &error));
  EXPECT_EQ(error, "models[0].max_num_seqs: is given twice (line 5)");
}

TEST(GatewayConfig, RefusesKeysThatCannotBeUsed) {
  const std::string empty = WriteTempFile("no-keys", "# nothing yet\n\n");
  const std::string two = WriteTempFile("two-keys", "k1\nk2\n");
  const std::string three = WriteTempFile("three-words", "# keys\nalice sk-1 extra\n");
  const std::string twice = WriteTempFile("twice", "sk-1\n# again\nsk-1\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"api_keys: ['']", "api_keys[0]: is empty"},
      {"api_keys: ['two words']", "api_keys[0]: may hold printable ASCII only"},
      {"api_keys_file: /nonexistent/keys", "api_keys_file: cannot read /nonexistent/keys"},
      {"models: [{name: m, url: 'http://h:1', max_num_seqs: 99999999999999999999}]",
       "models[0].max_num_seqs: 99999999999999999999 must be between 1 and 1048576"},
      {"api_keys: [k1, k1]", "api_keys[1]: the same key is given twice"},
      {"api_keys: [{name: a, key: k1}, {name: a, key: k2}]",
       "api_keys[1]: name 'a' is given twice"},
      {"api_keys: [{name: 'a b', key: k1}]", "name 'a b' may hold letters, digits"},
      {"api_keys: [{name: a}]", "api_keys[0].key: is required"},
      {"api_keys: [{key: k, max_in_flight: 0}]", "api_keys[0].max_in_flight: 0 must be between 1"},
      {"api_keys_file: " + three, "line 2 has 3 words"},
      {"api_keys_file: " + empty, "holds no key (and api_keys gives none"},
      // The file's key is named by its line, not by a place in api_keys, which has none.
      {"api_keys_file: " + twice, twice + " line 3: the same key is given twice"},
      {"models: [{name: m, url: 'http://h:1', replica_api_key_file: " + two + "}]",
       "models[0].replica_api_key_file: " + two + " holds 2 keys; one is expected"},
      {"models: [{name: m, url: 'http://h:1', replica_api_key: k, replica_api_key_file: " + two +
           "}]",
       "models[0]: give either replica_api_key or replica_api_key_file"},
      {"models: [{name: m, url: 'http://h:1', replica_api_key: 'a b'}]",
       "models[0].replica_api_key: may hold printable ASCII only"},
  };
  for (const auto& [yaml, expected] : cases) {
    GatewayConfig c;
    std::string error;
    const std::string text =
        yaml.starts_with("models") ? yaml : yaml + "\nmodels: [{name: m, url: 'http://h:1'}]";
    EXPECT_FALSE(ParseGatewayConfig(text, &c, &error)) << yaml;
    EXPECT_NE(error.find(expected), std::string::npos) << yaml << " -> " << error;
  }
}

TEST(GatewayConfig, ReadsTheReadTimeoutAndRefusesANegativeOne) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig("models: [{name: m, url: 'http://h:1'}]", &c, &error)) << error;
  EXPECT_EQ(c.read_timeout_s, 0);  // no limit by default
  ASSERT_TRUE(
      ParseGatewayConfig("read_timeout_s: 120\nmodels: [{name: m, url: 'http://h:1'}]", &c, &error))
      << error;
  EXPECT_EQ(c.read_timeout_s, 120);
  EXPECT_FALSE(
      ParseGatewayConfig("read_timeout_s: -1\nmodels: [{name: m, url: 'http://h:1'}]", &c, &error));
  EXPECT_NE(error.find("read_timeout_s: must be 0 (no limit) to 86400 seconds"), std::string::npos)
      << error;
}

// Two models naming one server split its load between two counts: said (not refused: one server
// may serve several names), once per server, with or without a final slash, in any case, and
// localhost as 127.0.0.1.
TEST(GatewayConfig, WarnsOfAServerThatTwoModelsName) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig(R"(models:
  - {name: a, urls: ['http://h:8000', 'http://h:8001']}
  - {name: b, url: 'http://H:8000/', data_parallel_size: 2}
  - {name: c, url: 'http://h:8002'}
  - {name: d, url: 'http://localhost:9000'}
  - {name: e, url: 'http://127.0.0.1:9000'})",
                                 &c, &error))
      << error;
  const std::vector<std::string> warnings = SharedReplicaWarnings(c);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("models d, e all name the server http://127.0.0.1:9000"),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[1].find("models a, b all name the server http://h:8000"), std::string::npos)
      << warnings[1];
  c.models.resize(1);
  EXPECT_TRUE(SharedReplicaWarnings(c).empty());
}

// Admission holds a request 240 s at most by default (Claude Code gives up on a head at about
// 300 s); 0 lifts the bound.
TEST(GatewayConfig, ReadsTheLongestAdmissionHold) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig("models: [{name: m, url: 'http://h:1'}]", &c, &error)) << error;
  EXPECT_EQ(c.admission_max_hold_s, 240);
  ASSERT_TRUE(ParseGatewayConfig("admission_max_hold_s: 0\nmodels: [{name: m, url: 'http://h:1'}]",
                                 &c, &error))
      << error;
  EXPECT_EQ(c.admission_max_hold_s, 0);
  EXPECT_FALSE(ParseGatewayConfig(
      "admission_max_hold_s: -5\nmodels: [{name: m, url: 'http://h:1'}]", &c, &error));
  EXPECT_NE(error.find("admission_max_hold_s: must be 0 (no bound) or 0.05 to 86400 seconds"),
            std::string::npos)
      << error;
}

TEST(GatewayConfig, ReadsTheStallTimeoutAndRefusesANegativeOne) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig("models: [{name: m, url: 'http://h:1'}]", &c, &error)) << error;
  EXPECT_EQ(c.stall_timeout_s, 60);
  ASSERT_TRUE(
      ParseGatewayConfig("stall_timeout_s: 0\nmodels: [{name: m, url: 'http://h:1'}]", &c, &error))
      << error;
  EXPECT_EQ(c.stall_timeout_s, 0);  // never
  EXPECT_FALSE(ParseGatewayConfig("stall_timeout_s: -5\nmodels: [{name: m, url: 'http://h:1'}]", &c,
                                  &error));
  EXPECT_NE(error.find("stall_timeout_s: must be 0 (never) to 86400 seconds"), std::string::npos)
      << error;
}

// An alias that is a model's name would never be used (the name is looked up first), and the
// models list would name it twice.
TEST(GatewayConfig, RefusesAnAliasThatIsAModelsName) {
  GatewayConfig c;
  std::string error;
  EXPECT_FALSE(ParseGatewayConfig(R"(
models:
  - {name: a, url: 'http://h:1', aliases: [b, "claude-*"]}
  - {name: b, url: 'http://h:2', aliases: ["claude-3*"]}
)",
                                  &c, &error));
  EXPECT_EQ(error, "models[0].aliases: 'b' is models[1]'s name (requests for it go there)");
  GatewayConfig own;  // harmless (as before)
  EXPECT_TRUE(
      ParseGatewayConfig("models: [{name: a, url: 'http://h:1', aliases: [a]}]", &own, &error))
      << error;
}

// An empty alias (`--alias ''` on the command line: the file's reader refuses it itself) would
// list a model with no name.
TEST(GatewayConfig, RefusesAnEmptyAliasFromAnySource) {
  GatewayConfig c;
  std::string error;
  ASSERT_TRUE(ParseGatewayConfig("models: [{name: a, url: 'http://h:1'}]", &c, &error)) << error;
  c.models[0].aliases = {""};
  EXPECT_EQ(ValidateGatewayConfig(c), "models[0].aliases: an alias is empty");
}

// `aliases: "claude-*, gpt-*"` is one string, read as a list of one: an alias no client sends
// (found by review). No model's name holds a comma, so it is refused.
TEST(GatewayConfig, RefusesAnAliasThatListsSeveralInOneString) {
  GatewayConfig c;
  std::string error;
  EXPECT_FALSE(ParseGatewayConfig(
      "models: [{name: a, url: 'http://h:1', aliases: 'claude-*, gpt-*'}]", &c, &error));
  EXPECT_EQ(error,
            "models[0].aliases: 'claude-*, gpt-*' holds a comma: give each name or pattern as an "
            "item of a list ([a, b])");
  EXPECT_TRUE(ParseGatewayConfig(
      "models: [{name: a, url: 'http://h:1', aliases: ['claude-*', 'gpt-*']}]", &c, &error))
      << error;
}

TEST(GlobMatches, MatchesAliases) {
  EXPECT_TRUE(GlobMatches("claude-*", "claude-sonnet-4-5"));
  EXPECT_TRUE(GlobMatches("claude-?-x", "claude-3-x"));
  EXPECT_FALSE(GlobMatches("claude-*", "gpt-4"));
  EXPECT_TRUE(GlobMatches("*", ""));
}

}  // namespace
}  // namespace warden

namespace warden {
namespace {

// A flag that gives another file in place of one the config names: the config's is neither read
// nor checked (it may be what is wrong on this machine).
TEST(GatewayConfig, FilesTheCommandLineReplacesAreNotRead) {
  const std::string yaml =
      "api_keys_file: /nonexistent/keys\n"
      "session: {state_file: /nonexistent/dir/state.json}\n"
      "models:\n  - name: m\n    url: 'http://x:1'\n"
      "    replica_api_key_file: /nonexistent/replica-key\n"
      "    tls_ca_file: /nonexistent/ca.pem\n";
  GatewayConfig c;
  std::string error;
  EXPECT_FALSE(ReadGatewayConfig(yaml, &c, &error));
  EXPECT_NE(error.find("api_keys_file"), std::string::npos) << error;
  GatewayConfig replaced;
  ASSERT_TRUE(ReadGatewayConfig(yaml, &replaced, &error,
                                {.api_keys_file = true,
                                 .replica_api_key_file = true,
                                 .tls_ca_file = true,
                                 .state_file = true}))
      << error;
  EXPECT_EQ(replaced.state_file, "");
  EXPECT_EQ(replaced.models.at(0).tls_ca_file, "");
  EXPECT_EQ(replaced.models.at(0).replica_api_key, "");
  EXPECT_TRUE(replaced.api_keys.empty());
}

// Found by fuzzing: yaml-cpp 0.7 never gets past some malformed documents (one that starts with
// ',', or "!,"): it made empty documents until memory ran out.
TEST(GatewayConfig, ATextTheYamlReaderStallsOnIsRefusedAtOnce) {
  for (const char* yaml :
       {",\"x", ",", "# a comment\n  , x\n", "a: 1\n---\n,x\n", "--- ,x\n", "!,"}) {
    GatewayConfig c;
    std::string error;
    EXPECT_FALSE(ReadGatewayConfig(yaml, &c, &error)) << yaml;
    EXPECT_NE(error.find("the reader makes no progress there"), std::string::npos) << error;
  }
  GatewayConfig c;
  std::string error;
  EXPECT_TRUE(ReadGatewayConfig("models:\n  - name: m\n    aliases: [a\n      , b]\n", &c, &error))
      << error;                          // a flow sequence's comma on a line of its own
  const std::string with_nul("\0,", 2);  // yaml-cpp takes the NUL for the end, then loops
  EXPECT_FALSE(ReadGatewayConfig(with_nul, &c, &error));
  EXPECT_NE(error.find("control character 0x00"), std::string::npos) << error;
  EXPECT_FALSE(ReadGatewayConfig("models: []\nlisten: \x01\n", &c, &error));
  EXPECT_NE(error.find("line 2: control character 0x01"), std::string::npos) << error;
}

TEST(GatewayConfig, EmptyKeysAliasesAndHeaderNamesThatCannotBeAreRefused) {
  const auto refused = [](const std::string& yaml) {
    GatewayConfig c;
    std::string error;
    EXPECT_FALSE(ParseGatewayConfig(yaml, &c, &error)) << yaml;
    return error;
  };
  EXPECT_NE(refused("models: [{name: m, url: 'http://x:1', replica_api_key: ''}]\n")
                .find("models[0].replica_api_key: is empty"),
            std::string::npos);
  EXPECT_NE(refused("models: [{name: m, url: 'http://x:1', aliases: [a, '']}]\n")
                .find("models[0].aliases[1]: is empty"),
            std::string::npos);
  EXPECT_NE(refused("session: {headers: [x-ok, 'bad header']}\n"
                    "models: [{name: m, url: 'http://x:1'}]\n")
                .find("session.headers[1]: 'bad header' is no header name"),
            std::string::npos);
  GatewayConfig c;
  std::string error;
  EXPECT_TRUE(
      ParseGatewayConfig("session: {headers: ['x-*-session-id', X-Session-ID]}\nmodels: [{name: m, "
                         "url: 'http://x:1'}]\n",
                         &c, &error))
      << error;
}

}  // namespace
}  // namespace warden
