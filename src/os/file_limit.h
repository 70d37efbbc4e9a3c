// The process's limit on open file descriptors.
//
// A gateway holds two descriptors per request in progress (the client's connection and the
// replica's), plus its pooled connections. The usual soft limit (1024, systemd's and a login
// shell's default) caps it at a few hundred concurrent streams, while the hard limit the same
// systems set is far higher: servers raise their soft limit to it (as nginx's
// worker_rlimit_nofile and Go's runtime do).
#pragma once

#include <cstdint>

namespace warden {

struct FileLimit {
  uint64_t before = 0;  // the soft limit found
  uint64_t now = 0;     // the soft limit after raising it
};

// Raises the soft limit on open files to the hard limit (at most `ceiling`). A limit that cannot
// be raised stays as it was.
FileLimit RaiseOpenFileLimit(uint64_t ceiling = uint64_t{1} << 20);

}  // namespace warden
