#include "operator/controller/controller.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "operator/api/tfjob.h"
#include "operator/api/types.h"

namespace kubetrain::controller {

using nlohmann::json;

namespace {

kube::InformerOptions Owned(const std::string& ns,
                            std::function<void(json&)> transform = kube::StripForCache) {
  kube::InformerOptions o;
  o.namespace_ = ns;
  // Only the objects this operator made: the caches stay small on a busy cluster.
  o.label_selector = absl::StrCat(api::kLabelManagedBy, "=", api::kManagedByValue);
  o.transform = std::move(transform);
  // Each pass reads its job's pods and Services by the job-name label.
  o.index_labels = {api::kLabelJobName, api::kKubeflowLabelJobName};
  return o;
}

}  // namespace

Controller::Controller(kube::Client& client, ControllerOptions options, OperatorMetrics* metrics)
    : client_(client),
      options_(std::move(options)),
      metrics_(metrics),
      jobs_(client, kube::Resource::TrainingJobs(),
            {.namespace_ = options_.namespace_, .transform = kube::StripForCache}),
      tfjobs_(options_.tfjob ? std::make_unique<kube::Informer>(
                                   client, kube::Resource::TfJobs(),
                                   kube::InformerOptions{.namespace_ = options_.namespace_,
                                                         .transform = kube::StripForCache})
                             : nullptr),
      pods_(client, kube::Resource::Pods(), Owned(options_.namespace_, StripPodForCache)),
      services_(client, kube::Resource::Services(), Owned(options_.namespace_)),
      queue_({.clock = options_.reconciler.clock}),
      events_(client, "kubetrain-operator"),
      progress_({.interval = options_.reconciler.progress_interval,
                 .timeout = options_.reconciler.progress_timeout,
                 .min_write_interval = options_.reconciler.progress_write_interval},
                [this](const std::string& key) { queue_.Add(key); }),
      reconciler_(client, jobs_, pods_, services_, events_, metrics, &progress_,
                  options_.reconciler, tfjobs_.get()) {
  jobs_.AddHandlers({[this](const json& o) { queue_.Add(kube::ObjectKey(o)); },
                     [this](const json&, const json& o) { queue_.Add(kube::ObjectKey(o)); },
                     [this](const json& o) { queue_.Add(kube::ObjectKey(o)); }});
  if (tfjobs_) {
    auto add = [this](const json& o) {
      queue_.Add(absl::StrCat(kTfJobKeyPrefix, kube::ObjectKey(o)));
    };
    tfjobs_->AddHandlers({add, [add](const json&, const json& o) { add(o); }, add});
  }
  kube::EventHandlers owner{[this](const json& o) { EnqueueOwner(o); },
                            [this](const json&, const json& o) { EnqueueOwner(o); },
                            [this](const json& o) { EnqueueOwner(o); }};
  pods_.AddHandlers(owner);
  services_.AddHandlers(owner);
}

Controller::~Controller() { Stop(); }

std::vector<kube::Informer*> Controller::Informers() {
  std::vector<kube::Informer*> all = {&jobs_, &pods_, &services_};
  if (tfjobs_) all.push_back(tfjobs_.get());
  return all;
}

std::vector<const kube::Informer*> Controller::Informers() const {
  std::vector<const kube::Informer*> all = {&jobs_, &pods_, &services_};
  if (tfjobs_) all.push_back(tfjobs_.get());
  return all;
}

void Controller::EnqueueOwner(const json& obj) {
  const json& meta = obj["metadata"];
  const json labels = meta.value("labels", json::object());
  const std::string ns = meta.value("namespace", "default");
  std::string job = labels.value(api::kLabelJobName, "");
  if (!job.empty()) {
    queue_.Add(ns + "/" + job);
    return;
  }
  // A TFJob's pods and Services carry Kubeflow's labels only (api/tfjob.h).
  job = labels.value(api::kKubeflowLabelJobName, "");
  if (!job.empty() && tfjobs_) queue_.Add(absl::StrCat(kTfJobKeyPrefix, ns, "/", job));
}

absl::Status Controller::Start(const std::atomic<bool>* stop) {
  for (kube::Informer* inf : Informers()) inf->Start();
  absl::Time deadline = absl::Now() + options_.sync_timeout;
  auto synced = [this] {
    for (kube::Informer* inf : Informers()) {
      if (!inf->HasSynced()) return false;
    }
    return true;
  };
  while (!synced()) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError("stopped before the informer caches synced");
    }
    for (kube::Informer* inf : Informers()) {
      // Retrying cannot fix a certificate that fails verification: say so now, not in minutes.
      absl::Status e = inf->last_error();
      if (kube::IsTlsVerificationError(e)) return e;
    }
    if (absl::Now() > deadline) return SyncFailure();
    absl::SleepFor(absl::Milliseconds(20));
  }
  ready_ = true;
  log::Info("Caches synced; starting workers",
            {{"workers", options_.workers},
             {"tfjob", options_.tfjob},
             {"namespace", options_.namespace_.empty() ? "(all)" : options_.namespace_}});
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  progress_.Start();
  return absl::OkStatus();
}

absl::Status Controller::SyncFailure() const {
  std::string waited = absl::StrCat("the informer caches did not sync within ",
                                    absl::FormatDuration(options_.sync_timeout));
  for (const kube::Informer* inf : Informers()) {
    if (inf->HasSynced()) continue;
    absl::Status e = inf->last_error();
    if (e.ok()) continue;
    const std::string& plural = inf->resource().plural;
    std::string fix;
    if (e.code() == absl::StatusCode::kNotFound && plural == "trainingjobs") {
      fix =
          "the TrainingJob CRD is not installed: kubectl apply -f deploy/crd/ (or install the "
          "Helm chart)";
    } else if (e.code() == absl::StatusCode::kNotFound && plural == "tfjobs") {
      fix =
          "the TFJob CRD is not installed: kubectl apply -f deploy/crd/kubeflow.org_tfjobs.yaml "
          "(or install the Helm chart with tfjob.enabled=true), or run without --tfjob";
    } else if (e.code() == absl::StatusCode::kPermissionDenied) {
      fix = absl::StrCat("the operator may not list and watch ", plural,
                         ": apply deploy/rbac/ (or the chart's RBAC) for its service account");
    } else if (e.code() == absl::StatusCode::kUnauthenticated) {
      fix = absl::StrCat(
          "the API server rejected the operator's credentials (the token or client "
          "certificate of ",
          client_.config().source, ")");
    } else {
      fix = absl::StrCat("listing ", plural, " kept failing");
    }
    return absl::Status(
        e.code() == absl::StatusCode::kUnknown ? absl::StatusCode::kUnavailable : e.code(),
        absl::StrCat(waited, ": ", fix, "; last error: ", e.message()));
  }
  return absl::DeadlineExceededError(waited + " (the lists are slow; no request failed)");
}

void Controller::Stop() {
  progress_.Stop();
  queue_.ShutDown();
  for (auto& t : workers_) t.join();
  workers_.clear();
  for (kube::Informer* inf : Informers()) inf->Stop();
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
      if (result->requeue_later) queue_.AddLater(*key);
    }
    queue_.Done(*key);
  }
}

}  // namespace kubetrain::controller
