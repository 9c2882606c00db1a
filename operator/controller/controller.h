// The TrainingJob controller: informers on TrainingJobs (and Kubeflow TFJobs when asked) and
// (label-scoped) on the pods and Services it owns, a rate-limited work queue keyed by job, and
// `workers` reconcile threads.
// A job is never reconciled by two threads at once (the queue guarantees it).
//
// Owns its informers, queue, reconciler and threads. Start/Stop from one thread; Ready from any.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "operator/controller/events.h"
#include "operator/controller/metrics.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/client.h"
#include "operator/kube/informer.h"
#include "operator/kube/work_queue.h"

namespace kubetrain::controller {

struct ControllerOptions {
  std::string namespace_;  // "" = every namespace
  int workers = 4;
  // Also serve kubeflow.org/v1 TFJobs (docs/decisions/0007-kubeflow-tfjob.md).
  bool tfjob = false;
  ReconcilerOptions reconciler;
  absl::Duration sync_timeout = absl::Minutes(2);
};

class Controller {
 public:
  Controller(kube::Client& client, ControllerOptions options, OperatorMetrics* metrics);
  ~Controller();

  // Starts the informers, waits for their first lists, then the workers. Returns CANCELLED as
  // soon as `stop` is set, at once the error of an API server whose certificate fails
  // verification, and when the caches do not sync in time the first real cause: no CRD (404),
  // no permission (403), bad credentials (401), no connection, or DEADLINE_EXCEEDED.
  absl::Status Start(const std::atomic<bool>* stop = nullptr);
  void Stop();
  bool Ready() const { return ready_.load(); }
  const kube::WorkQueue& queue() const { return queue_; }

 private:
  void Work();
  void EnqueueOwner(const nlohmann::json& obj);
  absl::Status SyncFailure() const;

  kube::Client& client_;
  const ControllerOptions options_;
  OperatorMetrics* metrics_;
  // The informers whose first lists Start waits for: jobs_, pods_, services_, then tfjobs_.
  std::vector<kube::Informer*> Informers();
  std::vector<const kube::Informer*> Informers() const;

  kube::Informer jobs_;
  std::unique_ptr<kube::Informer> tfjobs_;  // null unless options_.tfjob
  kube::Informer pods_;
  kube::Informer services_;
  kube::WorkQueue queue_;
  EventRecorder events_;
  ProgressPoller progress_;  // before reconciler_, which holds a pointer to it
  Reconciler reconciler_;
  std::vector<std::thread> workers_;
  std::atomic<bool> ready_{false};
};

}  // namespace kubetrain::controller
