// The kernel's range of local ports for outgoing connections, for a clearer "address in use".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace warden {

// Parses the text of /proc/sys/net/ipv4/ip_local_port_range ("32768\t60999\n"). False if it is
// not two ports in order.
bool ParsePortRange(std::string_view text, uint16_t* low, uint16_t* high);

// When `port` lies in this machine's range for outgoing connections, a hint to add to a failed
// listen's message: any connection this machine opens may hold such a port for a while, which
// "Address already in use" does not say. Empty otherwise, or when the range cannot be read.
std::string EphemeralPortHint(uint16_t port);

}  // namespace warden
