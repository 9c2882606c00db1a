// What the operator does when the API server refuses what it creates (docs/architecture.md §4):
// core/v1 decoding and validation (400, 422) fails the job as InvalidSpec at its first pass,
// through a dry-run create; admission refusals that may clear (Pod Security, quota: 403) are
// reported as a Warning event and the ReplicaFailure condition, and retried until they clear.
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/events.h"
#include "operator/controller/tests/controller_fixture.h"

namespace kubetrain::controller::testing {
namespace {

const json* FindCondition(const json& status, const std::string& type) {
  if (!status.contains("conditions")) return nullptr;
  for (const json& c : status["conditions"]) {
    if (c.value("type", "") == type) return &c;
  }
  return nullptr;
}

std::vector<json> EventsWithReason(kube::Client& client, const std::string& reason) {
  std::vector<json> out;
  auto events = client.ListAll(Resource::Events(), "default", {});
  if (!events.ok()) return out;
  for (const json& e : (*events)["items"]) {
    if (e.value("reason", "") == reason) out.push_back(e);
  }
  return out;
}

absl::Status LabelNamespace(kube::Client& client, const std::string& level) {
  json patch = {{"metadata", {{"labels", {{"pod-security.kubernetes.io/enforce", level}}}}}};
  return client
      .Patch({"", "v1", "namespaces", "Namespace", false}, "", "default", kube::PatchType::kMerge,
             patch.dump())
      .status();
}

TEST_F(ControllerTest, TemplateTheApiServerCallsInvalidFailsTheJobBeforeAnyPod) {
  json job = Job("lots", {{"PS", Replica(1)}, {"Worker", Replica(2)}});
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
      {"limits", {{"cpu", "lots"}}}};
  Create(job);
  ASSERT_TRUE(Eventually([&] { return State("lots") == "Failed"; }));
  json failed = Status("lots")["conditions"].back();
  EXPECT_EQ(failed["reason"], "InvalidSpec");
  // The server's own words (a quantity that does not parse fails decoding: 400, not 422).
  EXPECT_TRUE(absl::StrContains(failed.value("message", ""), "quantities must match")) << failed;
  EXPECT_TRUE(absl::StrContains(failed.value("message", ""), "Worker pod template")) << failed;
  EXPECT_FALSE(Get(Resource::Pods(), "lots-ps-0").has_value());
  EXPECT_FALSE(Get(Resource::Pods(), "lots-worker-0").has_value());
  EXPECT_TRUE(HasEvent("lots", "TrainingJob default/lots has an invalid Worker pod template"));
}

TEST_F(ControllerTest, PodSecurityRefusalIsReportedInStatusAndEventsAndRetriedUntilItClears) {
  ASSERT_THAT(LabelNamespace(*client_, "restricted"), IsOk());
  Create(Job("psa", {{"Worker", Replica(1)}}));
  ASSERT_TRUE(
      Eventually([&] { return FindCondition(Status("psa"), "ReplicaFailure") != nullptr; }));
  json status = Status("psa");
  const json* failure = FindCondition(status, "ReplicaFailure");
  EXPECT_EQ((*failure)["status"], "True");
  EXPECT_EQ((*failure)["reason"], "FailedCreatePod");
  EXPECT_TRUE(absl::StrContains(failure->value("message", ""), "violates PodSecurity")) << *failure;
  // What the pass learned before the refusal is saved with it.
  EXPECT_NE(FindCondition(status, "Created"), nullptr);
  EXPECT_EQ(State("psa"), "ReplicaFailure");  // what `kubectl get tj` shows
  EXPECT_FALSE(Get(Resource::Pods(), "psa-worker-0").has_value());
  // Retried with backoff: the same refusal is one Event whose count grows, not an Event a try.
  ASSERT_TRUE(Eventually([&] {
    std::vector<json> events = EventsWithReason(*client_, "FailedCreatePod");
    return events.size() == 1 && events[0].value("count", 0) >= 2;
  }));
  std::vector<json> events = EventsWithReason(*client_, "FailedCreatePod");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_TRUE(absl::StrContains(events[0].value("message", ""), "violates PodSecurity"));

  ASSERT_THAT(LabelNamespace(*client_, "privileged"), IsOk());
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "psa-worker-0").has_value(); },
                         absl::Seconds(20)));
  EXPECT_TRUE(
      Eventually([&] { return FindCondition(Status("psa"), "ReplicaFailure") == nullptr; }));
}

TEST_F(ControllerTest, RepeatedEventsAreAggregatedIntoOneWithACount) {
  EventRecorder recorder(*client_, "kubetrain-operator");
  json object = {{"apiVersion", "kubetrain.dev/v1"},
                 {"kind", "TrainingJob"},
                 {"metadata", {{"name", "agg"}, {"namespace", "default"}, {"uid", "u-1"}}}};
  for (int i = 0; i < 3; ++i) recorder.Warning(object, "FailedCreatePod", "Error creating: no");
  recorder.Warning(object, "FailedCreatePod", "Error creating: another reason");
  std::vector<json> events = EventsWithReason(*client_, "FailedCreatePod");
  ASSERT_EQ(events.size(), 2u);
  std::map<std::string, int> counts;
  for (const json& e : events) counts[e.value("message", "")] = e.value("count", 0);
  EXPECT_EQ(counts["Error creating: no"], 3);
  EXPECT_EQ(counts["Error creating: another reason"], 1);
}

}  // namespace
}  // namespace kubetrain::controller::testing
