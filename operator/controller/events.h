// Records Kubernetes Events on a TrainingJob, as `kubectl describe tj` shows them. Messages
// follow Kubernetes log style: capitalised, past tense, the kind named, key=value details
// ("Created Pod pod=fmnist-ps-0"). Failures to record are logged, never returned: an event is
// never worth failing a reconcile for. Thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "operator/kube/client.h"

namespace kubetrain::controller {

class EventRecorder {
 public:
  EventRecorder(kube::Client& client, std::string component)
      : client_(client), component_(std::move(component)) {}

  void Normal(const nlohmann::json& object, const std::string& reason, const std::string& message);
  void Warning(const nlohmann::json& object, const std::string& reason, const std::string& message);

 private:
  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message);

  kube::Client& client_;
  const std::string component_;
};

}  // namespace kubetrain::controller
