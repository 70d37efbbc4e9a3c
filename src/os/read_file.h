// Reading a whole file the gateway is pointed at (its config, a key file): only a regular file or a
// pipe (a shell's <(...), which keeps secrets off the disk), and only up to a bound, so that a path
// to /dev/zero or a huge file is an error at once instead of a process that grows until it is
// killed. (A named pipe no one writes to is waited on, as any reader of it waits.)
#pragma once

#include <cstdint>
#include <string>

namespace warden {

// Reads the regular file (or pipe) `path` (through symlinks) into `*text`. False, with `*error`
// saying why (no such file, not a regular file, over `max_bytes`, unreadable), otherwise.
// `pipes`: whether a pipe is read (not for a file the gateway writes back, the state file).
bool ReadRegularFile(const std::string& path, uintmax_t max_bytes, std::string* text,
                     std::string* error, bool pipes = false);

}  // namespace warden
