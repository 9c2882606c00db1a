// core/v1 Events as the cluster's own components post them: the kubelet, default-scheduler, the
// node lifecycle controller and the persistent volume controller each describe what they did to an
// object with one. This builds and stores them; each caller keeps its own de-duplication (which
// repeats raise a count, which are posted once), as the real components' recorders differ.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "localkube/api.h"
#include "nlohmann/json.hpp"

namespace kubetrain::localkube {

// Who posts the event: source.component and reportingComponent, and the optional fields some
// components fill (the kubelet's source.host, the scheduler's action and reportingInstance).
struct EventSource {
  std::string component;
  std::string host;
  std::string reporting_instance;
  std::string action;
};

// The object an event is about, as its involvedObject names it.
struct InvolvedObject {
  std::string api_version = "v1";
  std::string kind;
  std::string ns;  // empty for cluster-scoped objects
  std::string name;
  std::string uid;
  std::string resource_version;  // left out when empty
};

// The involvedObject for a stored object; `kind` stands in when the object carries none.
InvolvedObject InvolvedObjectOf(const nlohmann::json& object, const std::string& kind);

// Stores a new Event (count 1, first and last timestamps now) named `<object>.<unix nanos>` in the
// object's namespace, or in `default` for cluster-scoped objects as the real components do.
// Returns the event's name.
absl::StatusOr<std::string> PostEvent(Api& api, const InvolvedObject& about,
                                      const std::string& type, const std::string& reason,
                                      const std::string& message, const EventSource& source);

// A repeat of an event already posted: its count goes up by one and lastTimestamp becomes now.
// NotFound when it is gone.
absl::Status RepeatEvent(Api& api, const std::string& ns, const std::string& name);

}  // namespace kubetrain::localkube
