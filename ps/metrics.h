// The parameter server's Prometheus metrics (docs/architecture.md §5.9). Labels are bounded: RPC
// method and gRPC code only, never a step or a variable name.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kubetrain::ps {

// Owns nothing but references into `registry`, which must outlive it. Thread-safe: prometheus-cpp
// metrics are atomic and Family::Add locks.
class PsMetrics {
 public:
  explicit PsMetrics(prometheus::Registry& registry);

  void CountRequest(absl::string_view method, absl::string_view code);
  void AddReceivedBytes(uint64_t bytes) { received_bytes_.Increment(static_cast<double>(bytes)); }
  void AddSentBytes(uint64_t bytes) { sent_bytes_.Increment(static_cast<double>(bytes)); }
  void ObserveUpdateSeconds(double seconds) { update_duration_.Observe(seconds); }
  void SetGlobalStep(int64_t step) { global_step_.Set(static_cast<double>(step)); }
  void CountStaleGradient() { stale_dropped_.Increment(); }
  void SetParameterBytes(uint64_t bytes) { parameter_bytes_.Set(static_cast<double>(bytes)); }
  void CountNonFiniteRejected() { nonfinite_rejected_.Increment(); }
  void AddSharedMemoryBytes(uint64_t bytes) { shm_bytes_.Increment(static_cast<double>(bytes)); }
  void SetSharedMemoryRegions(size_t regions) { shm_regions_.Set(static_cast<double>(regions)); }

  double stale_gradients_dropped() const { return stale_dropped_.Value(); }

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& received_bytes_;
  prometheus::Counter& sent_bytes_;
  prometheus::Histogram& update_duration_;
  prometheus::Gauge& global_step_;
  prometheus::Counter& stale_dropped_;
  prometheus::Gauge& parameter_bytes_;
  prometheus::Counter& nonfinite_rejected_;
  prometheus::Counter& shm_bytes_;
  prometheus::Gauge& shm_regions_;
};

}  // namespace kubetrain::ps
