// CudaDevice's graph capture and pinned staging memory (cuda_device.h; docs/decisions/0010).
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cuda_device.h"

namespace kubetrain::worker {
namespace {

// A captured graph and its executable instance.
class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(cuda::Graph graph, cuda::GraphExec exec)
      : graph_(std::move(graph)), exec_(std::move(exec)) {}
  cudaGraphExec_t exec() const { return exec_.get(); }

 private:
  cuda::Graph graph_;
  cuda::GraphExec exec_;
};

}  // namespace

bool CudaDevice::RefuseDuringCapture(absl::string_view call) {
  if (!capturing_) return false;
  Record(absl::FailedPreconditionError(absl::StrCat(call, " during graph capture")));
  return true;
}

void* CudaDevice::AllocateHostBytes(size_t bytes) {
  void* ptr = Allocate(
      "AllocateHostBytes", [](void** p, size_t n) { return cudaMallocHost(p, n); }, bytes);
  pinned_.Add(ptr, bytes);
  return ptr;
}

void CudaDevice::FreeHostBytes(void* ptr) {
  RefuseDuringCapture("FreeHostBytes");
  const cuda::RelaxedCapture relaxed(capturing_);
  pinned_.Remove(ptr);
  if (Activate()) Record(KT_CUDA_STATUS(cudaFreeHost(ptr)));
}

void CudaDevice::CaptureUpload(const void* host, void* device, size_t bytes) {
  if (bytes == 0 || !Activate()) return;
  if (!pinned_.Contains(host, bytes)) {
    RefuseDuringCapture("CopyHostToDevice from host memory not made by AllocateHostBytes");
    return;
  }
  Record(
      KT_CUDA_STATUS(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, compute_.get())));
}

// One DMA on the compute stream, behind the kernels that write what it reads; captured like them.
void CudaDevice::QueueDownload(const void* device, void* staging, size_t bytes) {
  if (bytes == 0 || !Activate()) return;
  if (!pinned_.Contains(staging, bytes)) {
    constexpr absl::string_view kNotPinned =
        "QueueDownload into host memory not made by AllocateHostBytes";
    if (!RefuseDuringCapture(kNotPinned)) Record(absl::InvalidArgumentError(kNotPinned));
    return;
  }
  Record(KT_CUDA_STATUS(
      cudaMemcpyAsync(staging, device, bytes, cudaMemcpyDeviceToHost, compute_.get())));
}

absl::Status CudaDevice::BeginCapture() {
  if (capturing_) return absl::FailedPreconditionError("BeginCapture during a capture");
  RETURN_IF_ERROR(MakeCurrent());
  KT_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(compute_.get(), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  capture_error_ = absl::OkStatus();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceGraph>> CudaDevice::EndCapture() {
  if (!capturing_) return absl::FailedPreconditionError("EndCapture without BeginCapture");
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(compute_.get(), &raw);
  capturing_ = false;
  cuda::Graph graph(raw);
  absl::Status error = std::exchange(capture_error_, absl::OkStatus());
  if (error.ok()) error = KT_CUDA_STATUS(ended);
  if (!error.ok()) {
    // An invalidated capture leaves its error for the next launch check to find.
    static_cast<void>(cudaGetLastError());
    return error;
  }
  ASSIGN_OR_RETURN(cuda::GraphExec exec, cuda::InstantiateGraph(graph.get()));
  captured_ = true;
  return std::make_unique<CudaGraph>(std::move(graph), std::move(exec));
}

absl::Status CudaDevice::LaunchGraph(DeviceGraph& graph) {
  auto* cuda_graph = dynamic_cast<CudaGraph*>(&graph);
  if (cuda_graph == nullptr) return absl::InvalidArgumentError("not a CUDA graph");
  if (capturing_) return absl::FailedPreconditionError("LaunchGraph during a capture");
  if (Activate() && Check(KT_CUDA_STATUS(cudaGraphLaunch(cuda_graph->exec(), compute_.get())))) {
    Record(KT_CUDA_STATUS(cudaEventRecord(graph_done_.get(), compute_.get())));
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::WaitForGraphs() {
  RETURN_IF_ERROR(MakeCurrent());
  return KT_CUDA_STATUS(cudaEventSynchronize(graph_done_.get()));
}

}  // namespace kubetrain::worker
