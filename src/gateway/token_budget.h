// A client key's budget of engine work: the tokens its requests make the replicas compute (prompt
// tokens not read from the prefix cache, and output tokens) per minute, kept as a bucket that holds
// a minute's worth, starts full and refills evenly. A request is let through while the bucket is
// above zero, and holds its prompt's size while it runs (so that requests sent together do not
// all pass on one minute's worth); what it cost is taken in place of that when its answer's usage
// is known. The bucket may go below zero, and the client waits until it has refilled past it.
// Prompt tokens read from the cache are free: a client whose conversations stay cached gets more
// turns out of the same budget, which is what the engine's work is too. Pure: the caller gives the
// time.
#pragma once

#include <mutex>

namespace warden {

class TokenBudget {
 public:
  // Tokens a minute (0: no budget, everything is let through). A change keeps what was used: the
  // bucket is only cut down to the new minute's worth.
  void SetRate(double tokens_per_minute, double now_s);
  // Whether a request may go now; if not, `retry_after_s` (if given) gets the seconds until the
  // bucket is above zero again.
  bool Admits(double now_s, double* retry_after_s = nullptr);
  // Takes what a request cost.
  void Charge(double tokens, double now_s);
  // A request's hold of `held` tokens settled for what it cost: the hold given back (up to a
  // minute's worth in the bucket) and the cost taken, at once.
  void Settle(double held, double cost, double now_s);
  // The tokens left now (negative: owed); the minute's worth when there is no budget.
  double Left(double now_s);
  double tokens_per_minute() const;

 private:
  void Refill(double now_s);  // with mu_ held

  mutable std::mutex mu_;
  double per_minute_ = 0;
  double level_ = 0;
  double at_s_ = 0;  // when level_ was last brought up to date
};

}  // namespace warden
