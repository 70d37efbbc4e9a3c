// After a hand-over (SIGUSR2) the old gateway drains its requests, for up to
// hand_over_drain_timeout_s (streams of minutes), while the new one routes. The new one counts the
// old one's requests in flight per replica as a peer gateway's (ReplicaLoad::peer_in_flight), so
// that its overflow limit and its placement see them: without them it took a replica busy with
// the old gateway's streams for idle, packing it past the limit, and disagreed with its peers
// about where a turn goes (found by review).
//
// The old gateway writes a line whenever its counts change to a pipe the hand-over gave the new
// one (cli/hand_over.h); the pipe's end (the old gateway gone) means none. Replicas are named as
// the state file names them (ReplicaId), so the new gateway's config may order them otherwise.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

class ModelState;

// The longest line read; a longer one ends the reading (the counts are then forgotten).
inline constexpr size_t kMaxPredecessorLine = 1 << 20;

// `models`' requests in flight per replica, as one line ending in '\n':
// {"models":[{"name":...,"replicas":[ReplicaId,...],"in_flight":[n,...]}, ...]}.
std::string InFlightLine(const std::vector<ModelState*>& models);

// The counts a line gives each of `models` (in that order; per replica in the model's order;
// 0 for a replica or model the line does not name); nullopt if the line is malformed.
std::optional<std::vector<std::vector<int>>> ReadInFlightLine(
    std::string_view line, const std::vector<ModelState*>& models);

}  // namespace warden
