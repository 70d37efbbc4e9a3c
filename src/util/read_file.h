// Reading a whole file the gateway is pointed at (its config, a key file): only a regular file,
// and only up to a bound, so that a path to /dev/zero, a FIFO or a huge file is an error at once
// instead of a hang or a process that grows until it is killed.
#pragma once

#include <cstdint>
#include <string>

namespace warden {

// Reads the regular file `path` (through symlinks) into `*text`. False, with `*error` saying why
// (no such file, not a regular file, over `max_bytes`, unreadable), otherwise.
bool ReadRegularFile(const std::string& path, uintmax_t max_bytes, std::string* text,
                     std::string* error);

}  // namespace warden
