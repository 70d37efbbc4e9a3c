// The gateway's side of a hand-over's in-flight counts (gateway/predecessor_load.h).
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/gateway.h"
#include "gateway/peer_sync.h"
#include "gateway/predecessor_load.h"

namespace warden {

namespace {

std::vector<ModelState*> Models(const std::vector<std::unique_ptr<ModelState>>& models) {
  std::vector<ModelState*> out;
  for (const auto& m : models) out.push_back(m.get());
  return out;
}

}  // namespace

std::string Gateway::InFlightLine() const {
  return warden::InFlightLine(Models(models_));
}

void Gateway::FollowPredecessor(int fd, std::function<void()> gone) {
  asio::co_spawn(*shards_[0], ReadPredecessorLoads(fd, std::move(gone)), asio::detached);
}

asio::awaitable<void> Gateway::ReadPredecessorLoads(int fd, std::function<void()> gone) {
  asio::posix::stream_descriptor pipe(co_await asio::this_coro::executor, fd);
  const std::vector<ModelState*> models = Models(models_);
  std::string buffer;
  bool counted = false;
  for (;;) {
    auto [ec, n] =
        co_await asio::async_read_until(pipe, asio::dynamic_buffer(buffer, kMaxPredecessorLine),
                                        '\n', asio::as_tuple(asio::use_awaitable));
    if (ec) break;  // its end (the old gateway gone), or a line past the limit
    if (auto counts = ReadInFlightLine(std::string_view(buffer).substr(0, n), models)) {
      peer_sync_->SetPredecessorInFlight(std::move(*counts));
      counted = true;
    }
    buffer.erase(0, n);
  }
  peer_sync_->ForgetPredecessor();
  if (gone) gone();
  spdlog::info("the gateway handed over from has ended{}",
               counted ? ": its requests in flight count no more" : "");
}

}  // namespace warden
