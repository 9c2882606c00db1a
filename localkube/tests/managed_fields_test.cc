// metadata.managedFields (RecordManagedFields, and the server recording them on writes) and list
// continue tokens (a consistent snapshot per paginated list, 410 Expired after compaction).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>

#include "absl/strings/escaping.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/managed_fields.h"
#include "localkube/server.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"

namespace kubetrain::localkube {
namespace {

using nlohmann::json;
using testing::Reply;

json Fields(const json& object, size_t i) {
  return object["metadata"]["managedFields"][i]["fieldsV1"];
}

FieldWrite Write(const std::string& manager, const std::string& time,
                 const std::string& subresource = "") {
  FieldWrite w;
  w.manager = manager;
  w.subresource = subresource;
  w.api_version = "v1";
  w.time = time;
  return w;
}

TEST(ManagerName, FieldManagerElseTheUserAgentUpToItsFirstSlash) {
  EXPECT_EQ(ManagerName("helm", "kubectl/v1.33.0"), "helm");
  EXPECT_EQ(ManagerName("", "kubectl/v1.33.0 (linux/amd64) kubernetes/8adc0f0"), "kubectl");
  EXPECT_EQ(ManagerName("", "kube\x01trainer"), "kubetrainer");
  EXPECT_EQ(ManagerName("", std::string(300, 'a')).size(), 128u);
  EXPECT_EQ(ManagerName("", ""), "");
}

TEST(RecordManagedFields, CreateOwnsEveryFieldSetWithListsKeyedByTheirMergeKeys) {
  Registry registry;
  ResourceTypePtr pods = registry.Find("", "v1", "pods");
  json pod = json::parse(R"({
    "apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"p","namespace":"default","uid":"u","resourceVersion":"3",
                "labels":{"app":"x"},"finalizers":["a.dev/f"]},
    "spec":{"containers":[{"name":"c","image":"i","args":["--x"],
                           "ports":[{"containerPort":80,"protocol":"TCP"}]}]},
    "status":{"phase":"Pending"}})");
  RecordManagedFields(*pods, nullptr, &pod, Write("kubectl-create", "2026-01-01T00:00:00Z"));
  ASSERT_EQ(pod["metadata"]["managedFields"].size(), 1u);
  const json& entry = pod["metadata"]["managedFields"][0];
  EXPECT_EQ(entry["manager"], "kubectl-create");
  EXPECT_EQ(entry["operation"], "Update");
  EXPECT_EQ(entry["apiVersion"], "v1");
  EXPECT_EQ(entry["time"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(entry["fieldsType"], "FieldsV1");
  EXPECT_FALSE(entry.contains("subresource"));
  // Pods have a status subresource: the status the create carried is not the creator's.
  EXPECT_EQ(entry["fieldsV1"], json::parse(R"({
    "f:metadata":{"f:finalizers":{".":{},"v:\"a.dev/f\"":{}},
                  "f:labels":{".":{},"f:app":{}}},
    "f:spec":{"f:containers":{".":{},"k:{\"name\":\"c\"}":{".":{},"f:args":{},"f:image":{},
              "f:name":{},
              "f:ports":{".":{},"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},
                         "f:containerPort":{},"f:protocol":{}}}}}}})"));
}

TEST(RecordManagedFields, UpdatesTakeFieldsFromOtherManagersAndStatusWritesGetTheirOwnEntry) {
  Registry registry;
  ResourceTypePtr pods = registry.Find("", "v1", "pods");
  json live = json::parse(R"({"metadata":{"name":"p","labels":{"app":"x","tier":"web"}},
                              "spec":{"containers":[{"name":"c","image":"i"}]}})");
  RecordManagedFields(*pods, nullptr, &live, Write("creator", "2026-01-01T00:00:00Z"));

  json updated = live;
  updated["metadata"]["labels"]["app"] = "y";
  updated["metadata"]["labels"].erase("tier");
  updated["spec"]["containers"][0]["image"] = "j";
  RecordManagedFields(*pods, &live, &updated, Write("editor", "2026-01-01T00:00:05Z"));
  const json& entries = updated["metadata"]["managedFields"];
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0]["manager"], "creator");  // older first
  EXPECT_EQ(Fields(updated, 0), json::parse(R"({
    "f:metadata":{"f:labels":{}},
    "f:spec":{"f:containers":{".":{},"k:{\"name\":\"c\"}":{".":{},"f:name":{}}}}})"));
  EXPECT_EQ(entries[1]["manager"], "editor");
  EXPECT_EQ(Fields(updated, 1), json::parse(R"({
    "f:metadata":{"f:labels":{"f:app":{}}},
    "f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{"f:image":{}}}}})"));

  // The same write again changes nothing, time included.
  json again = updated;
  RecordManagedFields(*pods, &updated, &again, Write("editor", "2026-01-01T00:09:00Z"));
  EXPECT_EQ(again, updated);

  json status = updated;
  status["status"] = {{"phase", "Running"}};
  RecordManagedFields(*pods, &updated, &status, Write("kubelet", "2026-01-01T00:00:09Z", "status"));
  const json& last = status["metadata"]["managedFields"].back();
  EXPECT_EQ(last["manager"], "kubelet");
  EXPECT_EQ(last["subresource"], "status");
  // The live pod had no status at all: the map is the writer's too.
  EXPECT_EQ(last["fieldsV1"], json::parse(R"({"f:status":{".":{},"f:phase":{}}})"));
}

TEST(RecordManagedFields, ApplyOwnsItsConfigurationAndTakesChangedFieldsOnly) {
  Registry registry;
  ResourceTypePtr cms = registry.Find("", "v1", "configmaps");
  json live = json::parse(R"({"metadata":{"name":"c"},"data":{"a":"1","b":"2"}})");
  RecordManagedFields(*cms, nullptr, &live, Write("kubectl-create", "2026-01-01T00:00:00Z"));
  json config = json::parse(R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},
                                "data":{"a":"1","b":"3"}})");
  json applied = live;
  applied["data"]["b"] = "3";
  FieldWrite apply = Write("ssa", "2026-01-01T00:00:01Z");
  apply.operation = "Apply";
  apply.applied = &config;
  RecordManagedFields(*cms, &live, &applied, apply);
  const json& entries = applied["metadata"]["managedFields"];
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0]["operation"], "Apply");  // Apply sorts before Update
  EXPECT_EQ(entries[0]["manager"], "ssa");
  EXPECT_EQ(Fields(applied, 0), json::parse(R"({"f:data":{"f:a":{},"f:b":{}}})"));
  // data.a did not change: both own it; data.b went over to the applier.
  EXPECT_EQ(Fields(applied, 1), json::parse(R"({"f:data":{".":{},"f:a":{}}})"));
}

TEST(RecordManagedFields, CustomResourcesKeyListsAsTheirSchemaSays) {
  Registry registry;
  ResourceType widgets;
  widgets.custom = true;
  widgets.schema = json::parse(R"({"type":"object","properties":{"spec":{"type":"object",
    "properties":{"args":{"type":"array","items":{"type":"string"}},
                  "ports":{"type":"array","x-kubernetes-list-type":"map",
                           "x-kubernetes-list-map-keys":["port"],
                           "items":{"type":"object"}},
                  "containers":{"type":"array","items":{"type":"object"}}}}}})");
  json w = json::parse(R"({"metadata":{"name":"w","ownerReferences":[{"uid":"o","name":"x"}]},
    "spec":{"args":["a"],"ports":[{"port":1,"name":"p"}],"containers":[{"name":"c"}]}})");
  RecordManagedFields(widgets, nullptr, &w, Write("m", "2026-01-01T00:00:00Z"));
  EXPECT_EQ(Fields(w, 0), json::parse(R"({
    "f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"o\"}":{".":{},"f:name":{},"f:uid":{}}}},
    "f:spec":{".":{},"f:args":{},"f:containers":{},
              "f:ports":{".":{},"k:{\"port\":1}":{".":{},"f:name":{},"f:port":{}}}}})"));
}

class LocalkubeLists : public testing::ServedApiTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(Serve(ServerOptions{})); }

  Reply Get(const std::string& path) { return testing::Call(*client_, "GET", path); }
  Reply Send(const std::string& method, const std::string& path, const json& body,
             const std::string& content_type = "application/json",
             const httplib::Headers& headers = {}) {
    return testing::Call(*client_, method, path, body, content_type, headers);
  }
  void CreateConfigMap(const std::string& name) {
    ASSERT_EQ(Send("POST", kConfigMaps, {{"metadata", {{"name", name}}}}).code, 201);
  }
  static std::vector<std::string> Names(const json& list) {
    std::vector<std::string> out;
    for (const json& item : list["items"]) out.push_back(item["metadata"]["name"]);
    return out;
  }

  static constexpr char kConfigMaps[] = "/api/v1/namespaces/default/configmaps";
};

TEST_F(LocalkubeLists, PagesAreOneSnapshotAtTheFirstPagesRevision) {
  for (const char* n : {"a", "b", "c", "d"}) CreateConfigMap(n);
  Reply first = Get(std::string(kConfigMaps) + "?limit=2");
  ASSERT_EQ(first.code, 200);
  EXPECT_EQ(Names(first.body), std::vector<std::string>({"a", "b"}));
  std::string rv = first.body["metadata"]["resourceVersion"];
  EXPECT_EQ(first.body["metadata"]["remainingItemCount"], 2);
  std::string token = first.body["metadata"]["continue"];
  std::string decoded;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(token, &decoded));
  EXPECT_EQ(decoded, R"({"v":"meta.k8s.io/v1","rv":)" + rv + R"(,"start":"b\u0000"})");

  // Writes between pages are not seen: c is still listed, e is not, d is as it was.
  ASSERT_EQ(Send("DELETE", std::string(kConfigMaps) + "/c", nullptr).code, 200);
  CreateConfigMap("e");
  ASSERT_EQ(Send("PATCH", std::string(kConfigMaps) + "/d", {{"data", {{"k", "v"}}}},
                 "application/merge-patch+json")
                .code,
            200);
  Reply rest = Get(std::string(kConfigMaps) + "?limit=2&continue=" + token);
  ASSERT_EQ(rest.code, 200) << rest.body.dump();
  EXPECT_EQ(Names(rest.body), std::vector<std::string>({"c", "d"}));
  EXPECT_FALSE(rest.body["items"][1].contains("data"));
  EXPECT_EQ(rest.body["metadata"]["resourceVersion"], rv);
  EXPECT_FALSE(rest.body["metadata"].contains("continue"));

  EXPECT_EQ(Get(std::string(kConfigMaps) + "?limit=2&resourceVersion=1&continue=" + token).code,
            400);
  Reply bad = Get(std::string(kConfigMaps) + "?limit=2&continue=x!");
  EXPECT_EQ(bad.code, 400);
  EXPECT_EQ(bad.body["message"],
            "invalid continue token: continue key is not valid: illegal base64 data at input "
            "byte 1");
}

TEST_F(LocalkubeLists, TokenOfACompactedRevisionIsExpiredWithATokenForTheRest) {
  for (const char* n : {"a", "b", "c"}) CreateConfigMap(n);
  Reply first = Get(std::string(kConfigMaps) + "?limit=1");
  std::string token = first.body["metadata"]["continue"];
  // Compaction alone keeps the first page's revision readable: nothing changed since.
  store_.Compact();
  EXPECT_EQ(Get(std::string(kConfigMaps) + "?limit=1&continue=" + token).code, 200);

  CreateConfigMap("d");
  store_.Compact();
  Reply expired = Get(std::string(kConfigMaps) + "?limit=1&continue=" + token);
  ASSERT_EQ(expired.code, 410);
  EXPECT_EQ(expired.body["kind"], "Status");
  EXPECT_EQ(expired.body["reason"], "Expired");
  EXPECT_EQ(expired.body["code"], 410);
  EXPECT_EQ(expired.body["message"],
            "The provided continue parameter is too old to display a consistent list result. You "
            "can start a new list without the continue parameter, or use the continue token in "
            "this response to retrieve the remainder of the results. Continuing with the "
            "provided token results in an inconsistent list - objects that were created, "
            "modified, or deleted between the time the first chunk was returned and now may "
            "show up in the list.");
  std::string inconsistent = expired.body["metadata"]["continue"];
  std::string decoded;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(inconsistent, &decoded));
  EXPECT_EQ(decoded, R"({"v":"meta.k8s.io/v1","rv":-1,"start":"a\u0000"})");
  // That token reads the rest at the latest revision, d included.
  Reply rest = Get(std::string(kConfigMaps) + "?continue=" + inconsistent);
  ASSERT_EQ(rest.code, 200);
  EXPECT_EQ(Names(rest.body), std::vector<std::string>({"b", "c", "d"}));
  EXPECT_EQ(rest.body["metadata"]["resourceVersion"], std::to_string(store_.Revision()));
}

TEST_F(LocalkubeLists, WritesRecordManagedFields) {
  ResourceTypePtr pods = registry_.Find("", "v1", "pods");
  json pod = {{"metadata", {{"name", "p"}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "i"}}}}}}};
  Reply created = Send("POST", "/api/v1/namespaces/default/pods?fieldManager=kubectl-create", pod);
  ASSERT_EQ(created.code, 201);
  ASSERT_EQ(created.body["metadata"]["managedFields"].size(), 1u);
  EXPECT_EQ(created.body["metadata"]["managedFields"][0]["manager"], "kubectl-create");

  json status = created.body;
  status["status"]["phase"] = "Running";
  Reply written =
      Send("PUT", "/api/v1/namespaces/default/pods/p/status?fieldManager=kubelet", status);
  ASSERT_EQ(written.code, 200);
  const json& entries = written.body["metadata"]["managedFields"];
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1]["manager"], "kubelet");
  EXPECT_EQ(entries[1]["subresource"], "status");
  EXPECT_EQ(entries[1]["fieldsV1"], json::parse(R"({"f:status":{"f:phase":{}}})"));

  // A write that changes nothing is no write: same resourceVersion, same entries.
  Reply again = Send("PUT", "/api/v1/namespaces/default/pods/p?fieldManager=other", written.body);
  ASSERT_EQ(again.code, 200);
  EXPECT_EQ(again.body["metadata"]["resourceVersion"], written.body["metadata"]["resourceVersion"]);
  EXPECT_EQ(again.body["metadata"]["managedFields"], entries);

  // Dry runs record nothing.
  Reply dry = Send("POST", "/api/v1/namespaces/default/pods?dryRun=All&fieldManager=x",
                   {{"metadata", {{"name", "q"}}},
                    {"spec", {{"containers", {{{"name", "c"}, {"image", "i"}}}}}}});
  ASSERT_EQ(dry.code, 201);
  EXPECT_FALSE(dry.body["metadata"].contains("managedFields"));
  (void)pods;

  // Without fieldManager the manager is the client's User-Agent up to its first '/'.
  Reply by_agent =
      Send("POST", kConfigMaps, {{"metadata", {{"name", "ua"}}}, {"data", {{"k", "v"}}}},
           "application/json", {{"User-Agent", "helm/v4.0.0 (linux/amd64)"}});
  ASSERT_EQ(by_agent.code, 201);
  EXPECT_EQ(by_agent.body["metadata"]["managedFields"][0]["manager"], "helm");
}

}  // namespace
}  // namespace kubetrain::localkube
