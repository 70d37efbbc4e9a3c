// A response parser for relaying a replica's answer: it keeps no header container. The head for the
// client (status line and end-to-end fields, without any x-warden-* field: those are the
// gateway's) is written into a caller's string as the fields are parsed, and the body lands in a
// caller's buffer piece by piece. A transfer coding other than chunked alone is an error
// (bad_transfer_encoding).
#pragma once

#include <boost/beast/http/basic_parser.hpp>
#include <string>
#include <string_view>

namespace warden {

// Connection-level fields that a proxy does not pass on (RFC 9110 §7.6.1), a proxy's credentials
// (§11.7: the gateway asks for none), and the framing fields it sets itself.
bool IsHopByHop(boost::beast::http::field field);

struct UpstreamUrl;

class RelayParser : public boost::beast::http::basic_parser<false> {
 public:
  // `head` must outlive the parser; it is cleared. The body may be of any length.
  explicit RelayParser(std::string* head);

  int status() const { return status_; }
  // Content-Type: text/event-stream.
  bool event_stream() const { return event_stream_; }
  // Where the next body bytes go: at most `size` of them, counted by body_received().
  void SetBodyBuffer(char* data, size_t size);
  size_t body_received() const { return received_; }
  // The replica the response comes from (it must outlive the parser): a Location field naming it
  // (vLLM's redirect of a path with a trailing slash) is written as a path, so that the client
  // comes back through the gateway rather than going to the replica (nginx's proxy_redirect).
  void SetUpstream(const UpstreamUrl* url) { upstream_ = url; }
  // The replica's x-request-id field is left out of the head, and its request-id (Anthropic's
  // name): the gateway gives its own (the request's id, which the replica echoes when it has one
  // to give at all).
  void DropRequestId() { drop_request_id_ = true; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  using field = boost::beast::http::field;
  using verb = boost::beast::http::verb;

  // boost::beast::http::basic_parser:
  void on_request_impl(verb, string_view, string_view, int, error_code&) override {}
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code&) override;
  void on_body_init_impl(const boost::optional<uint64_t>&, error_code&) override {}
  size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(uint64_t, string_view, error_code&) override {}
  size_t on_chunk_body_impl(uint64_t, string_view body, error_code& ec) override;
  void on_finish_impl(error_code&) override {}
  // Takes out of the head written so far the fields the Connection fields name.
  void DropConnectionFields();

  std::string* head_;
  const UpstreamUrl* upstream_ = nullptr;
  int status_ = 0;
  bool event_stream_ = false;
  bool has_date_ = false;
  bool drop_request_id_ = false;
  std::string connection_;      // the Connection fields' values, joined by commas
  int transfer_encodings_ = 0;  // Transfer-Encoding fields
  bool chunked_ = false;        // the last one is "chunked" alone
  char* body_data_ = nullptr;
  size_t body_room_ = 0;
  size_t received_ = 0;
};

}  // namespace warden
