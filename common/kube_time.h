// Timestamps as Kubernetes writes them (RFC 3339 in UTC): metav1.Time with seconds
// ("2026-11-21T10:00:00Z") and MicroTime with microseconds (Lease renewTime). One definition for
// the operator's client and localkube.
#pragma once

#include <string>

#include "absl/time/time.h"

namespace kubetrain {

std::string KubeTime(absl::Time t);
std::string KubeMicroTime(absl::Time t);

}  // namespace kubetrain
