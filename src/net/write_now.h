// Writes that skip the scheduler when the kernel takes everything at once.
//
// asio::async_write completes through the io_context even when its first system call sends every
// byte, so each write costs a trip through the scheduler and a coroutine suspension. On a gateway
// nearly every write fits the socket's send buffer (a request head and body, a response, a stream's
// event), so the write is tried first as one non-blocking system call, and only what the kernel
// did not take waits for the socket:
//
//   boost::system::error_code ec;
//   const size_t sent = WriteNow(socket, buffers, ec);
//   if (ec == boost::asio::error::would_block) ec = co_await WriteRest(socket, buffers, sent);
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>

#include "net/await_tuple.h"
#include "net/transfer_at_once.h"

namespace warden {

// Sends what `buffers` hold with one non-blocking system call (the socket is switched to
// non-blocking mode the first time). Returns the bytes sent; `ec` is would_block when the kernel
// took less than everything, so that the rest must wait (WriteRest), or the call's error.
template <typename Socket, typename ConstBufferSequence>
size_t WriteNow(Socket& socket, const ConstBufferSequence& buffers, boost::system::error_code& ec) {
  ec = {};
  if (!socket.non_blocking()) {
    socket.non_blocking(true, ec);
    if (ec) return 0;
  }
  const size_t total = boost::asio::buffer_size(buffers);
  const size_t sent = socket.write_some(buffers, ec);
  if (!ec && sent < total) ec = boost::asio::error::would_block;
  return sent;
}

// Writes what WriteNow left of `buffers` (past the first `sent` bytes) once the socket takes it.
template <typename Socket, typename ConstBufferSequence>
boost::asio::awaitable<boost::system::error_code> WriteRest(Socket& socket,
                                                            const ConstBufferSequence& buffers,
                                                            size_t sent) {
  boost::beast::buffers_suffix<ConstBufferSequence> rest(buffers);
  rest.consume(sent);
  auto [ec, n] = co_await boost::asio::async_write(socket, rest, TransferAtOnce(), kAwaitTuple);
  co_return ec;
}

}  // namespace warden
