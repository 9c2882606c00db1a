// The per-kind hooks table: which kinds carry which behaviour, and that the generic Api paths
// apply it (defaults, admission, namespace lifecycle, subresources over HTTP).
#include "localkube/kinds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>

#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/errors.h"
#include "localkube/server.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const KindHooks& Core(const Registry& registry, const char* plural) {
  ResourceTypePtr type = registry.Find("", "v1", plural);
  EXPECT_NE(type, nullptr) << plural;
  return HooksFor(*type);
}

TEST(KindHooks, TableHoldsTheBuiltinSpecialCases) {
  Registry registry;
  const KindHooks& pods = Core(registry, "pods");
  EXPECT_TRUE(pods.defaults && pods.admit);
  EXPECT_TRUE(pods.graceful_deletion);
  EXPECT_TRUE(pods.delete_returns_object);
  EXPECT_FALSE(pods.namespace_lifecycle);
  EXPECT_THAT(pods.subresources, ElementsAre("log", "eviction", "binding"));

  const KindHooks& namespaces = Core(registry, "namespaces");
  EXPECT_TRUE(namespaces.defaults);
  EXPECT_TRUE(namespaces.namespace_lifecycle);
  EXPECT_FALSE(namespaces.delete_returns_object);
  EXPECT_THAT(namespaces.subresources, ElementsAre("finalize"));

  EXPECT_TRUE(Core(registry, "services").defaults);
  EXPECT_TRUE(Core(registry, "serviceaccounts").delete_returns_object);

  const KindHooks& configmaps = Core(registry, "configmaps");
  EXPECT_FALSE(configmaps.defaults || configmaps.admit || configmaps.stored || configmaps.removed);
  EXPECT_FALSE(configmaps.namespace_lifecycle || configmaps.graceful_deletion ||
               configmaps.delete_returns_object);
  EXPECT_THAT(configmaps.subresources, IsEmpty());

  ResourceTypePtr crds = registry.Find("apiextensions.k8s.io", "v1", "customresourcedefinitions");
  ASSERT_NE(crds, nullptr);
  const KindHooks& crd = HooksFor(*crds);
  EXPECT_TRUE(crd.admit && crd.stored && crd.removed);
  EXPECT_FALSE(crd.defaults);

  // Lookups by storage key (what the garbage collector uses) find the same entries.
  EXPECT_EQ(&HooksFor(kPodsKey), &pods);
  EXPECT_EQ(&HooksFor(kNamespacesKey), &namespaces);
  EXPECT_EQ(&HooksFor("/configmaps"), &HooksFor("no/such-key"));
}

TEST(KindHooks, CustomResourcesShareTheSchemaHooks) {
  Registry registry;
  Store store;
  Api api(&registry, &store);
  Target crds{registry.Find("apiextensions.k8s.io", "v1", "customresourcedefinitions"), "", "", ""};
  ASSERT_THAT(api.Create(crds, json::parse(R"({
    "metadata":{"name":"gizmos.test.dev"},
    "spec":{"group":"test.dev","scope":"Namespaced","names":{"plural":"gizmos","kind":"Gizmo"},
      "versions":[{"name":"v1","served":true,"storage":true,
        "schema":{"openAPIV3Schema":{"type":"object","properties":{
          "spec":{"type":"object","properties":{
            "size":{"type":"integer","default":3,"maximum":5}}}}}}}]}})"),
                         WriteOptions{}),
              IsOk());
  ResourceTypePtr gizmos = registry.Find("test.dev", "v1", "gizmos");
  ASSERT_NE(gizmos, nullptr);
  const KindHooks& hooks = HooksFor(*gizmos);
  EXPECT_TRUE(hooks.admit);
  EXPECT_FALSE(hooks.defaults || hooks.stored || hooks.removed || hooks.namespace_lifecycle);

  Target target{gizmos, "default", "", ""};
  auto defaulted =
      api.Create(target, {{"metadata", {{"name", "a"}}}, {"spec", json::object()}}, WriteOptions{});
  ASSERT_THAT(defaulted, IsOk());
  EXPECT_EQ((*defaulted)["spec"]["size"], 3);
  auto invalid =
      api.Create(target, {{"metadata", {{"name", "b"}}}, {"spec", {{"size", 9}}}}, WriteOptions{});
  EXPECT_EQ(HttpCode(invalid.status()), 422);
}

TEST(KindHooks, GenericCreateAppliesKindDefaults) {
  Registry registry;
  Store store;
  Api api(&registry, &store);
  auto ns = api.Get(Target{registry.Find("", "v1", "namespaces"), "", "default", ""});
  ASSERT_THAT(ns, IsOk());
  EXPECT_EQ((*ns)["status"]["phase"], "Active");
  EXPECT_EQ((*ns)["spec"]["finalizers"], json({"kubernetes"}));
  EXPECT_EQ((*ns)["metadata"]["labels"]["kubernetes.io/metadata.name"], "default");

  auto svc = api.Create(Target{registry.Find("", "v1", "services"), "default", "", ""},
                        {{"metadata", {{"name", "s"}}}, {"spec", {{"ports", json::array()}}}},
                        WriteOptions{});
  ASSERT_THAT(svc, IsOk());
  EXPECT_EQ((*svc)["spec"]["type"], "ClusterIP");
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");

  auto pod = api.Create(Target{registry.Find("", "v1", "pods"), "default", "", ""},
                        {{"metadata", {{"name", "p"}}},
                         {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}},
                        WriteOptions{});
  ASSERT_THAT(pod, IsOk());
  EXPECT_EQ((*pod)["spec"]["restartPolicy"], "Always");
  EXPECT_EQ((*pod)["spec"]["dnsPolicy"], "ClusterFirst");
  EXPECT_EQ((*pod)["status"]["phase"], "Pending");

  // The Pod admission hook runs on the generic path: a container without an image is refused.
  auto bad =
      api.Create(Target{registry.Find("", "v1", "pods"), "default", "", ""},
                 {{"metadata", {{"name", "q"}}}, {"spec", {{"containers", {{{"name", "c"}}}}}}},
                 WriteOptions{});
  EXPECT_EQ(HttpCode(bad.status()), 422);
}

TEST(KindHooks, AdmitIntoNamespaceRefusesMissingAndTerminatingNamespaces) {
  Registry registry;
  Store store;
  ResourceTypePtr configmaps = registry.Find("", "v1", "configmaps");
  absl::Status missing = AdmitIntoNamespace(store, *configmaps, "nowhere", "x");
  EXPECT_EQ(HttpCode(missing), 404);
  EXPECT_EQ(missing.message(), "namespaces \"nowhere\" not found");

  store.Put(kNamespacesKey, {{"metadata", {{"name", "live"}}}});
  EXPECT_THAT(AdmitIntoNamespace(store, *configmaps, "live", "x"), IsOk());
  store.Put(kNamespacesKey,
            {{"metadata", {{"name", "going"}, {"deletionTimestamp", "2025-01-01T00:00:00Z"}}}});
  absl::Status terminating = AdmitIntoNamespace(store, *configmaps, "going", "x");
  EXPECT_EQ(HttpCode(terminating), 403);
}

// Subresources come from the table too: pods/log and namespaces/finalize route, others do not.
TEST(KindHooks, ServerRoutesOnlyTheSubresourcesAKindServes) {
  Registry registry;
  Store store;
  Api api(&registry, &store);
  Server server(ServerOptions{}, &api, nullptr);
  ASSERT_THAT(server.Start(), IsOk());
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(10, 0);
  ASSERT_THAT(api.Create(Target{registry.Find("", "v1", "pods"), "default", "", ""},
                         {{"metadata", {{"name", "p"}}},
                          {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}},
                         WriteOptions{}),
              IsOk());
  // No kubelet: the log route answers that the container is waiting, not 404.
  auto log = client.Get("/api/v1/namespaces/default/pods/p/log");
  ASSERT_TRUE(log);
  EXPECT_EQ(log->status, 400);
  auto cm_log = client.Get("/api/v1/namespaces/default/configmaps/p/log");
  ASSERT_TRUE(cm_log);
  EXPECT_EQ(cm_log->status, 404);
  auto finalize = client.Get("/api/v1/namespaces/default/finalize");
  ASSERT_TRUE(finalize);
  EXPECT_EQ(finalize->status, 200);
  server.Stop();
}

}  // namespace
}  // namespace kubetrain::localkube
