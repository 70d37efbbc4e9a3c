#include "net/upstream_io.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "net/await_tuple.h"
#include "net/write_now.h"

namespace warden {
namespace asio = boost::asio;

asio::awaitable<boost::system::error_code> ReadUpstream(
    UpstreamConnection& c, boost::beast::http::basic_parser<false>& parser, ReadUntil until) {
  if (c.tls) co_return co_await ReadHttp(*c.tls, c.buffer, parser, until);
  co_return co_await ReadHttp(c.socket, c.buffer, parser, until);
}

asio::awaitable<boost::system::error_code> WriteUpstream(
    UpstreamConnection& c, const std::array<asio::const_buffer, 2>& buffers) {
  if (c.tls) {
    auto [ec, n] = co_await asio::async_write(*c.tls, buffers, kAwaitTuple);
    co_return ec;
  }
  boost::system::error_code ec;
  const size_t sent = WriteNow(c.socket, buffers, ec);
  if (ec == asio::error::would_block) ec = co_await WriteRest(c.socket, buffers, sent);
  co_return ec;
}

}  // namespace warden
