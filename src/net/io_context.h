// An io_context whose queued work can be destroyed before the objects that work refers to.
//
// Why: when a server stops, coroutines still wait on its sockets (kept-alive connections, held
// requests). Destroying an io_context destroys those coroutine frames, and their locals'
// destructors reach back into the server, the gateway, the models. Those must still exist then, so
// the frames go first: stop the run loop, DestroyQueuedWork(), then destroy the objects, then the
// context.
#pragma once

#include <boost/asio/io_context.hpp>

namespace warden {

class IoContext : public boost::asio::io_context {
 public:
  using boost::asio::io_context::io_context;

  // Destroys every handler and suspended coroutine still queued, without running them (Asio's
  // shutdown of the context's services, which the destructor would otherwise do last).
  // REQUIRES: no thread is running the context.
  void DestroyQueuedWork() { shutdown(); }
};

}  // namespace warden
