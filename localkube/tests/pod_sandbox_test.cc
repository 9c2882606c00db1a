// Pods in sandboxes (pod_sandbox.h) on a two-node pod network: they reach each other by cluster
// DNS name across nodes, bind the same port, keep /tmp and /dev/shm to themselves, carry their
// own hostname, and leave no network namespace behind. Needs root.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/kubelet.h"
#include "localkube/pod_hosts.h"
#include "localkube/tests/sandbox_kubelet_fixture.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;

// A server answering each connection with its hostname, on 0.0.0.0:7000, after leaving files in
// its /tmp and /dev/shm.
constexpr char kServer[] = R"(
import socket
open('/tmp/left-by-server', 'w').write('x')
open('/dev/shm/left-by-server', 'w').write('x')
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', 7000))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(socket.gethostname().encode())
    c.close()
)";

// Asks each server by name (retrying while it starts), then says what it sees.
constexpr char kClient[] = R"(
import os, socket, time
for name in ['server-a.svc', 'server-b.svc.default.svc.cluster.local']:
    while True:
        try:
            with socket.create_connection((name, 7000), timeout=2) as c:
                print('got', c.recv(100).decode(), flush=True)
                break
        except OSError:
            time.sleep(0.1)
print('hostname', socket.gethostname())
print('tmp', sorted(os.listdir('/tmp')), 'shm', sorted(os.listdir('/dev/shm')), flush=True)
time.sleep(60)
)";

class PodSandboxes : public testing::SandboxKubeletTest {
 protected:
  PodSandboxes() : SandboxKubeletTest("pod_sandbox_test", {"node-1", "node-2"}) {}
  void RunPod(const std::string& name, const std::string& node, const std::string& program) {
    json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", "x"}}}}},
        {"spec",
         {{"restartPolicy", "Never"},
          {"nodeName", node},
          {"automountServiceAccountToken", false},  // no kube-root-ca.crt publisher here
          {"containers",
           {{{"name", "c"},
             {"image", "python"},
             {"command", {"/usr/bin/python3", "-c", program}}}}}}}};
    ASSERT_THAT(api_->Create(Of("pods"), pod, WriteOptions{}), IsOk());
  }
  json PodStatus(const std::string& name) {
    auto pod = api_->Get(Of("pods", name));
    return pod.ok() ? (*pod)["status"] : json::object();
  }
};

TEST_F(PodSandboxes, PodsOnTwoNodesTalkByNameAndKeepTmpShmAndHostnameToThemselves) {
  json svc = {{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", {{"name", "svc"}, {"namespace", "default"}}},
              {"spec", {{"clusterIP", "None"}, {"selector", {{"app", "x"}}}}}};
  ASSERT_THAT(api_->Create(Of("services"), svc, WriteOptions{}), IsOk());
  RunPod("server-a", "node-1", kServer);
  RunPod("server-b", "node-2", kServer);  // the same port, another pod: no clash
  RunPod("client", "node-2", kClient);
  std::string log;
  ASSERT_TRUE(
      Eventually([&] { return absl::StrContains(log = Log("client"), "tmp "); }, absl::Seconds(20)))
      << log << Log("server-a");
  EXPECT_TRUE(absl::StrContains(log, "got server-a")) << log;
  EXPECT_TRUE(absl::StrContains(log, "got server-b")) << log;
  EXPECT_TRUE(absl::StrContains(log, "hostname client")) << log;
  EXPECT_FALSE(absl::StrContains(log, "left-by-server")) << log;     // not in the client's
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/left-by-server"));  // nor on the host
  EXPECT_FALSE(std::filesystem::exists("/tmp/left-by-server"));
  // Each pod on its node's /24, the node's bridge as its host IP.
  PodNetwork* net = kubelet_->pod_network();
  json a = PodStatus("server-a"), b = PodStatus("server-b");
  EXPECT_EQ(a.value("hostIP", ""), net->node_gateway(0));
  EXPECT_EQ(b.value("hostIP", ""), net->node_gateway(1));
  EXPECT_NE(a.value("podIP", ""), b.value("podIP", ""));
}

TEST_F(PodSandboxes, DeletingAPodRemovesItsNetworkNamespace) {
  RunPod("short", "node-1", "import time; time.sleep(60)");
  std::string uid;
  auto netns_of_uid = [&] {
    for (const auto& e : std::filesystem::directory_iterator("/run/netns")) {
      if (absl::StrContains(e.path().filename().string(), uid)) return true;
    }
    return false;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        auto pod = api_->Get(Of("pods", "short"));
        if (!pod.ok() || !(*pod)["status"].contains("podIP")) return false;
        uid = (*pod)["metadata"].value("uid", "");
        return true;
      },
      absl::Seconds(10)));
  EXPECT_TRUE(netns_of_uid());
  DeleteOptions del;
  del.grace_seconds = 0;
  ASSERT_THAT(api_->Delete(Of("pods", "short"), del), IsOk());
  EXPECT_TRUE(Eventually([&] { return !netns_of_uid(); }, absl::Seconds(10)));
}

// Pure: the names a pod's /etc/hosts gives, own line first.
TEST(PodHostsFile, NamesHeadlessServicePodsInEveryForm) {
  HostsPod a{"default", "a", "a", "", "198.18.0.2", {{"app", "x"}}};
  HostsPod b{"other", "b", "b", "", "198.18.1.2", {{"app", "x"}}};
  std::vector<HeadlessService> services =
      HeadlessServices({json{{"metadata", {{"name", "svc"}, {"namespace", "default"}}},
                             {"spec", {{"clusterIP", "None"}, {"selector", {{"app", "x"}}}}}}});
  std::string text = PodHostsFile(b, {a, b}, services);
  EXPECT_TRUE(absl::StrContains(text, "198.18.1.2\tb\n")) << text;
  EXPECT_TRUE(absl::StrContains(text,
                                "198.18.0.2 a.svc.default.svc a.svc.default.svc.cluster.local "
                                "svc.default.svc svc.default.svc.cluster.local\n"))
      << text;  // b is in another namespace: no short forms
  text = PodHostsFile(a, {a, b}, services);
  EXPECT_TRUE(absl::StrContains(text, " a.svc ")) << text;
  EXPECT_TRUE(absl::StrContains(text, " svc\n")) << text;
}

}  // namespace
}  // namespace kubetrain::localkube
