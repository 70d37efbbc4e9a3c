#include "net/systemd.h"

#include <fmt/format.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

namespace warden {

std::vector<int> TakePassedListeners(std::string* error) {
  const int count = sd_listen_fds(/*unset_environment=*/0);
  if (count < 0) *error = fmt::format("the passed sockets (LISTEN_FDS): {}", strerror(-count));
  std::vector<int> fds;
  for (int i = 0; i < count; ++i) {
    const int fd = SD_LISTEN_FDS_START + i;
    if (sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, /*listening=*/1, /*port=*/0) <= 0) {
      *error = fmt::format(
          "socket {} of the {} passed (LISTEN_FDS) is not a listening TCP socket (ListenStream=)",
          i + 1, count);
    }
    fds.push_back(fd);
  }
  if (error->empty()) return fds;
  for (int fd : fds) ::close(fd);
  return {};
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
