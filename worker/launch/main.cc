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
#include "common/logging.h"
#include "common/metrics.h"
#include "common/program.h"
#include "common/status.h"
#include "common/stop_signal.h"
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
#include "worker/launch/options.h"
#include "worker/launch/placement.h"
#include "worker/runtime/metrics.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::worker {
namespace {

std::atomic<bool> g_stop{false};

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
  if (id.role == Role::kChief) {
    ASSIGN_OR_RETURN(c.coordinator,
                     CoordinatorServer::Start({.address = JoinHostPort(o.bind_address, chief_port),
                                               .world_size = id.num_workers,
                                               .secret = o.trainer.job_secret,
                                               .min_members = o.trainer.min_workers,
                                               .member_timeout = o.trainer.member_timeout}));
    dial = JoinHostPort(IsWildcardHost(o.bind_address) ? "127.0.0.1" : o.bind_address, chief_port);
  }
  ASSIGN_OR_RETURN(c.store, CoordinatorClient::Connect({.address = dial,
                                                        .rank = id.rank,
                                                        .world_size = id.num_workers,
                                                        .elastic = o.trainer.elastic,
                                                        .connect_timeout = o.trainer.ready_timeout,
                                                        .stop = &g_stop,
                                                        .secret = o.trainer.job_secret}));
  ASSIGN_OR_RETURN(std::string kind, CommunicatorFor(o.communicator, device.name()));
  // Each generation of an elastic job's members connects a communicator of its own through this
  // (docs/architecture.md §5.10); a fixed-size job connects one.
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  const std::string host = GlooHost(o, r, hostname);
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
  if (device.HostAddressable()) {
    if (std::string advice = BlasKernelAdviceHere(); !advice.empty()) {
      log::Warn("Matrix products run slower than this CPU allows",
                {{"blas_kernels", BlasCoreName()}, {"fix", advice}});
    }
  }
}

absl::Status Main(int argc, char** argv, int* exit_code) {
  ASSIGN_OR_RETURN(Options o, ParseFlags(argc, argv));
  // The task's place first: its rank and its peers' hosts choose its GPU.
  ASSIGN_OR_RETURN(TaskPlace place, Identify(o));
  TaskIdentity& id = place.id;
  ASSIGN_OR_RETURN(ChosenDevice chosen, MakeDevice(DeviceRequestFor(o, place, ReadDeviceEnv())));
  std::unique_ptr<Device> device = std::move(chosen.device);
  const std::string device_name = DescribeDevice(*device);
  LogDevice(chosen, *device, device_name);
  if (o.precision == Precision::kBFloat16 && device->HostAddressable()) {
    log::Warn(
        "--precision=bf16 on the CPU rounds every GEMM's operands in software: a GPU's bf16 "
        "numbers, more slowly than fp32",
        {{"fix", "--precision=fp32, unless this run checks a model's accuracy in bf16"}});
  }
  if (o.trainer.mode == Mode::kAllReduce) {
    RETURN_IF_ERROR(CommunicatorFor(o.communicator, device->name()).status());
  }
  if (id.role == Role::kChief && o.trainer.checkpoint_dir.empty()) {
    // A folder per user: one user's would refuse another's (worker/runtime/checkpoint_dir.h).
    const char* tmp = std::getenv("TMPDIR");
    o.trainer.checkpoint_dir =
        absl::StrCat(tmp ? tmp : "/tmp", "/kubetrain-", geteuid(), "/", o.job_name, "/checkpoints");
  }
  o.trainer.summary_dir = SummaryDirFor(o.trainer, id.role);
  log::Info("Starting kubetrain-worker", {{"role", RoleName(id.role)},
                                          {"rank", id.rank},
                                          {"workers", id.num_workers},
                                          {"ps", absl::StrJoin(id.ps_addresses, ",")},
                                          {"model", o.trainer.model},
                                          {"mode", o.mode},
                                          {"precision", PrecisionName(o.precision)}});
  // The chief's checkpoint directory, checked, made private, probed and locked before the data
  // loads, and held (locked) until the process ends; its Checkpointer shares it.
  std::shared_ptr<CheckpointDir> checkpoint_dir;
  if (id.role == Role::kChief) {
    ASSIGN_OR_RETURN(checkpoint_dir, CheckpointDir::Open(o.trainer.checkpoint_dir, o.job_name));
    if (!o.checkpoint_durable) {
      // A pod recreated (suspend and resume, a replica change, eviction, a lost node) starts
      // with an empty directory, so training restarts from step 0 (docs/architecture.md §10).
      log::Warn(
          "Checkpoints are inside the pod and are lost when it is recreated; give the job "
          "spec.checkpoint (a PersistentVolumeClaim) to resume from them",
          {{"dir", o.trainer.checkpoint_dir}});
    }
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
                         std::string(device->name()), device_name, chosen.decision.reason,
                         std::string(ps::WireFloatName(o.trainer.gradient_compression))});
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
    absl::StatusOr<Collective> connected = ConnectCollective(o, id, place.rendezvous, *device);
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
  kubetrain::SetUpProgram();
  kubetrain::SetUpLargeMessageAllocator();
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
