// Checkpoints of a whole model (values, optimizer slots, global step), written by the chief.
//
// Layout of a checkpoint directory:
//   ckpt-<step>.pb     one checkpoint each: an 8-byte magic, the CRC-32 and length of the
//                      payload, then the kubetrain.v1.Checkpoint payload
//   checkpoint.json    the manifest: {"latest": "ckpt-1200.pb", "all": [...oldest first]}
//   checkpoint.lock    held by the run that uses the directory (worker/runtime/checkpoint_dir.h)
// Every file is written to a temporary name, flushed and renamed, and the manifest is replaced
// after the checkpoint it names and before any checkpoint it drops is deleted, so a crash at any
// point leaves the previous checkpoint readable; a write that fails leaves no partial file, and
// those a crash left are removed when the directory is next opened. Files are private (0600) and
// the directory is checked, created and locked as worker/runtime/checkpoint_dir.h says, at the
// first Save or LoadLatest: a directory another user could have planted a checkpoint in is refused.
// A new checkpoint never replaces a file this Checkpointer did not write itself (a second run's
// step 0 gets ckpt-0.1.pb, not the first run's ckpt-0.pb), and only checkpoints the manifest lists
// are rotated away, so earlier work is never lost to a later run.
//
// Restoring checks what it reads: the checksum, the model, the step against the job's length,
// every variable's size, and that no value is NaN or infinite. A manifest that cannot be read,
// or whose latest file is missing, falls back to the newest valid checkpoint in the directory.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/client.h"
#include "ps/partition.h"
#include "worker/runtime/checkpoint_dir.h"

namespace kubetrain::worker {

struct CheckpointOptions {
  std::string dir;
  int keep = 3;     // newest checkpoints kept; older ones are deleted
  std::string job;  // written into the directory's lock file, for a refused run's message
};

// What a restored checkpoint must fit.
struct CheckpointExpectation {
  std::string model;                        // "mlp" or "cnn"
  int64_t max_step = -1;                    // the job's last global step; < 0: not checked
  std::vector<ps::VariableSpec> variables;  // the model's; empty: not checked
};

class Checkpointer {
 public:
  explicit Checkpointer(CheckpointOptions options) : options_(std::move(options)) {}

  // Opens, checks and locks the directory (CheckpointDir::Open), if not done yet; Save and
  // LoadLatest call it. Thread-safe.
  absl::Status Open() const;

  // Writes `state` as the newest checkpoint; returns its path. A state holding NaN or infinite
  // values is refused (FAILED_PRECONDITION): it would push good checkpoints out of rotation. A
  // failed write (UNAVAILABLE) names the file and the cause (a full disk, the file-size limit)
  // and leaves the directory as it was.
  absl::StatusOr<std::string> Save(const ps::ModelState& state, const std::string& model);
  // The newest checkpoint, or nullopt when the directory has none; `path`, if given, is set to
  // its file. A checkpoint of another model, or one that does not fit `expected`, is
  // FAILED_PRECONDITION naming the file; a corrupt one DATA_LOSS naming the file.
  absl::StatusOr<std::optional<ps::ModelState>> LoadLatest(const CheckpointExpectation& expected,
                                                           std::string* path = nullptr) const;
  // LoadLatest with only the model checked.
  absl::StatusOr<std::optional<ps::ModelState>> LoadLatest(const std::string& model) const {
    return LoadLatest(CheckpointExpectation{model});
  }

 private:
  // The directory, once opened.
  absl::StatusOr<const CheckpointDir*> Dir() const;

  CheckpointOptions options_;
  mutable std::mutex dir_mu_;
  mutable std::shared_ptr<CheckpointDir> dir_;  // guarded by dir_mu_; set once
  std::set<std::string> written_;  // file names this Checkpointer wrote (it may replace those)
};

}  // namespace kubetrain::worker
