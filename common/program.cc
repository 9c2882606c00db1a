#include "common/program.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace kubetrain {

void SetUpProgram() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

bool SetUpLargeMessageAllocator() {
#ifdef __GLIBC__
  if (const char* tunables = std::getenv("GLIBC_TUNABLES");
      tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    return false;
  }
  for (const char* name : {"MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                           "MALLOC_TOP_PAD_"}) {
    if (std::getenv(name) != nullptr) return false;
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Each call answers 1 where glibc took the setting, 0 where not (a sanitizer's allocator).
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
         mallopt(M_ARENA_MAX, cores) == 1;
#else
  return false;
#endif
}

}  // namespace kubetrain
