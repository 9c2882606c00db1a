// The OwnerReferencesPermissionEnforcement admission rule (rbac.h): who may set owners and
// blockOwnerDeletion, decided by the RBAC authorizer.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/quote.h"
#include "localkube/json_fields.h"
#include "localkube/rbac.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

const json& MetadataOf(const json& object) {
  static const json kEmpty = json::object();
  auto it = object.find("metadata");
  return it != object.end() && it->is_object() ? *it : kEmpty;
}

}  // namespace

absl::Status AdmitOwnerReferences(const Registry& registry, const Store& store,
                                  const UserInfo& user, const ResourceType& type,
                                  const std::string& subresource, const std::string& ns,
                                  const json& object, const json* old) {
  // pods/status is exempt: the pod status strategy keeps ownerReferences as they were.
  if (type.group.empty() && type.plural == "pods" && subresource == "status") {
    return absl::OkStatus();
  }
  auto refs_of = [](const json* o) {
    if (!o || !o->is_object()) return json::array();
    const json& refs = MetadataOf(*o).value("ownerReferences", json::array());
    return refs.is_array() ? refs : json::array();
  };
  json refs = refs_of(&object);
  json old_refs = refs_of(old);
  bool changing = old ? refs != old_refs : !refs.empty();
  if (!changing) return absl::OkStatus();
  // admission.NewForbidden names the object by its name, else its generateName, else "Unknown".
  const json& meta = MetadataOf(object);
  std::string name = Str(meta, "name");
  if (name.empty()) name = Str(meta, "generateName");
  if (name.empty()) name = "Unknown";
  auto forbidden = [&](const std::string& why) {
    return ForbiddenError(type.plural, type.group, name, why);
  };
  // Whoever may create an object may give it owners; changing them later needs `delete`.
  if (old) {
    RequestAttributes del{.resource_request = true,
                          .verb = "delete",
                          .api_group = type.group,
                          .api_version = type.version,
                          .resource = type.plural,
                          .subresource = subresource,
                          .ns = ns,
                          .name = Str(meta, "name")};
    Decision d = Decide(store, user, del);
    if (!d.allowed) {
      return forbidden(absl::StrCat(
          "cannot set an ownerRef on a resource you can't delete: ", d.reason, ", <nil>"));
    }
  }
  auto blocking = [](const json& ref) {
    auto it = ref.find("blockOwnerDeletion");
    return it != ref.end() && it->is_boolean() && it->get<bool>();
  };
  for (const json& ref : refs) {
    if (!ref.is_object() || !blocking(ref)) continue;
    bool was_blocking = false;
    for (const json& o : old_refs) {
      if (o.is_object() && Str(o, "uid") == Str(ref, "uid")) {
        was_blocking = blocking(o);
      }
    }
    if (was_blocking) continue;
    std::string api_version = Str(ref, "apiVersion"), kind = Str(ref, "kind");
    std::vector<std::string> gv = absl::StrSplit(api_version, '/');
    std::string group = gv.size() == 2 ? gv[0] : "";
    ResourceTypePtr owner = gv.size() <= 2 ? registry.FindByKind(api_version, kind) : nullptr;
    if (!owner) {
      std::string why = gv.size() > 2
                            ? absl::StrCat("unexpected GroupVersion string: ", api_version)
                            : absl::StrCat("no matches for kind ", GoQuote(kind), " in version ",
                                           GoQuote(api_version));
      return forbidden(absl::StrCat(
          "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for "
          "APIVersion ",
          api_version, " Kind ", kind, ": ", why));
    }
    RequestAttributes finalizers{.resource_request = true,
                                 .verb = "update",
                                 .api_group = owner->group,
                                 .api_version = owner->version,
                                 .resource = owner->plural,
                                 .subresource = "finalizers",
                                 .ns = ns,
                                 .name = Str(ref, "name")};
    Decision d = Decide(store, user, finalizers);
    if (!d.allowed) {
      return forbidden(absl::StrCat(
          "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set "
          "finalizers on: ",
          d.reason, ", <nil>"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
