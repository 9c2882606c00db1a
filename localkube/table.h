// meta.k8s.io/v1 Table responses for `kubectl get`: server-side columns for the common built-ins
// and additionalPrinterColumns (simple JSONPath) for custom resources. Pure functions.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "localkube/resources.h"

namespace kubetrain::localkube {

// Every value `path` selects: ".a.b", ".a[0]", ".a[-1:]", ".a[*].b", "{.a.b}".
std::vector<nlohmann::json> EvalJsonPath(const nlohmann::json& object, absl::string_view path);

// kubectl's short ages: 45s, 3m2s, 5h10m, 3d4h, 2y.
std::string HumanDuration(absl::Duration d);

// `include_object`: "Metadata" (default), "Object" or "None".
nlohmann::json ToTable(const ResourceType& type, const std::vector<nlohmann::json>& objects,
                       const std::string& resource_version, const std::string& include_object);

}  // namespace kubetrain::localkube
