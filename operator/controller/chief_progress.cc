// The chief's progress in a job's status: read from the ProgressPoller while the chief runs
// (never by a request made while reconciling), and its final summary once the job ends, from its
// termination message or else the last lines of its log.
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/logging.h"
#include "operator/api/render.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/progress.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {
namespace {

// Lines of the chief's log searched for its summary when it left no termination message.
constexpr int kSummaryLogLines = 20;

}  // namespace

std::optional<std::pair<api::Task, PodView>> Reconciler::ChiefPod(const Pass& p) const {
  for (const api::Task& t : p.tasks) {
    if (!t.chief) continue;
    auto it = p.pods.find(t.name);
    if (it == p.pods.end()) return std::nullopt;
    std::optional<PodView> v = p.View(it->second);
    if (!v) return std::nullopt;
    return std::make_pair(t, *v);
  }
  return std::nullopt;
}

void Reconciler::ReadProgress(Pass& p) {
  if (progress_ == nullptr) return;
  std::optional<std::pair<api::Task, PodView>> chief = ChiefPod(p);
  if (!chief || chief->second.phase != "Running" || chief->second.pod_ip.empty()) {
    progress_->Untrack(p.key);
    return;
  }
  const auto& [t, v] = *chief;
  int port = api::ContainerPort(p.job, t.type, api::kMetricsPortName, api::kDefaultMetricsPort);
  progress_->Track(p.key, v.pod_ip, port);
  std::optional<api::Progress> latest = progress_->Latest(p.key);
  if (!latest) return;
  std::lock_guard<std::mutex> lock(progress_mu_);
  auto written = progress_written_.find(p.key);
  absl::Time written_at =
      written == progress_written_.end() ? absl::InfinitePast() : written->second;
  if (!progress_->WorthWriting(p.status.progress, written_at, *latest, p.now)) return;
  p.status.progress = *latest;
  progress_written_[p.key] = p.now;
}

void Reconciler::ReadFinalSummary(Pass& p) {
  std::optional<std::pair<api::Task, PodView>> chief = ChiefPod(p);
  if (!chief) return;
  const auto& [t, v] = *chief;
  absl::StatusOr<api::Progress> summary = ParseFinalSummary(v.termination_message);
  if (!summary.ok() && p.finishing && v.phase == "Succeeded") {
    // No termination message (a kubelet or image that does not write one): the summary is the
    // chief's last log line. Read once, when the job ends, before cleanup removes pods.
    absl::StatusOr<std::string> log =
        client_.GetLog(p.ns, t.name, p.TrainingContainer(), kSummaryLogLines);
    if (log.ok()) {
      summary = ParseFinalSummary(*log);
    } else {
      log::Debug("Could not read the chief's log", {{"pod", t.name}, {"error", log.status()}});
    }
  }
  if (summary.ok()) p.status.progress = *summary;
}

}  // namespace kubetrain::controller
