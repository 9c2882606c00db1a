// Runs the localkube binary itself: what its files look like on disk and how it stops.
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "localkube/tests/host.h"
#include "localkube/tests/http_client.h"

namespace {

using ::kubetrain::localkube::testing::FileMode;
using ::kubetrain::localkube::testing::FindKubectl;
using ::kubetrain::localkube::testing::ReadFile;
using ::kubetrain::localkube::testing::Shell;
using ::kubetrain::testing::Eventually;
using nlohmann::json;

constexpr char kPods[] = "/api/v1/namespaces/default/pods";

// A pod named `name` whose one container, "c", is `container`; `spec` adds to the pod's spec.
json PodOf(const std::string& name, json container, json spec = json::object()) {
  container["name"] = "c";
  spec["containers"] = json::array({container});
  return {{"metadata", {{"name", name}}}, {"spec", spec}};
}

class LocalkubeProcess : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = kubetrain::localkube::testing::TestDir("localkube_main_test"); }
  void TearDown() override {
    int status = 0;
    // Stopped, not killed: a localkube removes its pod sandboxes as it stops.
    if (pid_ > 0 && Terminate(&status) == absl::InfiniteDuration()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  // Starts localkube with `flags`, waits (up to 20 s) for its address file and points client_ at
  // it.
  void Start(const std::vector<std::string>& flags) {
    kubetrain::localkube::testing::StartLocalkube(dir_, flags, &pid_, &port_);
    client_ = kubetrain::localkube::testing::LoopbackClient(port_);
  }

  // Creates `object` in `collection` (default's pods unless given); the stored object in `*stored`.
  void Create(const json& object, json* stored = nullptr, const std::string& collection = kPods) {
    kubetrain::localkube::testing::Reply r =
        kubetrain::localkube::testing::Call(*client_, "POST", collection, object);
    ASSERT_EQ(r.code, 201) << collection << ": " << r.body.dump();
    if (stored) *stored = r.body;
  }
  // What is at `path`; null when nothing is.
  json Get(const std::string& path) {
    auto got = client_->Get(path);
    return got && got->status == 200 ? json::parse(got->body) : json();
  }
  static std::string Pod(const std::string& name) { return std::string(kPods) + "/" + name; }
  // Field `key` of `pod`'s status; "" when it has none.
  static std::string StatusOf(const json& pod, const std::string& key) {
    return pod.is_object() && pod.contains("status") ? pod["status"].value(key, "") : "";
  }
  // The phase pod `name` reaches among `phases` or, when it reaches none of them within
  // `timeout`, the phase it was last seen in.
  std::string WaitForPhase(const std::string& name,
                           const std::set<std::string>& phases = {"Succeeded", "Failed"},
                           absl::Duration timeout = absl::Seconds(20)) {
    std::string phase;
    Eventually(
        [&] {
          phase = StatusOf(Get(Pod(name)), "phase");
          return phases.contains(phase);
        },
        timeout, absl::Milliseconds(50));
    return phase;
  }
  // Pod `name`'s log; "" when it has none yet.
  std::string Log(const std::string& name) {
    auto got = client_->Get(Pod(name) + "/log");
    return got && got->status == 200 ? got->body : std::string();
  }

  // Sends SIGTERM and returns how long the process took to exit (its status in `status`;
  // infinite when it had not exited after 15 s).
  absl::Duration Terminate(int* status) {
    absl::Time start = absl::Now();
    kill(pid_, SIGTERM);
    if (!Eventually([&] { return waitpid(pid_, status, WNOHANG) == pid_; }, absl::Seconds(15),
                    absl::Milliseconds(10))) {
      return absl::InfiniteDuration();
    }
    pid_ = -1;
    return absl::Now() - start;
  }

  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;  // of the localkube Start started
};

TEST_F(LocalkubeProcess, FilesWithCredentialsAreOwnerOnly) {
  std::string kubeconfig = dir_ + "/kubeconfig";
  std::ofstream(kubeconfig) << "stale\n";
  chmod(kubeconfig.c_str(), 0644);
  ASSERT_NO_FATAL_FAILURE(Start({"--token", "secret-token", "--kubeconfig-out", kubeconfig}));
  EXPECT_EQ(FileMode(kubeconfig), 0600);
  EXPECT_THAT(ReadFile(kubeconfig), ::testing::HasSubstr("token: secret-token"));
  std::string tls =
      (std::filesystem::temp_directory_path() / absl::StrCat("localkube-tls-", pid_)).string();
  EXPECT_EQ(FileMode(tls + "/key.pem"), 0600);
  EXPECT_EQ(FileMode(tls), 0700);
  int status = 0;
  EXPECT_LT(Terminate(&status), absl::Seconds(2));  // the README's stop bound
}

// With nothing but --run-pods, pods find each other by cluster DNS name (as root: each pod's own
// /etc/hosts, kept current, read by glibc's resolver) and kubetrain/ images run the programs built
// beside localkube: no --hosts-file or --image-map to know about.
TEST_F(LocalkubeProcess, RunPodsAloneResolvesPodNamesAndRunsKubetrainImages) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--insecure-http", "--run-pods", "--pod-log-dir", dir_ + "/logs"}));
  auto make = [&](const std::string& name, const json& container, json labels = json::object()) {
    json pod = PodOf(name, container, {{"restartPolicy", "Never"}});
    pod["metadata"]["labels"] = labels;
    Create(pod);
  };
  if (geteuid() == 0) {
    json svc = {{"metadata", {{"name", "svc"}}},
                {"spec", {{"clusterIP", "None"}, {"selector", {{"app", "server"}}}}}};
    ASSERT_NO_FATAL_FAILURE(Create(svc, nullptr, "/api/v1/namespaces/default/services"));
    ASSERT_NO_FATAL_FAILURE(
        make("server", {{"image", "busybox"}, {"command", {"sleep", "30"}}}, {{"app", "server"}}));
    // As with cluster DNS, the name resolves once the server pod has its IP: wait for that.
    std::string server_ip;
    Eventually(
        [&] {
          server_ip = StatusOf(Get(Pod("server")), "podIP");
          return !server_ip.empty();
        },
        absl::Seconds(20), absl::Milliseconds(50));
    ASSERT_FALSE(server_ip.empty()) << "the server pod got no IP";
    ASSERT_NO_FATAL_FAILURE(
        make("client", {{"image", "busybox"},
                        {"command", {"getent", "hosts", "server.svc.default.svc.cluster.local"}}}));
    EXPECT_EQ(WaitForPhase("client"), "Succeeded") << Log("client");
    EXPECT_THAT(Log("client"), ::testing::HasSubstr(" server.svc.default.svc.cluster.local"));
  }
  // kubetrain/localkube:1 with no command runs build/bin/localkube, which answers --help.
  ASSERT_NO_FATAL_FAILURE(make("tool", {{"image", "kubetrain/localkube:1"}, {"args", {"--help"}}}));
  EXPECT_EQ(WaitForPhase("tool"), "Succeeded") << Log("tool");
  EXPECT_THAT(Log("tool"), ::testing::HasSubstr("--run-pods"));
  // kubetrain/operator's entrypoint is kubetrain-operator: the chart's Deployment sets no command.
  ASSERT_NO_FATAL_FAILURE(
      make("operator", {{"image", "kubetrain/operator:0.1.0"}, {"args", {"--help"}}}));
  EXPECT_EQ(WaitForPhase("operator"), "Succeeded") << Log("operator");
  EXPECT_THAT(Log("operator"), ::testing::HasSubstr("--leader-elect"));
}

TEST_F(LocalkubeProcess, ExitsWithinTwoSecondsOfSigtermWithWatchesAndPods) {
  // Three nodes, as the e2e scripts run: as root every pod has a sandbox to remove on the way out.
  ASSERT_NO_FATAL_FAILURE(Start({"--insecure-http", "--run-pods", "--nodes", "3", "--hosts-file",
                                 dir_ + "/hosts", "--pod-log-dir", dir_ + "/logs"}));
  for (int i = 0; i < 8; ++i) {  // a job's worth of pods besides the stubborn one
    ASSERT_NO_FATAL_FAILURE(Create(PodOf("sleeper-" + std::to_string(i),
                                         {{"image", "busybox"}, {"command", {"sleep", "60"}}})));
  }
  // A pod that ignores SIGTERM, with a grandchild in its own session holding the log pipe.
  ASSERT_NO_FATAL_FAILURE(Create(
      PodOf("stubborn",
            {{"image", "busybox"},
             {"command", {"sh", "-c", "trap '' TERM; setsid sleep 6 & echo started; sleep 60"}}},
            {{"terminationGracePeriodSeconds", 30}})));
  ASSERT_EQ(WaitForPhase("stubborn", {"Running"}, absl::Seconds(10)), "Running");
  // An open watch, a `logs -f` and an idle keep-alive connection.
  std::atomic<bool> watching{false};
  std::thread watch([&] {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20, 0);
    c.Get("/api/v1/namespaces/default/configmaps?watch=true", [&](const char*, size_t) {
      watching = true;
      return true;
    });
  });
  std::thread follow([&] {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20, 0);
    c.Get("/api/v1/namespaces/default/pods/stubborn/log?follow=true",
          [&](const char*, size_t) { return true; });
  });
  httplib::Client idle("127.0.0.1", port_);
  idle.set_keep_alive(true);
  ASSERT_TRUE(idle.Get("/version"));
  client_->Post("/api/v1/namespaces/default/configmaps", R"({"metadata":{"name":"x"}})",
                "application/json");
  ASSERT_TRUE(Eventually([&] { return watching.load(); }, absl::Seconds(5)));
  int status = 0;
  absl::Duration took = Terminate(&status);
  watch.join();
  follow.join();
  EXPECT_LT(took, absl::Seconds(2));  // the README's stop bound
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A pod reaches the API server from inside its sandbox at its node's bridge address with the
// ServiceAccount token mounted where in-cluster clients look, and RBAC decides as for anyone.
TEST_F(LocalkubeProcess, PodsReachTheApiWithTheirServiceAccountToken) {
  if (geteuid() != 0) GTEST_SKIP() << "pod sandboxes need root";
  ASSERT_NO_FATAL_FAILURE(Start({"--insecure-http", "--run-pods", "--rbac", "--token", "admin",
                                 "--pod-log-dir", dir_ + "/logs"}));
  client_->set_bearer_token_auth("admin");
  const std::string rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/";
  ASSERT_NO_FATAL_FAILURE(
      Create({{"metadata", {{"name", "list-pods"}}},
              {"rules", {{{"apiGroups", {""}}, {"resources", {"pods"}}, {"verbs", {"list"}}}}}},
             nullptr, rbac + "roles"));
  ASSERT_NO_FATAL_FAILURE(Create(
      {{"metadata", {{"name", "list-pods"}}},
       {"roleRef",
        {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "list-pods"}}},
       {"subjects", {{{"kind", "ServiceAccount"}, {"name", "default"}, {"namespace", "default"}}}}},
      nullptr, rbac + "rolebindings"));
  const std::string script =
      "S=/var/run/secrets/kubernetes.io/serviceaccount; for r in pods secrets; do "
      "curl -s -H \"Authorization: Bearer $(cat $S/token)\" -o /dev/null -w \"$r=%{http_code} \" "
      "http://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat "
      "$S/namespace)/$r; done; echo";
  ASSERT_NO_FATAL_FAILURE(
      Create(PodOf("inside", {{"image", "curl"}, {"command", {"sh", "-c", script}}},
                   {{"restartPolicy", "Never"}})));
  std::string log;
  EXPECT_TRUE(Eventually(
      [&] {
        log = Log("inside");
        return absl::StrContains(log, "secrets=");
      },
      absl::Seconds(20)))
      << log;
  EXPECT_THAT(log, ::testing::HasSubstr("pods=200 secrets=403"));
}

// What a localkube killed with SIGKILL left (its pods' network namespaces, its nodes' bridges) is
// gone once the next one has started.
TEST_F(LocalkubeProcess, NextStartSweepsWhatAKilledOneLeft) {
  if (geteuid() != 0) GTEST_SKIP() << "pod sandboxes need root";
  ASSERT_NO_FATAL_FAILURE(
      Start({"--insecure-http", "--run-pods", "--pod-log-dir", dir_ + "/logs"}));
  json stored;
  ASSERT_NO_FATAL_FAILURE(
      Create(PodOf("p", {{"image", "busybox"}, {"command", {"sleep", "60"}}}), &stored));
  const std::string uid = stored["metadata"].value("uid", "");
  auto left = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
      if (absl::StrContains(e.path().filename().string(), uid)) return true;
    }
    return false;
  };
  ASSERT_TRUE(Eventually(left, absl::Seconds(10)));
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  EXPECT_TRUE(left());  // nothing removed it
  std::filesystem::remove(dir_ + "/address");
  ASSERT_NO_FATAL_FAILURE(
      Start({"--insecure-http", "--run-pods", "--pod-log-dir", dir_ + "/logs2"}));
  EXPECT_FALSE(left());  // swept before the new one listened
}

TEST_F(LocalkubeProcess, NodesAreListedAndUnschedulablePodsSayWhy) {
  std::string kubectl = FindKubectl();
  if (kubectl.empty()) GTEST_SKIP() << "no kubectl in .tools/bin or on PATH";
  std::string kubeconfig = dir_ + "/kubeconfig";
  ASSERT_NO_FATAL_FAILURE(
      Start({"--insecure-http", "--run-pods", "--nodes", "3", "--node-capacity", "cpu=1",
             "--kubeconfig-out", kubeconfig, "--pod-log-dir", dir_ + "/logs"}));
  std::string k =
      absl::StrCat(kubectl, " --kubeconfig ", kubeconfig, " --cache-dir ", dir_, "/kube-cache ");
  int status = 0;
  std::string nodes = Shell(k + "get nodes", &status);
  EXPECT_EQ(status, 0) << nodes;
  EXPECT_THAT(nodes, ::testing::ContainsRegex("NAME +STATUS +ROLES +AGE +VERSION"));
  for (const char* name : {"node-1", "node-2", "node-3"}) {
    EXPECT_THAT(nodes, ::testing::ContainsRegex(absl::StrCat(name, " +Ready +<none> +.* v1.33.1")));
  }
  // Bound to a node, the pod runs there.
  ASSERT_NO_FATAL_FAILURE(Create(PodOf("small",
                                       {{"image", "busybox"},
                                        {"command", {"true"}},
                                        {"resources", {{"requests", {{"cpu", "500m"}}}}}},
                                       {{"restartPolicy", "Never"}})));
  EXPECT_EQ(WaitForPhase("small", {"Succeeded"}), "Succeeded") << Get(Pod("small")).dump();
  EXPECT_THAT(Get(Pod("small"))["spec"].value("nodeName", ""),
              ::testing::MatchesRegex("node-[123]"));
  // Too big for any node: Pending, and describe says why.
  ASSERT_NO_FATAL_FAILURE(Create(PodOf("big", {{"image", "busybox"},
                                               {"command", {"sleep", "60"}},
                                               {"resources", {{"requests", {{"cpu", "2"}}}}}})));
  std::string described;
  EXPECT_TRUE(Eventually(
      [&] {
        described = Shell(k + "describe pod big", &status);
        return described.find("FailedScheduling") != std::string::npos;
      },
      absl::Seconds(20), absl::Milliseconds(200)))
      << described;
  EXPECT_THAT(described, ::testing::HasSubstr("0/3 nodes are available: 3 Insufficient cpu."));
  EXPECT_THAT(described,
              ::testing::ContainsRegex("Warning +FailedScheduling +.* default-scheduler"));
  EXPECT_THAT(described, ::testing::ContainsRegex("PodScheduled +False"));
}

TEST(LocalkubeFlags, BadNodeFlagsAreUsageErrors) {
  int status = 0;
  std::string out = Shell(std::string(LOCALKUBE_BINARY) + " --run-pods --nodes 0", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--nodes"));
  out = Shell(std::string(LOCALKUBE_BINARY) + " --run-pods --nodes 2 --node-capacity node-5:cpu=1",
              &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_THAT(out,
              ::testing::HasSubstr("\"node-5\" is not a node: --nodes 2 makes node-1 .. node-2"));
  out = Shell(std::string(LOCALKUBE_BINARY) + " --run-pods --node-capacity cpu=two", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--node-capacity \"cpu=two\""));
  out = Shell(std::string(LOCALKUBE_BINARY) + " --nodes 3", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("need --run-pods"));
}

// A node's machine fails: its containers die, nothing it runs reports, the node controller marks
// it Unknown; a pod deleted meanwhile stays Terminating (its kubelet cannot confirm). Recovered,
// the kubelet resyncs: the deleted pod goes, the other's container starts again.
TEST_F(LocalkubeProcess, AFailedNodeStopsItsPodsAndRecovers) {
  ASSERT_NO_FATAL_FAILURE(
      Start({"--insecure-http", "--run-pods", "--nodes", "2", "--node-status-update-frequency",
             "200ms", "--node-monitor-grace-period", "1s", "--pod-log-dir", dir_ + "/logs"}));
  for (const char* name : {"kept", "deleted"}) {
    ASSERT_NO_FATAL_FAILURE(
        Create(PodOf(name, {{"image", "busybox"}, {"command", {"sleep", "600"}}},
                     {{"nodeSelector", {{"kubernetes.io/hostname", "node-2"}}},
                      {"terminationGracePeriodSeconds", 1}})));
  }
  auto running = [&](const std::string& name) {
    return StatusOf(Get(Pod(name)), "phase") == "Running";
  };
  ASSERT_TRUE(Eventually([&] { return running("kept") && running("deleted"); }, absl::Seconds(20),
                         absl::Milliseconds(50)));

  auto fault = [&](const std::string& action) {
    auto r = client_->Post("/localkube/v1/nodes/node-2/" + action, "", "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  auto [code, body] = fault("sneeze");
  EXPECT_EQ(code, 400) << body;
  EXPECT_THAT(body, ::testing::HasSubstr("use fail, partition or recover"));
  std::tie(code, body) = fault("fail");
  ASSERT_EQ(code, 200) << body;
  EXPECT_EQ(json::parse(body)["state"], "down");

  auto ready = [&] {
    for (const json& c : Get("/api/v1/nodes/node-2")["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "");
    }
    return std::string();
  };
  EXPECT_TRUE(
      Eventually([&] { return ready() == "Unknown"; }, absl::Seconds(20), absl::Milliseconds(50)));
  auto deleted = client_->Delete(Pod("deleted"));
  ASSERT_TRUE(deleted);
  ASSERT_EQ(deleted->status, 200) << deleted->body;
  // The deleted pod waits for node-2's kubelet, past its 1 s grace period.
  absl::SleepFor(absl::Seconds(2));  // the behaviour under test: nothing happens for a while
  EXPECT_FALSE(Get(Pod("deleted")).is_null())
      << "a pod on a failed node was deleted without its kubelet";

  std::tie(code, body) = fault("recover");
  ASSERT_EQ(code, 200) << body;
  EXPECT_TRUE(
      Eventually([&] { return ready() == "True"; }, absl::Seconds(20), absl::Milliseconds(50)));
  EXPECT_TRUE(Eventually([&] { return Get(Pod("deleted")).is_null(); }, absl::Seconds(20),
                         absl::Milliseconds(50)));
  // Its container was killed with the machine and starts again (restartPolicy Always).
  EXPECT_TRUE(Eventually(
      [&] {
        json pod = Get(Pod("kept"));
        for (const json& c : pod["status"].value("containerStatuses", json::array())) {
          if (c.value("restartCount", 0) >= 1 && c["state"].contains("running")) return true;
        }
        return false;
      },
      absl::Seconds(20), absl::Milliseconds(50)))
      << Get(Pod("kept")).dump();
}

// Programs an image maps to in a folder under /tmp (a checkout there, say) still run in a pod
// whose own /tmp covers the host's.
TEST_F(LocalkubeProcess, ImagesMappedUnderTmpRunInPodSandboxes) {
  if (geteuid() != 0) GTEST_SKIP() << "pod sandboxes need root";
  ASSERT_TRUE(absl::StartsWith(dir_, "/tmp/")) << dir_;
  std::filesystem::create_directories(dir_ + "/bin");
  std::filesystem::copy_file("/bin/echo", dir_ + "/bin/mapped-echo");
  ASSERT_NO_FATAL_FAILURE(Start({"--insecure-http", "--run-pods", "--nodes", "2", "--image-map",
                                 "mapped/=" + dir_ + "/bin", "--pod-log-dir", dir_ + "/logs"}));
  ASSERT_NO_FATAL_FAILURE(Create(PodOf(
      "mapped",
      {{"image", "mapped/echo:1"}, {"command", {"mapped-echo", "ran from the mapped folder"}}},
      {{"restartPolicy", "Never"}})));
  EXPECT_EQ(WaitForPhase("mapped"), "Succeeded");
  EXPECT_THAT(Log("mapped"), ::testing::HasSubstr("ran from the mapped folder"));
}

}  // namespace
