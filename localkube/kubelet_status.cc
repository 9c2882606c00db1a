// What the kubelet reports (see kubelet.h): each pod's status (phase, conditions, container
// states) written back through the API, the Events it posts about a pod, and the container logs
// it serves to pods/log (LogSource).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/errors.h"
#include "localkube/events.h"
#include "localkube/kubelet.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

void Kubelet::PublishStatus(Pod& pod) {
  if (!Connected(pod.node)) return;  // its kubelet reaches no API server
  json statuses = json::array();
  int running = 0, succeeded = 0, failed = 0, pending = 0;
  for (const Container& c : pod.containers) {
    json state;
    if (!c.waiting_reason.empty()) {
      state = {{"waiting", {{"reason", c.waiting_reason}}}};
      if (!c.waiting_message.empty()) state["waiting"]["message"] = c.waiting_message;
      if (c.run == 0) ++pending;
    } else if (!c.terminated) {
      state = {{"running", {{"startedAt", c.started_at}}}};
      ++running;
    } else if (c.restart_at != absl::InfiniteFuture()) {
      state = {{"waiting",
                {{"reason", "CrashLoopBackOff"},
                 {"message", absl::StrCat("back-off restarting failed container ", c.name)}}}};
    } else {
      state = {{"terminated",
                {{"exitCode", c.exit_code},
                 {"reason", c.exec_failed      ? "StartError"
                            : c.exit_code == 0 ? "Completed"
                                               : "Error"},
                 {"startedAt", c.started_at},
                 {"finishedAt", c.finished_at}}}};
      if (c.exec_failed && !c.failure_message.empty()) {
        state["terminated"]["message"] = c.failure_message;
      }
      (c.exit_code == 0 ? succeeded : failed)++;
    }
    json last = c.terminated && c.restart_at != absl::InfiniteFuture()
                    ? json{{"terminated",
                            {{"exitCode", c.exit_code},
                             {"reason", c.exit_code == 0 ? "Completed" : "Error"},
                             {"startedAt", c.started_at},
                             {"finishedAt", c.finished_at}}}}
                    : c.last_state;
    const bool is_running = c.waiting_reason.empty() && !c.terminated;
    json status = {{"name", c.name},        {"image", c.spec.value("image", "")},
                   {"imageID", ""},         {"ready", is_running},
                   {"started", is_running}, {"restartCount", std::max(0, c.run - 1)},
                   {"state", state},        {"lastState", last}};
    if (!c.container_id.empty()) status["containerID"] = c.container_id;
    statuses.push_back(status);
  }
  size_t n = pod.containers.size();
  std::string phase = "Running";
  if (pending > 0) phase = "Pending";  // a container that never started yet
  if (running == 0 && succeeded == static_cast<int>(n)) phase = "Succeeded";
  if (running == 0 && failed > 0 && succeeded + failed == static_cast<int>(n)) {
    std::string policy = pod.object["spec"].value("restartPolicy", "Always");
    bool will_restart =
        std::any_of(pod.containers.begin(), pod.containers.end(),
                    [](const Container& c) { return c.restart_at != absl::InfiniteFuture(); });
    if (!will_restart) phase = "Failed";
  }
  std::string ready = running == static_cast<int>(n) && n > 0 ? "True" : "False";
  std::string now = KubeTime(absl::Now());
  json conditions = json::array();
  for (const char* type : {"PodScheduled", "Initialized", "ContainersReady", "Ready"}) {
    bool always = std::string(type) == "PodScheduled" || std::string(type) == "Initialized";
    conditions.push_back({{"type", type},
                          {"status", always ? "True" : ready},
                          {"lastProbeTime", nullptr},
                          {"lastTransitionTime", now}});
  }
  std::string ip = pod.ip;
  std::string host_ip = pod.host_ip.empty() ? pod.ip : pod.host_ip;
  std::string start = pod.start_time;
  (void)api_->Mutate("/pods", pod.ns, pod.name, [&](json& live) {
    if (live["metadata"].value("uid", "") != pod.uid) return false;
    // A pod bound to a node (spec.nodeName) keeps it; an unbound one is this kubelet's.
    if (live["spec"].value("nodeName", "").empty()) live["spec"]["nodeName"] = "localkube";
    json& status = live["status"];
    // Keep transition times stable when a condition's status did not change.
    for (auto& c : conditions) {
      for (const auto& old : status.value("conditions", json::array())) {
        if (old.value("type", "") == c["type"] && old.value("status", "") == c["status"]) {
          c["lastTransitionTime"] = old.value("lastTransitionTime", now);
        }
      }
    }
    status["phase"] = phase;
    status["podIP"] = ip;
    status["podIPs"] = {{{"ip", ip}}};
    status["hostIP"] = host_ip;
    status["hostIPs"] = {{{"ip", host_ip}}};
    status["startTime"] = start;
    status["conditions"] = conditions;
    status["containerStatuses"] = statuses;
    return true;
  });
}

// An Event about the pod, as the kubelet posts them; a repeat of the same reason and message
// raises the count of the first.
void Kubelet::RecordEvent(Pod& pod, const std::string& type, const std::string& reason,
                          const std::string& message) {
  if (!Connected(pod.node)) return;
  std::string key = reason + "\n" + message;
  auto it = pod.events.find(key);
  if (it != pod.events.end()) {
    (void)RepeatEvent(*api_, pod.ns, it->second);
    return;
  }
  InvolvedObject about{.kind = "Pod", .ns = pod.ns, .name = pod.name, .uid = pod.uid};
  absl::StatusOr<std::string> name =
      PostEvent(*api_, about, type, reason, message,
                {.component = "kubelet", .host = "localkube", .reporting_instance = "localkube"});
  if (name.ok()) pod.events[key] = *name;
  log::Warn("Pod event",
            {{"pod", Key(pod.ns, pod.name)}, {"reason", reason}, {"message", message}});
}

absl::StatusOr<std::string> Kubelet::LogPath(const std::string& ns, const std::string& pod,
                                             const std::string& container, bool previous) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(Key(ns, pod));
  if (it == pods_.end()) {
    return BadRequestError(absl::StrCat("container \"", container, "\" in pod \"", pod,
                                        "\" is waiting to start: ContainerCreating"));
  }
  for (const Container& c : it->second->containers) {
    if (c.name != container) continue;
    if (!previous && c.run < 1) {
      return BadRequestError(
          absl::StrCat("container \"", container, "\" in pod \"", pod, "\" is waiting to start: ",
                       c.waiting_reason.empty() ? "ContainerCreating" : c.waiting_reason));
    }
    int run = previous ? c.run - 1 : c.run;
    if (run < 1) {
      return BadRequestError(absl::StrCat("previous terminated container \"", container,
                                          "\" in pod \"", pod, "\" not found"));
    }
    return absl::StrCat(it->second->dir, "/", c.name, ".", run, ".log");
  }
  return BadRequestError(absl::StrCat("container ", container, " is not valid for pod ", pod));
}

bool Kubelet::Running(const std::string& ns, const std::string& pod, const std::string& container) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(Key(ns, pod));
  if (it == pods_.end()) return false;
  for (const Container& c : it->second->containers) {
    if (c.name == container) return c.process && c.process->Alive();
  }
  return false;
}

}  // namespace kubetrain::localkube
