// What a client is told when the replica's stream breaks off after part of it was relayed (the
// replica died, or sent nothing for read_timeout_s): an error event in its API's words, then a
// proper end of the body, where the stream stopped between two events.
//
// Measured with the real clients: on a plain cut, Claude Code retries the stream with growing
// pauses (up to ten times, minutes), and the SDKs raise an untyped "terminated"; on an error event
// and a proper end, Claude Code sends the turn again at once (without streaming), and the SDKs
// raise their API error with the message. An event followed by a cut is lost about half the time
// (the client sees the close first).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace warden {

// The last bytes of a relayed body: whether it stops between two server-sent events.
class EventTail {
 public:
  void Relayed(std::string_view piece);
  // True before the first byte, and after an event's blank line.
  bool between_events() const;

 private:
  std::array<char, 4> last_{};  // the last bytes, the latest at the end
  size_t size_ = 0;             // how many of last_ are bytes relayed (at most 4)
};

// The events that say the stream broke off, for a request on `path`: Anthropic's `event: error`
// on /v1/messages; an OpenAI `data: {"error": ...}` on chat and text completions; on the
// Responses API an `error` event (its documented fields, and an `error` object, which the OpenAI
// SDKs raise on) then `response.failed` for response `response_id` (which Codex acts on: it
// sends the request again, and shows the message). Empty on other paths: that stream is cut.
std::string BrokenStreamEvent(std::string_view path, std::string_view message,
                              std::string_view response_id = {});

}  // namespace warden
