// The operator's Prometheus metrics (kubetrain_operator_*). Families live on the registry passed
// in, which must outlive this object. Thread-safe.
#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kubetrain::controller {

class OperatorMetrics {
 public:
  explicit OperatorMetrics(prometheus::Registry& registry);

  void JobCreated(const std::string& ns) { created_.Add({{"namespace", ns}}).Increment(); }
  void JobSucceeded(const std::string& ns) { succeeded_.Add({{"namespace", ns}}).Increment(); }
  void JobFailed(const std::string& ns) { failed_.Add({{"namespace", ns}}).Increment(); }
  void JobRestarted(const std::string& ns) { restarted_.Add({{"namespace", ns}}).Increment(); }
  void ApiRequest(const std::string& verb, int code);
  void ReconcileDone(double seconds, bool ok);
  void QueueDepth(double depth) { queue_depth_.Set(depth); }

 private:
  prometheus::Family<prometheus::Counter>& created_;
  prometheus::Family<prometheus::Counter>& succeeded_;
  prometheus::Family<prometheus::Counter>& failed_;
  prometheus::Family<prometheus::Counter>& restarted_;
  prometheus::Family<prometheus::Counter>& api_requests_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Gauge& queue_depth_;
};

}  // namespace kubetrain::controller
