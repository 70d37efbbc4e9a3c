// Gives memory the allocator keeps free back to the system.
//
// The gateway runs on tcmalloc, which keeps the pages a burst of large request bodies used and
// returns them only gradually as later allocations happen: a gateway that goes quiet after a burst
// would hold them indefinitely. Without tcmalloc (a sanitizer build) this does nothing.
#pragma once

#include <cstddef>

namespace warden {

// When the allocator holds more than `keep_bytes` free, returns what it can of it to the system
// (tcmalloc's ReleaseFreeMemory). Returns the bytes it released (0: none, or no tcmalloc).
size_t ReleaseFreeHeap(size_t keep_bytes);

}  // namespace warden
