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
  // The headless Service `svc` over every pod RunPod makes.
  void CreateService() {
    json svc = {{"apiVersion", "v1"},
                {"kind", "Service"},
                {"metadata", {{"name", "svc"}, {"namespace", "default"}}},
                {"spec", {{"clusterIP", "None"}, {"selector", {{"app", "x"}}}}}};
    ASSERT_THAT(api_->Create(Of("services"), svc, WriteOptions{}), IsOk());
  }
  json PodStatus(const std::string& name) {
    auto pod = api_->Get(Of("pods", name));
    return pod.ok() ? (*pod)["status"] : json::object();
  }
};

TEST_F(PodSandboxes, PodsOnTwoNodesTalkByNameAndKeepTmpShmAndHostnameToThemselves) {
  CreateService();
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

// Raw DNS queries to the name server of the pod's resolv.conf: A of its own Service name, AAAA
// of the Service (which c-ares asks after reading the A record from /etc/hosts), and a name
// outside the cluster. Each answer must come within the socket's timeout.
constexpr char kDnsAsker[] = R"(
import socket, struct
conf = [l.split() for l in open('/etc/resolv.conf') if l.strip() and not l.startswith('#')]
server = [l[1] for l in conf if l[0] == 'nameserver'][0]
print('search', *[l[1:] for l in conf if l[0] == 'search'][0], flush=True)
def ask(name, qtype):
    q = struct.pack('>6H', 7, 0x100, 1, 0, 0, 0)
    q += b''.join(bytes([len(p)]) + p.encode() for p in name.split('.')) + b'\0'
    q += struct.pack('>HH', qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(q, (server, 53))
    r = s.recv(512)
    answers, at, addresses = struct.unpack('>H', r[6:8])[0], len(q), []
    for _ in range(answers):
        kind, size = struct.unpack('>H', r[at+2:at+4])[0], struct.unpack('>H', r[at+10:at+12])[0]
        family = socket.AF_INET if kind == 1 else socket.AF_INET6
        addresses.append(socket.inet_ntop(family, r[at+12:at+12+size]))
        at += 12 + size
    return r[3] & 15, ','.join(addresses) or '-'
for name, qtype in [('asker.svc.default.svc.cluster.local', 1), ('svc', 28), ('nowhere.example', 1)]:
    print('dns', name, qtype, *ask(name, qtype), flush=True)
print('done', flush=True)
)";

TEST_F(PodSandboxes, ThePodsResolverGetsAnswersFromTheClusterDnsAtOnce) {
  CreateService();
  RunPod("asker", "node-2", kDnsAsker);
  std::string log;
  ASSERT_TRUE(
      Eventually([&] { return absl::StrContains(log = Log("asker"), "done"); }, absl::Seconds(30)))
      << log;
  const std::string ip = PodStatus("asker").value("podIP", "");
  ASSERT_FALSE(ip.empty());
  EXPECT_TRUE(absl::StrContains(log,
                                "search default.svc.cluster.local svc.cluster.local "
                                "cluster.local\n"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "dns asker.svc.default.svc.cluster.local 1 0 " + ip + "\n"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "dns svc 28 0 -\n")) << log;  // listed, no IPv6: no records
  EXPECT_TRUE(absl::StrContains(log, "dns nowhere.example 1 3 -\n")) << log;  // NXDOMAIN
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
