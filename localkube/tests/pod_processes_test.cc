// Processes of sandboxed pods (pod_sandbox.h, pod_init/): each pod has a PID namespace of its
// own, shared by its containers, with a /proc that shows only the pod's processes; a pod cannot
// see or signal another's; killing a pod's holder ends the pod; and a parameter server and a
// worker in two pods train over gRPC, never mapping each other's memory. Needs root.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/kubelet.h"
#include "localkube/tests/sandbox_kubelet_fixture.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;

// Says what the pod's /proc holds and what PID 1 is, then whether it can signal host pid argv[1]
// (0: none given), and sleeps.
constexpr char kLooker[] = R"(
import os, sys, time
procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
init = open('/proc/1/cmdline').read().split('\0')[0]
# Pid numbers are the kernel's to give (a sanitizer's helper may take one and be gone), so what
# is printed is whether the pod holds exactly PID 1 and this process.
print('only init and me:', procs == sorted([1, os.getpid()]), procs, 'init', init, flush=True)
other = int(sys.argv[1])
if other:
    try:
        os.kill(other, 0)
        print('signal: delivered', flush=True)
    except ProcessLookupError:
        print('signal: no such process', flush=True)
time.sleep(60)
)";

// Waits until the pod's /proc shows another process with argv[1] in its command line, then lists
// the pod's processes.
constexpr char kSibling[] = R"(
import os, sys, time
def mine(p):
    if p == str(os.getpid()):
        return False
    try:
        return sys.argv[1] in open('/proc/%s/cmdline' % p).read().split('\0')[2:]
    except OSError:
        return False
while not any(mine(p) for p in os.listdir('/proc') if p.isdigit()):
    time.sleep(0.05)
procs = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print('sibling seen;', len(procs), 'processes', procs, flush=True)
time.sleep(60)
)";

class PodProcesses : public testing::SandboxKubeletTest {
 protected:
  PodProcesses() : SandboxKubeletTest("pod_processes_test", {"node-1", "node-2"}) {
    image_map_ = {
        {"kubetrain/", std::filesystem::path(KUBETRAIN_PS_BINARY).parent_path().string()}};
  }
  static json Container(const std::string& name, const std::vector<std::string>& command) {
    return {{"name", name}, {"image", "x"}, {"command", command}};
  }
  static json Python(const std::string& name, const char* program, const std::string& arg) {
    return Container(name, {"/usr/bin/python3", "-c", program, arg});
  }
  void RunPod(const std::string& name, const std::string& node, const std::vector<json>& containers,
              const std::string& restart_policy = "Never") {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"restartPolicy", restart_policy},
                  {"nodeName", node},
                  {"automountServiceAccountToken", false},  // no kube-root-ca.crt publisher here
                  {"containers", containers}}}};
    ASSERT_THAT(api_->Create(Of("pods"), pod, WriteOptions{}), IsOk());
  }
  json Status(const std::string& pod) {
    auto p = api_->Get(Of("pods", pod));
    return p.ok() ? (*p)["status"] : json::object();
  }
  // A /proc file's text; empty when the process ended while it was read (ESRCH).
  static std::string ProcFile(const std::filesystem::path& path) {
    try {
      std::ifstream in(path);
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure&) {
      return "";
    }
  }
  // The host pids of the processes whose argv[index] is `word` and whose command line holds
  // `marker`; with `parent`, only that process's children.
  static std::vector<pid_t> HostPids(const std::string& word, size_t index,
                                     const std::string& marker, pid_t parent = 0) {
    std::vector<pid_t> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string text = ProcFile(e.path() / "cmdline");
      std::vector<std::string> argv = absl::StrSplit(text, '\0');
      if (argv.size() <= index || argv[index] != word || !absl::StrContains(text, marker)) continue;
      if (parent != 0 && !absl::StrContains(ProcFile(e.path() / "status"),
                                            absl::StrCat("\nPPid:\t", parent, "\n"))) {
        continue;
      }
      found.push_back(std::stoi(e.path().filename().string()));
    }
    return found;
  }
};

TEST_F(PodProcesses, APodSeesOnlyItsOwnProcessesAndCannotSignalAnotherPods) {
  const std::string marker = "marker-a-" + tag_;
  RunPod("a", "node-1", {Python("c", "import time; time.sleep(60)", marker)});
  std::vector<pid_t> a_pids;
  ASSERT_TRUE(
      Eventually([&] { return !(a_pids = HostPids("/usr/bin/python3", 0, marker)).empty(); },
                 absl::Seconds(20)));
  ASSERT_EQ(a_pids.size(), 1u);
  RunPod("b", "node-2", {Python("c", kLooker, std::to_string(a_pids[0]))});
  std::string b;
  ASSERT_TRUE(
      Eventually([&] { return absl::StrContains(b = Log("b"), "signal: "); }, absl::Seconds(20)))
      << b;
  // b: PID 1 (the holder's child) and itself, nothing of the host's or of pod a.
  EXPECT_TRUE(absl::StrContains(b, "only init and me: True ")) << b;
  EXPECT_TRUE(absl::StrContains(b, "localkube-pod-init")) << b;
  EXPECT_TRUE(absl::StrContains(b, "signal: no such process")) << b;
  // The host still sees the pod's process, under another pid, and can signal it.
  EXPECT_EQ(kill(a_pids[0], 0), 0);
}

TEST_F(PodProcesses, ContainersOfAPodSeeEachOther) {
  const std::string marker = "marker-s-" + tag_;
  RunPod("p", "node-1",
         {Python("c", kSibling, marker), Python("m", "import time; time.sleep(60)", marker)});
  std::string log;
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(log = Log("p"), "sibling seen"); },
                         absl::Seconds(20)))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "sibling seen; 3 processes")) << log;  // PID 1, two containers
}

TEST_F(PodProcesses, KillingThePodsHolderEndsItsContainers) {
  const std::string marker = "marker-h-" + tag_;
  RunPod("h", "node-1", {Python("c", "import time; time.sleep(60)", marker)});
  ASSERT_TRUE(Eventually([&] { return !HostPids("/usr/bin/python3", 0, marker).empty(); },
                         absl::Seconds(20)));
  // The holder, started by the kubelet (this process), with --hostname h (the pod's name).
  const std::string hostname = absl::StrCat("--hostname", std::string(1, '\0'), "h");
  std::vector<pid_t> holders = HostPids("hold", 1, hostname + std::string(1, '\0'), getpid());
  ASSERT_EQ(holders.size(), 1u);
  ASSERT_EQ(kill(holders[0], SIGKILL), 0);
  json terminated;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const json& s : Status("h").value("containerStatuses", json::array())) {
          if (s.contains("state") && s["state"].contains("terminated")) {
            terminated = s["state"]["terminated"];
            return true;
          }
        }
        return false;
      },
      absl::Seconds(20)))
      << Status("h").dump();
  EXPECT_EQ(terminated.value("exitCode", 0), 137) << terminated.dump();
  EXPECT_TRUE(HostPids("/usr/bin/python3", 0, marker).empty());
}

// The kubelet sees the program's own exit codes, 143 for its death by SIGTERM included, and
// restarts it by the pod's policy; the pod's /tmp outlives each run.
constexpr char kRuns[] = R"(
import os, signal
runs = len(open('/tmp/runs').read()) if os.path.exists('/tmp/runs') else 0
open('/tmp/runs', 'a').write('x')
if runs == 0:
    raise SystemExit(3)
if runs == 1:
    os.kill(os.getpid(), signal.SIGTERM)
)";

TEST_F(PodProcesses, ExitCodesAndRestartsAreTheProgramsOwn) {
  RunPod("r", "node-1", {Python("c", kRuns, "")}, "OnFailure");
  json status;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const json& s : Status("r").value("containerStatuses", json::array())) {
          if (s["state"].contains("terminated")) {
            status = s;
            return true;
          }
        }
        return false;
      },
      absl::Seconds(30)))
      << Status("r").dump();
  EXPECT_EQ(status.value("restartCount", -1), 2) << status.dump();
  EXPECT_EQ(status["lastState"]["terminated"].value("exitCode", -1), 143) << status.dump();
  EXPECT_EQ(status["state"]["terminated"].value("exitCode", -1), 0) << status.dump();
}

// A ps on node-1 and a worker on node-2, as a TrainingJob's pods: the worker's offer of shared
// memory is declined (another pod) and training goes on over gRPC without a refusal logged.
TEST_F(PodProcesses, PsAndWorkerInTwoPodsTrainOverGrpcWithoutSharingMemory) {
  const json secret =
      json::array({{{"name", "KUBETRAIN_JOB_SECRET"}, {"value", "0123456789abcdef"}}});
  // The programs come from their images, as in localkube: the build's folder (which a checkout
  // under /tmp puts below the pods' own /tmp) is mapped into each sandbox.
  ASSERT_EQ(std::filesystem::path(KUBETRAIN_PS_BINARY).parent_path(),
            std::filesystem::path(KUBETRAIN_WORKER_BINARY).parent_path());
  json ps_container = Container("c", {"kubetrain-ps", "--metrics-port=0"});
  ps_container["image"] = "kubetrain/ps:1";
  ps_container["env"] = secret;
  RunPod("ps", "node-1", {ps_container});
  std::string ip;
  ASSERT_TRUE(Eventually([&] { return !(ip = Status("ps").value("podIP", "")).empty(); },
                         absl::Seconds(20)));
  json worker_container =
      Container("c", {"kubetrain-worker", "--mode=ps-sync", "--ps=" + ip + ":2222",
                      "--worker-index=0", "--num-workers=1", "--epochs=1", "--threads=1",
                      "--log-every=1s", "--metrics-port=0", "--checkpoint-dir=/tmp/ckpt"});
  worker_container["env"] = secret;
  worker_container["image"] = "kubetrain/worker:1";
  RunPod("worker", "node-2", {worker_container});
  std::string worker, ps;
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(worker = Log("worker"), "msg=progress"); },
                         absl::Seconds(120)))
      << worker << Log("ps");
  ps = Log("ps");
  EXPECT_FALSE(absl::StrContains(ps, "Mapped a worker's shared memory")) << ps;
  EXPECT_FALSE(absl::StrContains(ps, "level=warn")) << ps;
  EXPECT_FALSE(absl::StrContains(worker, "through shared memory")) << worker;
  EXPECT_TRUE(absl::StrContains(worker, "Pushing and pulling over gRPC bytes")) << worker;
  EXPECT_TRUE(absl::StrContains(worker, "runs in another pod")) << worker;
  // No warning or error about it (the chief may warn that its checkpoints are in the pod).
  for (absl::string_view line : absl::StrSplit(worker, '\n')) {
    if (absl::StrContains(line, "level=warn") || absl::StrContains(line, "level=error")) {
      EXPECT_FALSE(absl::StrContains(line, "shared memory") || absl::StrContains(line, "Attach"))
          << line;
    }
  }
}

}  // namespace
}  // namespace kubetrain::localkube
