// localkube's RBAC evaluation: the authorizer (Decide), the rule comparison of the escalation
// check (Covers, CompactRules, CompactString) and the escalation admission of Role writes, fed
// arbitrary Roles, ClusterRoles, bindings, users, rules and request attributes.
//
// Input: one JSON object (anything else is skipped):
//   {"objects": [Role | ClusterRole | RoleBinding | ClusterRoleBinding, ...],
//    "user": {"name": "...", "groups": ["..."]}, "ns": "...",
//    "rules": [PolicyRule, ...],             the rules a Role written by the user grants
//    "request": {"verb":..., "apiGroup":..., "resource":..., "subresource":..., "name":...,
//                "path":..., "resourceRequest": bool}}
//
// Invariants besides not crashing:
//   - a rule set covers itself, and each rule covers the rule made of its first verb, group,
//     resource (and name), and the URL rule of its first URL and verb;
//   - the missing atoms Covers reports are exactly the atoms no held rule covers, and compacting
//     them keeps every verb;
//   - whatever the held rules cover, the authorizer allows (the converse need not hold: it also
//     allows discovery, and a resourceNames [""] rule matches an unnamed request);
//   - a Role whose rules the user holds is admitted; one they do not hold, without `escalate`, is
//     refused with 403.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "localkube/errors.h"
#include "localkube/rbac.h"
#include "localkube/rbac_escalation.h"
#include "localkube/rbac_rules.h"
#include "localkube/resources.h"
#include "localkube/store.h"

namespace {

namespace localkube = kubetrain::localkube;
using kubetrain::fuzz::Fail;
using localkube::PolicyRule;
using nlohmann::json;

// Beyond this many atoms the per-atom checks are skipped (Covers itself stays bounded).
constexpr int64_t kMaxCheckedAtoms = 4096;

std::string StrOf(const json& object, const char* field) {
  if (!object.is_object()) return "";
  auto it = object.find(field);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// The storage key an RBAC object of `kind` lives under, "" for other kinds.
std::string KeyOf(const std::string& kind) {
  if (kind == "Role") return "rbac.authorization.k8s.io/roles";
  if (kind == "ClusterRole") return "rbac.authorization.k8s.io/clusterroles";
  if (kind == "RoleBinding") return "rbac.authorization.k8s.io/rolebindings";
  if (kind == "ClusterRoleBinding") return "rbac.authorization.k8s.io/clusterrolebindings";
  return "";
}

// Every atom of `rules`, in Covers' order.
std::vector<PolicyRule> Atoms(const std::vector<PolicyRule>& rules) {
  // Covers with nothing held reports every atom missing.
  return localkube::Covers({}, rules, kMaxCheckedAtoms).missing;
}

// The request an atom stands for, in namespace `ns`; false for resource atoms no request can
// name (a resource ending in "/").
bool RequestOf(const PolicyRule& atom, const std::string& ns, localkube::RequestAttributes* a) {
  a->verb = atom.verbs.empty() ? "" : atom.verbs[0];
  // The held rules come from the namespace's RoleBindings too, so the request names it.
  a->ns = ns;
  if (!atom.non_resource_urls.empty()) {
    a->resource_request = false;
    a->path = atom.non_resource_urls[0];
    return true;
  }
  a->resource_request = true;
  a->api_group = atom.api_groups[0];
  const std::string& r = atom.resources[0];
  size_t slash = r.find('/');
  a->resource = r.substr(0, slash);
  if (slash != std::string::npos) {
    a->subresource = r.substr(slash + 1);
    if (a->subresource.empty()) return false;
  }
  if (!atom.resource_names.empty()) a->name = atom.resource_names[0];
  return true;
}

void CheckRuleSet(const std::vector<PolicyRule>& rules) {
  localkube::Coverage self = localkube::Covers(rules, rules);
  if (!self.too_large && !self.covered) Fail("a rule set does not cover itself");
  for (const PolicyRule& r : rules) {
    if (!r.verbs.empty() && !r.api_groups.empty() && !r.resources.empty()) {
      PolicyRule sub{
          .verbs = {r.verbs[0]}, .api_groups = {r.api_groups[0]}, .resources = {r.resources[0]}};
      if (!r.resource_names.empty()) sub.resource_names = {r.resource_names[0]};
      if (!localkube::Covers({r}, {sub}).covered) Fail("a rule does not cover its subset");
    }
    if (!r.verbs.empty() && !r.non_resource_urls.empty()) {
      PolicyRule sub{.verbs = {r.verbs[0]}, .non_resource_urls = {r.non_resource_urls[0]}};
      if (!localkube::Covers({r}, {sub}).covered) Fail("a URL rule does not cover its subset");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  json input = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!input.is_object()) return 0;
  localkube::Store store;
  if (input.contains("objects") && input["objects"].is_array()) {
    for (json object : input["objects"]) {
      if (!object.is_object()) continue;
      std::string key = KeyOf(StrOf(object, "kind"));
      if (key.empty()) continue;
      json& meta = object["metadata"];
      if (!meta.is_object()) meta = json::object();
      if (!meta.contains("name") || !meta["name"].is_string()) meta["name"] = "x";
      bool cluster = key.find("/cluster") != std::string::npos;
      if (cluster) {
        meta.erase("namespace");
      } else if (!meta.contains("namespace") || !meta["namespace"].is_string()) {
        meta["namespace"] = "ns";
      }
      store.Put(key, std::move(object));
    }
  }
  const json& user_json = input.contains("user") ? input["user"] : json();
  std::vector<std::string> groups;
  if (user_json.is_object() && user_json.contains("groups") && user_json["groups"].is_array()) {
    for (const json& g : user_json["groups"]) {
      if (g.is_string()) groups.push_back(g.get<std::string>());
    }
  }
  localkube::UserInfo user = localkube::MakeUser(StrOf(user_json, "name"), groups);
  std::string ns = StrOf(input, "ns");
  std::vector<PolicyRule> granted =
      localkube::PolicyRulesOf(input.contains("rules") ? input["rules"] : json());

  // The authorizer on the request as given.
  const json& request = input.contains("request") ? input["request"] : json();
  localkube::RequestAttributes attributes;
  // A resource request unless "resourceRequest" is false (a value of another type is ignored).
  attributes.resource_request = !request.is_object() || !request.contains("resourceRequest") ||
                                !request["resourceRequest"].is_boolean() ||
                                request["resourceRequest"].get<bool>();
  attributes.verb = StrOf(request, "verb");
  attributes.api_group = StrOf(request, "apiGroup");
  attributes.resource = StrOf(request, "resource");
  attributes.subresource = StrOf(request, "subresource");
  attributes.name = StrOf(request, "name");
  attributes.path = StrOf(request, "path");
  attributes.ns = ns;
  (void)localkube::Decide(store, user, attributes);
  (void)localkube::Authorize(store, user, attributes);

  CheckRuleSet(granted);
  localkube::HeldRules held = localkube::RulesFor(store, user, ns);
  CheckRuleSet(held.rules);

  int64_t atoms = 0;
  for (const PolicyRule& r : granted) atoms += std::min<int64_t>(localkube::AtomCount(r), 1 << 20);
  localkube::Coverage coverage = localkube::Covers(held.rules, granted);
  if (atoms <= kMaxCheckedAtoms) {
    size_t missing = 0;
    for (const PolicyRule& atom : Atoms(granted)) {
      bool covered = localkube::Covers(held.rules, {atom}).covered;
      if (!covered) {
        if (missing >= coverage.missing.size() || !(coverage.missing[missing] == atom)) {
          Fail("Covers' missing atoms are not the uncovered ones");
        }
        ++missing;
        continue;
      }
      localkube::RequestAttributes a;
      if (RequestOf(atom, ns, &a) && !localkube::Decide(store, user, a).allowed) {
        Fail(absl::StrCat("covered but not allowed: ", localkube::CompactString(atom)));
      }
    }
    if (missing != coverage.missing.size()) Fail("Covers reports atoms that are covered");
    size_t verbs = 0;
    for (const PolicyRule& r : localkube::CompactRules(coverage.missing)) {
      verbs += r.verbs.size();
      (void)localkube::CompactString(r);
    }
    if (verbs != coverage.missing.size()) Fail("compacting lost or invented verbs");
  }

  // The escalation admission of a Role granting `granted`, written by the user in `ns`.
  if (!ns.empty()) {
    json rules = json::array();
    for (const PolicyRule& r : granted) rules.push_back(localkube::ToJson(r));
    json role = {{"apiVersion", "rbac.authorization.k8s.io/v1"},
                 {"kind", "Role"},
                 {"metadata", {{"name", "r"}, {"namespace", ns}}},
                 {"rules", rules}};
    localkube::Registry registry;
    localkube::ResourceTypePtr roles = registry.Find("rbac.authorization.k8s.io", "v1", "roles");
    if (!roles) Fail("no roles type");
    absl::Status admitted = localkube::AdmitRbacWrite(store, user, *roles, "", role, nullptr);
    bool master =
        std::find(user.groups.begin(), user.groups.end(), "system:masters") != user.groups.end();
    localkube::RequestAttributes escalate{.resource_request = true,
                                          .verb = "escalate",
                                          .api_group = "rbac.authorization.k8s.io",
                                          .api_version = "*",
                                          .resource = "roles",
                                          .ns = ns};
    // The role's rules went through JSON: compare what was admitted with what it holds.
    localkube::Coverage role_coverage =
        localkube::Covers(held.rules, localkube::PolicyRulesOf(rules));
    if (role_coverage.covered && !admitted.ok()) Fail("a role within held rules was refused");
    if (!role_coverage.covered && !master && !localkube::Decide(store, user, escalate).allowed &&
        (admitted.ok() || localkube::HttpCode(admitted) != 403)) {
      Fail("a role beyond held rules was not refused with 403");
    }
  }
  return 0;
}
