#include "gateway/token_budget.h"

#include <algorithm>
#include <cmath>

namespace warden {

void TokenBudget::SetRate(double tokens_per_minute, double now_s) {
  std::lock_guard lock(mu_);
  if (per_minute_ <= 0) {  // a new budget starts full
    level_ = tokens_per_minute;
  } else {
    Refill(now_s);
    level_ = std::min(level_, tokens_per_minute);
  }
  per_minute_ = tokens_per_minute;
  at_s_ = now_s;
}

void TokenBudget::Refill(double now_s) {
  if (now_s > at_s_) level_ = std::min(per_minute_, level_ + (now_s - at_s_) * per_minute_ / 60);
  at_s_ = std::max(at_s_, now_s);
}

bool TokenBudget::Admits(double now_s, double* retry_after_s) {
  std::lock_guard lock(mu_);
  if (per_minute_ <= 0) return true;
  Refill(now_s);
  if (level_ > 0) return true;
  // Until the bucket is past zero: a token's worth more than what is owed.
  if (retry_after_s) *retry_after_s = (1 - level_) * 60 / per_minute_;
  return false;
}

void TokenBudget::Charge(double tokens, double now_s) {
  std::lock_guard lock(mu_);
  if (per_minute_ <= 0 || tokens <= 0) return;
  Refill(now_s);
  level_ -= tokens;
}

void TokenBudget::Settle(double held, double cost, double now_s) {
  std::lock_guard lock(mu_);
  if (per_minute_ <= 0) return;
  Refill(now_s);
  level_ = std::min(per_minute_, level_ + std::max(held, 0.0)) - std::max(cost, 0.0);
}

double TokenBudget::Left(double now_s) {
  std::lock_guard lock(mu_);
  if (per_minute_ <= 0) return 0;
  Refill(now_s);
  return level_;
}

double TokenBudget::tokens_per_minute() const {
  std::lock_guard lock(mu_);
  return per_minute_;
}

}  // namespace warden
