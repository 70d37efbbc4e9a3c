#include "net/systemd.h"

#include <fmt/format.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

namespace warden {

int TakePassedListener(std::string* error) {
  const int count = sd_listen_fds(/*unset_environment=*/0);
  if (count <= 0) {
    if (count < 0) *error = fmt::format("the passed sockets (LISTEN_FDS): {}", strerror(-count));
    return -1;
  }
  const int fd = SD_LISTEN_FDS_START;
  if (count > 1) {
    *error = fmt::format(
        "{} sockets passed (LISTEN_FDS): the gateway listens on one; give its socket unit one "
        "ListenStream=",
        count);
  } else if (sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, /*listening=*/1, /*port=*/0) <= 0) {
    *error = "the socket passed (LISTEN_FDS) is not a listening TCP socket (ListenStream=)";
  }
  if (error->empty()) return fd;
  for (int i = 0; i < count; ++i) ::close(SD_LISTEN_FDS_START + i);
  return -1;
}

void NotifyServiceManager(std::string_view state) {
  sd_notify(/*unset_environment=*/0, std::string(state).c_str());
}

std::chrono::microseconds WatchdogPeriod() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0) return {};
  return std::chrono::microseconds(usec);
}

}  // namespace warden
