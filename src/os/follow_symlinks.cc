#include "os/follow_symlinks.h"

#include <filesystem>
#include <system_error>

namespace warden {

std::string FollowSymlinks(const std::string& path) {
  constexpr int kMaxLinks = 40;  // as the kernel's ELOOP
  std::filesystem::path p = path;
  for (int hop = 0; hop < kMaxLinks; ++hop) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec))) return p.string();
    const std::filesystem::path target = std::filesystem::read_symlink(p, ec);
    if (ec) return path;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return path;
}

}  // namespace warden
