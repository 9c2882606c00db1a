// A Device that forwards every call to another (a CpuDevice) and can capture graphs the way a GPU
// does, so CPU tests take the captured paths (worker/core/step_graphs.h): between BeginCapture
// and EndCapture each call is recorded as a closure instead of run, and LaunchGraph runs the
// closures in order. A capture refuses what CUDA refuses during stream capture: a Synchronize, a
// download (but QueueDownload's into staging memory), an allocation or a free, and an upload from
// host memory that AllocateHostBytes did not hand out; EndCapture then fails with an error naming
// the first such call. Its memory is not host-addressable, as a GPU's. Convolutions take the im2col
// path through this device.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/core/device.h"
#include "worker/core/host_blocks.h"

namespace kubetrain::worker::testing {

class RecordingDevice final : public Device {
 public:
  explicit RecordingDevice(Device& inner) : inner_(inner) {}

  // The next capture fails at EndCapture with `status`, as a GPU's capture does when something
  // the backend issues cannot be captured.
  void FailNextCapture(absl::Status status) { injected_failure_ = std::move(status); }
  int64_t graphs_launched() const { return graphs_launched_; }

  absl::string_view name() const override { return inner_.name(); }
  int64_t ColumnBudgetBytes() const override { return inner_.ColumnBudgetBytes(); }

  void* AllocateBytes(size_t bytes) override {
    Refuse("AllocateBytes");
    return inner_.AllocateBytes(bytes);
  }
  void FreeBytes(void* ptr) override {
    Refuse("FreeBytes");
    inner_.FreeBytes(ptr);
  }
  void* AllocateHostBytes(size_t bytes) override {
    Refuse("AllocateHostBytes");
    void* ptr = inner_.AllocateHostBytes(bytes);
    staging_.Add(ptr, bytes);
    return ptr;
  }
  void FreeHostBytes(void* ptr) override {
    Refuse("FreeHostBytes");
    staging_.Remove(ptr);
    inner_.FreeHostBytes(ptr);
  }
  void CopyHostToDevice(const void* host, void* device, size_t bytes) override {
    if (capturing_ && !staging_.Contains(host, bytes)) {
      Refuse("CopyHostToDevice from host memory not made by AllocateHostBytes");
      return;
    }
    // A replay uploads what the staging memory holds then.
    Do([=, this] { inner_.CopyHostToDevice(host, device, bytes); });
  }
  void CopyDeviceToHost(const void* device, void* host, size_t bytes) override {
    if (Refuse("CopyDeviceToHost")) return;
    inner_.CopyDeviceToHost(device, host, bytes);
  }
  void QueueDownload(const void* device, void* staging, size_t bytes) override {
    if (capturing_ && !staging_.Contains(staging, bytes)) {
      Refuse("QueueDownload into host memory not made by AllocateHostBytes");
      return;
    }
    // A replay downloads into the staging memory again.
    Do([=, this] { inner_.QueueDownload(device, staging, bytes); });
  }
  absl::Status Synchronize() override {
    if (Refuse("Synchronize")) return capture_error_;
    return inner_.Synchronize();
  }

  bool SupportsGraphs() const override { return true; }
  absl::Status BeginCapture() override {
    if (capturing_) return absl::FailedPreconditionError("BeginCapture during a capture");
    capturing_ = true;
    capture_error_ = absl::OkStatus();
    recording_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> EndCapture() override {
    if (!capturing_) return absl::FailedPreconditionError("EndCapture without BeginCapture");
    capturing_ = false;
    if (!injected_failure_.ok()) return std::exchange(injected_failure_, absl::OkStatus());
    if (!capture_error_.ok()) return capture_error_;
    auto graph = std::make_unique<Recording>();
    graph->calls = std::move(recording_);
    recording_.clear();
    return graph;
  }
  absl::Status LaunchGraph(DeviceGraph& graph) override {
    auto* recording = dynamic_cast<Recording*>(&graph);
    if (recording == nullptr) return absl::InvalidArgumentError("not a RecordingDevice graph");
    if (capturing_) return absl::FailedPreconditionError("LaunchGraph during a capture");
    ++graphs_launched_;
    for (const auto& call : recording->calls) call();
    return absl::OkStatus();
  }

  void CopyDeviceToDevice(const void* src, void* dst, size_t bytes) override {
    Do([=, this] { inner_.CopyDeviceToDevice(src, dst, bytes); });
  }
  void Fill(int64_t n, float value, float* x) override {
    Do([=, this] { inner_.Fill(n, value, x); });
  }
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    Do([=, this] { inner_.Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c); });
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    Do([=, this] { inner_.Axpy(n, alpha, x, y); });
  }
  void Scale(int64_t n, float alpha, float* x) override {
    Do([=, this] { inner_.Scale(n, alpha, x); });
  }
  void AddBias(int rows, int cols, const float* bias, float* x) override {
    Do([=, this] { inner_.AddBias(rows, cols, bias, x); });
  }
  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    Do([=, this] { inner_.BiasGrad(rows, cols, dy, db); });
  }
  void AddBiasRelu(int rows, int cols, const float* bias, float* x) override {
    Do([=, this] { inner_.AddBiasRelu(rows, cols, bias, x); });
  }
  void ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                    float* db) override {
    Do([=, this] { inner_.ReluBiasGrad(rows, cols, y, dy, dx, db); });
  }
  void Relu(int64_t n, const float* x, float* y) override {
    Do([=, this] { inner_.Relu(n, x, y); });
  }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    Do([=, this] { inner_.ReluGrad(n, y, dy, dx); });
  }
  void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                           float grad_scale, float* loss, float* dlogits) override {
    Do([=, this] {
      inner_.SoftmaxCrossEntropy(rows, cols, logits, labels, grad_scale, loss, dlogits);
    });
  }
  void ArgMax(int rows, int cols, const float* x, int32_t* out) override {
    Do([=, this] { inner_.ArgMax(rows, cols, x, out); });
  }
  void Im2Col(const ConvGeometry& g, const float* input, float* col) override {
    Do([=, this] { inner_.Im2Col(g, input, col); });
  }
  void Col2Im(const ConvGeometry& g, const float* col, float* input_grad) override {
    Do([=, this] { inner_.Col2Im(g, col, input_grad); });
  }
  void MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                  int32_t* argmax) override {
    Do([=, this] { inner_.MaxPool2x2(g, input, output, argmax); });
  }
  void MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad, const int32_t* argmax,
                      float* input_grad) override {
    Do([=, this] { inner_.MaxPool2x2Grad(g, output_grad, argmax, input_grad); });
  }
  void ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad, float* value,
                   float* slot0, float* slot1) override {
    Do([=, this] { inner_.ApplyUpdate(rule, n, grad, value, slot0, slot1); });
  }
  void ApplyUpdates(const ps::UpdateRule* rule, absl::Span<const UpdateSlice> slices) override {
    Do([this, rule, s = std::vector<UpdateSlice>(slices.begin(), slices.end())] {
      inner_.ApplyUpdates(rule, s);
    });
  }

 private:
  struct Recording final : DeviceGraph {
    std::vector<std::function<void()>> calls;
  };

  // Runs `call` now, or records it during a capture.
  void Do(std::function<void()> call) {
    if (capturing_) {
      recording_.push_back(std::move(call));
    } else {
      call();
    }
  }
  // During a capture, keeps the first refusal (naming `call`) for EndCapture and returns true.
  bool Refuse(absl::string_view call) {
    if (!capturing_) return false;
    if (capture_error_.ok()) {
      capture_error_ = absl::FailedPreconditionError(absl::StrCat(call, " during graph capture"));
    }
    return true;
  }

  Device& inner_;
  bool capturing_ = false;
  absl::Status capture_error_;
  absl::Status injected_failure_;
  std::vector<std::function<void()>> recording_;
  HostBlocks staging_;  // what AllocateHostBytes handed out
  int64_t graphs_launched_ = 0;
};

}  // namespace kubetrain::worker::testing
