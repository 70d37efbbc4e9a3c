// Waiting on a condition in integration tests, where the thing waited for happens in another
// process and has no event to wait on.
#pragma once

#include <chrono>
#include <thread>

namespace warden::testing {

// Polls `condition` until it holds or `seconds` pass; returns whether it held.
template <typename F>
bool Eventually(F condition, double seconds = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

}  // namespace warden::testing
