// A completion condition for asio::async_read and asio::async_write that lets every system call
// move as much as the buffers hold. Asio's default, transfer_all, caps each call at 64 KiB, so a
// Claude Code turn (~88 KB) took two recv and two sendmsg calls where one each is enough.
#pragma once

#include <boost/system/error_code.hpp>
#include <cstddef>
#include <limits>

namespace warden {

struct TransferAtOnce {
  size_t operator()(const boost::system::error_code& ec, size_t /*transferred*/) const {
    return ec ? 0 : std::numeric_limits<size_t>::max();
  }
};

}  // namespace warden
