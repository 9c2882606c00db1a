// Validation problems, each naming the field path it is about:
//   spec.replicaSpecs.Worker.replicas: must be >= 1, got -1
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kubetrain::api {

struct FieldError {
  std::string path;  // dotted path with [i] for list items; empty for the whole document
  std::string message;

  std::string ToString() const { return path.empty() ? message : path + ": " + message; }
  bool operator==(const FieldError&) const = default;
};

using FieldErrors = std::vector<FieldError>;

// INVALID_ARGUMENT listing every error on its own line after `what` (e.g. the file name), or OK.
absl::Status ToStatus(const FieldErrors& errors, absl::string_view what);

}  // namespace kubetrain::api
