// The compute backends the bench can run on, chosen by name (--device), each with its own
// "bare GEMM" reference: the vendor library called directly on the shapes the step issued.
//
// A backend plugs in by adding one entry to the table in backends.cc; nothing else in the bench
// names a backend.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bench/train_step/profiling_device.h"
#include "worker/core/device.h"
#include "worker/core/precision.h"

namespace kubetrain::bench {

struct BackendOptions {
  int threads = 1;  // CPU: OpenBLAS threads (docs/architecture.md §8: one per process by default)
  // CUDA, as the worker's --tf32: unset, convolutions in TF32 and GEMMs (the step's and the bare
  // reference's) in FP32; true, both in TF32; false, neither. true is FAILED_PRECONDITION on
  // the CPU.
  std::optional<bool> tf32;
  // As the worker's --precision. Under bf16 the CUDA reference runs cuBLAS's bf16 GEMM on bf16
  // operands (what the step's GEMMs run after rounding theirs); the CPU's runs sgemm, which its
  // bf16 GEMMs also run on, after rounding.
  worker::Precision precision = worker::Precision::kFloat32;
};

// Runs a list of GEMMs directly on a backend's BLAS, without the model or the Device layer, and
// where the backend has convolution kernels of its own, its library's convolutions. Owns its
// operand buffers. Not thread-safe.
class GemmReference {
 public:
  virtual ~GemmReference() = default;
  // Issues every call of `calls` in order, with the same shapes, transposes, alpha and beta, and
  // returns each call's wall time in nanoseconds (index-aligned with `calls`).
  virtual absl::StatusOr<std::vector<int64_t>> Run(absl::Span<const GemmCall> calls) = 0;
  // Nanoseconds of one call of each direction (forward, backward filter, backward data) of
  // `shape` over `batch` images on the bare library, its fastest algorithm found first, each call
  // timed to its completion; UNIMPLEMENTED for a backend without convolution kernels (the CPU).
  virtual absl::StatusOr<std::array<int64_t, 3>> TimeConvolution(
      const worker::Conv2DShape& /*shape*/, int /*batch*/) {
    return absl::UnimplementedError("no convolution kernels of the backend's own");
  }
};

// A device plus the reference that measures its bare GEMM. The reference borrows the device (it
// allocates its operands there), so it is declared second and destroyed first.
struct Backend {
  std::unique_ptr<worker::Device> device;
  std::unique_ptr<GemmReference> reference;
};

// "cpu" (OpenBLAS) or "cuda" (CUDA device 0 with a bare cuBLAS reference; FAILED_PRECONDITION
// in a build without the CUDA backend or on a machine without a GPU); anything else is
// INVALID_ARGUMENT listing the names.
absl::StatusOr<Backend> MakeBackend(absl::string_view name, const BackendOptions& options);

}  // namespace kubetrain::bench
