// Node faults as kube-controller-manager and kube-apiserver handle them: lease expiry (Unknown
// conditions, unreachable taints, pods NotReady), recovery, taint-based eviction, pod GC of a
// deleted node's pods, the DefaultTolerationSeconds admission plugin and the Eviction
// subresource with PodDisruptionBudgets. Nodes, Leases and pod statuses are posted over HTTP as a
// kubelet posts them; the controller runs on a clock the test moves.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/node_lifecycle.h"
#include "localkube/server.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using json = nlohmann::json;
using testing::Reply;

constexpr char kPods[] = "/api/v1/namespaces/default/pods";
constexpr char kLeases[] = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

class NodeLifecycle : public testing::ServedApiTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ServeToAdmin());
    // Whole seconds, as the second-precision timestamps hold them.
    now_ = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()));
    controller_ = std::make_unique<NodeLifecycleController>(
        api_.get(), NodeLifecycleOptions{.monitor_grace_period = absl::Seconds(40),
                                         .orphan_quarantine = absl::Seconds(40),
                                         .clock = [this] { return now_; }});
  }
  void TearDown() override {
    if (controller_) controller_->Stop();
    ServedApiTest::TearDown();
  }

  Reply Call(const std::string& method, const std::string& path, const json& body = nullptr) {
    return testing::Call(*client_, method, path, body);
  }

  // What a kubelet posts: the Node, its status (Ready `ready`, heartbeat now) and its Lease.
  void AddNode(const std::string& name, const std::string& ready = "True") {
    json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}}};
    ASSERT_EQ(Call("POST", "/api/v1/nodes", node).code, 201);
    PostReady(name, ready);
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", name}, {"namespace", "kube-node-lease"}}},
                  {"spec",
                   {{"holderIdentity", name},
                    {"leaseDurationSeconds", 40},
                    {"renewTime", KubeMicroTime(now_)}}}};
    ASSERT_EQ(Call("POST", kLeases, lease).code, 201);
  }
  void PostReady(const std::string& name, const std::string& ready) {
    Reply node = Call("GET", "/api/v1/nodes/" + name);
    ASSERT_EQ(node.code, 200);
    std::string stamp = KubeTime(now_);
    json conditions = json::array();
    for (const char* type : {"MemoryPressure", "DiskPressure", "PIDPressure"}) {
      conditions.push_back({{"type", type},
                            {"status", "False"},
                            {"reason", "KubeletHasSufficientMemory"},
                            {"lastHeartbeatTime", stamp},
                            {"lastTransitionTime", stamp}});
    }
    conditions.push_back({{"type", "Ready"},
                          {"status", ready},
                          {"reason", ready == "True" ? "KubeletReady" : "KubeletNotReady"},
                          {"lastHeartbeatTime", stamp},
                          {"lastTransitionTime", stamp}});
    node.body["status"]["conditions"] = conditions;
    ASSERT_EQ(Call("PUT", "/api/v1/nodes/" + name + "/status", node.body).code, 200);
  }
  void RenewLease(const std::string& name) {
    Reply lease = Call("GET", std::string(kLeases) + "/" + name);
    ASSERT_EQ(lease.code, 200);
    lease.body["spec"]["renewTime"] = KubeMicroTime(now_);
    ASSERT_EQ(Call("PUT", std::string(kLeases) + "/" + name, lease.body).code, 200);
  }
  // A running, Ready pod bound to `node`.
  void AddPod(const std::string& name, const std::string& node, json extra_spec = json::object(),
              json labels = json::object()) {
    json pod = testing::Pod(name);
    pod["spec"]["nodeName"] = node;
    pod["spec"].update(extra_spec);
    if (!labels.empty()) pod["metadata"]["labels"] = labels;
    Reply created = Call("POST", kPods, pod);
    ASSERT_EQ(created.code, 201) << created.body.dump();
    created.body["status"]["phase"] = "Running";
    created.body["status"]["conditions"] = {
        {{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", KubeTime(now_)}}};
    ASSERT_EQ(Call("PUT", std::string(kPods) + "/" + name + "/status", created.body).code, 200);
  }
  // The clock moves on by `d` while `live`'s kubelet (none when empty) keeps renewing its Lease,
  // then the controller syncs once; when it is next due.
  absl::Time Pass(absl::Duration d, const std::string& live = "") {
    now_ += d;
    if (!live.empty()) RenewLease(live);
    return controller_->SyncOnce();
  }
  json Node(const std::string& name) { return Call("GET", "/api/v1/nodes/" + name).body; }
  int PodCode(const std::string& name) { return Call("GET", std::string(kPods) + "/" + name).code; }
  std::string PodReady(const std::string& name) {
    json pod = Call("GET", std::string(kPods) + "/" + name).body;
    for (const json& c : pod["status"].value("conditions", json::array())) {
      if (c["type"] == "Ready") return c["status"];
    }
    return "";
  }
  static json Conditions(const json& node, const std::string& type) {
    for (const json& c : node["status"]["conditions"]) {
      if (c["type"] == type) return c;
    }
    return nullptr;
  }
  // The node's taints as "key:effect" strings.
  static std::vector<std::string> Taints(const json& node) {
    std::vector<std::string> out;
    for (const json& t : node.value("spec", json::object()).value("taints", json::array())) {
      out.push_back(t["key"].get<std::string>() + ":" + t["effect"].get<std::string>());
    }
    return out;
  }
  int EventsWithReason(const std::string& reason) {
    int n = 0;
    Reply events = Call("GET", "/api/v1/namespaces/default/events");
    for (const json& e : events.body["items"]) {
      n += e["reason"] == reason;
    }
    return n;
  }

  absl::Time now_;
  std::unique_ptr<NodeLifecycleController> controller_;
};

TEST_F(NodeLifecycle, ExpiredLeaseMarksNodeUnknownTaintsItAndEvictsAfterTolerationSeconds) {
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  ASSERT_NO_FATAL_FAILURE(AddNode("node-2"));
  ASSERT_NO_FATAL_FAILURE(AddPod("p1", "node-1"));
  ASSERT_NO_FATAL_FAILURE(AddPod("p2", "node-2"));
  // Fresh heartbeats: nothing to do until the grace period has passed.
  EXPECT_EQ(controller_->SyncOnce(), now_ + absl::Seconds(40) + absl::Microseconds(1));
  EXPECT_THAT(Taints(Node("node-1")), ::testing::IsEmpty());

  ASSERT_NO_FATAL_FAILURE(Pass(absl::Seconds(41), "node-2"));
  json node1 = Node("node-1");
  for (const char* type : {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}) {
    json c = Conditions(node1, type);
    EXPECT_EQ(c["status"], "Unknown") << type;
    EXPECT_EQ(c["reason"], "NodeStatusUnknown") << type;
    EXPECT_EQ(c["message"], "Kubelet stopped posting node status.") << type;
  }
  EXPECT_THAT(Taints(node1),
              ::testing::UnorderedElementsAre("node.kubernetes.io/unreachable:NoSchedule",
                                              "node.kubernetes.io/unreachable:NoExecute"));
  for (const json& t : node1["spec"]["taints"]) EXPECT_TRUE(t.contains("timeAdded")) << t;
  EXPECT_EQ(Conditions(Node("node-2"), "Ready")["status"], "True");
  EXPECT_THAT(Taints(Node("node-2")), ::testing::IsEmpty());
  EXPECT_EQ(PodReady("p1"), "False");
  EXPECT_EQ(PodReady("p2"), "True");
  // The default 300 s unreachable toleration keeps p1 until then.
  EXPECT_EQ(PodCode("p1"), 200);
  ASSERT_NO_FATAL_FAILURE(Pass(absl::Seconds(299), "node-2"));
  EXPECT_EQ(PodCode("p1"), 200);
  ASSERT_NO_FATAL_FAILURE(Pass(absl::Seconds(2), "node-2"));
  EXPECT_EQ(PodCode("p1"), 404);
  EXPECT_EQ(PodCode("p2"), 200);
  EXPECT_EQ(EventsWithReason("TaintManagerEviction"), 1);
}

TEST_F(NodeLifecycle, RecoveredNodeLosesItsTaints) {
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  ASSERT_NO_FATAL_FAILURE(AddNode("node-2"));
  ASSERT_NO_FATAL_FAILURE(Pass(absl::Seconds(41), "node-2"));
  ASSERT_THAT(Taints(Node("node-1")), ::testing::SizeIs(2));
  // The kubelet is back: it renews its Lease and posts Ready.
  ASSERT_NO_FATAL_FAILURE(RenewLease("node-1"));
  ASSERT_NO_FATAL_FAILURE(PostReady("node-1", "True"));
  controller_->SyncOnce();
  EXPECT_THAT(Taints(Node("node-1")), ::testing::IsEmpty());
}

TEST_F(NodeLifecycle, NotReadyPostedByKubeletTaintsNotReady) {
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1", "False"));
  ASSERT_NO_FATAL_FAILURE(AddNode("node-2"));
  controller_->SyncOnce();
  EXPECT_THAT(Taints(Node("node-1")),
              ::testing::UnorderedElementsAre("node.kubernetes.io/not-ready:NoSchedule",
                                              "node.kubernetes.io/not-ready:NoExecute"));
}

TEST_F(NodeLifecycle, WholeClusterDownEvictsNothing) {
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  Pass(absl::Seconds(41));
  EXPECT_EQ(Conditions(Node("node-1"), "Ready")["status"], "Unknown");
  EXPECT_THAT(Taints(Node("node-1")),
              ::testing::ElementsAre("node.kubernetes.io/unreachable:NoSchedule"));
}

TEST_F(NodeLifecycle, NoExecuteTaintEvictsByToleration) {
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  json forever = {{"tolerations", {{{"key", "example.com/maintenance"}, {"operator", "Exists"}}}}};
  json minute = {{"tolerations",
                  {{{"key", "example.com/maintenance"},
                    {"operator", "Equal"},
                    {"value", "now"},
                    {"effect", "NoExecute"},
                    {"tolerationSeconds", 60}}}}};
  ASSERT_NO_FATAL_FAILURE(AddPod("intolerant", "node-1"));
  ASSERT_NO_FATAL_FAILURE(AddPod("forever", "node-1", forever));
  ASSERT_NO_FATAL_FAILURE(AddPod("minute", "node-1", minute));
  json node = Node("node-1");
  node["spec"]["taints"] = {{{"key", "example.com/maintenance"},
                             {"value", "now"},
                             {"effect", "NoExecute"},
                             {"timeAdded", KubeTime(now_)}}};
  ASSERT_EQ(Call("PUT", "/api/v1/nodes/node-1", node).code, 200);
  controller_->SyncOnce();
  EXPECT_EQ(PodCode("intolerant"), 404);
  EXPECT_EQ(PodCode("forever"), 200);
  EXPECT_EQ(PodCode("minute"), 200);
  absl::Time due;
  ASSERT_NO_FATAL_FAILURE(due = Pass(absl::Seconds(30), "node-1"));
  // Next due: when the 60 s toleration runs out.
  EXPECT_EQ(due, now_ + absl::Seconds(30));
  EXPECT_EQ(PodCode("minute"), 200);
  ASSERT_NO_FATAL_FAILURE(Pass(absl::Seconds(30), "node-1"));
  EXPECT_EQ(PodCode("minute"), 404);
  EXPECT_EQ(PodCode("forever"), 200);
  EXPECT_EQ(EventsWithReason("TaintManagerEviction"), 2);
}

TEST_F(NodeLifecycle, EvictedPodStaysTerminatingUntilItsKubeletFinishes) {
  api_->EnableGracefulPodDeletion();
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  ASSERT_NO_FATAL_FAILURE(AddPod("p", "node-1"));
  json node = Node("node-1");
  node["spec"]["taints"] = {{{"key", "example.com/gone"}, {"effect", "NoExecute"}}};
  ASSERT_EQ(Call("PUT", "/api/v1/nodes/node-1", node).code, 200);
  controller_->SyncOnce();
  json pod = Call("GET", std::string(kPods) + "/p").body;
  EXPECT_TRUE(pod["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(pod["metadata"]["deletionGracePeriodSeconds"], 30);
  bool disruption_target = false;
  for (const json& c : pod["status"]["conditions"]) {
    disruption_target |= c["type"] == "DisruptionTarget" && c["reason"] == "DeletionByTaintManager";
  }
  EXPECT_TRUE(disruption_target) << pod.dump();
  // The node declared out of service (and not Ready): PodGC stops waiting for its kubelet.
  now_ += absl::Seconds(41);
  node = Node("node-1");
  node["spec"]["taints"].push_back(
      {{"key", "node.kubernetes.io/out-of-service"}, {"effect", "NoExecute"}});
  ASSERT_EQ(Call("PUT", "/api/v1/nodes/node-1", node).code, 200);
  controller_->SyncOnce();
  EXPECT_EQ(PodCode("p"), 404);
}

TEST_F(NodeLifecycle, PodsOfADeletedNodeAreDeletedAfterTheQuarantine) {
  api_->EnableGracefulPodDeletion();
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  ASSERT_NO_FATAL_FAILURE(AddNode("node-2"));
  ASSERT_NO_FATAL_FAILURE(AddPod("p1", "node-1"));
  ASSERT_NO_FATAL_FAILURE(AddPod("p2", "node-2"));
  ASSERT_EQ(Call("DELETE", "/api/v1/nodes/node-1").code, 200);
  controller_->SyncOnce();
  EXPECT_EQ(PodCode("p1"), 200);
  ASSERT_NO_FATAL_FAILURE(Pass(absl::Seconds(40), "node-2"));
  EXPECT_EQ(PodCode("p1"), 404);  // force-deleted: no kubelet to wait for
  EXPECT_EQ(PodCode("p2"), 200);
}

TEST_F(NodeLifecycle, ControllerThreadActsWhenTheGracePeriodRunsOut) {
  controller_->Stop();
  controller_ = std::make_unique<NodeLifecycleController>(
      api_.get(), NodeLifecycleOptions{.monitor_grace_period = absl::Milliseconds(300)});
  now_ = absl::Now();
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  ASSERT_NO_FATAL_FAILURE(AddNode("node-2"));
  controller_->Start();
  // node-2 keeps renewing; node-1 has stopped.
  EXPECT_TRUE(Eventually(
      [&] {
        now_ = absl::Now();
        RenewLease("node-2");
        return Taints(Node("node-1")).size() == 2;
      },
      absl::Seconds(10), absl::Milliseconds(50)));
  EXPECT_THAT(Taints(Node("node-2")), ::testing::IsEmpty());
}

TEST_F(NodeLifecycle, AdmissionAddsDefaultTolerationsOnce) {
  Reply created = Call("POST", kPods, testing::Pod("plain"));
  ASSERT_EQ(created.code, 201);
  EXPECT_EQ(created.body["spec"]["tolerations"], json::parse(R"([
              {"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute",
               "tolerationSeconds":300},
              {"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute",
               "tolerationSeconds":300}])"));
  // An update keeps them as they are (no second pair).
  Reply updated = Call("PUT", std::string(kPods) + "/plain", created.body);
  ASSERT_EQ(updated.code, 200);
  EXPECT_EQ(updated.body["spec"]["tolerations"].size(), 2);
  // A pod tolerating not-ready its own way gets only the unreachable one.
  json own = testing::Pod("own");
  own["spec"]["tolerations"] = {
      {{"key", "node.kubernetes.io/not-ready"}, {"operator", "Exists"}, {"effect", "NoExecute"}}};
  created = Call("POST", kPods, own);
  ASSERT_EQ(created.code, 201);
  ASSERT_EQ(created.body["spec"]["tolerations"].size(), 2);
  EXPECT_FALSE(created.body["spec"]["tolerations"][0].contains("tolerationSeconds"));
  EXPECT_EQ(created.body["spec"]["tolerations"][1]["key"], "node.kubernetes.io/unreachable");
  // Tolerating everything: nothing added.
  json all = testing::Pod("all");
  all["spec"]["tolerations"] = {{{"operator", "Exists"}}};
  created = Call("POST", kPods, all);
  ASSERT_EQ(created.code, 201);
  EXPECT_EQ(created.body["spec"]["tolerations"].size(), 1);
}

json Eviction(const std::string& name, const std::string& version = "policy/v1") {
  return {{"apiVersion", version}, {"kind", "Eviction"}, {"metadata", {{"name", name}}}};
}

TEST_F(NodeLifecycle, EvictionWithoutBudgetDeletesThePod) {
  ASSERT_NO_FATAL_FAILURE(AddPod("p", "node-1"));
  Reply evicted = Call("POST", std::string(kPods) + "/p/eviction", Eviction("p"));
  EXPECT_EQ(evicted.code, 201) << evicted.body.dump();
  EXPECT_EQ(evicted.body["status"], "Success");
  EXPECT_EQ(PodCode("p"), 404);
  Reply missing = Call("POST", std::string(kPods) + "/nope/eviction", Eviction("nope"));
  EXPECT_EQ(missing.code, 404);
  EXPECT_EQ(missing.body["message"], "pods \"nope\" not found");
  ASSERT_NO_FATAL_FAILURE(AddPod("q", "node-1"));
  EXPECT_EQ(Call("POST", std::string(kPods) + "/q/eviction", Eviction("other")).code, 400);
  EXPECT_EQ(Call("GET", std::string(kPods) + "/q/eviction").code, 405);
  EXPECT_EQ(Call("POST", std::string(kPods) + "/q/eviction", Eviction("q", "policy/v1beta1")).code,
            201);
}

TEST_F(NodeLifecycle, EvictionHonoursThePodDisruptionBudget) {
  json labels = {{"app", "web"}};
  ASSERT_NO_FATAL_FAILURE(AddPod("web-1", "node-1", json::object(), labels));
  ASSERT_NO_FATAL_FAILURE(AddPod("web-2", "node-2", json::object(), labels));
  json pdb = {{"apiVersion", "policy/v1"},
              {"kind", "PodDisruptionBudget"},
              {"metadata", {{"name", "web"}}},
              {"spec", {{"minAvailable", 1}, {"selector", {{"matchLabels", labels}}}}}};
  ASSERT_EQ(Call("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", pdb).code, 201);
  EXPECT_EQ(Call("POST", std::string(kPods) + "/web-1/eviction", Eviction("web-1")).code, 201);
  Reply refused = Call("POST", std::string(kPods) + "/web-2/eviction", Eviction("web-2"));
  EXPECT_THAT(refused, testing::IsFailure(
                           429, "TooManyRequests",
                           "Cannot evict pod as it would violate the pod's disruption budget."));
  EXPECT_EQ(refused.body["details"]["causes"][0]["reason"], "DisruptionBudget");
  EXPECT_EQ(refused.body["details"]["causes"][0]["message"],
            "The disruption budget web needs 1 healthy pods and has 1 currently");
  EXPECT_EQ(PodCode("web-2"), 200);
  json status =
      Call("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web").body["status"];
  EXPECT_EQ(status["disruptionsAllowed"], 0);
  EXPECT_EQ(status["currentHealthy"], 1);
  EXPECT_EQ(status["desiredHealthy"], 1);
  EXPECT_EQ(status["expectedPods"], 1);
}

}  // namespace
}  // namespace kubetrain::localkube
