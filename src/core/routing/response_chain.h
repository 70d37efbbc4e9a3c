// Which conversation a stored response belongs to, for OpenAI's stateful Responses API: a request
// that continues from `previous_response_id` sends only its new input, so neither its opening nor
// any header ties it to the conversation; the response it continues does. vLLM keeps stored
// responses in the memory of the API server that made them, so with one server per GPU the
// continuation must also go there to be found at all. Bounded: the oldest ids are forgotten first.
// Pure and not thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace warden {

class ResponseChain {
 public:
  // REQUIRES: capacity >= 1.
  explicit ResponseChain(size_t capacity) : capacity_(capacity) {}

  // Response `id` was made for the conversation keyed `key` (an id seen again moves to `key`).
  void Remember(std::string_view id, std::string_view key);
  // The key of the conversation response `id` was made for; empty when unknown or forgotten.
  std::string_view KeyOf(std::string_view id) const;
  size_t size() const { return keys_.size(); }
  // Every (response id, conversation key), oldest first: Remember them in this order to rebuild
  // the chain (a gateway's state file).
  std::vector<std::pair<std::string, std::string>> Entries() const;

 private:
  size_t capacity_;
  std::unordered_map<std::string, std::string> keys_;
  std::deque<std::string> order_;  // ids, oldest first
};

}  // namespace warden
