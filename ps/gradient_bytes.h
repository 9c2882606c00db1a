// A pushed gradient's values where they arrived: float32 or 16-bit floats (--gradient-compression),
// in one or more byte fragments at any alignment — the gRPC receive slices of the request, or one
// slot of a shared-memory region. The store reads them in runs of float32 instead of first
// gathering (or widening) them into one array of their own: a partition's gradient spans many
// receive slices, so that array cost a fresh allocation, its page faults, zeroing and a copy per
// gradient per step (docs/architecture.md §5.5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "ps/half_float.h"

namespace kubetrain::ps {

class GradientBytes {
 public:
  // Values per run handed to ForEachRun when they have to be gathered (16 KiB of float32: the
  // run stays in L1 between its copy and its use).
  static constexpr size_t kRunValues = 4096;

  GradientBytes() = default;
  // `bytes` of values coded as `encoding`, in one piece. The bytes are viewed, not copied: they
  // must outlive this object's use.
  explicit GradientBytes(absl::string_view bytes, WireFloat encoding = WireFloat::kFloat32);

  // Adds the next fragment of the values' bytes (viewed, not copied).
  void Append(absl::string_view fragment);

  WireFloat encoding() const { return encoding_; }
  size_t wire_bytes() const { return wire_bytes_; }
  // Whether the byte count is a whole number of values.
  bool whole() const { return wire_bytes_ % WireFloatBytes(encoding_) == 0; }
  // The values held (whole ones).
  size_t size() const { return wire_bytes_ / WireFloatBytes(encoding_); }
  bool empty() const { return wire_bytes_ == 0; }

  // Calls `run(first, values)` over consecutive runs of the values as float32, in order, covering
  // all of them: in place where float32 bytes are aligned within a fragment, otherwise copied (or
  // widened) into a buffer of kRunValues that the next run reuses. `values` is valid during the
  // call only.
  void ForEachRun(absl::FunctionRef<void(size_t first, std::span<const float> values)> run) const;
  // All the values as float32 into `out`, which holds size() floats.
  void CopyTo(std::span<float> out) const;

 private:
  absl::InlinedVector<absl::string_view, 1> fragments_;
  size_t wire_bytes_ = 0;
  WireFloat encoding_ = WireFloat::kFloat32;
};

// The index of the first NaN or infinity in `values`, or -1 when all are finite.
int64_t FirstNonFinite(std::span<const float> values);
// The same over a pushed gradient's values; `*value` (where given) gets the one found.
int64_t FirstNonFinite(const GradientBytes& values, float* value = nullptr);

}  // namespace kubetrain::ps
