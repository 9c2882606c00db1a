// The worker's Prometheus metrics (kubetrain_worker_*). Labels are bounded: job, role, index,
// device; never a step number. Families are registered on the registry passed in, which must
// outlive this object. Thread-safe (prometheus-cpp metrics are).
#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kubetrain::worker {

struct MetricLabels {
  std::string job;
  std::string role;  // chief, worker, evaluator
  std::string index;
  std::string device = "cpu";  // the backend: cpu or cuda
  std::string device_name;     // what it runs on, for kubetrain_worker_device_info (may be empty)
  // Why this device, for kubetrain_worker_device_info: "requested", "gpu", or why --device=auto
  // fell back to the CPU ("no-gpu", "no-driver", "driver-too-old", ...; DeviceDecision::reason).
  std::string device_reason;
  // --gradient-compression as it applies (none where the link carries float32): the
  // `compression` label of the sent and received byte counters.
  std::string compression = "none";
};

class WorkerMetrics {
 public:
  WorkerMetrics(prometheus::Registry& registry, const MetricLabels& labels);

  prometheus::Counter& steps;
  prometheus::Counter& examples;
  prometheus::Counter& sent_bytes;
  prometheus::Counter& received_bytes;
  prometheus::Counter& stale_pushes;
  prometheus::Counter& recoveries;
  prometheus::Counter& overlapped_buffers;  // --overlap-allreduce
  prometheus::Gauge& loss;
  prometheus::Gauge& accuracy;
  prometheus::Gauge& epoch;
  prometheus::Gauge& global_step;
  prometheus::Gauge& workers;  // elastic jobs: the members the ps count
  prometheus::Gauge& examples_per_second;
  prometheus::Histogram& step_duration;
  prometheus::Histogram& push_duration;
  prometheus::Histogram& pull_duration;
  prometheus::Histogram& push_pull_duration;
  prometheus::Histogram& allreduce_duration;
};

}  // namespace kubetrain::worker
