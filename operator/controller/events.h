// Records Kubernetes Events on a TrainingJob, as `kubectl describe tj` shows them. Messages
// follow Kubernetes log style: capitalised, past tense, the kind named, key=value details
// ("Created Pod pod=fmnist-ps-0"). Failures to record are logged, never returned: an event is
// never worth failing a reconcile for. Thread-safe.
//
// As client-go's EventCorrelator does, an event equal to one recorded in the last 10 minutes
// (same object, type, reason and message: a pod creation refused on every retry) bumps that
// Event's count and lastTimestamp instead of adding another object, so `kubectl describe`
// shows "(x12 over 3m)" and a retry loop cannot flood the namespace.
#pragma once

#include <list>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "operator/kube/client.h"

namespace kubetrain::controller {

class EventRecorder {
 public:
  EventRecorder(kube::ApiClient& client, std::string component)
      : client_(client), component_(std::move(component)) {}

  void Normal(const nlohmann::json& object, const std::string& reason, const std::string& message);
  void Warning(const nlohmann::json& object, const std::string& reason, const std::string& message);

 private:
  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message);

  kube::ApiClient& client_;
  const std::string component_;

  struct Seen {
    std::string ns;
    std::string name;  // the Event object's name
    int64_t count = 0;
    absl::Time last;
    std::list<std::string>::iterator age;  // position in `order_`
  };
  static constexpr size_t kMaxSeen = 4096;
  static constexpr absl::Duration kAggregateWithin = absl::Minutes(10);
  std::mutex mu_;
  std::map<std::string, Seen> seen_;  // aggregation key → its Event
  std::list<std::string> order_;      // keys, least recently recorded first
};

}  // namespace kubetrain::controller
