// Admission at the gateway: a request waits at the gateway, not in the engine, while the KV cache
// of its replica is already committed to the requests in flight there; held requests are let in
// as room frees. Why: vLLM queues first-come first-served and evicts the least recently used free
// blocks, so in overload the request admitted next is the one whose history has been free the
// longest, and it is nearly always evicted: every turn is recomputed. Letting in first the
// conversation that was active on the replica most recently keeps its history a hit (more output
// per GPU second); a bound on how often any request may be passed over bounds the price in the
// tail. Pure and not thread-safe; time is passed in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace warden {

struct AdmissionOptions {
  bool enabled = false;
  // Held requests leave most recently active conversation first (else in arrival order).
  bool most_recent_first = true;
  // How many later requests may be let in before a held one (most_recent_first only).
  int max_bypass = 4;
  // Share of a replica's KV cache the requests in flight there may claim.
  double kv_fraction = 1.0;
};

// Parses "off", "fifo" or "recent:K" (K = max_bypass). Returns an error message, or empty.
std::string ParseAdmission(const std::string& text, AdmissionOptions* options);

class AdmissionQueue {
 public:
  struct Request {
    uint64_t id = 0;
    // KV tokens the request will hold at most (prompt + max output), less the prefix every
    // request shares (it is held once, whoever holds it).
    int footprint_tokens = 0;
    // When this conversation's previous request on this replica ended; < 0: none.
    double last_active = -1;
  };

  // REQUIRES: replicas >= 1.
  AdmissionQueue(int replicas, AdmissionOptions options);

  // The KV tokens of `replica` that requests can claim (its cache less the shared prefix).
  void SetCapacity(int replica, int kv_tokens);

  // Admits the request on `replica` now (true) or holds it (false). A replica with nothing in
  // flight admits any request, however large.
  bool Offer(int replica, const Request& request);

  // A request admitted on `replica` ended: its claim is freed and the requests admitted as a
  // result are appended to `released` (ids, in admission order).
  void Done(int replica, int footprint_tokens, std::vector<uint64_t>* released);

  int held(int replica) const { return static_cast<int>(replicas_[replica].held.size()); }
  int admitted(int replica) const { return replicas_[replica].admitted; }

 private:
  struct Held {
    Request request;
    int bypassed = 0;
  };
  struct Replica {
    int capacity = 0;  // 0: unknown (no limit)
    int claimed = 0;
    int admitted = 0;
    std::vector<Held> held;  // arrival order
  };

  bool Fits(const Replica& r, int footprint) const;
  size_t Next(const Replica& r) const;

  AdmissionOptions options_;
  std::vector<Replica> replicas_;
};

}  // namespace warden
