#include "util/read_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace warden {

bool ReadRegularFile(const std::string& path, uintmax_t max_bytes, std::string* text,
                     std::string* error) {
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
  if (status.type() != std::filesystem::file_type::regular) {
    *error = "not a regular file";
    return false;
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    *error = ec.message();
    return false;
  }
  if (size > max_bytes) {
    *error = fmt::format("{} bytes, more than the {} such a file may have", size, max_bytes);
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = std::strerror(errno);
    return false;
  }
  text->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) {
    *error = std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace warden
