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

// v.reserve(n), with any new memory advised as above before anything is written to it, so that
// huge pages back it from the first touch. Filling it with assign() or insert() then writes each
// element once.
template <typename T>
void ReserveOnHugePages(std::vector<T>& v, size_t n) {
  if (n <= v.capacity()) return;
  std::vector<T> grown;
  grown.reserve(n);
  AdviseHugePages(grown.data(), grown.capacity() * sizeof(T));
  grown.insert(grown.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  v.swap(grown);
}

// v.resize(n), new elements value-initialised as resize makes them, in memory reserved as above.
// The capacity at least doubles, as push_back's does.
template <typename T>
void ResizeOnHugePages(std::vector<T>& v, size_t n) {
  if (n > v.capacity()) ReserveOnHugePages(v, std::max(n, 2 * v.capacity()));
  v.resize(n);
}

}  // namespace kubetrain
