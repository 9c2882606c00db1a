#include "ps/metrics.h"

#include <string>

namespace kubetrain::ps {
namespace {

prometheus::Counter& Counter(prometheus::Registry& registry, const std::string& name,
                             const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge& Gauge(prometheus::Registry& registry, const std::string& name,
                         const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

// Updates of a 4 MiB partition take ~1 ms; a whole-shard sync apply can take far longer.
prometheus::Histogram::BucketBoundaries UpdateBuckets() {
  return {0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
}

}  // namespace

PsMetrics::PsMetrics(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("kubetrain_ps_requests_total")
                    .Help("RPCs answered by the parameter server, by method and gRPC code.")
                    .Register(registry)),
      received_bytes_(Counter(registry, "kubetrain_ps_received_bytes_total",
                              "Bytes of request messages received.")),
      sent_bytes_(
          Counter(registry, "kubetrain_ps_sent_bytes_total", "Bytes of response messages sent.")),
      update_duration_(prometheus::BuildHistogram()
                           .Name("kubetrain_ps_update_duration_seconds")
                           .Help("Time to apply one optimizer update to this shard.")
                           .Register(registry)
                           .Add({}, UpdateBuckets())),
      global_step_(Gauge(registry, "kubetrain_ps_global_step", "This shard's global step.")),
      stale_dropped_(Counter(registry, "kubetrain_ps_stale_gradients_dropped_total",
                             "Sync-mode gradients dropped because their step was behind.")),
      parameter_bytes_(Gauge(registry, "kubetrain_ps_parameter_bytes",
                             "Bytes of variable values held by this shard (slots excluded).")),
      nonfinite_rejected_(Counter(registry, "kubetrain_ps_nonfinite_rejected_total",
                                  "Pushes and Inits refused for a NaN or infinite value.")),
      shm_bytes_(Counter(registry, "kubetrain_ps_shared_memory_bytes_total",
                         "Tensor bytes pushed and pulled through workers' shared memory "
                         "(docs/architecture.md §5.11), not through the socket.")),
      shm_regions_(Gauge(registry, "kubetrain_ps_shared_memory_regions",
                         "Workers' shared-memory regions this ps has mapped.")) {}

void PsMetrics::CountRequest(absl::string_view method, absl::string_view code) {
  requests_.Add({{"method", std::string(method)}, {"code", std::string(code)}}).Increment();
}

}  // namespace kubetrain::ps
