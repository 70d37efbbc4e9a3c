#include "gateway/broken_stream.h"

#include <algorithm>
#include <boost/json.hpp>

#include "gateway/api_errors.h"

namespace warden {

void EventTail::Relayed(std::string_view piece) {
  // (Runs for every event of every stream: a copy, not a shift per byte.)
  if (piece.empty()) return;  // (std::copy of the whole tail onto itself)
  const size_t taken = std::min(piece.size(), last_.size());
  const size_t kept = last_.size() - taken;
  std::copy(last_.end() - kept, last_.end(), last_.begin());
  std::copy(piece.end() - taken, piece.end(), last_.begin() + kept);
  size_ = std::min(size_ + taken, last_.size());
}

bool EventTail::between_events() const {
  if (size_ == 0) return true;
  // A blank line: two line ends in a row, each CRLF, LF or CR (the SSE grammar).
  std::string_view tail(last_.data() + last_.size() - size_, size_);
  if (tail.ends_with("\r\n")) {
    tail.remove_suffix(2);
  } else if (tail.ends_with('\n') || tail.ends_with('\r')) {
    tail.remove_suffix(1);
  } else {
    return false;
  }
  return tail.empty() || tail.ends_with('\n') || tail.ends_with('\r');
}

namespace {

namespace json = boost::json;

std::string ResponsesEvents(std::string_view message, std::string_view response_id) {
  const json::string text(message);
  const json::object error{
      {"type", "server_error"}, {"code", "server_error"}, {"message", text}, {"param", nullptr}};
  const json::object event{{"type", "error"},
                           {"code", "server_error"},
                           {"message", text},
                           {"param", nullptr},
                           {"error", error}};
  const json::object failed{
      {"type", "response.failed"},
      {"response",
       json::object{{"id", json::string(response_id)},
                    {"object", "response"},
                    {"status", "failed"},
                    {"error", json::object{{"code", "server_error"}, {"message", text}}},
                    {"output", json::array()}}}};
  return "event: error\ndata: " + json::serialize(event) +
         "\n\nevent: response.failed\ndata: " + json::serialize(failed) + "\n\n";
}

}  // namespace

std::string BrokenStreamEvent(std::string_view path, std::string_view message,
                              std::string_view response_id) {
  // (No event may follow a [DONE]: a client that does not look for errors would take the answer
  // as whole.)
  if (path == "/v1/messages")
    return "event: error\ndata: " + ErrorBody(ErrorShape::kAnthropic, 502, message) + "\n\n";
  if (path == "/v1/chat/completions" || path == "/v1/completions")
    return "data: " + ErrorBody(ErrorShape::kOpenAi, 502, message) + "\n\n";
  if (path == "/v1/responses") return ResponsesEvents(message, response_id);
  return {};
}

}  // namespace warden
