// Pod admission for core/v1 Pods: field validation (422 Invalid, see pod_validation.h), then Pod
// Security Admission per namespace labels as kube-apiserver's built-in PodSecurity plugin
// (k8s.io/pod-security-admission) enforces it.
//
// `pod-security.kubernetes.io/enforce` (privileged | baseline | restricted; absent: privileged;
// any other value: restricted, as the plugin fails closed) refuses a violating pod with 403
// Forbidden: `pods "x" is forbidden: violates PodSecurity "restricted:latest": <check> (<detail>),
// ...`. `pod-security.kubernetes.io/warn` (defaulting to the enforce level) adds a
// `would violate PodSecurity ...` warning to an admitted pod's response. The checks are those of
// Kubernetes v1.33 (the version localkube reports) whatever `enforce-version`/`warn-version` say;
// a valid version label is only echoed in the messages. Pods are checked on create, and on update
// only when the update is significant to the policy (container images or container counts
// change), as the plugin does; status updates are never checked. The `audit` labels, exemptions
// and the warnings for pod controllers and namespace label changes are not implemented.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// One failed check: its ForbiddenReason and ForbiddenDetail.
struct PodSecurityViolation {
  std::string reason;
  std::string detail;
};

// The violations of `pod` against `level` ("baseline" or "restricted"; "privileged" has none),
// in the plugin's order (baseline checks, then restricted ones, each set sorted by check ID).
std::vector<PodSecurityViolation> EvaluatePodSecurity(absl::string_view level,
                                                      const nlohmann::json& pod);

// "reason (detail), reason (detail)", as the plugin aggregates check results.
std::string PodSecurityDetail(const std::vector<PodSecurityViolation>& violations);

// The admission chain localkube runs for a Pod create (`old` null) or spec update: validation,
// then Pod Security for the pod's namespace (read from `store`). Warnings for the response are
// appended to `warnings` (may be null).
absl::Status AdmitPod(const Store& store, const nlohmann::json& pod, const nlohmann::json* old,
                      std::vector<std::string>* warnings);

// The `Warning` header value the apiserver sends for `text`: `299 - "text"` with `"` and `\`
// escaped.
std::string WarningHeaderValue(absl::string_view text);

}  // namespace kubetrain::localkube
