// Admission at the gateway: a request waits at the gateway, not in the engine, while the KV cache
// of its replica is already committed to the requests in flight there; held requests are let in
// as room frees. Why: vLLM queues first-come first-served and evicts the least recently used free
// blocks, so in overload the request admitted next is the one whose history has been free the
// longest, and it is nearly always evicted: every turn is recomputed. Letting in first the
// conversation that was active on the replica most recently keeps its history a hit (more output
// per GPU second); a bound on how often any request may be passed over bounds the price in the
// tail (docs/policies.md has the measurements).
//
// A request claims the KV blocks of its prompt that no request in flight on the replica already
// holds (running requests share their common prefix, as in vLLM), plus room for its reply. How
// many tokens a block holds and how long replies run are learned from the usage the engine
// reports, so a caller that can only cut the prompt's text into chunks (the gateway has no
// tokenizer) still claims in tokens. Pure and not thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

namespace warden {

struct AdmissionOptions {
  bool enabled = false;
  // Held requests leave most recently active conversation first (else in arrival order).
  bool most_recent_first = true;
  // How many later requests may be let in before a held one (most_recent_first only).
  int max_bypass = 4;
  // A conversation's turns run back to back in runs of up to this many: when a turn of the run
  // ends (the last excepted), its claim stays reserved for the conversation's next turn for
  // `reserve_s` seconds, so that its history is not evicted by a held request while the client
  // sends the next turn. 0: no reservations; else at least 2.
  int reserve_turns = 0;
  double reserve_s = 1.0;
};

// Parses "off", "fifo", "recent:K" (K = max_bypass) or "reserve:N" (first come first served,
// N = reserve_turns). Returns an error message, or empty.
std::string ParseAdmission(const std::string& text, AdmissionOptions* options);
// The one spelling of a valid mode ("recent:04" is "recent:4", "reserve:3:1" is "reserve:3"), so
// that a mode written two ways is one value between peers, restarts and the panel; `text` as it
// is when it is not valid.
std::string CanonicalAdmission(const std::string& text);

class AdmissionQueue {
 public:
  struct Request {
    uint64_t id = 0;               // unique among the requests offered and not yet done
    std::vector<uint64_t> blocks;  // chained hashes of the prompt's blocks
    double last_active = -1;       // when the conversation last ended a request here; < 0: never
    uint64_t conversation = 0;     // the conversation's key hash (0: none, nothing reserved)
    // False for a turn that keeps no room when it ends (an overflowed turn: the next one goes
    // home); it still gives up a reservation its conversation holds elsewhere.
    bool reserves = true;
    // When the request came, if before it was offered (< 0: as offered): held, it takes its place
    // and counts its hold (SetMaxHold) from then. A request held on one replica and routed again
    // to another (that one drained, or lost) is not held a whole hold again.
    double arrived = -1;
  };

  // `block_tokens` and `reply_tokens`: the first estimates, until usage is reported.
  // REQUIRES: replicas >= 1, block_tokens > 0, reply_tokens >= 0.
  AdmissionQueue(int replicas, double block_tokens, double reply_tokens, AdmissionOptions options);

  const AdmissionOptions& options() const { return options_; }
  // Another mode from `now` on (an operator's change at run time): held requests are let in as
  // the new mode lets them, all of them when it is off; reservations are given up when it keeps
  // none, and end by now + its reserve_s when that is sooner. What was learned, and the claims of
  // the requests admitted, stay. The ids let in are appended to `released`.
  void SetOptions(const AdmissionOptions& options, double now, std::vector<uint64_t>* released);
  // The KV tokens of `replica` (0: unknown, no limit). When that is more room than before, the
  // held requests that now fit are let in and appended to `released` (which may be null only
  // while nothing is held).
  void SetCapacity(int replica, int64_t kv_tokens, std::vector<uint64_t>* released = nullptr);
  // No request is held longer than `seconds` (infinity, the default: no bound): at Expire past
  // that, it is let in whatever room there is. A client gives up on an answer whose head is late
  // (Claude Code after about 300 s) and sends the request again, to the back of the queue; let
  // in, the request queues at its replica, whose answer's head the client then gets.
  // REQUIRES: seconds > 0.
  void SetMaxHold(double seconds) { max_hold_s_ = seconds; }
  double max_hold_s() const { return max_hold_s_; }

  // Admits the request on `replica` now (true) or holds it (false). A replica with nothing in
  // flight or reserved admits any request, however large. A request whose conversation holds a
  // reservation on `replica` takes it and is admitted at once; a reservation it holds elsewhere
  // is given up; the held requests that can go in what the reservation kept beyond the request's
  // claim are appended to `released` (which may be null only when reservations are off).
  bool Offer(int replica, Request request, double now = 0,
             std::vector<uint64_t>* released = nullptr);

  // The admitted request `id` ended, with the usage the engine reported (< 0: unknown): its claim
  // is freed, or, when the turn `completed` (whole, successful: its client is about to send the
  // next), reserved for the conversation's next turn; the ids of the requests admitted as a
  // result are appended to `released`, in admission order. When the usage makes the learned
  // estimates smaller, every replica's held requests are checked again, not only this one's.
  void Done(uint64_t id, int prompt_tokens, int output_tokens, std::vector<uint64_t>* released,
            double now = 0, bool completed = false);

  // Gives up the reservations that expired by `now` and lets in the requests held for the
  // longest hold (SetMaxHold); the requests let in are appended to `released`. Call at
  // next_expiry().
  void Expire(double now, std::vector<uint64_t>* released);
  // No reservation from now on (the gateway is draining: no next turn will come): the current
  // ones are given up and the requests let in instead are appended to `released`.
  void StopReserving(std::vector<uint64_t>* released);
  // Gives up the reservations on `replica` (it is out of service: lost, or restarted with an
  // empty cache, what they kept room for is gone); the requests let in instead are appended to
  // `released`.
  void GiveUpReservations(int replica, std::vector<uint64_t>* released);
  // When the earliest reservation expires or the longest-held request's hold ends (infinity when
  // there is neither).
  double next_expiry() const;
  int reserved(int replica) const { return replicas_[replica].reserved; }
  // The replica the admitted request `id` runs on, or -1.
  int admitted_on(uint64_t id) const {
    const auto it = admitted_.find(id);
    return it == admitted_.end() ? -1 : it->second.replica;
  }

  // Drops a held request (its client went away); the requests that can go in its place are let in
  // and appended to `released`. Returns false if it was not held.
  bool Cancel(uint64_t id, std::vector<uint64_t>* released);

  int held(int replica) const { return static_cast<int>(replicas_[replica].held.size()); }
  // Requests let in on `replica` for having been held the longest hold (SetMaxHold), since start.
  int64_t held_too_long(int replica) const { return replicas_[replica].held_too_long; }
  int admitted(int replica) const { return replicas_[replica].admitted; }
  // KV tokens the admitted requests on `replica` claim: their distinct blocks, and their replies.
  double claimed_tokens(int replica) const;
  double tokens_per_block() const { return block_tokens_; }
  double reply_tokens() const { return reply_tokens_; }

 private:
  struct Held {
    Request request;
    int bypassed = 0;
    double since = 0;  // when it came (Request::arrived, else when it was offered)
  };
  struct Replica {
    int64_t capacity = 0;
    int admitted = 0;
    int reserved = 0;
    int64_t held_too_long = 0;
    std::vector<Held> held;                           // by `since`: arrival order
    std::unordered_map<uint64_t, int> blocks_in_use;  // by the admitted requests
  };
  struct Admitted {
    int replica;
    std::vector<uint64_t> blocks;
    uint64_t conversation = 0;
    int turns_in_a_row = 1;  // this one included
  };
  struct Reservation {
    Admitted turn;  // the turn that ended; its blocks stay in use
    double expires;
  };

  // Tokens the request would add to the replica's claim: its blocks not in use there, its reply.
  double Claim(const Replica& r, const Request& request) const;
  bool Fits(int replica, double claim) const;
  void Learn(const Admitted& a, int prompt_tokens, int output_tokens);
  size_t Next(const Replica& r) const;
  // Lets in held requests on `replica` while they fit.
  void Release(int replica, std::vector<uint64_t>* released);
  void ReleaseEverywhere(std::vector<uint64_t>* released);
  void Admit(int replica, Request request, int turns_in_a_row = 1);
  void FreeBlocks(Replica& r, const std::vector<uint64_t>& blocks);
  void ExpireReservations(double now, std::vector<uint64_t>* released);
  // Lets in, whatever room there is, the requests held since before `now` - max_hold_s_.
  void LetInOverdue(double now, std::vector<uint64_t>* released);
  // Drops the reservation (its blocks freed); returns its replica.
  int Unreserve(std::unordered_map<uint64_t, Reservation>::iterator it);

  AdmissionOptions options_;
  double max_hold_s_ = std::numeric_limits<double>::infinity();
  double block_tokens_;
  double reply_tokens_;
  std::vector<Replica> replicas_;
  std::unordered_map<uint64_t, Admitted> admitted_;
  std::unordered_map<uint64_t, Reservation> reserved_;  // by conversation
};

}  // namespace warden
