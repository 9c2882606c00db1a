// The ServiceAccount admission plugin for pods, as kube-apiserver runs it on a pod create:
// defaulting of spec.serviceAccountName, the refusal of a pod naming a missing ServiceAccount, and
// the projected kube-api-access-xxxxx token volume with its mounts. Runs before validation and Pod
// Security (kinds.cc).
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// Defaults spec.serviceAccountName to `default`, refuses a pod whose ServiceAccount does not exist
// (403), and unless automountServiceAccountToken is false (on the pod, else on the ServiceAccount)
// adds the projected kube-api-access-<5 random> volume and mounts it read-only at
// kServiceAccountMountPath in every container and init container not already mounting that path.
// Mirror pods are left alone.
absl::Status AdmitPodServiceAccount(const Store& store, nlohmann::json* pod);

}  // namespace kubetrain::localkube
