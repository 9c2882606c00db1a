// runPolicy.managedBy against localkube: the CRD keeps the field, and a job another controller
// manages (MultiKueue's copy) gets no pods and no status while the operator runs the others.
#include <gtest/gtest.h>

#include "operator/controller/tests/controller_fixture.h"
#include "operator/controller/tests/job_builders.h"

namespace kubetrain::controller::testing {
namespace {

TEST_F(ControllerTest, AJobManagedByMultiKueueIsLeftAlone) {
  Create(Job("mk", {{"Worker", Replica(1)}}, {{"managedBy", "kueue.x-k8s.io/multikueue"}}));
  // Created after it: the informer delivers and the queue hands out "mk" first, and its pass
  // makes no request, so once "own" is Created the pass of "mk" has run.
  Create(Job("own", {{"Worker", Replica(1)}}, {{"managedBy", "kubetrain.dev/operator"}}));
  ASSERT_TRUE(Eventually([&] { return State("own") == "Created"; }));
  ASSERT_TRUE(Get(Resource::Pods(), "own-worker-0").has_value());
  std::optional<json> mk = Get(Resource::TrainingJobs(), "mk");
  ASSERT_TRUE(mk.has_value());
  EXPECT_EQ((*mk)["spec"]["runPolicy"].value("managedBy", ""), "kueue.x-k8s.io/multikueue");
  EXPECT_FALSE(Get(Resource::Pods(), "mk-worker-0").has_value());
  EXPECT_FALSE(Get(Resource::Services(), "mk").has_value());
  EXPECT_TRUE(Status("mk").empty()) << Status("mk");
}

}  // namespace
}  // namespace kubetrain::controller::testing
