// kubetrain-worker: one chief, worker or evaluator task of a TrainingJob. Reads its place in the
// job from TF_CONFIG (or --ps/--worker-index/--num-workers), trains against the parameter
// servers or, with --mode allreduce, with its peers, and exits 0 when training is over. The chief
// prints one JSON summary line on stdout.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flags.h"
#include "common/host_port.h"
#include "common/hosts.h"
#include "common/job_secret.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/stop_signal.h"
#include "operator/api/tf_config.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/elastic_group.h"
#include "worker/collective/gloo_communicator.h"
#include "worker/collective/shm_communicator.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/runtime/checkpoint_dir.h"
#ifdef KUBETRAIN_HAVE_CUDA
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/nccl_communicator.h"
#endif
#include "worker/core/data/fashion_mnist.h"
#include "worker/core/device_choice.h"
#include "worker/device/device_factory.h"
#include "worker/runtime/metrics.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::worker {
namespace {

std::atomic<bool> g_stop{false};

struct Options {
  TrainerOptions trainer;
  std::string mode = "ps-sync";
  std::string device = "auto";
  int cuda_device = -1;  // -1: chosen from LOCAL_RANK or TF_CONFIG (worker/core/device_choice.h)
  bool tf32 = false;
  std::string data_dir = std::string(kDefaultFashionMnistDir);
  std::string tf_config;
  std::vector<std::string> ps;
  int worker_index = 0;
  int num_workers = 1;
  std::string job_name = "job";
  std::string bind_address = "0.0.0.0";
  int metrics_port = 8080;
  int threads = 1;
  std::string log_level = "info";
  // All-reduce mode.
  std::string communicator = "auto";
  bool bind_cpus = true;
  absl::Duration collective_timeout = absl::Minutes(5);
  int fusion_threshold_mb = 64;
  std::string coordinator;  // without TF_CONFIG: the chief's coordinator host:port
};

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  TrainerOptions& t = o.trainer;
  FlagSet f("kubetrain-worker",
            "Trains a model on Fashion-MNIST against kubetrain-ps parameter servers, as the\n"
            "chief, a worker or an evaluator of a TrainingJob (its place comes from TF_CONFIG).");
  f.Add("mode", &o.mode,
        "ps-sync, ps-async (parameter servers) or allreduce (workers only: Gloo on CPU, NCCL "
        "on GPU)",
        "KUBETRAIN_MODE");
  f.Add("model", &t.model, "mlp or cnn");
  f.Add("epochs", &t.epochs, "passes over the training set");
  f.Add("batch-size", &t.batch_size, "examples per step per worker");
  f.Add("lr", &t.lr, "learning rate for a global batch of --lr-reference-batch examples");
  f.Add("lr-reference-batch", &t.lr_reference_batch,
        "linear scaling: lr x global batch / this; 0 uses --lr as is");
  f.Add("warmup-steps", &t.warmup_steps, "linear learning-rate warmup over this many updates");
  f.Add("lr-decay", &t.lr_decay,
        "cosine learning-rate decay over the run (--no-lr-decay: constant)");
  f.Add("lr-floor", &t.lr_floor, "with --lr-decay, the final rate as a fraction of --lr");
  f.Add("optimizer", &t.optimizer, "sgd, momentum, adam or adagrad");
  f.Add("momentum", &t.momentum, "momentum of the momentum optimizer");
  f.Add("seed", &t.seed, "seed of initialisation and shuffling (same on every task)");
  f.Add("data-dir", &o.data_dir, "Fashion-MNIST IDX files (.gz)", "KUBETRAIN_DATA_DIR");
  f.Add("checkpoint-dir", &t.checkpoint_dir,
        "chief: where checkpoints go, a folder of this user's (default "
        "$TMPDIR/kubetrain-<uid>/<job>/checkpoints)",
        "KUBETRAIN_CHECKPOINT_DIR");
  f.Add("checkpoint-every", &t.checkpoint_every, "chief: time between checkpoints");
  f.Add("keep-checkpoints", &t.keep_checkpoints, "chief: checkpoints kept");
  f.Add("log-every", &t.log_every, "chief: time between progress lines");
  f.Add("eval-every", &t.eval_every, "evaluator: time between evaluations");
  f.Add("ready-timeout", &t.ready_timeout, "how long to wait for the parameter servers");
  f.Add("device", &o.device, "auto (CUDA when a GPU is visible, else the CPU), cpu or cuda",
        "KUBETRAIN_DEVICE");
  f.Add("cuda-device", &o.cuda_device,
        "the CUDA device (ordinal among the visible ones) to use; -1: the local rank "
        "(LOCAL_RANK, else this task's place among the job's ranks on its TF_CONFIG host), "
        "else 0",
        "KUBETRAIN_CUDA_DEVICE")
      .Range(-1, 1023);
  f.Add("tf32", &o.tf32,
        "GPU GEMMs on tensor cores in TF32 (faster on Ampere and later, ~1e-3 relative error "
        "per product; an error on the CPU)",
        "KUBETRAIN_TF32");
  f.Add("threads", &o.threads, "OpenBLAS threads (1: ps and workers share the cores)");
  f.Add("tf-config", &o.tf_config, "cluster spec (TensorFlow's TF_CONFIG JSON)", "TF_CONFIG");
  f.Add("ps", &o.ps, "without TF_CONFIG: a ps address host:port (repeat for each)");
  f.Add("worker-index", &o.worker_index, "without TF_CONFIG: this worker's index (0 = chief)");
  f.Add("num-workers", &o.num_workers, "without TF_CONFIG: number of training workers");
  f.Add("job-name", &o.job_name, "job name for metric labels and paths", "KUBETRAIN_JOB_NAME");
  f.Add("bind-address", &o.bind_address, "address the metrics server binds",
        "KUBETRAIN_BIND_ADDRESS");
  f.Add("metrics-port", &o.metrics_port, "Prometheus /metrics port (0: any)",
        "KUBETRAIN_METRICS_PORT")
      .Port();
  f.Add("log-level", &o.log_level, "debug, info, warn or error", "KUBETRAIN_LOG_LEVEL");
  f.Add("communicator", &o.communicator,
        "allreduce: auto (nccl on a CUDA device; on the CPU shm when every rank shares this "
        "host's shared memory, else gloo), gloo, shm or nccl");
  f.Add("bind-cpus", &o.bind_cpus,
        "allreduce on the CPU: ranks on one host keep to shares of their own of the CPUs they "
        "may all use, where there are as many as ranks (false: the kernel places them)",
        "KUBETRAIN_BIND_CPUS");
  f.Add("collective-timeout", &o.collective_timeout,
        "allreduce: a rendezvous or collective that takes longer fails (a lost peer)");
  f.Add("fusion-threshold-mb", &o.fusion_threshold_mb,
        "allreduce: gradients are fused into buffers of at most this many MiB");
  f.Add("coordinator", &o.coordinator,
        "allreduce without TF_CONFIG: the chief's rendezvous address host:port (the chief "
        "listens on its port)");
  f.Add("backup-workers", &t.backup_workers,
        "ps-sync: each step applies the first (training workers - N) gradients and drops the "
        "late ones as stale, so the slowest workers do not pace the job",
        "KUBETRAIN_BACKUP_WORKERS");
  f.Add("elastic", &t.elastic,
        "ps modes: the job changes size while it runs; the parameter servers' membership, not "
        "TF_CONFIG's worker count, decides each step's quota and each epoch's data shards",
        "KUBETRAIN_ELASTIC");
  f.Add("elastic-min-workers", &t.min_workers,
        "elastic ps-sync: the job's minimum size in training workers (chief included); below "
        "it a step waits for workers to come back",
        "KUBETRAIN_ELASTIC_MIN_WORKERS")
      .Range(1, 100000);
  f.Add("member-timeout", &t.member_timeout,
        "elastic: a worker not heard from for this long has left (a killed pod)",
        "KUBETRAIN_MEMBER_TIMEOUT");
  f.Add("inject-delay", &t.inject_delay,
        "testing: added to every step of this worker (a slow worker)", "KUBETRAIN_INJECT_DELAY");
  f.Add("ps-shared-memory", &t.ps_shared_memory,
        "ps modes: push and pull through shared memory with each ps on this host (false: "
        "always gRPC bytes)",
        "KUBETRAIN_PS_SHARED_MEMORY");
  f.Add("job-secret", &t.job_secret,
        "the job's shared secret sent with every ps and coordinator call (prefer the "
        "environment variable: a flag shows in the process list)",
        kJobSecretEnv);
  ASSIGN_OR_RETURN(std::vector<std::string> rest, f.Parse(argc, argv));
  if (!rest.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", rest[0], "\""));
  }
  RETURN_IF_ERROR(ValidateJobSecret(t.job_secret));
  if (o.mode == "ps-sync") {
    t.mode = Mode::kPsSync;
  } else if (o.mode == "ps-async") {
    t.mode = Mode::kPsAsync;
  } else if (o.mode == "allreduce") {
    t.mode = Mode::kAllReduce;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--mode: unsupported value \"", o.mode,
                                                   "\"; allowed: ps-sync, ps-async, allreduce"));
  }
  if (o.communicator != "auto" && o.communicator != "gloo" && o.communicator != "shm" &&
      o.communicator != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat("--communicator: unsupported value \"",
                                                   o.communicator,
                                                   "\"; allowed: auto, gloo, shm, nccl"));
  }
  if (o.fusion_threshold_mb < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fusion-threshold-mb: must be >= 1, got ", o.fusion_threshold_mb));
  }
  if (o.collective_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--collective-timeout: must be > 0");
  }
  t.fusion_bytes = int64_t{o.fusion_threshold_mb} << 20;
  RETURN_IF_ERROR(log::SetLevelFlag(o.log_level));
  RETURN_IF_ERROR(ValidateOptions(t));
  return o;
}

// Cluster-spec addresses this task needs: the all-reduce rendezvous, and every rank's (to tell
// which ranks share this task's host when choosing its GPU).
struct Rendezvous {
  std::string chief;               // the coordinator: the chief's cluster-spec address
  std::string self;                // this task's own address
  std::vector<std::string> ranks;  // TF_CONFIG: every training rank's address, in rank order
};

// Where this task stands in the job, from TF_CONFIG or the equivalent flags.
absl::StatusOr<TaskIdentity> Identify(const Options& o, Rendezvous* rendezvous) {
  TaskIdentity id;
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
    id.resolve = [](const std::string& address) { return ResolveTaskAddress(address); };
    return id;
  }
  if (ps.empty()) {
    return absl::InvalidArgumentError(
        "no parameter servers: TF_CONFIG cluster.ps is empty (or give --ps host:port); "
        "--mode ps-sync and ps-async need at least one ps task");
  }
  id.ps_addresses = ps;
  id.resolve = [](const std::string& address) { return ResolveTaskAddress(address); };
  return id;
}

std::string RoleName(Role r) {
  return r == Role::kChief ? "chief" : r == Role::kEvaluator ? "evaluator" : "worker";
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::";
}

// The address Gloo listens on and advertises: the bind address when it names one (the pod IP in
// a cluster), else this task's own cluster-spec host as resolved, else the machine's host name.
std::string GlooHost(const Options& o, const Rendezvous& r) {
  if (!IsWildcard(o.bind_address)) return o.bind_address;
  std::string host;
  int port;
  if (!r.self.empty() && SplitHostPort(ResolveTaskAddress(r.self), &host, &port).ok()) return host;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// The communicator --communicator names for `device`: NCCL reduces GPU memory; Gloo and the
// shared-memory communicator host memory. "host" is auto on the CPU: shm where every rank shares
// this host's shared memory, else Gloo (docs/architecture.md §5.3).
absl::StatusOr<std::string> CommunicatorFor(const std::string& flag, const Device& device) {
  const bool gpu = device.name() == "cuda";
  const std::string kind = flag == "auto" ? (gpu ? "nccl" : "host") : flag;
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

// The all-reduce connections of this task: the chief starts the coordinator on its cluster-spec
// port; every rank joins it and connects its communicator.
struct Collective {
  std::unique_ptr<CoordinatorServer> coordinator;
  std::unique_ptr<CoordinatorClient> store;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<ElasticGroup> group;  // elastic jobs, instead of `communicator`
};

absl::StatusOr<Collective> ConnectCollective(const Options& o, const TaskIdentity& id,
                                             const Rendezvous& r, Device& device) {
  Collective c;
  std::string chief_host;
  int chief_port = 0;
  RETURN_IF_ERROR(SplitHostPort(r.chief, &chief_host, &chief_port), "the chief's address");
  std::string dial = r.chief;
  std::function<std::string(const std::string&)> resolve = [](const std::string& address) {
    return ResolveTaskAddress(address);
  };
  if (id.role == Role::kChief) {
    ASSIGN_OR_RETURN(c.coordinator,
                     CoordinatorServer::Start({.address = JoinHostPort(o.bind_address, chief_port),
                                               .world_size = id.num_workers,
                                               .secret = o.trainer.job_secret,
                                               .min_members = o.trainer.min_workers,
                                               .member_timeout = o.trainer.member_timeout}));
    dial = JoinHostPort(IsWildcard(o.bind_address) ? "127.0.0.1" : o.bind_address, chief_port);
    resolve = nullptr;
  }
  ASSIGN_OR_RETURN(c.store, CoordinatorClient::Connect({.address = dial,
                                                        .resolve = resolve,
                                                        .rank = id.rank,
                                                        .world_size = id.num_workers,
                                                        .elastic = o.trainer.elastic,
                                                        .connect_timeout = o.trainer.ready_timeout,
                                                        .stop = &g_stop,
                                                        .secret = o.trainer.job_secret}));
  ASSIGN_OR_RETURN(std::string kind, CommunicatorFor(o.communicator, device));
  // Each generation of an elastic job's members connects a communicator of its own through this
  // (docs/architecture.md §5.10); a fixed-size job connects one.
  const std::string host = GlooHost(o, r);
  CommunicatorFactory factory = [&, kind, host](
                                    KeyValueStore& store, int rank,
                                    int size) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    if (kind == "nccl") {  // only ever on a CUDA device, so only in a build with CUDA
#ifdef KUBETRAIN_HAVE_CUDA
      auto& gpu = static_cast<CudaDevice&>(device);
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl =
          NcclCommunicator::Create(gpu, store, rank, size, o.collective_timeout, &g_stop);
      // Two ranks on one GPU surface here, as NCCL's "Duplicate GPU detected".
      if (!nccl.ok()) return ExplainDuplicateGpu(nccl.status(), gpu.ordinal());
      return std::unique_ptr<Communicator>(std::move(*nccl));
#endif
    }
    if (kind == "host" || kind == "shm") {
      ASSIGN_OR_RETURN(std::unique_ptr<ShmCommunicator> shm,
                       ShmCommunicator::TryCreate(store, {.rank = rank,
                                                          .size = size,
                                                          .timeout = o.collective_timeout,
                                                          .stop = &g_stop,
                                                          .bind_cpus = o.bind_cpus}));
      if (shm != nullptr) return std::unique_ptr<Communicator>(std::move(shm));
      if (kind == "shm") {
        return absl::FailedPreconditionError(
            "--communicator shm: the ranks do not all share this host's shared memory (they run "
            "on other hosts or in pods of their own, or /dev/shm is too small); use "
            "--communicator auto or gloo");
      }
    }
    ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> gloo,
                     GlooCommunicator::Create(store, {.rank = rank,
                                                      .size = size,
                                                      .hostname = host,
                                                      .timeout = o.collective_timeout,
                                                      .stop = &g_stop,
                                                      .bind_cpus = o.bind_cpus}));
    return std::unique_ptr<Communicator>(std::move(gloo));
  };
  if (o.trainer.elastic) {
    c.group = std::make_unique<ElasticGroup>(*c.store, std::move(factory), o.trainer.ready_timeout);
    return c;
  }
  ASSIGN_OR_RETURN(c.communicator, factory(*c.store, id.rank, id.num_workers));
  return c;
}

std::optional<std::string> Env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

DeviceRequest DeviceRequestFor(const Options& o, const TaskIdentity& id, const Rendezvous& r) {
  DeviceRequest request;
  request.kind = o.device;
  request.cpu.blas_threads = o.threads;
  if (o.cuda_device >= 0) request.cuda.flag = o.cuda_device;
  request.tf32 = o.tf32;
  request.cuda.local_rank = Env("LOCAL_RANK");
  request.cuda.cuda_visible_devices = Env("CUDA_VISIBLE_DEVICES");
  request.cuda.rank_addresses = r.ranks;
  request.cuda.rank = id.role == Role::kEvaluator ? -1 : id.rank;
  return request;
}

// The device line every task logs, and a warning when --device=auto could not use a GPU that
// seems to be there (a driver too old for this build's CUDA, a broken driver).
void LogDevice(const ChosenDevice& chosen, const Device& device, const std::string& name) {
  const DeviceDecision& d = chosen.decision;
  if (d.warn) {
    log::Warn("CUDA is unusable; training on the CPU", {{"reason", d.reason},
                                                        {"driver_cuda", chosen.cuda.driver_cuda},
                                                        {"runtime_cuda", chosen.cuda.runtime_cuda},
                                                        {"error", d.fallback}});
  }
  if (chosen.gpu.has_value()) {
    log::Info("Compute device", {{"device", device.name()},
                                 {"name", name},
                                 {"reason", d.reason},
                                 {"cuda_device", chosen.gpu->ordinal},
                                 {"chosen_by", chosen.gpu->source}});
  } else if (!d.fallback.empty()) {
    log::Info(
        "Compute device",
        {{"device", device.name()}, {"name", name}, {"reason", d.reason}, {"why", d.fallback}});
  } else {
    log::Info("Compute device", {{"device", device.name()}, {"name", name}, {"reason", d.reason}});
  }
}

absl::Status Main(int argc, char** argv, int* exit_code) {
  ASSIGN_OR_RETURN(Options o, ParseFlags(argc, argv));
  // The task's place first: its rank and its peers' hosts choose its GPU.
  Rendezvous rendezvous;
  ASSIGN_OR_RETURN(TaskIdentity id, Identify(o, &rendezvous));
  ASSIGN_OR_RETURN(ChosenDevice chosen, MakeDevice(DeviceRequestFor(o, id, rendezvous)));
  std::unique_ptr<Device> device = std::move(chosen.device);
  const std::string device_name = DescribeDevice(*device);
  LogDevice(chosen, *device, device_name);
  if (o.trainer.mode == Mode::kAllReduce) {
    RETURN_IF_ERROR(CommunicatorFor(o.communicator, *device).status());
  }
  if (id.role == Role::kChief && o.trainer.checkpoint_dir.empty()) {
    // A folder per user: one user's would refuse another's (worker/runtime/checkpoint_dir.h).
    const char* tmp = std::getenv("TMPDIR");
    o.trainer.checkpoint_dir =
        absl::StrCat(tmp ? tmp : "/tmp", "/kubetrain-", geteuid(), "/", o.job_name, "/checkpoints");
  }
  log::Info("Starting kubetrain-worker", {{"role", RoleName(id.role)},
                                          {"rank", id.rank},
                                          {"workers", id.num_workers},
                                          {"ps", absl::StrJoin(id.ps_addresses, ",")},
                                          {"model", o.trainer.model},
                                          {"mode", o.mode}});
  // The chief's checkpoint directory, checked, made private, probed and locked before the data
  // loads, and held (locked) until the process ends; its Checkpointer shares it.
  std::shared_ptr<CheckpointDir> checkpoint_dir;
  if (id.role == Role::kChief) {
    ASSIGN_OR_RETURN(checkpoint_dir, CheckpointDir::Open(o.trainer.checkpoint_dir, o.job_name));
  }
  absl::StatusOr<FashionMnist> data = LoadFashionMnist(o.data_dir, &g_stop);
  if (g_stop.load()) {
    log::Info("Stopped by signal while loading the data");
    *exit_code = 128 + SIGTERM;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(data.status());
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> metrics_server,
                   MetricsServer::Start(JoinHostPort(o.bind_address, o.metrics_port)));
  WorkerMetrics metrics(metrics_server->registry(),
                        {o.job_name, RoleName(id.role), std::to_string(id.rank),
                         std::string(device->name()), device_name, chosen.decision.reason});
  Collective collective;  // outlives the trainer, which borrows its communicator
  Trainer trainer(o.trainer, id, *device, &data->train, &data->test, &metrics);
  if (id.role == Role::kChief) {
    // Before it waits for any other task: a chief restarted after its run ended ends it again.
    absl::StatusOr<std::optional<TrainingSummary>> over = trainer.FinishedRun(g_stop);
    RETURN_IF_ERROR(over.status());
    if (over->has_value()) {
      std::cout << (*over)->ToJson().dump() << std::endl;
      *exit_code = 0;
      return absl::OkStatus();
    }
  }
  if (o.trainer.mode == Mode::kAllReduce) {
    absl::StatusOr<Collective> connected = ConnectCollective(o, id, rendezvous, *device);
    if (!connected.ok() && g_stop.load()) {
      log::Info("Stopped by signal while waiting for the rendezvous");
      *exit_code = 128 + SIGTERM;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(connected.status());
    collective = std::move(*connected);
    trainer.UseCollective(collective.communicator.get(), collective.group.get());
  }
  absl::StatusOr<TrainingSummary> summary = trainer.Run(g_stop);
  if (!summary.ok() && g_stop.load()) {
    log::Info("Stopped by signal");
    *exit_code = 128 + SIGTERM;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(summary.status());
  if (id.role == Role::kChief) std::cout << summary->ToJson().dump() << std::endl;
  *exit_code = 0;
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain::worker

int main(int argc, char** argv) {
  // A collective inside Gloo cannot be interrupted (NCCL's waits abort on the flag): the
  // watchdog ends the process if the flag alone has not stopped it in time.
  kubetrain::InstallStopSignals(&kubetrain::worker::g_stop, absl::Milliseconds(1500));
  signal(SIGPIPE, SIG_IGN);
  int exit_code = 1;
  absl::Status s = kubetrain::worker::Main(argc, argv, &exit_code);
  if (kubetrain::HelpRequested(s)) return 0;
  if (!s.ok()) {
    kubetrain::log::Error("kubetrain-worker failed", {{"error", s}});
    std::cerr << "kubetrain-worker: " << s.message() << std::endl;
    return 1;
  }
  return exit_code;
}
