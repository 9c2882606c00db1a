// core/v1 Pod validation as kube-apiserver performs it, for the subset of fields localkube's
// clients write: resource.Quantity parsing (the decoder's step: an unparsable quantity makes the
// whole body undecodable, a 400) and ValidatePodCreate/ValidatePodUpdate's field checks (422
// causes worded as k8s.io/apimachinery's field errors).
//
// Covered: metadata.name (DNS-1123 subdomain); containers (required, non-empty), container and
// init container names (required, DNS-1123 label, unique across both lists), image (required),
// imagePullPolicy and terminationMessagePolicy values, ports (name, containerPort/hostPort in
// 1-65535, protocol TCP/UDP/SCTP), env names (the relaxed rule of Kubernetes 1.32+: printable
// ASCII but '='), resources (resource names, non-negative values, integers for extended
// resources, requests <= limits, requests == limits for non-overcommittable resources),
// restartPolicy, dnsPolicy, hostname and subdomain. Everything else is accepted as sent.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "localkube/errors.h"
#include "localkube/quantity.h"

namespace kubetrain::localkube {

// The decoder's view of a Pod's quantities (container, init and ephemeral container resources,
// spec.resources, spec.overhead): every value must parse, and is stored in canonical form, as the
// apiserver stores it. A failure is the decoder's message (InvalidArgument), for the caller to
// wrap ("Pod in version "v1" cannot be handled as a Pod: ...").
absl::Status CheckPodQuantities(nlohmann::json* pod);

// The field errors ValidatePodCreate/ValidatePodUpdate report for `pod`, in the apiserver's
// order; empty when valid.
std::vector<Cause> ValidatePod(const nlohmann::json& pod);

// apimachinery's IsDNS1123Subdomain / IsDNS1123Label messages for `value` (empty when valid).
std::vector<std::string> Dns1123SubdomainErrors(const std::string& value);
std::vector<std::string> Dns1123LabelErrors(const std::string& value);

}  // namespace kubetrain::localkube
