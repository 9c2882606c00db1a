// The arithmetic of a worker's GEMMs and convolutions (--precision;
// docs/decisions/0011-bf16-mixed-precision.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/enum_names.h"

namespace kubetrain::worker {

enum class Precision {
  kFloat32,   // float32 operands (TF32 on a GPU's tensor cores where --tf32 allows it)
  kBFloat16,  // bf16 operands, float32 sums; master weights, updates and the loss in float32
};

inline constexpr EnumName<Precision> kPrecisions[] = {
    {Precision::kFloat32, "fp32"},
    {Precision::kBFloat16, "bf16"},
};

inline const char* PrecisionName(Precision p) { return NameOf(kPrecisions, p); }
inline std::optional<Precision> ParsePrecision(std::string_view name) {
  return ValueNamed(kPrecisions, name);
}
// "fp32, bf16", for an error's "allowed: ...".
inline std::string PrecisionNames() { return NamesOf(kPrecisions); }
// The value of the --precision flag, or an error naming the flag and the values it takes.
inline absl::StatusOr<Precision> PrecisionFromFlag(std::string_view value) {
  if (std::optional<Precision> p = ParsePrecision(value)) return *p;
  return absl::InvalidArgumentError(absl::StrCat(
      "--precision: unsupported value \"", std::string(value), "\"; allowed: ", PrecisionNames()));
}

}  // namespace kubetrain::worker
