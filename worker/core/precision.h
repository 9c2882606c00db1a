// The arithmetic of a worker's GEMMs and convolutions (--precision;
// docs/decisions/0011-bf16-mixed-precision.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>

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

}  // namespace kubetrain::worker
