#include "operator/api/render.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "operator/api/decode.h"
#include "operator/api/tests/test_util.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;
using testing::MinimalJob;
using testing::ValidJob;

std::string EnvOf(const json& pod, const std::string& name) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == name) return e["value"];
  }
  return "<unset>";
}

TEST(TfConfigGolden, PsAndWorkersWithoutChief) {
  TrainingJob job = ValidJob(MinimalJob(2, 2));
  ClusterDnsAddresses dns;
  EXPECT_EQ(
      ToJsonString(TfConfigFor(job, dns, ReplicaType::kWorker, 1)),
      R"({"cluster":{"ps":["mnist-ps-0.mnist.kubeflow.svc:2222",)"
      R"("mnist-ps-1.mnist.kubeflow.svc:2222"],"worker":["mnist-worker-0.mnist.kubeflow.svc:2222",)"
      R"("mnist-worker-1.mnist.kubeflow.svc:2222"]},"task":{"type":"worker","index":1}})");
  EXPECT_EQ(
      ToJsonString(TfConfigFor(job, dns, ReplicaType::kPS, 0)),
      R"({"cluster":{"ps":["mnist-ps-0.mnist.kubeflow.svc:2222",)"
      R"("mnist-ps-1.mnist.kubeflow.svc:2222"],"worker":["mnist-worker-0.mnist.kubeflow.svc:2222",)"
      R"("mnist-worker-1.mnist.kubeflow.svc:2222"]},"task":{"type":"ps","index":0}})");
}

TEST(TfConfigGolden, ChiefAndEvaluatorEvaluatorOnlyInTask) {
  TrainingJob job = ValidJob(MinimalJob(2, 2, /*chief=*/true, /*evaluator=*/true));
  ClusterDnsAddresses dns;
  const std::string cluster =
      R"({"cluster":{"chief":["mnist-chief-0.mnist.kubeflow.svc:2222"],)"
      R"("ps":["mnist-ps-0.mnist.kubeflow.svc:2222","mnist-ps-1.mnist.kubeflow.svc:2222"],)"
      R"("worker":["mnist-worker-0.mnist.kubeflow.svc:2222","mnist-worker-1.mnist.kubeflow.svc:2222"]},)";
  EXPECT_EQ(ToJsonString(TfConfigFor(job, dns, ReplicaType::kWorker, 1)),
            cluster + R"("task":{"type":"worker","index":1}})");
  EXPECT_EQ(ToJsonString(TfConfigFor(job, dns, ReplicaType::kEvaluator, 0)),
            cluster + R"("task":{"type":"evaluator","index":0}})");
  EXPECT_EQ(ToJsonString(TfConfigFor(job, dns, ReplicaType::kChief, 0)),
            cluster + R"("task":{"type":"chief","index":0}})");
}

TEST(TfConfigGolden, ManyPsAndCustomDomainAndPort) {
  json doc = MinimalJob(5, 1, false, false, "big", "team-a");
  doc["spec"]["replicaSpecs"]["PS"]["template"]["spec"]["containers"][0]["ports"] =
      json::parse(R"([{"name":"kubetrain","containerPort":5000}])");
  TrainingJob job = ValidJob(doc);
  ClusterDnsAddresses dns("cluster.local");
  EXPECT_EQ(
      ToJsonString(TfConfigFor(job, dns, ReplicaType::kPS, 4)),
      R"({"cluster":{"ps":["big-ps-0.big.team-a.svc.cluster.local:5000",)"
      R"("big-ps-1.big.team-a.svc.cluster.local:5000","big-ps-2.big.team-a.svc.cluster.local:5000",)"
      R"("big-ps-3.big.team-a.svc.cluster.local:5000","big-ps-4.big.team-a.svc.cluster.local:5000"],)"
      R"("worker":["big-worker-0.big.team-a.svc.cluster.local:2222"]},"task":{"type":"ps","index":4}})");
}

TEST(TfConfigGolden, LoopbackAddressesForLocalRuns) {
  TrainingJob job = ValidJob(MinimalJob(1, 2));
  LoopbackAddresses local([](ReplicaType t, int i) { return 30000 + 10 * int(t) + i; });
  EXPECT_EQ(
      ToJsonString(TfConfigFor(job, local, ReplicaType::kWorker, 0)),
      R"({"cluster":{"ps":["127.0.0.1:30010"],"worker":["127.0.0.1:30020","127.0.0.1:30021"]},)"
      R"("task":{"type":"worker","index":0}})");
}

TEST(Tasks, OrderedByTypeWithChiefMarked) {
  TrainingJob job = ValidJob(MinimalJob(1, 2, false, true));
  ClusterDnsAddresses dns;
  std::vector<Task> tasks = Tasks(job, dns);
  ASSERT_EQ(tasks.size(), 4u);
  EXPECT_EQ(tasks[0].name, "mnist-ps-0");
  EXPECT_EQ(tasks[1].name, "mnist-worker-0");
  EXPECT_TRUE(tasks[1].chief);
  EXPECT_FALSE(tasks[2].chief);
  EXPECT_EQ(tasks[3].name, "mnist-evaluator-0");
  EXPECT_EQ(tasks[1].restart_policy, RestartPolicy::kExitCode);
  EXPECT_EQ(tasks[0].restart_policy, RestartPolicy::kOnFailure);
}

TEST(Tasks, ChiefReplicaIsTheChiefNotWorkerZero) {
  TrainingJob job = ValidJob(MinimalJob(1, 2, true));
  EXPECT_TRUE(IsChief(job, ReplicaType::kChief, 0));
  EXPECT_FALSE(IsChief(job, ReplicaType::kWorker, 0));
}

TEST(PodBuilder, NamesLabelsEnvAndAnnotations) {
  json doc = MinimalJob(1, 2);
  doc["metadata"]["uid"] = "1234-abcd";
  json& c = doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
  c["env"] = json::parse(R"([{"name":"EXTRA","value":"x"},{"name":"TF_CONFIG","value":"stale"}])");
  doc["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"] = {{"labels", {{"team", "v"}}}};
  TrainingJob job = ValidJob(doc);
  ClusterDnsAddresses dns;
  json pod = BuildPod(job, ReplicaType::kWorker, 1, dns);

  EXPECT_EQ(pod["metadata"]["name"], "mnist-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "kubeflow");
  EXPECT_EQ(pod["metadata"]["labels"], json::parse(R"({
      "app.kubernetes.io/managed-by":"kubetrain-operator","kubetrain.dev/job-name":"mnist",
      "kubetrain.dev/replica-index":"1","kubetrain.dev/replica-type":"worker","team":"v"})"));
  EXPECT_EQ(pod["metadata"]["annotations"], json::parse(R"({"prometheus.io/scrape":"true",
      "prometheus.io/port":"8080","prometheus.io/path":"/metrics"})"));
  EXPECT_EQ(pod["metadata"]["ownerReferences"], json::parse(R"([{"apiVersion":"kubetrain.dev/v1",
      "kind":"TrainingJob","name":"mnist","uid":"1234-abcd","controller":true,
      "blockOwnerDeletion":true}])"));
  EXPECT_EQ(pod["spec"]["hostname"], "mnist-worker-1");
  EXPECT_EQ(pod["spec"]["subdomain"], "mnist");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(EnvOf(pod, "EXTRA"), "x");
  EXPECT_EQ(EnvOf(pod, "TF_CONFIG"), ToJsonString(TfConfigFor(job, dns, ReplicaType::kWorker, 1)));
  EXPECT_EQ(EnvOf(pod, "KUBETRAIN_JOB_NAME"), "mnist");
  EXPECT_EQ(EnvOf(pod, "KUBETRAIN_REPLICA_TYPE"), "worker");
  EXPECT_EQ(EnvOf(pod, "KUBETRAIN_REPLICA_INDEX"), "1");
  // Servers bind the wildcard in the pod's own network namespace: no bind address is set.
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    EXPECT_NE(e.value("name", ""), "KUBETRAIN_BIND_ADDRESS");
  }
  EXPECT_EQ(pod["spec"]["containers"][0]["env"].size(), 6u);
}

// A spec field that the worker reads as a flag reaches every task as that flag's variable;
// unset, the variable is not set and the worker's default holds.
struct SpecVariable {
  const char* field;
  json value;
  const char* variable;
  const char* want;
};

class SpecVariableTest : public ::testing::TestWithParam<SpecVariable> {};

TEST_P(SpecVariableTest, ReachesEveryTaskAndIsUnsetWithoutTheField) {
  const SpecVariable& p = GetParam();
  json doc = MinimalJob(1, 3);
  doc["spec"][p.field] = p.value;
  TrainingJob job = ValidJob(doc);
  ClusterDnsAddresses dns;
  for (const Task& t : Tasks(job, dns)) {
    EXPECT_EQ(EnvOf(BuildPod(job, t.type, t.index, dns), p.variable), p.want) << t.name;
  }
  EXPECT_EQ(EnvOf(BuildPod(ValidJob(MinimalJob(1, 3)), ReplicaType::kWorker, 0, dns), p.variable),
            "<unset>");
}

// spec.backupWorkers is the worker's --backup-workers; spec.gradientCompression its
// --gradient-compression.
INSTANTIATE_TEST_SUITE_P(PodBuilder, SpecVariableTest,
                         ::testing::Values(SpecVariable{"backupWorkers", 1,
                                                        "KUBETRAIN_BACKUP_WORKERS", "1"},
                                           SpecVariable{"gradientCompression", "bf16",
                                                        "KUBETRAIN_GRADIENT_COMPRESSION", "bf16"}),
                         [](const ::testing::TestParamInfo<SpecVariable>& info) {
                           return std::string(info.param.field);
                         });

// spec.elastic: every container of every task learns that its Workers come and go, and each
// pod's TF_CONFIG is still the job's cluster at the time it is rendered.
TEST(PodBuilder, ElasticReachesEveryContainerOfEveryTask) {
  json doc = MinimalJob(1, 2, /*chief=*/true, /*evaluator=*/true);
  doc["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 4}};
  json sidecar = {{"name", "sidecar"}, {"image", "busybox"}};
  doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"].push_back(sidecar);
  TrainingJob job = ValidJob(doc);
  ClusterDnsAddresses dns;
  for (const Task& t : Tasks(job, dns)) {
    json pod = BuildPod(job, t.type, t.index, dns);
    for (const json& c : pod["spec"]["containers"]) {
      bool set = false;
      for (const json& e : c["env"]) set |= e["name"] == "KUBETRAIN_ELASTIC" && e["value"] == "1";
      EXPECT_TRUE(set) << t.name << " " << c["name"];
    }
    EXPECT_EQ(EnvOf(pod, "TF_CONFIG"), ToJsonString(TfConfigFor(job, dns, t.type, t.index)));
    // The smallest the job may get, in training workers: minReplicas Workers and the Chief.
    EXPECT_EQ(EnvOf(pod, "KUBETRAIN_ELASTIC_MIN_WORKERS"), "2") << t.name;
  }
  EXPECT_EQ(EnvOf(BuildPod(ValidJob(MinimalJob(1, 2)), ReplicaType::kWorker, 0, dns),
                  "KUBETRAIN_ELASTIC"),
            "<unset>");
}

TEST(PodBuilder, ChiefCarriesJobRoleLabel) {
  TrainingJob job = ValidJob(MinimalJob(1, 2));
  ClusterDnsAddresses dns;
  EXPECT_EQ(
      BuildPod(job, ReplicaType::kWorker, 0, dns)["metadata"]["labels"]["kubetrain.dev/job-role"],
      "chief");
  EXPECT_FALSE(BuildPod(job, ReplicaType::kWorker, 1, dns)["metadata"]["labels"].contains(
      "kubetrain.dev/job-role"));
}

TEST(PodBuilder, NoOwnerReferenceBeforeTheJobHasAUid) {
  TrainingJob job = ValidJob(MinimalJob(1, 1));
  ClusterDnsAddresses dns;
  EXPECT_FALSE(BuildPod(job, ReplicaType::kPS, 0, dns)["metadata"].contains("ownerReferences"));
}

TEST(ServiceBuilder, OneHeadlessServicePerJob) {
  TrainingJob job = ValidJob(MinimalJob(3, 4, true));
  json svc = BuildService(job);
  EXPECT_EQ(svc, json::parse(R"({"apiVersion":"v1","kind":"Service",
    "metadata":{"name":"mnist","namespace":"kubeflow","labels":{
      "app.kubernetes.io/managed-by":"kubetrain-operator","kubetrain.dev/job-name":"mnist"}},
    "spec":{"clusterIP":"None","publishNotReadyAddresses":true,
      "selector":{"kubetrain.dev/job-name":"mnist"},
      "ports":[{"name":"kubetrain","port":2222,"targetPort":2222,"protocol":"TCP"}]}})"));
}

TEST(RenderObjects, SecretServiceThenEveryPod) {
  TrainingJob job = ValidJob(MinimalJob(2, 3, true, true));
  ClusterDnsAddresses dns;
  std::vector<json> objects = RenderObjects(job, dns, "s3cret-token-0123456789");
  ASSERT_EQ(objects.size(), 1u + 1 + 1 + 2 + 3 + 1);
  EXPECT_EQ(objects[0]["kind"], "Secret");
  EXPECT_EQ(objects[1]["kind"], "Service");
  EXPECT_EQ(objects[2]["metadata"]["name"], "mnist-chief-0");
  EXPECT_EQ(objects.back()["metadata"]["name"], "mnist-evaluator-0");
}

// Every container gets the job's secret from the job's own Secret, never as a literal value (a
// literal would show in `kubectl get pod -o yaml` to anyone who may read pods).
TEST(BuildJobSecret, OneSecretPerJobReadByEveryContainer) {
  TrainingJob job = ValidJob(MinimalJob(2, 3, true, true));
  job.metadata.uid = "uid-1";
  json secret = BuildJobSecret(job, "s3cret-token-0123456789");
  EXPECT_EQ(secret["metadata"]["name"], "mnist-job-secret");
  EXPECT_EQ(secret["metadata"]["namespace"], "kubeflow");
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(secret["metadata"]["labels"]["kubetrain.dev/job-name"], "mnist");
  EXPECT_EQ(secret["data"]["token"], "czNjcmV0LXRva2VuLTAxMjM0NTY3ODk=");
  ClusterDnsAddresses dns;
  for (const Task& t : Tasks(job, dns)) {
    json pod = BuildPod(job, t.type, t.index, dns);
    for (const json& c : pod["spec"]["containers"]) {
      json want = {
          {"name", "KUBETRAIN_JOB_SECRET"},
          {"valueFrom", {{"secretKeyRef", {{"name", "mnist-job-secret"}, {"key", "token"}}}}}};
      EXPECT_NE(std::find(c["env"].begin(), c["env"].end(), want), c["env"].end()) << c.dump();
    }
  }
}

}  // namespace
}  // namespace kubetrain::api
