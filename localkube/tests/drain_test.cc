// kubectl cordon, uncordon and drain against the localkube binary: drain evicts a node's pods
// through pods/eviction, and keeps retrying (until its --timeout) while a PodDisruptionBudget
// forbids it. Skips where kubectl is not installed.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "localkube/tests/host.h"
#include "localkube/tests/http_client.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;
using testing::Call;

constexpr char kDrainPods[] = "/api/v1/namespaces/default/pods";

class Drain : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("kubectl version --client >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "kubectl is not installed";
    }
    dir_ = testing::TestDir("localkube_drain_test");
    int port = 0;
    ASSERT_NO_FATAL_FAILURE(testing::StartLocalkube(
        dir_, {"--kubeconfig-out", dir_ + "/kubeconfig", "--insecure-http"}, &pid_, &port));
    client_ = testing::LoopbackClient(port);
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Runs kubectl with `args`; its exit code, and its output in `*out`.
  int Kubectl(const std::string& args, std::string* out) {
    int status = -1;
    *out =
        testing::Shell(absl::StrCat("kubectl --kubeconfig ", dir_, "/kubeconfig ", args), &status);
    return status;
  }

  void AddNode(const std::string& name) {
    json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
    ASSERT_EQ(Call(*client_, "POST", "/api/v1/nodes", node).code, 201);
  }
  // A Running, Ready pod of ReplicaSet `rs` bound to `node`.
  void AddPod(const std::string& name, const std::string& node, const json& rs) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"name", name},
                  {"labels", rs["spec"]["selector"]["matchLabels"]},
                  {"ownerReferences",
                   {{{"apiVersion", "apps/v1"},
                     {"kind", "ReplicaSet"},
                     {"name", rs["metadata"]["name"]},
                     {"uid", rs["metadata"]["uid"]},
                     {"controller", true}}}}}},
                {"spec",
                 {{"nodeName", node},
                  {"containers", {{{"name", "c"}, {"image", "busybox"}}}},
                  {"volumes", {{{"name", "scratch"}, {"emptyDir", json::object()}}}}}}};
    testing::Reply created = Call(*client_, "POST", kDrainPods, pod);
    ASSERT_EQ(created.code, 201) << created.body.dump();
    created.body["status"]["phase"] = "Running";
    created.body["status"]["conditions"] = {{{"type", "Ready"}, {"status", "True"}}};
    ASSERT_EQ(
        Call(*client_, "PUT", std::string(kDrainPods) + "/" + name + "/status", created.body).code,
        200);
  }
  json ReplicaSet(const std::string& name, int replicas) {
    json rs = {{"apiVersion", "apps/v1"},
               {"kind", "ReplicaSet"},
               {"metadata", {{"name", name}}},
               {"spec",
                {{"replicas", replicas},
                 {"selector", {{"matchLabels", {{"app", name}}}}},
                 {"template",
                  {{"metadata", {{"labels", {{"app", name}}}}},
                   {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}}}}}};
    testing::Reply created =
        Call(*client_, "POST", "/apis/apps/v1/namespaces/default/replicasets", rs);
    EXPECT_EQ(created.code, 201) << created.body.dump();
    return created.body;
  }
  int PodCode(const std::string& name) {
    return Call(*client_, "GET", std::string(kDrainPods) + "/" + name).code;
  }
  bool Unschedulable(const std::string& node) {
    return Call(*client_, "GET", "/api/v1/nodes/" + node)
        .body["spec"]
        .value("unschedulable", false);
  }

  std::string dir_;
  pid_t pid_ = -1;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(Drain, DrainEvictsTheNodesPodsAndCordonsIt) {
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  ASSERT_NO_FATAL_FAILURE(AddNode("node-2"));
  json rs = ReplicaSet("web", 2);
  ASSERT_NO_FATAL_FAILURE(AddPod("web-a", "node-1", rs));
  ASSERT_NO_FATAL_FAILURE(AddPod("web-b", "node-2", rs));
  std::string out;
  ASSERT_EQ(Kubectl("drain node-1 --ignore-daemonsets --delete-emptydir-data --timeout=60s", &out),
            0)
      << out;
  EXPECT_THAT(out, ::testing::HasSubstr("evicting pod default/web-a"));
  EXPECT_THAT(out, ::testing::HasSubstr("node/node-1 drained"));
  EXPECT_EQ(PodCode("web-a"), 404);
  EXPECT_EQ(PodCode("web-b"), 200);
  EXPECT_TRUE(Unschedulable("node-1"));
  EXPECT_FALSE(Unschedulable("node-2"));
  ASSERT_EQ(Kubectl("uncordon node-1", &out), 0) << out;
  EXPECT_FALSE(Unschedulable("node-1"));
  ASSERT_EQ(Kubectl("cordon node-2", &out), 0) << out;
  EXPECT_TRUE(Unschedulable("node-2"));
}

TEST_F(Drain, DrainRetriesWhileTheDisruptionBudgetForbidsIt) {
  ASSERT_NO_FATAL_FAILURE(AddNode("node-1"));
  json rs = ReplicaSet("db", 1);
  ASSERT_NO_FATAL_FAILURE(AddPod("db-a", "node-1", rs));
  json pdb = {{"apiVersion", "policy/v1"},
              {"kind", "PodDisruptionBudget"},
              {"metadata", {{"name", "db"}}},
              {"spec", {{"minAvailable", 1}, {"selector", {{"matchLabels", {{"app", "db"}}}}}}}};
  ASSERT_EQ(
      Call(*client_, "POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", pdb).code,
      201);
  std::string out;
  EXPECT_NE(Kubectl("drain node-1 --ignore-daemonsets --delete-emptydir-data --timeout=7s", &out),
            0);
  EXPECT_THAT(out, ::testing::HasSubstr("Cannot evict pod as it would violate the pod's "
                                        "disruption budget."));
  EXPECT_THAT(out, ::testing::HasSubstr("will retry after 5s"));
  EXPECT_THAT(out, ::testing::HasSubstr("global timeout reached"));
  EXPECT_EQ(PodCode("db-a"), 200);
  EXPECT_TRUE(Unschedulable("node-1"));
}

}  // namespace
}  // namespace kubetrain::localkube
