#include "localkube/discovery.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "localkube/access_reviews.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// The registry's group versions, then those of the access reviews that it lacks.
std::vector<std::pair<std::string, std::string>> ServedGroupVersions(const Registry& registry) {
  std::vector<std::pair<std::string, std::string>> out = registry.GroupVersions();
  for (const auto& gv : AccessReviewGroupVersions()) {
    if (std::find(out.begin(), out.end(), gv) == out.end()) out.push_back(gv);
  }
  return out;
}

json GroupEntry(const Registry& registry, const std::string& group) {
  json versions = json::array();
  for (const auto& [g, v] : ServedGroupVersions(registry)) {
    if (g == group) versions.push_back({{"groupVersion", g + "/" + v}, {"version", v}});
  }
  if (versions.empty()) return nullptr;
  return {{"name", group}, {"versions", versions}, {"preferredVersion", versions[0]}};
}

json Verbs() {
  return {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"};
}

std::string BasePath(const ResourceType& t) {
  return t.group.empty() ? "/api/" + t.version : "/apis/" + t.group + "/" + t.version;
}

json Gvk(const ResourceType& t) {
  return {{"group", t.group}, {"version", t.version}, {"kind", t.kind}};
}

json Param(const char* name, const char* type) {
  return {{"name", name}, {"in", "query"}, {"schema", {{"type", type}, {"uniqueItems", true}}}};
}

json Operation(const ResourceType& t, const char* action, bool with_body) {
  json op = {{"responses", {{"200", {{"description", "OK"}}}}},
             {"x-kubernetes-action", action},
             {"x-kubernetes-group-version-kind", Gvk(t)}};
  if (with_body) {
    op["parameters"] = {Param("dryRun", "string"), Param("fieldManager", "string"),
                        Param("fieldValidation", "string")};
  }
  return op;
}

json PatchOperation(const ResourceType& t) {
  json op = Operation(t, "patch", true);
  op["parameters"].push_back(Param("force", "boolean"));
  json ref = {{"$ref", "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}};
  // No strategic-merge-patch+json here: kubectl then uses its compiled-in merge keys for
  // built-ins, which are complete, instead of a schema we would have to spell out.
  op["requestBody"] = {{"content",
                        {{"application/json-patch+json", {{"schema", ref}}},
                         {"application/merge-patch+json", {{"schema", ref}}},
                         {"application/apply-patch+yaml", {{"schema", ref}}}}}};
  return op;
}

std::string SchemaName(const ResourceType& t) {
  std::vector<std::string> parts = absl::StrSplit(t.group.empty() ? "core" : t.group, '.');
  std::reverse(parts.begin(), parts.end());
  return absl::StrCat(absl::StrJoin(parts, "."), ".", t.version, ".", t.kind);
}

}  // namespace

json VersionInfo() {
  return {{"major", "1"},
          {"minor", "33"},
          {"gitVersion", "v1.33.1"},
          {"gitCommit", "8adc0f041b8e7ad1d30e29cc59c6ae7a15e19828"},
          {"gitTreeState", "clean"},
          {"buildDate", "2025-05-15T08:19:08Z"},
          {"goVersion", "go1.24.2"},
          {"compiler", "gc"},
          {"platform", "linux/amd64"}};
}

json ApiVersions(const std::string& server_address) {
  return {{"kind", "APIVersions"},
          {"versions", {"v1"}},
          {"serverAddressByClientCIDRs",
           {{{"clientCIDR", "0.0.0.0/0"}, {"serverAddress", server_address}}}}};
}

json ApiGroupList(const Registry& registry) {
  json groups = json::array();
  std::vector<std::string> seen;
  for (const auto& [g, v] : ServedGroupVersions(registry)) {
    if (g.empty() || std::find(seen.begin(), seen.end(), g) != seen.end()) continue;
    seen.push_back(g);
    groups.push_back(GroupEntry(registry, g));
  }
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
}

json ApiGroup(const Registry& registry, const std::string& group) {
  json entry = GroupEntry(registry, group);
  if (entry.is_null()) return nullptr;
  entry["kind"] = "APIGroup";
  entry["apiVersion"] = "v1";
  return entry;
}

json ResourceList(const Registry& registry, const std::string& group, const std::string& version) {
  json resources = json::array();
  bool found = false;
  for (const auto& t : registry.All()) {
    if (t->group != group || t->version != version) continue;
    found = true;
    json r = {{"name", t->plural},
              {"singularName", t->singular},
              {"namespaced", t->namespaced},
              {"kind", t->kind},
              {"verbs", Verbs()}};
    if (!t->short_names.empty()) r["shortNames"] = t->short_names;
    if (!t->categories.empty()) r["categories"] = t->categories;
    resources.push_back(r);
    json sub_verbs = {"get", "patch", "update"};
    if (t->status_subresource) {
      resources.push_back({{"name", t->plural + "/status"},
                           {"singularName", ""},
                           {"namespaced", t->namespaced},
                           {"kind", t->kind},
                           {"verbs", sub_verbs}});
    }
    if (t->scale_subresource) {
      resources.push_back({{"name", t->plural + "/scale"},
                           {"singularName", ""},
                           {"namespaced", t->namespaced},
                           {"group", "autoscaling"},
                           {"version", "v1"},
                           {"kind", "Scale"},
                           {"verbs", sub_verbs}});
    }
    if (t->kind == "Pod" && t->group.empty()) {
      resources.push_back({{"name", "pods/log"},
                           {"singularName", ""},
                           {"namespaced", true},
                           {"kind", "Pod"},
                           {"verbs", {"get"}}});
      // kubectl drain evicts through the version named here (policy/v1).
      resources.push_back({{"name", "pods/eviction"},
                           {"singularName", ""},
                           {"namespaced", true},
                           {"group", "policy"},
                           {"version", "v1"},
                           {"kind", "Eviction"},
                           {"verbs", {"create"}}});
    }
  }
  for (json& r : AccessReviewResources(group, version)) {
    found = true;
    resources.push_back(std::move(r));
  }
  if (!found) return nullptr;
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group.empty() ? version : group + "/" + version},
          {"resources", resources}};
}

json OpenApiRoot(const Registry& registry) {
  json paths = json::object();
  std::string hash = absl::StrCat("LK", registry.Generation());
  for (const auto& [g, v] : registry.GroupVersions()) {
    std::string key = g.empty() ? "api/" + v : "apis/" + g + "/" + v;
    paths[key] = {{"serverRelativeURL", "/openapi/v3/" + key + "?hash=" + hash}};
  }
  return {{"paths", paths}};
}

json OpenApiGroupVersion(const Registry& registry, const std::string& group,
                         const std::string& version) {
  json paths = json::object();
  json schemas = {{"io.k8s.apimachinery.pkg.apis.meta.v1.Patch", {{"type", "object"}}}};
  bool found = false;
  for (const auto& t : registry.All()) {
    if (t->group != group || t->version != version) continue;
    found = true;
    std::string base = BasePath(*t);
    std::string collection =
        t->namespaced ? base + "/namespaces/{namespace}/" + t->plural : base + "/" + t->plural;
    std::string item = collection + "/{name}";
    paths[collection] = {{"get", Operation(*t, "list", false)},
                         {"post", Operation(*t, "post", true)}};
    paths[item] = {{"get", Operation(*t, "get", false)},
                   {"put", Operation(*t, "put", true)},
                   {"patch", PatchOperation(*t)},
                   {"delete", Operation(*t, "delete", false)}};
    if (t->status_subresource) {
      paths[item + "/status"] = {{"get", Operation(*t, "get", false)},
                                 {"put", Operation(*t, "put", true)},
                                 {"patch", PatchOperation(*t)}};
    }
    json schema = t->schema.is_object()
                      ? t->schema
                      : json{{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}};
    schema["x-kubernetes-group-version-kind"] = json::array({Gvk(*t)});
    schemas[SchemaName(*t)] = schema;
  }
  if (!found) return nullptr;
  return {{"openapi", "3.0.0"},
          {"info", {{"title", "Kubernetes"}, {"version", "v1.33.1"}}},
          {"paths", paths},
          {"components", {{"schemas", schemas}}}};
}

}  // namespace kubetrain::localkube
