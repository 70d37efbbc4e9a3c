// Request body strings kept for reuse: the server reads every body into a string with room to
// spare, and gives it back when the request is done, so that a steady load of bodies allocates
// (and page-faults) nothing. A burst does not keep its room for ever: strings nobody took between
// two sweeps are freed. One per server; not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace warden {

// Bytes reserved past every request body: simdjson reads up to 64 bytes beyond a document.
inline constexpr size_t kBodyPadding = 64;

class BodyStoragePool {
 public:
  // Keeps at most `max_strings` strings and `max_bytes` of their capacity.
  BodyStoragePool(size_t max_strings, size_t max_bytes)
      : max_strings_(max_strings), max_bytes_(max_bytes) {}

  // A string with room for `length` bytes and kBodyPadding past them, its size and contents
  // unspecified: the most recently given back one if it is large enough (as it was: writing over
  // bytes it already has costs no zero-filling), else a new empty one (whose room is not written,
  // so not yet backed by memory).
  std::string Take(size_t length);
  // Keeps `storage` for a later Take, unless the pool is full.
  void GiveBack(std::string storage);
  // Frees the strings that stayed in the pool since the previous sweep (the server calls it about
  // once a second).
  void Sweep();

  size_t strings() const { return spare_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  const size_t max_strings_;
  const size_t max_bytes_;
  // Least recently given back first; Take and GiveBack work at the back.
  std::vector<std::string> spare_;
  size_t bytes_ = 0;  // capacity of the strings in spare_
  // The fewest strings there were since the last sweep: the front ones nobody took since.
  size_t low_water_ = 0;
};

}  // namespace warden
