#include "gateway/relayed_head.h"

#include "util/ascii_case.h"
#include "util/trim.h"

namespace warden {

std::pair<size_t, size_t> FindHeadField(std::string_view head, std::string_view name) {
  for (size_t line = head.find("\r\n"); line != std::string_view::npos;) {
    const size_t start = line + 2;
    const size_t end = head.find("\r\n", start);
    if (end == std::string_view::npos) break;
    if (end - start >= name.size() && IEquals(head.substr(start, name.size()), name))
      return {start, end};
    line = end;
  }
  return {std::string_view::npos, std::string_view::npos};
}

std::string HeadBodyCodings(std::string_view head) {
  constexpr std::string_view kName = "content-encoding:";
  const auto [start, end] = FindHeadField(head, kName);
  if (start == std::string_view::npos) return {};
  const std::string_view value =
      TrimBlanks(head.substr(start + kName.size(), end - start - kName.size()));
  return IEquals(value, "identity") ? std::string() : std::string(value);
}

void SayNotEncoded(std::string* head) {
  const auto [start, end] = FindHeadField(*head, "content-encoding:");
  if (start != std::string::npos) head->erase(start, end + 2 - start);
}

void SayJson(std::string* head) {
  const auto [start, end] = FindHeadField(*head, "content-type:");
  if (start != std::string::npos) head->erase(start, end + 2 - start);
  head->append("Content-Type: application/json\r\n");
}

void SayBadRequest(std::string* head) {
  const size_t end = head->find("\r\n");
  if (end != std::string::npos) head->replace(0, end, "HTTP/1.1 400 Bad Request");
}

}  // namespace warden
