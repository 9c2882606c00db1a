// Api's get, create, update and patch paths, the scale subresource and Mutate; lists are in
// list.cc, deletion and garbage collection in gc.cc, per-kind behaviour in kinds.cc.
#include "localkube/api.h"

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/status.h"
#include "localkube/decode.h"
#include "localkube/errors.h"
#include "localkube/kinds.h"
#include "localkube/managed_fields.h"
#include "localkube/object_meta.h"
#include "localkube/patch.h"
#include "localkube/pod_validation.h"
#include "operator/api/yaml.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

std::mt19937_64& Rng() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng;
}

// Everything but metadata (and status when a status subresource owns it): what bumps generation.
json SpecPart(const ResourceType& type, json object) {
  object.erase("metadata");
  if (type.status_subresource) object.erase("status");
  return object;
}

// Follows ".a.b.c" inside an object; null when absent.
json* PathPtr(json* object, absl::string_view path, bool create) {
  json* node = object;
  for (absl::string_view part : absl::StrSplit(absl::StripPrefix(path, "."), '.')) {
    if (!node->is_object()) {
      if (!create) return nullptr;
      *node = json::object();
    }
    std::string key(part);
    if (!node->contains(key)) {
      if (!create) return nullptr;
      (*node)[key] = json::object();
    }
    node = &(*node)[key];
  }
  return node;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) return false;
  }
  return absl::ascii_isalnum(name.front()) && absl::ascii_isalnum(name.back());
}

// A patch result is decoded into the typed object like a request body; apiserver reports a
// failure as an Invalid "patch" field carrying the patched document.
absl::Status PatchedTypesOk(const ResourceType& type, json* patched) {
  absl::Status st = CheckFieldTypes(type, patched);
  if (st.ok()) return st;
  return InvalidError(
      "", "",
      {{"FieldValueInvalid",
        absl::StrCat("Invalid value: \"", patched->dump(), "\": ", st.message()), "patch"}});
}

}  // namespace

std::string NewUid() {
  uint64_t a = Rng()(), b = Rng()();
  a = (a & 0xffffffffffff0fffULL) | 0x4000ULL;
  b = (b & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;
  std::string hex = absl::StrFormat("%016x%016x", a, b);
  return absl::StrCat(hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20));
}

std::string RandomSuffix() {
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string s;
  for (int i = 0; i < 5; ++i) s.push_back(kAlphabet[Rng()() % (sizeof(kAlphabet) - 1)]);
  return s;
}

std::string NowTimestamp() { return KubeTime(absl::Now()); }

Api::Api(Registry* registry, Store* store) : registry_(registry), store_(store) {
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    Target t{registry_->Find("", "v1", "namespaces"), "", ns, ""};
    (void)Create(t, {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}},
                 WriteOptions{});
  }
}

void Api::RecordFields(const Target& target, const json* live, json* object,
                       const WriteOptions& options) const {
  FieldWrite write;
  write.manager = ManagerName(options.field_manager, options.user_agent);
  write.operation = options.applied != nullptr ? "Apply" : "Update";
  write.subresource =
      options.fields_subresource.empty() ? target.subresource : options.fields_subresource;
  write.api_version = target.type->GroupVersion();
  write.applied = options.applied;
  write.time = NowTimestamp();
  RecordManagedFields(*target.type, live, object, write);
}

absl::StatusOr<json> Api::Get(const Target& target) const {
  const ResourceType& type = *target.type;
  auto object = store_->Get(type.StorageKey(), target.ns, target.name);
  if (!object) return NotFoundError(type.Qualified(), target.name);
  (*object)["apiVersion"] = type.GroupVersion();  // every served version shares the storage
  if (target.subresource == "scale") return ScaleOf(type, *object);
  return *object;
}

void Api::PrepareForCreate(const ResourceType& type, json* object) const {
  json& meta = (*object)["metadata"];
  for (const char* field : {"deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                            "resourceVersion", "managedFields"}) {
    meta.erase(field);
  }
  meta["uid"] = NewUid();
  meta["creationTimestamp"] = NowTimestamp();
  if (type.has_generation) meta["generation"] = 1;
  if (type.status_subresource) object->erase("status");
  if (const auto& defaults = HooksFor(type).defaults) defaults(*object);
}

absl::StatusOr<json> Api::Create(const Target& target, json body, const WriteOptions& options) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return CreateLocked(target, std::move(body), options);
}

absl::StatusOr<json> Api::CreateLocked(const Target& target, json body,
                                       const WriteOptions& options) {
  const ResourceType& type = *target.type;
  if (!body.is_object()) return BadRequestError("the body of the request must be an object");
  if (!body.contains("metadata") || !body["metadata"].is_object())
    body["metadata"] = json::object();
  json& meta = body["metadata"];
  body["apiVersion"] = type.GroupVersion();
  body["kind"] = type.kind;
  if (type.namespaced) {
    std::string ns = meta.value("namespace", "");
    if (!ns.empty() && !target.ns.empty() && ns != target.ns) {
      return BadRequestError(
          "the namespace of the provided object does not match the namespace sent on the request");
    }
    if (ns.empty()) ns = target.ns;
    if (ns.empty()) ns = "default";
    meta["namespace"] = ns;
    RETURN_IF_ERROR(AdmitIntoNamespace(*store_, type, ns, meta.value("name", "")));
  } else {
    meta.erase("namespace");
  }
  if (options.user) {
    RETURN_IF_ERROR(AdmitOwnerReferences(*registry_, *store_, *options.user, type,
                                         target.subresource, meta.value("namespace", ""), body,
                                         nullptr));
  }
  if (meta.value("name", "").empty() && !target.name.empty()) meta["name"] = target.name;
  bool generated = false;
  if (meta.value("name", "").empty()) {
    std::string prefix = meta.value("generateName", "");
    if (prefix.empty()) {
      return InvalidError(type.QualifiedKind(), "",
                          {{"FieldValueRequired",
                            "Required value: name or generateName is required", "metadata.name"}});
    }
    meta["name"] = prefix.substr(0, 58) + RandomSuffix();
    generated = true;
  }
  std::string name = meta["name"];
  if (!ValidName(name)) {
    return InvalidError(
        type.QualifiedKind(), name,
        {{"FieldValueInvalid",
          absl::StrCat("Invalid value: \"", name, "\": ", Dns1123SubdomainErrors(name).back()),
          "metadata.name"}});
  }
  PrepareForCreate(type, &body);
  const KindHooks& hooks = HooksFor(type);
  if (hooks.admit) {
    RETURN_IF_ERROR(hooks.admit(
        Admission{type, *store_, &body, nullptr, target.subresource, options, target.name}));
  }
  std::string ns = type.namespaced ? body["metadata"].value("namespace", "") : "";
  if (auto existing = store_->Get(type.StorageKey(), ns, name)) {
    absl::Status err = AlreadyExistsError(type.Qualified(), name);
    if (generated) {
      return ApiError(409, "AlreadyExists",
                      absl::StrCat(type.Qualified(), " \"", name,
                                   "\" already exists, the server was not able to generate a "
                                   "unique name for the object"),
                      {{"name", name}, {"kind", type.plural}, {"retryAfterSeconds", 1}});
    }
    if (IsDeleting(*existing)) {
      return ApiError(409, "AlreadyExists",
                      absl::StrCat("object is being deleted: ", type.Qualified(), " \"", name,
                                   "\" already exists"));
    }
    return err;
  }
  if (options.dry_run) return body;
  RecordFields(target, nullptr, &body, options);
  json stored = store_->Put(type.StorageKey(), std::move(body));
  if (hooks.stored) RETURN_IF_ERROR(hooks.stored(*registry_, stored));
  if (hooks.companions) {
    for (json& companion : hooks.companions(*store_, stored)) {
      ResourceTypePtr companion_type =
          registry_->FindByKind(companion.value("apiVersion", ""), companion.value("kind", ""));
      if (!companion_type) continue;
      std::string companion_ns = NamespaceOf(companion);
      (void)CreateLocked(Target{companion_type, companion_ns, "", ""}, std::move(companion),
                         WriteOptions{});
    }
  }
  return stored;
}

absl::StatusOr<json> Api::Update(const Target& target, json body, const WriteOptions& options,
                                 bool* created) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const ResourceType& type = *target.type;
  *created = false;
  auto old = store_->Get(type.StorageKey(), target.ns, target.name);
  if (!old) {
    if (!type.create_on_update || !target.subresource.empty()) {
      return NotFoundError(type.Qualified(), target.name);
    }
    *created = true;
    return CreateLocked(target, std::move(body), options);
  }
  if (!body.is_object()) return BadRequestError("the body of the request must be an object");
  if (target.subresource == "scale") {
    ASSIGN_OR_RETURN(json updated, ApplyScale(type, *old, body));
    WriteOptions scale_options = options;
    scale_options.fields_subresource = "scale";
    ASSIGN_OR_RETURN(json stored, UpdateLocked(Target{target.type, target.ns, target.name, ""},
                                               std::move(updated), *old, scale_options));
    return ScaleOf(type, stored);
  }
  std::string rv = Meta(body).value("resourceVersion", "");
  if (rv.empty() && !type.unconditional_update) {
    return InvalidError(
        type.QualifiedKind(), target.name,
        {{"FieldValueInvalid", "Invalid value: 0x0: must be specified for an update",
          "metadata.resourceVersion"}});
  }
  return UpdateLocked(target, std::move(body), *old, options);
}

absl::StatusOr<json> Api::UpdateLocked(const Target& target, json body, const json& old,
                                       const WriteOptions& options) {
  const ResourceType& type = *target.type;
  if (!body.contains("metadata") || !body["metadata"].is_object())
    body["metadata"] = json::object();
  json& meta = body["metadata"];
  std::string rv = meta.value("resourceVersion", "");
  if (!rv.empty() && rv != Meta(old).value("resourceVersion", "")) {
    return ConflictError(type.Qualified(), target.name);
  }
  if (meta.contains("name") && meta["name"] != target.name) {
    return InvalidError(type.QualifiedKind(), target.name,
                        {{"FieldValueInvalid", "field is immutable", "metadata.name"}});
  }
  json updated;
  if (target.subresource == "status") {
    // Only status moves through /status; everything else stays as stored.
    updated = old;
    if (body.contains("status")) {
      updated["status"] = body["status"];
    } else {
      updated.erase("status");
    }
  } else {
    updated = std::move(body);
    json& m = updated["metadata"];
    for (const char* field : {"uid", "creationTimestamp", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "generation"}) {
      if (Meta(old).contains(field)) {
        m[field] = Meta(old)[field];
      } else {
        m.erase(field);
      }
    }
    m["name"] = target.name;
    if (type.namespaced) m["namespace"] = target.ns;
    if (Meta(old).contains("managedFields")) {
      m["managedFields"] = Meta(old)["managedFields"];
    } else {
      m.erase("managedFields");
    }
    if (type.status_subresource) {
      if (old.contains("status")) {
        updated["status"] = old["status"];
      } else {
        updated.erase("status");
      }
    }
    if (IsDeleting(old) && Meta(updated).contains("finalizers")) {
      for (const auto& f : Meta(updated)["finalizers"]) {
        const json& before = Meta(old).value("finalizers", json::array());
        if (std::find(before.begin(), before.end(), f) == before.end()) {
          return InvalidError(type.QualifiedKind(), target.name,
                              {{"FieldValueForbidden",
                                "Forbidden: no new finalizers can be added if the object is "
                                "being deleted",
                                "metadata.finalizers"}});
        }
      }
    }
  }
  updated["apiVersion"] = type.GroupVersion();
  updated["kind"] = type.kind;
  if (options.user) {
    RETURN_IF_ERROR(AdmitOwnerReferences(*registry_, *store_, *options.user, type,
                                         target.subresource, target.ns, updated, &old));
  }
  const KindHooks& hooks = HooksFor(type);
  if (hooks.admit) {
    RETURN_IF_ERROR(hooks.admit(
        Admission{type, *store_, &updated, &old, target.subresource, options, target.name}));
  }
  if (type.has_generation && SpecPart(type, updated) != SpecPart(type, old)) {
    updated["metadata"]["generation"] = Meta(old).value("generation", 0) + 1;
  }
  updated["metadata"]["resourceVersion"] = Meta(old).value("resourceVersion", "");
  if (options.dry_run) return updated;
  RecordFields(target, &old, &updated, options);
  json old_cmp = old;
  old_cmp["apiVersion"] = type.GroupVersion();
  if (updated == old_cmp) return old_cmp;  // no-op writes keep the resourceVersion
  // Removing the last finalizer of an object being deleted completes the deletion, unless a
  // graceful pod still waits for the kubelet.
  bool kubelet_pending =
      GracefulLocked(type.StorageKey()) && Meta(updated).value("deletionGracePeriodSeconds", 0) > 0;
  if (IsDeleting(updated) && !HasFinalizers(updated) && !kubelet_pending) {
    auto removed = RemoveLocked(type.StorageKey(), target.ns, target.name);
    CollectGarbageLocked();
    return removed ? *removed : updated;
  }
  json stored = store_->Put(type.StorageKey(), std::move(updated));
  if (hooks.stored) RETURN_IF_ERROR(hooks.stored(*registry_, stored));
  return stored;
}

absl::StatusOr<json> Api::Patch(const Target& target, absl::string_view content_type,
                                const std::string& body, const WriteOptions& options,
                                bool* created) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const ResourceType& type = *target.type;
  *created = false;
  std::string ct = absl::AsciiStrToLower(std::string(absl::StripAsciiWhitespace(
      std::string(content_type).substr(0, std::string(content_type).find(';')))));
  bool apply = ct == "application/apply-patch+yaml" || ct == "application/apply-patch+cbor";
  bool strategic = ct == "application/strategic-merge-patch+json";
  if (!apply && ct != "application/merge-patch+json" && ct != "application/json-patch+json" &&
      !(strategic && !type.custom)) {
    return ApiError(415, "UnsupportedMediaType",
                    absl::StrCat("the body of the request was in an unknown format - accepted "
                                 "media types include: application/json-patch+json, "
                                 "application/merge-patch+json, application/apply-patch+yaml",
                                 type.custom ? "" : ", application/strategic-merge-patch+json"));
  }
  if (apply && options.field_manager.empty()) {
    return InvalidError(
        "PatchOptions.meta.k8s.io", "",
        {{"FieldValueRequired", "Required value: is required for apply patch", "fieldManager"}});
  }
  if (!apply && options.force) {
    return InvalidError(
        "PatchOptions.meta.k8s.io", "",
        {{"FieldValueForbidden", "Forbidden: may not be specified for non-apply patch", "force"}});
  }
  json patch;
  if (apply) {
    if (absl::Status st = CheckUtf8(body); !st.ok()) return BadRequestError(st.message());
    ASSIGN_OR_RETURN(std::vector<json> docs, api::ParseYamlDocuments(body));
    if (docs.size() != 1 || !docs[0].is_object()) {
      return BadRequestError("apply patch must hold exactly one object");
    }
    patch = std::move(docs[0]);
    if (Meta(patch).contains("managedFields")) {
      return BadRequestError("metadata.managedFields must be nil");
    }
  } else {
    ASSIGN_OR_RETURN(patch, DecodeJson(body));
  }
  auto old = store_->Get(type.StorageKey(), target.ns, target.name);
  if (!old) {
    if (!apply || !target.subresource.empty()) return NotFoundError(type.Qualified(), target.name);
    *created = true;
    RETURN_IF_ERROR(PatchedTypesOk(type, &patch));
    const json applied = patch;
    WriteOptions apply_options = options;
    apply_options.applied = &applied;
    return CreateLocked(target, std::move(patch), apply_options);
  }
  WriteOptions patch_options = options;
  if (apply) patch_options.applied = &patch;
  json current = *old;
  if (target.subresource == "scale") current = ScaleOf(type, *old).value_or(json::object());
  json patched;
  if (apply) {
    patched = MergeApplied(current, patch);
  } else if (strategic) {
    ASSIGN_OR_RETURN(patched, ApplyStrategicMergePatch(current, patch));
  } else if (ct == "application/merge-patch+json") {
    ASSIGN_OR_RETURN(patched, ApplyMergePatch(current, patch));
  } else {
    ASSIGN_OR_RETURN(patched, ApplyJsonPatch(current, patch));
  }
  if (target.subresource == "scale") {
    ASSIGN_OR_RETURN(json updated, ApplyScale(type, *old, patched));
    updated["metadata"]["resourceVersion"] = Meta(*old).value("resourceVersion", "");
    patch_options.fields_subresource = "scale";
    ASSIGN_OR_RETURN(json stored, UpdateLocked(Target{target.type, target.ns, target.name, ""},
                                               std::move(updated), *old, patch_options));
    return ScaleOf(type, stored);
  }
  RETURN_IF_ERROR(PatchedTypesOk(type, &patched));
  return UpdateLocked(target, std::move(patched), *old, patch_options);
}

absl::StatusOr<json> Api::ScaleOf(const ResourceType& type, const json& object) const {
  json copy = object;
  json* spec = PathPtr(&copy, type.spec_replicas_path, false);
  json* status = PathPtr(&copy, type.status_replicas_path, false);
  json scale = {{"kind", "Scale"},
                {"apiVersion", "autoscaling/v1"},
                {"metadata",
                 {{"name", NameOf(object)},
                  {"uid", UidOf(object)},
                  {"resourceVersion", Meta(object).value("resourceVersion", "")},
                  {"creationTimestamp", Meta(object).value("creationTimestamp", "")}}},
                {"spec", {{"replicas", spec && spec->is_number() ? *spec : json(0)}}},
                {"status", {{"replicas", status && status->is_number() ? *status : json(0)}}}};
  if (type.namespaced) scale["metadata"]["namespace"] = NamespaceOf(object);
  if (!type.label_selector_path.empty()) {
    json* sel = PathPtr(&copy, type.label_selector_path, false);
    if (sel && sel->is_string()) scale["status"]["selector"] = *sel;
  }
  return scale;
}

absl::StatusOr<json> Api::ApplyScale(const ResourceType& type, json object,
                                     const json& scale) const {
  if (!scale.contains("spec") || !scale["spec"].contains("replicas")) {
    return InvalidError("Scale.autoscaling", NameOf(object),
                        {{"FieldValueRequired", "Required value", "spec.replicas"}});
  }
  *PathPtr(&object, type.spec_replicas_path, true) = scale["spec"]["replicas"];
  std::string rv = Meta(scale).value("resourceVersion", "");
  if (!rv.empty()) object["metadata"]["resourceVersion"] = rv;
  return object;
}

absl::Status Api::Mutate(const std::string& storage_key, const std::string& ns,
                         const std::string& name, const std::function<bool(json&)>& mutate) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return MutateLocked(storage_key, ns, name, mutate);
}

absl::Status Api::MutateLocked(const std::string& storage_key, const std::string& ns,
                               const std::string& name, const std::function<bool(json&)>& mutate) {
  auto object = store_->Get(storage_key, ns, name);
  if (!object) return absl::NotFoundError(absl::StrCat(storage_key, " ", ns, "/", name));
  if (mutate(*object)) store_->Put(storage_key, std::move(*object));
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
