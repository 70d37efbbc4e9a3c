#include "os/read_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace warden {

bool ReadRegularFile(const std::string& path, uintmax_t max_bytes, std::string* text,
                     std::string* error, bool pipes) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    *error = "no such file";
    return false;
  }
  if (ec) {
    *error = ec.message();
    return false;
  }
  if (status.type() == std::filesystem::file_type::directory) {
    *error = "it is a directory";
    return false;
  }
  const bool pipe = pipes && status.type() == std::filesystem::file_type::fifo;
  if (status.type() != std::filesystem::file_type::regular && !pipe) {
    *error = "not a regular file";
    return false;
  }
  if (!pipe) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) {
      *error = ec.message();
      return false;
    }
    if (size > max_bytes) {
      *error = fmt::format("{} bytes, more than the {} such a file may have", size, max_bytes);
      return false;
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = std::strerror(errno);
    return false;
  }
  // A pipe (a shell's <(...)) says no size: read in pieces, up to the bound.
  text->clear();
  char piece[65536];
  while (in.read(piece, sizeof piece) || in.gcount() > 0) {
    text->append(piece, static_cast<size_t>(in.gcount()));
    if (text->size() > max_bytes) {
      *error = fmt::format("more than the {} bytes such a file may have", max_bytes);
      return false;
    }
  }
  if (in.bad()) {
    *error = std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace warden
