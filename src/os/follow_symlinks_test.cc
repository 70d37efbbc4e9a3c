#include "os/follow_symlinks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace warden {
namespace {

TEST(FollowSymlinks, LeadsThroughChainsAndRelativeLinksToFilesNotThereYet) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("warden-follow-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "disk");
  std::filesystem::create_symlink("disk/real.json", dir / "hop.json");  // not there yet
  std::filesystem::create_symlink(dir / "hop.json", dir / "state.json");
  EXPECT_EQ(FollowSymlinks((dir / "state.json").string()), (dir / "disk" / "real.json").string());
  EXPECT_EQ(FollowSymlinks((dir / "disk").string()), (dir / "disk").string());  // no link
  EXPECT_EQ(FollowSymlinks((dir / "none").string()), (dir / "none").string());
  // Links in a loop: the name itself.
  std::filesystem::create_symlink(dir / "b", dir / "a");
  std::filesystem::create_symlink(dir / "a", dir / "b");
  EXPECT_EQ(FollowSymlinks((dir / "a").string()), (dir / "a").string());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace warden
