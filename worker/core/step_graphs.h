// One captured graph per training step (docs/decisions/0010-one-graph-per-step.md): the first
// step at a batch size runs as it is issued (the warm-up, which grows buffers and lets the
// backend pick its algorithms), the second is captured through Device::BeginCapture/EndCapture,
// and from then on every step at that size is one Device::LaunchGraph. The host batch is copied
// into a staging block at a stable address (Device::AllocateHostBytes) before the launch; the
// graph's uploads read it from there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/core/device.h"

namespace kubetrain::worker {

// Device work that a caller adds to a training step after backward, captured and replayed with
// it: the all-reduce exchange's reduction of the gradients, the optimizer's update and the
// download of the summed loss (worker/runtime/exchange_allreduce.cc). What it reads from the host
// must be in staging memory (Device::AllocateHostBytes), written before the step.
class StepTail {
 public:
  virtual ~StepTail() = default;
  // Issues the work; an error means it was not all issued, and fails the step.
  virtual absl::Status Issue() = 0;
};

// What a captured step depends on besides the buffers: its batch size, where it leaves its mean
// loss (a device float, or null when the loss stays per row in the model) and the tail it ends
// with (or none).
struct StepKey {
  int batch = 0;
  float* loss = nullptr;
  StepTail* tail = nullptr;
  bool operator==(const StepKey&) const = default;
};

// Owns the graphs of a few step keys and the host staging block; borrows the Device, which must
// outlive it. Not thread-safe: one training thread.
class StepGraphs {
 public:
  // Issues one step's device work with the batch's images and labels at these host addresses:
  // the uploads first, then forward, loss, backward and the key's tail; an error is the tail's.
  // A reference to the caller's callable, valid for the call it is passed to: no allocation on a
  // step.
  using Issue = absl::FunctionRef<absl::Status(const float* images, const int32_t* labels)>;

  // Graphs kept: the full batch, the epoch's last short batch, and room for a change of size.
  static constexpr size_t kGraphsKept = 4;

  // `owner` names the model in the log line of a failed capture.
  StepGraphs(Device& device, std::string owner) : device_(device), owner_(std::move(owner)) {}
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Off by default. On, steps go through graphs where the device supports them.
  void set_enabled(bool on);
  // Whether the next step may be captured or replayed: enabled, supported by the device, and
  // no capture has failed (a failure turns graphs off for good, with one log line).
  bool active() const { return enabled_ && !failed_ && device_.SupportsGraphs(); }

  struct Stats {
    int64_t eager_steps = 0;  // warm-ups, steps while inactive, and a failed capture's step
    int64_t captures = 0;
    int64_t replays = 0;  // launches of a graph, the one right after its capture included
  };
  const Stats& stats() const { return stats_; }
  // How many graphs are kept now.
  size_t size() const { return graphs_.size(); }

  // Drops every graph: the buffers they were captured with may be about to change. Batch sizes
  // already warmed up stay so: their next step is captured at once.
  void Clear();
  // Drops every graph and forgets the warm-ups: the next step of every key runs as issued, the
  // one after is captured. A tail with collectives needs this when its communicator changes:
  // whether a collective is captured must be the same on every rank (NCCL), and a rank that
  // joins has warmed up nothing.
  void Reset();

  // Runs one step of `key`. `generation` counts the reallocations of the buffers the step uses
  // (Model::Reserve): when it differs from the last step's, every graph is dropped first.
  // Errors are those of staging the batch, of issuing the tail (a capture whose tail fails is
  // dropped, and graphs stay on) and of launching; the step's own device errors surface at the
  // caller's next Synchronize.
  absl::Status Run(const StepKey& key, uint64_t generation, absl::Span<const float> images,
                   absl::Span<const int32_t> labels, Issue issue);

 private:
  struct Entry {
    StepKey key;
    std::unique_ptr<DeviceGraph> graph;
  };

  // Copies the batch into the staging block (images, then labels at image_capacity_), growing it
  // (which drops the graphs) as needed, once the graphs launched so far are done reading the
  // previous batch from it.
  absl::Status Stage(absl::Span<const float> images, absl::Span<const int32_t> labels);
  const float* staged_images() const { return static_cast<const float*>(staging_); }
  const int32_t* staged_labels() const {
    return reinterpret_cast<const int32_t*>(static_cast<const char*>(staging_) + image_capacity_);
  }
  // Captures `issue`, which leaves its own error (the tail's) in `issued`.
  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(Issue issue, absl::Status& issued);
  DeviceGraph* Find(const StepKey& key);
  bool Warm(const StepKey& key) const;

  Device& device_;
  std::string owner_;
  bool enabled_ = false;
  bool failed_ = false;
  uint64_t generation_ = 0;
  std::vector<Entry> graphs_;  // oldest first
  std::vector<StepKey> warm_;  // keys whose warm-up step ran
  bool launched_ = false;      // a graph was launched since the last WaitForGraphs
  void* staging_ = nullptr;
  size_t image_capacity_ = 0;  // bytes
  size_t label_capacity_ = 0;
  Stats stats_;
};

}  // namespace kubetrain::worker
