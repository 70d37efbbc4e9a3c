#include "net/stream_keepalive.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>

namespace warden {

// Shared by the object and its coroutine, which may wake after the object is gone: the exchange
// and the head are touched only while `stopped` is false, or to finish a write Stop() waits for.
struct StreamKeepalive::State {
  State(asio::any_io_executor executor, HttpExchange& e, std::string& h, std::string_view k,
        std::chrono::milliseconds first, std::chrono::milliseconds interval,
        std::function<void()> on_began, std::function<void()> on_client_gone)
      : exchange(&e),
        head(&h),
        keepalive(k),
        began(std::move(on_began)),
        client_gone(std::move(on_client_gone)),
        first_after(first),
        every(interval),
        tick(executor),
        write_done(executor) {}

  HttpExchange* exchange;
  std::string* head;
  std::string_view keepalive;
  std::function<void()> began;
  std::function<void()> client_gone;
  std::chrono::milliseconds first_after;
  std::chrono::milliseconds every;
  asio::steady_timer tick;
  asio::steady_timer write_done;  // cancelled when a write ends (Stop() waits on it)
  bool stopped = false;
  bool writing = false;
  Result result;
};

StreamKeepalive::StreamKeepalive(asio::any_io_executor executor, HttpExchange& exchange,
                                 std::string& head, std::string_view keepalive,
                                 std::chrono::milliseconds first_after,
                                 std::chrono::milliseconds every, std::function<void()> began,
                                 std::function<void()> client_gone)
    : state_(std::make_shared<State>(executor, exchange, head, keepalive, first_after, every,
                                     std::move(began), std::move(client_gone))) {
  asio::co_spawn(executor, Run(state_), asio::detached);
}

StreamKeepalive::~StreamKeepalive() {
  state_->stopped = true;
  state_->tick.cancel();
}

asio::awaitable<StreamKeepalive::Result> StreamKeepalive::Stop() {
  state_->stopped = true;
  state_->tick.cancel();
  while (state_->writing) {
    state_->write_done.expires_at(asio::steady_timer::time_point::max());
    co_await state_->write_done.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  co_return state_->result;
}

asio::awaitable<void> StreamKeepalive::Run(std::shared_ptr<State> s) {
  std::chrono::milliseconds wait = s->first_after;
  for (;;) {
    s->tick.expires_after(wait);
    co_await s->tick.async_wait(asio::as_tuple(asio::use_awaitable));
    if (s->stopped) co_return;
    if (!s->result.head_sent && s->began) s->began();
    s->writing = true;
    std::optional<bool> sent =
        s->result.head_sent ? s->exchange->SendBodyAtOnce(s->keepalive)
                            : s->exchange->StartBodyRawAtOnce(*s->head, std::nullopt, s->keepalive);
    s->result.head_sent = true;
    if (!sent) sent = co_await s->exchange->SendPending();
    s->writing = false;
    s->write_done.cancel();
    if (!*sent) {
      s->result.client_ok = false;
      if (s->client_gone && !s->stopped) s->client_gone();
      co_return;
    }
    ++s->result.sent;
    wait = s->every;
  }
}

std::string_view StreamKeepalive::KeepaliveFor(std::string_view path) {
  if (path == "/v1/messages") return "event: ping\ndata: {\"type\": \"ping\"}\n\n";
  return ": ping\n\n";
}

}  // namespace warden
