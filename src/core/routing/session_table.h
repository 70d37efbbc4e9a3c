// The conversations a model's router knows: each affinity key's home replica, the replica of its
// last turn, and whether it is active.
//
// A conversation idle longer than `idle_timeout_s` stops counting as active on its home (it keeps
// its home, so a returning conversation still goes there). The table is bounded: past
// `max_entries`, the least recently seen conversation is forgotten, idle ones first.
//
// Several gateways in front of the same replicas share their homes: each sends its peers the
// homes it placed or moved (ChangedSince) and learns theirs (Learn). When two gateways disagree,
// a home a turn has finished on beats one placed by a gateway that did not know the conversation
// (it had just started), and otherwise the more recently assigned home wins (ties: the lower
// replica), so they converge.
// Not thread-safe; time is passed in.
#pragma once

#include <cstdint>
#include <limits>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace warden {

class SessionTable {
 public:
  struct Entry {
    int home = -1;
    int last_replica = -1;  // replica of the conversation's latest turn
    double last_seen = 0;
    bool active = false;
    int64_t context_tokens = 0;  // the prompt and reply of its latest turn: its share of a KV cache
    int last_end_replica = -1;   // where its latest finished request ran, and when it ended
    double last_end = -std::numeric_limits<double>::infinity();
    int64_t last_prompt_tokens = 0;  // that request's prompt, as the engine counted it
    double home_since = 0;           // when `home` was assigned (here or by a peer)
    // When this gateway last had news of it for its peers: it routed a turn, learned a new home or
    // context from a peer, or restored it from a state file. Never after last_seen.
    double local_change = -std::numeric_limits<double>::infinity();
    // Which peer's message brought that news (the caller's number for it; kHere: this gateway's
    // own): it is not news for that peer.
    int news_from = -1;
    // Keyed by its opening and seen only as a first turn: its context is not counted in the
    // working set (a one-shot request never continues) until a later turn comes. It counts as an
    // active conversation on its home all the same, for placement.
    bool opened_only = false;
    // Retired: handed over to the key of its later turns (Retire). A request that arrives with
    // this key again is another conversation that began the same way.
    bool handed_over = false;
    // Handed over to the key of one conversation's later turns (ContinuedOpeningKey with this
    // reply hash), and to no other: 0 when to none yet, kHandedToSeveral when several
    // conversations opened alike (or one goes on under this key while another has the later one).
    uint64_t handed_to_reply = 0;
    // Not a conversation of its own: the conversation it stood for goes on under its other key
    // (handed over, or a later key left unused when the client changed the reply: Leave). Not
    // counted among the conversations known until a turn comes under it again.
    bool uncounted = false;
    // A request that opened a conversation under this key has not ended yet (ModelRouter sets and
    // clears it): another request with the key meanwhile is another conversation that began the
    // same way, not a later turn (its client waits for the reply first).
    bool opening_in_flight = false;
    // A turn of it routed here has not ended yet (ModelRouter sets it as it routes one and
    // clears it as one ends, with a response or without): it counts among the conversations going
    // on (RecentContext) however long the turn waits.
    bool turn_in_flight = false;
    // The model its latest turn asked for (RouteRequest::asked_model, 0: unknown) and that turn's
    // body size, against which a side request under its key is told apart.
    uint32_t thread_model = 0;
    uint32_t thread_body_bytes = 0;
  };

  // A home to share with the peer gateways.
  struct SharedHome {
    std::string key;
    int home = -1;
    double home_since = 0;
    int64_t context_tokens = 0;  // of its latest finished turn (0: none yet)
    // When the sending gateway last saw a turn of it (+infinity: now, as an older peer sends).
    double last_seen = std::numeric_limits<double>::infinity();
    // Its latest turn that ended, as the sender knows it (a peer of an earlier version does not
    // say): when (-infinity: not said), where it ran and its prompt as the engine counted it. The
    // later one's context wins, smaller or not (a compacted conversation's shrinks).
    double context_at = -std::numeric_limits<double>::infinity();
    int last_end_replica = -1;
    int64_t last_prompt_tokens = 0;
    // The replica of its latest turn routed (-1: not said), for the stayed-on-replica count.
    int last_replica = -1;
    // Entry::thread_model and thread_body_bytes (0: not said, as a peer of an earlier version).
    uint32_t thread_model = 0;
    uint32_t thread_body_bytes = 0;
  };

  // Entry::handed_to_reply when which conversation a turn under either key is cannot be told.
  static constexpr uint64_t kHandedToSeveral = ~uint64_t{0};
  // Entry::handed_to_reply naming one conversation's later key.
  static bool HandedToOne(uint64_t reply) { return reply != 0 && reply != kHandedToSeveral; }

  // Entry::news_from for news of this gateway's own.
  static constexpr int kHere = -1;

  // More than any model's context: a larger count from a file or a peer is not a context size
  // (and the per-replica sums of 2^30 conversations stay within 64 bits).
  static constexpr int64_t kMaxContextTokens = int64_t{1} << 30;

  // A conversation as a gateway saves it across a restart (gateway/state_file.h).
  struct SavedConversation {
    std::string key;
    int home = -1;
    int last_replica = -1;
    double idle_s = 0;  // how long before the save it was last seen
    int64_t context_tokens = 0;
    bool opened_only = false;
    // Where its latest finished turn ran and that turn's prompt (-1, 0: none), so that the first
    // turn back after a restart counts as returning to it (ModelRouter::Finish).
    int last_end_replica = -1;
    int64_t last_prompt_tokens = 0;
    // Entry::handed_over and Entry::uncounted (a file of an earlier version says neither).
    bool retired = false;
    bool left = false;
    // Entry::thread_model and thread_body_bytes (0: not said).
    uint32_t thread_model = 0;
    uint32_t thread_body_bytes = 0;
    // How long before the save its latest turn ended (-1: none, or not said).
    double end_idle_s = -1;
  };

  // REQUIRES: max_entries >= 1, idle_timeout_s > 0, num_replicas >= 1.
  SessionTable(size_t max_entries, double idle_timeout_s, int num_replicas);
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // The conversation's entry, or nullptr. Does not change its recency.
  Entry* Find(std::string_view key);
  const Entry* Find(std::string_view key) const;

  // Records a turn of the conversation at `now`: creates the entry (with `home`) if new, marks it
  // active and most recently seen. Returns the entry; `created` tells whether it is new.
  Entry* Touch(std::string_view key, int home_if_new, double now, bool* created);
  // The same for a conversation already known; nullptr (and nothing recorded) if it is not.
  Entry* TouchKnown(std::string_view key, double now);

  // The conversation, if known, is handed over (Entry::handed_over) and stops counting as active,
  // as if idle past the timeout (a keyless conversation's first-turn entry, handed over to the key
  // of its later turns); it keeps its home, for a later turn that is known by it after all.
  void Retire(std::string_view key);
  // The conversation, if known, stops counting as active, as if idle past the timeout.
  void Deactivate(std::string_view key);
  // The key, if known, no longer stands for a conversation of its own (Entry::uncounted): the
  // conversation goes on under its other key. Inactive too, until a turn comes under it again.
  void Leave(std::string_view key);

  // Moves the conversation's home at `now` (it must have been found or touched).
  void SetHome(Entry* entry, int replica, double now);

  // A peer gateway routed a turn of the conversation, last at `peer.last_seen`, homed on `home`
  // since `home_since`: the conversation counts as seen then here too (active if within the idle
  // timeout, loading its home with `context_tokens` if > 0; a sighting older than ours changes
  // nothing of ours), and the home is taken if ours is unknown, or only theirs has had a turn
  // finish on it (context > 0), or, when both or neither have, theirs was assigned later. Their
  // context is taken when larger (contexts grow turn by turn). Returns the entry.
  Entry* Learn(const SharedHome& peer, double now);
  // Learns a message from peer `from` (a number >= 0 the caller gives each peer), each home as
  // Learn does, and puts them in recency order with one merge, not one walk each: a backlog after
  // a long split can be as long as the table. Homes out of range and empty keys are skipped;
  // returns how many told the table anything (a home it already had as sent is no news). The
  // table may hold the message's new conversations past max_entries until they are placed.
  size_t Learn(std::span<const SharedHome> homes, double now, int from = kHere);

  // The homed conversations with news for the peers (Entry::local_change) after `since`, most
  // recent first; since -infinity: every active homed conversation, for a peer that restarted. With
  // more than `limit` of them, only the `limit` routed earliest (and any routed at the same moment
  // as the last of those), earliest first, and `*through` says when the last was routed: ask
  // again from there for the rest. Else `*through` is +infinity. News that came from peer `to`
  // is left out: it is for that peer. REQUIRES: limit >= 1.
  std::vector<SharedHome> ChangedSince(double since, size_t limit, double* through,
                                       int to = kHere) const;
  std::vector<SharedHome> ChangedSince(double since) const;
  // Every homed conversation, active and idle: for a peer that starts and asks for them all.
  std::vector<SharedHome> AllHomes() const;

  // Records the conversation's current context size (it must have been found or touched).
  void SetContext(Entry* entry, int64_t tokens);
  // Marks whether the conversation has been seen only as a first turn (Entry::opened_only).
  void SetOpenedOnly(Entry* entry, bool opened_only);

  // Every conversation with a home, most recently seen first (active ones, then idle ones).
  std::vector<SavedConversation> Save(double now) const;
  // Takes back conversations a table saved (a gateway before its restart), as last seen idle_s
  // before `now`: those idle longer than the timeout come back idle, with their homes. Keys
  // already known and homes out of range are skipped; returns how many were restored.
  // REQUIRES: `saved` most recently seen first; nothing here was seen more recently.
  size_t Restore(std::span<const SavedConversation> saved, double now);

  // Marks conversations idle since before now - idle_timeout_s as inactive.
  void ExpireIdle(double now);

  // Active conversations homed on `replica`.
  int active_on(int replica) const { return active_per_replica_[replica]; }
  // The summed context of the active conversations homed on `replica`: the working set its
  // prefix cache would need to keep every one of them.
  int64_t active_context_on(int replica) const { return context_per_replica_[replica]; }
  // The active conversations with a home seen since `since` (a recent window, shorter than the
  // idle timeout: those going on now, not those that may still come back) or with a turn in
  // flight; their context is added to `context_per_replica[home]` as active_context_on counts
  // it. The seed's rule of thumb is about these: conversations that ended within the idle
  // timeout keep no cache busy. O(active conversations).
  // REQUIRES: context_per_replica has a slot per replica.
  size_t RecentContext(double since, std::span<int64_t> context_per_replica) const;
  // Changes whenever a conversation is seen, created, moved or resized (what Save would write,
  // idle times aside).
  uint64_t version() const { return version_; }
  size_t size() const { return index_.size(); }
  // The entries that stand for a conversation of their own: the conversations known, each
  // counted once.
  size_t conversations() const { return index_.size() - uncounted_; }
  size_t active() const { return active_.size(); }
  // Conversations forgotten to keep the table within max_entries, and how many of them were
  // still active (the table is too small for the conversations going on).
  uint64_t evicted() const { return evicted_; }
  uint64_t evicted_active() const { return evicted_active_; }
  double idle_timeout_s() const { return idle_timeout_s_; }
  size_t max_entries() const { return max_entries_; }
  // New bounds (an operator's reload). A smaller table forgets its least recently seen
  // conversations at once; a shorter timeout ends their activity at the next ExpireIdle, and a
  // longer one keeps those still active longer (the idle ones are active again at their next
  // turn). REQUIRES: max_entries >= 1, idle_timeout_s > 0.
  void SetLimits(size_t max_entries, double idle_timeout_s);

 private:
  struct Node {
    std::string key;
    Entry entry;
    bool unplaced = false;  // in a Learn's list of nodes to merge into active_
  };
  using List = std::list<Node>;

  // The conversation's node, moved to the front of the active list; created (active, with no
  // home) if it is new.
  List::iterator Front(std::string_view key, bool* created);
  // A known conversation's node, moved to the front of the active list.
  List::iterator ToFront(List::iterator it);
  void MakeActive(List::iterator it);
  // A turn of the conversation seen here at `now`.
  void MarkSeenHere(Entry* e, double now);
  static SharedHome SharedHomeOf(const Node& n);
  bool InRange(int replica) const {
    return replica >= 0 && replica < static_cast<int>(active_per_replica_.size());
  }
  // The conversation's node, seen at `seen`: created in `unplaced`, active, if new (the table may
  // pass max_entries); made active and moved there if `seen` is later than its own last sighting
  // (`*later`), else left where it is.
  List::iterator SeenAt(std::string_view key, double seen, List* unplaced, bool* created,
                        bool* later);
  // Returns whether the home told this table anything: the conversation, its home, a longer
  // context or a later sighting.
  bool LearnOne(const SharedHome& peer, double now, int from, List* unplaced);
  // Merges the nodes SeenAt set aside into active_, in recency order.
  void Place(List* unplaced);
  // Adds (+1) or removes (-1) an active entry's weight on its home.
  void Count(const Entry& e, int sign);
  void EvictOne();

  size_t max_entries_;
  double idle_timeout_s_;
  List active_;  // most recently seen first
  List idle_;    // most recently idled first
  // XXH3 hashes a key in about half the instructions of std::hash's (several lookups a request).
  struct KeyHash {
    size_t operator()(std::string_view key) const noexcept;
  };
  // Views into the nodes' keys.
  std::unordered_map<std::string_view, List::iterator, KeyHash> index_;
  std::vector<int> active_per_replica_;
  std::vector<int64_t> context_per_replica_;
  uint64_t version_ = 0;
  size_t uncounted_ = 0;  // entries with Entry::uncounted
  uint64_t evicted_ = 0;
  uint64_t evicted_active_ = 0;
};

}  // namespace warden
