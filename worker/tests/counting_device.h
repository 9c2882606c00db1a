// A Device that forwards every call to another and counts what a step costs on a GPU whatever
// backend runs it: kernel launches, GEMMs and device-side copies among them, and host waits (a
// download or a Synchronize blocks the host until the device has caught up with the work issued
// before it; one that follows another wait with nothing issued in between blocks for nothing and
// is not counted). A graph launch counts as one launch; the work of a capture is not launched
// and not counted (nor is waiting for graphs the host has seen finish). Its column budget can be
// set, and its memory declared not host-addressable, so a CPU test can take the paths a GPU takes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "worker/core/device.h"

namespace kubetrain::worker::testing {

class CountingDevice final : public Device {
 public:
  explicit CountingDevice(Device& inner, std::optional<int64_t> column_budget = std::nullopt)
      : inner_(inner), column_budget_(column_budget) {}

  struct Counts {
    int64_t launches = 0;    // kernels and device-side copies
    int64_t gemms = 0;       // of the launches
    int64_t copies = 0;      // of the launches: device-to-device copies
    int64_t host_waits = 0;  // downloads and Synchronize calls with work issued before them
    int64_t uploads = 0;
  };
  const Counts& counts() const { return counts_; }
  void Reset() {
    counts_ = {};
    issued_ = true;
  }

  absl::string_view name() const override { return inner_.name(); }
  bool HostAddressable() const override { return !hide_host_memory_ && inner_.HostAddressable(); }
  // From now on, callers must copy through Upload/Download, as they do for a GPU's memory.
  void HideHostMemory() { hide_host_memory_ = true; }
  int64_t ColumnBudgetBytes() const override {
    return column_budget_.value_or(inner_.ColumnBudgetBytes());
  }

  void* AllocateBytes(size_t bytes) override { return inner_.AllocateBytes(bytes); }
  void FreeBytes(void* ptr) override { inner_.FreeBytes(ptr); }
  void* AllocateHostBytes(size_t bytes) override { return inner_.AllocateHostBytes(bytes); }
  void FreeHostBytes(void* ptr) override { inner_.FreeHostBytes(ptr); }
  bool SupportsGraphs() const override { return inner_.SupportsGraphs(); }
  absl::Status BeginCapture() override {
    absl::Status status = inner_.BeginCapture();
    capturing_ = status.ok();
    return status;
  }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> EndCapture() override {
    capturing_ = false;
    return inner_.EndCapture();
  }
  absl::Status LaunchGraph(DeviceGraph& graph) override {
    Launch();
    graph_pending_ = true;
    return inner_.LaunchGraph(graph);
  }
  absl::Status WaitForGraphs() override {
    if (graph_pending_) Wait();
    return inner_.WaitForGraphs();
  }
  void CopyHostToDevice(const void* host, void* device, size_t bytes) override {
    if (!capturing_) {
      ++counts_.uploads;
      issued_ = true;
    }
    inner_.CopyHostToDevice(host, device, bytes);
  }
  void CopyDeviceToHost(const void* device, void* host, size_t bytes) override {
    Wait();
    inner_.CopyDeviceToHost(device, host, bytes);
  }
  // Queued as a kernel is: a launch, not a wait.
  void QueueDownload(const void* device, void* staging, size_t bytes) override {
    Launch();
    inner_.QueueDownload(device, staging, bytes);
  }
  void CopyDeviceToDevice(const void* src, void* dst, size_t bytes) override {
    Launch();
    if (!capturing_) ++counts_.copies;
    inner_.CopyDeviceToDevice(src, dst, bytes);
  }
  void Fill(int64_t n, float value, float* x) override {
    Launch();
    inner_.Fill(n, value, x);
  }
  absl::Status Synchronize() override {
    Wait();
    return inner_.Synchronize();
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    Launch();
    if (!capturing_) ++counts_.gemms;
    inner_.Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    Launch();
    inner_.Axpy(n, alpha, x, y);
  }
  void Scale(int64_t n, float alpha, float* x) override {
    Launch();
    inner_.Scale(n, alpha, x);
  }
  void AddBias(int rows, int cols, const float* bias, float* x) override {
    Launch();
    inner_.AddBias(rows, cols, bias, x);
  }
  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    Launch();
    inner_.BiasGrad(rows, cols, dy, db);
  }
  void AddBiasRelu(int rows, int cols, const float* bias, float* x) override {
    Launch();
    inner_.AddBiasRelu(rows, cols, bias, x);
  }
  void ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                    float* db) override {
    Launch();
    inner_.ReluBiasGrad(rows, cols, y, dy, dx, db);
  }
  void Relu(int64_t n, const float* x, float* y) override {
    Launch();
    inner_.Relu(n, x, y);
  }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    Launch();
    inner_.ReluGrad(n, y, dy, dx);
  }
  void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                           float grad_scale, float* loss, float* dlogits) override {
    Launch();
    inner_.SoftmaxCrossEntropy(rows, cols, logits, labels, grad_scale, loss, dlogits);
  }
  void ArgMax(int rows, int cols, const float* x, int32_t* out) override {
    Launch();
    inner_.ArgMax(rows, cols, x, out);
  }
  void Im2Col(const ConvGeometry& g, const float* input, float* col) override {
    Launch();
    inner_.Im2Col(g, input, col);
  }
  void Col2Im(const ConvGeometry& g, const float* col, float* input_grad) override {
    Launch();
    inner_.Col2Im(g, col, input_grad);
  }
  void MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                  int32_t* argmax) override {
    Launch();
    inner_.MaxPool2x2(g, input, output, argmax);
  }
  void MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad, const int32_t* argmax,
                      float* input_grad) override {
    Launch();
    inner_.MaxPool2x2Grad(g, output_grad, argmax, input_grad);
  }
  void ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad, float* value,
                   float* slot0, float* slot1) override {
    Launch();
    inner_.ApplyUpdate(rule, n, grad, value, slot0, slot1);
  }
  void ApplyUpdates(const ps::UpdateRule* rule, absl::Span<const UpdateSlice> slices) override {
    for (int64_t i = 0; i < FusedUpdateLaunches(slices.size()); ++i) Launch();
    inner_.ApplyUpdates(rule, slices);
  }
  // The backend's convolutions (cuDNN), each call counted as one launch.
  std::unique_ptr<ConvolutionKernels> MakeConvolution(const Conv2DShape& shape) override {
    std::unique_ptr<ConvolutionKernels> inner = inner_.MakeConvolution(shape);
    if (inner == nullptr) return nullptr;
    return std::make_unique<ObservedConvolution>(
        std::move(inner), [this](ConvolutionDirection, const std::function<void()>& call) {
          Launch();
          call();
        });
  }

 private:
  Device& inner_;
  std::optional<int64_t> column_budget_;
  bool hide_host_memory_ = false;
  void Launch() {
    if (capturing_) return;
    ++counts_.launches;
    issued_ = true;
  }
  void Wait() {
    if (issued_) ++counts_.host_waits;
    issued_ = false;
    graph_pending_ = false;
  }

  Counts counts_;
  bool issued_ = true;  // work was issued since the last wait
  bool capturing_ = false;
  bool graph_pending_ = false;  // a graph was launched since the last wait
};

}  // namespace kubetrain::worker::testing
