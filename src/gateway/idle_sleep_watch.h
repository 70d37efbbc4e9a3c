// With a model's idle_sleep (vLLM's --sleep-idle-ttl), a server whose engines sleep stays in
// service: its next request wakes it. One put to sleep by hand (POST /sleep) never wakes so, and
// would hold its requests for good; this tells them apart by how long a sleeping server holds
// requests.
#pragma once

#include <chrono>
#include <optional>

namespace warden {

class IdleSleepWatch {
 public:
  // vLLM wakes a model from CPU memory in seconds.
  static constexpr std::chrono::seconds kWakeGrace{60};

  // Called at each scrape of the server. `waiting_to_wake`: it sleeps and idle_sleep is on;
  // `holding`: requests sent there are in flight. Returns true (out of service) once it has held
  // requests asleep for kWakeGrace, and until it is seen awake.
  bool Update(bool waiting_to_wake, bool holding, std::chrono::steady_clock::time_point now) {
    if (!waiting_to_wake) {
      since_.reset();
      tripped_ = false;
      return false;
    }
    if (tripped_) return true;
    if (!holding) {
      since_.reset();
    } else if (!since_) {
      since_ = now;
    }
    tripped_ = since_ && now - *since_ >= kWakeGrace;
    return tripped_;
  }

 private:
  std::optional<std::chrono::steady_clock::time_point> since_;  // asleep and holding requests
  bool tripped_ = false;
};

}  // namespace warden
