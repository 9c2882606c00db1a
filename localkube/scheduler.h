// localkube's scheduler: binds each Pending pod that names no node (and names
// default-scheduler, or no scheduler) to a Node, posting a Binding as kube-scheduler does
// (binding.h). Filters are the default plug-ins' (scheduler_predicates.h: cordon, taints, node
// selector and required node affinity, resource requests and the pods count) and any added
// with AddFilter; the fitting node with the best Score wins, ties by name. A pod that fits
// nowhere stays Pending with PodScheduled=False (Unschedulable) and a FailedScheduling Warning
// event worded as kube-scheduler's; it is tried again when the store says capacity may have
// changed (a pod deleted or finished, a node added or changed), never on a timer. Pods with
// schedulingGates wait for them to go. Not emulated: preemption, pod (anti-)affinity, topology
// spread constraints, host ports, the scheduling queue's backoff for unschedulable pods.
//
// Thread-safe; one internal thread follows the store's pod and node events.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "localkube/api.h"
#include "localkube/scheduler_plugins.h"
#include "localkube/scheduler_predicates.h"

namespace kubetrain::localkube {

class Scheduler {
 public:
  explicit Scheduler(Api* api);
  ~Scheduler();

  // Before Start: a filter every node must pass besides the default ones, and a step run
  // once a node is chosen, before the Binding (scheduler_plugins.h).
  void AddFilter(SchedulerFilter filter);
  void AddPreBind(SchedulerPreBind prebind);

  void Start();
  void Stop();

  static constexpr char kName[] = "default-scheduler";

 private:
  struct PodEntry {
    std::string node;  // bound to; empty while pending
    Resources requests;
    bool counts = false;  // bound and not finished: takes from its node
  };
  struct Pending {
    nlohmann::json pod;
    bool dirty = true;  // try at the next pass
    absl::Time retry_at = absl::InfinitePast();
    absl::Duration backoff = absl::Seconds(1);
    std::string last_message;  // of the last FailedScheduling
  };

  void Loop();
  // Reads the store's pod and node events since the cursor into the caches (a full relist
  // after compaction). Returns whether anything changed.
  bool Follow();
  void Resync();
  void OnPod(const std::string& type, const nlohmann::json& pod);
  void OnNode(const std::string& type, const nlohmann::json& node);
  void Account(const std::string& key, const PodEntry& entry, int sign);
  // Tries every pending pod marked dirty or due for a retry.
  void Pass();
  void ScheduleOne(const std::string& key, Pending& pending);
  void Unschedulable(Pending& pending, const std::string& reason, const std::string& message);
  void RecordEvent(const nlohmann::json& pod, const std::string& type, const std::string& reason,
                   const std::string& message);

  Api* api_;
  std::vector<SchedulerFilter> filters_;
  std::vector<SchedulerPreBind> prebinds_;
  std::thread thread_;
  std::mutex mu_;  // guards stop_
  bool stop_ = false;
  // Owned by the scheduling thread.
  int64_t cursor_ = 0;
  std::map<std::string, PodEntry> pods_;    // ns/name -> what it takes
  std::map<std::string, Pending> pending_;  // ns/name -> pods to bind
  std::map<std::string, nlohmann::json> nodes_;
  std::map<std::string, std::string> node_signature_;  // what filters read of a node
  std::map<std::string, NodeUsage> usage_;             // by node name
  std::map<std::string, std::map<std::string, std::string>>
      events_;  // uid -> reason\nmessage -> Event name
};

}  // namespace kubetrain::localkube
