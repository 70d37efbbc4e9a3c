// libFuzzer target: a replica's response bytes, read by the RelayParser as the gateway reads them
// (in pieces; the body into a small buffer emptied as it fills). The head it writes goes to the
// client, so whatever the replica sent, a head it accepts must be well formed: the status line,
// then fields each on one CRLF-ended line, none of them hop-by-hop or the gateway's own
// (x-warden-*), and Beast must read it back as a response head (no response splitting). Byte 0
// sets the size of the pieces.
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "net/relay_parser.h"

namespace {

namespace http = boost::beast::http;

// Each field line of `head` (past its status line) names a field the client may get.
bool FieldsArePassable(std::string_view head) {
  size_t line = head.find("\r\n") + 2;
  while (line < head.size()) {
    const size_t end = head.find("\r\n", line);
    if (end == std::string_view::npos) return false;
    const std::string_view text = head.substr(line, end - line);
    const size_t colon = text.find(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    const std::string_view name = text.substr(0, colon);
    if (warden::IsHopByHop(http::string_to_field(name))) return false;
    if (name.size() >= 9 && boost::beast::iequals(name.substr(0, 9), "x-warden-")) return false;
    line = end + 2;
  }
  return true;
}

// Beast reads `head`, closed as the gateway closes it (its framing field, the blank line).
bool ReadsBack(const std::string& head) {
  const std::string whole = head + "Content-Length: 0\r\n\r\n";
  http::response_parser<http::empty_body> parser;
  parser.header_limit(1 << 20);  // its form is checked, not its size
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(whole), ec);
  return !ec && parser.is_header_done();
}

void CheckHead(const std::string& head) {
  if (!head.starts_with("HTTP/1.1 ") || !head.ends_with("\r\n")) __builtin_trap();
  if (!FieldsArePassable(head)) __builtin_trap();
  if (!ReadsBack(head)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = data[0] % 64 + 1;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string head;
  warden::RelayParser parser(&head);
  char body[17];
  parser.SetBodyBuffer(body, sizeof body);
  std::string_view rest = input;
  std::string pending;  // bytes put but not taken yet, as the gateway's read buffer keeps them
  boost::beast::error_code ec;
  bool head_checked = false;
  while (!parser.is_done()) {
    if (!rest.empty()) {
      const size_t n = std::min(piece, rest.size());
      pending.append(rest.substr(0, n));
      rest.remove_prefix(n);
    }
    // Put from an allocation of exactly the bytes pending, so that a read past them (the parser
    // or its callbacks looking ahead) is AddressSanitizer's to see, not hidden in spare capacity.
    const std::unique_ptr<char[]> exact(new char[pending.size()]);
    std::memcpy(exact.get(), pending.data(), pending.size());
    const size_t taken = parser.put(boost::asio::buffer(exact.get(), pending.size()), ec);
    pending.erase(0, taken);
    // The gateway sends the head on as soon as it is whole, whatever the body does later.
    if (!ec && parser.is_header_done() && !head_checked) {
      CheckHead(head);
      head_checked = true;
    }
    if (ec == http::error::need_buffer) {  // the body buffer is full: emptied, as when relayed
      parser.SetBodyBuffer(body, sizeof body);
      ec = {};
      continue;
    }
    if (ec == http::error::need_more) {
      ec = {};
      if (rest.empty()) break;
      continue;
    }
    if (ec) break;
    if (taken == 0 && rest.empty()) break;
  }
  return 0;
}
