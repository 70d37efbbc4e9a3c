#include "net/relay_parser.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/status.hpp>
#include <cstring>
#include <optional>

#include "net/field_line.h"
#include "net/field_list.h"
#include "net/http_server.h"
#include "net/upstream.h"
#include "util/append_number.h"
#include "util/ascii_case.h"
#include "util/trim.h"

namespace warden {

using namespace std::string_view_literals;  // literals appended without a strlen
namespace http = boost::beast::http;

namespace {

constexpr std::string_view kOwnPrefix = "x-warden-";

std::string_view Trimmed(boost::beast::string_view value) {
  return TrimBlanks(std::string_view(value));
}

}  // namespace

bool IsHopByHop(http::field field) {
  switch (field) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_connection:
    case http::field::proxy_authorization:  // for a proxy in front of the gateway, if any
    case http::field::proxy_authenticate:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::content_length:
    case http::field::expect:  // answered by the gateway itself: a replica's 100 is not relayed
      return true;
    default:
      return false;
  }
}

RelayParser::RelayParser(std::string* head) : head_(head) {
  head_->clear();
  body_limit(boost::none);
  header_limit(64 * 1024);  // as a client's request may have (Beast's default is 8 KiB)
}

void RelayParser::SetBodyBuffer(char* data, size_t size) {
  body_data_ = data;
  body_room_ = size;
  received_ = 0;
}

void RelayParser::on_response_impl(int code, string_view reason, int, error_code& ec) {
  // Beast takes any three digits; a status under 100 ("064") has no class, and written back as a
  // number it would not be three digits: the client would get a status line it cannot read.
  // Above 599 is no HTTP status either (RFC 9110 §15: a client takes it for a 5xx): the client
  // gets the gateway's 502 rather than a code its library may refuse.
  if (code < 100 || code > 599) {
    ec = http::error::bad_status;
    return;
  }
  status_ = code;
  // A status line without a reason gets the usual one; a status Beast does not know (529) keeps
  // none rather than Beast's "<unknown-status>" (found by review).
  if (reason.empty()) {
    const string_view usual = http::obsolete_reason(static_cast<http::status>(code));
    if (!usual.starts_with('<')) reason = usual;
  }
  head_->append("HTTP/1.1 "sv);
  AppendNumber(head_, code);
  head_->append(" "sv).append(std::string_view(reason)).append("\r\n"sv);
}

namespace {

// What follows `prefix` (in any case) in `s`, if `s` starts with it.
std::optional<std::string_view> After(std::string_view s, std::string_view prefix) {
  if (!IEquals(s.substr(0, prefix.size()), prefix)) return std::nullopt;
  return s.substr(prefix.size());
}

// `location` without the replica's own scheme, authority and base path, if it names the replica
// and a path there; else nothing.
std::optional<std::string_view> PathOnUpstream(std::string_view location, const UpstreamUrl& url) {
  const std::optional<std::string_view> authority =
      After(location, url.tls ? "https://" : "http://");
  if (!authority) return std::nullopt;
  std::optional<std::string_view> rest =
      After(*authority, url.host + ":" + std::to_string(url.port));
  if (!rest && url.default_port()) rest = After(*authority, url.host);
  if (rest && !url.base_path.empty())
    rest = rest->starts_with(url.base_path) ? std::optional(rest->substr(url.base_path.size()))
                                            : std::nullopt;
  if (!rest || !rest->starts_with('/')) return std::nullopt;
  return rest;
}

}  // namespace

void RelayParser::on_field_impl(field name, string_view name_string, string_view value,
                                error_code&) {
  // A chunked body's trailer fields are not the head's, and a proxy may drop them (RFC 9110 §6.5).
  if (is_header_done()) return;
  if (IsHopByHop(name)) {
    if (name == field::connection) connection_.append(std::string_view(value)).append(","sv);
    if (name == field::transfer_encoding) {
      ++transfer_encodings_;
      chunked_ = IEquals(Trimmed(value), "chunked");
    }
    return;
  }
  // The gateway's own fields are the gateway's to give, not a replica's.
  if (name == field::unknown && name_string.size() >= kOwnPrefix.size() &&
      IEquals(name_string.substr(0, kOwnPrefix.size()), kOwnPrefix))
    return;
  if (drop_request_id_ && name == field::unknown &&
      (IEquals(name_string, kRequestIdField) || IEquals(name_string, "request-id")))
    return;
  if (name == field::content_type) {
    event_stream_ = IEquals(value.substr(0, 17), "text/event-stream");
  }
  if (name == field::date) has_date_ = true;
  if (name == field::location && upstream_) {
    if (std::optional<std::string_view> path = PathOnUpstream(value, *upstream_)) {
      head_->append(std::string_view(name_string)).append(": "sv).append(*path).append("\r\n"sv);
      return;
    }
  }
  if (const std::string_view line = WholeFieldLine(name_string, value); !line.empty()) {
    head_->append(line);
  } else {
    head_->append(std::string_view(name_string))
        .append(": "sv)
        .append(std::string_view(value))
        .append("\r\n"sv);
  }
}

// Fields the Connection field names are the connection's too (RFC 9110 §7.6.1): taken out of the
// head written so far, which is only its status line and the fields.
void RelayParser::on_header_impl(error_code& ec) {
  // A body in a coding other than chunked alone cannot be passed on decoded, nor relayed with its
  // coding (a transfer coding is the connection's): refused, as nginx does (RFC 9112 §7).
  if (transfer_encodings_ > 1 || (transfer_encodings_ == 1 && !chunked_)) {
    ec = http::error::bad_transfer_encoding;
    return;
  }
  if (NamesFields(connection_)) {
    DropConnectionFields();
    has_date_ = has_date_ && !ListHas(connection_, "date");  // dropped with them
  }
  // A proxy with a clock adds the Date an origin server left out (RFC 9110 §6.6.1), as nginx does.
  if (!has_date_) head_->append("Date: "sv).append(HttpDate(std::time(nullptr))).append("\r\n"sv);
}

void RelayParser::DropConnectionFields() {
  std::string kept;
  size_t line = 0;
  while (line < head_->size()) {
    const size_t end = head_->find("\r\n", line) + 2;
    const std::string_view text(head_->data() + line, end - line);
    const size_t colon = text.find(':');
    if (line == 0 || colon == std::string_view::npos ||
        !ListHas(connection_, text.substr(0, colon)))
      kept.append(text);
    line = end;
  }
  head_->swap(kept);
}

size_t RelayParser::on_body_impl(string_view body, error_code& ec) {
  const size_t n = std::min(body.size(), body_room_ - received_);
  if (n > 0) std::memcpy(body_data_ + received_, body.data(), n);
  received_ += n;
  if (n < body.size()) ec = http::error::need_buffer;
  return n;
}

size_t RelayParser::on_chunk_body_impl(uint64_t, string_view body, error_code& ec) {
  return on_body_impl(body, ec);
}

}  // namespace warden
