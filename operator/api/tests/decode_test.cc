#include "operator/api/decode.h"

#include <gtest/gtest.h>

#include "operator/api/defaults.h"
#include "operator/api/tests/test_util.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;
using testing::LoadYaml;
using testing::MinimalJob;

TEST(Decode, ExampleDecodesWithoutErrorsAndRoundTrips) {
  json doc = LoadYaml("deploy/examples/fashion-mnist.yaml");
  FieldErrors errors;
  TrainingJob job = Decode(doc, &errors);
  EXPECT_TRUE(errors.empty()) << errors.front().ToString();
  EXPECT_EQ(job.metadata.name, "fashion-mnist");
  EXPECT_EQ(*job.spec.replica_specs.at(ReplicaType::kWorker).replicas, 2);
  EXPECT_EQ(*job.spec.run_policy.backoff_limit, 3);
  EXPECT_EQ(ToJson(job), doc);
}

TEST(Decode, ObjectsFromTheApiServerGetTheManifestReadersChecks) {
  // The operator decodes JSON that never went through the YAML reader.
  json doc = MinimalJob(1, 2);
  doc["metadata"]["annotations"] = {{"note", "caf\xe9"}};
  FieldErrors errors;
  Decode(doc, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].ToString(),
            "metadata.annotations.note: invalid UTF-8 (byte 0xe9 at offset 3 of the value); "
            "strings must be UTF-8");

  doc = MinimalJob(1, 2);
  json* cur = &doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["affinity"];
  for (int i = 0; i < 50000; ++i) {
    *cur = json::object({{"x", nullptr}});
    cur = &(*cur)["x"];
  }
  errors.clear();
  Decode(doc, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("nesting deeper than 100 levels"), std::string::npos)
      << errors[0].ToString();
}

TEST(Decode, LongValuesAreCutInMessages) {
  json doc = MinimalJob(1, 2);
  doc["spec"]["replicaSpecs"]["Worker"]["replicas"] = std::string(100000, '7');
  FieldErrors errors;
  Decode(doc, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].message,
            "must be an integer, got \"" + std::string(80, '7') + "\"... (100000 characters)");
  EXPECT_EQ(Describe(json::array({std::string(100, 'a')})).size(),
            80 + std::string("... (104 characters of JSON)").size());
}

TEST(Decode, UnknownPodTemplateFieldsSurviveRoundTrip) {
  json doc = MinimalJob(1, 2);
  json& tmpl = doc["spec"]["replicaSpecs"]["Worker"]["template"];
  tmpl["metadata"] = {{"labels", {{"team", "vision"}}}};
  tmpl["spec"]["nodeSelector"] = {{"gpu", "h100"}};
  tmpl["spec"]["futureField"] = {{"nested", json::array({1, "two", nullptr})}};
  tmpl["spec"]["containers"][0]["volumeMounts"] =
      json::array({{{"name", "d"}, {"mountPath", "/d"}}});
  doc["metadata"]["annotations"] = {{"note", "kept"}};
  doc["metadata"]["finalizers"] = json::array({"example.com/keep"});
  FieldErrors errors;
  TrainingJob job = Decode(doc, &errors);
  ASSERT_TRUE(errors.empty()) << errors.front().ToString();
  EXPECT_EQ(ToJson(job), doc);
}

TEST(Decode, DefaultsAreSerialisedAfterSetDefaults) {
  FieldErrors errors;
  TrainingJob job = Decode(MinimalJob(1, 1), &errors);
  SetDefaults(&job);
  json out = ToJson(job);
  EXPECT_EQ(out["spec"]["replicaSpecs"]["PS"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(out["spec"]["replicaSpecs"]["Worker"]["restartPolicy"], "ExitCode");
  EXPECT_EQ(out["spec"]["runPolicy"]["cleanPodPolicy"], "Running");
  EXPECT_EQ(out["spec"]["runPolicy"]["backoffLimit"], 6);
  EXPECT_EQ(out["spec"]["runPolicy"]["restartScope"], "Pod");
  EXPECT_EQ(out["spec"]["runPolicy"]["suspend"], false);
  EXPECT_EQ(out["spec"]["successPolicy"], "ChiefOnly");
  json ports = out["spec"]["replicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["ports"];
  EXPECT_EQ(ports, json::parse(R"([{"containerPort":2222,"name":"kubetrain","protocol":"TCP"},
                                   {"containerPort":8080,"name":"metrics","protocol":"TCP"}])"));
}

TEST(Decode, DefaultingIsIdempotent) {
  FieldErrors errors;
  TrainingJob job = Decode(MinimalJob(2, 2, true, true), &errors);
  SetDefaults(&job);
  json once = ToJson(job);
  SetDefaults(&job);
  EXPECT_EQ(ToJson(job), once);
}

TEST(Decode, UnnamedFirstContainerBecomesTheTrainingContainer) {
  json doc = MinimalJob(0, 1);
  doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].erase("name");
  FieldErrors errors;
  TrainingJob job = Decode(doc, &errors);
  SetDefaults(&job);
  const json* c = TrainingContainer(job.spec.replica_specs.at(ReplicaType::kWorker).template_);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["image"], "kubetrain/worker:0.1.0");
}

TEST(Decode, StatusIsReadAndWritten) {
  json doc = MinimalJob(1, 1);
  doc["status"] = json::parse(R"({
    "conditions":[{"type":"Created","status":"True","reason":"TrainingJobCreated",
                   "message":"created","lastTransitionTime":"2026-01-01T00:00:00Z"}],
    "replicaStatuses":{"PS":{"active":1,"succeeded":0,"failed":0,"restarts":2}},
    "startTime":"2026-01-01T00:00:00Z","observedGeneration":3,
    "progress":{"step":1200,"epoch":2,"loss":0.41,"accuracy":0.861,"examplesPerSecond":21000.5}})");
  FieldErrors errors;
  TrainingJob job = Decode(doc, &errors);
  ASSERT_TRUE(errors.empty());
  EXPECT_EQ(job.status.replica_statuses.at(ReplicaType::kPS).restarts, 2);
  EXPECT_EQ(job.status.progress->step, 1200);
  EXPECT_EQ(ToJson(job.status), doc["status"]);
}

// spec.elastic and status.elastic are read and written back as they came.
TEST(Decode, ElasticSpecAndStatusRoundTrip) {
  json doc = MinimalJob(1, 2);
  doc["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 4}};
  doc["status"] = json::parse(R"({"elastic":{"liveWorkers":2,"targetWorkers":3,
    "lastScaleTime":"2026-01-01T00:00:00Z"}})");
  FieldErrors errors;
  TrainingJob job = Decode(doc, &errors);
  ASSERT_TRUE(errors.empty()) << errors.front().ToString();
  ASSERT_TRUE(job.spec.elastic.has_value());
  EXPECT_EQ(job.spec.elastic->min_replicas, 1);
  EXPECT_EQ(job.spec.elastic->max_replicas, 4);
  ASSERT_TRUE(job.status.elastic.has_value());
  EXPECT_EQ(job.status.elastic->live_workers, 2);
  EXPECT_EQ(job.status.elastic->target_workers, 3);
  EXPECT_EQ(ToJson(job), doc);
  EXPECT_FALSE(ToJson(Decode(MinimalJob(1, 2), &errors)).at("spec").contains("elastic"));
}

// A bound of the wrong type is one error, not also "required" from validation.
TEST(Decode, ElasticBoundOfTheWrongTypeIsOneError) {
  json doc = MinimalJob(1, 2);
  doc["spec"]["elastic"] = {{"minReplicas", "1"}, {"maxReplicas", 4}};
  FieldErrors errors;
  DecodeAndValidate(doc, &errors);
  EXPECT_EQ(errors, (FieldErrors{{"spec.elastic.minReplicas", "must be an integer, got \"1\""}}));
}

// Status counts that are not integers of the field's range are ignored, not cast: 1.2e33 as an
// int is undefined behaviour (found by fuzzing the JSON decoder).
TEST(Decode, StatusCountsOutOfRangeOrFractionalAreIgnored) {
  json doc = MinimalJob(1, 1);
  doc["status"] = json::parse(R"({"replicaStatuses":{
    "PS":{"active":1.2e33,"succeeded":-5,"failed":3.5,"restarts":4294967296},
    "Worker":{"active":2,"succeeded":18446744073709551615}}})");
  FieldErrors errors;
  TrainingJob job = Decode(doc, &errors);
  const ReplicaStatus& ps = job.status.replica_statuses.at(ReplicaType::kPS);
  EXPECT_EQ(ps.active, 0);
  EXPECT_EQ(ps.succeeded, -5);
  EXPECT_EQ(ps.failed, 0);
  EXPECT_EQ(ps.restarts, 0);
  const ReplicaStatus& worker = job.status.replica_statuses.at(ReplicaType::kWorker);
  EXPECT_EQ(worker.active, 2);
  EXPECT_EQ(worker.succeeded, 0);
}

}  // namespace
}  // namespace kubetrain::api
