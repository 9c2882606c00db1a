// The host memory blocks a Device handed out through AllocateHostBytes, to tell whether an address
// range lies inside one (a graph capture uploads only from such staging memory).
#pragma once

#include <cstddef>
#include <map>

namespace kubetrain::worker {

class HostBlocks {
 public:
  void Add(const void* ptr, size_t bytes) { blocks_[static_cast<const char*>(ptr)] = bytes; }
  void Remove(const void* ptr) { blocks_.erase(static_cast<const char*>(ptr)); }
  // Whether [ptr, ptr + bytes) lies inside one block.
  bool Contains(const void* ptr, size_t bytes) const {
    const auto* p = static_cast<const char*>(ptr);
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
  }

 private:
  std::map<const char*, size_t> blocks_;  // by start
};

}  // namespace kubetrain::worker
