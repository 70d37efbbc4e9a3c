#include "net/host_allowlist.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(HostAllowlist, OnLoopbackOnlyLocalNamesAndAddressesAreAnswered) {
  const HostAllowlist hosts("127.0.0.1", {});
  EXPECT_TRUE(hosts.Allows("127.0.0.1:8080"));
  EXPECT_TRUE(hosts.Allows("localhost:8080"));
  EXPECT_TRUE(hosts.Allows("LocalHost"));
  EXPECT_TRUE(hosts.Allows("panel.localhost:8080"));
  EXPECT_TRUE(hosts.Allows("[::1]:8080"));
  EXPECT_TRUE(hosts.Allows("10.0.0.7"));
  EXPECT_TRUE(hosts.Allows(""));  // HTTP/1.0
  // A rebinding page's own name, however it dresses up.
  EXPECT_FALSE(hosts.Allows("evil.example:8080"));
  EXPECT_FALSE(hosts.Allows("evil.example.:8080"));
  EXPECT_FALSE(hosts.Allows("127.0.0.1.nip.io:8080"));
  EXPECT_FALSE(hosts.Allows("notlocalhost:8080"));
  EXPECT_FALSE(hosts.Allows("localhost.evil.example"));
  EXPECT_EQ(HostAllowlist("::1", {}).Allows("evil.example"), false);
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
  EXPECT_EQ(HostAllowlist("127.0.0.1", {"gpubox"}).Describe(),
            "gpubox, localhost, *.localhost and IP addresses");
}

TEST(HostAllowlist, ReadsTheNameOutOfAHostField) {
  EXPECT_EQ(HostName("gpubox:8080"), "gpubox");
  EXPECT_EQ(HostName("gpubox."), "gpubox");
  EXPECT_EQ(HostName("[::1]:8080"), "::1");
  EXPECT_EQ(HostName("[::1"), "[::1");
  EXPECT_EQ(HostName("gpubox"), "gpubox");
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
