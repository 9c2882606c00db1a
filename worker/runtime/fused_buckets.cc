#include "worker/runtime/fused_buckets.h"

#include <algorithm>
#include <utility>

namespace kubetrain::worker {
namespace {

std::vector<size_t> FirstVariables(const FusedBuckets& buckets) {
  std::vector<size_t> out;
  for (const FusedBucket& b : buckets.buckets()) out.push_back(b.first_variable);
  return out;
}

}  // namespace

FusedBuckets::FusedBuckets(Device& device, Model& model, int64_t fusion_bytes, bool reverse,
                           int extra) {
  const int64_t limit = std::max<int64_t>(1, fusion_bytes / static_cast<int64_t>(sizeof(float)));
  const int64_t first_full =
      reverse ? std::min(limit, kFirstBufferBytes / static_cast<int64_t>(sizeof(float))) : limit;
  const std::vector<Variable*>& variables = model.variables();
  for (size_t k = 0; k < variables.size(); ++k) {
    const size_t i = reverse ? variables.size() - 1 - k : k;
    Variable* v = variables[i];
    const bool full = !buckets_.empty() && buckets_.back().elements > 0 &&
                      (buckets_.back().elements + v->size() > limit ||
                       (buckets_.size() == 1 && buckets_.back().elements >= first_full));
    if (buckets_.empty() || full) buckets_.emplace_back().first_variable = i;
    FusedBucket& b = buckets_.back();
    b.members.push_back({v, i, b.elements});
    b.elements += v->size();
    b.first_variable = std::min(b.first_variable, i);
  }
  if (buckets_.empty()) buckets_.emplace_back();
  buckets_.back().elements += extra;
  // Backward writes each gradient into its buffer, so nothing is copied before the all-reduce
  // (the variable's own gradient buffer is given back).
  for (FusedBucket& b : buckets_) {
    b.buffer = Tensor(device, {b.elements});
    for (const FusedBucket::Member& m : b.members) {
      m.variable->grad = Tensor::View(b.buffer.data() + m.offset, m.variable->shape());
    }
    spans_.push_back(absl::MakeSpan(b.buffer.data(), static_cast<size_t>(b.elements)));
    bytes_ += b.buffer.bytes();
  }
  FusedBucket& last = buckets_.back();
  extra_ = last.buffer.data() + last.elements - extra;
}

OverlappedReduction::OverlappedReduction(const FusedBuckets& buckets,
                                         std::function<absl::Status(size_t)> reduce)
    : first_variable_(FirstVariables(buckets)),
      reduce_(std::move(reduce)),
      thread_([this] { Run(); }) {}

OverlappedReduction::~OverlappedReduction() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  thread_.join();
}

void OverlappedReduction::Start(size_t bucket) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(bucket);
  ++busy_;
}

void OverlappedReduction::GradientsReady(size_t ready) {
  // The last buffer waits for Finish: it carries the loss, computed after backward.
  while (next_ + 1 < first_variable_.size() && first_variable_[next_] >= ready) {
    Start(next_++);
    ++started_during_backward_;
  }
}

absl::Status OverlappedReduction::Finish() {
  while (next_ < first_variable_.size()) Start(next_++);
  next_ = 0;
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &OverlappedReduction::Idle));
  return std::exchange(status_, absl::OkStatus());
}

void OverlappedReduction::Run() {
  while (true) {
    size_t bucket = 0;
    bool reduce = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &OverlappedReduction::HasWork));
      if (queue_.empty()) return;  // closing, nothing left
      bucket = queue_.front();
      queue_.pop_front();
      reduce = status_.ok();  // after a failure the ring is broken: the rest are not summed
    }
    absl::Status s = reduce ? reduce_(bucket) : absl::OkStatus();
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = std::move(s);
    --busy_;
  }
}

}  // namespace kubetrain::worker
