// Nodes, heartbeats, the scheduler and pods/binding: what a user of `localkube --nodes N` sees.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/binding.h"
#include "localkube/kubelet.h"
#include "localkube/node_agents.h"
#include "localkube/scheduler.h"
#include "localkube/server.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using ::testing::HasSubstr;
using json = nlohmann::json;

// A pod whose one container requests `cpu`, with `extra` merged into its spec.
json CpuPod(const std::string& name, const std::string& cpu, json extra = json::object()) {
  json pod = testing::Pod(name);
  if (!cpu.empty()) pod["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", cpu}}}};
  pod["spec"].update(extra);
  return pod;
}

json Condition(const json& pod, const std::string& type) {
  for (const json& c : pod.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

class Cluster : public ::testing::Test {
 protected:
  // `nodes` nodes of cpu=2 (capacity flags as localkube takes them) with the scheduler running.
  void Up(int nodes, std::vector<std::string> capacity = {}, std::vector<std::string> labels = {},
          absl::Duration period = absl::Hours(1)) {
    capacity.insert(capacity.begin(), "cpu=2,memory=8Gi");
    auto specs = ParseNodeSpecs(nodes, capacity, labels);
    ASSERT_THAT(specs.status(), IsOk());
    NodeAgentsOptions options;
    options.nodes = *specs;
    options.period = period;
    options.internal_ip = [](const std::string& node) {
      return absl::StrCat("198.18.0.", node.substr(5));
    };
    agents_ = std::make_unique<NodeAgents>(options, &api_);
    ASSERT_THAT(agents_->Start(), IsOk());
    scheduler_ = std::make_unique<Scheduler>(&api_);
  }
  void TearDown() override {
    if (scheduler_) scheduler_->Stop();
    if (agents_) agents_->Stop();
  }

  Target PodTarget(const std::string& name = "") {
    return Target{registry_.Find("", "v1", "pods"), "default", name, ""};
  }
  void Create(const json& pod) {
    ASSERT_THAT(api_.Create(PodTarget(), pod, WriteOptions{}).status(), IsOk());
  }
  // The node the pod is bound to once it is ("" after 10 s).
  std::string BoundNode(const std::string& name) {
    json pod = testing::WaitForPod(
        api_, PodTarget(name),
        [](const json& p) { return !p["spec"].value("nodeName", "").empty(); }, absl::Seconds(10));
    return pod.is_null() ? "" : pod["spec"].value("nodeName", "");
  }
  // The pod's PodScheduled condition once it is False with `reason`.
  json Refused(const std::string& name, const std::string& reason) {
    json pod = testing::WaitForPod(
        api_, PodTarget(name),
        [&](const json& p) {
          json c = Condition(p, "PodScheduled");
          return !c.is_null() && c.value("status", "") == "False" &&
                 c.value("reason", "") == reason;
        },
        absl::Seconds(10));
    return pod.is_null() ? json() : Condition(pod, "PodScheduled");
  }
  std::vector<json> EventsOf(const std::string& pod) {
    std::vector<json> out;
    int64_t revision = 0;
    for (json& e : store_.List("/events", "default", &revision)) {
      if (e["involvedObject"].value("name", "") == pod) out.push_back(e);
    }
    return out;
  }
  void MutateNode(const std::string& name, const std::function<void(json&)>& change) {
    ASSERT_THAT(api_.Mutate("/nodes", "", name,
                            [&](json& n) {
                              change(n);
                              return true;
                            }),
                IsOk());
  }

  Registry registry_;
  Store store_;
  Api api_{&registry_, &store_};
  std::unique_ptr<NodeAgents> agents_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST(NodeSpecs, CapacityAndLabelsApplyToEveryNodeThenPerNode) {
  auto specs = ParseNodeSpecs(3, {"node-2:cpu=4,memory=16Gi", "cpu=3,nvidia.com/gpu=1"},
                              {"node-3:topology.kubernetes.io/zone=zone-a,gpu=a100"});
  ASSERT_THAT(specs.status(), IsOk());
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].name, "node-1");
  EXPECT_EQ((*specs)[0].capacity.at("cpu"), "3");
  EXPECT_EQ((*specs)[0].capacity.at("memory"), "256Gi");
  EXPECT_EQ((*specs)[0].capacity.at("pods"), "110");
  EXPECT_EQ((*specs)[0].capacity.at("nvidia.com/gpu"), "1");
  EXPECT_EQ((*specs)[1].capacity.at("cpu"), "4");  // per node wins, whatever the order
  EXPECT_EQ((*specs)[1].capacity.at("memory"), "16Gi");
  EXPECT_EQ((*specs)[0].labels.at("topology.kubernetes.io/zone"), "zone-1");
  EXPECT_EQ((*specs)[2].labels.at("topology.kubernetes.io/zone"), "zone-a");
  EXPECT_EQ((*specs)[2].labels.at("gpu"), "a100");
}

TEST(NodeSpecs, BadValuesNameTheFlagAndTheFix) {
  auto message = [](int n, std::vector<std::string> capacity, std::vector<std::string> labels) {
    auto specs = ParseNodeSpecs(n, capacity, labels);
    return specs.ok() ? std::string("ok") : std::string(specs.status().message());
  };
  EXPECT_THAT(message(0, {}, {}), HasSubstr("--nodes 0: localkube runs 1 to 16 nodes"));
  EXPECT_THAT(message(17, {}, {}), HasSubstr("1 to 16"));
  EXPECT_THAT(message(2, {"node-3:cpu=1"}, {}),
              HasSubstr("\"node-3\" is not a node: --nodes 2 makes node-1 .. node-2"));
  EXPECT_THAT(message(1, {"cpu=lots"}, {}), HasSubstr("--node-capacity \"cpu=lots\": cpu=lots"));
  EXPECT_THAT(message(1, {"cpus=2"}, {}), HasSubstr("unknown resource \"cpus\""));
  EXPECT_THAT(message(1, {"pods=1.5"}, {}), HasSubstr("non-negative whole number"));
  EXPECT_THAT(message(1, {"cpu"}, {}), HasSubstr("\"cpu\" is not KEY=VALUE"));
  EXPECT_THAT(message(1, {}, {"kubernetes.io/hostname=x"}), HasSubstr("--node-labels"));
}

TEST_F(Cluster, NodesRegisterAsAKubeletDoes) {
  ASSERT_NO_FATAL_FAILURE(Up(2, {"node-2:cpu=4,nvidia.com/gpu=2"}));
  EXPECT_THAT(agents_->names(), ::testing::ElementsAre("node-1", "node-2"));
  auto node = store_.Get("/nodes", "", "node-2");
  ASSERT_TRUE(node);
  const json& labels = (*node)["metadata"]["labels"];
  EXPECT_EQ(labels.value("kubernetes.io/hostname", ""), "node-2");
  EXPECT_EQ(labels.value("kubernetes.io/os", ""), "linux");
  EXPECT_FALSE(labels.value("kubernetes.io/arch", "").empty());
  EXPECT_EQ(labels.value("topology.kubernetes.io/zone", ""), "zone-2");
  const json& status = (*node)["status"];
  EXPECT_EQ(status["capacity"],
            (json{{"cpu", "4"}, {"memory", "8Gi"}, {"pods", "110"}, {"nvidia.com/gpu", "2"}}));
  EXPECT_EQ(status["allocatable"], status["capacity"]);
  std::map<std::string, std::string> conditions;
  for (const json& c : status["conditions"]) {
    conditions[c["type"]] = c["status"];
    EXPECT_TRUE(c.contains("lastHeartbeatTime"));
  }
  EXPECT_EQ(conditions, (std::map<std::string, std::string>{{"DiskPressure", "False"},
                                                            {"MemoryPressure", "False"},
                                                            {"PIDPressure", "False"},
                                                            {"Ready", "True"}}));
  EXPECT_EQ(status["addresses"], (json{{{"type", "InternalIP"}, {"address", "198.18.0.2"}},
                                       {{"type", "Hostname"}, {"address", "node-2"}}}));
  EXPECT_EQ(status["nodeInfo"].value("operatingSystem", ""), "linux");
  EXPECT_EQ(status["nodeInfo"].value("kubeletVersion", ""), "v1.33.1");
  auto lease = store_.Get("coordination.k8s.io/leases", "kube-node-lease", "node-2");
  ASSERT_TRUE(lease);
  EXPECT_EQ((*lease)["spec"].value("holderIdentity", ""), "node-2");
  EXPECT_EQ((*lease)["spec"].value("leaseDurationSeconds", 0), 40);
  EXPECT_FALSE((*lease)["spec"].value("renewTime", "").empty());
}

TEST_F(Cluster, HeartbeatsRenewLeasesAndStopWhileANodeIsDown) {
  ASSERT_NO_FATAL_FAILURE(Up(2, {}, {}, absl::Milliseconds(20)));
  auto renew = [&](const std::string& node) {
    auto lease = store_.Get("coordination.k8s.io/leases", "kube-node-lease", node);
    return lease ? (*lease)["spec"].value("renewTime", "") : "";
  };
  // Waits for the next renewal of `node`'s Lease after this call.
  auto renewed = [&](const std::string& node) {
    std::string before = renew(node);
    return Eventually([&] { return renew(node) != before; }, absl::Seconds(10),
                      absl::Milliseconds(5));
  };
  ASSERT_TRUE(renewed("node-1"));
  ASSERT_TRUE(renewed("node-2"));
  ASSERT_THAT(agents_->SetDown("node-2", true), IsOk());
  EXPECT_TRUE(agents_->IsDown("node-2"));
  ASSERT_TRUE(renewed("node-1"));  // any heartbeat of node-2 under way has ended
  std::string frozen = renew("node-2");
  auto ready_beat = [&](const std::string& node) {
    const json object = *store_.Get("/nodes", "", node);  // a temporary would die before the loop
    for (const json& c : object["status"]["conditions"]) {
      if (c["type"] == "Ready") return c.value("lastHeartbeatTime", "");
    }
    return std::string();
  };
  std::string frozen_beat = ready_beat("node-2");
  ASSERT_TRUE(renewed("node-1"));
  ASSERT_TRUE(renewed("node-1"));
  EXPECT_EQ(renew("node-2"), frozen);
  EXPECT_EQ(ready_beat("node-2"), frozen_beat);
  ASSERT_THAT(agents_->SetDown("node-2", false), IsOk());
  EXPECT_TRUE(renewed("node-2"));
  EXPECT_FALSE(agents_->SetDown("node-9", true).ok());
}

TEST_F(Cluster, ReplicasSpreadOverNodesByLeastAllocated) {
  ASSERT_NO_FATAL_FAILURE(Up(3));
  scheduler_->Start();
  std::set<std::string> nodes;
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_FATAL_FAILURE(Create(CpuPod(absl::StrCat("worker-", i), "1")));
    nodes.insert(BoundNode(absl::StrCat("worker-", i)));
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"node-1", "node-2", "node-3"}));
  json pod = *api_.Get(PodTarget("worker-0"));
  json c = Condition(pod, "PodScheduled");
  EXPECT_EQ(c.value("status", ""), "True");
  bool scheduled_event = false;
  for (const json& e : EventsOf("worker-0")) {
    scheduled_event |= e["reason"] == "Scheduled" &&
                       e["message"] == "Successfully assigned default/worker-0 to " +
                                           pod["spec"].value("nodeName", "") &&
                       e["source"]["component"] == "default-scheduler";
  }
  EXPECT_TRUE(scheduled_event);
}

TEST_F(Cluster, RequestsCountContainersInitContainersOverheadAndLimits) {
  ASSERT_NO_FATAL_FAILURE(Up(1));
  scheduler_->Start();
  // Limits stand for requests: 1500m of cpu=2 taken.
  json limits = testing::Pod("limits");
  limits["spec"]["containers"][0]["resources"] = {{"limits", {{"cpu", "1500m"}}}};
  ASSERT_NO_FATAL_FAILURE(Create(limits));
  ASSERT_EQ(BoundNode("limits"), "node-1");
  // An init container's 600m is more than the 500m left, though the containers' 200m and the
  // overhead's 100m fit.
  json init = CpuPod("init", "200m",
                     {{"initContainers",
                       {{{"name", "i"},
                         {"image", "busybox"},
                         {"resources", {{"requests", {{"cpu", "600m"}}}}}}}}});
  ASSERT_NO_FATAL_FAILURE(Create(init));
  EXPECT_THAT(Refused("init", "Unschedulable").value("message", ""),
              HasSubstr("1 Insufficient cpu."));
  json overhead = CpuPod("overhead", "400m", {{"overhead", {{"cpu", "200m"}}}});
  ASSERT_NO_FATAL_FAILURE(Create(overhead));
  EXPECT_THAT(Refused("overhead", "Unschedulable").value("message", ""),
              HasSubstr("1 Insufficient cpu."));
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("fits", "300m", {{"overhead", {{"cpu", "200m"}}}})));
  EXPECT_EQ(BoundNode("fits"), "node-1");
}

TEST_F(Cluster, UnschedulablePodsSayWhyExactlyAsKubeScheduler) {
  ASSERT_NO_FATAL_FAILURE(Up(3));
  scheduler_->Start();
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("huge", "3")));
  json c = Refused("huge", "Unschedulable");
  const std::string message =
      "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No "
      "preemption victims found for incoming pod.";
  EXPECT_EQ(c.value("message", ""), message);
  std::vector<json> events;
  ASSERT_TRUE(Eventually([&] {
    events = EventsOf("huge");
    return !events.empty();
  }));
  EXPECT_EQ(events[0].value("type", ""), "Warning");
  EXPECT_EQ(events[0].value("reason", ""), "FailedScheduling");
  EXPECT_EQ(events[0].value("message", ""), message);
  EXPECT_EQ(events[0]["source"].value("component", ""), "default-scheduler");
  // Cordoned, tainted and full: each node's first refusal, counted and sorted.
  MutateNode("node-1", [](json& n) { n["spec"]["unschedulable"] = true; });
  MutateNode("node-2", [](json& n) {
    n["spec"]["taints"] = {{{"key", "dedicated"}, {"value", "gpu"}, {"effect", "NoSchedule"}}};
  });
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("filler", "2", {{"nodeName", "node-3"}})));
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("mixed", "1")));
  EXPECT_EQ(Refused("mixed", "Unschedulable").value("message", ""),
            "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
            "{dedicated: gpu}, 1 node(s) were unschedulable. preemption: 0/3 nodes are available: "
            "1 No preemption victims found for incoming pod, 2 Preemption is not helpful for "
            "scheduling.");
}

TEST_F(Cluster, PendingPodIsBoundWhenCapacityFrees) {
  ASSERT_NO_FATAL_FAILURE(Up(1));
  scheduler_->Start();
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("first", "1500m")));
  ASSERT_EQ(BoundNode("first"), "node-1");
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("second", "1")));
  ASSERT_FALSE(Refused("second", "Unschedulable").is_null());
  // Finishing frees what a pod took.
  ASSERT_THAT(api_.Mutate("/pods", "default", "first",
                          [](json& p) {
                            p["status"]["phase"] = "Succeeded";
                            return true;
                          }),
              IsOk());
  EXPECT_EQ(BoundNode("second"), "node-1");
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("third", "1500m")));
  ASSERT_FALSE(Refused("third", "Unschedulable").is_null());
  // And so does deletion.
  ASSERT_THAT(api_.Delete(PodTarget("second"), DeleteOptions{}).status(), IsOk());
  EXPECT_EQ(BoundNode("third"), "node-1");
  // And a node that grows.
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("fourth", "1")));
  ASSERT_FALSE(Refused("fourth", "Unschedulable").is_null());
  MutateNode("node-1", [](json& n) { n["status"]["allocatable"]["cpu"] = "4"; });
  EXPECT_EQ(BoundNode("fourth"), "node-1");
}

TEST_F(Cluster, SelectorsAffinityAndTaintsChooseTheNode) {
  ASSERT_NO_FATAL_FAILURE(Up(3, {}, {"node-2:disk=ssd,generation=5", "node-3:disk=hdd"}));
  MutateNode("node-1", [](json& n) {
    n["spec"]["taints"] = {{{"key", "gpu"}, {"effect", "NoExecute"}},
                           {{"key", "soft"}, {"effect", "PreferNoSchedule"}}};
  });
  MutateNode("node-3", [](json& n) {
    n["spec"]["taints"] = {{{"key", "soft"}, {"effect", "PreferNoSchedule"}}};
  });
  scheduler_->Start();
  auto affinity = [](json terms) {
    return json{
        {"affinity",
         {{"nodeAffinity",
           {{"requiredDuringSchedulingIgnoredDuringExecution", {{"nodeSelectorTerms", terms}}}}}}}};
  };
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("selector", "", {{"nodeSelector", {{"disk", "hdd"}}}})));
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod(
      "in", "",
      affinity({{{"matchExpressions",
                  {{{"key", "disk"}, {"operator", "In"}, {"values", {"ssd", "nvme"}}}}}}}))));
  ASSERT_NO_FATAL_FAILURE(Create(
      CpuPod("gt", "",
             affinity({{{"matchExpressions",
                         {{{"key", "generation"}, {"operator", "Gt"}, {"values", {"4"}}}}}}}))));
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod(
      "notin-dne", "",
      affinity({{{"matchExpressions", {{{"key", "disk"}, {"operator", "DoesNotExist"}}}}},
                {{"matchFields",
                  {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"node-3"}}}}}}}))));
  // The NoExecute taint keeps pods off node-1 unless tolerated; PreferNoSchedule only steers.
  ASSERT_NO_FATAL_FAILURE(
      Create(CpuPod("tolerates", "",
                    {{"tolerations", {{{"key", "gpu"}, {"operator", "Exists"}}}},
                     {"nodeSelector", {{"kubernetes.io/hostname", "node-1"}}}})));
  ASSERT_NO_FATAL_FAILURE(
      Create(CpuPod("intolerant", "", {{"nodeSelector", {{"kubernetes.io/hostname", "node-1"}}}})));
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod(
      "nowhere", "",
      affinity({{{"matchExpressions",
                  {{{"key", "disk"}, {"operator", "NotIn"}, {"values", {"ssd", "hdd"}}}}}}}))));
  EXPECT_EQ(BoundNode("selector"), "node-3");
  EXPECT_EQ(BoundNode("in"), "node-2");
  EXPECT_EQ(BoundNode("gt"), "node-2");
  EXPECT_EQ(BoundNode("notin-dne"), "node-3");  // terms are ORed: node-1 has a NoExecute taint
  EXPECT_EQ(BoundNode("tolerates"), "node-1");
  EXPECT_EQ(Refused("intolerant", "Unschedulable").value("message", ""),
            "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: }, 2 node(s) didn't "
            "match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 "
            "Preemption is not helpful for scheduling.");
  EXPECT_THAT(Refused("nowhere", "Unschedulable").value("message", ""),
              HasSubstr("1 node(s) had untolerated taint {gpu: }, 2 node(s) didn't match Pod's "
                        "node affinity/selector."));
}

TEST_F(Cluster, GatedAndOtherSchedulersPodsAreLeftAlone) {
  ASSERT_NO_FATAL_FAILURE(Up(1));
  ASSERT_NO_FATAL_FAILURE(
      Create(CpuPod("gated", "", {{"schedulingGates", {{{"name", "quota"}}}}})));
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("other", "", {{"schedulerName", "volcano"}})));
  json gated = *api_.Get(PodTarget("gated"));
  json c = Condition(gated, "PodScheduled");
  EXPECT_EQ(c.value("status", ""), "False");
  EXPECT_EQ(c.value("reason", ""), "SchedulingGated");
  EXPECT_EQ(c.value("message", ""), "Scheduling is blocked due to non-empty scheduling gates");
  scheduler_->Start();
  // A pod created after them is bound: the scheduler has seen both by then.
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("plain", "")));
  ASSERT_EQ(BoundNode("plain"), "node-1");
  EXPECT_EQ((*api_.Get(PodTarget("gated")))["spec"].value("nodeName", ""), "");
  EXPECT_EQ((*api_.Get(PodTarget("other")))["spec"].value("nodeName", ""), "");
  EXPECT_TRUE(EventsOf("other").empty());
  ASSERT_THAT(api_.Mutate("/pods", "default", "gated",
                          [](json& p) {
                            p["spec"].erase("schedulingGates");
                            return true;
                          }),
              IsOk());
  EXPECT_EQ(BoundNode("gated"), "node-1");
  EXPECT_EQ(Condition(*api_.Get(PodTarget("gated")), "PodScheduled").value("status", ""), "True");
}

TEST_F(Cluster, PluginFiltersAndPreBindsTakePart) {
  ASSERT_NO_FATAL_FAILURE(Up(3));
  scheduler_->AddFilter([](const json& pod, const json& node) -> std::string {
    if (pod["metadata"]["name"] != "claimed") return "";
    return node["metadata"]["name"] == "node-3" ? "" : "node(s) had volume node affinity conflict";
  });
  std::atomic<int> prebinds{0};
  std::string prebound;
  scheduler_->AddPreBind([&](const json& pod, const std::string& node) -> absl::Status {
    if (pod["metadata"]["name"] != "claimed") return absl::OkStatus();
    prebound = node;
    if (prebinds++ == 0) return absl::UnavailableError("provisioning volume data: not yet");
    return absl::OkStatus();
  });
  scheduler_->Start();
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("claimed", "")));
  EXPECT_EQ(BoundNode("claimed"), "node-3");  // after one failed pre-bind, retried
  EXPECT_EQ(prebound, "node-3");
  EXPECT_EQ(prebinds.load(), 2);
  bool failed_event = false;
  for (const json& e : EventsOf("claimed")) {
    failed_event |=
        e["reason"] == "FailedScheduling" && e["message"] == "provisioning volume data: not yet";
  }
  EXPECT_TRUE(failed_event);
  // The filter's reason is counted in the message like the default ones.
  scheduler_->Stop();
  scheduler_ = std::make_unique<Scheduler>(&api_);
  scheduler_->AddFilter([](const json&, const json& node) -> std::string {
    return node["metadata"]["name"] == "node-1" ? "" : "node(s) had volume node affinity conflict";
  });
  MutateNode("node-1", [](json& n) { n["spec"]["unschedulable"] = true; });
  scheduler_->Start();
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("lost", "")));
  EXPECT_EQ(Refused("lost", "Unschedulable").value("message", ""),
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) had volume node "
            "affinity conflict. preemption: 0/3 nodes are available: 3 Preemption is not helpful "
            "for scheduling.");
}

// A pod refused for its claim is tried again when claims or volumes change, as kube-scheduler's
// volume binding requeues it: a pod that the operator created before its Immediate claim was
// bound is bound once the claim is, not left Pending until some pod or node changes.
TEST_F(Cluster, APodWaitingOnItsClaimIsBoundOnceTheClaimChanges) {
  ASSERT_NO_FATAL_FAILURE(Up(1));
  scheduler_->AddFilter([this](const json& pod, const json&) -> std::string {
    if (pod["metadata"]["name"] != "waiting") return "";
    return store_.Get("/persistentvolumeclaims", "default", "late").has_value()
               ? ""
               : "pod has unbound immediate PersistentVolumeClaims";
  });
  scheduler_->Start();
  ASSERT_NO_FATAL_FAILURE(Create(CpuPod("waiting", "")));
  ASSERT_FALSE(Refused("waiting", "Unschedulable").is_null());
  store_.Put("/persistentvolumeclaims", {{"apiVersion", "v1"},
                                         {"kind", "PersistentVolumeClaim"},
                                         {"metadata", {{"name", "late"}, {"namespace", "default"}}},
                                         {"spec", json::object()}});
  EXPECT_EQ(BoundNode("waiting"), "node-1");
}

// pods/binding over HTTP, as a custom scheduler or `kubectl create -f binding.yaml` posts it.
class PodBinding : public testing::ServedApiTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(ServeToAdmin("bearer")); }
};

TEST_F(PodBinding, SetsNodeNameOnceAndAnswersAsTheApiServer) {
  auto call = [&](const std::string& method, const std::string& path, const json& body) {
    return testing::Call(*client_, method, path, body);
  };
  ASSERT_EQ(call("POST", "/api/v1/namespaces/default/pods", testing::Pod("p")).code, 201);
  const std::string path = "/api/v1/namespaces/default/pods/p/binding";
  auto binding = [](const std::string& pod, const std::string& node) {
    return json{{"apiVersion", "v1"},
                {"kind", "Binding"},
                {"metadata", {{"name", pod}}},
                {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  };
  testing::Reply r = call("POST", path, binding("q", "node-1"));
  EXPECT_EQ(r.code, 400);
  EXPECT_EQ(r.body.value("message", ""), "name in URL does not match name in Binding object");
  r = call("POST", path, binding("p", ""));
  EXPECT_EQ(r.code, 500);
  EXPECT_EQ(r.body.value("message", ""), "target.name: Required value");
  EXPECT_EQ(call("GET", path, nullptr).code, 405);
  EXPECT_EQ(call("POST", "/api/v1/namespaces/default/pods/none/binding", binding("none", "n")).code,
            404);
  r = call("POST", path, binding("p", "node-1"));
  EXPECT_EQ(r.code, 201);
  EXPECT_EQ(r.body, (json{{"kind", "Status"},
                          {"apiVersion", "v1"},
                          {"metadata", json::object()},
                          {"status", "Success"},
                          {"code", 201}}));
  json pod = call("GET", "/api/v1/namespaces/default/pods/p", nullptr).body;
  EXPECT_EQ(pod["spec"].value("nodeName", ""), "node-1");
  EXPECT_EQ(Condition(pod, "PodScheduled").value("status", ""), "True");
  r = call("POST", path, binding("p", "node-2"));
  EXPECT_EQ(r.code, 409);
  EXPECT_EQ(r.body.value("reason", ""), "Conflict");
  EXPECT_EQ(r.body.value("message", ""),
            "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to "
            "node \"node-1\"");
  // Gated pods cannot be bound.
  json gated = testing::Pod("g");
  gated["spec"]["schedulingGates"] = {{{"name", "wait"}}};
  ASSERT_EQ(call("POST", "/api/v1/namespaces/default/pods", gated).code, 201);
  r = call("POST", "/api/v1/namespaces/default/pods/g/binding", binding("g", "node-1"));
  EXPECT_EQ(r.code, 409);
  EXPECT_THAT(r.body.value("message", ""), HasSubstr("pod g has non-empty .spec.schedulingGates"));
}

// The kubelet runs what is bound to its nodes, and only that.
TEST(KubeletOnNodes, RunsOnlyPodsBoundToItsNodes) {
  std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("kubelet_nodes_test-", getpid()))
          .string();
  std::filesystem::create_directories(dir);
  Registry registry;
  Store store;
  Api api(&registry, &store);
  KubeletOptions options;
  options.log_dir = dir + "/logs";
  options.hosts_file = dir + "/hosts";
  options.node_names = {"node-1", "node-2"};
  auto kubelet = std::make_unique<Kubelet>(options, &api);
  kubelet->Start();
  Target pods{registry.Find("", "v1", "pods"), "default", "", ""};
  auto make = [&](const std::string& name, const std::string& node) {
    json pod = testing::Pod(name);
    pod["spec"]["containers"][0]["command"] = {"sleep", "30"};
    if (!node.empty()) pod["spec"]["nodeName"] = node;
    ASSERT_THAT(api.Create(pods, pod, WriteOptions{}).status(), IsOk());
  };
  auto started = [&](const std::string& name) {
    Target t = pods;
    t.name = name;
    return !testing::WaitForPod(
                api, t, [](const json& p) { return p["status"].contains("podIP"); },
                absl::Seconds(10))
                .is_null();
  };
  auto has_ip = [&](const std::string& name) {
    Target t = pods;
    t.name = name;
    return (*api.Get(t))["status"].contains("podIP");
  };
  ASSERT_NO_FATAL_FAILURE(make("unbound", ""));
  ASSERT_NO_FATAL_FAILURE(make("elsewhere", "node-9"));
  ASSERT_NO_FATAL_FAILURE(make("here", "node-2"));
  EXPECT_TRUE(started("here"));  // the kubelet has seen the two before it by then
  EXPECT_FALSE(has_ip("unbound"));
  EXPECT_FALSE(has_ip("elsewhere"));
  json binding = {{"metadata", {{"name", "unbound"}}}, {"target", {{"name", "node-1"}}}};
  ASSERT_THAT(BindPod(api, "default", "unbound", binding, false).status(), IsOk());
  EXPECT_TRUE(started("unbound"));
  Target here = pods;
  here.name = "here";
  EXPECT_EQ((*api.Get(here))["spec"].value("nodeName", ""), "node-2");
  kubelet->Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubetrain::localkube
