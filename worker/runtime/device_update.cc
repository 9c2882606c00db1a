#include "worker/runtime/device_update.h"

#include <algorithm>
#include <new>

namespace kubetrain::worker {
namespace {

bool SameSlice(const UpdateSlice& a, const UpdateSlice& b) {
  return a.n == b.n && a.grad == b.grad && a.value == b.value && a.slot0 == b.slot0 &&
         a.slot1 == b.slot1;
}

}  // namespace

DeviceUpdate::DeviceUpdate(Device& device)
    : device_(device),
      staged_(new (device.AllocateHostBytes(sizeof(Staged))) Staged),
      rule_(device, {1}) {}

DeviceUpdate::~DeviceUpdate() {
  staged_->~Staged();
  device_.FreeHostBytes(staged_);
}

bool DeviceUpdate::Target(FusedBuckets& fused, ReplicaState& state) {
  // Built beside the current list and swapped in: both keep their capacity from step to step.
  next_.clear();
  for (FusedBucket& b : fused.buckets()) {
    for (const FusedBucket::Member& m : b.members) {
      std::vector<Tensor>& slots = state.slots(m.index);
      next_.push_back({m.variable->size(), b.buffer.data() + m.offset, m.variable->value.data(),
                       slots.size() > 0 ? slots[0].data() : nullptr,
                       slots.size() > 1 ? slots[1].data() : nullptr});
    }
  }
  const bool same = next_.size() == slices_.size() &&
                    std::equal(next_.begin(), next_.end(), slices_.begin(), SameSlice);
  slices_.swap(next_);
  return !same;
}

void DeviceUpdate::Issue() {
  device_.Upload(&staged_->rule, rule_, 1);
  // Every variable in one fused update (one kernel on a GPU, not one per variable).
  device_.ApplyUpdates(rule_.data(), slices_);
}

void DeviceUpdate::IssueLossDownload(const float* loss, int count) {
  device_.QueueDownload(loss, staged_->loss, static_cast<size_t>(count) * sizeof(float));
}

}  // namespace kubetrain::worker
