#include "worker/launch/options.h"

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/job_secret.h"
#include "common/logging.h"
#include "common/status.h"

namespace kubetrain::worker {

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
  f.Add("model", &t.model, "mlp, cnn, or mlp:W1,W2,... (an MLP with those hidden widths)");
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
  f.Add("checkpoint-durable", &o.checkpoint_durable,
        "chief: whether --checkpoint-dir outlives the pod (set by the operator: false when it is "
        "in the pod's own filesystem, and the chief warns at start)",
        "KUBETRAIN_CHECKPOINT_DURABLE");
  f.Add(
      "summary-dir", &t.summary_dir,
      "chief and evaluator: where TensorBoard event files go (default <checkpoint-dir>/summaries; "
      "the evaluator's in its eval/ folder)",
      "KUBETRAIN_SUMMARY_DIR");
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
        "TF32 on GPU tensor cores (Ampere and later; ~1e-3 relative error per product): unset, "
        "convolutions only (as PyTorch); true, GEMMs too; false, neither (true is an error on "
        "the CPU)",
        "KUBETRAIN_TF32");
  f.Add("cuda-graphs", &o.cuda_graphs,
        "capture each training step in one CUDA graph after a warm-up step at its batch size and "
        "replay it (one launch per step); unset, on where the task runs on a GPU (true is an "
        "error on the CPU)",
        "KUBETRAIN_CUDA_GRAPHS");
  std::string precision = PrecisionName(o.precision);
  f.Add("precision", &precision,
        "fp32, or bf16: GEMMs and convolutions read bf16 operands and sum in float32; master "
        "weights, their updates and the loss stay float32 (GPUs of compute capability 8.0 and "
        "later; on the CPU the same rounding in software, slower, to check a model's accuracy)",
        "KUBETRAIN_PRECISION");
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
  f.Add("gradient-compression", &o.gradient_compression,
        "none, fp16 or bf16: gradients (and, ps modes, pulled parameters) cross the network "
        "as 16-bit floats, half the bytes; sums and updates stay float32",
        "KUBETRAIN_GRADIENT_COMPRESSION");
  f.Add("overlap-allreduce", &t.overlap_allreduce,
        "allreduce on the CPU over Gloo: sum each fused buffer as soon as backward has "
        "computed its gradients, last layer first, while backward goes on (the first buffer "
        "closes once it holds 1 MiB, as DDP's first bucket; a --fusion-threshold-mb below the "
        "model's size cuts the rest finer)",
        "KUBETRAIN_OVERLAP_ALLREDUCE");
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
  if (std::optional<ps::WireFloat> wire = ps::ParseWireFloat(o.gradient_compression)) {
    t.gradient_compression = *wire;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--gradient-compression: unsupported value \"",
                                                   o.gradient_compression,
                                                   "\"; allowed: ", ps::WireFloatNames()));
  }
  ASSIGN_OR_RETURN(o.precision, PrecisionFromFlag(precision));
  if (o.collective_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--collective-timeout: must be > 0");
  }
  t.fusion_bytes = int64_t{o.fusion_threshold_mb} << 20;
  // The device decides: the CPU's steps run as issued whatever this says.
  t.step_graphs = o.cuda_graphs.value_or(true);
  RETURN_IF_ERROR(log::SetLevelFlag(o.log_level));
  RETURN_IF_ERROR(ValidateOptions(t));
  return o;
}

}  // namespace kubetrain::worker
