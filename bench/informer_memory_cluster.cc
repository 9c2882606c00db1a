// informer_memory's cluster harness (see informer_memory_cluster.h): localkube started and
// drained, the CRD installed, and finished TrainingJobs created as kubectl and the operator
// would leave them.
#include "bench/informer_memory_cluster.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "operator/api/yaml.h"

namespace kubetrain::bench {
namespace {

namespace fs = std::filesystem;
using kube::Resource;
using nlohmann::json;

// A finished job's status as the operator leaves it.
json FinishedStatus(const json& job, absl::Time now) {
  std::string ref = "default/" + job["metadata"]["name"].get<std::string>();
  std::string start = kube::FormatTime(now - absl::Minutes(42));
  std::string running = kube::FormatTime(now - absl::Minutes(41));
  std::string end = kube::FormatTime(now - absl::Minutes(1));
  json replicas = json::object();
  for (const auto& [type, spec] : job["spec"]["replicaSpecs"].items()) {
    int n = spec.value("replicas", 1);
    bool trains = type == "Chief" || type == "Worker";
    replicas[type] = {
        {"active", 0},
        {"succeeded", trains ? n : 0},
        {"failed", 0},
        {"restarts", 0},
        {"completedIndexes", trains ? (n > 1 ? absl::StrCat("0-", n - 1) : "0") : ""}};
    if (!trains) replicas[type].erase("completedIndexes");
  }
  auto condition = [](const std::string& type, const std::string& status, const std::string& reason,
                      const std::string& message, const std::string& at) {
    return json{{"type", type},       {"status", status},     {"reason", reason},
                {"message", message}, {"lastUpdateTime", at}, {"lastTransitionTime", at}};
  };
  return {{"conditions",
           {condition("Created", "True", "TrainingJobCreated",
                      "TrainingJob " + ref + " is created.", start),
            condition("Running", "False", "TrainingJobRunning",
                      "TrainingJob " + ref + " is running.", end),
            condition("Succeeded", "True", "TrainingJobSucceeded",
                      "TrainingJob " + ref + " successfully completed.", end)}},
          {"replicaStatuses", replicas},
          {"startTime", start},
          {"completionTime", end},
          {"lastReconcileTime", end},
          {"observedGeneration", 1},
          {"progress",
           {{"step", 18760},
            {"epoch", 20},
            {"loss", 0.3127},
            {"accuracy", 0.8871},
            {"examplesPerSecond", 5120.5}}}};
}

}  // namespace

Localkube::~Localkube() {
  stop = true;
  if (drain.joinable()) drain.join();
  process.reset();
  std::error_code ec;
  if (!dir.empty()) fs::remove_all(dir, ec);
}

absl::Status StartLocalkube(const std::string& localkube_path, Localkube* lk,
                            kube::ClusterConfig* config) {
  char tmpl[] = "/tmp/kt-informer-memory-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  lk->dir = tmpl;
  kubetrain::ProcessOptions p;
  p.argv = {localkube_path,
            "--port=0",
            "--insecure-http",
            "--log-level=warn",
            "--compact-every=200ms",
            "--kubeconfig-out=" + lk->dir + "/kubeconfig",
            "--address-file=" + lk->dir + "/address"};
  p.env = {{"PATH", "/usr/bin:/bin"}, {"TMPDIR", lk->dir}};
  ASSIGN_OR_RETURN(lk->process, kubetrain::Process::Start(p), "starting localkube");
  // An undrained pipe would block localkube once 64 KiB of output are buffered.
  lk->drain = std::thread([lk] {
    while (!lk->stop.load()) {
      {
        std::lock_guard<std::mutex> lock(lk->mu);
        lk->process->ReadOutput(&lk->output);
        if (lk->output.size() > (1 << 20)) lk->output.erase(0, lk->output.size() - (64 << 10));
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!fs::exists(lk->dir + "/address") || !fs::exists(lk->dir + "/kubeconfig")) {
    {
      std::lock_guard<std::mutex> lock(lk->mu);
      if (lk->process->Poll()) return absl::InternalError("localkube exited: " + lk->output);
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("localkube did not start");
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSIGN_OR_RETURN(*config, kube::LoadKubeconfig(lk->dir + "/kubeconfig"));
  return absl::OkStatus();
}

absl::Status InstallCrd(kube::Client& client) {
  ASSIGN_OR_RETURN(std::string text,
                   api::ReadFileOrStdin(std::string(KUBETRAIN_SOURCE_DIR) +
                                        "/deploy/crd/kubetrain.dev_trainingjobs.yaml"));
  ASSIGN_OR_RETURN(std::vector<json> docs, api::ParseYamlDocuments(text));
  if (docs.size() != 1) return absl::InvalidArgumentError("the CRD file is not one document");
  Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", false};
  RETURN_IF_ERROR(client.Create(crds, "", docs[0]).status(), "creating the CRD");
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!client.List(Resource::TrainingJobs(), "default", {}).ok()) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError("the CRD is not served");
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<json>> LoadExamples() {
  std::vector<std::string> paths;
  for (const auto& entry :
       fs::directory_iterator(std::string(KUBETRAIN_SOURCE_DIR) + "/deploy/examples")) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path().string());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<json> out;
  for (const std::string& p : paths) {
    ASSIGN_OR_RETURN(std::string text, api::ReadFileOrStdin(p));
    ASSIGN_OR_RETURN(std::vector<json> docs, api::ParseYamlDocuments(text), "reading ", p);
    for (json& d : docs) {
      if (d.is_object() && d.value("kind", "") == "TrainingJob") out.push_back(std::move(d));
    }
  }
  if (out.empty()) return absl::NotFoundError("no TrainingJob in deploy/examples");
  return out;
}

absl::Status CreateJobs(kube::Client& kubectl, kube::Client& operator_,
                        const std::vector<json>& examples, int begin, int end,
                        absl::Time deadline) {
  for (int i = begin; i < end; ++i) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError("creating the jobs");
    json job = examples[i % examples.size()];
    job["metadata"]["name"] =
        absl::StrFormat("%s-%05d", job["metadata"]["name"].get<std::string>(), i);
    job["metadata"]["namespace"] = "default";
    // What `kubectl apply` stores: the manifest it applied, as compact JSON.
    job["metadata"]["annotations"][kLastApplied] = job.dump();
    ASSIGN_OR_RETURN(json created, kubectl.Create(Resource::TrainingJobs(), "default", job),
                     "creating job ", i);
    created["status"] = FinishedStatus(created, absl::Now());
    RETURN_IF_ERROR(operator_.UpdateStatus(Resource::TrainingJobs(), "default", created).status(),
                    "writing the status of job ", i);
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::bench
