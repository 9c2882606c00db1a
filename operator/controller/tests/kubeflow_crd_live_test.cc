// TFJobs under Kubeflow's own TFJob CRD (testdata/kubeflow.org_tfjobs.yaml, release-1.9), whose
// structural schema makes the API server prune every status field it does not know: the
// operator's restart ledger must live where that schema keeps it.
#include <gtest/gtest.h>

#include <string>

#include "operator/controller/restart_ledger.h"
#include "operator/controller/tests/controller_fixture.h"

namespace kubetrain::controller::testing {
namespace {

class KubeflowCrdTest : public ControllerTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartServer());
    json crd = kube::testing::LoadSourceYaml(
        "operator/controller/tests/testdata/kubeflow.org_tfjobs.yaml");
    ASSERT_TRUE(crd.is_object());
    Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                  "CustomResourceDefinition", false};
    ASSERT_THAT(client_->Create(crds, "", crd).status(), IsOk());
    ASSERT_TRUE(Eventually([&] { return client_->List(Resource::TfJobs(), "default", {}).ok(); }));
    StartController({}, /*tfjob=*/true);
  }

  json TfJob(const std::string& name, int backoff_limit) {
    json container = {{"name", "tensorflow"}, {"image", "tf/dist-mnist:1"}};
    json worker = {{"replicas", 1},
                   {"restartPolicy", "OnFailure"},
                   {"template", {{"spec", {{"containers", json::array({container})}}}}}};
    return {{"apiVersion", "kubeflow.org/v1"},
            {"kind", "TFJob"},
            {"metadata", {{"name", name}, {"namespace", "default"}}},
            {"spec",
             {{"tfReplicaSpecs", {{"Worker", worker}}},
              {"runPolicy", {{"backoffLimit", backoff_limit}}}}}};
  }

  json TfStatus(const std::string& name) {
    auto obj = Get(Resource::TfJobs(), name);
    return obj ? obj->value("status", json::object()) : json::object();
  }
};

// The premise: the server prunes a status field Kubeflow's schema lacks, as a cluster does.
TEST_F(KubeflowCrdTest, TheServerPrunesStatusFieldsKubeflowsSchemaLacks) {
  controller_.reset();  // nothing else writes the status
  json tfjob = TfJob("pr", 3);
  auto created = client_->Create(Resource::TfJobs(), "default", tfjob);
  ASSERT_TRUE(created.ok()) << created.status();
  json object = *created;
  object["status"] = {{"replicaStatuses", {{"Worker", {{"failed", 1}, {"restarts", 5}}}}},
                      {"countedFailures", {"x"}}};
  auto written = client_->UpdateStatus(Resource::TfJobs(), "default", object);
  ASSERT_TRUE(written.ok()) << written.status();
  json worker = TfStatus("pr")["replicaStatuses"]["Worker"];
  EXPECT_EQ(worker.value("failed", 0), 1);
  EXPECT_FALSE(worker.contains("restarts"));
  EXPECT_FALSE(TfStatus("pr").contains("countedFailures"));
}

// A TFJob with backoffLimit 2 whose Worker exits 1 again and again: the third exit fails it, with
// Kubeflow's reason, though its status can hold no restart count.
TEST_F(KubeflowCrdTest, ATfJobFailsAfterBackoffLimitRestarts) {
  auto created = client_->Create(Resource::TfJobs(), "default", TfJob("kf", 2));
  ASSERT_TRUE(created.ok()) << created.status();
  std::string old_uid;
  for (int exit = 1; exit <= 3; ++exit) {
    ASSERT_TRUE(Eventually([&] {
      std::string uid = Uid("kf-worker-0");
      return !uid.empty() && uid != old_uid;
    })) << "exit "
        << exit;
    old_uid = Uid("kf-worker-0");
    SetPod("kf-worker-0", "Failed", 1);
  }
  ASSERT_TRUE(Eventually([&] {
    json st = TfStatus("kf");
    return st.contains("conditions") && st["conditions"].back().value("type", "") == "Failed";
  })) << TfStatus("kf").dump();
  json failed = TfStatus("kf")["conditions"].back();
  EXPECT_EQ(failed["reason"], "TFJobFailed");
  EXPECT_NE(failed["message"].get<std::string>().find("reached the specified backoff limit"),
            std::string::npos);
  json job = *Get(Resource::TfJobs(), "kf");
  EXPECT_EQ(job["metadata"]["annotations"].value(kRestartsAnnotation, ""), R"({"Worker":2})");
  EXPECT_FALSE(TfStatus("kf")["replicaStatuses"]["Worker"].contains("restarts"));
}

}  // namespace
}  // namespace kubetrain::controller::testing
