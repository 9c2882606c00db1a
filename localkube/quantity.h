// resource.Quantity as k8s.io/apimachinery parses, compares and prints it, exactly (decimal
// digits and a power of ten, no floating point), for localkube's Pod decoding and validation
// (pod_validation.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::localkube {

// A resource.Quantity: exactly `digits` x 10^`exponent` (negated when `negative`), rounded up to
// nano units as apimachinery rounds.
struct Quantity {
  enum class Format { kDecimalSI, kBinarySI, kDecimalExponent };
  bool negative = false;
  std::string digits = "0";  // no leading zeros
  int exponent = 0;
  Format format = Format::kDecimalSI;

  // The canonical form Quantity.String() prints ("1500m", "1Gi", "1e3").
  std::string String() const;
  bool IsZero() const { return digits == "0"; }
  bool IsInteger() const;
};

// apimachinery's ParseQuantity. Failures carry its messages: "quantities must match the regular
// expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'", "unable to parse quantity's
// suffix", "unable to parse numeric part of quantity".
absl::StatusOr<Quantity> ParseQuantity(absl::string_view text);

// <0, 0, >0 as a is less than, equal to or greater than b.
int CompareQuantities(const Quantity& a, const Quantity& b);

}  // namespace kubetrain::localkube
