// How far the peer of a TCP connection has taken what was sent: a writer blocked on a full send
// buffer can tell a peer that reads slowly from one that has stopped reading.
#pragma once

#include <cstdint>

namespace warden {

// The bytes the peer of TCP socket `fd` has acknowledged so far (Linux's tcpi_bytes_acked), or -1
// if the kernel does not say.
int64_t BytesAcknowledged(int fd);

}  // namespace warden
