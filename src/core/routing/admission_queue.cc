#include "core/routing/admission_queue.h"

#include <charconv>

namespace warden {

std::string ParseAdmission(const std::string& text, AdmissionOptions* options) {
  *options = AdmissionOptions{};
  if (text == "off") return {};
  options->enabled = true;
  if (text == "fifo") {
    options->most_recent_first = false;
    return {};
  }
  const std::string prefix = "recent:";
  if (text.starts_with(prefix)) {
    const char* begin = text.data() + prefix.size();
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(begin, end, options->max_bypass);
    if (ec == std::errc() && ptr == end && options->max_bypass >= 0) return {};
  }
  return "admission: expected off, fifo or recent:K (K >= 0), got '" + text + "'";
}

AdmissionQueue::AdmissionQueue(int replicas, AdmissionOptions options)
    : options_(options), replicas_(replicas) {}

void AdmissionQueue::SetCapacity(int replica, int kv_tokens) {
  replicas_[replica].capacity = kv_tokens;
}

bool AdmissionQueue::Fits(const Replica& r, int footprint) const {
  if (r.admitted == 0 || r.capacity <= 0) return true;
  return r.claimed + footprint <= options_.kv_fraction * r.capacity;
}

bool AdmissionQueue::Offer(int replica, const Request& request) {
  Replica& r = replicas_[replica];
  if (!options_.enabled || (r.held.empty() && Fits(r, request.footprint_tokens))) {
    r.claimed += request.footprint_tokens;
    ++r.admitted;
    return true;
  }
  r.held.push_back({request, 0});
  return false;
}

size_t AdmissionQueue::Next(const Replica& r) const {
  if (!options_.most_recent_first) return 0;
  size_t pick = 0;
  for (size_t i = 0; i < r.held.size(); ++i) {
    if (r.held[i].bypassed >= options_.max_bypass) return i;
    if (r.held[i].request.last_active > r.held[pick].request.last_active) pick = i;
  }
  return pick;
}

void AdmissionQueue::Done(int replica, int footprint_tokens, std::vector<uint64_t>* released) {
  Replica& r = replicas_[replica];
  r.claimed -= footprint_tokens;
  --r.admitted;
  while (!r.held.empty()) {
    const size_t pick = Next(r);
    if (!Fits(r, r.held[pick].request.footprint_tokens)) break;
    for (size_t i = 0; i < pick; ++i) ++r.held[i].bypassed;
    r.claimed += r.held[pick].request.footprint_tokens;
    ++r.admitted;
    released->push_back(r.held[pick].request.id);
    r.held.erase(r.held.begin() + static_cast<std::ptrdiff_t>(pick));
  }
}

}  // namespace warden
