#include "ps/pull_cache.h"

#include "ps/tensor_coding.h"

namespace kubetrain::ps {

grpc::Slice PullCache::Get(const PartitionKey& key, uint64_t revision, WireFloat wire,
                           std::span<const float> values) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Entry>& slot = entries_[{key, wire}];
    if (slot == nullptr) slot = std::make_shared<Entry>();
    entry = slot;  // a Clear meanwhile leaves this caller its own entry
  }
  absl::MutexLock lock(&entry->mu);
  if (entry->revision != revision) {
    entry->slice = grpc::Slice();  // the old revision's memory goes before the new is allocated
    entry->slice = EncodeValues(wire, values);
    entry->revision = revision;
  }
  return entry->slice;  // a reference: gRPC sends it without copying
}

void PullCache::Clear() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
}

size_t PullCache::bytes() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [key, entry] : entries_) {
    absl::MutexLock entry_lock(&entry->mu);
    n += entry->slice.size();
  }
  return n;
}

}  // namespace kubetrain::ps
