// Runs real pods (sleep processes) on two kubelets side by side, as two localkubes on one
// machine would.
#include "localkube/kubelet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;

// One localkube's worth of state: registry, store, API and a kubelet.
struct Instance {
  explicit Instance(const std::string& dir) : api(&registry, &store) {
    KubeletOptions options;
    options.log_dir = dir + "/logs";
    options.hosts_file = dir + "/hosts";
    kubelet = std::make_unique<Kubelet>(options, &api);
    api.EnableGracefulPodDeletion();
    kubelet->Start();
  }
  ~Instance() { kubelet->Stop(); }

  void RunPod(const std::string& name, json labels = json::object()) {
    json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", labels}}},
        {"spec",
         {{"restartPolicy", "Never"},
          {"containers", {{{"name", "c"}, {"image", "busybox"}, {"command", {"sleep", "30"}}}}}}}};
    ASSERT_THAT(api.Create(Pods(), pod, WriteOptions{}), IsOk());
  }
  // The pod's IP once the kubelet has published it ("" after 10 s).
  std::string PodIp(const std::string& name) {
    Target t = Pods();
    t.name = name;
    std::string ip;
    Eventually(
        [&] {
          auto pod = api.Get(t);
          if (pod.ok() && (*pod)["status"].contains("podIP")) ip = (*pod)["status"]["podIP"];
          return !ip.empty();
        },
        absl::Seconds(10));
    return ip;
  }
  Target Pods() { return Target{registry.Find("", "v1", "pods"), "default", "", ""}; }

  Registry registry;
  Store store;
  Api api;
  std::unique_ptr<Kubelet> kubelet;
};

class KubeletIps : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            absl::StrCat("kubelet_test-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()->random_seed()))
               .string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(KubeletIps, TwoInstancesHandOutDisjointPodIps) {
  Instance a(dir_ + "/a"), b(dir_ + "/b");
  EXPECT_NE(a.kubelet->ip_block(), b.kubelet->ip_block());
  std::set<std::string> ips_a, ips_b;
  for (int i = 0; i < 3; ++i) {
    std::string name = absl::StrCat("p", i);
    a.RunPod(name);
    b.RunPod(name);
  }
  for (int i = 0; i < 3; ++i) {
    std::string name = absl::StrCat("p", i);
    std::string ip_a = a.PodIp(name), ip_b = b.PodIp(name);
    ASSERT_FALSE(ip_a.empty());
    ASSERT_FALSE(ip_b.empty());
    ips_a.insert(ip_a);
    ips_b.insert(ip_b);
    // Each inside its own block, never in 127.0.0.x.
    std::string block_a = a.kubelet->ip_block(), block_b = b.kubelet->ip_block();
    EXPECT_TRUE(absl::StartsWith(ip_a, block_a.substr(0, block_a.size() - 4))) << ip_a;
    EXPECT_TRUE(absl::StartsWith(ip_b, block_b.substr(0, block_b.size() - 4))) << ip_b;
    EXPECT_FALSE(absl::StartsWith(ip_a, "127.0.0."));
  }
  EXPECT_EQ(ips_a.size(), 3u);
  EXPECT_EQ(ips_b.size(), 3u);
  for (const std::string& ip : ips_a) EXPECT_EQ(ips_b.count(ip), 0u) << ip;
}

// Cluster DNS as CoreDNS answers it: a headless Service's name, <svc>.<ns>.svc, resolves to the
// pods it selects (Kubeflow's TF_CONFIG addresses are such names), here through the hosts file,
// also for Services created after their pods.
TEST_F(KubeletIps, HeadlessServicesResolveToTheirPods) {
  Instance a(dir_);
  a.RunPod("tf-worker-0", {{"job", "tf"}, {"index", "0"}});
  a.RunPod("tf-worker-1", {{"job", "tf"}, {"index", "1"}});
  const std::string ip0 = a.PodIp("tf-worker-0"), ip1 = a.PodIp("tf-worker-1");
  ASSERT_FALSE(ip0.empty());
  Target services{a.registry.Find("", "v1", "services"), "default", "", ""};
  auto service = [](const std::string& name, json selector, const std::string& cluster_ip) {
    return json{{"apiVersion", "v1"},
                {"kind", "Service"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"clusterIP", cluster_ip},
                  {"selector", selector},
                  {"ports", {{{"name", "p"}, {"port", 2222}}}}}}};
  };
  ASSERT_THAT(
      a.api.Create(services, service("tf-worker-1", {{"job", "tf"}, {"index", "1"}}, "None"),
                   WriteOptions{}),
      IsOk());
  ASSERT_THAT(a.api.Create(services, service("tf", {{"job", "tf"}}, "None"), WriteOptions{}),
              IsOk());
  // The hosts file's line for `ip` once it names the headless Service ("" after 10 s).
  auto hosts_line = [&](const std::string& ip) {
    std::string found;
    Eventually(
        [&] {
          std::ifstream in(dir_ + "/hosts");
          std::string line;
          while (std::getline(in, line)) {
            if (absl::StartsWith(line, ip + " ") && absl::StrContains(line, "tf.default.svc")) {
              found = line;
              return true;
            }
          }
          return false;
        },
        absl::Seconds(10));
    return found;
  };
  std::string line1 = hosts_line(ip1);
  EXPECT_THAT(line1, ::testing::HasSubstr(" tf-worker-1.default.svc tf-worker-1.default.svc."
                                          "cluster.local"));
  std::string line0 = hosts_line(ip0);
  EXPECT_THAT(line0, ::testing::HasSubstr(" tf.default.svc"));
  EXPECT_THAT(line0, ::testing::Not(::testing::HasSubstr("tf-worker-1.default.svc")));
}

// A pod force-deleted while its node is cut off, and a new pod of its name bound to another node:
// each node has a kubelet of its own, so the new one runs at once; the old one runs on unseen
// until its node is back, and is stopped then (a returning kubelet kills what was deleted).
TEST_F(KubeletIps, APodsNameGoesToAnotherNodeWhileItsOwnIsCutOff) {
  Registry registry;
  Store store;
  Api api(&registry, &store);
  KubeletOptions options;
  options.log_dir = dir_ + "/logs";
  options.node_names = {"node-1", "node-2"};
  Kubelet kubelet(options, &api);
  api.EnableGracefulPodDeletion();
  kubelet.Start();
  Target pods{registry.Find("", "v1", "pods"), "default", "", ""};
  Target ps = pods;
  ps.name = "job-ps-0";
  // Each pod's container writes its pid ($$$$: a $$ once the kubelet has expanded the command).
  auto pod_on = [&](const std::string& node) {
    const std::string pid_file = dir_ + "/" + node + ".pid";
    return json{
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", "job-ps-0"}, {"namespace", "default"}}},
        {"spec",
         {{"nodeName", node},
          {"restartPolicy", "Never"},
          {"automountServiceAccountToken", false},
          {"containers",
           {{{"name", "c"},
             {"image", "busybox"},
             {"command",
              {"sh", "-c", absl::StrCat("echo $$$$ > ", pid_file, "; exec sleep 600")}}}}}}}};
  };
  auto phase = [&] {
    auto pod = api.Get(ps);
    return pod.ok() ? (*pod)["status"].value("phase", "") : "";
  };
  auto pid_of = [&](const std::string& node) {
    int pid = 0;
    std::ifstream(dir_ + "/" + node + ".pid") >> pid;
    return pid;
  };
  ASSERT_THAT(api.Create(pods, pod_on("node-1"), WriteOptions{}), IsOk());
  ASSERT_TRUE(Eventually([&] { return phase() == "Running" && pid_of("node-1") > 0; }));
  const int old_pid = pid_of("node-1");

  ASSERT_THAT(kubelet.SetNodeState("node-1", Kubelet::NodeState::kPartitioned), IsOk());
  DeleteOptions force;
  force.grace_seconds = 0;
  ASSERT_THAT(api.Delete(ps, force), IsOk());
  ASSERT_THAT(api.Create(pods, pod_on("node-2"), WriteOptions{}), IsOk());
  ASSERT_TRUE(Eventually([&] { return phase() == "Running" && pid_of("node-2") > 0; }))
      << "the new pod on node-2 did not start while node-1 was cut off: " << phase();
  EXPECT_EQ(kill(old_pid, 0), 0) << "the cut-off node's pod runs on, unseen";

  ASSERT_THAT(kubelet.SetNodeState("node-1", Kubelet::NodeState::kUp), IsOk());
  EXPECT_TRUE(Eventually([&] { return kill(old_pid, 0) != 0; }))
      << "the old pod outlived its node's return";
  EXPECT_EQ(kill(pid_of("node-2"), 0), 0);
  EXPECT_EQ(phase(), "Running");
  kubelet.Stop();
}

}  // namespace
}  // namespace kubetrain::localkube
