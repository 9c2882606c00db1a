// The per-kind hooks table: defaults, admission, CRD registration and deletion behaviour of the
// built-in kinds and of custom resources (see kinds.h).
#include "localkube/kinds.h"

#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "localkube/default_tolerations.h"
#include "localkube/errors.h"
#include "localkube/namespace_companions.h"
#include "localkube/object_meta.h"
#include "localkube/pod_security.h"
#include "localkube/rbac_escalation.h"
#include "localkube/schema.h"
#include "localkube/service_account_admission.h"
#include "localkube/service_accounts.h"
#include "localkube/storage_objects.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kCrdsKey[] = "apiextensions.k8s.io/customresourcedefinitions";

void NamespaceDefaults(json& object) {
  object["spec"] = {{"finalizers", {"kubernetes"}}};
  object["status"] = {{"phase", "Active"}};
  json& meta = object["metadata"];
  meta["labels"]["kubernetes.io/metadata.name"] = meta["name"];
}

void PodDefaults(json& object) {
  json& spec = object["spec"];
  if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Always";
  if (!spec.contains("terminationGracePeriodSeconds")) spec["terminationGracePeriodSeconds"] = 30;
  if (!spec.contains("dnsPolicy")) spec["dnsPolicy"] = "ClusterFirst";
  object["status"] = {{"phase", "Pending"}, {"qosClass", "BestEffort"}};
  // A gated pod is not scheduled until its gates are gone: the API server says so at once.
  if (spec.contains("schedulingGates") && spec["schedulingGates"].is_array() &&
      !spec["schedulingGates"].empty()) {
    object["status"]["conditions"] = {{{"type", "PodScheduled"},
                                       {"status", "False"},
                                       {"lastProbeTime", nullptr},
                                       {"lastTransitionTime", NowTimestamp()},
                                       {"reason", "SchedulingGated"},
                                       {"message",
                                        "Scheduling is blocked due to non-empty "
                                        "scheduling gates"}}};
  }
}

void ServiceDefaults(json& object) {
  json& spec = object["spec"];
  if (!spec.contains("type")) spec["type"] = "ClusterIP";
  if (!spec.contains("clusterIP")) spec["clusterIP"] = "None";
  object["status"] = {{"loadBalancer", json::object()}};
}

// Validation and Pod Security on create and on spec updates (not through /status).
// The ServiceAccount and DefaultTolerationSeconds admission plugins (mutating, so before
// validation) on creates.
absl::Status AdmitPodWrite(const Admission& a) {
  if (!a.subresource.empty()) return absl::OkStatus();
  if (a.old == nullptr) {
    RETURN_IF_ERROR(AdmitPodServiceAccount(a.store, a.object));
    AdmitPodDefaultTolerations(a.object);
  }
  return AdmitPod(a.store, *a.object, a.old, a.options.warnings);
}

// The apiextensions controllers' work, done at once: names accepted, Established, stored
// versions recorded.
absl::Status AdmitCrd(const Admission& a) {
  json& object = *a.object;
  json& status = object["status"];
  json names = object["spec"].value("names", json::object());
  if (!names.contains("singular")) {
    names["singular"] = absl::AsciiStrToLower(names.value("kind", ""));
  }
  if (!names.contains("listKind")) names["listKind"] = names.value("kind", "") + "List";
  std::string now = NowTimestamp();
  status["acceptedNames"] = names;
  status["conditions"] = {{{"type", "NamesAccepted"},
                           {"status", "True"},
                           {"lastTransitionTime", now},
                           {"reason", "NoConflicts"},
                           {"message", "no conflicts found"}},
                          {{"type", "Established"},
                           {"status", "True"},
                           {"lastTransitionTime", now},
                           {"reason", "InitialNamesAccepted"},
                           {"message", "the initial names have been accepted"}}};
  json stored = json::array();
  for (const auto& v : object["spec"].value("versions", json::array())) {
    if (v.value("storage", false)) stored.push_back(v.value("name", ""));
  }
  status["storedVersions"] = stored;
  return absl::OkStatus();
}

absl::Status AdmitClaim(const Admission& a) {
  if (!a.subresource.empty()) return absl::OkStatus();
  return AdmitPersistentVolumeClaim(a.store, a.object, a.old);
}

absl::Status CrdStored(Registry& registry, const json& stored) {
  return registry.RegisterCrd(stored);
}

// Deleting a CRD stops serving its types and deletes every object of them.
void CrdRemoved(Registry& registry, Store& store, const json& removed) {
  const json& spec = removed.value("spec", json::object());
  std::string storage =
      spec.value("group", "") + "/" + spec.value("names", json::object()).value("plural", "");
  registry.UnregisterCrd(NameOf(removed));
  for (auto& [k, o] : store.ListEverything()) {
    if (k == storage) store.Remove(k, NamespaceOf(o), NameOf(o));
  }
}

// Structural-schema pruning, defaulting and validation.
absl::Status AdmitCustomResource(const Admission& a) {
  if (!a.type.schema.is_object()) return absl::OkStatus();
  SchemaOutcome outcome = ApplySchema(a.type.schema, a.object);
  if (!outcome.unknown_fields.empty() && a.options.field_validation == "Strict") {
    std::vector<std::string> parts;
    for (const auto& f : outcome.unknown_fields) {
      parts.push_back(absl::StrCat("unknown field \"", f, "\""));
    }
    return BadRequestError(absl::StrCat("strict decoding error: ", absl::StrJoin(parts, ", ")));
  }
  if (!outcome.causes.empty()) {
    return InvalidError(a.type.QualifiedKind(), NameOf(*a.object), outcome.causes);
  }
  return absl::OkStatus();
}

// RBAC escalation prevention on every write of a Role, ClusterRole or binding by a user (the
// server's own writes carry none).
absl::Status AdmitRbacObject(const Admission& a) {
  if (!a.options.user) return absl::OkStatus();
  return AdmitRbacWrite(a.store, *a.options.user, a.type, a.request_name, *a.object, a.old);
}

// The table: built-in kinds by storage key (version-independent).
const std::map<std::string, KindHooks, std::less<>>& BuiltinHooks() {
  static const auto* table = [] {
    auto* t = new std::map<std::string, KindHooks, std::less<>>;
    (*t)[kNamespacesKey] = {.defaults = NamespaceDefaults,
                            .companions = NamespaceCompanions,
                            .namespace_lifecycle = true,
                            .subresources = {"finalize"}};
    (*t)[kPodsKey] = {.defaults = PodDefaults,
                      .admit = AdmitPodWrite,
                      .graceful_deletion = true,
                      .delete_returns_object = true,
                      .subresources = {"log", "eviction", "binding"}};
    (*t)["/services"] = {.defaults = ServiceDefaults};
    (*t)[kPvcKey] = {.defaults = PersistentVolumeClaimDefaults, .admit = AdmitClaim};
    (*t)[kPvKey] = {.defaults = PersistentVolumeDefaults};
    (*t)[kStorageClassKey] = {.defaults = StorageClassDefaults};
    (*t)[kServiceAccountsKey] = {.delete_returns_object = true, .subresources = {"token"}};
    (*t)[kCrdsKey] = {.admit = AdmitCrd, .stored = CrdStored, .removed = CrdRemoved};
    for (const char* plural : {"roles", "clusterroles", "rolebindings", "clusterrolebindings"}) {
      (*t)[absl::StrCat("rbac.authorization.k8s.io/", plural)] = {.admit = AdmitRbacObject};
    }
    return t;
  }();
  return *table;
}

const KindHooks& CustomResourceHooks() {
  static const KindHooks* hooks = new KindHooks{.admit = AdmitCustomResource};
  return *hooks;
}

const KindHooks& NoHooks() {
  static const KindHooks* hooks = new KindHooks{};
  return *hooks;
}

}  // namespace

const KindHooks& HooksFor(absl::string_view storage_key) {
  const auto& table = BuiltinHooks();
  auto it = table.find(storage_key);
  return it != table.end() ? it->second : NoHooks();
}

const KindHooks& HooksFor(const ResourceType& type) {
  if (type.custom) return CustomResourceHooks();
  return HooksFor(type.StorageKey());
}

absl::Status AdmitIntoNamespace(const Store& store, const ResourceType& type, const std::string& ns,
                                const std::string& name) {
  auto nsobj = store.Get(kNamespacesKey, "", ns);
  if (!nsobj) return NotFoundError("namespaces", ns);
  if (IsDeleting(*nsobj)) {
    return ApiError(403, "Forbidden",
                    absl::StrCat(type.Qualified(), " \"", name,
                                 "\" is forbidden: unable to create new content in namespace ", ns,
                                 " because it is being terminated"));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
