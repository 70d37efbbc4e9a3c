// Edits to the head of a response the gateway relays, as the replica's parser wrote it (status
// line, then one "name: value\r\n" line per field, no blank line yet): the gateway says a
// replica's error again in the client's API's words, and the head must then say what the new
// body is.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace warden {

// The first line of field `name` (lower case, with its colon: "content-type:") in `head`: its
// start and the end of its value, before the line's CRLF; npos for both if there is none.
std::pair<size_t, size_t> FindHeadField(std::string_view head, std::string_view name);

// The codings `head` says its body has ("gzip": the client's Accept-Encoding went to the replica,
// and a proxy in front of it compresses); empty for none, or identity alone.
std::string HeadBodyCodings(std::string_view head);

// Drops `head`'s Content-Encoding field: its body goes out decoded.
void SayNotEncoded(std::string* head);

// Replaces `head`'s Content-Type field, if any, by application/json's.
void SayJson(std::string* head);

// Replaces `head`'s status line by "HTTP/1.1 400 Bad Request".
void SayBadRequest(std::string* head);

}  // namespace warden
