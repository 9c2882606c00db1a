#include "operator/controller/metrics.h"

namespace kubetrain::controller {
namespace {

prometheus::Family<prometheus::Counter>& Counter(prometheus::Registry& r, const std::string& name,
                                                 const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

}  // namespace

OperatorMetrics::OperatorMetrics(prometheus::Registry& r)
    : created_(Counter(r, "kubetrain_operator_jobs_created_total", "TrainingJobs seen created.")),
      succeeded_(Counter(r, "kubetrain_operator_jobs_succeeded_total", "TrainingJobs succeeded.")),
      failed_(Counter(r, "kubetrain_operator_jobs_failed_total", "TrainingJobs failed.")),
      restarted_(Counter(r, "kubetrain_operator_jobs_restarted_total",
                         "Pod or job restarts made by the operator.")),
      api_requests_(Counter(r, "kubetrain_operator_api_requests_total",
                            "Kubernetes API requests by verb and HTTP code (0: no answer).")),
      reconciles_(Counter(r, "kubetrain_operator_reconciles_total", "Reconciles by result.")),
      reconcile_duration_(
          prometheus::BuildHistogram()
              .Name("kubetrain_operator_reconcile_duration_seconds")
              .Help("Time to reconcile one TrainingJob.")
              .Register(r)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                               0.25, 0.5, 1, 2.5, 5})),
      queue_depth_(prometheus::BuildGauge()
                       .Name("kubetrain_operator_queue_depth")
                       .Help("TrainingJobs waiting to be reconciled.")
                       .Register(r)
                       .Add({})) {}

void OperatorMetrics::ApiRequest(const std::string& verb, int code) {
  api_requests_.Add({{"verb", verb}, {"code", std::to_string(code)}}).Increment();
}

void OperatorMetrics::ReconcileDone(double seconds, bool ok) {
  reconcile_duration_.Observe(seconds);
  reconciles_.Add({{"result", ok ? "success" : "error"}}).Increment();
}

}  // namespace kubetrain::controller
