#include "worker/core/step_graphs.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/logging.h"
#include "common/status.h"

namespace kubetrain::worker {

StepGraphs::~StepGraphs() {
  graphs_.clear();
  if (staging_ != nullptr) device_.FreeHostBytes(staging_);
}

void StepGraphs::set_enabled(bool on) {
  enabled_ = on;
  if (!on) Clear();
}

void StepGraphs::Clear() { graphs_.clear(); }

void StepGraphs::Reset() {
  Clear();
  warm_.clear();
}

DeviceGraph* StepGraphs::Find(const StepKey& key) {
  for (Entry& e : graphs_) {
    if (e.key == key) return e.graph.get();
  }
  return nullptr;
}

bool StepGraphs::Warm(const StepKey& key) const {
  return std::find(warm_.begin(), warm_.end(), key) != warm_.end();
}

absl::Status StepGraphs::Stage(absl::Span<const float> images, absl::Span<const int32_t> labels) {
  const size_t image_bytes = images.size() * sizeof(float);
  const size_t label_bytes = labels.size() * sizeof(int32_t);
  if (launched_) {
    RETURN_IF_ERROR(device_.WaitForGraphs(), "waiting for the last step's graph");
    launched_ = false;
  }
  if (image_bytes > image_capacity_ || label_bytes > label_capacity_) {
    // Every graph reads the old block.
    Clear();
    if (staging_ != nullptr) device_.FreeHostBytes(std::exchange(staging_, nullptr));
    image_capacity_ = std::max(image_capacity_, image_bytes);
    label_capacity_ = std::max(label_capacity_, label_bytes);
    staging_ = device_.AllocateHostBytes(image_capacity_ + label_capacity_);
  }
  std::memcpy(staging_, images.data(), image_bytes);
  std::memcpy(static_cast<char*>(staging_) + image_capacity_, labels.data(), label_bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceGraph>> StepGraphs::Capture(Issue issue,
                                                                 absl::Status& issued) {
  RETURN_IF_ERROR(device_.BeginCapture());
  issued = issue(staged_images(), staged_labels());
  return device_.EndCapture();
}

absl::Status StepGraphs::Run(const StepKey& key, uint64_t generation,
                             absl::Span<const float> images, absl::Span<const int32_t> labels,
                             Issue issue) {
  const bool warm_up = active() && !Warm(key);
  if (!active() || warm_up) {
    if (warm_up) warm_.push_back(key);
    ++stats_.eager_steps;
    return issue(images.data(), labels.data());
  }
  if (generation != generation_) {
    Clear();
    generation_ = generation;
  }
  RETURN_IF_ERROR(Stage(images, labels));
  DeviceGraph* graph = Find(key);
  if (graph == nullptr) {
    absl::Status issued;
    absl::StatusOr<std::unique_ptr<DeviceGraph>> captured = Capture(issue, issued);
    // The tail failed (a collective's error): the step fails, nothing of it has run, and graphs
    // stay on.
    RETURN_IF_ERROR(issued);
    if (!captured.ok()) {
      failed_ = true;
      Clear();
      log::Warn("Training step capture failed; steps run uncaptured from now on",
                {{"model", owner_}, {"batch", key.batch}, {"error", captured.status()}});
      ++stats_.eager_steps;
      return issue(images.data(), labels.data());
    }
    if (graphs_.size() == kGraphsKept) graphs_.erase(graphs_.begin());
    graphs_.push_back({key, *std::move(captured)});
    graph = graphs_.back().graph.get();
    ++stats_.captures;
  }
  RETURN_IF_ERROR(device_.LaunchGraph(*graph));
  launched_ = true;
  ++stats_.replays;
  return absl::OkStatus();
}

}  // namespace kubetrain::worker
