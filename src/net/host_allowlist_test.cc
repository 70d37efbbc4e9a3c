#include "net/host_allowlist.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace warden {
namespace {

TEST(HostAllowlist, OnLoopbackOnlyLocalNamesAndAddressesAreAnswered) {
  const HostAllowlist hosts("127.0.0.1", {});
  for (const char* host :
       {"127.0.0.1:8080", "localhost:8080", "LocalHost", "panel.localhost:8080", "[::1]:8080",
        "10.0.0.7", "host.docker.internal:8080", "gpubox.local", ""}) {  // "": HTTP/1.0
    EXPECT_TRUE(hosts.Allows(host)) << host;
  }
  // A rebinding page's own name, however it dresses up, and what no browser sends but a name
  // could hide behind.
  for (const char* host :
       {"evil.example:8080", "evil.example.:8080", "127.0.0.1.nip.io:8080", "notlocalhost:8080",
        "evil.internal.example", "localhost.evil.example", "localhost:80@evil.example",
        "[::1]evil.example", "[fe80::1%evil.example]", "127.0.0.1:8080x"}) {
    EXPECT_FALSE(hosts.Allows(host)) << host;
  }
  EXPECT_FALSE(HostAllowlist("::1", {}).Allows("evil.example"));
  EXPECT_FALSE(HostAllowlist("::ffff:127.0.0.1", {}).Allows("evil.example"));
}

TEST(HostAllowlist, OnOtherAddressesEveryHostUnlessNamesAreGiven) {
  EXPECT_TRUE(HostAllowlist("0.0.0.0", {}).Allows("gpubox.lan:8080"));
  EXPECT_TRUE(HostAllowlist("10.0.0.2", {}).Allows("evil.example"));
  const HostAllowlist hosts("0.0.0.0", {"gpubox", "*.lan"});
  EXPECT_TRUE(hosts.Allows("gpubox:8080"));
  EXPECT_TRUE(hosts.Allows("GPUBOX.LAN"));
  EXPECT_TRUE(hosts.Allows("localhost:8080"));
  EXPECT_TRUE(hosts.Allows("192.168.1.20:8080"));
  EXPECT_FALSE(hosts.Allows("evil.example:8080"));
  EXPECT_FALSE(hosts.Allows("gpubox.evil.example"));
  EXPECT_TRUE(HostAllowlist("127.0.0.1", {"*"}).Allows("evil.example"));
  EXPECT_TRUE(HostAllowlist().Allows("evil.example"));
}

TEST(HostAllowlist, SaysWhatItAllows) {
  EXPECT_EQ(HostAllowlist("0.0.0.0", {}).Describe(), "any");
  const std::string described = HostAllowlist("127.0.0.1", {"gpubox"}).Describe();
  EXPECT_TRUE(described.starts_with("gpubox, ")) << described;
  EXPECT_TRUE(described.ends_with("localhost, *.localhost, *.local, *.internal and IP addresses"))
      << described;
}

TEST(HostAllowlist, TheMachinesOwnNameIsAllowed) {
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(HostAllowlist("127.0.0.1", {}).Allows(std::string(name) + ":8080"));
}

TEST(HostAllowlist, ReadsTheNameOutOfAHostField) {
  EXPECT_EQ(HostName("gpubox:8080"), "gpubox");
  EXPECT_EQ(HostName("gpubox."), "gpubox");
  EXPECT_EQ(HostName("[::1]:8080"), "::1");
  EXPECT_EQ(HostName("[::1]"), "::1");
  EXPECT_EQ(HostName("gpubox"), "gpubox");
  EXPECT_EQ(HostName("[::1"), std::nullopt);
  EXPECT_EQ(HostName("[::1]x"), std::nullopt);
  EXPECT_EQ(HostName("gpubox:80a"), std::nullopt);
}

TEST(HostAllowlist, AnAbsoluteFormTargetNamesItsHost) {
  EXPECT_EQ(TargetAuthority("http://evil.example/warden/v1/models"), "evil.example");
  EXPECT_EQ(TargetAuthority("HTTPS://gw:8080?x"), "gw:8080");
  EXPECT_EQ(TargetAuthority("/warden/v1/models"), "");
  EXPECT_EQ(TargetAuthority("*"), "");
}

TEST(HostAllowlist, KnowsLoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.3.2.1"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_TRUE(IsLoopbackAddress("::ffff:127.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackAddress("::"));
  EXPECT_FALSE(IsLoopbackAddress("::ffff:10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("localhost"));  // an address, not a name
}

TEST(HostAllowlist, APatternMustBeAHostName) {
  EXPECT_EQ(CheckHostPattern("gpubox.lan"), "");
  EXPECT_EQ(CheckHostPattern("*.lan"), "");
  EXPECT_EQ(CheckHostPattern("*"), "");
  EXPECT_NE(CheckHostPattern(""), "");
  EXPECT_NE(CheckHostPattern("gpubox:8080"), "");
  EXPECT_NE(CheckHostPattern("http://gpubox"), "");
  EXPECT_NE(CheckHostPattern("gpu box"), "");
}

}  // namespace
}  // namespace warden
