#include "gateway/client_table.h"

#include <algorithm>

namespace warden {
namespace {

std::vector<std::string> KeysOf(const std::vector<ClientKey>& keys) {
  std::vector<std::string> texts;
  for (const ClientKey& k : keys) texts.push_back(k.key);
  return texts;
}

}  // namespace

ClientTable::ClientTable(const std::vector<ClientKey>& keys, const ClientTable* previous,
                         double now_s)
    : keys_(KeysOf(keys)) {
  for (size_t i = 0; i < keys.size(); ++i) {
    Client client{.name = ClientKeyName(keys, i),
                  .named = !keys[i].name.empty(),
                  .max_in_flight = keys[i].max_in_flight,
                  .tokens_per_minute = keys[i].tokens_per_minute};
    if (previous) client.counts = previous->CountsFor(client, keys[i].key);
    if (!client.counts) client.counts = std::make_shared<Counts>();
    client.counts->budget.SetRate(client.tokens_per_minute, now_s);
    clients_.push_back(std::move(client));
  }
}

const ClientTable::Client* ClientTable::Find(const HttpRequest& request) const {
  int i = keys_.FindBearer(request[http::field::authorization]);
  if (i < 0) {
    const auto x_api_key = request.find("x-api-key");
    if (x_api_key != request.end()) i = keys_.Find(x_api_key->value());
  }
  return i < 0 ? nullptr : &clients_[i];
}

std::shared_ptr<ClientTable::Counts> ClientTable::CountsFor(const Client& client,
                                                            std::string_view key) const {
  if (client.named) {
    for (const Client& old : clients_) {
      if (old.named && old.name == client.name) return old.counts;
    }
    return nullptr;
  }
  const int i = keys_.Find(key);
  return i >= 0 && !clients_[i].named ? clients_[i].counts : nullptr;
}

void ClientSlot::Release() {
  if (released_ || !counts_) return;
  released_ = true;
  counts_->in_flight.fetch_sub(1, std::memory_order_relaxed);
}

void ClientSlot::Hold(double tokens, double now_s) {
  if (!counts_ || tokens <= 0) return;
  counts_->budget.Charge(tokens, now_s);
  held_ += tokens;
  held_at_ = now_s;
}

void ClientSlot::Settle(double tokens, double now_s) {
  if (settled_ || !counts_) return;
  settled_ = true;
  counts_->budget.Settle(held_, tokens, now_s);
}

bool ClientTable::TakeSlot(const Client& client) {
  Counts& counts = *client.counts;
  if (counts.in_flight.fetch_add(1, std::memory_order_relaxed) < client.max_in_flight ||
      client.max_in_flight == 0)
    return true;
  counts.in_flight.fetch_sub(1, std::memory_order_relaxed);
  counts.limited.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool ClientTable::WithinBudget(const Client& client, double now_s, double* retry_after_s) {
  if (client.tokens_per_minute == 0 || client.counts->budget.Admits(now_s, retry_after_s))
    return true;
  client.counts->budget_limited.fetch_add(1, std::memory_order_relaxed);
  return false;
}

double ClientTable::PromptHold(const Counts& counts, double prompt_guess) {
  const double cached = static_cast<double>(counts.cached_tokens.load(std::memory_order_relaxed));
  const double computed =
      static_cast<double>(counts.computed_tokens.load(std::memory_order_relaxed));
  const double share = cached + computed > 0 ? computed / (cached + computed) : 1.0;
  return prompt_guess * std::max(share, 0.05);
}

int ClientTable::EngineWork(int prompt_tokens, int cached_tokens, int output_tokens) {
  const int prompt = std::max(prompt_tokens, 0);
  return prompt - std::clamp(cached_tokens, 0, prompt) + std::max(output_tokens, 0);
}

}  // namespace warden
