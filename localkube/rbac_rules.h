// RBAC policy rules compared with each other, as the API server's escalation check compares them
// (k8s.io/component-helpers/auth/rbac/validation): whether the rules a user holds cover the rules
// of a Role or ClusterRole being written or bound, which of the latter are missing, and the
// compact form the 403 message lists them in ({APIGroups:[""], Resources:["secrets"],
// Verbs:["list"]}).
//
// Coverage is decided per atom: a rule stands for every (verb, apiGroup, resource[, resourceName])
// and every (verb, nonResourceURL) combination of its lists, and each atom must be covered by one
// held rule alone. `*` in verbs, apiGroups or resources covers anything, `*/sub` covers the `sub`
// subresource of every resource, a held rule without resourceNames covers every name, and a
// nonResourceURL ending in `*` covers every path it prefixes. A rule with resources but no
// apiGroups (or no verbs) has no atoms, so it grants nothing and needs nothing.
//
// Stateless functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube {

struct PolicyRule {
  std::vector<std::string> verbs;
  std::vector<std::string> api_groups;
  std::vector<std::string> resources;
  std::vector<std::string> resource_names;
  std::vector<std::string> non_resource_urls;

  bool operator==(const PolicyRule&) const = default;
};

// A rule from its JSON form (rbac.authorization.k8s.io/v1 PolicyRule); members that are not
// arrays, and array elements that are not strings, are left out.
PolicyRule PolicyRuleOf(const nlohmann::json& rule);
// Every object of a `rules` array (anything else gives no rules).
std::vector<PolicyRule> PolicyRulesOf(const nlohmann::json& rules);
nlohmann::json ToJson(const PolicyRule& rule);

// Whether `held` covers the single atom `atom` (at most one verb, group, resource and name, or
// one verb and one URL).
bool CoversAtom(const PolicyRule& held, const PolicyRule& atom);

// The outcome of comparing what a user holds with what a role grants.
struct Coverage {
  bool covered = true;
  // The atoms of the granted rules no held rule covers, in the order the granted rules list them
  // (rule, then group, resource, verb, name; then URL, verb).
  std::vector<PolicyRule> missing;
  // The granted rules stand for more than `max_atoms` atoms: not compared (covered is false).
  bool too_large = false;
};

// The number of atoms `rule` stands for, saturating at INT64_MAX.
int64_t AtomCount(const PolicyRule& rule);
// Compares atom by atom. A granted rule set of more than `max_atoms` atoms is refused unread
// (too_large), so a hostile role cannot make the check run for hours.
Coverage Covers(const std::vector<PolicyRule>& held, const std::vector<PolicyRule>& granted,
                int64_t max_atoms = 1 << 20);

// Merges atoms that name one group and one resource (and at most one name) and differ only in
// their verbs into one rule with those verbs, in order; other rules stay as they are.
std::vector<PolicyRule> CompactRules(const std::vector<PolicyRule>& rules);

// `{APIGroups:["x"], Resources:["y"], NonResourceURLs:[...], ResourceNames:[...], Verbs:[...]}`,
// each list only when not empty, quoted as Go's %q quotes a []string.
std::string CompactString(const PolicyRule& rule);

// Go's %q of a []string: ["a" "b"].
std::string GoQuotedList(const std::vector<std::string>& values);

}  // namespace kubetrain::localkube
