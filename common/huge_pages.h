// Transparent huge pages for large arrays that a program fills once and keeps (docs/architecture.md
// §8, "Fresh memory, 4 KiB at a time").
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

namespace kubetrain {

// Asks the kernel to back the whole 2 MiB pages inside [data, data + bytes) with transparent huge
// pages when they are first touched (madvise MADV_HUGEPAGE). Where the kernel's THP setting is
// "madvise", as Debian's and many distributions' are, anonymous memory is otherwise faulted in
// 4 KiB at a time, each fault a trap into the kernel. Errors (a kernel without THP, a range that
// holds no whole huge page) are ignored: the memory works as it did.
void AdviseHugePages(void* data, size_t bytes);

// v.resize(n), new elements value-initialised as resize makes them; where that needs new memory it
// is allocated, advised as above and only then written, so that its huge pages back it from the
// first touch. The capacity at least doubles, as push_back's does.
template <typename T>
void ResizeOnHugePages(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) {
    std::vector<T> grown;
    grown.reserve(std::max(n, 2 * v.capacity()));
    AdviseHugePages(grown.data(), grown.capacity() * sizeof(T));
    grown.insert(grown.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
    v.swap(grown);
  }
  v.resize(n);
}

}  // namespace kubetrain
