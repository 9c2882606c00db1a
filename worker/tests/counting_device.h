// A Device that forwards every call to another and counts what a step costs on a GPU whatever
// backend runs it: kernel launches, GEMMs among them, and host waits (a download or a
// Synchronize blocks the host until the device has caught up). Its column budget can be set,
// so a CPU test can take the path a GPU takes.
#pragma once

#include <cstdint>
#include <optional>

#include "worker/device.h"

namespace kubetrain::worker::testing {

class CountingDevice final : public Device {
 public:
  explicit CountingDevice(Device& inner, std::optional<int64_t> column_budget = std::nullopt)
      : inner_(inner), column_budget_(column_budget) {}

  struct Counts {
    int64_t launches = 0;    // kernels and device-side copies
    int64_t gemms = 0;       // of the launches
    int64_t host_waits = 0;  // downloads and Synchronize calls
    int64_t uploads = 0;
  };
  const Counts& counts() const { return counts_; }
  void Reset() { counts_ = {}; }

  absl::string_view name() const override { return inner_.name(); }
  int64_t ColumnBudgetBytes() const override {
    return column_budget_.value_or(inner_.ColumnBudgetBytes());
  }

  void* AllocateBytes(size_t bytes) override { return inner_.AllocateBytes(bytes); }
  void FreeBytes(void* ptr) override { inner_.FreeBytes(ptr); }
  void CopyHostToDevice(const void* host, void* device, size_t bytes) override {
    ++counts_.uploads;
    inner_.CopyHostToDevice(host, device, bytes);
  }
  void CopyDeviceToHost(const void* device, void* host, size_t bytes) override {
    ++counts_.host_waits;
    inner_.CopyDeviceToHost(device, host, bytes);
  }
  void CopyDeviceToDevice(const void* src, void* dst, size_t bytes) override {
    ++counts_.launches;
    inner_.CopyDeviceToDevice(src, dst, bytes);
  }
  void Fill(int64_t n, float value, float* x) override {
    ++counts_.launches;
    inner_.Fill(n, value, x);
  }
  absl::Status Synchronize() override {
    ++counts_.host_waits;
    return inner_.Synchronize();
  }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    ++counts_.launches;
    ++counts_.gemms;
    inner_.Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    ++counts_.launches;
    inner_.Axpy(n, alpha, x, y);
  }
  void Scale(int64_t n, float alpha, float* x) override {
    ++counts_.launches;
    inner_.Scale(n, alpha, x);
  }
  void AddBias(int rows, int cols, const float* bias, float* x) override {
    ++counts_.launches;
    inner_.AddBias(rows, cols, bias, x);
  }
  void BiasGrad(int rows, int cols, const float* dy, float* db) override {
    ++counts_.launches;
    inner_.BiasGrad(rows, cols, dy, db);
  }
  void AddBiasRelu(int rows, int cols, const float* bias, float* x) override {
    ++counts_.launches;
    inner_.AddBiasRelu(rows, cols, bias, x);
  }
  void ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                    float* db) override {
    ++counts_.launches;
    inner_.ReluBiasGrad(rows, cols, y, dy, dx, db);
  }
  void Relu(int64_t n, const float* x, float* y) override {
    ++counts_.launches;
    inner_.Relu(n, x, y);
  }
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override {
    ++counts_.launches;
    inner_.ReluGrad(n, y, dy, dx);
  }
  void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                           float grad_scale, float* loss, float* dlogits) override {
    ++counts_.launches;
    inner_.SoftmaxCrossEntropy(rows, cols, logits, labels, grad_scale, loss, dlogits);
  }
  void ArgMax(int rows, int cols, const float* x, int32_t* out) override {
    ++counts_.launches;
    inner_.ArgMax(rows, cols, x, out);
  }
  void Im2Col(const ConvGeometry& g, const float* input, float* col) override {
    ++counts_.launches;
    inner_.Im2Col(g, input, col);
  }
  void Col2Im(const ConvGeometry& g, const float* col, float* input_grad) override {
    ++counts_.launches;
    inner_.Col2Im(g, col, input_grad);
  }
  void MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                  int32_t* argmax) override {
    ++counts_.launches;
    inner_.MaxPool2x2(g, input, output, argmax);
  }
  void MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad, const int32_t* argmax,
                      float* input_grad) override {
    ++counts_.launches;
    inner_.MaxPool2x2Grad(g, output_grad, argmax, input_grad);
  }
  void ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad, float* value,
                   float* slot0, float* slot1) override {
    ++counts_.launches;
    inner_.ApplyUpdate(rule, n, grad, value, slot0, slot1);
  }

 private:
  Device& inner_;
  std::optional<int64_t> column_budget_;
  Counts counts_;
};

}  // namespace kubetrain::worker::testing
