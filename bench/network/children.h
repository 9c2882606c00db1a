// What network_bench's driver runs besides the table: the group of child processes of one case
// (started inside sandboxes, watched together against the stop flag and the deadline, killed with
// their process groups when the group goes), the scratch folder a case's children share, and the
// raw TCP reference between two sandboxes.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "localkube/sandbox/network.h"

namespace kubetrain::network_bench {

// Child processes of one case. Destroying it kills every child's process group (Process).
// Not thread-safe: the driver's main thread owns it.
class Children {
 public:
  Children(const std::atomic<bool>& stop, absl::Time deadline) : stop_(stop), deadline_(deadline) {}

  // Starts `argv` inside `sandbox` with PATH and `env`; returns its index.
  absl::StatusOr<int> Start(const sandbox::Sandbox& sandbox, std::vector<std::string> argv,
                            const std::map<std::string, std::string>& env = {});
  // Starts `argv` on the host (in this process's namespaces), as Start does otherwise.
  absl::StatusOr<int> StartOnHost(std::vector<std::string> argv,
                                  const std::map<std::string, std::string>& env = {});
  // Waits until child `index` has written `needle`.
  absl::Status WaitOutput(int index, absl::string_view needle);
  // Waits until every child in `which` has exited 0.
  absl::Status WaitExit(const std::vector<int>& which);
  const std::string& output(int index) const { return outputs_[index]; }

 private:
  // Reads what the children wrote (waiting up to 50 ms); an error once the stop flag is set,
  // the deadline passed or a child has exited otherwise than with 0.
  absl::Status Pump();
  absl::StatusOr<int> Launch(ProcessOptions options, std::string name);

  const std::atomic<bool>& stop_;
  absl::Time deadline_;
  std::vector<std::unique_ptr<Process>> processes_;
  std::vector<std::string> names_, outputs_;
};

// What the children need of the driver's environment besides PATH: HOME, TMPDIR, and the
// OpenBLAS kernel choice (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE) where the machine sets one.
std::map<std::string, std::string> BaseEnv();

// A folder of this run's own in the user's scratch folder (common/private_dir.h), removed with it.
class TempDir {
 public:
  static absl::StatusOr<std::unique_ptr<TempDir>> Make();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// A port free in `sandbox` right now: its namespace is this run's alone, so it stays free.
absl::StatusOr<int> FreePort(const sandbox::Sandbox& sandbox);

struct RawTcp {
  std::vector<double> seconds;  // per timed transfer
  // The sending socket's TCP congestion control ("bbr", "cubic"): a sandbox's network namespace
  // takes the host's default, and which one runs moves the exchanges that share a link among
  // several flows (docs/network-benchmark.md).
  std::string congestion_control;
};

// One-way TCP from `from` to `to` (through both nodes' uplinks when they differ): `reps` timed
// transfers of `bytes` after one untimed, each timed from its first byte sent to the receiver's
// one-byte acknowledgement of its last.
absl::StatusOr<RawTcp> MeasureRawTcp(const sandbox::Sandbox& from, const sandbox::Sandbox& to,
                                     size_t bytes, int reps, const std::atomic<bool>& stop,
                                     absl::Time deadline);

}  // namespace kubetrain::network_bench
