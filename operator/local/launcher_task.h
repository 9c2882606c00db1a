// Internal to operator/local: one task of a LocalJob, shared by the files that make up LocalJob
// (launcher.cc runs and supervises the tasks, launcher_setup.cc prepares them).
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "common/process.h"
#include "operator/api/render.h"
#include "operator/local/launcher.h"
#include "operator/local/progress.h"

namespace kubetrain::local {

struct LocalJob::Task {
  api::Task task;
  int port = 0;
  int metrics_port = 0;
  ProcessOptions process_options;
  std::unique_ptr<Process> process;
  std::string partial;  // output after the last newline
  // kWaiting: no process (not started, or stopped for a restart) until restart_at.
  enum class Phase { kWaiting, kRunning, kSucceeded, kFailed } phase = Phase::kWaiting;
  int exit_code = 0;
  absl::Time restart_at = absl::InfinitePast();
  int restarts = 0;     // this task's restarts: its next restart's delay doubles with each
  int incarnation = 0;  // which process of this task runs: failures are counted per incarnation
  std::string label;    // "worker-1"
  std::string gpu;      // its CUDA_VISIBLE_DEVICES when kubetrain run chose it, else ""
  std::string cpus;     // the CPUs it keeps to ("0,1") when kubetrain run bound it, else ""
  ProgressTracker progress;
};

}  // namespace kubetrain::local
