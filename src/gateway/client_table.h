// The clients the gateway knows by their API keys (its `api_keys`): which client a request's key
// names, each client's limit on requests in flight, and what its requests asked of the replicas.
// A table does not change once built. New keys (SIGHUP) make a new table, in which a named client
// whose name stays keeps its counters and its requests in flight (its key may change), and a key
// without a name that stays keeps its own (its place, so its key-N name, may change).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "gateway/token_budget.h"
#include "net/api_keys.h"
#include "net/http_server.h"

namespace warden {

class ClientTable {
 public:
  // Since start, whatever tables the client was in.
  struct Counts {
    std::atomic<int64_t> requests{0}, cached_tokens{0}, computed_tokens{0}, output_tokens{0};
    std::atomic<int> in_flight{0};           // forwarded and not ended
    std::atomic<int64_t> limited{0};         // answered 429: max_in_flight reached
    TokenBudget budget;                      // tokens_per_minute's bucket
    std::atomic<int64_t> budget_limited{0};  // answered 429: the budget used up
  };
  struct Client {
    std::string name;           // as configured, or key-N for the Nth key without one
    bool named = false;         // the name is configured
    int max_in_flight = 0;      // 0: no limit
    int tokens_per_minute = 0;  // 0: no budget
    std::shared_ptr<Counts> counts = {};
  };

  ClientTable() = default;
  // `previous`: the table this one replaces (may be null); `now_s`: the time on the clock the
  // budgets are kept by (TokenBudget).
  ClientTable(const std::vector<ClientKey>& keys, const ClientTable* previous, double now_s = 0);

  // No keys: clients need none.
  bool empty() const { return keys_.empty(); }
  // The client whose key the request carries (Authorization: Bearer <key>, or x-api-key), or null.
  const Client* Find(const HttpRequest& request) const;
  const std::vector<Client>& clients() const { return clients_; }

  // Takes one of the client's max_in_flight (a ClientSlot gives it back); false, and counted as
  // limited, when all are taken.
  static bool TakeSlot(const Client& client);
  // Whether the client's tokens_per_minute leave room for a generation request at `now_s`;
  // false, counted as budget_limited, with the seconds to wait in `retry_after_s`, when not.
  static bool WithinBudget(const Client& client, double now_s, double* retry_after_s);
  // A request's engine work, as its budget counts it: prompt tokens not read from the cache (all
  // of them when the cached share is unknown: < 0) and output tokens; unknown counts (< 0) none.
  static int EngineWork(int prompt_tokens, int cached_tokens, int output_tokens);
  // What a request whose prompt is guessed at `prompt_guess` tokens holds of its client's budget
  // while it runs: the share of it the client's answers so far had computed (not read from the
  // cache), at least 5 %; all of it before any answer. A Claude Code turn, mostly history the
  // cache holds, holds about what it will cost rather than its whole prompt.
  static double PromptHold(const Counts& counts, double prompt_guess);

 private:
  // The counters of `client` (whose key is `key`) in this table, if it is here (else null).
  std::shared_ptr<Counts> CountsFor(const Client& client, std::string_view key) const;

  ApiKeys keys_;
  std::vector<Client> clients_;  // in the keys' order
};

// One request's place among its client's max_in_flight (taken by ClientTable::TakeSlot), given
// back once: before the answer's last bytes go out (a replica's answer when it is recorded, the
// gateway's own error before it is sent), so that a client holding its whole answer can send the
// next one; else when the request ends. And what it holds of its client's tokens_per_minute: its
// prompt's size (Hold) until its cost is known (Settle); if it never is, kept when the request
// reached a replica (Ran: the client left before its answer, say), else given back. Null counts:
// no client key.
class ClientSlot {
 public:
  explicit ClientSlot(ClientTable::Counts* counts) : counts_(counts) {}
  ClientSlot(const ClientSlot&) = delete;
  ClientSlot& operator=(const ClientSlot&) = delete;
  ~ClientSlot() {
    Release();
    Settle(ran_ ? held_ : 0, held_at_);
  }

  ClientTable::Counts* counts() const { return counts_; }
  void Release();
  // Takes `tokens` from the client's budget while the request runs.
  void Hold(double tokens, double now_s);
  // The request cost `tokens` of engine work: taken in place of what it held. Once.
  void Settle(double tokens, double now_s);
  // The request went to a replica, which may have run it.
  void Ran() { ran_ = true; }

 private:
  ClientTable::Counts* counts_;
  bool released_ = false;
  double held_ = 0;
  double held_at_ = 0;
  bool settled_ = false;
  bool ran_ = false;
};

}  // namespace warden
