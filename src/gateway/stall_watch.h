// A replica that takes requests and answers none while its /health says it is fine: a hung
// engine behind a live API server (vLLM's /health does not see an engine that stops stepping,
// only one that died). Its conversations' turns would go home and wait, turn after turn; this
// holds it out of service instead, so that what waits there is routed again.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

namespace warden {

class StallWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // Called at each scrape of the server. `holding`: requests sent there are in flight;
  // `last_answer`: when a response head last came from it; `work`: a sum of its engines'
  // counters of work done (tokens computed and generated, steps), nullopt when its metrics were
  // not read or publish none; `limit`: how long it may hold requests with neither (zero: never
  // judged). Returns true (out of service) once it has held requests for `limit` with no answer
  // and no work, and until its counters move or a hold has passed: `limit`, doubled at each
  // verdict in a row that no work ended (up to 16 times), so that a hung replica does not take a
  // batch of requests every other `limit`.
  bool Update(bool holding, Clock::time_point last_answer, std::optional<double> work,
              Clock::time_point now, Clock::duration limit) {
    const bool worked = work && last_work_ && *work != *last_work_;
    if (work) last_work_ = work;
    if (worked) worked_at_ = now;
    if (limit <= Clock::duration::zero() || worked) {
      stalled_until_.reset();
      busy_since_.reset();
      verdicts_ = 0;
      return false;
    }
    if (Held(now)) return true;
    stalled_until_.reset();
    if (!holding) {
      busy_since_.reset();
      return false;
    }
    if (!busy_since_) busy_since_ = now;
    const Clock::time_point quiet_since = std::max({*busy_since_, last_answer, worked_at_});
    if (!work || now - quiet_since < limit) return false;
    stalled_until_ = now + limit * (1 << std::min(verdicts_, 4));
    ++verdicts_;
    busy_since_.reset();
    return true;
  }
  // Whether the last verdict still holds (for a round that could not judge).
  bool Held(Clock::time_point now) const { return stalled_until_ && now < *stalled_until_; }

 private:
  std::optional<Clock::time_point> busy_since_;     // holding requests since
  std::optional<Clock::time_point> stalled_until_;  // held out of service until
  std::optional<double> last_work_;
  Clock::time_point worked_at_{};
  int verdicts_ = 0;  // in a row, with no work seen since the first
};

}  // namespace warden
