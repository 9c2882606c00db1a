// The kubelet's oci runtime (oci_runtime.h) end to end: a tiny busybox image is built with
// buildah into a storage of the test's own (vfs), and pods run from it. Skipped, with the
// reason, where buildah cannot work (not root, buildah or busybox-static missing).
#include "localkube/oci_runtime.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/kubelet.h"
#include "localkube/tests/host.h"
#include "localkube/tests/kubelet_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::ReadFile;
namespace fs = std::filesystem;

constexpr char kImage[] = "localhost/localkube-test-busybox:1";

// One storage for the whole suite, and the image in it.
struct Suite {
  std::string dir;
  OciRuntimeOptions options;
  std::string skip;  // why the suite cannot run
};
Suite* suite = nullptr;

// Builds the image: busybox's applets on /bin, a user `app` (1000), ENTRYPOINT sh -c, a CMD
// that shows the image's ENV and WORKDIR.
std::string BuildImage(const OciRuntime& runtime) {
  auto run = [&](const std::vector<std::string>& args) -> std::string {
    auto r = runtime.Buildah(args, absl::Seconds(60));
    if (!r.ok()) return std::string(r.status().message());
    if (r->exit_code != 0) return absl::StrCat("buildah ", args[0], ": ", r->output);
    return "";
  };
  std::string staging = suite->dir + "/staging";
  fs::create_directories(staging + "/etc");
  std::ofstream(staging + "/etc/passwd") << "root:x:0:0:root:/root:/bin/sh\n"
                                            "app:x:1000:1000:app:/home/app:/bin/sh\n";
  std::ofstream(staging + "/etc/group") << "root:x:0:\napp:x:1000:\n";
  if (std::string e = run({"from", "--name", "lk-build", "scratch"}); !e.empty()) return e;
  for (const auto& step : std::vector<std::vector<std::string>>{
           {"copy", "lk-build", "/bin/busybox", "/bin/busybox"},
           {"copy", "lk-build", staging + "/etc", "/etc"},
           {"run", "--isolation", "chroot", "lk-build", "--", "/bin/busybox", "--install", "-s",
            "/bin"},
           {"config", "--entrypoint", R"(["/bin/sh", "-c"])", "--cmd",
            R"j(["echo image-cmd greeting=$GREETING pwd=$(pwd) user=$(id -u)"])j", "--env",
            "PATH=/bin", "--env", "GREETING=hi", "--workingdir", "/srv", "--user", "app",
            "lk-build"},
           {"commit", "--quiet", "lk-build", kImage},
           {"rm", "lk-build"}}) {
    if (std::string e = run(step); !e.empty()) return e;
  }
  return "";
}

class OciEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    suite = new Suite;
    suite->dir =
        (fs::temp_directory_path() / absl::StrCat("localkube-oci-test-", getpid())).string();
    suite->options.global_args = {"--storage-driver",      "vfs",       "--root",
                                  suite->dir + "/storage", "--runroot", suite->dir + "/run"};
    if (absl::Status st = OciRuntime::Usable(suite->options); !st.ok()) {
      suite->skip = std::string(st.message());
      return;
    }
    if (access("/bin/busybox", X_OK) != 0) {
      suite->skip =
          "/bin/busybox is missing: install Debian's busybox-static (scripts/install-deps)";
      return;
    }
    fs::create_directories(suite->dir);
    OciRuntime builder(suite->options);
    absl::Time start = absl::Now();
    if (std::string e = BuildImage(builder); !e.empty()) {
      suite->skip = "cannot build the test image with buildah: " + e;
      return;
    }
    std::cout << "built " << kImage << " in " << absl::FormatDuration(absl::Now() - start) << "\n";
  }
  void TearDown() override {
    if (!suite) return;
    if (suite->skip.empty()) {
      OciRuntime cleaner(suite->options);
      (void)cleaner.Buildah({"rm", "--all"}, absl::Seconds(30));
      (void)cleaner.Buildah({"rmi", "--all", "--force"}, absl::Seconds(30));
    }
    std::error_code ec;
    fs::remove_all(suite->dir, ec);
    delete suite;
    suite = nullptr;
  }
};

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new OciEnvironment);

class OciPods : public testing::KubeletTest {
 protected:
  void SetUp() override {
    if (!suite->skip.empty()) GTEST_SKIP() << "oci runtime unusable here: " << suite->skip;
    dir_ = absl::StrCat(suite->dir, "/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    store_.Put("/serviceaccounts",
               {{"apiVersion", "v1"},
                {"kind", "ServiceAccount"},
                {"metadata", {{"name", "default"}, {"namespace", "default"}, {"uid", "sa"}}}});
  }
  // `sandboxed`: pods in sandboxes on two nodes (pod_sandbox.h), as localkube runs them as root.
  void StartKubelet(const std::string& runtime = "oci", bool sandboxed = false) {
    KubeletOptions options;
    if (sandboxed) {
      options.node_names = {"node-1", "node-2"};
      options.pod_network.mode = "sandbox";
      options.pod_network.pod_init = LOCALKUBE_POD_INIT_BINARY;
    }
    options.log_dir = dir_ + "/logs";
    options.hosts_file = dir_ + "/hosts";
    options.runtime = runtime;
    options.oci = suite->options;
    options.service_account_token = [](const std::string& ns, const std::string& sa,
                                       const std::string& audience,
                                       int64_t seconds) -> absl::StatusOr<std::string> {
      return absl::StrCat("token-for-", ns, "-", sa, "-", audience.empty() ? "api" : audience, "-",
                          seconds);
    };
    kubelet_ = std::make_unique<Kubelet>(options, api_.get());
    if (sandboxed) {
      ASSERT_NE(kubelet_->pod_network(), nullptr) << kubelet_->pod_network_status();
    }
    kubelet_->SetApiServer("127.0.0.1", 7443);
    api_->EnableGracefulPodDeletion();
    kubelet_->Start();
  }
  void Create(const std::string& resource, const json& object) {
    ASSERT_THAT(api_->Create(Of(resource), object, WriteOptions{}).status(), IsOk());
  }
  void CreatePod(const std::string& name, json container, const json& spec_extra = json::object()) {
    container["name"] = "c";
    if (!container.contains("image")) container["image"] = kImage;
    json spec = {{"restartPolicy", "Never"},
                 {"automountServiceAccountToken", false},
                 {"terminationGracePeriodSeconds", 5},
                 {"containers", {container}}};
    spec.update(spec_extra);
    Create("pods", {{"apiVersion", "v1"},
                    {"kind", "Pod"},
                    {"metadata", {{"name", name}, {"namespace", "default"}}},
                    {"spec", spec}});
  }
  static bool Finished(const json& p) {
    std::string phase = p["status"].value("phase", "");
    return phase == "Succeeded" || phase == "Failed";
  }
  static json State(const json& pod) {
    return pod["status"].value("containerStatuses", json::array()).at(0)["state"];
  }
  // Working containers this test's kubelet made and left.
  std::vector<std::string> Leftovers() {
    OciRuntime runtime(suite->options);
    auto r = runtime.Buildah({"containers", "--noheading", "--format", "{{.ContainerName}}"},
                             absl::Seconds(30));
    std::vector<std::string> names;
    if (!r.ok()) return {"buildah containers failed"};
    std::istringstream in(r->output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(absl::StrCat("localkube-", getpid(), "-"), 0) == 0) names.push_back(line);
    }
    return names;
  }
};

TEST_F(OciPods, ImageEntrypointCmdEnvWorkdirAndUser) {
  StartKubelet();
  CreatePod("defaults", json::object());
  json pod = WaitPod("defaults", Finished);
  ASSERT_FALSE(pod.is_null()) << Log("defaults");
  EXPECT_EQ(pod["status"]["phase"], "Succeeded") << Log("defaults");
  EXPECT_THAT(Log("defaults"), HasSubstr(" image-cmd greeting=hi pwd=/srv user=1000\n"));
  EXPECT_THAT(pod["status"]["containerStatuses"][0].value("containerID", ""),
              HasSubstr("buildah://"));
}

TEST_F(OciPods, ArgsReplaceCmdAndKeepEntrypoint) {
  StartKubelet();
  CreatePod("args", {{"args", {"echo only-args $0", "zero"}}});
  ASSERT_FALSE(WaitPod("args", Finished).is_null());
  EXPECT_THAT(Log("args"), HasSubstr(" only-args zero\n"));
}

TEST_F(OciPods, CommandEnvWorkingDirRunAsUserVolumesAndExitCode) {
  StartKubelet();
  Create("secrets", {{"apiVersion", "v1"},
                     {"kind", "Secret"},
                     {"metadata", {{"name", "creds"}, {"namespace", "default"}}},
                     {"data", {{"password", "czNjcmV0"}}}});  // s3cret
  Create("configmaps", {{"apiVersion", "v1"},
                        {"kind", "ConfigMap"},
                        {"metadata", {{"name", "kube-root-ca.crt"}, {"namespace", "default"}}},
                        {"data", {{"ca.crt", "-----BEGIN CERTIFICATE-----\n"}}}});
  // The volume ServiceAccount admission adds (kube-api-access-<suffix>).
  json token = {{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}};
  json ca = {{"configMap",
              {{"name", "kube-root-ca.crt"},
               {"items", json::array({{{"key", "ca.crt"}, {"path", "ca.crt"}}})}}}};
  json ns_item = {{"path", "namespace"},
                  {"fieldRef", {{"apiVersion", "v1"}, {"fieldPath", "metadata.namespace"}}}};
  json ns = {{"downwardAPI", {{"items", json::array({ns_item})}}}};
  json api_access = {
      {"name", "kube-api-access-x1y2z"},
      {"projected", {{"defaultMode", 420}, {"sources", json::array({token, ca, ns})}}}};
  const std::string sa = "/var/run/secrets/kubernetes.io/serviceaccount";
  CreatePod("full",
            {{"command", {"/bin/sh", "-c"}},
             {"args",
              {"echo mode=$MODE dir=$(pwd) uid=$(id -u) gid=$(id -g); "
               "echo secret=$(cat /etc/creds/password); "
               "echo sa=$(ls " +
               sa + " | tr '\\n' ,) ns=$(cat " + sa + "/namespace) token=$(cat " + sa +
               "/token); "
               "head -1 " +
               sa +
               "/ca.crt; "
               "echo api=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT $KUBERNETES_PORT; "
               "touch /etc/creds/x 2>/dev/null || echo secret-read-only; "
               "touch /scratch/ok && echo scratch-writable; "
               "exit 7"}},
             {"env", {{{"name", "MODE"}, {"value", "full"}}}},
             {"workingDir", "/work/dir"},
             {"securityContext", {{"runAsUser", 1234}}},
             {"volumeMounts",
              {{{"name", "creds"}, {"mountPath", "/etc/creds"}},
               {{"name", "kube-api-access-x1y2z"}, {"mountPath", sa}, {"readOnly", true}},
               {{"name", "scratch"}, {"mountPath", "/scratch"}}}}},
            {{"securityContext", {{"runAsGroup", 555}}},
             {"volumes",
              {{{"name", "creds"}, {"secret", {{"secretName", "creds"}}}},
               api_access,
               {{"name", "scratch"}, {"emptyDir", json::object()}}}}});
  json pod = WaitPod("full", Finished);
  ASSERT_FALSE(pod.is_null()) << Log("full");
  std::string log = Log("full");
  EXPECT_EQ(pod["status"]["phase"], "Failed") << log;
  EXPECT_EQ(State(pod)["terminated"]["exitCode"], 7) << log;
  EXPECT_EQ(State(pod)["terminated"]["reason"], "Error");
  EXPECT_THAT(log, HasSubstr(" mode=full dir=/work/dir uid=1234 gid=555\n"));
  EXPECT_THAT(log, HasSubstr(" secret=s3cret\n"));
  EXPECT_THAT(log,
              HasSubstr(" sa=ca.crt,namespace,token, ns=default token=token-for-default-default-"
                        "api-3607\n"));
  EXPECT_THAT(log, HasSubstr(" -----BEGIN CERTIFICATE-----\n"));
  EXPECT_THAT(log, HasSubstr(" api=127.0.0.1:7443 tcp://127.0.0.1:7443\n"));
  EXPECT_THAT(log, HasSubstr(" secret-read-only\n"));
  EXPECT_THAT(log, HasSubstr(" scratch-writable\n"));
  // The run ended: its working container is gone.
  Eventually([&] { return Leftovers().empty(); }, absl::Seconds(10), absl::Milliseconds(100));
  EXPECT_THAT(Leftovers(), ::testing::IsEmpty());
}

TEST_F(OciPods, SigtermReachesTheProgramWithinTheGracePeriod) {
  StartKubelet();
  CreatePod("term", {{"command",
                      {"/bin/sh", "-c",
                       "trap 'echo got-TERM; exit 0' TERM; echo ready; "
                       "while true; do sleep 0.1; done"}}});
  ASSERT_FALSE(WaitPod("term", [&](const json&) {
                 return Log("term").find("ready") != std::string::npos;
               }).is_null());
  std::string log_path = *kubelet_->LogPath("default", "term", "c", false);
  absl::Time start = absl::Now();
  DeleteOptions grace;
  grace.grace_seconds = 20;
  ASSERT_THAT(api_->Delete(Of("pods", "term"), grace).status(), IsOk());
  ASSERT_TRUE(Eventually([&] { return !api_->Get(Of("pods", "term")).ok(); }, absl::Seconds(15)));
  // The handler ran: no SIGKILL after the 20 s grace period was needed.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(ReadFile(log_path), HasSubstr(" got-TERM\n"));
}

TEST_F(OciPods, SigkillAfterTheGracePeriod) {
  StartKubelet();
  CreatePod(
      "stubborn",
      {{"command", {"/bin/sh", "-c", "trap '' TERM; echo ready; while true; do sleep 0.1; done"}}});
  ASSERT_FALSE(WaitPod("stubborn", [&](const json&) {
                 return Log("stubborn").find("ready") != std::string::npos;
               }).is_null());
  absl::Time start = absl::Now();
  DeleteOptions grace;
  grace.grace_seconds = 1;
  ASSERT_THAT(api_->Delete(Of("pods", "stubborn"), grace).status(), IsOk());
  ASSERT_TRUE(
      Eventually([&] { return !api_->Get(Of("pods", "stubborn")).ok(); }, absl::Seconds(15)));
  // Killed once the 1 s grace period was over, not before and not much after.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(OciPods, RuntimeForwardsSignalsAndTheProgramsExitCode) {
  OciRuntime runtime(suite->options);
  ContainerConfig config;
  config.id = "direct";
  config.image = kImage;
  config.command = {"/bin/sh", "-c",
                    "trap 'echo bye; exit 42' TERM; echo up; "
                    "while true; do sleep 0.1; done"};
  config.log_path = dir_ + "/direct.log";
  StartFailure failure;
  std::unique_ptr<RunningContainer> c = runtime.Start(config, &failure);
  ASSERT_NE(c, nullptr) << failure.reason << ": " << failure.message;
  ASSERT_TRUE(Eventually([&] { return ReadFile(config.log_path).find("up") != std::string::npos; },
                         absl::Seconds(10)));
  c->Signal(SIGTERM);
  int code = -1;
  EXPECT_TRUE(Eventually([&] { return c->Poll(&code); }, absl::Seconds(5)));
  EXPECT_EQ(code, 42);
  EXPECT_TRUE(Eventually([&] { return !c->Alive(); }, absl::Seconds(5)));
  EXPECT_THAT(ReadFile(config.log_path), HasSubstr(" bye\n"));
}

TEST_F(OciPods, MissingImageIsErrImageNeverPull) {
  StartKubelet();
  CreatePod("noimage", {{"image", "localhost/not-built-here:0.1"}});
  json pod = WaitPod("noimage", [](const json& p) {
    const json s = p["status"].value("containerStatuses", json::array());
    return !s.empty() && s[0]["state"].contains("waiting") &&
           s[0]["state"]["waiting"].value("reason", "") == "ErrImageNeverPull";
  });
  ASSERT_FALSE(pod.is_null());
  EXPECT_EQ(pod["status"]["phase"], "Pending");
  EXPECT_THAT(State(pod)["waiting"].value("message", ""),
              HasSubstr("Container image \"localhost/not-built-here:0.1\" is not present with "
                        "pull policy of Never"));
}

TEST_F(OciPods, NothingLeftBehindAfterStop) {
  StartKubelet();
  for (const char* name : {"a", "b"}) {
    CreatePod(name, {{"command", {"sleep", "60"}}});
  }
  for (const char* name : {"a", "b"}) {
    ASSERT_FALSE(WaitPod(name, [](const json& p) {
                   return p["status"].value("phase", "") == "Running";
                 }).is_null());
  }
  EXPECT_EQ(Leftovers().size(), 2u);
  absl::Time start = absl::Now();
  kubelet_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));  // localkube's stop bound (README)
  EXPECT_THAT(Leftovers(), ::testing::IsEmpty());
}

// In a pod sandbox the image's root is the container's, and everything else is the pod's: its
// own IP and hostname, /etc/hosts, a /dev/shm no other pod sees, only the pod's processes, and
// the user and volumes as without a sandbox.
TEST_F(OciPods, SandboxedPodsHaveTheImagesRootAndTheirOwnNetworkProcessesAndSharedMemory) {
  StartKubelet("oci", /*sandboxed=*/true);
  const std::string script =
      "echo ip=$(hostname -i) host=$(hostname) uid=$(id -u) pwd=$(pwd); "
      "echo hosts=$(grep -c $(hostname) /etc/hosts); "
      "n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n; "
      "echo image-root=$(test -f /etc/passwd && grep -c ^app: /etc/passwd); "
      "echo mine > /dev/shm/$(hostname); echo shm=$(ls /dev/shm | tr '\\n' ,); "
      "touch /scratch/ok && echo scratch-writable; "
      "echo ready; while true; do sleep 0.1; done";
  for (const char* name : {"left", "right"}) {
    CreatePod(name,
              {{"command", {"/bin/sh", "-c", script}},
               {"volumeMounts", {{{"name", "scratch"}, {"mountPath", "/scratch"}}}}},
              {{"nodeName", std::string(name) == "left" ? "node-1" : "node-2"},
               {"volumes", {{{"name", "scratch"}, {"emptyDir", json::object()}}}}});
  }
  std::map<std::string, json> pods;
  for (const char* name : {"left", "right"}) {
    pods[name] =
        WaitPod(name, [&](const json&) { return Log(name).find(" ready\n") != std::string::npos; });
    ASSERT_FALSE(pods[name].is_null()) << Log(name);
    pods[name] = *api_->Get(Of("pods", name));
  }
  for (const char* name : {"left", "right"}) {
    const std::string log = Log(name);
    const std::string ip = pods[name]["status"].value("podIP", "");
    EXPECT_NE(ip, "");
    EXPECT_THAT(log, HasSubstr(absl::StrCat(" ip=", ip, " host=", name, " uid=1000 pwd=/srv\n")));
    EXPECT_THAT(log, HasSubstr(" hosts=1\n"));  // the pod's /etc/hosts names it
    EXPECT_THAT(log, HasSubstr(" procs=2\n"));  // PID 1 and the shell: no host or other pod's
    EXPECT_THAT(log, HasSubstr(" image-root=1\n"));
    EXPECT_THAT(log, HasSubstr(absl::StrCat(" shm=", name, ",\n")));  // its own /dev/shm only
    EXPECT_THAT(log, HasSubstr(" scratch-writable\n"));
  }
  EXPECT_NE(pods["left"]["status"].value("podIP", ""), pods["right"]["status"].value("podIP", ""));
  EXPECT_FALSE(fs::exists("/dev/shm/left"));  // nothing reached the host's either
  // The grace period still reaches the program, and the working containers go.
  for (const char* name : {"left", "right"}) {
    ASSERT_THAT(api_->Delete(Of("pods", name), DeleteOptions{}).status(), IsOk());
  }
  for (const char* name : {"left", "right"}) {
    EXPECT_TRUE(Eventually([&] { return !api_->Get(Of("pods", name)).ok(); }, absl::Seconds(15)));
  }
  EXPECT_TRUE(Eventually([&] { return Leftovers().empty(); }, absl::Seconds(10)));
}

// Pod start latency, create to Running, of both runtimes (printed, not asserted).
TEST_F(OciPods, StartLatency) {
  for (const std::string runtime : {"process", "oci"}) {
    StartKubelet(runtime);
    absl::Duration total;
    const int n = 3;
    for (int i = 0; i < n; ++i) {
      std::string name = absl::StrCat(runtime, "-", i);
      absl::Time start = absl::Now();
      CreatePod(name, {{"command", {"sleep", "30"}}});
      ASSERT_FALSE(WaitPod(name, [](const json& p) {
                     return p["status"].value("phase", "") == "Running";
                   }).is_null());
      total += absl::Now() - start;
    }
    std::cout << "pod start latency (" << runtime << "): " << absl::FormatDuration(total / n)
              << " mean of " << n << "\n";
    kubelet_->Stop();
    kubelet_.reset();
    api_ = std::make_unique<Api>(&registry_, &store_);
    for (int i = 0; i < n; ++i) store_.Remove("/pods", "default", absl::StrCat(runtime, "-", i));
  }
}

}  // namespace
}  // namespace kubetrain::localkube
