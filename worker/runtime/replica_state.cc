// One all-reduce replica's parameters and optimizer slots on its device (replica_state.h).
#include "worker/runtime/replica_state.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace kubetrain::worker {

void ReplicaState::StartSlots(std::vector<std::string> names, float initial) {
  names_ = std::move(names);
  slots_.clear();
  slots_.resize(model_.variables().size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    Variable* v = model_.variables()[i];
    for (size_t s = 0; s < names_.size(); ++s) {
      slots_[i].emplace_back(device_, v->shape());
      device_.Fill(v->size(), initial, slots_[i].back().data());
    }
  }
}

absl::Status ReplicaState::Export(ps::ModelState* state) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Variable* v = model_.variables()[i];
    ps::VariableState& saved = state->variables.emplace_back();
    saved.name = v->name;
    saved.values.resize(v->size());
    device_.Download(v->value, saved.values.data(), v->size());
    for (size_t s = 0; s < names_.size(); ++s) {
      std::vector<float>& slot = saved.slots[names_[s]];
      slot.resize(v->size());
      device_.Download(slots_[i][s], slot.data(), v->size());
    }
  }
  return device_.Synchronize();
}

absl::Status ReplicaState::Restore(const ps::ModelState& state, const std::string& checkpoint_dir) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Variable* v = model_.variables()[i];
    const ps::VariableState* saved = nullptr;
    for (const ps::VariableState& s : state.variables) {
      if (s.name == v->name) saved = &s;
    }
    if (saved == nullptr || static_cast<int64_t>(saved->values.size()) != v->size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint in ", checkpoint_dir, " has no variable ", v->name, " of ",
                       v->size(), " values; it was written for another model"));
    }
    device_.Upload(saved->values.data(), v->value, v->size());
    for (size_t s = 0; s < names_.size(); ++s) {
      auto it = saved->slots.find(names_[s]);
      // Another optimizer's slots (the flags changed between runs) start afresh.
      if (it != saved->slots.end() && static_cast<int64_t>(it->second.size()) == v->size()) {
        device_.Upload(it->second.data(), slots_[i][s], v->size());
      }
    }
  }
  return device_.Synchronize();
}

absl::Status ReplicaState::Broadcast(Communicator& comm) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Variable* v = model_.variables()[i];
    RETURN_IF_ERROR(comm.Broadcast(v->value.data(), v->size(), 0), "broadcasting ", v->name);
    for (Tensor& slot : slots_[i]) {
      RETURN_IF_ERROR(comm.Broadcast(slot.data(), slot.size(), 0), "broadcasting ", v->name);
    }
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::worker
