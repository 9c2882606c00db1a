// Preparing a `kubetrain run`: the run's scratch folder, every task's ports and process options
// (the env a pod would get, rendered from the job), its GPU and its share of the CPUs. Running
// and supervising the tasks is launcher.cc's.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_secret_env.h"
#include "common/port_claims.h"
#include "common/private_dir.h"
#include "common/status.h"
#include "operator/api/checkpoint_storage.h"
#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/local/gpus.h"
#include "operator/local/launcher.h"
#include "operator/local/launcher_task.h"

namespace kubetrain::local {

std::string ExecutableDir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

namespace {

// Whether the pod's training container lists `name` in its env.
bool ContainerSetsEnv(const nlohmann::json& pod, absl::string_view name) {
  if (!pod.contains("spec") || !pod["spec"].contains("containers") ||
      !pod["spec"]["containers"].is_array()) {
    return false;
  }
  for (const nlohmann::json& c : pod["spec"]["containers"]) {
    if (!c.is_object() || api::StringField(c, "name") != api::kDefaultContainerName) continue;
    if (!c.contains("env") || !c["env"].is_array()) return false;
    for (const nlohmann::json& e : c["env"]) {
      if (e.is_object() && e.contains("name") && e["name"].is_string() &&
          e["name"].get<std::string>() == name) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

absl::Status LocalJob::Prepare(const std::atomic<bool>& stop) {
  // This run's scratch folder (its checkpoints): in the user's private folder, with a name no
  // other local user can guess and create first (docs/architecture.md §4).
  ASSIGN_OR_RETURN(std::string scratch, UserScratchDirectory(), "kubetrain run's scratch folder");
  ASSIGN_OR_RETURN(
      run_dir_,
      MakeUniqueDirectory(scratch, absl::StrCat(job_.metadata.name, "-",
                                                absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(),
                                                                 absl::LocalTimeZone()))),
      "kubetrain run's scratch folder");
  // Ports first: every task's TF_CONFIG names every other task's address. Two per task, all
  // different.
  api::LoopbackAddresses ids([](api::ReplicaType, int) { return 0; });
  const std::vector<api::Task> all = api::Tasks(job_, ids);
  // Claimed until the run ends, so that another run started at the same moment is not given
  // them before the tasks bind them (common/port_claims.h).
  ASSIGN_OR_RETURN(port_claims_, ClaimFreeLoopbackPorts(2 * static_cast<int>(all.size())));
  const std::vector<int>& free = port_claims_.ports();
  // A large job takes seconds to prepare and start, and a signal must not wait for all of it.
  for (size_t i = 0; i < all.size(); ++i) {
    if (stop.load()) return absl::OkStatus();
    const api::Task& t = all[i];
    auto task = NewTask(t, free[2 * i], free[2 * i + 1]);
    prefix_width_ = std::max(prefix_width_, task->label.size());
    tasks_.push_back(std::move(task));
  }
  prefix_width_ = std::max(prefix_width_, std::string("kubetrain").size());
  // A new secret per run, as the operator makes one per job: the run's ps and coordinator
  // answer only its own tasks, not another run's on the same machine.
  command_ = options_.command;
  command_.secrets[api::JobSecretName(job_)][kJobSecretKey] = GenerateJobSecret();
  // One GPU per kubetrain-worker task, round-robin, so local ranks do not all use GPU 0.
  std::vector<api::Task> rendered;
  for (const auto& task : tasks_) rendered.push_back(task->task);
  const std::vector<std::string> gpus = AssignGpus(rendered, options_.gpus);
  const size_t gpu_tasks =
      rendered.size() - std::count_if(rendered.begin(), rendered.end(), [](const api::Task& t) {
        return t.type == api::ReplicaType::kPS;
      });
  if (!options_.gpus.empty() && gpu_tasks > options_.gpus.size()) {
    Say(absl::StrCat(gpu_tasks, " tasks share ", options_.gpus.size(),
                     " GPU(s) round-robin; all-reduce on GPUs (NCCL) needs a GPU per rank"));
  }
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (stop.load()) return absl::OkStatus();
    RETURN_IF_ERROR(Configure(*tasks_[i], gpus[i]));
  }
  BindTrainers();
  return absl::OkStatus();
}

void LocalJob::BindTrainers() {
  // Training tasks that wait on each other each step (a sync round, an all-reduce) are otherwise
  // put on one CPU by the kernel, each woken onto the CPU the other just gave up, while another
  // idles (docs/architecture.md §5.3).
  if (!options_.bind_cpus || job_.spec.elastic) return;
  std::vector<Task*> trainers;
  for (const auto& task : tasks_) {
    const api::ReplicaType t = task->task.type;
    if (t == api::ReplicaType::kChief || t == api::ReplicaType::kWorker) {
      trainers.push_back(task.get());
    }
  }
  const std::vector<int> cpus = AllowedCpus();
  const size_t k = cpus.size(), m = trainers.size();
  if (m < 2 || k < m) return;
  for (size_t i = 0; i < m; ++i) {
    std::vector<int> share(cpus.begin() + i * k / m, cpus.begin() + (i + 1) * k / m);
    trainers[i]->cpus = absl::StrJoin(share, ",");
    trainers[i]->process_options.cpus = std::move(share);
  }
}

absl::Status LocalJob::Configure(Task& task, const std::string& gpu) {
  api::LoopbackAddresses addresses([&](api::ReplicaType t, int i) { return ports_.at({t, i}); });
  task.task.address = addresses.Address(job_, task.task.type, task.task.index);
  nlohmann::json pod = api::BuildPod(job_, task.task.type, task.task.index, addresses);
  absl::StatusOr<ProcessOptions> opts = ProcessForPod(pod, command_);
  if (!opts.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.replicaSpecs.", api::Name(task.task.type),
                                                   ".template.spec.", opts.status().message()));
  }
  opts->env["KUBETRAIN_METRICS_PORT"] = std::to_string(task.metrics_port);
  // Each run checkpoints into its own folder (kept across task restarts within the run), so a
  // second `kubetrain run` trains afresh instead of resuming the last run's final checkpoint.
  if (!opts->env.count("KUBETRAIN_CHECKPOINT_DIR"))
    opts->env["KUBETRAIN_CHECKPOINT_DIR"] = run_dir_ + "/checkpoints";
  // spec.checkpoint's claim is a folder of the run (operator/api/checkpoint_storage.h), which
  // this machine keeps: the same manifest runs here, and nothing here is lost with a pod.
  if (task.task.chief && job_.spec.checkpoint) {
    opts->env["KUBETRAIN_CHECKPOINT_DIR"] =
        absl::StrCat(run_dir_, "/", api::CheckpointClaimName(job_), "/", job_.metadata.name);
  }
  opts->env.erase(api::kCheckpointDurableEnv);
  opts->env["KUBETRAIN_BIND_ADDRESS"] = options_.command.pod_ip;
  if (!gpu.empty() && !ContainerSetsEnv(pod, "CUDA_VISIBLE_DEVICES")) {
    // The task sees its one GPU as device 0, whatever its rank.
    task.gpu = gpu;
    opts->env["CUDA_VISIBLE_DEVICES"] = gpu;
    if (!ContainerSetsEnv(pod, "KUBETRAIN_CUDA_DEVICE")) {
      opts->env.insert_or_assign("KUBETRAIN_CUDA_DEVICE", std::string(1, '0'));
    }
  }
  task.process_options = std::move(*opts);
  return absl::OkStatus();
}

std::unique_ptr<LocalJob::Task> LocalJob::NewTask(const api::Task& t, int port, int metrics_port) {
  auto task = std::make_unique<Task>();
  task->task = t;
  task->port = port;
  task->metrics_port = metrics_port;
  task->label = absl::StrCat(api::TaskType(t.type), "-", t.index);
  ports_[{t.type, t.index}] = port;
  return task;
}

}  // namespace kubetrain::local
