// operator_scale's harness (see cluster.h): the Supervisor of the child processes, and
// localkube, the CRD and kubetrain-operator started and stopped through it.
#include "bench/operator_scale/cluster.h"

#include <httplib.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/status.h"
#include "operator/api/yaml.h"
#include "operator/kube/config.h"

namespace kubetrain::bench {

namespace fs = std::filesystem;
using kube::Resource;
using nlohmann::json;

// Runs localkube and the operator, drains their merged output into log files (an undrained pipe
// would block a chatty child once 64 KiB are buffered) and notices when one exits. Process is
// not thread-safe, so every call on it is made under `mu_`.
class Supervisor {
 public:
  explicit Supervisor(std::string dir) : dir_(std::move(dir)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Supervisor() {
    // The operator first: it must not log errors about a vanished API server.
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) Stop((*it)->name);
    stop_ = true;
    thread_.join();
  }

  absl::StatusOr<pid_t> Start(const std::string& name, const kubetrain::ProcessOptions& options) {
    auto child = std::make_unique<Child>();
    child->name = name;
    child->log_path = dir_ + "/" + name + ".log";
    child->log = std::fopen(child->log_path.c_str(), "w");
    if (child->log == nullptr) return absl::InternalError("cannot write " + child->log_path);
    ASSIGN_OR_RETURN(child->process, kubetrain::Process::Start(options), "starting ", name);
    pid_t pid = child->process->pid();
    std::lock_guard<std::mutex> lock(mu_);
    children_.push_back(std::move(child));
    return pid;
  }

  // The exit code if `name` has ended.
  std::optional<int> Exited(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    Child* c = Find(name);
    return c ? c->exit : std::nullopt;
  }

  // The last `bytes` of a child's output, for error reports.
  std::string Tail(const std::string& name, size_t bytes = 3000) {
    std::lock_guard<std::mutex> lock(mu_);
    Child* c = Find(name);
    if (c == nullptr) return "";
    std::fflush(c->log);
    std::ifstream in(c->log_path);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return all.size() > bytes ? all.substr(all.size() - bytes) : all;
  }

  // SIGTERM, a grace period, then the Process destructor's SIGKILL. Returns the exit code.
  std::optional<int> Stop(const std::string& name, absl::Duration grace = absl::Seconds(5)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Child* c = Find(name);
      if (c == nullptr || !c->process) return std::nullopt;
      if (!c->exit) c->process->Signal(SIGTERM);
    }
    absl::Time deadline = absl::Now() + grace;
    while (!Exited(name) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (!Exited(name)) {
      log::Warn("Child did not exit on SIGTERM; killing it", {{"child", name}, {"grace", grace}});
    }
    std::lock_guard<std::mutex> lock(mu_);
    Child* c = Find(name);
    Drain(*c);
    std::optional<int> code = c->exit;
    c->process.reset();
    std::fclose(c->log);
    c->log = nullptr;
    return code;
  }

 private:
  struct Child {
    std::string name;
    std::string log_path;
    std::FILE* log = nullptr;
    std::unique_ptr<kubetrain::Process> process;
    std::optional<int> exit;
  };

  Child* Find(const std::string& name) {
    for (auto& c : children_) {
      if (c->name == name) return c.get();
    }
    return nullptr;
  }

  void Drain(Child& c) {
    if (!c.process) return;
    std::string out;
    c.process->ReadOutput(&out);
    if (!out.empty() && c.log) std::fwrite(out.data(), 1, out.size(), c.log);
    if (!c.exit) c.exit = c.process->Poll();
  }

  void Loop() {
    while (!stop_.load()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& c : children_) Drain(*c);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  std::string dir_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Child>> children_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

Cluster::Cluster(Options opt) : opt_(std::move(opt)) {}

Cluster::~Cluster() {
  // The client before the API server it talks to, children before their temp dir.
  client_.reset();
  supervisor_.reset();
  std::error_code ec;
  if (!dir_.empty() && !opt_.keep_logs) fs::remove_all(dir_, ec);
}

absl::Status Cluster::Start(absl::Time start) {
  char tmpl[] = "/tmp/operator-scale-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  dir_ = tmpl;
  kubeconfig_ = dir_ + "/kubeconfig";
  supervisor_ = std::make_unique<Supervisor>(dir_);
  RETURN_IF_ERROR(StartLocalkube(start));
  RETURN_IF_ERROR(InstallCrd());
  return StartOperator();
}

absl::Status Cluster::StartLocalkube(absl::Time start) {
  kubetrain::ProcessOptions p;
  p.argv = {opt_.localkube, "--port=0", "--kubeconfig-out=" + kubeconfig_,
            "--address-file=" + dir_ + "/address", "--log-level=warn"};
  p.env = {{"PATH", "/usr/bin:/bin"}, {"TMPDIR", dir_}};
  RETURN_IF_ERROR(supervisor_->Start("localkube", p).status());
  while (!fs::exists(dir_ + "/address") || !fs::exists(kubeconfig_)) {
    if (supervisor_->Exited("localkube")) {
      return absl::InternalError("localkube exited: " + supervisor_->Tail("localkube"));
    }
    if (absl::Now() > start + absl::Seconds(30)) {
      return absl::DeadlineExceededError("localkube did not start in 30s");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSIGN_OR_RETURN(kube::ClusterConfig config, kube::LoadKubeconfig(kubeconfig_));
  // The bench's own client is unthrottled: only the operator's limits are under test.
  ASSIGN_OR_RETURN(client_,
                   kube::Client::Create(config, {.qps = 0, .user_agent = "operator_scale"}));
  return absl::OkStatus();
}

absl::Status Cluster::InstallCrd() {
  ASSIGN_OR_RETURN(std::string text, api::ReadFileOrStdin(opt_.crd));
  ASSIGN_OR_RETURN(std::vector<json> docs, api::ParseYamlDocuments(text));
  if (docs.size() != 1) return absl::InvalidArgumentError(opt_.crd + ": expected one document");
  Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", false};
  RETURN_IF_ERROR(client_->Create(crds, "", docs[0]).status(), "creating the CRD");
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!client_->List(Resource::TrainingJobs(), "default", {.limit = 1}).ok()) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError("CRD not served in 10s");
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status Cluster::StartOperator() {
  // Two different ports: separate FreeLoopbackPort calls may return one port twice.
  ASSIGN_OR_RETURN(std::vector<int> ports, FreeLoopbackPorts(2));
  metrics_port_ = ports[0];
  const int health_port = ports[1];
  kubetrain::ProcessOptions p;
  p.argv = {opt_.operator_path,
            "--kubeconfig=" + kubeconfig_,
            "--namespace=default",
            absl::StrCat("--qps=", opt_.qps),
            absl::StrCat("--burst=", opt_.burst),
            absl::StrCat("--workers=", opt_.operator_workers),
            absl::StrCat("--metrics-address=127.0.0.1:", metrics_port_),
            absl::StrCat("--health-address=127.0.0.1:", health_port),
            "--log-level=info"};
  p.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", dir_}};
  ASSIGN_OR_RETURN(operator_pid_, supervisor_->Start("operator", p));
  httplib::Client http("127.0.0.1", health_port);
  http.set_connection_timeout(1);
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (true) {
    if (auto code = supervisor_->Exited("operator")) {
      return absl::InternalError(absl::StrCat("kubetrain-operator exited with ", *code, ":\n",
                                              supervisor_->Tail("operator")));
    }
    httplib::Result res = http.Get("/readyz");
    if (res && res->status == 200) return absl::OkStatus();
    if (absl::Now() > deadline) return absl::DeadlineExceededError("operator not ready in 60s");
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status Cluster::CheckChildren() {
  for (const char* name : {"localkube", "operator"}) {
    if (auto code = supervisor_->Exited(name)) {
      return absl::InternalError(
          absl::StrCat(name, " exited with ", *code, " mid-run:\n", supervisor_->Tail(name)));
    }
  }
  return absl::OkStatus();
}

std::optional<int> Cluster::StopOperator() { return supervisor_->Stop("operator"); }

}  // namespace kubetrain::bench
