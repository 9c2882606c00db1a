// The kubetrain-operator binary against live localkubes: it names the real reason it cannot
// work (a CA that does not match the server, no server, no CRD) and stops within 2 s of SIGTERM
// whatever it is waiting for.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/host_port.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/controller.h"
#include "operator/kube/config.h"
#include "operator/kube/testing/localkube.h"
#include "prometheus/registry.h"

namespace kubetrain::controller {

using ::kubetrain::testing::IsOk;
namespace {

using nlohmann::json;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The value of the first "<key>: value" line of a kubeconfig localkube wrote.
std::string KubeconfigField(const std::string& text, const std::string& key) {
  size_t at = text.find(key + ": ");
  if (at == std::string::npos) return "";
  size_t start = at + key.size() + 2;
  return text.substr(start, text.find('\n', start) - start);
}

// A loopback port nothing listens on.
int ClosedPort() {
  absl::StatusOr<int> port = FreeLoopbackPort();
  EXPECT_TRUE(port.ok()) << port.status();
  return port.value_or(1);
}

class OperatorProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto lk = kube::testing::Localkube::Start();
    ASSERT_TRUE(lk.ok()) << lk.status();
    server_ = std::move(*lk);
    char tmpl[] = "/tmp/kt-operator-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    op_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // What Controller::Start returns for a controller built as kubetrain-operator builds one, with
  // metrics of its own; the controller is stopped before this returns.
  static absl::Status StartController(kube::Client& client, ControllerOptions options,
                                      const std::atomic<bool>* stop = nullptr) {
    prometheus::Registry registry;
    OperatorMetrics metrics(registry);
    Controller controller(client, std::move(options), &metrics);
    return controller.Start(stop);
  }

  // Writes `text` as a kubeconfig in the test's folder and returns its path.
  std::string WriteKubeconfig(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  void StartOperator(const std::string& kubeconfig, std::vector<std::string> extra = {},
                     std::map<std::string, std::string> env = {}) {
    kubetrain::ProcessOptions options;
    options.argv = {KUBETRAIN_OPERATOR_PATH, "--kubeconfig=" + kubeconfig,
                    "--metrics-address=127.0.0.1:0", "--health-address=127.0.0.1:0",
                    "--namespace=default"};
    options.argv.insert(options.argv.end(), extra.begin(), extra.end());
    options.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", dir_}};
    options.env.insert(env.begin(), env.end());
    auto p = kubetrain::Process::Start(options);
    ASSERT_TRUE(p.ok()) << p.status();
    op_ = std::move(*p);
    output_.clear();
  }

  // Reads the operator's output until it contains `text` (true) or the operator exits or
  // `timeout` passes (false).
  bool WaitForOutput(const std::string& text, absl::Duration timeout = absl::Seconds(15)) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      op_->ReadOutput(&output_);
      if (absl::StrContains(output_, text)) return true;
      if (op_->Poll()) {
        op_->ReadOutput(&output_);
        return absl::StrContains(output_, text);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // The exit code once the operator has exited, or nullopt after `timeout`.
  std::optional<int> WaitForExit(absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      op_->ReadOutput(&output_);
      if (std::optional<int> code = op_->Poll()) {
        op_->ReadOutput(&output_);  // all it wrote (process.h: one call after exit)
        return code;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return std::nullopt;
  }

  // Installs the CRD and gives the operator's Lease to `holder` for an hour: an operator started
  // with --leader-elect then stands by.
  void HoldTheLeaseAs(const std::string& holder) {
    auto client = server_->NewClient({.qps = 0});
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_THAT(server_->InstallTrainingJobCrd(**client), IsOk());
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", "kubetrain-operator"}, {"namespace", "default"}}},
                  {"spec",
                   {{"holderIdentity", holder},
                    {"leaseDurationSeconds", 3600},
                    {"renewTime", kube::FormatMicroTime(absl::Now())}}}};
    ASSERT_THAT((*client)->Create(kube::Resource::Leases(), "default", lease), IsOk());
  }

  // SIGTERM, then how long the operator took to exit (its code must be 0).
  absl::Duration TerminateAndTime() {
    absl::Time sent = absl::Now();
    kill(op_->pid(), SIGTERM);  // the operator only: its process group is the test's child
    std::optional<int> code = WaitForExit(absl::Seconds(10));
    absl::Duration took = absl::Now() - sent;
    EXPECT_TRUE(code.has_value()) << "still running 10 s after SIGTERM\n" << output_;
    if (code) {
      EXPECT_EQ(*code, 0) << output_;
    }
    return took;
  }

  std::string dir_;
  std::unique_ptr<kube::testing::Localkube> server_;
  std::unique_ptr<kubetrain::Process> op_;
  std::string output_;
};

// A kubeconfig for the fixture's server that trusts another localkube's certificate instead.
std::string WrongCaKubeconfig(const std::string& good, const std::string& other,
                              const std::string& ca_path) {
  std::string other_ca;
  EXPECT_TRUE(
      absl::Base64Unescape(KubeconfigField(other, "certificate-authority-data"), &other_ca));
  std::ofstream(ca_path) << other_ca;
  return absl::StrReplaceAll(
      good, {{"certificate-authority-data: " + KubeconfigField(good, "certificate-authority-data"),
              "certificate-authority: " + ca_path}});
}

TEST_F(OperatorProcessTest, WrongCaExitsQuicklyNamingTheTlsFailureServerAndCa) {
  auto other = kube::testing::Localkube::Start();
  ASSERT_TRUE(other.ok()) << other.status();
  std::string good = ReadText(server_->kubeconfig());
  std::string ca_path = dir_ + "/wrong-ca.pem";
  std::string kubeconfig = WriteKubeconfig(
      "wrong-ca", WrongCaKubeconfig(good, ReadText((*other)->kubeconfig()), ca_path));
  std::string server = KubeconfigField(good, "server");
  ASSERT_FALSE(server.empty());

  for (bool leader_elect : {false, true}) {
    SCOPED_TRACE(leader_elect ? "--leader-elect" : "no leader election");
    StartOperator(kubeconfig, {leader_elect ? "--leader-elect" : "--leader-elect=false"});
    std::optional<int> code = WaitForExit(absl::Seconds(10));
    ASSERT_TRUE(code.has_value()) << "still running after 10 s\n" << output_;
    EXPECT_NE(*code, 0);
    EXPECT_TRUE(absl::StrContains(
        output_, "TLS certificate verification of the API server " + server + " failed"))
        << output_;
    EXPECT_TRUE(absl::StrContains(output_, ca_path)) << output_;
    EXPECT_FALSE(absl::StrContains(output_, "CRD")) << output_;
  }
}

TEST_F(OperatorProcessTest, SigtermWhileWaitingForTheCrdStopsWithinTwoSeconds) {
  StartOperator(server_->kubeconfig());  // no CRD installed: the job informer gets 404s
  ASSERT_TRUE(WaitForOutput("trainingjobs")) << output_;
  ASSERT_TRUE(WaitForOutput("404")) << output_;
  absl::SleepFor(absl::Milliseconds(500));  // into the informer's retry backoff
  EXPECT_LT(TerminateAndTime(), absl::Seconds(2)) << output_;
}

TEST_F(OperatorProcessTest, SigtermWhileTheServerIsUnreachableStopsWithinTwoSeconds) {
  std::string good = ReadText(server_->kubeconfig());
  std::string server = KubeconfigField(good, "server");
  std::string nowhere = absl::StrCat("https://127.0.0.1:", ClosedPort());
  StartOperator(WriteKubeconfig("refused", absl::StrReplaceAll(good, {{server, nowhere}})));
  ASSERT_TRUE(WaitForOutput("cannot reach the API server at " + nowhere)) << output_;
  EXPECT_LT(TerminateAndTime(), absl::Seconds(2)) << output_;
}

TEST_F(OperatorProcessTest, SigtermWhileWaitingForTheLeaderLeaseStopsWithinTwoSeconds) {
  HoldTheLeaseAs("another-operator");
  StartOperator(server_->kubeconfig(), {"--leader-elect", "--leader-election-namespace=default"});
  ASSERT_TRUE(WaitForOutput("another-operator")) << output_;  // Observed leader
  EXPECT_LT(TerminateAndTime(), absl::Seconds(2)) << output_;
}

// A standby is doing its job: /readyz says so, or `helm --wait` with replicaCount > 1 (and the
// rollout in the chart's NOTES) would wait for ever on it.
// The chart passes the pod IP as KUBETRAIN_BIND_ADDRESS: the wildcard metrics and health
// addresses then listen there only, leaving the port free on the other addresses of a network
// namespace that several pods share (localkube's).
TEST_F(OperatorProcessTest, WildcardAddressesListenOnTheBindAddressOnly) {
  HoldTheLeaseAs("the-leader");
  int metrics_port = ClosedPort();
  int health_port = ClosedPort();
  StartOperator(server_->kubeconfig(),
                {"--leader-elect", "--leader-election-namespace=default",
                 absl::StrCat("--metrics-address=:", metrics_port),
                 absl::StrCat("--health-address=0.0.0.0:", health_port)},
                {{"KUBETRAIN_BIND_ADDRESS", "127.0.0.1"}});
  ASSERT_TRUE(WaitForOutput("the-leader")) << output_;
  httplib::Client health("127.0.0.1", health_port);
  int status = 0;
  for (absl::Time deadline = absl::Now() + absl::Seconds(5); status == 0 && absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(20))) {
    if (httplib::Result r = health.Get("/healthz")) status = r->status;
  }
  EXPECT_EQ(status, 200) << output_;
  httplib::Client metrics("127.0.0.1", metrics_port);
  httplib::Result scraped = metrics.Get("/metrics");
  ASSERT_TRUE(scraped) << output_;
  EXPECT_TRUE(absl::StrContains(scraped->body, "kubetrain_")) << scraped->body.substr(0, 300);
  // Another loopback address, as another pod's IP would be: nothing listens there.
  for (int port : {metrics_port, health_port}) {
    httplib::Client other("127.0.0.2", port);
    other.set_connection_timeout(1, 0);
    EXPECT_FALSE(other.Get("/healthz")) << "port " << port << " is taken on every address";
  }
  EXPECT_LT(TerminateAndTime(), absl::Seconds(2)) << output_;
}

TEST_F(OperatorProcessTest, AStandbyIsReady) {
  HoldTheLeaseAs("the-leader");
  int port = ClosedPort();
  StartOperator(server_->kubeconfig(), {"--leader-elect", "--leader-election-namespace=default",
                                        absl::StrCat("--health-address=127.0.0.1:", port)});
  ASSERT_TRUE(WaitForOutput("the-leader")) << output_;  // Observed leader: a standby
  httplib::Client health("127.0.0.1", port);
  int status = 0;
  std::string body;
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (status == 0 && absl::Now() < deadline) {
    if (httplib::Result r = health.Get("/readyz")) {
      status = r->status;
      body = r->body;
    } else {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  EXPECT_EQ(status, 200) << body << output_;
  EXPECT_EQ(body, "ok (standby)");
  EXPECT_LT(TerminateAndTime(), absl::Seconds(2)) << output_;
}

TEST_F(OperatorProcessTest, SigtermWhileReconcilingStopsWithinTwoSeconds) {
  auto client = server_->NewClient({.qps = 0});
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_THAT(server_->InstallTrainingJobCrd(**client), IsOk());
  StartOperator(server_->kubeconfig());
  ASSERT_TRUE(WaitForOutput("Caches synced")) << output_;
  json job = kube::testing::LoadSourceYaml("deploy/examples/fashion-mnist.yaml");
  ASSERT_TRUE(job.is_object());
  job["metadata"]["namespace"] = "default";
  ASSERT_THAT((*client)->Create(kube::Resource::TrainingJobs(), "default", job), IsOk());
  std::string pod = job["metadata"].value("name", "") + "-worker-0";
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!(*client)->Get(kube::Resource::Pods(), "default", pod).ok()) {
    ASSERT_LT(absl::Now(), deadline) << "no pod " << pod << "\n" << output_;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_LT(TerminateAndTime(), absl::Seconds(2)) << output_;
}

// In-process: what Controller::Start reports when the caches cannot sync.
TEST_F(OperatorProcessTest, StartWithoutTheCrdNamesTheCrd) {
  auto client = server_->NewClient({.qps = 0});
  ASSERT_TRUE(client.ok()) << client.status();
  absl::Status s = StartController(
      **client, {.namespace_ = "default", .workers = 1, .sync_timeout = absl::Seconds(2)});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "CRD is not installed")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "trainingjobs")) << s;
}

// --tfjob on a cluster without Kubeflow's TFJob CRD: the error names that CRD and both fixes.
TEST_F(OperatorProcessTest, StartWithTfJobsButNoTfJobCrdNamesIt) {
  auto fresh = kube::testing::Localkube::Start();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  auto client = (*fresh)->NewClient({.qps = 0});
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_THAT((*fresh)->InstallTrainingJobCrd(**client), IsOk());
  absl::Status s = StartController(
      **client,
      {.namespace_ = "default", .workers = 1, .tfjob = true, .sync_timeout = absl::Seconds(2)});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "the TFJob CRD is not installed")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "deploy/crd/kubeflow.org_tfjobs.yaml")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "without --tfjob")) << s;
}

TEST_F(OperatorProcessTest, StartWithRejectedCredentialsSaysSoNotCrd) {
  auto guarded = kube::testing::Localkube::Start({"--token=right-token"});
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  auto config = kube::LoadKubeconfig((*guarded)->kubeconfig());
  ASSERT_TRUE(config.ok()) << config.status();
  config->token = "wrong-token";
  auto client = kube::Client::Create(*config, {.qps = 0});
  ASSERT_TRUE(client.ok()) << client.status();
  absl::Status s = StartController(
      **client, {.namespace_ = "default", .workers = 1, .sync_timeout = absl::Seconds(2)});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rejected the operator's credentials")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), "CRD")) << s;
}

TEST_F(OperatorProcessTest, StartReturnsCancelledAsSoonAsStopIsSet) {
  auto client = server_->NewClient({.qps = 0});
  ASSERT_TRUE(client.ok()) << client.status();
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    // The stop comes while Start is waiting for its caches, not before it begins to.
    absl::SleepFor(absl::Milliseconds(300));
    stop = true;
  });
  absl::Time start = absl::Now();
  // No CRD: Start would wait out the 2 min sync timeout.
  absl::Status s = StartController(**client, {.namespace_ = "default", .workers = 1}, &stop);
  stopper.join();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  // The promise: the operator stops within 2 s of a stop, whatever it is waiting for.
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace kubetrain::controller
