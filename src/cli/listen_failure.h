// Why a server could not listen, said the same way by `serve` and `sim`.
#pragma once

#include <fmt/format.h>

#include <boost/asio/error.hpp>
#include <boost/system/system_error.hpp>
#include <exception>
#include <string>
#include <string_view>

#include "os/port_range.h"

namespace warden {

// "cannot listen on HOST:PORT: <why>", with a hint when the port is in the range the kernel hands
// out for outgoing connections (one of them may hold it).
inline std::string ListenFailure(const std::exception& e, std::string_view host, int port) {
  const auto* system_error = dynamic_cast<const boost::system::system_error*>(&e);
  const bool in_use = system_error && system_error->code() == boost::asio::error::address_in_use;
  return fmt::format("cannot listen on {}:{}: {}{}", host, port,
                     system_error ? system_error->code().message() : e.what(),
                     in_use ? EphemeralPortHint(port) : "");
}

}  // namespace warden
