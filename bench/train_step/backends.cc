#include "bench/train_step/backends.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/cpu/cpu_device.h"
#include "worker/random.h"

namespace kubetrain::bench {
namespace {

using worker::Tensor;

// Bare cblas_sgemm over operands sized for the largest call. Every call reads and writes the
// same three buffers, which is what the model does with its reused activation/column buffers.
class CblasReference final : public GemmReference {
 public:
  explicit CblasReference(worker::Device& device) : device_(device) {}

  absl::StatusOr<std::vector<int64_t>> Run(absl::Span<const GemmCall> calls) override {
    Reserve(calls);
    std::vector<int64_t> nanos;
    nanos.reserve(calls.size());
    for (const GemmCall& g : calls) {
      const auto start = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                  g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, g.alpha, a_.data(),
                  g.trans_a ? g.m : g.k, b_.data(), g.trans_b ? g.k : g.n, g.beta, c_.data(), g.n);
      nanos.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count());
    }
    return nanos;
  }

 private:
  // Grows the operands to the largest call and fills them with values in [-1, 1): no denormals
  // or NaNs, which could slow the arithmetic down.
  void Reserve(absl::Span<const GemmCall> calls) {
    int64_t a = 0, b = 0, c = 0;
    for (const GemmCall& g : calls) {
      a = std::max<int64_t>(a, int64_t{g.m} * g.k);
      b = std::max<int64_t>(b, int64_t{g.k} * g.n);
      c = std::max<int64_t>(c, int64_t{g.m} * g.n);
    }
    Grow(a_, a, 1);
    Grow(b_, b, 2);
    Grow(c_, c, 3);
  }

  void Grow(Tensor& t, int64_t size, uint64_t seed) {
    if (t.size() >= size) return;
    t = Tensor(device_, {size});
    worker::Rng rng(seed);
    for (int64_t i = 0; i < size; ++i) t.data()[i] = 2.0f * rng.Uniform() - 1.0f;
  }

  worker::Device& device_;
  Tensor a_, b_, c_;
};

absl::StatusOr<Backend> MakeCpu(const BackendOptions& options) {
  if (options.threads < 1) return absl::InvalidArgumentError("--threads must be at least 1");
  Backend backend;
  backend.device = std::make_unique<worker::CpuDevice>(
      worker::CpuDeviceOptions{.blas_threads = options.threads});
  backend.reference = std::make_unique<CblasReference>(*backend.device);
  return backend;
}

// Until the CUDA backend lands, "cuda" is a known name with a clear answer rather than "unknown".
absl::StatusOr<Backend> MakeCuda(const BackendOptions& /*options*/) {
  return absl::UnimplementedError("--device=cuda: this build has no CUDA backend");
}

struct BackendEntry {
  absl::string_view name;
  std::function<absl::StatusOr<Backend>(const BackendOptions&)> make;
};

const std::vector<BackendEntry>& Backends() {
  static const auto* backends = new std::vector<BackendEntry>{
      {"cpu", MakeCpu},
      {"cuda", MakeCuda},
  };
  return *backends;
}

}  // namespace

absl::StatusOr<Backend> MakeBackend(absl::string_view name, const BackendOptions& options) {
  std::vector<absl::string_view> names;
  for (const BackendEntry& entry : Backends()) {
    if (entry.name == name) return entry.make(options);
    names.push_back(entry.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--device: unknown backend \"", name, "\"; expected one of: ", absl::StrJoin(names, ", ")));
}

}  // namespace kubetrain::bench
