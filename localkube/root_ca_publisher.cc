#include "localkube/root_ca_publisher.h"

#include <utility>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "localkube/errors.h"
#include "localkube/kinds.h"
#include "localkube/namespace_companions.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kRootCaConfigMapsKey[] = "/configmaps";
constexpr char kRootCaManager[] = "kube-controller-manager";
constexpr char kDescriptionAnnotation[] = "kubernetes.io/description";

// The controller's test: data exactly {"ca.crt": ca} and the description annotation set.
bool UpToDate(const json& cm, const json& want) {
  const json& annotations = Meta(cm).value("annotations", json::object());
  auto description =
      annotations.is_object() ? annotations.find(kDescriptionAnnotation) : annotations.end();
  bool described = annotations.is_object() && description != annotations.end() &&
                   description->is_string() && !description->get<std::string>().empty();
  return cm.contains("data") && cm["data"] == want["data"] && described;
}

}  // namespace

RootCaPublisher::RootCaPublisher(Api* api, std::string ca_pem)
    : api_(api), ca_pem_(std::move(ca_pem)) {}

RootCaPublisher::~RootCaPublisher() { Stop(); }

absl::Status RootCaPublisher::Start() {
  // Changes from here on are followed, so none made while publishing is missed.
  int64_t after = api_->store()->Revision();
  if (absl::Status st = PublishRootCa(api_, ca_pem_); !st.ok()) return st;
  thread_ = std::thread([this, after] { Loop(after); });
  return absl::OkStatus();
}

void RootCaPublisher::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void RootCaPublisher::Loop(int64_t after) {
  while (!stop_) {
    // The deadline only bounds how long a Stop waits; nothing is done unless the store changed.
    if (!api_->store()->WaitForChange(after, absl::Now() + absl::Milliseconds(250))) return;
    for (const std::string& ns : ChangedNamespaces(&after)) {
      if (stop_) return;
      SyncNamespace(ns);
    }
  }
}

std::set<std::string> RootCaPublisher::ChangedNamespaces(int64_t* after) const {
  std::set<std::string> out;
  const json want = RootCaConfigMap("", ca_pem_);
  int64_t scanned = *after;
  absl::Status st = api_->store()->VisitEventsAfter(
      *after,
      [&](const StoreEvent& e) {
        if (e.storage_key == kNamespacesKey && e.type != "DELETED") {
          out.insert(NameOf(e.object));
        } else if (e.storage_key == kRootCaConfigMapsKey && NameOf(e.object) == kRootCaConfigMap &&
                   (e.type == "DELETED" || !UpToDate(e.object, want))) {
          out.insert(NamespaceOf(e.object));
        }
      },
      &scanned);
  *after = scanned;
  if (st.ok()) return out;
  // The history was compacted past `after`: look at every namespace, as a relist would.
  int64_t revision = 0;
  for (const json& n : api_->store()->List(kNamespacesKey, "", &revision)) out.insert(NameOf(n));
  *after = revision;
  return out;
}

void RootCaPublisher::SyncNamespace(const std::string& ns) {
  auto ns_object = api_->store()->Get(kNamespacesKey, "", ns);
  if (!ns_object || IsDeleting(*ns_object)) return;
  ResourceTypePtr configmaps = api_->registry()->Find("", "v1", "configmaps");
  if (!configmaps) return;
  json want = RootCaConfigMap(ns, ca_pem_);
  WriteOptions options;
  options.field_manager = kRootCaManager;
  auto cm = api_->store()->Get(kRootCaConfigMapsKey, ns, kRootCaConfigMap);
  absl::StatusOr<json> written;
  if (!cm) {
    written = api_->Create(Target{configmaps, ns, "", ""}, std::move(want), options);
  } else if (!UpToDate(*cm, want)) {
    json updated = *cm;
    updated["data"] = want["data"];
    if (!updated["metadata"].contains("annotations") ||
        !updated["metadata"]["annotations"].is_object()) {
      updated["metadata"]["annotations"] = json::object();
    }
    updated["metadata"]["annotations"][kDescriptionAnnotation] =
        want["metadata"]["annotations"][kDescriptionAnnotation];
    bool created = false;
    written = api_->Update(Target{configmaps, ns, kRootCaConfigMap, ""}, std::move(updated),
                           options, &created);
  } else {
    return;
  }
  // A namespace terminating (403) or gone (404), or a write that raced another (409, whose own
  // event brings the namespace back here), needs nothing more.
  if (!written.ok() && HttpCode(written.status()) != 403 && HttpCode(written.status()) != 404 &&
      HttpCode(written.status()) != 409) {
    log::Warn("Cannot publish the root CA",
              {{"namespace", ns}, {"error", std::string(written.status().message())}});
  }
}

}  // namespace kubetrain::localkube
