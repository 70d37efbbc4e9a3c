// Reads and writes on an upstream connection, over TLS when it has it (an https server).
#pragma once

#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/system/error_code.hpp>

#include "net/http_read.h"
#include "net/upstream.h"

namespace warden {

// ReadHttp on the connection's buffer, from its TLS stream or its socket.
boost::asio::awaitable<boost::system::error_code> ReadUpstream(
    UpstreamConnection& c, boost::beast::http::basic_parser<false>& parser, ReadUntil until);

// Writes `buffers` whole: on a plain socket tried at once (WriteNow), the rest when the socket
// takes it; over TLS through the stream.
boost::asio::awaitable<boost::system::error_code> WriteUpstream(
    UpstreamConnection& c, const std::array<boost::asio::const_buffer, 2>& buffers);

}  // namespace warden
