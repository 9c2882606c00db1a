#include "localkube/rbac_escalation.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kRbacApiGroup[] = "rbac.authorization.k8s.io";
// A role whose rules stand for more (verb, group, resource, name) combinations than this is
// refused rather than compared one combination at a time.
constexpr int64_t kMaxCheckedAtoms = 1 << 20;

std::string RbacStorageKey(const char* plural) { return absl::StrCat(kRbacApiGroup, "/", plural); }

// rbacregistry.IsOnlyMutatingGCFields: the update changes nothing but ownerReferences and
// finalizers (resourceVersion and managedFields are the server's).
bool OnlyGcFieldsChange(const json& object, const json& old) {
  auto strip = [](json o) {
    if (o.contains("metadata") && o["metadata"].is_object()) {
      for (const char* field :
           {"ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation"}) {
        o["metadata"].erase(field);
      }
    }
    o.erase("apiVersion");
    o.erase("kind");
    return o;
  };
  return strip(object) == strip(old);
}

// The authorizer's decision on `verb` for a resource of the RBAC group.
bool RbacVerbAllowed(const Store& store, const UserInfo& user, const std::string& verb,
                     const std::string& group, const std::string& resource, const std::string& ns,
                     const std::string& name) {
  RequestAttributes a{.resource_request = true,
                      .verb = verb,
                      .api_group = group,
                      .api_version = "*",
                      .resource = resource,
                      .ns = ns,
                      .name = name};
  return Decide(store, user, a).allowed;
}

absl::Status AdmitRole(const Store& store, const UserInfo& user, const ResourceType& type,
                       const std::string& request_name, const json& object) {
  const std::string ns = type.namespaced ? NamespaceOf(object) : "";
  // RoleEscalationAuthorized: `escalate` on the resource the request addresses.
  if (RbacVerbAllowed(store, user, "escalate", type.group, type.plural, ns, request_name)) {
    return absl::OkStatus();
  }
  absl::Status st = ConfirmNoEscalation(store, user, ns, PolicyRulesOf(Field(object, "rules")));
  if (st.ok()) return st;
  return ForbiddenError(type.plural, type.group, NameOf(object), std::string(st.message()));
}

absl::Status AdmitBinding(const Store& store, const UserInfo& user, const ResourceType& type,
                          const json& object, bool update) {
  const std::string ns = type.namespaced ? NamespaceOf(object) : "";
  const json& ref = Field(object, "roleRef");
  const std::string kind = Str(ref, "kind");
  // BindingAuthorized: `bind` on the referenced role, checked in the binding's namespace.
  if (kind == "Role" || kind == "ClusterRole") {
    if (RbacVerbAllowed(store, user, "bind", Str(ref, "apiGroup"),
                        kind == "Role" ? "roles" : "clusterroles", ns, Str(ref, "name"))) {
      return absl::OkStatus();
    }
  }
  absl::StatusOr<json> rules = RoleRefRules(store, object, ns);
  if (!rules.ok()) {
    if (update) return BadRequestError(rules.status().message());
    return ForbiddenError(type.plural, type.group, NameOf(object),
                          std::string(rules.status().message()));
  }
  absl::Status st = ConfirmNoEscalation(store, user, ns, PolicyRulesOf(*rules));
  if (st.ok()) return st;
  return ForbiddenError(type.plural, type.group, NameOf(object), std::string(st.message()));
}

}  // namespace

HeldRules RulesFor(const Store& store, const UserInfo& user, const std::string& ns) {
  HeldRules out;
  auto visit = [&](const json& binding, const std::string& binding_ns) {
    if (!BindingAppliesTo(user, binding, binding_ns)) return;
    absl::StatusOr<json> rules = RoleRefRules(store, binding, binding_ns);
    if (!rules.ok()) {
      out.errors.push_back(std::string(rules.status().message()));
      return;
    }
    for (PolicyRule& r : PolicyRulesOf(*rules)) out.rules.push_back(std::move(r));
  };
  for (const DefaultBinding& d : DefaultBindings()) {
    if (std::any_of(d.groups.begin(), d.groups.end(), [&](const std::string& g) {
          return std::find(user.groups.begin(), user.groups.end(), g) != user.groups.end();
        })) {
      for (PolicyRule& r : PolicyRulesOf(d.rules)) out.rules.push_back(std::move(r));
    }
  }
  int64_t revision = 0;
  for (const json& b : store.List(RbacStorageKey("clusterrolebindings"), "", &revision)) {
    visit(b, "");
  }
  if (!ns.empty()) {
    for (const json& b : store.List(RbacStorageKey("rolebindings"), ns, &revision)) {
      visit(b, ns);
    }
  }
  return out;
}

absl::Status ConfirmNoEscalation(const Store& store, const UserInfo& user, const std::string& ns,
                                 const std::vector<PolicyRule>& granted) {
  HeldRules held = RulesFor(store, user, ns);
  Coverage coverage = Covers(held.rules, granted, kMaxCheckedAtoms);
  if (coverage.covered) return absl::OkStatus();
  std::string who =
      absl::StrCat("user ", GoQuote(user.name), " (groups=", GoQuotedList(user.groups), ")");
  if (coverage.too_large) {
    return absl::PermissionDeniedError(absl::StrCat(
        who,
        " is attempting to grant RBAC permissions that cannot be checked: the rules stand "
        "for more than ",
        kMaxCheckedAtoms,
        " (verb, apiGroup, resource, resourceName) combinations; split them into smaller roles"));
  }
  std::set<std::string> missing;  // sorted and deduplicated, as sets.String.List()
  for (const PolicyRule& r : CompactRules(coverage.missing)) missing.insert(CompactString(r));
  std::string message =
      absl::StrCat(who, " is attempting to grant RBAC permissions not currently held:\n",
                   absl::StrJoin(missing, "\n"));
  if (!held.errors.empty()) {
    absl::StrAppend(&message, "; resolution errors: [", AggregateMessage(held.errors), "]");
  }
  return absl::PermissionDeniedError(message);
}

absl::Status AdmitRbacWrite(const Store& store, const UserInfo& user, const ResourceType& type,
                            const std::string& request_name, const json& object, const json* old) {
  if (type.group != kRbacApiGroup) return absl::OkStatus();
  // EscalationAllowed: system:masters may grant anything.
  if (std::find(user.groups.begin(), user.groups.end(), "system:masters") != user.groups.end()) {
    return absl::OkStatus();
  }
  if (old != nullptr && OnlyGcFieldsChange(object, *old)) return absl::OkStatus();
  if (type.plural == "roles" || type.plural == "clusterroles") {
    return AdmitRole(store, user, type, request_name, object);
  }
  if (type.plural == "rolebindings" || type.plural == "clusterrolebindings") {
    return AdmitBinding(store, user, type, object, old != nullptr);
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
