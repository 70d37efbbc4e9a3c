// Text from a request, made safe to write in a log line.
//
// A request's target, or a value taken from its fields, can carry bytes that a terminal acts on
// (an escape sequence clears the screen, a carriage return lets a forged line cover the real one)
// or that make a log file binary to grep (a NUL). nginx writes such bytes as \xHH in its access
// log; so does this.
#pragma once

#include <string>
#include <string_view>

namespace warden {

// `text` itself when every byte is printable ASCII (space included); otherwise a copy in `scratch`
// with each other byte (control characters, DEL, and bytes 0x80 and up) written as \xHH.
std::string_view LogSafe(std::string_view text, std::string& scratch);

}  // namespace warden
