#include "operator/kube/testing/localkube.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "common/testing/eventually.h"
#include "operator/api/yaml.h"
#include "operator/kube/config.h"

namespace kubetrain::kube::testing {

namespace fs = std::filesystem;
using nlohmann::json;

json ConfigMap(const std::string& name, const std::string& value,
               const std::map<std::string, std::string>& labels) {
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", name}, {"namespace", "default"}}},
             {"data", {{"v", value}}}};
  if (!labels.empty()) cm["metadata"]["labels"] = labels;
  return cm;
}

json LoadSourceYaml(const std::string& relative_path) {
  auto text = api::ReadFileOrStdin(std::string(KUBETRAIN_SOURCE_DIR) + "/" + relative_path);
  if (!text.ok()) return nullptr;
  auto docs = api::ParseYamlDocuments(*text);
  return docs.ok() && docs->size() == 1 ? docs->front() : json(nullptr);
}

absl::StatusOr<std::unique_ptr<Localkube>> Localkube::Start(std::vector<std::string> extra_args) {
  auto lk = std::unique_ptr<Localkube>(new Localkube());
  char tmpl[] = "/tmp/kt-localkube-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  lk->dir_ = tmpl;
  lk->kubeconfig_ = lk->dir_ + "/kubeconfig";
  kubetrain::ProcessOptions options;
  options.argv = {LOCALKUBE_PATH, "--port=0", "--kubeconfig-out=" + lk->kubeconfig_,
                  "--address-file=" + lk->dir_ + "/address", "--log-level=warn"};
  options.argv.insert(options.argv.end(), extra_args.begin(), extra_args.end());
  options.env = {{"PATH", "/usr/bin:/bin"}, {"TMPDIR", lk->dir_}};
  ASSIGN_OR_RETURN(lk->process_, kubetrain::Process::Start(options));
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!fs::exists(lk->dir_ + "/address") || !fs::exists(lk->kubeconfig_)) {
    if (lk->process_->Poll()) {
      std::string out;
      lk->process_->ReadOutput(&out);
      return absl::InternalError("localkube exited: " + out);
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("localkube did not start");
    absl::SleepFor(absl::Milliseconds(20));
  }
  return lk;
}

Localkube::~Localkube() {
  process_.reset();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

absl::StatusOr<std::unique_ptr<Client>> Localkube::NewClient(ClientOptions options) const {
  ASSIGN_OR_RETURN(ClusterConfig config, LoadKubeconfig(kubeconfig_));
  return Client::Create(config, std::move(options));
}

absl::Status Localkube::InstallTrainingJobCrd(Client& client) const {
  json crd = LoadSourceYaml("deploy/crd/kubetrain.dev_trainingjobs.yaml");
  Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", false};
  RETURN_IF_ERROR(client.Create(crds, "", crd).status(), "creating the CRD");
  if (!kubetrain::testing::Eventually(
          [&] { return client.List(Resource::TrainingJobs(), "default", {}).ok(); },
          absl::Seconds(10))) {
    return absl::DeadlineExceededError("CRD not served");
  }
  return absl::OkStatus();
}

absl::Status StartAndSync(std::initializer_list<Informer*> informers, absl::Duration timeout) {
  for (Informer* informer : informers) informer->Start();
  for (Informer* informer : informers) {
    if (!informer->WaitForSync(timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("the ", informer->resource().plural, " informer did not sync within ",
                       absl::FormatDuration(timeout), ": ", informer->last_error().ToString()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube::testing
