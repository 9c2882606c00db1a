#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace kubetrain {

void AdviseHugePages(void* data, size_t bytes) {
#ifdef MADV_HUGEPAGE
  // The PMD size of x86-64 and of arm64 with 4 KiB pages; elsewhere the call is still harmless.
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (begin + bytes) & ~(kHugePage - 1);
  if (data == nullptr || end <= first) return;
  madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

}  // namespace kubetrain
