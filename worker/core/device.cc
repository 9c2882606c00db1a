#include "worker/core/device.h"

#include <new>

#include "absl/strings/str_cat.h"

namespace kubetrain::worker {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void* Device::AllocateHostBytes(size_t bytes) { return ::operator new(bytes); }

void Device::FreeHostBytes(void* ptr) { ::operator delete(ptr); }

namespace {

absl::Status NoGraphs(absl::string_view device) {
  return absl::UnimplementedError(absl::StrCat("the ", device, " device does not capture graphs"));
}

}  // namespace

absl::Status Device::BeginCapture() { return NoGraphs(name()); }

absl::StatusOr<std::unique_ptr<DeviceGraph>> Device::EndCapture() { return NoGraphs(name()); }

absl::Status Device::LaunchGraph(DeviceGraph& /*graph*/) { return NoGraphs(name()); }

void Device::AddBiasRelu(int rows, int cols, const float* bias, float* x) {
  AddBias(rows, cols, bias, x);
  Relu(static_cast<int64_t>(rows) * cols, x, x);
}

void Device::QueueDownload(const void* device, void* staging, size_t bytes) {
  CopyDeviceToHost(device, staging, bytes);
}

void Device::ApplyUpdates(const ps::UpdateRule* rule, absl::Span<const UpdateSlice> slices) {
  ps::UpdateRule host;
  CopyDeviceToHost(rule, &host, sizeof(host));
  for (const UpdateSlice& s : slices) ApplyUpdate(host, s.n, s.grad, s.value, s.slot0, s.slot1);
}

void Device::ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                          float* db) {
  ReluGrad(static_cast<int64_t>(rows) * cols, y, dy, dx);
  BiasGrad(rows, cols, dx, db);
}

}  // namespace kubetrain::worker
