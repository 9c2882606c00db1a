#include "e2e/localkube/api.h"

#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/status.h"
#include "e2e/localkube/decode.h"
#include "e2e/localkube/errors.h"
#include "e2e/localkube/managed_fields.h"
#include "e2e/localkube/patch.h"
#include "e2e/localkube/pod_security.h"
#include "e2e/localkube/pod_validation.h"
#include "e2e/localkube/schema.h"
#include "operator/api/yaml.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

std::mt19937_64& Rng() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return rng;
}

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

const json& Meta(const json& object) {
  static const json kEmpty = json::object();
  auto it = object.find("metadata");
  return it != object.end() && it->is_object() ? *it : kEmpty;
}

std::string NameOf(const json& o) { return Meta(o).value("name", ""); }
std::string NamespaceOf(const json& o) { return Meta(o).value("namespace", ""); }
std::string UidOf(const json& o) { return Meta(o).value("uid", ""); }

// Everything but metadata (and status when a status subresource owns it): what bumps generation.
json SpecPart(const ResourceType& type, json object) {
  object.erase("metadata");
  if (type.status_subresource) object.erase("status");
  return object;
}

bool HasFinalizers(const json& o) {
  return Meta(o).contains("finalizers") && !Meta(o)["finalizers"].empty();
}

bool IsDeleting(const json& o) { return Meta(o).contains("deletionTimestamp"); }

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

// A list's continue token, as the apiserver's storage encodes it: unpadded base64url of
// {"v":"meta.k8s.io/v1","rv":<revision of the first page>,"start":<next key>}, the key relative
// to the list's prefix. rv -1 asks for the rest at the latest revision.
struct ContinueToken {
  int64_t revision = 0;
  std::string start;
};

std::string EncodeContinue(const std::string& start, int64_t revision) {
  nlohmann::ordered_json token = {{"v", "meta.k8s.io/v1"}, {"rv", revision}, {"start", start}};
  std::string encoded = absl::WebSafeBase64Escape(token.dump());
  while (!encoded.empty() && encoded.back() == '=') encoded.pop_back();
  return encoded;
}

// path.Clean leaves "/" + start unchanged: no empty, "." or ".." element, no trailing slash.
bool CleanPath(const std::string& start) {
  std::vector<absl::string_view> parts = absl::StrSplit(start, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == "." || parts[i] == "..") return false;
    if (parts[i].empty() && !(i == 0 && start.empty())) return false;
  }
  return true;
}

absl::StatusOr<ContinueToken> DecodeContinue(const std::string& value) {
  auto invalid = [](absl::string_view why) {
    return BadRequestError(absl::StrCat("invalid continue token: continue key is not valid", why));
  };
  std::string raw;
  for (size_t i = 0; i < value.size(); ++i) {
    char c = value[i];
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_')) {
      return invalid(absl::StrCat(": illegal base64 data at input byte ", i));
    }
  }
  if (value.size() % 4 == 1 || !absl::WebSafeBase64Unescape(value, &raw)) {
    return invalid(absl::StrCat(": illegal base64 data at input byte ", value.size() - 1));
  }
  json token = json::parse(raw, nullptr, false);
  if (!token.is_object()) {
    return invalid(": invalid character looking for beginning of value");
  }
  if (token.value("v", json()) != "meta.k8s.io/v1") {
    std::string version = token.contains("v") && token["v"].is_string() ? token["v"] : "";
    return invalid(absl::StrCat(": server does not recognize this encoded version ", version));
  }
  ContinueToken out;
  if (token.contains("rv") && token["rv"].is_number_integer()) out.revision = token["rv"];
  if (out.revision == 0) {
    return invalid(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)");
  }
  if (token.contains("start") && token["start"].is_string()) out.start = token["start"];
  if (out.start.empty()) return invalid(": encoded start key empty (version meta.k8s.io/v1)");
  std::string start = absl::StartsWith(out.start, "/") ? out.start.substr(1) : out.start;
  if (!CleanPath(start)) return invalid(absl::StrCat(": ", out.start));
  out.start = start;
  return out;
}

}  // namespace

std::string NowTimestamp() { return KubeTime(absl::Now()); }

Api::Api(Registry* registry, Store* store) : registry_(registry), store_(store) {
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease"}) {
    Target t{registry_->Find("", "v1", "namespaces"), "", ns, ""};
    (void)Create(t, {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}},
                 WriteOptions{});
  }
}

ResourceTypePtr Api::TypeOfStored(const json& object) const {
  return registry_->FindByKind(object.value("apiVersion", ""), object.value("kind", ""));
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

absl::StatusOr<json> Api::List(const Target& target, const ListOptions& options) const {
  const ResourceType& type = *target.type;
  // Keys are "namespace/name" in the store; a token holds the next key relative to the list's
  // prefix (the namespace's, or the resource's for cluster-scoped and all-namespace lists).
  const std::string prefix = !target.ns.empty() ? target.ns + "/" : type.namespaced ? "" : "/";
  std::string from;
  int64_t at = 0;
  if (!options.continue_token.empty()) {
    ASSIGN_OR_RETURN(ContinueToken token, DecodeContinue(options.continue_token));
    if (options.resource_version != 0) {
      return BadRequestError("specifying resource version is not allowed when using continue");
    }
    from = prefix + token.start;
    at = token.revision > 0 ? token.revision : 0;
  }
  json items = json::array();
  std::string last_key;
  bool more = false;
  int64_t remaining = 0;
  const bool count_remaining = options.labels.empty() && options.fields.empty();
  int64_t revision = 0;
  absl::Status scanned = store_->Scan(
      type.StorageKey(), target.ns, from, at,
      [&](const json& o) {
        if (!options.labels.Matches(Meta(o).value("labels", json()))) return true;
        if (!options.fields.Matches(o)) return true;
        if (options.limit > 0 && static_cast<int64_t>(items.size()) >= options.limit) {
          more = true;
          ++remaining;
          return count_remaining;
        }
        json item = o;
        item["apiVersion"] = type.GroupVersion();
        items.push_back(std::move(item));
        last_key = NamespaceOf(o) + "/" + NameOf(o);
        return true;
      },
      &revision);
  if (absl::IsOutOfRange(scanned)) {
    return ExpiredContinueError(EncodeContinue(from.substr(prefix.size()), -1));
  }
  if (absl::IsInvalidArgument(scanned)) {
    return TooLargeResourceVersionError(at, store_->Revision());
  }
  RETURN_IF_ERROR(scanned);
  json list = {{"kind", type.list_kind},
               {"apiVersion", type.GroupVersion()},
               {"metadata", {{"resourceVersion", std::to_string(revision)}}},
               {"items", std::move(items)}};
  if (more) {
    // Every page is read at the first page's revision: the token carries it.
    list["metadata"]["continue"] =
        EncodeContinue(last_key.substr(prefix.size()) + std::string(1, '\0'), revision);
    if (count_remaining) list["metadata"]["remainingItemCount"] = remaining;
  }
  return list;
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
  if (type.kind == "Namespace" && type.group.empty()) {
    (*object)["spec"] = {{"finalizers", {"kubernetes"}}};
    (*object)["status"] = {{"phase", "Active"}};
    meta["labels"]["kubernetes.io/metadata.name"] = meta["name"];
  } else if (type.kind == "Pod" && type.group.empty()) {
    json& spec = (*object)["spec"];
    if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Always";
    if (!spec.contains("terminationGracePeriodSeconds")) spec["terminationGracePeriodSeconds"] = 30;
    if (!spec.contains("dnsPolicy")) spec["dnsPolicy"] = "ClusterFirst";
    (*object)["status"] = {{"phase", "Pending"}, {"qosClass", "BestEffort"}};
  } else if (type.kind == "Service" && type.group.empty()) {
    json& spec = (*object)["spec"];
    if (!spec.contains("type")) spec["type"] = "ClusterIP";
    if (!spec.contains("clusterIP")) spec["clusterIP"] = "None";
    (*object)["status"] = {{"loadBalancer", json::object()}};
  }
}

absl::Status Api::Admit(const ResourceType& type, json* object, const WriteOptions& options) const {
  if (type.kind == "CustomResourceDefinition") {
    json& status = (*object)["status"];
    json names = (*object)["spec"].value("names", json::object());
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
    for (const auto& v : (*object)["spec"].value("versions", json::array())) {
      if (v.value("storage", false)) stored.push_back(v.value("name", ""));
    }
    status["storedVersions"] = stored;
    return absl::OkStatus();
  }
  if (!type.custom || !type.schema.is_object()) return absl::OkStatus();
  SchemaOutcome outcome = ApplySchema(type.schema, object);
  if (!outcome.unknown_fields.empty() && options.field_validation == "Strict") {
    std::vector<std::string> parts;
    for (const auto& f : outcome.unknown_fields)
      parts.push_back(absl::StrCat("unknown field \"", f, "\""));
    return BadRequestError(absl::StrCat("strict decoding error: ", absl::StrJoin(parts, ", ")));
  }
  if (!outcome.causes.empty()) {
    return InvalidError(type.QualifiedKind(), NameOf(*object), outcome.causes);
  }
  return absl::OkStatus();
}

absl::StatusOr<json> Api::Create(const Target& target, json body, const WriteOptions& options) {
  std::lock_guard<std::recursive_mutex> lock(write_mu_);
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
    auto nsobj = store_->Get("/namespaces", "", ns);
    if (!nsobj) return NotFoundError("namespaces", ns);
    if (IsDeleting(*nsobj)) {
      return ApiError(403, "Forbidden",
                      absl::StrCat(type.Qualified(), " \"", meta.value("name", ""),
                                   "\" is forbidden: unable to create new content in namespace ",
                                   ns, " because it is being terminated"));
    }
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
  RETURN_IF_ERROR(Admit(type, &body, options));
  if (type.kind == "Pod" && type.group.empty()) {
    RETURN_IF_ERROR(AdmitPod(*store_, body, nullptr, options.warnings));
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
  if (type.kind == "CustomResourceDefinition") RETURN_IF_ERROR(registry_->RegisterCrd(stored));
  return stored;
}

absl::StatusOr<json> Api::Update(const Target& target, json body, const WriteOptions& options,
                                 bool* created) {
  std::lock_guard<std::recursive_mutex> lock(write_mu_);
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
  RETURN_IF_ERROR(Admit(type, &updated, options));
  if (type.kind == "Pod" && type.group.empty() && target.subresource.empty()) {
    RETURN_IF_ERROR(AdmitPod(*store_, updated, &old, options.warnings));
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
  bool kubelet_pending = type.kind == "Pod" && graceful_pods_ &&
                         Meta(updated).value("deletionGracePeriodSeconds", 0) > 0;
  if (IsDeleting(updated) && !HasFinalizers(updated) && !kubelet_pending) {
    auto removed = store_->Remove(type.StorageKey(), target.ns, target.name);
    if (removed) AfterRemoveLocked(type.StorageKey(), *removed);
    CollectGarbageLocked();
    return removed ? *removed : updated;
  }
  json stored = store_->Put(type.StorageKey(), std::move(updated));
  if (type.kind == "CustomResourceDefinition") RETURN_IF_ERROR(registry_->RegisterCrd(stored));
  return stored;
}

absl::StatusOr<json> Api::Patch(const Target& target, absl::string_view content_type,
                                const std::string& body, const WriteOptions& options,
                                bool* created) {
  std::lock_guard<std::recursive_mutex> lock(write_mu_);
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

absl::StatusOr<json> Api::Delete(const Target& target, const DeleteOptions& options) {
  std::lock_guard<std::recursive_mutex> lock(write_mu_);
  const ResourceType& type = *target.type;
  auto old = store_->Get(type.StorageKey(), target.ns, target.name);
  if (!old) return NotFoundError(type.Qualified(), target.name);
  if (!options.precondition_uid.empty() && options.precondition_uid != UidOf(*old)) {
    return ApiError(409, "Conflict",
                    absl::StrCat("Operation cannot be fulfilled on ", type.Qualified(), " \"",
                                 target.name, "\": Precondition failed: UID in precondition: ",
                                 options.precondition_uid, ", UID in object meta: ", UidOf(*old)));
  }
  std::string old_rv = Meta(*old).value("resourceVersion", "");
  if (!options.precondition_rv.empty() && options.precondition_rv != old_rv) {
    return ApiError(
        409, "Conflict",
        absl::StrCat("Operation cannot be fulfilled on ", type.Qualified(), " \"", target.name,
                     "\": the ResourceVersion in the precondition (", options.precondition_rv,
                     ") does not match the ResourceVersion in record (", old_rv,
                     "). The object might have been modified"));
  }
  if (options.dry_run) return *old;
  json result = DeleteObjectLocked(type.StorageKey(), *old, options);
  CollectGarbageLocked();
  if (store_->Get(type.StorageKey(), target.ns, target.name)) return result;
  if (type.kind == "Pod" || type.kind == "ServiceAccount") return result;
  return SuccessStatus(
      {{"name", target.name}, {"group", type.group}, {"kind", type.plural}, {"uid", UidOf(*old)}});
}

absl::StatusOr<json> Api::DeleteCollection(const Target& target, const ListOptions& list,
                                           const DeleteOptions& options) {
  ASSIGN_OR_RETURN(json items, List(target, list));
  std::lock_guard<std::recursive_mutex> lock(write_mu_);
  for (const auto& o : items["items"]) {
    if (options.dry_run) continue;
    DeleteObjectLocked(target.type->StorageKey(), o, options);
  }
  CollectGarbageLocked();
  return items;
}

json Api::DeleteObjectLocked(const std::string& key, json object, const DeleteOptions& options) {
  json& meta = object["metadata"];
  std::string ns = meta.value("namespace", ""), name = meta.value("name", "");
  bool is_namespace = key == "/namespaces";
  bool is_pod = key == "/pods";
  if (options.propagation == "Foreground" || options.propagation == "Orphan") {
    std::string f = options.propagation == "Foreground" ? "foregroundDeletion" : "orphan";
    if (!meta.contains("finalizers")) meta["finalizers"] = json::array();
    if (std::find(meta["finalizers"].begin(), meta["finalizers"].end(), f) ==
        meta["finalizers"].end()) {
      meta["finalizers"].push_back(f);
    }
  }
  int64_t grace = options.grace_seconds.value_or(
      object.value("spec", json::object()).value("terminationGracePeriodSeconds", 30));
  bool graceful_pod = is_pod && graceful_pods_ && grace > 0;
  if (HasFinalizers(object) || is_namespace || graceful_pod) {
    if (!meta.contains("deletionTimestamp")) {
      meta["deletionTimestamp"] =
          graceful_pod ? KubeTime(absl::Now() + absl::Seconds(grace)) : NowTimestamp();
      meta["deletionGracePeriodSeconds"] = graceful_pod ? grace : 0;
      if (meta.contains("generation")) meta["generation"] = meta["generation"].get<int64_t>() + 1;
    } else if (graceful_pod && grace < meta.value("deletionGracePeriodSeconds", int64_t{30})) {
      meta["deletionGracePeriodSeconds"] = grace;
    }
    if (is_namespace) object["status"]["phase"] = "Terminating";
    json stored = store_->Put(key, object);
    if (is_namespace) {
      // The namespace controller's job: delete everything inside, then the namespace itself.
      for (auto& [k, o] : store_->ListEverything()) {
        if (NamespaceOf(o) == name && k != "/namespaces" && !IsDeleting(o)) {
          DeleteObjectLocked(k, o, DeleteOptions{});
        }
      }
    }
    return stored;
  }
  auto removed = store_->Remove(key, ns, name);
  if (!removed) return object;
  AfterRemoveLocked(key, *removed);
  return *removed;
}

void Api::AfterRemoveLocked(const std::string& key, const json& removed) {
  if (removed.value("kind", "") == "CustomResourceDefinition") {
    std::string crd = NameOf(removed);
    const json& spec = removed.value("spec", json::object());
    std::string storage =
        spec.value("group", "") + "/" + spec.value("names", json::object()).value("plural", "");
    registry_->UnregisterCrd(crd);
    for (auto& [k, o] : store_->ListEverything()) {
      if (k == storage) store_->Remove(k, NamespaceOf(o), NameOf(o));
    }
  }
  (void)key;
}

void Api::FinishPodDeletion(const std::string& ns, const std::string& name) {
  std::lock_guard<std::recursive_mutex> lock(write_mu_);
  auto pod = store_->Get("/pods", ns, name);
  if (!pod || !IsDeleting(*pod) || HasFinalizers(*pod)) return;
  store_->Remove("/pods", ns, name);
  CollectGarbageLocked();
}

absl::Status Api::Mutate(const std::string& storage_key, const std::string& ns,
                         const std::string& name, const std::function<bool(json&)>& mutate) {
  std::lock_guard<std::recursive_mutex> lock(write_mu_);
  auto object = store_->Get(storage_key, ns, name);
  if (!object) return absl::NotFoundError(absl::StrCat(storage_key, " ", ns, "/", name));
  if (mutate(*object)) store_->Put(storage_key, std::move(*object));
  return absl::OkStatus();
}

void Api::CollectGarbageLocked() {
  for (int round = 0; round < 100; ++round) {
    bool changed = false;
    // Only objects with owners or a pending deletion can be acted on (most objects, Events
    // above all, have neither): copying the whole store on every delete made deletes O(objects).
    std::set<std::string> uids;
    std::vector<std::pair<std::string, json>> everything;
    store_->GarbageView(&uids, &everything);
    std::map<std::string, std::vector<std::pair<std::string, json>>> dependents;
    for (auto& [k, o] : everything) {
      for (const auto& ref : Meta(o).value("ownerReferences", json::array())) {
        dependents[ref.value("uid", "")].emplace_back(k, o);
      }
    }
    for (auto& entry : everything) {
      // Plain references, not structured bindings: the lambdas below capture them, which
      // clang accepts only from version 16.
      auto& k = entry.first;
      auto& o = entry.second;
      const json& refs = Meta(o).value("ownerReferences", json::array());
      bool orphaned = !refs.empty() && !IsDeleting(o);
      for (const auto& ref : refs) orphaned = orphaned && !uids.count(ref.value("uid", ""));
      if (orphaned) {
        DeleteObjectLocked(k, o, DeleteOptions{});
        changed = true;
        continue;
      }
      if (!IsDeleting(o)) continue;
      const json& fins = Meta(o).value("finalizers", json::array());
      auto has = [&](const char* f) {
        return std::find(fins.begin(), fins.end(), f) != fins.end();
      };
      auto& deps = dependents[UidOf(o)];
      bool release = false;
      if (has("orphan")) {
        for (auto& [dk, d] : deps) {
          (void)Mutate(dk, NamespaceOf(d), NameOf(d), [&](json& live) {
            json kept = json::array();
            for (const auto& r : live["metadata"]["ownerReferences"]) {
              if (r.value("uid", "") != UidOf(o)) kept.push_back(r);
            }
            live["metadata"]["ownerReferences"] = kept;
            return true;
          });
        }
        release = true;
      } else if (has("foregroundDeletion")) {
        if (deps.empty()) {
          release = true;
        } else {
          for (auto& [dk, d] : deps) {
            if (!IsDeleting(d)) {
              DeleteObjectLocked(dk, d, DeleteOptions{"Foreground"});
              changed = true;
            }
          }
        }
      } else if (k == "/namespaces") {
        bool empty = std::none_of(everything.begin(), everything.end(), [&](const auto& e) {
          return e.first != "/namespaces" && NamespaceOf(e.second) == NameOf(o);
        });
        if (empty) {
          store_->Remove(k, "", NameOf(o));
          changed = true;
        }
        continue;
      }
      if (release) {
        json updated = o;
        json kept = json::array();
        for (const auto& f : fins) {
          if (f != "orphan" && f != "foregroundDeletion") kept.push_back(f);
        }
        updated["metadata"]["finalizers"] = kept;
        if (kept.empty()) {
          updated["metadata"].erase("finalizers");
          bool graceful_pod =
              k == "/pods" && graceful_pods_ && Meta(o).value("deletionGracePeriodSeconds", 0) > 0;
          if (!graceful_pod) {
            auto removed = store_->Remove(k, NamespaceOf(o), NameOf(o));
            if (removed) AfterRemoveLocked(k, *removed);
          } else {
            store_->Put(k, updated);
          }
        } else {
          store_->Put(k, updated);
        }
        changed = true;
      }
    }
    if (!changed) return;
  }
}

}  // namespace kubetrain::localkube
