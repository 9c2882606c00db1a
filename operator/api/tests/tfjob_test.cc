// Kubeflow TFJob manifests as kubetrain reads them. The TF_CONFIG expectations restate the cases
// Kubeflow's training-operator v1 checks for its own controller (non-distributed jobs, a custom
// cluster domain, evaluators in the cluster, the sparse form of enableDynamicWorker).
#include "operator/api/tfjob.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/tf_config.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

json Replica(int replicas, const std::string& image = "example/tf-dist-mnist:1") {
  return {{"replicas", replicas},
          {"template", {{"spec", {{"containers", {{{"name", "tensorflow"}, {"image", image}}}}}}}}};
}

// A TFJob named `name` in `ns` with the given replica specs (keys as written).
json TfJob(json specs, const std::string& name = "dist-mnist", const std::string& ns = "ns2") {
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"tfReplicaSpecs", std::move(specs)}}}};
}

TEST(KubeflowTfConfig, OneReplicaInAllIsNotDistributedAndGetsNone) {
  json job = TfJob({{"Worker", Replica(1)}});
  EXPECT_EQ(KubeflowTfConfig(job, "worker", 0, ""), "");
  EXPECT_EQ(KubeflowTfConfig(job, "worker", 0, "tf.training.com"), "");
  json unset = TfJob({{"Worker", {{"template", Replica(1)["template"]}}}});  // replicas: 1
  EXPECT_EQ(KubeflowTfConfig(unset, "worker", 0, ""), "");
}

TEST(KubeflowTfConfig, PsAndWorkerWithACustomClusterDomain) {
  json job = TfJob({{"Worker", Replica(1)}, {"PS", Replica(1)}}, "test-tfjob", "ns2");
  EXPECT_EQ(KubeflowTfConfig(job, "worker", 0, "tf.training.org"),
            R"({"cluster":{"ps":["test-tfjob-ps-0.ns2.svc.tf.training.org:2222"],)"
            R"("worker":["test-tfjob-worker-0.ns2.svc.tf.training.org:2222"]},)"
            R"("task":{"type":"worker","index":0},"environment":"cloud"})");
}

TEST(KubeflowTfConfig, EvaluatorsAreInTheClusterAndKeysAreSorted) {
  json job = TfJob({{"Worker", Replica(1)}, {"PS", Replica(1)}, {"Evaluator", Replica(1)}},
                   "test-tfjob", "ns3");
  EXPECT_EQ(KubeflowTfConfig(job, "Worker", 0, ""),
            R"({"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],)"
            R"("ps":["test-tfjob-ps-0.ns3.svc:2222"],)"
            R"("worker":["test-tfjob-worker-0.ns3.svc:2222"]},)"
            R"("task":{"type":"worker","index":0},"environment":"cloud"})");
  EXPECT_EQ(KubeflowTfConfig(job, "worker", 0, "tf.training.io"),
            R"({"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc.tf.training.io:2222"],)"
            R"("ps":["test-tfjob-ps-0.ns3.svc.tf.training.io:2222"],)"
            R"("worker":["test-tfjob-worker-0.ns3.svc.tf.training.io:2222"]},)"
            R"("task":{"type":"worker","index":0},"environment":"cloud"})");
}

TEST(KubeflowTfConfig, LowerCaseKeysMasterAndTheTfjobPort) {
  json master = Replica(1);
  master["template"]["spec"]["containers"][0]["ports"] = {
      {{"name", "tfjob-port"}, {"containerPort", 3333}}};
  json job = TfJob({{"worker", Replica(2)}, {"Master", master}}, "j", "team");
  EXPECT_EQ(KubeflowTfConfig(job, "master", 0, ""),
            R"({"cluster":{"master":["j-master-0.team.svc:3333"],)"
            R"("worker":["j-worker-0.team.svc:2222","j-worker-1.team.svc:2222"]},)"
            R"("task":{"type":"master","index":0},"environment":"cloud"})");
  // Our programs read Kubeflow's form: the master is the chief, "environment" is kept.
  auto config = ParseTfConfig(KubeflowTfConfig(job, "worker", 1, ""));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->TaskAddress(), "j-worker-1.team.svc:2222");
  EXPECT_EQ(config->ChiefType(), "master");
  EXPECT_FALSE(config->IsChief());
  EXPECT_EQ(ToJsonString(*config), KubeflowTfConfig(job, "worker", 1, ""));
}

TEST(KubeflowTfConfig, DynamicWorkersGetTheSparseForm) {
  json job = TfJob({{"Worker", Replica(2)}, {"PS", Replica(2)}}, "j", "ns");
  job["spec"]["enableDynamicWorker"] = true;
  EXPECT_EQ(KubeflowTfConfig(job, "worker", 1, ""),
            R"({"cluster":{"worker":{"1":"j-worker-1.ns.svc:2222"},)"
            R"("ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"]},)"
            R"("task":{"type":"worker","index":1}})");
  EXPECT_EQ(
      KubeflowTfConfig(job, "ps", 0, ""),
      R"({"cluster":{"worker":{},"ps":["j-ps-0.ns.svc:2222"]},"task":{"type":"ps","index":0}})");
}

TEST(ConvertTfJob, KubeflowsDistMnistShapeBecomesAValidTrainingJob) {
  json tfjob =
      TfJob({{"PS", Replica(2)}, {"Worker", Replica(4)}}, "dist-mnist-for-e2e-test", "kubeflow");
  tfjob["metadata"]["uid"] = "0b7d3a2c";  // set by the API server: not part of a new manifest
  FieldErrors errors;
  TfJobConversion c = ConvertTfJob(tfjob, &errors);
  ASSERT_THAT(errors, IsEmpty());
  const json& tj = c.training_job;
  EXPECT_EQ(tj["apiVersion"], "kubetrain.dev/v1");
  EXPECT_EQ(tj["kind"], "TrainingJob");
  EXPECT_EQ(tj["metadata"], json({{"name", "dist-mnist-for-e2e-test"}, {"namespace", "kubeflow"}}));
  EXPECT_EQ(tj["spec"]["replicaSpecs"]["Worker"]["replicas"], 4);
  // Kubeflow's defaults, written out: restartPolicy Never, cleanPodPolicy None.
  EXPECT_EQ(tj["spec"]["replicaSpecs"]["PS"]["restartPolicy"], "Never");
  EXPECT_EQ(tj["spec"]["runPolicy"]["cleanPodPolicy"], "None");
  EXPECT_EQ(tj["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"],
            "kubetrain");
  EXPECT_THAT(c.notes, ElementsAre(HasSubstr("spec.runPolicy.backoffLimit: unset")));
  FieldErrors validation;
  TrainingJob job = DecodeAndValidate(tj, &validation);
  EXPECT_THAT(validation, IsEmpty());
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kPS).replicas, 2);
}

TEST(ConvertTfJob, MasterBecomesChiefAndEveryFieldCarriesOver) {
  json master = Replica(1);
  master["restartPolicy"] = "ExitCode";
  master["template"]["spec"]["containers"][0]["ports"] = {
      {{"name", "tfjob-port"}, {"containerPort", 3333}}};
  json tfjob = TfJob({{"Master", master}, {"worker", Replica(2)}});
  tfjob["spec"]["successPolicy"] = "AllWorkers";
  tfjob["spec"]["runPolicy"] = {{"cleanPodPolicy", "Running"},
                                {"backoffLimit", 3},
                                {"activeDeadlineSeconds", 600},
                                {"ttlSecondsAfterFinished", 60},
                                {"schedulingPolicy", {{"minAvailable", 3}, {"queue", "q"}}}};
  FieldErrors errors;
  TfJobConversion c = ConvertTfJob(tfjob, &errors);
  ASSERT_THAT(errors, IsEmpty());
  const json& spec = c.training_job["spec"];
  ASSERT_TRUE(spec["replicaSpecs"].contains("Chief"));
  EXPECT_FALSE(spec["replicaSpecs"].contains("Master"));
  EXPECT_EQ(spec["replicaSpecs"]["Chief"]["restartPolicy"], "ExitCode");
  EXPECT_EQ(spec["replicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["ports"][0]["name"],
            "kubetrain");
  EXPECT_TRUE(spec["replicaSpecs"].contains("Worker"));  // "worker" is Worker
  // Kubeflow reads AllWorkers only for jobs without a Chief or Master.
  EXPECT_EQ(spec["successPolicy"], "ChiefOnly");
  EXPECT_EQ(spec["runPolicy"], json({{"cleanPodPolicy", "Running"},
                                     {"backoffLimit", 3},
                                     {"activeDeadlineSeconds", 600},
                                     {"ttlSecondsAfterFinished", 60},
                                     {"schedulingPolicy", {{"minAvailable", 3}, {"queue", "q"}}}}));
  EXPECT_THAT(c.notes, ElementsAre(HasSubstr("spec.tfReplicaSpecs.Master: becomes the Chief"),
                                   HasSubstr("spec.successPolicy: AllWorkers counts in Kubeflow "
                                             "only without a Chief or Master")));
  FieldErrors validation;
  TrainingJob job = DecodeAndValidate(c.training_job, &validation);
  EXPECT_THAT(validation, IsEmpty());
  EXPECT_EQ(ContainerPort(job, ReplicaType::kChief, kDefaultPortName, 0), 3333);
  EXPECT_EQ(TfJobPath(tfjob, "spec.replicaSpecs.Chief.template.spec.containers[0].image"),
            "spec.tfReplicaSpecs.Master.template.spec.containers[0].image");
  EXPECT_EQ(TfJobPath(tfjob, "spec.replicaSpecs.Worker.replicas"),
            "spec.tfReplicaSpecs.worker.replicas");
  EXPECT_EQ(TfJobPath(tfjob, "spec.runPolicy.backoffLimit"), "spec.runPolicy.backoffLimit");
}

TEST(ConvertTfJob, WhatDoesNotCarryOverIsSaid) {
  json tfjob = TfJob({{"Worker", Replica(2)}});
  tfjob["spec"]["enableDynamicWorker"] = false;
  tfjob["spec"]["successPolicy"] = "AllWorkers";  // no Chief: it carries over
  tfjob["spec"]["runPolicy"] = {
      {"backoffLimit", 1},
      {"schedulingPolicy", {{"minResources", {{"cpu", "4"}}}, {"scheduleTimeoutSeconds", 30}}}};
  FieldErrors errors;
  TfJobConversion c = ConvertTfJob(tfjob, &errors);
  EXPECT_THAT(errors, IsEmpty());
  EXPECT_EQ(c.training_job["spec"]["successPolicy"], "AllWorkers");
  EXPECT_THAT(c.notes,
              ElementsAre(HasSubstr("spec.runPolicy.schedulingPolicy.minResources: dropped"),
                          HasSubstr("spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds")));
}

// A TFJob left to another controller (MultiKueue) stays so once converted; Kubeflow's own value
// means this operator and is dropped with a note.
TEST(ConvertTfJob, ManagedByAnotherControllerCarriesOver) {
  json tfjob = TfJob({{"Worker", Replica(2)}});
  tfjob["spec"]["runPolicy"] = {{"managedBy", "kueue.x-k8s.io/multikueue"}, {"backoffLimit", 3}};
  FieldErrors errors;
  TfJobConversion c = ConvertTfJob(tfjob, &errors);
  EXPECT_THAT(errors, IsEmpty());
  EXPECT_EQ(c.training_job["spec"]["runPolicy"]["managedBy"], "kueue.x-k8s.io/multikueue");
  EXPECT_THAT(c.notes, IsEmpty());
  FieldErrors valid;
  TrainingJob job = DecodeAndValidate(c.training_job, &valid);
  EXPECT_THAT(valid, IsEmpty());
  EXPECT_FALSE(ManagedByThisOperator(job.spec.run_policy.managed_by, /*tfjob=*/false));

  tfjob["spec"]["runPolicy"]["managedBy"] = "kubeflow.org/training-operator";
  c = ConvertTfJob(tfjob, &errors);
  EXPECT_FALSE(c.training_job["spec"]["runPolicy"].contains("managedBy"));
  EXPECT_THAT(c.notes, ElementsAre(HasSubstr("spec.runPolicy.managedBy: dropped")));
}

// Dynamic workers get Kubeflow's sparse TF_CONFIG, which kubetrain-worker cannot train with: the
// job is refused before any pod, naming the field and what to use instead.
TEST(ConvertTfJob, DynamicWorkersAreRefusedNamingTheFieldAndTheAlternative) {
  json tfjob = TfJob({{"PS", Replica(1)}, {"Worker", Replica(2)}});
  tfjob["spec"]["enableDynamicWorker"] = true;
  FieldErrors errors;
  ConvertTfJob(tfjob, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.enableDynamicWorker");
  EXPECT_THAT(errors[0].message, HasSubstr("not supported"));
  EXPECT_THAT(errors[0].message, HasSubstr("spec.elastic"));
  FieldErrors decode_errors;
  DecodeTfJob(tfjob, &decode_errors);  // what the operator reads: the job fails as InvalidSpec
  EXPECT_THAT(decode_errors, Not(IsEmpty()));
}

TEST(ConvertTfJob, MistakesAreNamedByTheirTfJobField) {
  auto errors_of = [](json tfjob) {
    FieldErrors errors;
    ConvertTfJob(tfjob, &errors);
    std::vector<std::string> out;
    for (const FieldError& e : errors) out.push_back(e.ToString());
    return out;
  };
  EXPECT_THAT(errors_of(TfJob({{"Master", Replica(1)}, {"Chief", Replica(1)}})),
              ElementsAre(HasSubstr("spec.tfReplicaSpecs: has both Chief and Master")));
  EXPECT_THAT(errors_of(TfJob({{"Workers", Replica(1)}})),
              ElementsAre("spec.tfReplicaSpecs.Workers: unknown replica type (a TFJob has Chief, "
                          "Master, PS, Worker, Evaluator)"));
  json unnamed = Replica(1);
  unnamed["template"]["spec"]["containers"][0]["name"] = "main";
  EXPECT_THAT(errors_of(TfJob({{"Worker", unnamed}})),
              ElementsAre(HasSubstr("spec.tfReplicaSpecs.Worker.template.spec.containers: no "
                                    "container named \"tensorflow\"")));
  json typo = Replica(1);
  typo["replica"] = 2;
  EXPECT_THAT(errors_of(TfJob({{"Worker", typo}})),
              ElementsAre(HasSubstr("spec.tfReplicaSpecs.Worker.replica: unknown field")));
  json bad_policy = TfJob({{"Worker", Replica(1)}});
  bad_policy["spec"]["successPolicy"] = "ChiefOnly";
  EXPECT_THAT(errors_of(bad_policy),
              ElementsAre("spec.successPolicy: must be \"\" or \"AllWorkers\", got \"ChiefOnly\""));
  EXPECT_THAT(errors_of({{"apiVersion", "kubeflow.org/v1"}, {"kind", "TFJob"}}),
              ElementsAre("spec: required: an object with tfReplicaSpecs"));
  json extra = TfJob({{"Worker", Replica(1)}});
  extra["specs"] = json::object();
  EXPECT_THAT(errors_of(extra), ElementsAre(HasSubstr("specs: unknown field (a TFJob has "
                                                      "apiVersion, kind, metadata, spec, status")));
  EXPECT_FALSE(IsTfJob(json::parse(R"({"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob"})")));
}

// What the operator creates for a TFJob, object for object, as Kubeflow's does: a headless
// Service per replica selecting its pod, the pods with Kubeflow's labels and TF_CONFIG; beside
// them the operator's managed-by label, restartPolicy Never and the job's secret.
TEST(RenderTfJob, KubeflowsServicesAndPods) {
  json master = Replica(1);
  master["restartPolicy"] = "ExitCode";
  master["template"]["metadata"] = {{"labels", {{"team", "vision"}}}};
  json tfjob = TfJob({{"Master", master}, {"Worker", Replica(2)}}, "strategy", "");
  std::vector<json> objects = RenderTfJob(tfjob, "team-a", "");
  ASSERT_EQ(objects.size(), 6u);
  std::vector<std::string> names;
  for (const json& o : objects)
    names.push_back(o["kind"].get<std::string>() + "/" + o["metadata"]["name"].get<std::string>());
  EXPECT_THAT(names, ElementsAre("Service/strategy-master-0", "Service/strategy-worker-0",
                                 "Service/strategy-worker-1", "Pod/strategy-master-0",
                                 "Pod/strategy-worker-0", "Pod/strategy-worker-1"));
  const json labels = {{"training.kubeflow.org/job-name", "strategy"},
                       {"training.kubeflow.org/operator-name", "tfjob-controller"},
                       {"training.kubeflow.org/replica-index", "1"},
                       {"training.kubeflow.org/replica-type", "worker"}};
  json managed = labels;
  managed["app.kubernetes.io/managed-by"] = "kubetrain-operator";
  const json& service = objects[2];
  EXPECT_EQ(service["metadata"]["namespace"], "team-a");
  EXPECT_EQ(service["metadata"]["labels"], managed);
  EXPECT_EQ(service["spec"], json({{"clusterIP", "None"},
                                   {"selector", labels},
                                   {"ports", {{{"name", "tfjob-port"}, {"port", 2222}}}}}));
  const json& chief = objects[3];
  EXPECT_EQ(chief["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
  EXPECT_EQ(chief["metadata"]["labels"]["team"], "vision");
  EXPECT_EQ(chief["spec"]["restartPolicy"], "Never");  // ExitCode: the operator decides
  const json& worker = objects[5];
  EXPECT_FALSE(worker["metadata"]["labels"].contains("training.kubeflow.org/job-role"));
  EXPECT_EQ(worker["metadata"]["labels"], managed);
  EXPECT_EQ(worker["spec"]["restartPolicy"], "Never");  // Kubeflow's default, and the operator's
  EXPECT_FALSE(worker["metadata"].contains("ownerReferences"));  // no uid yet
  const json& c = worker["spec"]["containers"][0];
  EXPECT_EQ(c["name"], "tensorflow");
  EXPECT_EQ(c["ports"], json({{{"name", "tfjob-port"}, {"containerPort", 2222}}}));
  json with_ns = tfjob;
  with_ns["metadata"]["namespace"] = "team-a";
  EXPECT_EQ(c["env"],
            json({{{"name", "TF_CONFIG"}, {"value", KubeflowTfConfig(with_ns, "worker", 1, "")}},
                  {{"name", "KUBETRAIN_JOB_SECRET"},
                   {"valueFrom",
                    {{"secretKeyRef", {{"name", "strategy-job-secret"}, {"key", "token"}}}}}},
                  {{"name", "KUBETRAIN_JOB_NAME"}, {"value", "strategy"}}}));
  EXPECT_THAT(c["env"][0]["value"].get<std::string>(),
              HasSubstr(R"("master":["strategy-master-0.team-a.svc:2222"])"));
}

TEST(RenderTfJob, WorkerZeroIsTheMasterRoleWithoutAChiefAndOneReplicaGetsNoTfConfig) {
  std::vector<json> objects = RenderTfJob(TfJob({{"Worker", Replica(1)}}, "solo", "ns"), "", "");
  ASSERT_EQ(objects.size(), 2u);
  const json& pod = objects[1];
  EXPECT_EQ(pod["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
  // The secret, the job's name and, on the chief, whether its checkpoints outlive the pod: no
  // TF_CONFIG, as Kubeflow gives none.
  const json& env = pod["spec"]["containers"][0]["env"];
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0]["name"], "KUBETRAIN_JOB_SECRET");
  EXPECT_EQ(env[1], json({{"name", "KUBETRAIN_JOB_NAME"}, {"value", "solo"}}));
  EXPECT_EQ(env[2], json({{"name", "KUBETRAIN_CHECKPOINT_DURABLE"}, {"value", "false"}}));
  EXPECT_EQ(pod["metadata"]["namespace"], "ns");
}

// Once the API server has given the TFJob a uid, everything made for it is owned by the TFJob
// (the garbage collector deletes it with the job); an OnFailure replica's pod is restartPolicy
// Never too, so that the operator sees, counts and recreates each failure.
TEST(TfJobPod, OwnedByTheTfJobAndRestartedByTheOperator) {
  json ps = Replica(2);
  ps["restartPolicy"] = "OnFailure";
  json tfjob = TfJob({{"ps", ps}, {"Worker", Replica(2)}}, "owned", "team-b");
  tfjob["metadata"]["uid"] = "u-123";
  json pod = TfJobPod(tfjob, ReplicaType::kPS, 1, "");
  EXPECT_EQ(pod["metadata"]["name"], "owned-ps-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "team-b");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["metadata"]["ownerReferences"],
            json::parse(R"([{"apiVersion":"kubeflow.org/v1","kind":"TFJob","name":"owned",)"
                        R"("uid":"u-123","controller":true,"blockOwnerDeletion":true}])"));
  std::vector<json> services = TfJobServices(tfjob);
  ASSERT_EQ(services.size(), 4u);
  EXPECT_EQ(services[0]["metadata"]["ownerReferences"], pod["metadata"]["ownerReferences"]);
  EXPECT_EQ(TfJobTaskName(tfjob, ReplicaType::kPS, 1), "owned-ps-1");
}

// Each TFJob's checkpoints and metrics are its own (KUBETRAIN_JOB_NAME, as on a TrainingJob's
// pods), and what the template says of pulling its image reaches the pod: a private registry's
// pull secrets and policy.
TEST(TfJobPod, NamesItsJobAndKeepsTheTemplatesPullSecrets) {
  json worker = Replica(2, "registry.example/team/kubetrain-worker:0.1.0-cpu");
  worker["template"]["spec"]["imagePullSecrets"] = {{{"name", "regcred"}}};
  worker["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always";
  json tfjob = TfJob({{"PS", Replica(1)}, {"Worker", worker}}, "mnist-a", "team-c");
  json pod = TfJobPod(tfjob, ReplicaType::kWorker, 1, "");
  EXPECT_EQ(pod["spec"]["imagePullSecrets"], json::parse(R"([{"name":"regcred"}])"));
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["image"], "registry.example/team/kubetrain-worker:0.1.0-cpu");
  EXPECT_EQ(c["imagePullPolicy"], "Always");
  EXPECT_THAT(c["env"], Contains(json({{"name", "KUBETRAIN_JOB_NAME"}, {"value", "mnist-a"}})));
  json ps = TfJobPod(tfjob, ReplicaType::kPS, 0, "");
  EXPECT_THAT(ps["spec"]["containers"][0]["env"],
              Contains(json({{"name", "KUBETRAIN_JOB_NAME"}, {"value", "mnist-a"}})));
}

// A TFJob as the operator reads it back: the TrainingJob it converts to, with the TFJob's uid and
// generation, owned objects of kind TFJob, and its status in the model's terms (Master's counts
// are the Chief's, TFJob reasons the TrainingJob ones) — the inverse of TfJobStatus.
TEST(DecodeTfJob, ReadsMetadataAndStatusBackAndNamesTfJobFields) {
  json tfjob = TfJob({{"Master", Replica(1)}, {"Worker", Replica(2)}}, "back", "ns");
  tfjob["metadata"]["uid"] = "u-9";
  tfjob["metadata"]["generation"] = 3;
  TrainingJobStatus status;
  status.conditions.push_back(
      {"Running", "True", "TrainingJobRunning", "TrainingJob ns/back is running.", "", ""});
  status.replica_statuses[ReplicaType::kChief] = {.active = 1, .restarts = 2};
  status.replica_statuses[ReplicaType::kWorker] = {.active = 2, .completed_indexes = "1"};
  status.start_time = "2026-11-25T10:00:00Z";
  json written = TfJobStatus(status, tfjob);
  EXPECT_EQ(written["conditions"][0]["reason"], "TFJobRunning");
  EXPECT_EQ(written["conditions"][0]["message"], "TFJob ns/back is running.");
  EXPECT_EQ(written["replicaStatuses"]["Master"]["active"], 1);
  EXPECT_EQ(written["replicaStatuses"]["Master"]["restarts"], 2);
  EXPECT_FALSE(written["replicaStatuses"].contains("Chief"));
  EXPECT_EQ(written["startTime"], "2026-11-25T10:00:00Z");
  tfjob["status"] = written;
  FieldErrors errors;
  TrainingJob job = DecodeTfJob(tfjob, &errors);
  EXPECT_THAT(errors, IsEmpty());
  EXPECT_EQ(job.kind, "TFJob");
  EXPECT_EQ(job.api_version, "kubeflow.org/v1");
  EXPECT_EQ(job.metadata.uid, "u-9");
  EXPECT_EQ(job.metadata.generation, 3);
  EXPECT_EQ(ToJson(job.status), ToJson(status));  // the round trip is exact
  EXPECT_EQ(BuildJobSecret(job, "s")["metadata"]["ownerReferences"][0]["kind"], "TFJob");

  json bad = tfjob;
  bad["spec"]["tfReplicaSpecs"]["Master"]["replicas"] = 2;
  errors.clear();
  TrainingJob failed = DecodeTfJob(bad, &errors);
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0].path, "spec.tfReplicaSpecs.Master.replicas");
  json unconvertible = tfjob;
  unconvertible["spec"]["tfReplicaSpecs"]["Launcher"] = Replica(1);
  errors.clear();
  failed = DecodeTfJob(unconvertible, &errors);
  ASSERT_FALSE(errors.empty());
  // The status is still read, so that the operator fails the job with the reason in it.
  EXPECT_EQ(failed.metadata.uid, "u-9");
  EXPECT_EQ(ToJson(failed.status), ToJson(status));
}

}  // namespace
}  // namespace kubetrain::api
