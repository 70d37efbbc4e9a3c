#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>

namespace warden {

// The completion token for an Asio operation a coroutine awaits: `co_await op(..., kAwaitTuple)`
// gives its results as a tuple (an error is returned, not thrown). The operation is deferred and
// awaited as it is: `use_awaitable` starts a coroutine frame of its own for each operation, about
// 300 instructions and an allocation, on every read and write. Not for the awaitable operators
// (`||`, `&&`), which take awaitables: those keep `as_tuple(use_awaitable)`.
inline constexpr auto kAwaitTuple = boost::asio::as_tuple(boost::asio::deferred);

}  // namespace warden
