// The Deployment and ReplicaSet controllers straight through Api (no HTTP, no processes: the
// tests play the kubelet by marking pods Ready): ReplicaSets and pods from a Deployment, pod
// replacement, scaling, template rollouts, status and conditions, deletion, and the thread's
// start and stop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/workloads.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;

json Deployment(const std::string& name, int replicas, const std::string& image = "busybox") {
  return json::parse(absl::StrCat(R"({"apiVersion":"apps/v1","kind":"Deployment",
    "metadata":{"name":")",
                                  name, R"("},
    "spec":{"replicas":)",
                                  replicas, R"(,"selector":{"matchLabels":{"app":")", name,
                                  R"("}},
      "template":{"metadata":{"labels":{"app":")",
                                  name, R"("}},
        "spec":{"containers":[{"name":"c","image":")",
                                  image, R"("}]}}}})"));
}

class Workloads : public ::testing::Test {
 protected:
  Workloads() : api_(&registry_, &store_), controllers_(&api_) {}

  Target Of(const std::string& group, const std::string& plural, const std::string& name = "") {
    return Target{registry_.Find(group, "v1", plural), "default", name, ""};
  }
  json Create(const json& deployment) {
    auto created = api_.Create(Of("apps", "deployments"), deployment, WriteOptions{});
    EXPECT_THAT(created, IsOk());
    return created.ok() ? *created : json();
  }
  json Fetch(const std::string& group, const std::string& plural, const std::string& name) {
    auto o = api_.Get(Of(group, plural, name));
    EXPECT_THAT(o, IsOk()) << plural << "/" << name;
    return o.ok() ? *o : json();
  }
  std::vector<json> List(const std::string& group, const std::string& plural) {
    auto list = api_.List(Of(group, plural), ListOptions{});
    EXPECT_THAT(list, IsOk());
    if (!list.ok()) return {};
    return std::vector<json>((*list)["items"].begin(), (*list)["items"].end());
  }
  std::vector<json> Pods() { return List("", "pods"); }
  // Passes until nothing changes any more (each pass sees the previous one's writes).
  void Settle() {
    for (int i = 0; i < 10; ++i) {
      int64_t before = store_.Revision();
      controllers_.SyncOnce();
      if (store_.Revision() == before) return;
    }
    ADD_FAILURE() << "the controllers never settled";
  }
  // What the kubelet reports for a started pod.
  void MarkReady(const json& pod) {
    ASSERT_THAT(api_.Mutate("/pods", "default", pod["metadata"]["name"],
                            [](json& p) {
                              p["status"]["phase"] = "Running";
                              p["status"]["conditions"] = {
                                  {{"type", "Ready"},
                                   {"status", "True"},
                                   {"lastTransitionTime", "2020-01-01T00:00:00Z"}}};
                              return true;
                            }),
                IsOk());
  }
  void MarkAllReady() {
    for (const json& p : Pods()) MarkReady(p);
  }
  json Condition(const json& deployment, const std::string& type) {
    for (const json& c : deployment["status"].value("conditions", json::array())) {
      if (c["type"] == type) return c;
    }
    return nullptr;
  }

  Registry registry_;
  Store store_;
  Api api_;
  WorkloadControllers controllers_;
};

TEST_F(Workloads, ADeploymentGetsAReplicaSetAndItsPods) {
  json d = Create(Deployment("web", 3));
  Settle();
  std::string hash = PodTemplateHash(d["spec"]["template"]);
  EXPECT_TRUE(std::regex_match(hash, std::regex("[bcdfghjklmnpqrstvwxz2456789]{1,10}"))) << hash;
  std::vector<json> sets = List("apps", "replicasets");
  ASSERT_EQ(sets.size(), 1u);
  const json& rs = sets[0];
  EXPECT_EQ(rs["metadata"]["name"], "web-" + hash);
  EXPECT_EQ(rs["metadata"]["labels"], json({{"app", "web"}, {"pod-template-hash", hash}}));
  EXPECT_EQ(rs["metadata"]["ownerReferences"][0]["uid"], d["metadata"]["uid"]);
  EXPECT_EQ(rs["metadata"]["ownerReferences"][0]["kind"], "Deployment");
  EXPECT_EQ(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
  EXPECT_EQ(rs["spec"]["selector"]["matchLabels"],
            json({{"app", "web"}, {"pod-template-hash", hash}}));
  EXPECT_EQ(rs["spec"]["replicas"], 3);
  std::vector<json> pods = Pods();
  ASSERT_EQ(pods.size(), 3u);
  for (const json& p : pods) {
    std::string name = p["metadata"]["name"];
    EXPECT_TRUE(std::regex_match(name, std::regex("web-" + hash + "-[a-z0-9]{5}"))) << name;
    EXPECT_EQ(p["metadata"]["labels"], json({{"app", "web"}, {"pod-template-hash", hash}}));
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["uid"], rs["metadata"]["uid"]);
    EXPECT_EQ(p["metadata"]["ownerReferences"][0]["controller"], true);
    EXPECT_EQ(p["spec"]["serviceAccountName"], "default");  // admitted like any pod
    EXPECT_EQ(p["metadata"]["managedFields"][0]["manager"], "kube-controller-manager");
  }
  json live = Fetch("apps", "deployments", "web");
  EXPECT_EQ(live["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "1");
}

TEST_F(Workloads, StatusAndConditionsFollowThePods) {
  Create(Deployment("web", 2));
  Settle();
  json d = Fetch("apps", "deployments", "web");
  EXPECT_EQ(d["status"]["observedGeneration"], 1);
  EXPECT_EQ(d["status"]["replicas"], 2);
  EXPECT_EQ(d["status"]["updatedReplicas"], 2);
  EXPECT_FALSE(d["status"].contains("readyReplicas"));
  EXPECT_EQ(d["status"]["unavailableReplicas"], 2);
  EXPECT_EQ(Condition(d, "Available")["status"], "False");
  EXPECT_EQ(Condition(d, "Available")["reason"], "MinimumReplicasUnavailable");
  EXPECT_EQ(Condition(d, "Progressing")["reason"], "NewReplicaSetCreated");
  MarkAllReady();
  Settle();
  d = Fetch("apps", "deployments", "web");
  std::string rs = "web-" + PodTemplateHash(d["spec"]["template"]);
  EXPECT_EQ(d["status"]["replicas"], 2);
  EXPECT_EQ(d["status"]["updatedReplicas"], 2);
  EXPECT_EQ(d["status"]["readyReplicas"], 2);
  EXPECT_EQ(d["status"]["availableReplicas"], 2);
  EXPECT_FALSE(d["status"].contains("unavailableReplicas"));
  json available = Condition(d, "Available");
  EXPECT_EQ(available["status"], "True");
  EXPECT_EQ(available["reason"], "MinimumReplicasAvailable");
  EXPECT_EQ(available["message"], "Deployment has minimum availability.");
  json progressing = Condition(d, "Progressing");
  EXPECT_EQ(progressing["status"], "True");
  EXPECT_EQ(progressing["reason"], "NewReplicaSetAvailable");
  EXPECT_EQ(progressing["message"], "ReplicaSet \"" + rs + "\" has successfully progressed.");
  EXPECT_TRUE(progressing["lastUpdateTime"].is_string());
  EXPECT_TRUE(progressing["lastTransitionTime"].is_string());
  json set = Fetch("apps", "replicasets", rs);
  EXPECT_EQ(set["status"], json::parse(R"({"replicas":2,"fullyLabeledReplicas":2,
      "readyReplicas":2,"availableReplicas":2,"observedGeneration":1})"));
  // Settled: another pass writes nothing.
  int64_t revision = store_.Revision();
  controllers_.SyncOnce();
  EXPECT_EQ(store_.Revision(), revision);
}

TEST_F(Workloads, DeletedAndFailedPodsAreReplaced) {
  Create(Deployment("web", 2));
  Settle();
  std::vector<json> pods = Pods();
  ASSERT_EQ(pods.size(), 2u);
  std::string gone = pods[0]["metadata"]["name"];
  ASSERT_THAT(api_.Delete(Of("", "pods", gone), DeleteOptions{}), IsOk());
  std::string failed = pods[1]["metadata"]["name"];
  ASSERT_THAT(api_.Mutate("/pods", "default", failed,
                          [](json& p) {
                            p["status"]["phase"] = "Failed";
                            return true;
                          }),
              IsOk());
  Settle();
  pods = Pods();
  ASSERT_EQ(pods.size(), 2u);
  for (const json& p : pods) {
    EXPECT_NE(p["metadata"]["name"], gone);
    EXPECT_NE(p["metadata"]["name"], failed);
  }
}

TEST_F(Workloads, ScalingUpAndDown) {
  Create(Deployment("web", 1));
  Settle();
  ASSERT_EQ(Pods().size(), 1u);
  bool created = false;
  json scale = {{"spec", {{"replicas", 4}}}};
  ASSERT_THAT(
      api_.Update(Target{registry_.Find("apps", "v1", "deployments"), "default", "web", "scale"},
                  scale, WriteOptions{}, &created),
      IsOk());
  Settle();
  EXPECT_EQ(Pods().size(), 4u);
  MarkAllReady();
  Settle();
  EXPECT_EQ(Fetch("apps", "deployments", "web")["status"]["availableReplicas"], 4);
  json d = Fetch("apps", "deployments", "web");
  d["spec"]["replicas"] = 2;
  ASSERT_THAT(api_.Update(Of("apps", "deployments", "web"), d, WriteOptions{}, &created), IsOk());
  Settle();
  EXPECT_EQ(Pods().size(), 2u);
  d = Fetch("apps", "deployments", "web");
  EXPECT_EQ(d["status"]["observedGeneration"], d["metadata"]["generation"]);
  EXPECT_EQ(d["status"]["replicas"], 2);
  EXPECT_EQ(Condition(d, "Progressing")["reason"], "NewReplicaSetAvailable");
  d["spec"]["replicas"] = 0;
  ASSERT_THAT(api_.Update(Of("apps", "deployments", "web"), d, WriteOptions{}, &created), IsOk());
  Settle();
  EXPECT_TRUE(Pods().empty());
  EXPECT_EQ(Condition(Fetch("apps", "deployments", "web"), "Available")["status"], "True");
}

TEST_F(Workloads, ATemplateChangeRollsOut) {
  Create(Deployment("web", 2, "busybox:1"));
  Settle();
  MarkAllReady();
  Settle();
  json d = Fetch("apps", "deployments", "web");
  std::string old_hash = PodTemplateHash(d["spec"]["template"]);
  d["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2";
  bool created = false;
  ASSERT_THAT(api_.Update(Of("apps", "deployments", "web"), d, WriteOptions{}, &created), IsOk());
  std::string new_hash = PodTemplateHash(d["spec"]["template"]);
  ASSERT_NE(old_hash, new_hash);
  Settle();
  std::vector<json> pods = Pods();
  ASSERT_EQ(pods.size(), 2u);
  for (const json& p : pods) {
    EXPECT_EQ(p["metadata"]["labels"]["pod-template-hash"], new_hash);
    EXPECT_EQ(p["spec"]["containers"][0]["image"], "busybox:2");
  }
  json old_rs = Fetch("apps", "replicasets", "web-" + old_hash);
  EXPECT_EQ(old_rs["spec"]["replicas"], 0);
  json new_rs = Fetch("apps", "replicasets", "web-" + new_hash);
  EXPECT_EQ(new_rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
  d = Fetch("apps", "deployments", "web");
  EXPECT_EQ(d["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
  EXPECT_EQ(d["status"]["observedGeneration"], 2);
  EXPECT_EQ(d["status"]["updatedReplicas"], 2);
  EXPECT_EQ(Condition(d, "Progressing")["reason"], "NewReplicaSetCreated");
  EXPECT_EQ(Condition(d, "Progressing")["message"],
            "Created new replica set \"web-" + new_hash + "\"");
  MarkAllReady();
  Settle();
  d = Fetch("apps", "deployments", "web");
  EXPECT_EQ(Condition(d, "Progressing")["reason"], "NewReplicaSetAvailable");
  EXPECT_EQ(d["status"]["availableReplicas"], 2);
  // Rolling back to the first template reuses its ReplicaSet as revision 3.
  d["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1";
  ASSERT_THAT(api_.Update(Of("apps", "deployments", "web"), d, WriteOptions{}, &created), IsOk());
  Settle();
  EXPECT_EQ(List("apps", "replicasets").size(), 2u);
  old_rs = Fetch("apps", "replicasets", "web-" + old_hash);
  EXPECT_EQ(old_rs["spec"]["replicas"], 2);
  EXPECT_EQ(old_rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "3");
}

TEST_F(Workloads, DeletingTheDeploymentDeletesItsReplicaSetsAndPods) {
  Create(Deployment("web", 3));
  Create(Deployment("other", 1));
  Settle();
  ASSERT_EQ(Pods().size(), 4u);
  ASSERT_THAT(api_.Delete(Of("apps", "deployments", "web"), DeleteOptions{}), IsOk());
  Settle();
  std::vector<json> pods = Pods();
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(pods[0]["metadata"]["name"].get<std::string>(), "other-"));
  EXPECT_EQ(List("apps", "replicasets").size(), 1u);
}

TEST_F(Workloads, AMissingServiceAccountIsReportedAsReplicaFailure) {
  json d = Deployment("web", 1);
  d["spec"]["template"]["spec"]["serviceAccountName"] = "nope";
  Create(d);
  Settle();
  EXPECT_TRUE(Pods().empty());
  json failure = Condition(Fetch("apps", "deployments", "web"), "ReplicaFailure");
  EXPECT_EQ(failure["reason"], "FailedCreate");
  EXPECT_THAT(failure["message"].get<std::string>(),
              ::testing::HasSubstr("error looking up service account default/nope"));
}

TEST_F(Workloads, TheThreadReactsToChangesAndStopsPromptly) {
  controllers_.Start();
  Create(Deployment("web", 2));
  EXPECT_TRUE(Eventually([&] { return Pods().size() >= 2; }, absl::Seconds(10)));
  EXPECT_EQ(Pods().size(), 2u);
  // workloads.h promises Stop returns within about 250 ms plus the pass in progress.
  auto start = std::chrono::steady_clock::now();
  controllers_.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace kubetrain::localkube
