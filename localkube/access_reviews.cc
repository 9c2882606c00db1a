#include "localkube/access_reviews.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "localkube/api.h"
#include "localkube/decode.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/rbac_escalation.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kAuthorization[] = "authorization.k8s.io";
constexpr char kAuthentication[] = "authentication.k8s.io";

struct ReviewKind {
  const char* group;
  const char* plural;
  const char* kind;
};

constexpr ReviewKind kReviews[] = {
    {kAuthentication, "selfsubjectreviews", "SelfSubjectReview"},
    {kAuthorization, "selfsubjectaccessreviews", "SelfSubjectAccessReview"},
    {kAuthorization, "selfsubjectrulesreviews", "SelfSubjectRulesReview"},
    {kAuthorization, "subjectaccessreviews", "SubjectAccessReview"},
};

const ReviewKind* FindReview(absl::string_view group, absl::string_view plural) {
  for (const ReviewKind& r : kReviews) {
    if (group == r.group && plural == r.plural) return &r;
  }
  return nullptr;
}

// The resource type DecodeObject checks a review body against.
ResourceType ReviewType(const ReviewKind& r) {
  ResourceType t;
  t.group = r.group;
  t.version = "v1";
  t.kind = r.kind;
  t.plural = r.plural;
  t.namespaced = false;
  return t;
}

// Go's %#v of authorization.NonResourceAttributes, as a field error shows it.
std::string GoNonResourceValue(const json& attrs) {
  return absl::StrCat("authorization.NonResourceAttributes{Path:", GoQuote(Str(attrs, "path")),
                      ", Verb:", GoQuote(Str(attrs, "verb")), "}");
}

// metav1.ObjectMeta{} (managedFields aside): every member null or empty.
bool EmptyMeta(const json& meta) {
  if (meta.is_null()) return true;
  if (!meta.is_object()) return false;
  for (const auto& [key, value] : meta.items()) {
    if (key == "managedFields" || value.is_null()) continue;
    if ((value.is_string() || value.is_object() || value.is_array()) && value.empty()) continue;
    if ((value.is_number() && value.get<double>() == 0) || (value.is_boolean() && !value)) continue;
    return false;
  }
  return true;
}

Cause InvalidCause(const std::string& field, const std::string& value, const std::string& why) {
  return {"FieldValueInvalid", absl::StrCat("Invalid value: ", value, ": ", why), field};
}

// ValidateSubjectAccessReviewSpec / ValidateSelfSubjectAccessReviewSpec, and metadata.
std::vector<Cause> ValidateAccessReview(const json& object, bool self) {
  std::vector<Cause> causes;
  const json& spec = Field(object, "spec");
  const json& ra = Field(spec, "resourceAttributes");
  const json& nra = Field(spec, "nonResourceAttributes");
  if (ra.is_object() && nra.is_object()) {
    causes.push_back(InvalidCause("spec.nonResourceAttributes", GoNonResourceValue(nra),
                                  "cannot be specified in combination with resourceAttributes"));
  }
  if (!ra.is_object() && !nra.is_object()) {
    causes.push_back(
        InvalidCause("spec.resourceAttributes", "\"null\"",
                     "exactly one of nonResourceAttributes or resourceAttributes must be "
                     "specified"));
  }
  if (!self && Str(spec, "user").empty() && Field(spec, "groups").empty()) {
    causes.push_back(InvalidCause("spec.user", "\"\"",
                                  "at least one of user or group must be "
                                  "specified"));
  }
  if (!EmptyMeta(Field(object, "metadata"))) {
    causes.push_back(
        InvalidCause("metadata", GoQuote(Field(object, "metadata").dump()), "must be empty"));
  }
  return causes;
}

// authorizationutil.ResourceAttributesFrom / NonResourceAttributesFrom.
RequestAttributes AttributesOfSpec(const json& spec) {
  RequestAttributes a;
  const json& ra = Field(spec, "resourceAttributes");
  if (ra.is_object()) {
    a.resource_request = true;
    a.verb = Str(ra, "verb");
    a.ns = Str(ra, "namespace");
    a.api_group = Str(ra, "group");
    a.api_version = Str(ra, "version");
    if (a.api_version.empty()) a.api_version = "*";
    a.resource = Str(ra, "resource");
    a.subresource = Str(ra, "subresource");
    a.name = Str(ra, "name");
    return a;
  }
  const json& nra = Field(spec, "nonResourceAttributes");
  a.verb = Str(nra, "verb");
  a.path = Str(nra, "path");
  return a;
}

json AccessReviewStatus(const Store* rbac_store, const UserInfo& user, const json& spec) {
  Decision d{true, ""};
  if (rbac_store != nullptr) d = Decide(*rbac_store, user, AttributesOfSpec(spec));
  json status = {{"allowed", d.allowed}};
  if (!d.reason.empty()) status["reason"] = d.reason;
  return status;
}

// SubjectAccessReview's spec.extra: key -> values.
std::map<std::string, std::vector<std::string>> ExtraOf(const json& extra) {
  std::map<std::string, std::vector<std::string>> out;
  if (!extra.is_object()) return out;
  for (const auto& [key, values] : extra.items()) out[key] = StringElements(values);
  return out;
}

json RulesReviewStatus(const Store* rbac_store, const UserInfo& user, const std::string& ns) {
  HeldRules held;
  if (rbac_store != nullptr) {
    held = RulesFor(*rbac_store, user, ns);
  } else {
    // The AlwaysAllow authorizer's rules.
    held.rules = {PolicyRule{.verbs = {"*"}, .api_groups = {"*"}, .resources = {"*"}},
                  PolicyRule{.verbs = {"*"}, .non_resource_urls = {"*"}}};
  }
  json resource_rules = json::array(), non_resource_rules = json::array();
  for (const PolicyRule& r : held.rules) {
    if (!r.resources.empty()) {
      json rule = {{"verbs", r.verbs}};
      if (!r.api_groups.empty()) rule["apiGroups"] = r.api_groups;
      rule["resources"] = r.resources;
      if (!r.resource_names.empty()) rule["resourceNames"] = r.resource_names;
      resource_rules.push_back(std::move(rule));
    }
    if (!r.non_resource_urls.empty()) {
      non_resource_rules.push_back({{"verbs", r.verbs}, {"nonResourceURLs", r.non_resource_urls}});
    }
  }
  json status = {{"resourceRules", resource_rules},
                 {"nonResourceRules", non_resource_rules},
                 {"incomplete", false}};
  if (!held.errors.empty()) status["evaluationError"] = AggregateMessage(held.errors);
  return status;
}

json UserInfoJson(const UserInfo& user) {
  json info = {{"username", user.name}};
  if (!user.uid.empty()) info["uid"] = user.uid;
  if (!user.groups.empty()) info["groups"] = user.groups;
  if (!user.extra.empty()) info["extra"] = user.extra;
  return info;
}

}  // namespace

bool IsAccessReview(absl::string_view group, absl::string_view version, absl::string_view plural) {
  return version == "v1" && FindReview(group, plural) != nullptr;
}

std::vector<std::pair<std::string, std::string>> AccessReviewGroupVersions() {
  return {{kAuthentication, "v1"}, {kAuthorization, "v1"}};
}

json AccessReviewResources(absl::string_view group, absl::string_view version) {
  json out = json::array();
  if (version != "v1") return out;
  for (const ReviewKind& r : kReviews) {
    if (group != r.group) continue;
    out.push_back({{"name", r.plural},
                   {"singularName", absl::AsciiStrToLower(r.kind)},
                   {"namespaced", false},
                   {"kind", r.kind},
                   {"verbs", {"create"}}});
  }
  return out;
}

absl::StatusOr<json> CreateAccessReview(const Registry& registry, const Store* rbac_store,
                                        const UserInfo& user, absl::string_view plural,
                                        absl::string_view content_type, const std::string& body) {
  const ReviewKind* review = nullptr;
  for (const ReviewKind& r : kReviews) {
    if (plural == r.plural) review = &r;
  }
  if (review == nullptr) return NotFoundError(plural, "");
  absl::StatusOr<json> object = DecodeObject(ReviewType(*review), registry, content_type, body);
  if (!object.ok()) return object.status();
  const std::string kind = review->kind;
  json out = {{"kind", kind},
              {"apiVersion", absl::StrCat(review->group, "/v1")},
              {"metadata", {{"creationTimestamp", nullptr}}}};
  const json& spec = Field(*object, "spec");
  if (kind == "SelfSubjectReview") {
    out["metadata"]["creationTimestamp"] = NowTimestamp();
    out["status"] = {{"userInfo", UserInfoJson(user)}};
    return out;
  }
  if (kind == "SelfSubjectRulesReview") {
    std::string ns = Str(spec, "namespace");
    if (ns.empty()) return BadRequestError("no namespace on request");
    out["spec"] = json::object();
    out["status"] = RulesReviewStatus(rbac_store, user, ns);
    return out;
  }
  const bool self = kind == "SelfSubjectAccessReview";
  if (std::vector<Cause> causes = ValidateAccessReview(*object, self); !causes.empty()) {
    return InvalidError(absl::StrCat(kind, ".", kAuthorization), "", causes);
  }
  out["spec"] = spec.is_object() ? spec : json::object();
  if (self) {
    out["status"] = AccessReviewStatus(rbac_store, user, spec);
    return out;
  }
  UserInfo subject{.name = Str(spec, "user"),
                   .groups = StringsOf(spec, "groups"),
                   .uid = Str(spec, "uid"),
                   .extra = ExtraOf(Field(spec, "extra"))};
  out["status"] = AccessReviewStatus(rbac_store, subject, spec);
  return out;
}

}  // namespace kubetrain::localkube
