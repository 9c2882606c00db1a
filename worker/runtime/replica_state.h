// One all-reduce replica's training state on its device (worker/runtime/exchange_allreduce.h):
// the model's parameters and, per variable, the optimizer's slots beside them. It starts the
// slots, writes and reads both in the checkpoint format the ps modes use (values, slots by name),
// and broadcasts both from rank 0, so every rank of a job starts from one state.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ps/client.h"
#include "worker/collective/communicator.h"
#include "worker/core/device.h"
#include "worker/core/model.h"

namespace kubetrain::worker {

class ReplicaState {
 public:
  ReplicaState(Device& device, Model& model) : device_(device), model_(model) {}

  // `names.size()` slots per variable (the optimizer's SlotNames()), each filled with `initial`.
  void StartSlots(std::vector<std::string> names, float initial);

  // Variable `i`'s slots, in the order of the names given to StartSlots.
  std::vector<Tensor>& slots(size_t i) { return slots_[i]; }

  // Appends each variable's values and slots to `state->variables` and waits for the device.
  absl::Status Export(ps::ModelState* state) const;

  // Uploads each variable's values from `state`, and the slots it holds under this optimizer's
  // names (another optimizer's start afresh). A variable missing or of another size is an error
  // naming `checkpoint_dir`: the checkpoint was written for another model.
  absl::Status Restore(const ps::ModelState& state, const std::string& checkpoint_dir);

  // Every rank takes rank 0's values and slots.
  absl::Status Broadcast(Communicator& comm);

 private:
  Device& device_;
  Model& model_;
  std::vector<std::string> names_;          // the optimizer's slot names
  std::vector<std::vector<Tensor>> slots_;  // per variable, one tensor per name
};

}  // namespace kubetrain::worker
