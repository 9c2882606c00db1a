#include "operator/controller/conditions.h"

#include <algorithm>

#include "operator/kube/client.h"

namespace kubetrain::controller {
namespace {

api::Condition* Find(api::TrainingJobStatus* status, absl::string_view type) {
  for (api::Condition& c : status->conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool Put(api::TrainingJobStatus* status, absl::string_view type, bool value,
         absl::string_view reason, absl::string_view message, absl::Time now) {
  const std::string want = value ? "True" : "False";
  api::Condition* existing = Find(status, type);
  if (existing != nullptr && existing->status == want && existing->reason == reason &&
      existing->message == message) {
    return false;
  }
  api::Condition c;
  c.type = std::string(type);
  c.status = want;
  c.reason = std::string(reason);
  c.message = std::string(message);
  c.last_update_time = kube::FormatTime(now);
  c.last_transition_time = existing != nullptr && existing->status == want
                               ? existing->last_transition_time
                               : kube::FormatTime(now);
  if (existing != nullptr && !(value && existing->status != want)) {
    *existing = c;  // same truth value: update in place, keep its position
    return true;
  }
  auto& conds = status->conditions;
  conds.erase(std::remove_if(conds.begin(), conds.end(),
                             [&](const api::Condition& x) { return x.type == type; }),
              conds.end());
  conds.push_back(std::move(c));
  return true;
}

}  // namespace

const api::Condition* FindCondition(const api::TrainingJobStatus& status, absl::string_view type) {
  for (const api::Condition& c : status.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool IsTrue(const api::TrainingJobStatus& status, absl::string_view type) {
  const api::Condition* c = FindCondition(status, type);
  return c != nullptr && c->status == "True";
}

bool IsFinished(const api::TrainingJobStatus& status) {
  return IsTrue(status, kSucceeded) || IsTrue(status, kFailed);
}

bool SetCondition(api::TrainingJobStatus* status, absl::string_view type, bool value,
                  absl::string_view reason, absl::string_view message, absl::Time now) {
  if (IsFinished(*status)) return false;
  bool changed = false;
  if (value && (type == kRunning || type == kSucceeded || type == kFailed)) {
    const api::Condition* other = FindCondition(*status, kRestarting);
    if (other != nullptr && other->status == "True") {
      changed |= Put(status, kRestarting, false, other->reason, other->message, now);
    }
  }
  if (value &&
      (type == kRestarting || type == kSucceeded || type == kFailed || type == kSuspended)) {
    const api::Condition* running = FindCondition(*status, kRunning);
    if (running != nullptr && running->status == "True") {
      changed |= Put(status, kRunning, false, running->reason, running->message, now);
    }
  }
  changed |= Put(status, type, value, reason, message, now);
  return changed;
}

bool RemoveCondition(api::TrainingJobStatus* status, absl::string_view type) {
  auto& conds = status->conditions;
  auto gone = std::remove_if(conds.begin(), conds.end(),
                             [&](const api::Condition& c) { return c.type == type; });
  bool removed = gone != conds.end();
  conds.erase(gone, conds.end());
  return removed;
}

}  // namespace kubetrain::controller
