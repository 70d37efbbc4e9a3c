#include "net/relay_parser.h"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <string>

#include "net/upstream.h"

namespace warden {
namespace {

namespace http = boost::beast::http;

// Parses a whole response; returns the error, and the head for the client in `head`.
boost::beast::error_code Relay(const std::string& response, std::string* head) {
  RelayParser parser(head);
  char body[64];
  parser.SetBodyBuffer(body, sizeof body);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(response), ec);
  if (!ec && !parser.is_done()) parser.put(boost::asio::buffer(response.substr(0, 0)), ec);
  return ec;
}

TEST(RelayParser, WritesTheClientsHeadWithoutHopByHopOrTheGatewaysOwnFields) {
  std::string head;
  EXPECT_FALSE(
      Relay("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
            "Connection: keep-alive, X-Secret\r\nX-Secret: 1\r\nx-warden-replica: 9\r\n"
            "X-Warden-: 1\r\n"
            "Server: vllm\r\ndate: Tue, 01 Dec 2026 10:00:00 GMT\r\n\r\n{}",
            &head));
  EXPECT_EQ(head,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nServer: vllm\r\n"
            "date: Tue, 01 Dec 2026 10:00:00 GMT\r\n");
}

// Fields written as they came (one space after the colon, nothing after the value) go out as
// their lines; the others are written again in that form: space or tabs around the value dropped,
// a value folded over lines joined.
TEST(RelayParser, WritesEachFieldAsNameColonSpaceValue) {
  std::string head;
  EXPECT_FALSE(
      Relay("HTTP/1.1 200 OK\r\nA: 1\r\nB:2\r\nC:   3\r\nD: 4  \r\nE:\t5\t\r\nF: six\r\n seven\r\n"
            "G: \r\nH: 8\r\nContent-Length: 0\r\nDate: x\r\n\r\n",
            &head));
  EXPECT_EQ(head,
            "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: six seven\r\nG: \r\n"
            "H: 8\r\nDate: x\r\n");
}

// A replica that sends no Date gets the gateway's (RFC 9110 §6.6.1: a proxy with a clock adds
// it), once; one that does keeps its own.
TEST(RelayParser, AddsTheDateAReplicaLeftOut) {
  std::string head;
  EXPECT_FALSE(Relay("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: date\r\n\r\n{}", &head));
  ASSERT_TRUE(head.starts_with("HTTP/1.1 200 OK\r\nDate: ")) << head;
  EXPECT_TRUE(head.ends_with(" GMT\r\n")) << head;
  EXPECT_EQ(head.find("Date:"), head.rfind("Date:"));
  // A Date the Connection field names goes with it: the gateway's takes its place.
  EXPECT_FALSE(
      Relay("HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nConnection: date\r\n"
            "Content-Length: 0\r\n\r\n",
            &head));
  EXPECT_EQ(head.find("10:00:00"), std::string::npos) << head;
  EXPECT_NE(head.find("Date: "), std::string::npos) << head;
}

// vLLM answers a path with a trailing slash with a redirect to the replica's own address: the
// client is sent back to the gateway's path instead (it would skip the gateway, or not reach the
// replica at all). A Location elsewhere is left as it is.
TEST(RelayParser, ALocationOnTheReplicaBecomesAPath) {
  UpstreamUrl url{.host = "10.0.0.5", .port = 8000};
  const auto location = [&](const std::string& value) {
    std::string head;
    RelayParser parser(&head);
    parser.SetUpstream(&url);
    char body[8];
    parser.SetBodyBuffer(body, sizeof body);
    boost::beast::error_code ec;
    const std::string response =
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: " + value + "\r\ncontent-length: 0\r\n\r\n";
    parser.put(boost::asio::buffer(response), ec);
    EXPECT_FALSE(ec);
    return head.substr(head.find("location: ") + 10,
                       head.find("\r\n", head.find("location: ")) - head.find("location: ") - 10);
  };
  EXPECT_EQ(location("http://10.0.0.5:8000/v1/chat/completions"), "/v1/chat/completions");
  EXPECT_EQ(location("HTTP://10.0.0.5:8000/v1/models?x=1"), "/v1/models?x=1");
  EXPECT_EQ(location("http://10.0.0.5:80001/v1/models"), "http://10.0.0.5:80001/v1/models");
  EXPECT_EQ(location("https://10.0.0.5:8000/v1/models"), "https://10.0.0.5:8000/v1/models");
  EXPECT_EQ(location("http://example.com/v1/models"), "http://example.com/v1/models");
  EXPECT_EQ(location("/v1/models"), "/v1/models");
  url.base_path = "/vllm";
  EXPECT_EQ(location("http://10.0.0.5:8000/vllm/v1/models"), "/v1/models");
  EXPECT_EQ(location("http://10.0.0.5:8000/vllmx/v1/models"),
            "http://10.0.0.5:8000/vllmx/v1/models");
  url = UpstreamUrl{.host = "gpu1", .port = 80};
  EXPECT_EQ(location("http://gpu1/v1/models"), "/v1/models");
}

// Found by fuzzing (fuzz/relay_parser_fuzz.cc): Beast reads any three digits as a status, and
// "064" went to the client as "HTTP/1.1 64 OK", a status line no client can read. nginx refuses
// such an answer too ("upstream sent invalid status").
TEST(RelayParser, RefusesAStatusOutside100To599) {
  std::string head;
  EXPECT_EQ(Relay("HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n", &head), http::error::bad_status);
  EXPECT_EQ(Relay("HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n", &head), http::error::bad_status);
  EXPECT_EQ(Relay("HTTP/1.1 064 OK\r\nContent-Length: 0\r\n\r\n", &head), http::error::bad_status);
  EXPECT_EQ(Relay("HTTP/1.1 000 OK\r\nContent-Length: 0\r\n\r\n", &head), http::error::bad_status);
  EXPECT_FALSE(Relay("HTTP/1.1 100 Continue\r\n\r\n", &head));
  EXPECT_FALSE(Relay("HTTP/1.1 599 Odd\r\nContent-Length: 0\r\n\r\n", &head));
  EXPECT_TRUE(head.starts_with("HTTP/1.1 599 Odd\r\nDate: ")) << head;
  // Without a reason: the usual one, or none for a status Beast does not know.
  EXPECT_FALSE(Relay("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", &head));
  EXPECT_TRUE(head.starts_with("HTTP/1.1 404 Not Found\r\n")) << head;
  EXPECT_FALSE(Relay("HTTP/1.1 529 \r\nContent-Length: 0\r\n\r\n", &head));
  EXPECT_TRUE(head.starts_with("HTTP/1.1 529 \r\nDate: ")) << head;
}

}  // namespace
}  // namespace warden
