#include "net/upstream.h"

#include <gtest/gtest.h>

namespace warden {
namespace {

TEST(UpstreamUrl, HttpAndHttpsWithTheirDefaultPorts) {
  UpstreamUrl u;
  std::string error;
  ASSERT_TRUE(ParseUpstreamUrl("https://gpu1.example.com/base/", &u, &error)) << error;
  EXPECT_TRUE(u.tls);
  EXPECT_EQ(u.host, "gpu1.example.com");
  EXPECT_EQ(u.port, 443);
  EXPECT_EQ(u.base_path, "/base");
  EXPECT_EQ(u.ToString(), "https://gpu1.example.com:443/base");
  EXPECT_EQ(u.host_header(), "gpu1.example.com");  // the scheme's port left out, as clients do
  ASSERT_TRUE(ParseUpstreamUrl("http://10.0.0.1", &u, &error)) << error;
  EXPECT_FALSE(u.tls);
  EXPECT_EQ(u.port, 80);
  ASSERT_TRUE(ParseUpstreamUrl("https://[::1]", &u, &error)) << error;  // no port: the default
  EXPECT_EQ(u.host, "[::1]");
  EXPECT_EQ(u.port, 443);
  ASSERT_TRUE(ParseUpstreamUrl("http://[::1]:8000", &u, &error)) << error;
  EXPECT_EQ(u.port, 8000);
  EXPECT_EQ(u.host_header(), "[::1]:8000");
  ASSERT_TRUE(ParseUpstreamUrl("HTTP://Gpu1:8000/vllm", &u, &error)) << error;  // any case
  EXPECT_FALSE(u.tls);
  EXPECT_EQ(u.port, 8000);
  EXPECT_EQ(u.base_path, "/vllm");  // served under a path: requests go under it
  // Requests' paths follow the URL's: a query or fragment would come before them (found by
  // review: "/?q=1/health" reached the server's root and read healthy).
  EXPECT_FALSE(ParseUpstreamUrl("http://x:1/?q=1", &u, &error));
  EXPECT_NE(error.find("a query"), std::string::npos) << error;
  EXPECT_FALSE(ParseUpstreamUrl("http://x:1?q=1", &u, &error));
  EXPECT_NE(error.find("a query"), std::string::npos) << error;
  EXPECT_FALSE(ParseUpstreamUrl("http://x:1/#a", &u, &error));
  EXPECT_FALSE(ParseUpstreamUrl("http://x:1/a b", &u, &error));
  EXPECT_FALSE(ParseUpstreamUrl("http://::1:8000", &u, &error));
  EXPECT_NE(error.find("in brackets"), std::string::npos) << error;
  EXPECT_FALSE(ParseUpstreamUrl("ftp://x:1", &u, &error));
  EXPECT_NE(error.find("expected http://host:port or https://host:port"), std::string::npos);
  // Credentials in the URL: refused (they were taken for part of the host), and not said back.
  EXPECT_FALSE(ParseUpstreamUrl("http://user:s3cret@10.0.0.1:8000/v1", &u, &error));
  EXPECT_NE(error.find("replica_api_key"), std::string::npos) << error;
  EXPECT_NE(error.find("10.0.0.1:8000"), std::string::npos) << error;
  EXPECT_EQ(error.find("s3cret"), std::string::npos) << error;
}

TEST(UpstreamTls, AnUnreadableCaFileIsSaidSo) {
  std::string error;
  EXPECT_EQ(MakeTlsContext({.verify = true, .ca_file = "/nonexistent.pem"}, &error), nullptr);
  EXPECT_NE(error.find("cannot read the CA file /nonexistent.pem"), std::string::npos) << error;
  EXPECT_NE(MakeTlsContext({.verify = false, .ca_file = ""}, &error), nullptr);
  EXPECT_NE(MakeTlsContext({}, &error), nullptr) << error;  // the system's authorities
}

}  // namespace
}  // namespace warden
