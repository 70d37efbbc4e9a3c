// Reads that wait for the socket when its receive queue is known to be empty.
//
// Boost 1.81's epoll reactor tries every read on a socket at once (a "speculative" recv) unless the
// socket's last read returned end of stream. On a gateway nearly every such try fails: the reply
// to a request just written to a replica, or a client's next request right after its response, is
// not there yet. Each failure is a recv system call that returns EAGAIN, about two per proxied
// request. A read that returns fewer bytes than it asked for has emptied the receive queue, so the
// next read cannot find anything before epoll says the socket is readable; nginx keeps the same
// fact (its `ready` flag) and makes no such calls.
//
//   auto [ec, n] = co_await socket.async_read_some(asio::buffer(room), ...);
//   if (!ec && n < room.size()) NoteReceiveQueueEmpty(socket);
//
// Asio has no public way to say this, so NoteReceiveQueueEmpty sets the reactor's per-socket flag
// itself. It is compiled only for the reactor and Boost version it was written against (Debian 12's
// Boost 1.81 with epoll); anywhere else it does nothing and reads try at once, as before.
#pragma once

#include <boost/asio/ip/tcp.hpp>

namespace warden {

// Says that `socket`'s receive queue was empty at the end of its last read, so that its next read
// waits for epoll's readiness edge instead of trying a recv first. Safe whenever that is true:
// bytes that arrive after the read raise a new edge, which lets the waiting read in. Takes effect
// only on an io_context whose concurrency hint says one thread does its I/O
// (BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO, as the gateway's shards); elsewhere it does nothing.
// REQUIRES: called on that thread, between the socket's reads.
void NoteReceiveQueueEmpty(boost::asio::ip::tcp::socket& socket);

// Whether `socket` is still as the last note left it: its receive queue empty, and epoll has
// reported nothing for it since (no byte, no close). What epoll has not reported yet is not seen:
// use it where missing a change that is microseconds old is recoverable, not where it is not.
bool ReceiveQueueStillEmpty(boost::asio::ip::tcp::socket& socket);

// Whether NoteReceiveQueueEmpty has an effect in this build.
bool ReceiveQueueNotesTakeEffect();

}  // namespace warden
