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

const json* AppliedSubject(const UserInfo& user, const json& binding,
                           const std::string& binding_ns) {
  auto it = binding.find("subjects");
  if (it == binding.end() || !it->is_array()) return nullptr;
  for (const auto& s : *it) {
    if (!s.is_object()) continue;
    std::string kind = Str(s, "kind"), name = Str(s, "name");
    if (kind == "User" && user.name == name) return &s;
    if (kind == "Group" && Contains(user.groups, name)) return &s;
    if (kind == "ServiceAccount") {
      std::string ns = Str(s, "namespace");
      if (ns.empty()) ns = binding_ns;
      if (!ns.empty() && user.name == absl::StrCat(kServiceAccountPrefix, ns, ":", name)) {
        return &s;
      }
    }
  }
  return nullptr;
}

bool BindingAppliesTo(const UserInfo& user, const json& binding, const std::string& binding_ns) {
  return AppliedSubject(user, binding, binding_ns) != nullptr;
}

const std::vector<DefaultBinding>& DefaultBindings() {
  static const auto* const kBindings = [] {
    json get_urls = {"/livez",     "/readyz", "/healthz", "/version", "/version/", "/openapi",
                     "/openapi/*", "/api",    "/api/*",   "/apis",    "/apis/*"};
    return new std::vector<DefaultBinding>{
        {"cluster-admin",
         {"system:masters"},
         json::array({{{"verbs", {"*"}}, {"apiGroups", {"*"}}, {"resources", {"*"}}},
                      {{"verbs", {"*"}}, {"nonResourceURLs", {"*"}}}})},
        {"system:basic-user",
         {"system:authenticated"},
         json::array({{{"verbs", {"create"}},
                       {"apiGroups", {"authorization.k8s.io"}},
                       {"resources", {"selfsubjectaccessreviews", "selfsubjectrulesreviews"}}},
                      {{"verbs", {"create"}},
                       {"apiGroups", {"authentication.k8s.io"}},
                       {"resources", {"selfsubjectreviews"}}}})},
        {"system:discovery",
         {"system:authenticated"},
         json::array({{{"verbs", {"get"}}, {"nonResourceURLs", get_urls}}})},
        {"system:public-info-viewer",
         {"system:authenticated", "system:unauthenticated"},
         json::array(
             {{{"verbs", {"get"}},
               {"nonResourceURLs", {"/livez", "/readyz", "/healthz", "/version", "/version/"}}}})},
    };
  }();
  return *kBindings;
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

namespace {

// describeSubject of the RBAC authorizer: a ServiceAccount as "name/namespace".
std::string DescribeSubject(const json& subject, const std::string& binding_ns) {
  std::string kind = Str(subject, "kind"), name = Str(subject, "name");
  if (kind != "ServiceAccount") return absl::StrCat(kind, " ", GoQuote(name));
  std::string ns = Str(subject, "namespace");
  return absl::StrCat(kind, " ", GoQuote(absl::StrCat(name, "/", ns.empty() ? binding_ns : ns)));
}

}  // namespace

Decision Decide(const Store& store, const UserInfo& user, const RequestAttributes& attributes) {
  if (Contains(user.groups, "system:masters")) return {true, ""};
  auto allows = [&](const json& rules) {
    return std::any_of(rules.begin(), rules.end(),
                       [&](const json& rule) { return RuleAllows(attributes, rule); });
  };
  for (const DefaultBinding& d : DefaultBindings()) {
    for (const std::string& group : d.groups) {
      if (Contains(user.groups, group) && allows(d.rules)) {
        return {true,
                absl::StrCat("RBAC: allowed by ClusterRoleBinding ", GoQuote(d.name),
                             " of ClusterRole ", GoQuote(d.name), " to Group ", GoQuote(group))};
      }
    }
  }
  std::vector<std::string> errors;
  std::string reason;
  auto visit = [&](const json& binding, const std::string& binding_ns) {
    const json* subject = AppliedSubject(user, binding, binding_ns);
    if (subject == nullptr) return false;
    absl::StatusOr<json> rules = RoleRefRules(store, binding, binding_ns);
    if (!rules.ok()) {
      errors.push_back(std::string(rules.status().message()));
      return false;
    }
    if (!allows(*rules)) return false;
    const json& ref = ObjectField(binding, "roleRef");
    const json& meta = ObjectField(binding, "metadata");
    std::string source =
        binding_ns.empty() ? Str(meta, "name") : absl::StrCat(Str(meta, "name"), "/", binding_ns);
    reason = absl::StrCat("RBAC: allowed by ",
                          binding_ns.empty() ? "ClusterRoleBinding " : "RoleBinding ",
                          GoQuote(source), " of ", Str(ref, "kind"), " ", GoQuote(Str(ref, "name")),
                          " to ", DescribeSubject(*subject, binding_ns));
    return true;
  };
  int64_t revision = 0;
  for (const json& b : store.List(RbacKey("clusterrolebindings"), "", &revision)) {
    if (visit(b, "")) return {true, reason};
  }
  if (!attributes.ns.empty()) {
    for (const json& b : store.List(RbacKey("rolebindings"), attributes.ns, &revision)) {
      if (visit(b, attributes.ns)) return {true, reason};
    }
  }
  return {false, errors.empty() ? "" : absl::StrCat("RBAC: ", AggregateMessage(errors))};
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

}  // namespace kubetrain::localkube
