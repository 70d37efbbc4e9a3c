#include "os/file_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>

namespace warden {

FileLimit RaiseOpenFileLimit(uint64_t ceiling) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return {};
  FileLimit result{.before = limit.rlim_cur, .now = limit.rlim_cur};
  // RLIM_INFINITY is the largest value: the ceiling keeps it to what the kernel takes (nr_open).
  rlim_t target = std::min<rlim_t>(limit.rlim_max, ceiling);
  if (limit.rlim_max == RLIM_INFINITY) {  // the kernel's own cap then (fs.nr_open)
    std::ifstream nr_open("/proc/sys/fs/nr_open");
    uint64_t cap = 0;
    if (nr_open >> cap && cap > 0) target = std::min<rlim_t>(target, cap);
  }
  if (target <= limit.rlim_cur) return result;
  limit.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &limit) == 0) result.now = target;
  return result;
}

}  // namespace warden
