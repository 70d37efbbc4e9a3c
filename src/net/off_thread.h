// Work that would hold a shard's thread for long (decoding a compressed request body: a few
// kilobytes can decode to the whole body limit) runs on a small pool of threads of its own, so
// that the shard goes on serving its other connections meanwhile:
//
//   auto decode = [&] { return DecodeContentCoding(...); };
//   DecodedBody decoded = co_await pool.Run(decode);
//
// The coroutine that awaits Run is resumed on its own executor (its shard), so what it does after
// needs no more locking than before. Only the work itself runs elsewhere: it must touch nothing the
// shard could touch meanwhile (the awaiting coroutine's own data is safe: it is suspended).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <type_traits>

namespace warden {

class OffThreadPool {
 public:
  // REQUIRES: threads >= 1.
  explicit OffThreadPool(size_t threads) : pool_(threads) {}
  // Work already running is finished; work not yet begun is dropped. Either way the awaiting
  // coroutine is not resumed but posted to its executor, to be destroyed with its queued work
  // (IoContext::DestroyQueuedWork): destroy the pool once the executors have stopped running,
  // before their queued work is destroyed.
  ~OffThreadPool() = default;
  OffThreadPool(const OffThreadPool&) = delete;
  OffThreadPool& operator=(const OffThreadPool&) = delete;

  // Runs `work` (callable with no arguments, returning a default-constructible value) on one of
  // the pool's threads and gives back its result (or rethrows what it threw) to the awaiting
  // coroutine, on its executor. Work is taken in the order it is given. `work` is used where it
  // is, not copied: pass a named local (GCC 12 mishandles the temporaries of a co_await
  // expression).
  template <typename Work>
  boost::asio::awaitable<std::invoke_result_t<Work&>> Run(Work&& work) {
    using Result = std::invoke_result_t<Work&>;
    co_return co_await boost::asio::co_spawn(
        pool_, [&work]() -> boost::asio::awaitable<Result> { co_return work(); },
        boost::asio::use_awaitable);
  }

 private:
  boost::asio::thread_pool pool_;
};

}  // namespace warden
