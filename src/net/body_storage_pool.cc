#include "net/body_storage_pool.h"

#include <algorithm>
#include <utility>

namespace warden {

std::string BodyStoragePool::Take(size_t length) {
  std::string storage;
  if (!spare_.empty()) {
    storage = std::move(spare_.back());
    spare_.pop_back();
    bytes_ -= storage.capacity();
    low_water_ = std::min(low_water_, spare_.size());
  }
  // Growing in place would copy the old bytes over; a new string copies nothing.
  if (storage.capacity() < length + kBodyPadding) storage = std::string();
  storage.reserve(length + kBodyPadding);
  return storage;
}

void BodyStoragePool::GiveBack(std::string storage) {
  const bool allocated = storage.capacity() > std::string().capacity();  // not the inline room
  if (!allocated || spare_.size() >= max_strings_ || bytes_ + storage.capacity() > max_bytes_) {
    return;
  }
  bytes_ += storage.capacity();
  spare_.push_back(std::move(storage));
}

void BodyStoragePool::Sweep() {
  for (size_t i = 0; i < low_water_; ++i) bytes_ -= spare_[i].capacity();
  spare_.erase(spare_.begin(), spare_.begin() + static_cast<std::ptrdiff_t>(low_water_));
  low_water_ = spare_.size();
}

}  // namespace warden
