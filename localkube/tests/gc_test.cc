// Deletion and garbage collection straight through Api (no HTTP): propagation policies, the
// namespace controller, graceful pods, CRD removal, and concurrent writers on the one
// (non-recursive) write lock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/errors.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;

class Gc : public ::testing::Test {
 protected:
  Gc() : api_(&registry_, &store_) {}

  Target Of(const std::string& plural, const std::string& ns, const std::string& name = "") {
    return Target{registry_.Find("", "v1", plural), ns, name, ""};
  }
  // A ConfigMap in `ns`, owned by `owners` (objects as stored).
  json ConfigMap(const std::string& ns, const std::string& name,
                 const std::vector<json>& owners = {}, const json& finalizers = nullptr) {
    json body = {{"metadata", {{"name", name}}}};
    for (const json& o : owners) {
      body["metadata"]["ownerReferences"].push_back({{"apiVersion", "v1"},
                                                     {"kind", o["kind"]},
                                                     {"name", o["metadata"]["name"]},
                                                     {"uid", o["metadata"]["uid"]}});
    }
    if (!finalizers.is_null()) body["metadata"]["finalizers"] = finalizers;
    auto created = api_.Create(Of("configmaps", ns), body, WriteOptions{});
    EXPECT_THAT(created, IsOk());
    return created.ok() ? *created : json();
  }
  bool Exists(const std::string& plural, const std::string& ns, const std::string& name) {
    return api_.Get(Of(plural, ns, name)).ok();
  }
  json Fetch(const std::string& plural, const std::string& ns, const std::string& name) {
    auto o = api_.Get(Of(plural, ns, name));
    EXPECT_THAT(o, IsOk());
    return o.ok() ? *o : json();
  }
  absl::StatusOr<json> Delete(const std::string& plural, const std::string& ns,
                              const std::string& name, const std::string& propagation = "") {
    DeleteOptions options;
    options.propagation = propagation;
    return api_.Delete(Of(plural, ns, name), options);
  }
  // Writes back `object` (a ConfigMap in `ns` as fetched, then changed).
  absl::Status Update(const std::string& ns, const json& object) {
    bool created = false;
    return api_
        .Update(Of("configmaps", ns, object["metadata"].value("name", "")), object, WriteOptions{},
                &created)
        .status();
  }
  // What the holder of ConfigMap `ns`/`name`'s finalizers does once it is done: removes them.
  void RemoveFinalizers(const std::string& ns, const std::string& name) {
    json live = Fetch("configmaps", ns, name);
    live["metadata"].erase("finalizers");
    ASSERT_THAT(Update(ns, live), IsOk());
  }
  void CreateNamespace(const std::string& name) {
    ASSERT_THAT(api_.Create(Of("namespaces", ""), {{"metadata", {{"name", name}}}}, WriteOptions{}),
                IsOk());
  }

  Registry registry_;
  Store store_;
  Api api_;
};

TEST_F(Gc, BackgroundDeletionCollectsDependentsTransitively) {
  json owner = ConfigMap("default", "owner");
  json child = ConfigMap("default", "child", {owner});
  ConfigMap("default", "grandchild", {child});
  ConfigMap("default", "bystander");
  auto deleted = Delete("configmaps", "default", "owner");
  ASSERT_THAT(deleted, IsOk());
  EXPECT_EQ((*deleted)["kind"], "Status");  // ConfigMap deletes answer a Status
  EXPECT_FALSE(Exists("configmaps", "default", "owner"));
  EXPECT_FALSE(Exists("configmaps", "default", "child"));
  EXPECT_FALSE(Exists("configmaps", "default", "grandchild"));
  EXPECT_TRUE(Exists("configmaps", "default", "bystander"));
}

// The collector follows ownership as it stands: a dependent moved to another owner by an update
// leaves the first owner's cleanup and joins the second's.
TEST_F(Gc, ADependentMovedToAnotherOwnerFollowsItsNewOwner) {
  json first = ConfigMap("default", "first");
  json second = ConfigMap("default", "second");
  json dep = ConfigMap("default", "dep", {first});
  dep["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "v1"},
                                                     {"kind", "ConfigMap"},
                                                     {"name", "second"},
                                                     {"uid", second["metadata"]["uid"]}}});
  ASSERT_THAT(Update("default", dep), IsOk());
  ASSERT_THAT(Delete("configmaps", "default", "first"), IsOk());
  EXPECT_TRUE(Exists("configmaps", "default", "dep"));
  ASSERT_THAT(Delete("configmaps", "default", "second"), IsOk());
  EXPECT_FALSE(Exists("configmaps", "default", "dep"));
}

// The collector learns what changed from the store's history. When that history was compacted
// before it looked, it examines everything it could act on, so an object whose owner never
// existed is still collected at the next delete.
TEST_F(Gc, AnOrphanIsCollectedEvenAfterTheHistoryWasCompacted) {
  json ghost = {{"kind", "ConfigMap"}, {"metadata", {{"name", "ghost"}, {"uid", "no-such-uid"}}}};
  ConfigMap("default", "dangling", {ghost});
  ConfigMap("default", "bystander");
  store_.Compact();
  ASSERT_THAT(Delete("configmaps", "default", "bystander"), IsOk());
  EXPECT_FALSE(Exists("configmaps", "default", "dangling"));
}

// The collector rewrites the dependents while it holds the write lock: the path that once
// re-entered the public Mutate and needed a recursive mutex.
TEST_F(Gc, OrphanPropagationKeepsDependentsAndDropsTheirReference) {
  json owner = ConfigMap("default", "owner");
  json other = ConfigMap("default", "other");
  ConfigMap("default", "dep", {owner, other});
  ASSERT_THAT(Delete("configmaps", "default", "owner", "Orphan"), IsOk());
  EXPECT_FALSE(Exists("configmaps", "default", "owner"));
  json dep = Fetch("configmaps", "default", "dep");
  ASSERT_EQ(dep["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(dep["metadata"]["ownerReferences"][0]["name"], "other");
}

TEST_F(Gc, ForegroundDeletionWaitsForDependents) {
  json owner = ConfigMap("default", "owner");
  ConfigMap("default", "held", {owner}, {"test.dev/hold"});
  auto marked = Delete("configmaps", "default", "owner", "Foreground");
  ASSERT_THAT(marked, IsOk());
  EXPECT_TRUE((*marked)["metadata"].contains("deletionTimestamp"));
  json held = Fetch("configmaps", "default", "held");
  EXPECT_TRUE(held["metadata"].contains("deletionTimestamp"));
  EXPECT_TRUE(Exists("configmaps", "default", "owner"));
  EXPECT_EQ(Fetch("configmaps", "default", "owner")["metadata"]["finalizers"],
            json({"foregroundDeletion"}));

  ASSERT_NO_FATAL_FAILURE(RemoveFinalizers("default", "held"));
  EXPECT_FALSE(Exists("configmaps", "default", "held"));
  EXPECT_FALSE(Exists("configmaps", "default", "owner"));
}

TEST_F(Gc, NamespaceDeletionEmptiesThenRemovesTheNamespace) {
  CreateNamespace("doomed");
  ConfigMap("doomed", "plain");
  ConfigMap("doomed", "held", {}, {"test.dev/hold"});
  auto marked = Delete("namespaces", "", "doomed");
  ASSERT_THAT(marked, IsOk());
  EXPECT_EQ((*marked)["status"]["phase"], "Terminating");
  EXPECT_FALSE(Exists("configmaps", "doomed", "plain"));
  EXPECT_TRUE(Exists("namespaces", "", "doomed"));  // the held object is still inside

  auto refused =
      api_.Create(Of("configmaps", "doomed"), {{"metadata", {{"name", "late"}}}}, WriteOptions{});
  EXPECT_EQ(HttpCode(refused.status()), 403);
  EXPECT_EQ(refused.status().message(),
            "configmaps \"late\" is forbidden: unable to create new content in namespace doomed "
            "because it is being terminated");

  ASSERT_NO_FATAL_FAILURE(RemoveFinalizers("doomed", "held"));
  EXPECT_FALSE(Exists("configmaps", "doomed", "held"));
  EXPECT_FALSE(Exists("namespaces", "", "doomed"));
}

TEST_F(Gc, GracefulPodDeletionWaitsForTheKubelet) {
  api_.EnableGracefulPodDeletion();
  json pod = {{"metadata", {{"name", "p"}}},
              {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  ASSERT_THAT(api_.Create(Of("pods", "default"), pod, WriteOptions{}), IsOk());
  auto marked = Delete("pods", "default", "p");
  ASSERT_THAT(marked, IsOk());
  EXPECT_EQ((*marked)["kind"], "Pod");  // pod deletes answer the object
  EXPECT_EQ((*marked)["metadata"]["deletionGracePeriodSeconds"], 30);
  EXPECT_TRUE(Exists("pods", "default", "p"));
  api_.FinishPodDeletion("default", "p");
  EXPECT_FALSE(Exists("pods", "default", "p"));

  // Grace period 0 removes at once, and the answer is still the object.
  ASSERT_THAT(api_.Create(Of("pods", "default"), pod, WriteOptions{}), IsOk());
  DeleteOptions now;
  now.grace_seconds = 0;
  auto removed = api_.Delete(Of("pods", "default", "p"), now);
  ASSERT_THAT(removed, IsOk());
  EXPECT_EQ((*removed)["kind"], "Pod");
  EXPECT_FALSE(Exists("pods", "default", "p"));
}

TEST_F(Gc, DeletingACrdRemovesItsTypesAndObjects) {
  Target crds{registry_.Find("apiextensions.k8s.io", "v1", "customresourcedefinitions"), "", "",
              ""};
  auto stored =
      api_.Create(crds, testing::Crd("test.dev", "v1", "Gadget", "gadgets"), WriteOptions{});
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ((*stored)["status"]["acceptedNames"]["listKind"], "GadgetList");
  ResourceTypePtr gadgets = registry_.Find("test.dev", "v1", "gadgets");
  ASSERT_NE(gadgets, nullptr);
  ASSERT_THAT(api_.Create(Target{gadgets, "default", "", ""},
                          {{"metadata", {{"name", "g"}}}, {"spec", {{"x", 1}}}}, WriteOptions{}),
              IsOk());
  crds.name = "gadgets.test.dev";
  ASSERT_THAT(api_.Delete(crds, DeleteOptions{}), IsOk());
  EXPECT_EQ(registry_.Find("test.dev", "v1", "gadgets"), nullptr);
  EXPECT_FALSE(store_.Get(gadgets->StorageKey(), "default", "g").has_value());
}

// Writers, deleters (each propagation policy), Mutate and the collector on many threads: with
// a plain mutex any re-entry would deadlock, and a sanitizer build checks the rest.
TEST_F(Gc, ConcurrentWritersNeverDeadlock) {
  constexpr int kThreads = 6, kRounds = 15;
  const char* policies[] = {"", "Background", "Foreground", "Orphan"};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::string base = absl::StrCat("t", t, "-r", r);
        json owner = ConfigMap("default", base + "-owner");
        json child = ConfigMap("default", base + "-child", {owner});
        ConfigMap("default", base + "-leaf", {child});
        absl::Status mutated = api_.Mutate("/configmaps", "default", base + "-child", [](json& o) {
          o["data"]["touched"] = "yes";
          return true;
        });
        if (!mutated.ok()) ++failures;
        if (!Delete("configmaps", "default", base + "-owner", policies[(t + r) % 4]).ok()) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  // Everything but the orphaned trees is gone; orphans lost their reference to the owner.
  for (int t = 0; t < kThreads; ++t) {
    for (int r = 0; r < kRounds; ++r) {
      std::string base = absl::StrCat("t", t, "-r", r);
      EXPECT_FALSE(Exists("configmaps", "default", base + "-owner")) << base;
      bool orphaned = std::string(policies[(t + r) % 4]) == "Orphan";
      EXPECT_EQ(Exists("configmaps", "default", base + "-child"), orphaned) << base;
      EXPECT_EQ(Exists("configmaps", "default", base + "-leaf"), orphaned) << base;
      if (orphaned) {
        json child = Fetch("configmaps", "default", base + "-child");
        EXPECT_FALSE(child["metadata"].contains("ownerReferences") &&
                     !child["metadata"]["ownerReferences"].empty())
            << base;
      }
    }
  }
}

}  // namespace
}  // namespace kubetrain::localkube
