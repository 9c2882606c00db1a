#include "operator/controller/controller.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "operator/api/types.h"

namespace kubetrain::controller {

using nlohmann::json;

namespace {

kube::InformerOptions Owned(const std::string& ns) {
  kube::InformerOptions o;
  o.namespace_ = ns;
  // Only the objects this operator made: the caches stay small on a busy cluster.
  o.label_selector = absl::StrCat(api::kLabelManagedBy, "=", api::kManagedByValue);
  return o;
}

}  // namespace

Controller::Controller(kube::Client& client, ControllerOptions options, OperatorMetrics* metrics)
    : client_(client),
      options_(std::move(options)),
      metrics_(metrics),
      jobs_(client, kube::Resource::TrainingJobs(), {.namespace_ = options_.namespace_}),
      pods_(client, kube::Resource::Pods(), Owned(options_.namespace_)),
      services_(client, kube::Resource::Services(), Owned(options_.namespace_)),
      events_(client, "kubetrain-operator"),
      reconciler_(client, jobs_, pods_, services_, events_, metrics, options_.reconciler) {
  jobs_.AddHandlers({[this](const json& o) { queue_.Add(kube::ObjectKey(o)); },
                     [this](const json&, const json& o) { queue_.Add(kube::ObjectKey(o)); },
                     [this](const json& o) { queue_.Add(kube::ObjectKey(o)); }});
  kube::EventHandlers owner{[this](const json& o) { EnqueueOwner(o); },
                            [this](const json&, const json& o) { EnqueueOwner(o); },
                            [this](const json& o) { EnqueueOwner(o); }};
  pods_.AddHandlers(owner);
  services_.AddHandlers(owner);
}

Controller::~Controller() { Stop(); }

void Controller::EnqueueOwner(const json& obj) {
  const json& meta = obj["metadata"];
  std::string job = meta.value("labels", json::object()).value(api::kLabelJobName, "");
  if (!job.empty()) queue_.Add(meta.value("namespace", "default") + "/" + job);
}

absl::Status Controller::Start() {
  jobs_.Start();
  pods_.Start();
  services_.Start();
  for (kube::Informer* inf : {&jobs_, &pods_, &services_}) {
    if (!inf->WaitForSync(options_.sync_timeout)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "informer caches did not sync within ", absl::FormatDuration(options_.sync_timeout),
          "; is the TrainingJob CRD installed and may the operator list it?"));
    }
  }
  ready_ = true;
  log::Info("Caches synced; starting workers",
            {{"workers", options_.workers},
             {"namespace", options_.namespace_.empty() ? "(all)" : options_.namespace_}});
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  return absl::OkStatus();
}

void Controller::Stop() {
  queue_.ShutDown();
  for (auto& t : workers_) t.join();
  workers_.clear();
  jobs_.Stop();
  pods_.Stop();
  services_.Stop();
  ready_ = false;
}

void Controller::Work() {
  while (std::optional<std::string> key = queue_.Get()) {
    absl::Time start = absl::Now();
    absl::StatusOr<ReconcileResult> result = reconciler_.Reconcile(*key);
    if (metrics_) {
      metrics_->ReconcileDone(absl::ToDoubleSeconds(absl::Now() - start), result.ok());
      metrics_->QueueDepth(static_cast<double>(queue_.Len()));
    }
    if (!result.ok()) {
      // Conflicts are routine (a stale cache); anything else is worth a warning.
      if (result.status().code() == absl::StatusCode::kAborted) {
        log::Debug("Reconcile conflict; retrying", {{"job", *key}, {"error", result.status()}});
      } else {
        log::Warn("Reconcile failed; retrying", {{"job", *key}, {"error", result.status()}});
      }
      queue_.AddRateLimited(*key);
    } else {
      queue_.Forget(*key);
      if (result->requeue_after) queue_.AddAfter(*key, *result->requeue_after);
    }
    queue_.Done(*key);
  }
}

}  // namespace kubetrain::controller
