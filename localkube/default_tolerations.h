// The DefaultTolerationSeconds admission plugin, as kube-apiserver runs it on a pod create: a pod
// that does not already tolerate the node.kubernetes.io/not-ready or node.kubernetes.io/unreachable
// NoExecute taint gets a toleration of it (operator Exists) for a bounded time, so that its pods
// leave a failed node after that long (taint-based eviction, node_lifecycle.h).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube {

inline constexpr char kTaintNotReady[] = "node.kubernetes.io/not-ready";
inline constexpr char kTaintUnreachable[] = "node.kubernetes.io/unreachable";
inline constexpr char kTaintUnschedulable[] = "node.kubernetes.io/unschedulable";
inline constexpr char kTaintOutOfService[] = "node.kubernetes.io/out-of-service";

// kube-apiserver's --default-not-ready-toleration-seconds and
// --default-unreachable-toleration-seconds (300 each). Set before serving starts (localkube's
// --default-toleration-seconds sets both).
void SetDefaultTolerationSeconds(int64_t not_ready_seconds, int64_t unreachable_seconds);

// Adds the missing default tolerations to `pod` (a pod create). A toleration with an empty key
// (operator Exists) or an empty effect counts as tolerating, as the plugin counts it.
void AdmitPodDefaultTolerations(nlohmann::json* pod);

}  // namespace kubetrain::localkube
