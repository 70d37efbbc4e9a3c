#include "net/tcp_progress.h"

// Linux's own header: glibc's <netinet/tcp.h> has an older tcp_info without tcpi_bytes_acked.
// Kept to this file, as the two headers cannot be included together.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>

namespace warden {

int64_t BytesAcknowledged(int fd) {
  tcp_info info{};
  socklen_t size = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0 ||
      size < offsetof(tcp_info, tcpi_bytes_acked) + sizeof info.tcpi_bytes_acked)
    return -1;
  return static_cast<int64_t>(info.tcpi_bytes_acked);
}

}  // namespace warden
