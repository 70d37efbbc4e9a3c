#include "net/off_thread.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

namespace warden {
namespace {

namespace asio = boost::asio;

TEST(OffThreadPool, RunsTheWorkElsewhereAndResumesOnTheCallersThread) {
  asio::io_context io;
  OffThreadPool pool(1);
  std::thread::id work_thread, resumed_on;
  int result = 0;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto work = [&] {
          work_thread = std::this_thread::get_id();
          return 42;
        };
        result = co_await pool.Run(work);
        resumed_on = std::this_thread::get_id();
      },
      asio::detached);
  io.run();
  EXPECT_EQ(result, 42);
  EXPECT_NE(work_thread, std::this_thread::get_id());
  EXPECT_EQ(resumed_on, std::this_thread::get_id());
}

// The point of the pool: while the work runs, the shard's other handlers do. The work waits for
// one of them; were it run on the shard's own thread, it would wait in vain.
TEST(OffThreadPool, TheCallersThreadGoesOnServingWhileTheWorkRuns) {
  asio::io_context io;
  OffThreadPool pool(1);
  std::promise<void> served;
  std::future<void> served_future = served.get_future();
  bool work_saw_it_served = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto work = [&] {
          return served_future.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
        };
        work_saw_it_served = co_await pool.Run(work);
      },
      asio::detached);
  asio::post(io, [&] { served.set_value(); });
  io.run();
  EXPECT_TRUE(work_saw_it_served);
}

TEST(OffThreadPool, WhatTheWorkThrowsReachesTheCaller) {
  asio::io_context io;
  OffThreadPool pool(1);
  std::string caught;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          auto work = []() -> int { throw std::runtime_error("no room"); };
          co_await pool.Run(work);
        } catch (const std::runtime_error& e) {
          caught = e.what();
        }
      },
      asio::detached);
  io.run();
  EXPECT_EQ(caught, "no room");
}

}  // namespace
}  // namespace warden
