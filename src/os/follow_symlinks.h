// Where a path leads through symlinks: a file the gateway rewrites by renaming a new one over it
// (the state file) is written where its link points, and the link stays.
#pragma once

#include <string>

namespace warden {

// The file `path` names, through any symlinks, relative ones too, even to a file not there yet;
// `path` itself if it is no symlink, or if the links loop or cannot be read.
std::string FollowSymlinks(const std::string& path);

}  // namespace warden
