#include "worker/launch/placement.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/host_port.h"
#include "common/status.h"
#include "operator/api/tf_config.h"

namespace kubetrain::worker {
namespace {

std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::";
}

absl::StatusOr<TaskPlace> Identify(const Options& o) {
  TaskPlace place;
  TaskIdentity& id = place.id;
  Rendezvous* rendezvous = &place.rendezvous;
  std::vector<std::string> ps = o.ps;
  if (!o.tf_config.empty()) {
    ASSIGN_OR_RETURN(api::TfConfig config, api::ParseTfConfig(o.tf_config));
    // The chief's type: "chief", or "master" in a Kubeflow TFJob's TF_CONFIG, else worker 0.
    const std::string chief_type = config.ChiefType();
    const bool has_chief = chief_type != "worker" && !config.Addresses(chief_type).empty();
    id.num_workers = static_cast<int>(config.Addresses("worker").size()) + (has_chief ? 1 : 0);
    if (config.task_type == "ps") {
      return absl::InvalidArgumentError(
          "TF_CONFIG: task.type: ps tasks run kubetrain-ps, not kubetrain-worker");
    }
    if (config.task_type == "evaluator") {
      id.role = Role::kEvaluator;
    } else if (has_chief && config.task_type == chief_type) {
      id.role = Role::kChief;
    } else if (config.task_type == "worker") {
      id.rank = config.task_index + (has_chief ? 1 : 0);
      id.role = config.IsChief() ? Role::kChief : Role::kWorker;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG: task.type: unsupported \"", config.task_type,
                       "\"; kubetrain-worker runs chief, worker and evaluator tasks"));
    }
    ps = config.Addresses("ps");
    rendezvous->chief =
        has_chief
            ? config.Addresses(chief_type)[0]
            : (config.Addresses("worker").empty() ? std::string() : config.Addresses("worker")[0]);
    rendezvous->self = config.TaskAddress();
    rendezvous->ranks = has_chief ? config.Addresses(chief_type) : std::vector<std::string>{};
    for (const std::string& worker : config.Addresses("worker")) {
      rendezvous->ranks.push_back(worker);
    }
  } else {
    if (o.num_workers < 1 || o.worker_index < 0 || o.worker_index >= o.num_workers) {
      return absl::InvalidArgumentError(
          "--worker-index: must be in [0, --num-workers) (or set TF_CONFIG)");
    }
    id.rank = o.worker_index;
    id.num_workers = o.num_workers;
    id.role = o.worker_index == 0 ? Role::kChief : Role::kWorker;
    rendezvous->chief = o.coordinator;
  }
  if (o.trainer.mode == Mode::kAllReduce) {
    if (id.role == Role::kEvaluator) {
      return absl::InvalidArgumentError(
          "--mode allreduce: an evaluator reads parameters from the ps, and an all-reduce job has "
          "none; remove the Evaluator replica (the chief evaluates every epoch) or use --mode "
          "ps-sync");
    }
    if (!ps.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mode allreduce: the cluster has ", ps.size(),
          " ps task(s), which all-reduce training never uses; remove the PS replica spec or use "
          "--mode ps-sync"));
    }
    if (rendezvous->chief.empty()) {
      return absl::InvalidArgumentError(
          "--mode allreduce: no chief address to rendezvous at: set TF_CONFIG (or --coordinator "
          "host:port)");
    }
    return place;
  }
  if (ps.empty()) {
    return absl::InvalidArgumentError(
        "no parameter servers: TF_CONFIG cluster.ps is empty (or give --ps host:port); "
        "--mode ps-sync and ps-async need at least one ps task");
  }
  id.ps_addresses = ps;
  return place;
}

std::string SummaryDirFor(const TrainerOptions& options, Role role) {
  if (role == Role::kWorker) return "";
  std::string dir = options.summary_dir;
  if (dir.empty() && !options.checkpoint_dir.empty()) {
    dir = absl::StrCat(absl::StripSuffix(options.checkpoint_dir, "/"), "/summaries");
  }
  if (dir.empty() || role == Role::kChief) return dir;
  return absl::StrCat(absl::StripSuffix(dir, "/"), "/eval");
}

std::string RoleName(Role role) {
  return role == Role::kChief ? "chief" : role == Role::kEvaluator ? "evaluator" : "worker";
}

absl::StatusOr<std::string> CommunicatorFor(absl::string_view flag, absl::string_view device_name) {
  const bool gpu = device_name == "cuda";
  const std::string kind = flag == "auto" ? (gpu ? "nccl" : "host") : std::string(flag);
  if (kind == "nccl" && !gpu) {
    return absl::FailedPreconditionError(
        "--communicator nccl: NCCL reduces GPU memory and needs --device cuda; this task runs on "
        "the CPU (use --communicator auto, gloo or shm)");
  }
  if ((kind == "gloo" || kind == "shm") && gpu) {
    return absl::FailedPreconditionError(
        absl::StrCat("--communicator ", kind,
                     ": it reduces host memory and this task's device is cuda; use "
                     "--communicator nccl (or auto)"));
  }
  return kind;
}

std::string GlooHost(const Options& o, const Rendezvous& r, absl::string_view hostname) {
  if (!IsWildcardHost(o.bind_address)) return o.bind_address;
  std::string host;
  int port;
  if (!r.self.empty() && SplitHostPort(r.self, &host, &port).ok()) return host;
  return std::string(hostname);
}

DeviceEnv ReadDeviceEnv() {
  return {.local_rank = Env("LOCAL_RANK"), .cuda_visible_devices = Env("CUDA_VISIBLE_DEVICES")};
}

DeviceRequest DeviceRequestFor(const Options& o, const TaskPlace& place, const DeviceEnv& env) {
  DeviceRequest request;
  request.kind = o.device;
  request.cpu.blas_threads = o.threads;
  if (o.cuda_device >= 0) request.cuda.flag = o.cuda_device;
  request.tf32 = o.tf32;
  request.cuda_graphs = o.cuda_graphs;
  request.precision = o.precision;
  request.cuda.local_rank = env.local_rank;
  request.cuda.cuda_visible_devices = env.cuda_visible_devices;
  request.cuda.rank_addresses = place.rendezvous.ranks;
  request.cuda.rank = place.id.role == Role::kEvaluator ? -1 : place.id.rank;
  return request;
}

}  // namespace kubetrain::worker
