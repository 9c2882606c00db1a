#include "localkube/events.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

InvolvedObject InvolvedObjectOf(const json& object, const std::string& kind) {
  const json meta = object.value("metadata", json::object());
  InvolvedObject about;
  about.api_version = object.value("apiVersion", "v1");
  about.kind = object.value("kind", kind);
  about.ns = meta.value("namespace", "");
  about.name = meta.value("name", "");
  about.uid = meta.value("uid", "");
  about.resource_version = meta.value("resourceVersion", "");
  return about;
}

absl::StatusOr<std::string> PostEvent(Api& api, const InvolvedObject& about,
                                      const std::string& type, const std::string& reason,
                                      const std::string& message, const EventSource& source) {
  ResourceTypePtr events = api.registry()->Find("", "v1", "events");
  if (!events) return absl::InternalError("the events resource is not registered");
  const std::string ns = about.ns.empty() ? "default" : about.ns;
  const std::string name = absl::StrCat(about.name, ".", absl::ToUnixNanos(absl::Now()));
  const std::string now = NowTimestamp();
  json involved = {{"apiVersion", about.api_version},
                   {"kind", about.kind},
                   {"name", about.name},
                   {"uid", about.uid}};
  if (!about.ns.empty()) involved["namespace"] = about.ns;
  if (!about.resource_version.empty()) involved["resourceVersion"] = about.resource_version;
  json event_source = {{"component", source.component}};
  if (!source.host.empty()) event_source["host"] = source.host;
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}, {"namespace", ns}}},
                {"involvedObject", std::move(involved)},
                {"reason", reason},
                {"message", message},
                {"type", type},
                {"source", std::move(event_source)},
                {"reportingComponent", source.component},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  if (!source.reporting_instance.empty()) event["reportingInstance"] = source.reporting_instance;
  if (!source.action.empty()) event["action"] = source.action;
  absl::StatusOr<json> created = api.Create(Target{events, ns, "", ""}, std::move(event), {});
  if (!created.ok()) return created.status();
  return name;
}

absl::Status RepeatEvent(Api& api, const std::string& ns, const std::string& name) {
  const std::string now = NowTimestamp();
  return api.Mutate("/events", ns, name, [&](json& e) {
    e["count"] = e.value("count", 1) + 1;
    e["lastTimestamp"] = now;
    return true;
  });
}

}  // namespace kubetrain::localkube
