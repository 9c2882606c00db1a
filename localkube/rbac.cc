#include "localkube/rbac.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/quote.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kRbacGroup[] = "rbac.authorization.k8s.io";

std::string RbacKey(const char* plural) { return absl::StrCat(kRbacGroup, "/", plural); }

// Strings of a JSON array field (non-strings skipped).
std::vector<std::string> StringsOf(const json& object, const char* field) {
  std::vector<std::string> out;
  auto it = object.find(field);
  if (it == object.end() || !it->is_array()) return out;
  for (const auto& v : *it) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

bool Contains(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

const json& ObjectField(const json& object, const char* field) {
  static const json kEmpty = json::object();
  auto it = object.find(field);
  return it != object.end() && it->is_object() ? *it : kEmpty;
}

// The policy rule matchers of k8s.io/component-helpers/auth/rbac/validation.
bool VerbMatches(const json& rule, const std::string& verb) {
  std::vector<std::string> verbs = StringsOf(rule, "verbs");
  return Contains(verbs, "*") || Contains(verbs, verb);
}

bool ApiGroupMatches(const json& rule, const std::string& group) {
  std::vector<std::string> groups = StringsOf(rule, "apiGroups");
  return Contains(groups, "*") || Contains(groups, group);
}

bool ResourceMatches(const json& rule, const std::string& combined,
                     const std::string& subresource) {
  for (const std::string& r : StringsOf(rule, "resources")) {
    if (r == "*" || r == combined) return true;
    // "*/status" matches the status subresource of every resource.
    if (!subresource.empty() && r == "*/" + subresource) return true;
  }
  return false;
}

bool ResourceNameMatches(const json& rule, const std::string& name) {
  std::vector<std::string> names = StringsOf(rule, "resourceNames");
  return names.empty() || Contains(names, name);
}

bool NonResourceUrlMatches(const json& rule, const std::string& path) {
  for (const std::string& url : StringsOf(rule, "nonResourceURLs")) {
    if (url == "*" || url == path) return true;
    // A trailing run of `*` is one wildcard: "/logs**" matches what "/logs" prefixes.
    if (absl::EndsWith(url, "*") &&
        absl::StartsWith(path, absl::string_view(url).substr(0, url.find_last_not_of('*') + 1))) {
      return true;
    }
  }
  return false;
}

bool RuleAllows(const RequestAttributes& a, const json& rule) {
  if (!rule.is_object()) return false;
  if (!a.resource_request) return VerbMatches(rule, a.verb) && NonResourceUrlMatches(rule, a.path);
  std::string combined = a.subresource.empty() ? a.resource : a.resource + "/" + a.subresource;
  return VerbMatches(rule, a.verb) && ApiGroupMatches(rule, a.api_group) &&
         ResourceMatches(rule, combined, a.subresource) && ResourceNameMatches(rule, a.name);
}

}  // namespace

bool BindingAppliesTo(const UserInfo& user, const json& binding, const std::string& binding_ns) {
  auto it = binding.find("subjects");
  if (it == binding.end() || !it->is_array()) return false;
  for (const auto& s : *it) {
    if (!s.is_object()) continue;
    std::string kind = Str(s, "kind"), name = Str(s, "name");
    if (kind == "User" && user.name == name) return true;
    if (kind == "Group" && Contains(user.groups, name)) return true;
    if (kind == "ServiceAccount") {
      std::string ns = Str(s, "namespace");
      if (ns.empty()) ns = binding_ns;
      if (!ns.empty() && user.name == absl::StrCat(kServiceAccountPrefix, ns, ":", name)) {
        return true;
      }
    }
  }
  return false;
}

absl::StatusOr<json> RoleRefRules(const Store& store, const json& binding,
                                  const std::string& binding_ns) {
  const json& ref = ObjectField(binding, "roleRef");
  std::string kind = Str(ref, "kind"), name = Str(ref, "name");
  std::optional<json> role;
  if (kind == "Role") {
    role = store.Get(RbacKey("roles"), binding_ns, name);
    if (!role) {
      return absl::NotFoundError(
          absl::StrCat("role.", kRbacGroup, " ", GoQuote(name), " not found"));
    }
  } else if (kind == "ClusterRole") {
    role = store.Get(RbacKey("clusterroles"), "", name);
    if (!role) {
      return absl::NotFoundError(
          absl::StrCat("clusterrole.", kRbacGroup, " ", GoQuote(name), " not found"));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported role reference kind: ", GoQuote(kind)));
  }
  auto it = role->find("rules");
  return it != role->end() && it->is_array() ? *it : json::array();
}

namespace {

// utilerrors.NewAggregate(errs).Error(): one message alone, several deduplicated in brackets.
std::string Aggregate(const std::vector<std::string>& errors) {
  std::vector<std::string> unique;
  for (const std::string& e : errors) {
    if (!Contains(unique, e)) unique.push_back(e);
  }
  if (unique.size() == 1) return unique[0];
  return absl::StrCat("[", absl::StrJoin(unique, ", "), "]");
}

// "trainingjobs.kubetrain.dev" / "pods": how NewForbidden names the group resource.
std::string GroupResource(const std::string& resource, const std::string& group) {
  return group.empty() ? resource : absl::StrCat(resource, ".", group);
}

}  // namespace

absl::Status ForbiddenError(const std::string& resource, const std::string& group,
                            const std::string& name, const std::string& why) {
  std::string message;
  if (resource.empty() && group.empty()) {
    message = absl::StrCat("forbidden: ", why);
  } else if (name.empty()) {
    message = absl::StrCat(GroupResource(resource, group), " is forbidden: ", why);
  } else {
    message =
        absl::StrCat(GroupResource(resource, group), " ", GoQuote(name), " is forbidden: ", why);
  }
  json details = json::object();
  if (!name.empty()) details["name"] = name;
  if (!group.empty()) details["group"] = group;
  if (!resource.empty()) details["kind"] = resource;
  return ApiError(403, "Forbidden", message, details);
}

namespace {

// The apiserver's forbiddenMessage, with its HTML sanitizer.
std::string ForbiddenMessage(const UserInfo& user, const RequestAttributes& a) {
  std::string msg;
  if (!a.resource_request) {
    msg = absl::StrCat("User ", GoQuote(user.name), " cannot ", a.verb, " path ", GoQuote(a.path));
  } else {
    std::string resource = a.subresource.empty() ? a.resource : a.resource + "/" + a.subresource;
    msg = absl::StrCat(
        "User ", GoQuote(user.name), " cannot ", a.verb, " resource ", GoQuote(resource),
        " in API group ", GoQuote(a.api_group),
        a.ns.empty() ? " at the cluster scope" : absl::StrCat(" in the namespace ", GoQuote(a.ns)));
  }
  std::string out;
  for (char c : msg) {
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Discovery and version paths every authenticated user may read (system:discovery,
// system:public-info-viewer).
bool IsDiscoveryPath(const std::string& path) {
  for (const char* exact :
       {"/api", "/apis", "/version", "/version/", "/openapi", "/healthz", "/livez", "/readyz"}) {
    if (path == exact) return true;
  }
  for (const char* prefix : {"/api/", "/apis/", "/openapi/", "/healthz/", "/livez/", "/readyz/"}) {
    if (absl::StartsWith(path, prefix)) return true;
  }
  return false;
}

// path.IsValidPathSegmentName.
bool ValidPathSegment(const std::string& name) {
  return name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('%') == std::string::npos;
}

// fields.Selector.RequiresExactMatch("metadata.name") on a raw field selector.
std::string ExactName(absl::string_view selector) {
  for (absl::string_view term : absl::StrSplit(selector, ',')) {
    term = absl::StripAsciiWhitespace(term);
    if (!absl::ConsumePrefix(&term, "metadata.name")) continue;
    if (absl::ConsumePrefix(&term, "==") || absl::ConsumePrefix(&term, "=")) {
      return std::string(term);
    }
  }
  return "";
}

}  // namespace

UserInfo AdminUser() { return {"admin", {"system:masters", "system:authenticated"}}; }

UserInfo MakeUser(std::string name, std::vector<std::string> groups) {
  auto add = [&](const std::string& g) {
    if (!Contains(groups, g)) groups.push_back(g);
  };
  if (absl::StartsWith(name, kServiceAccountPrefix)) {
    std::vector<std::string> parts =
        absl::StrSplit(name.substr(strlen(kServiceAccountPrefix)), ':');
    if (parts.size() == 2 && !parts[0].empty() && !parts[1].empty()) {
      add("system:serviceaccounts");
      add("system:serviceaccounts:" + parts[0]);
    }
  }
  add("system:authenticated");
  return {std::move(name), std::move(groups)};
}

absl::StatusOr<std::pair<std::string, UserInfo>> ParseUserToken(absl::string_view flag) {
  size_t eq = flag.find('=');
  if (eq == absl::string_view::npos || eq == 0 || eq + 1 == flag.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--user-token wants TOKEN=USERNAME[,GROUP...], got ", flag));
  }
  std::vector<std::string> parts = absl::StrSplit(flag.substr(eq + 1), ',', absl::SkipEmpty());
  if (parts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--user-token has no user name: ", flag));
  }
  std::string name = parts[0];
  parts.erase(parts.begin());
  return std::make_pair(std::string(flag.substr(0, eq)), MakeUser(name, parts));
}

RequestAttributes AttributesOf(absl::string_view method, absl::string_view path, bool watch,
                               absl::string_view field_selector) {
  RequestAttributes a;
  a.path = std::string(path);
  a.verb = absl::AsciiStrToLower(method);
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  // /api/<v>/<resource>... and /apis/<g>/<v>/<resource>...; anything shorter is non-resource.
  if (parts.size() < 3 || (parts[0] != "api" && parts[0] != "apis")) return a;
  size_t i = 1;
  if (parts[0] == "apis") {
    if (parts.size() < 4) return a;
    a.api_group = parts[i++];
  }
  a.resource_request = true;
  a.api_version = parts[i++];
  std::vector<std::string> rest(parts.begin() + i, parts.end());
  if (method == "POST") {
    a.verb = "create";
  } else if (method == "GET" || method == "HEAD") {
    a.verb = "get";
  } else if (method == "PUT") {
    a.verb = "update";
  } else if (method == "PATCH") {
    a.verb = "patch";
  } else if (method == "DELETE") {
    a.verb = "delete";
  } else {
    a.verb = "";
  }
  if (rest[0] == "namespaces" && rest.size() > 1) {
    a.ns = rest[1];
    // /namespaces/<ns>/status and /finalize are the namespace's own subresources.
    if (rest.size() > 2 && rest[2] != "status" && rest[2] != "finalize") {
      rest.erase(rest.begin(), rest.begin() + 2);
    }
  }
  a.resource = rest[0];
  if (rest.size() >= 2) a.name = rest[1];
  if (rest.size() >= 3) a.subresource = rest[2];
  if (a.name.empty() && a.verb == "get") {
    a.verb = watch ? "watch" : "list";
    std::string name = ExactName(field_selector);
    if (!name.empty() && ValidPathSegment(name)) a.name = name;
  }
  if (a.name.empty() && a.verb == "delete") a.verb = "deletecollection";
  return a;
}

Decision Decide(const Store& store, const UserInfo& user, const RequestAttributes& attributes) {
  if (Contains(user.groups, "system:masters")) return {true, ""};
  if (!attributes.resource_request && Contains(user.groups, "system:authenticated") &&
      attributes.verb == "get" && IsDiscoveryPath(attributes.path)) {
    return {true, ""};
  }
  std::vector<std::string> errors;
  auto visit = [&](const json& binding, const std::string& binding_ns) {
    if (!BindingAppliesTo(user, binding, binding_ns)) return false;
    absl::StatusOr<json> rules = RoleRefRules(store, binding, binding_ns);
    if (!rules.ok()) {
      errors.push_back(std::string(rules.status().message()));
      return false;
    }
    return std::any_of(rules->begin(), rules->end(),
                       [&](const json& rule) { return RuleAllows(attributes, rule); });
  };
  int64_t revision = 0;
  for (const json& b : store.List(RbacKey("clusterrolebindings"), "", &revision)) {
    if (visit(b, "")) return {true, ""};
  }
  if (!attributes.ns.empty()) {
    for (const json& b : store.List(RbacKey("rolebindings"), attributes.ns, &revision)) {
      if (visit(b, attributes.ns)) return {true, ""};
    }
  }
  return {false, errors.empty() ? "" : absl::StrCat("RBAC: ", Aggregate(errors))};
}

absl::Status Authorize(const Store& store, const UserInfo& user,
                       const RequestAttributes& attributes) {
  Decision d = Decide(store, user, attributes);
  if (d.allowed) return absl::OkStatus();
  std::string why = ForbiddenMessage(user, attributes);
  if (!d.reason.empty()) absl::StrAppend(&why, ": ", d.reason);
  if (!attributes.resource_request) return ForbiddenError("", "", "", why);
  return ForbiddenError(attributes.resource, attributes.api_group, attributes.name, why);
}

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
    const json& refs = ObjectField(*o, "metadata").value("ownerReferences", json::array());
    return refs.is_array() ? refs : json::array();
  };
  json refs = refs_of(&object);
  json old_refs = refs_of(old);
  bool changing = old ? refs != old_refs : !refs.empty();
  if (!changing) return absl::OkStatus();
  // admission.NewForbidden names the object by its name, else its generateName, else "Unknown".
  const json& meta = ObjectField(object, "metadata");
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
