// Checkpoints of a whole model (values, optimizer slots, global step), written by the chief.
//
// Layout of a checkpoint directory:
//   ckpt-<step>.pb     one kubetrain.v1.Checkpoint each
//   checkpoint.json    the manifest: {"latest": "ckpt-1200.pb", "all": [...oldest first]}
// Every file is written to a temporary name, flushed and renamed, and the manifest is replaced
// last, so a crash at any point leaves the previous checkpoint readable.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "ps/client.h"

namespace kubetrain::worker {

struct CheckpointOptions {
  std::string dir;
  int keep = 3;  // newest checkpoints kept; older ones are deleted
};

class Checkpointer {
 public:
  explicit Checkpointer(CheckpointOptions options) : options_(std::move(options)) {}

  // Writes `state` as the newest checkpoint; returns its path.
  absl::StatusOr<std::string> Save(const ps::ModelState& state, const std::string& model);
  // The newest checkpoint, or nullopt when the directory has none. A checkpoint of another
  // model is FAILED_PRECONDITION naming both.
  absl::StatusOr<std::optional<ps::ModelState>> LoadLatest(const std::string& model) const;

 private:
  CheckpointOptions options_;
};

}  // namespace kubetrain::worker
