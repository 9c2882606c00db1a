// Where a kubetrain-worker task stands in its job, decided from its parsed flags and environment
// before anything connects: its role and rank (TF_CONFIG, or --worker-index/--num-workers), the
// addresses it meets its peers at, the device it asks for and the communicator an all-reduce job
// gets (docs/architecture.md §5.3, §5.8). Pure functions; errors name the field or flag at
// fault and the fix.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/device/device_factory.h"
#include "worker/launch/options.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::worker {

// Cluster-spec addresses this task needs: the all-reduce rendezvous, and every rank's (to tell
// which ranks share this task's host when choosing its GPU).
struct Rendezvous {
  std::string chief;               // the coordinator: the chief's cluster-spec address
  std::string self;                // this task's own address
  std::vector<std::string> ranks;  // TF_CONFIG: every training rank's address, in rank order
};

struct TaskPlace {
  TaskIdentity id;  // role, rank, training workers and ps addresses
  Rendezvous rendezvous;
};

// From TF_CONFIG (`o.tf_config`) or, without it, --ps, --worker-index, --num-workers and
// --coordinator. The chief is TF_CONFIG's "chief" (or "master") task, else worker 0; ranks
// count the chief first. ps tasks, unknown task types, an evaluator or ps tasks in an all-reduce
// job, a missing chief address (all-reduce) or missing ps (ps modes) are INVALID_ARGUMENT.
absl::StatusOr<TaskPlace> Identify(const Options& o);

// An address that names no one interface ("", "0.0.0.0", "::"): the chief dials its own
// coordinator on loopback, and Gloo advertises another host.
bool IsWildcardHost(absl::string_view host);

// Where a task writes its TensorBoard event files (worker/summary): --summary-dir, else the
// checkpoint directory's summaries/ folder, so a job's volume keeps them; the evaluator's in
// their eval/ folder, a run of its own in TensorBoard. Empty (none) for a training worker, and
// where neither flag gives a folder.
std::string SummaryDirFor(const TrainerOptions& options, Role role);

// "chief", "worker" or "evaluator", as logs and metric labels name them.
std::string RoleName(Role role);

// The communicator --communicator (`flag`) names on the device `device_name` ("cpu", "cuda"):
// "nccl" (auto on cuda), "host" (auto on the CPU: shm where every rank shares this host's shared
// memory, else Gloo), "gloo" or "shm". FAILED_PRECONDITION when it cannot reduce that device's
// memory (nccl on the CPU; gloo or shm on cuda).
absl::StatusOr<std::string> CommunicatorFor(absl::string_view flag, absl::string_view device_name);

// The address Gloo listens on and advertises: --bind-address when it names one (the pod IP in a
// cluster), else this task's own cluster-spec host (cluster DNS names it), else `hostname`.
std::string GlooHost(const Options& o, const Rendezvous& r, absl::string_view hostname);

// The environment variables that choose a GPU.
struct DeviceEnv {
  std::optional<std::string> local_rank;            // LOCAL_RANK
  std::optional<std::string> cuda_visible_devices;  // CUDA_VISIBLE_DEVICES
};
DeviceEnv ReadDeviceEnv();

// The device this task asks MakeDevice for: --device, --threads, --tf32, and the GPU from
// --cuda-device, LOCAL_RANK or its place among the ranks (an evaluator has no rank).
DeviceRequest DeviceRequestFor(const Options& o, const TaskPlace& place, const DeviceEnv& env);

}  // namespace kubetrain::worker
