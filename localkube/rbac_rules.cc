#include "localkube/rbac_rules.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/quote.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

bool Holds(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// Every value of `wanted` (at most one here) is in `held`.
bool HoldsAll(const std::vector<std::string>& held, const std::vector<std::string>& wanted) {
  return std::all_of(wanted.begin(), wanted.end(),
                     [&](const std::string& w) { return Holds(held, w); });
}

bool ResourcesCover(const std::vector<std::string>& held, const std::vector<std::string>& wanted) {
  if (Holds(held, "*")) return true;
  for (const std::string& r : wanted) {
    if (Holds(held, r)) continue;
    size_t slash = r.find('/');
    // A subresource is also covered by "*/<subresource>"; a resource only by itself.
    if (slash == std::string::npos || !Holds(held, "*" + r.substr(slash))) return false;
  }
  return true;
}

bool UrlCovers(const std::string& held, const std::string& path) {
  if (held == path) return true;
  if (!absl::EndsWith(held, "*")) return false;
  absl::string_view prefix = held;
  while (absl::ConsumeSuffix(&prefix, "*")) {
  }
  return absl::StartsWith(path, prefix);
}

bool UrlsCover(const std::vector<std::string>& held, const std::vector<std::string>& wanted) {
  return std::all_of(wanted.begin(), wanted.end(), [&](const std::string& path) {
    return std::any_of(held.begin(), held.end(),
                       [&](const std::string& h) { return UrlCovers(h, path); });
  });
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > std::numeric_limits<int64_t>::max() / b) return std::numeric_limits<int64_t>::max();
  return a * b;
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  if (a > std::numeric_limits<int64_t>::max() - b) return std::numeric_limits<int64_t>::max();
  return a + b;
}

}  // namespace

PolicyRule PolicyRuleOf(const json& rule) {
  PolicyRule r;
  if (!rule.is_object()) return r;
  r.verbs = StringsOf(rule, "verbs");
  r.api_groups = StringsOf(rule, "apiGroups");
  r.resources = StringsOf(rule, "resources");
  r.resource_names = StringsOf(rule, "resourceNames");
  r.non_resource_urls = StringsOf(rule, "nonResourceURLs");
  return r;
}

std::vector<PolicyRule> PolicyRulesOf(const json& rules) {
  std::vector<PolicyRule> out;
  if (!rules.is_array()) return out;
  for (const json& r : rules) {
    if (r.is_object()) out.push_back(PolicyRuleOf(r));
  }
  return out;
}

json ToJson(const PolicyRule& rule) {
  json out = json::object();
  auto put = [&](const char* field, const std::vector<std::string>& values) {
    if (!values.empty()) out[field] = values;
  };
  put("verbs", rule.verbs);
  put("apiGroups", rule.api_groups);
  put("resources", rule.resources);
  put("resourceNames", rule.resource_names);
  put("nonResourceURLs", rule.non_resource_urls);
  return out;
}

bool CoversAtom(const PolicyRule& held, const PolicyRule& atom) {
  bool verbs = Holds(held.verbs, "*") || HoldsAll(held.verbs, atom.verbs);
  bool groups = Holds(held.api_groups, "*") || HoldsAll(held.api_groups, atom.api_groups);
  bool resources = ResourcesCover(held.resources, atom.resources);
  bool urls = UrlsCover(held.non_resource_urls, atom.non_resource_urls);
  // A held rule limited to names covers only those names, never the unnamed atom.
  bool names = held.resource_names.empty() ||
               (!atom.resource_names.empty() && HoldsAll(held.resource_names, atom.resource_names));
  return verbs && groups && resources && urls && names;
}

int64_t AtomCount(const PolicyRule& rule) {
  int64_t names =
      rule.resource_names.empty() ? 1 : static_cast<int64_t>(rule.resource_names.size());
  int64_t resource_atoms =
      SaturatingMul(SaturatingMul(static_cast<int64_t>(rule.api_groups.size()),
                                  static_cast<int64_t>(rule.resources.size())),
                    SaturatingMul(static_cast<int64_t>(rule.verbs.size()), names));
  int64_t url_atoms = SaturatingMul(static_cast<int64_t>(rule.non_resource_urls.size()),
                                    static_cast<int64_t>(rule.verbs.size()));
  return SaturatingAdd(resource_atoms, url_atoms);
}

Coverage Covers(const std::vector<PolicyRule>& held, const std::vector<PolicyRule>& granted,
                int64_t max_atoms) {
  Coverage out;
  int64_t total = 0;
  for (const PolicyRule& r : granted) total = SaturatingAdd(total, AtomCount(r));
  if (total > max_atoms) {
    out.covered = false;
    out.too_large = true;
    return out;
  }
  auto check = [&](PolicyRule atom) {
    for (const PolicyRule& h : held) {
      if (CoversAtom(h, atom)) return;
    }
    out.covered = false;
    out.missing.push_back(std::move(atom));
  };
  for (const PolicyRule& r : granted) {
    for (const std::string& group : r.api_groups) {
      for (const std::string& resource : r.resources) {
        for (const std::string& verb : r.verbs) {
          if (r.resource_names.empty()) {
            check(PolicyRule{.verbs = {verb}, .api_groups = {group}, .resources = {resource}});
            continue;
          }
          for (const std::string& name : r.resource_names) {
            check(PolicyRule{.verbs = {verb},
                             .api_groups = {group},
                             .resources = {resource},
                             .resource_names = {name}});
          }
        }
      }
    }
    for (const std::string& url : r.non_resource_urls) {
      for (const std::string& verb : r.verbs) {
        check(PolicyRule{.verbs = {verb}, .non_resource_urls = {url}});
      }
    }
  }
  return out;
}

std::vector<PolicyRule> CompactRules(const std::vector<PolicyRule>& rules) {
  std::vector<PolicyRule> out;
  // (group, resource, named, name) -> index into `out` of the rule gathering its verbs.
  std::map<std::tuple<std::string, std::string, bool, std::string>, size_t> simple;
  for (const PolicyRule& r : rules) {
    bool is_simple = r.resource_names.size() <= 1 && r.non_resource_urls.empty() &&
                     r.api_groups.size() == 1 && r.resources.size() == 1;
    if (!is_simple) {
      out.push_back(r);
      continue;
    }
    bool named = !r.resource_names.empty();
    auto key = std::make_tuple(r.api_groups[0], r.resources[0], named,
                               named ? r.resource_names[0] : std::string());
    auto [it, inserted] = simple.emplace(key, out.size());
    if (inserted) {
      out.push_back(r);
    } else {
      std::vector<std::string>& verbs = out[it->second].verbs;
      verbs.insert(verbs.end(), r.verbs.begin(), r.verbs.end());
    }
  }
  return out;
}

std::string GoQuotedList(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  quoted.reserve(values.size());
  for (const std::string& v : values) quoted.push_back(GoQuote(v));
  return absl::StrCat("[", absl::StrJoin(quoted, " "), "]");
}

std::string CompactString(const PolicyRule& rule) {
  std::vector<std::string> parts;
  auto add = [&](const char* label, const std::vector<std::string>& values) {
    if (!values.empty()) parts.push_back(absl::StrCat(label, ":", GoQuotedList(values)));
  };
  add("APIGroups", rule.api_groups);
  add("Resources", rule.resources);
  add("NonResourceURLs", rule.non_resource_urls);
  add("ResourceNames", rule.resource_names);
  add("Verbs", rule.verbs);
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

}  // namespace kubetrain::localkube
