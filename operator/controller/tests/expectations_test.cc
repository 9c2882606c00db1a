#include "operator/controller/expectations.h"

#include <gtest/gtest.h>

namespace kubetrain::controller {
namespace {

using nlohmann::json;

json Job(const std::string& version, const std::string& state) {
  return {{"metadata", {{"name", "j"}, {"resourceVersion", version}}},
          {"status", {{"state", state}}}};
}

TEST(Expectations, OwnWriteWinsOverAnOlderCachedVersion) {
  Expectations e;
  e.StatusWritten("ns/j", {"5", "6"}, Job("7", "written"));
  EXPECT_EQ(e.NewestJob("ns/j", Job("6", "cached"))["status"]["state"], "written");
  EXPECT_EQ(e.NewestJob("ns/j", Job("5", "cached"))["status"]["state"], "written");
}

TEST(Expectations, CacheThatCaughtUpWinsAndTheWriteIsForgotten) {
  Expectations e;
  e.StatusWritten("ns/j", {"5"}, Job("7", "written"));
  EXPECT_EQ(e.NewestJob("ns/j", Job("7", "cached"))["status"]["state"], "cached");
  // Forgotten: even a version once known to be older no longer brings the write back.
  EXPECT_EQ(e.NewestJob("ns/j", Job("5", "cached"))["status"]["state"], "cached");
}

TEST(Expectations, WritesOfOtherJobsDoNotMix) {
  Expectations e;
  e.StatusWritten("ns/a", {"5"}, Job("7", "a"));
  EXPECT_EQ(e.NewestJob("ns/b", Job("5", "b"))["status"]["state"], "b");
}

TEST(Expectations, DeletedPodsAreGoingUntilTheCacheDropsThem) {
  Expectations e;
  e.PodDeleted("ns/j", "uid-1");
  e.PodDeleted("ns/j", "uid-2");
  EXPECT_EQ(e.PodsGoing("ns/j", {"uid-1", "uid-2", "uid-3"}),
            (std::set<std::string>{"uid-1", "uid-2"}));
  // uid-1 left the cache: forgotten for good, even if a pod with that uid were seen again.
  EXPECT_EQ(e.PodsGoing("ns/j", {"uid-2"}), (std::set<std::string>{"uid-2"}));
  EXPECT_EQ(e.PodsGoing("ns/j", {"uid-1", "uid-2"}), (std::set<std::string>{"uid-2"}));
  EXPECT_TRUE(e.PodsGoing("ns/j", {}).empty());
  EXPECT_TRUE(e.PodsGoing("ns/j", {"uid-2"}).empty());
}

// A pass that sees the job's pods gone must not forget the Service it deleted, nor the reverse.
TEST(Expectations, DeletedServicesAreKeptApartFromDeletedPods) {
  Expectations e;
  e.PodDeleted("ns/j", "pod-1");
  e.ServiceDeleted("ns/j", "svc-1");
  EXPECT_TRUE(e.PodsGoing("ns/j", {}).empty());
  EXPECT_EQ(e.ServicesGoing("ns/j", {"svc-1"}), (std::set<std::string>{"svc-1"}));
  EXPECT_TRUE(e.ServicesGoing("ns/j", {}).empty());
  EXPECT_TRUE(e.ServicesGoing("ns/j", {"svc-1"}).empty());
}

TEST(Expectations, ForgetDropsWritesAndDeletions) {
  Expectations e;
  e.StatusWritten("ns/j", {"5"}, Job("7", "written"));
  e.PodDeleted("ns/j", "uid-1");
  e.ServiceDeleted("ns/j", "svc-1");
  e.Forget("ns/j");
  EXPECT_EQ(e.NewestJob("ns/j", Job("5", "cached"))["status"]["state"], "cached");
  EXPECT_TRUE(e.PodsGoing("ns/j", {"uid-1"}).empty());
  EXPECT_TRUE(e.ServicesGoing("ns/j", {"svc-1"}).empty());
}

}  // namespace
}  // namespace kubetrain::controller
