// Test support: a real localkube API server (localkube/) started as a child process on a free
// loopback port, clients for it, and informers synced with it. Tests run against it, never
// against a fake client (docs/decisions/0004).
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "operator/kube/client.h"
#include "operator/kube/informer.h"

namespace kubetrain::kube::testing {

class Localkube {
 public:
  // `extra_args` are localkube flags (fault injection, --run-pods, ...).
  static absl::StatusOr<std::unique_ptr<Localkube>> Start(std::vector<std::string> extra_args = {});
  ~Localkube();

  const std::string& kubeconfig() const { return kubeconfig_; }
  absl::StatusOr<std::unique_ptr<Client>> NewClient(ClientOptions options = {}) const;
  // Creates the TrainingJob CRD from deploy/crd and waits until it is served.
  absl::Status InstallTrainingJobCrd(Client& client) const;

 private:
  std::unique_ptr<kubetrain::Process> process_;
  std::string dir_;
  std::string kubeconfig_;
};

// Starts each informer and waits until each holds its first LIST; an error naming the resource
// that did not sync within `timeout`, and why its last request failed.
absl::Status StartAndSync(std::initializer_list<Informer*> informers,
                          absl::Duration timeout = absl::Seconds(10));

// Reads a YAML or JSON file of the source tree (one document).
nlohmann::json LoadSourceYaml(const std::string& relative_path);

// ConfigMaps: the plain namespaced objects the live tests write, list and watch.
inline const Resource kConfigMaps{"", "v1", "configmaps", "ConfigMap", true};

// A ConfigMap in "default" holding data {v: value}, with `labels` where given.
nlohmann::json ConfigMap(const std::string& name, const std::string& value,
                         const std::map<std::string, std::string>& labels = {});

}  // namespace kubetrain::kube::testing
