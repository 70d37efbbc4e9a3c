// Which conversation a stored response belongs to, for OpenAI's stateful Responses API: a request
// that continues from `previous_response_id` sends only its new input, so neither its opening nor
// any header ties it to the conversation; the response it continues does. vLLM keeps stored
// responses in the memory of the API server that made them, so with one server per GPU the
// continuation must also go there to be found at all. Bounded: the oldest ids are forgotten first.
// Pure and not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace warden {

// A response made for a conversation, and the replica that stored it (-1: not known, e.g. one
// placed by vLLM's own balancer, or told by an older peer or state file).
struct StoredResponse {
  std::string id;
  std::string key;
  int replica = -1;
  bool operator==(const StoredResponse&) const = default;
};

class ResponseChain {
 public:
  // REQUIRES: capacity >= 1.
  explicit ResponseChain(size_t capacity) : capacity_(capacity) {}

  // Response `id` was made for the conversation keyed `key` and stored on `replica` (-1: not
  // known; an id seen again moves to `key`, and to `replica` if known). `at`: when (the gateway's
  // clock), for NewsSince; `news`: made here, so news for the peers (false for what a peer or a
  // state file told).
  void Remember(std::string_view id, std::string_view key, double at = 0, bool news = false,
                int replica = -1);
  // The key of the conversation response `id` was made for; empty when unknown or forgotten.
  std::string_view KeyOf(std::string_view id) const;
  // The replica that stored response `id`; -1 when unknown or forgotten.
  int ReplicaOf(std::string_view id) const;
  // The tokens of the conversation through response `id` (its prompt and its reply, as the
  // engine counted them), for what a request continuing it claims of the replica's cache: it
  // sends only its new input. Known only here (peers and state files do not carry it).
  void SetTokens(std::string_view id, int64_t tokens);
  // 0 when unknown or forgotten.
  int64_t TokensOf(std::string_view id) const;
  size_t size() const { return keys_.size(); }
  // A new bound (an operator's reload): the oldest ids past it are forgotten at once.
  // REQUIRES: capacity >= 1.
  void SetCapacity(size_t capacity);
  // Every response known, oldest first: Remember them in this order to rebuild the chain (a
  // gateway's state file).
  std::vector<StoredResponse> Entries() const;
  // The responses made here after `since`, earliest first: at most `limit`, and then `*through`
  // says when the last was made (ask again from there); else +infinity. For the peer gateways,
  // which must send a continuation where its response is stored too.
  std::vector<StoredResponse> NewsSince(double since, size_t limit, double* through) const;

 private:
  size_t capacity_;
  struct Made {
    std::string key;
    double at = 0;
    bool news = false;
    int replica = -1;
    int64_t tokens = 0;
  };
  std::unordered_map<std::string, Made> keys_;
  std::deque<std::string> order_;  // ids, oldest first (so by `at`, as the clock only advances)
};

}  // namespace warden
