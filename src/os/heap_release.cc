#include "os/heap_release.h"

#include <dlfcn.h>

namespace warden {
namespace {

// tcmalloc's C interface (gperftools/malloc_extension_c.h), looked up at run time so that builds
// with another allocator still link.
using GetNumericProperty = int (*)(const char*, size_t*);
using ReleaseFreeMemory = void (*)();

struct Tcmalloc {
  GetNumericProperty get = reinterpret_cast<GetNumericProperty>(
      dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty"));
  ReleaseFreeMemory release =
      reinterpret_cast<ReleaseFreeMemory>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
};

// Free bytes held in tcmalloc's page heap (not yet given back to the system).
size_t FreeBytes(const Tcmalloc& t) {
  size_t bytes = 0;
  return t.get("tcmalloc.pageheap_free_bytes", &bytes) ? bytes : 0;
}

}  // namespace

size_t ReleaseFreeHeap(size_t keep_bytes) {
  static const Tcmalloc tcmalloc;
  if (!tcmalloc.get || !tcmalloc.release) return 0;
  const size_t before = FreeBytes(tcmalloc);
  if (before <= keep_bytes) return 0;
  tcmalloc.release();
  const size_t after = FreeBytes(tcmalloc);
  return before > after ? before - after : 0;
}

}  // namespace warden
