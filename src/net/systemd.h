// What the gateway does with systemd, through libsystemd (sd-daemon(3)): it takes the listening
// socket a socket unit passes (socket activation), so that the port stays open, and connections
// wait in its queue rather than being refused, while the gateway restarts; and it tells the
// service manager when it is ready, reloading and stopping (a Type=notify unit). Outside systemd
// (no LISTEN_FDS, no NOTIFY_SOCKET) none of it does anything.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace warden {

// The listening TCP sockets passed by socket activation or a hand-over (LISTEN_FDS and LISTEN_PID;
// left in the environment, which other threads may be reading: LISTEN_PID names this process
// only), or none. When one passed is not a listening TCP socket (a UDP or Unix one), returns none,
// closes them all and says why in `error`.
std::vector<int> TakePassedListeners(std::string* error);

// Tells the service manager `state` (sd_notify(3): "READY=1", "STOPPING=1", "STATUS=..."). Does
// nothing when the gateway was not started by one.
void NotifyServiceManager(std::string_view state);

// The unit's WatchdogSec= (WATCHDOG_USEC, for this process): "WATCHDOG=1" must be sent more often
// than that, or systemd takes the gateway for hung and restarts it. Zero when there is none.
std::chrono::microseconds WatchdogPeriod();

}  // namespace warden
