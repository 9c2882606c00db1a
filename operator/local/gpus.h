// GPUs for `kubetrain run`: which GPUs this machine offers, and which task gets which. Each
// kubetrain-worker task (chief, workers, evaluator) gets one GPU through CUDA_VISIBLE_DEVICES,
// round-robin, so ranks on one machine do not all land on GPU 0 (docs/architecture.md §4).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "operator/api/render.h"

namespace kubetrain::local {

// The entries of a CUDA_VISIBLE_DEVICES value as CUDA reads them: comma-separated indices or
// UUIDs (GPU-..., MIG-...), up to the first entry that is neither, so "", "-1" and "none" hide
// every GPU and "0,-1,1" means "0".
std::vector<std::string> ParseCudaVisibleDevices(absl::string_view value);

// The GPUs of `nvidia-smi -L` output: its "GPU <n>: ..." lines (MIG lines are not counted).
int CountNvidiaSmiGpus(absl::string_view output);

// The GPUs to hand out, as CUDA_VISIBLE_DEVICES entries: the ones `cuda_visible_devices` names
// when it is set (kubetrain run was given a subset, or none), else "0" .. counted-1.
std::vector<std::string> GpuIds(const std::optional<std::string>& cuda_visible_devices,
                                int counted);

// GpuIds of this process's CUDA_VISIBLE_DEVICES and, only when that is unset, the GPUs this
// machine has: `nvidia-smi -L` when it runs (5 s at most), else the entries of
// /proc/driver/nvidia/gpus; none without either.
std::vector<std::string> DetectGpus();

// CUDA_VISIBLE_DEVICES for each of `tasks` (same order; api::Tasks order): the chief, workers
// and evaluator in that order take `gpus` round-robin; PS tasks, and every task when `gpus` is
// empty, get "" (set nothing).
std::vector<std::string> AssignGpus(const std::vector<api::Task>& tasks,
                                    const std::vector<std::string>& gpus);

}  // namespace kubetrain::local
