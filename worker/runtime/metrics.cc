#include "worker/runtime/metrics.h"

namespace kubetrain::worker {
namespace {

using prometheus::Labels;

Labels Base(const MetricLabels& l) {
  return {{"job", l.job}, {"role", l.role}, {"index", l.index}, {"device", l.device}};
}

prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help, const MetricLabels& l) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(Base(l));
}

// The byte counters say what the bytes were: float32 or 16-bit floats.
prometheus::Counter& Bytes(prometheus::Registry& r, const std::string& name,
                           const std::string& help, const MetricLabels& l) {
  Labels labels = Base(l);
  labels["compression"] = l.compression;
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name, const std::string& help,
                         const MetricLabels& l) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(Base(l));
}

prometheus::Histogram& Seconds(prometheus::Registry& r, const std::string& name,
                               const std::string& help, const MetricLabels& l) {
  // 0.5 ms to ~30 s: a CPU MLP step is ~1 ms, a synchronous pull can wait for a slow peer.
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(Base(l), kBuckets);
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r, const MetricLabels& l)
    : steps(Counter(r, "kubetrain_worker_steps_total", "Training steps this worker completed.", l)),
      examples(Counter(r, "kubetrain_worker_examples_total", "Training examples processed.", l)),
      sent_bytes(Bytes(r, "kubetrain_worker_sent_bytes_total",
                       "Gradient bytes sent: pushed to the ps, or sent by the all-reduce "
                       "(compression: none, fp16 or bf16 on the wire).",
                       l)),
      received_bytes(Bytes(r, "kubetrain_worker_received_bytes_total",
                           "Parameter bytes pulled (compression: none, fp16 or bf16 on the wire).",
                           l)),
      stale_pushes(Counter(r, "kubetrain_worker_stale_pushes_total",
                           "Pushes a ps dropped as stale (sync mode).", l)),
      recoveries(Counter(r, "kubetrain_worker_recoveries_total",
                         "Times training waited for an unavailable or refilled ps.", l)),
      overlapped_buffers(
          Counter(r, "kubetrain_worker_allreduce_overlapped_buffers_total",
                  "Fused gradient buffers whose all-reduce started while backward still ran "
                  "(--overlap-allreduce).",
                  l)),
      loss(Gauge(r, "kubetrain_worker_loss", "Training loss of the latest step.", l)),
      accuracy(Gauge(r, "kubetrain_worker_accuracy", "Latest test-set accuracy (chief).", l)),
      epoch(Gauge(r, "kubetrain_worker_epoch", "Current epoch.", l)),
      global_step(Gauge(r, "kubetrain_worker_global_step", "Global step of the ps.", l)),
      workers(Gauge(r, "kubetrain_worker_members",
                    "Elastic jobs: training workers in the parameter servers' membership.", l)),
      examples_per_second(Gauge(r, "kubetrain_worker_examples_per_second",
                                "Training throughput of the whole job as seen by this task.", l)),
      step_duration(Seconds(r, "kubetrain_worker_step_duration_seconds",
                            "Wall time of one training step, communication included.", l)),
      push_duration(Seconds(r, "kubetrain_worker_push_duration_seconds",
                            "Time to push gradients to every ps.", l)),
      pull_duration(Seconds(r, "kubetrain_worker_pull_duration_seconds",
                            "Time to pull parameters from every ps, waiting included.", l)),
      push_pull_duration(
          Seconds(r, "kubetrain_worker_push_pull_duration_seconds",
                  "Time to push gradients to every ps and pull the parameters back in one call "
                  "(PushAndPull, a step's exchange), waiting included.",
                  l)),
      allreduce_duration(Seconds(r, "kubetrain_worker_allreduce_duration_seconds",
                                 "Time to all-reduce one step's gradients and apply the update "
                                 "(all-reduce mode; not observed where the reduction runs "
                                 "inside the step: NCCL).",
                                 l)) {
  // Constant 1; the labels say which backend and hardware this task trains on.
  Labels info = Base(l);
  info["name"] = l.device_name.empty() ? l.device : l.device_name;
  info["reason"] = l.device_reason.empty() ? "unknown" : l.device_reason;
  prometheus::BuildGauge()
      .Name("kubetrain_worker_device_info")
      .Help(
          "The compute device of this task (value 1; see the device and name labels) and why "
          "(reason: requested, gpu, or why --device=auto fell back to the CPU).")
      .Register(r)
      .Add(info)
      .Set(1);
}

}  // namespace kubetrain::worker
