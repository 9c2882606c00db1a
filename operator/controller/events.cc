#include "operator/controller/events.h"

#include "absl/time/clock.h"
#include "common/logging.h"

namespace kubetrain::controller {

using nlohmann::json;

void EventRecorder::Normal(const json& object, const std::string& reason,
                           const std::string& message) {
  Record(object, "Normal", reason, message);
}

void EventRecorder::Warning(const json& object, const std::string& reason,
                            const std::string& message) {
  Record(object, "Warning", reason, message);
}

void EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const json& meta = object["metadata"];
  std::string ns = meta.value("namespace", "default");
  std::string now = kube::FormatTime(absl::Now());
  json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"generateName", meta.value("name", "object") + "."}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", object.value("apiVersion", "")},
        {"kind", object.value("kind", "")},
        {"name", meta.value("name", "")},
        {"namespace", ns},
        {"uid", meta.value("uid", "")},
        {"resourceVersion", meta.value("resourceVersion", "")}}},
      {"reason", reason},
      {"message", message},
      {"type", type},
      {"source", {{"component", component_}}},
      {"reportingComponent", component_},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1}};
  absl::StatusOr<json> created = client_.Create(kube::Resource::Events(), ns, event);
  if (!created.ok())
    log::Warn("Could not record an event", {{"reason", reason}, {"error", created.status()}});
}

}  // namespace kubetrain::controller
