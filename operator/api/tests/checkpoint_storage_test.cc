// spec.checkpoint: decoding, defaults, validation errors, the claim and the chief's pod
// (operator/api/checkpoint_storage.h).
#include "operator/api/checkpoint_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/tests/test_util.h"
#include "operator/api/tfjob.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MinimalJob;
using testing::ValidationErrors;
using testing::ValidJob;

json Template(const std::string& storage = "1Gi") {
  return {{"spec", {{"resources", {{"requests", {{"storage", storage}}}}}}}};
}

json WithCheckpoint(json checkpoint, bool chief = false) {
  json doc = MinimalJob(1, 2, chief);
  doc["spec"]["checkpoint"] = std::move(checkpoint);
  return doc;
}

const json& Container(const json& pod) { return pod["spec"]["containers"][0]; }

std::string Env(const json& pod, const std::string& name) {
  for (const json& e : Container(pod).value("env", json::array())) {
    if (e["name"] == name) return e.value("value", "");
  }
  return "<unset>";
}

json Pod(const TrainingJob& job, ReplicaType type, int index) {
  return BuildPod(job, type, index, ClusterDnsAddresses());
}

TEST(CheckpointDecode, DefaultsMountPathAndDeleteForACreatedClaim) {
  TrainingJob job = ValidJob(WithCheckpoint({{"volumeClaimTemplate", Template()}}));
  ASSERT_TRUE(job.spec.checkpoint.has_value());
  EXPECT_EQ(job.spec.checkpoint->mount_path, "/var/lib/kubetrain/checkpoints");
  EXPECT_EQ(job.spec.checkpoint->reclaim_policy, ReclaimPolicy::kDelete);
  EXPECT_EQ(ToJson(job.spec)["checkpoint"], json({{"volumeClaimTemplate", Template()},
                                                  {"mountPath", "/var/lib/kubetrain/checkpoints"},
                                                  {"reclaimPolicy", "Delete"}}));

  TrainingJob existing = ValidJob(WithCheckpoint({{"claimName", "shared-ckpt"}}));
  EXPECT_EQ(existing.spec.checkpoint->claim_name, "shared-ckpt");
  EXPECT_FALSE(existing.spec.checkpoint->reclaim_policy.has_value());
}

TEST(CheckpointDecode, WrongTypesAndUnknownFieldsNameTheField) {
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"claimName", "c"}, {"mountPath", 5}})),
              ElementsAre("spec.checkpoint.mountPath: must be a string, got 5"));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"claimName", "c"}, {"claim", "x"}})),
              ElementsAre("spec.checkpoint.claim: unknown field; allowed: claimName, "
                          "volumeClaimTemplate, mountPath, reclaimPolicy"));
  EXPECT_THAT(
      ValidationErrors(
          WithCheckpoint({{"volumeClaimTemplate", Template()}, {"reclaimPolicy", "Keep"}})),
      ElementsAre("spec.checkpoint.reclaimPolicy: unsupported value \"Keep\"; allowed: Delete, "
                  "Retain"));
  EXPECT_THAT(ValidationErrors(WithCheckpoint("pvc")),
              ElementsAre("spec.checkpoint: must be an object, got \"pvc\""));
}

TEST(CheckpointValidation, StorageRequestIsRequired) {
  json tmpl = {{"spec", {{"accessModes", {"ReadWriteOnce"}}}}};
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"volumeClaimTemplate", tmpl}})),
              ElementsAre("spec.checkpoint.volumeClaimTemplate.spec.resources.requests.storage: "
                          "required: the size of the claim, e.g. \"1Gi\""));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"volumeClaimTemplate", json::object()}})),
              ElementsAre("spec.checkpoint.volumeClaimTemplate.spec: required: a "
                          "PersistentVolumeClaim spec with resources.requests.storage"));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"volumeClaimTemplate", Template("lots")}})),
              ElementsAre("spec.checkpoint.volumeClaimTemplate.spec.resources.requests.storage: "
                          "must be a quantity such as \"1Gi\" or \"500Mi\", got \"lots\""));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"volumeClaimTemplate", Template("0Gi")}})),
              ElementsAre("spec.checkpoint.volumeClaimTemplate.spec.resources.requests.storage: "
                          "must be greater than zero, got \"0Gi\""));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"volumeClaimTemplate", Template("1.5Gi")}})),
              ::testing::IsEmpty());
}

TEST(CheckpointValidation, OneClaimSourceAndAWritableMode) {
  EXPECT_THAT(ValidationErrors(WithCheckpoint(json::object())),
              ElementsAre(HasSubstr("spec.checkpoint: set claimName (an existing "
                                    "PersistentVolumeClaim) or volumeClaimTemplate")));
  EXPECT_THAT(
      ValidationErrors(WithCheckpoint({{"claimName", "c"}, {"volumeClaimTemplate", Template()}})),
      ElementsAre(HasSubstr("spec.checkpoint.claimName: set claimName or "
                            "volumeClaimTemplate, not both")));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"claimName", "c"}, {"reclaimPolicy", "Delete"}})),
              ElementsAre(HasSubstr("spec.checkpoint.reclaimPolicy: Delete applies to a claim the "
                                    "operator creates")));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"claimName", "Bad_Name"}})),
              ElementsAre(HasSubstr("spec.checkpoint.claimName: must be a PersistentVolumeClaim "
                                    "name")));
  json read_only = Template();
  read_only["spec"]["accessModes"] = {"ReadOnlyMany"};
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"volumeClaimTemplate", read_only}})),
              ElementsAre(HasSubstr("spec.checkpoint.volumeClaimTemplate.spec.accessModes: the "
                                    "chief writes its checkpoints there")));
  json named = Template();
  named["metadata"] = {{"name", "mine"}};
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"volumeClaimTemplate", named}})),
              ElementsAre(HasSubstr("spec.checkpoint.volumeClaimTemplate.metadata.name: not "
                                    "allowed")));
  EXPECT_THAT(ValidationErrors(WithCheckpoint({{"claimName", "c"}, {"mountPath", "ckpt"}})),
              ElementsAre(HasSubstr("spec.checkpoint.mountPath: must be an absolute path")));
}

TEST(CheckpointValidation, TheChiefMustNotSetItsOwnCheckpointDir) {
  json doc = WithCheckpoint({{"claimName", "c"}});
  doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["args"] = {
      "--checkpoint-dir=/tmp/ckpt"};
  EXPECT_THAT(ValidationErrors(doc),
              ElementsAre(HasSubstr("spec.replicaSpecs.Worker.template.spec.containers[0]: sets "
                                    "the checkpoint directory (--checkpoint-dir or "
                                    "KUBETRAIN_CHECKPOINT_DIR), which spec.checkpoint sets to "
                                    "/var/lib/kubetrain/checkpoints/mnist on the claim")));
}

TEST(CheckpointRender, OnlyTheChiefMountsTheClaimAndCheckpointsOnIt) {
  TrainingJob job = ValidJob(WithCheckpoint({{"volumeClaimTemplate", Template()}}));
  json chief = Pod(job, ReplicaType::kWorker, 0);
  EXPECT_THAT(chief["spec"]["volumes"],
              Contains(json({{"name", "kubetrain-checkpoint"},
                             {"persistentVolumeClaim", {{"claimName", "mnist-checkpoint"}}}})));
  EXPECT_THAT(Container(chief)["volumeMounts"],
              Contains(json({{"name", "kubetrain-checkpoint"},
                             {"mountPath", "/var/lib/kubetrain/checkpoints"}})));
  EXPECT_EQ(Env(chief, "KUBETRAIN_CHECKPOINT_DIR"), "/var/lib/kubetrain/checkpoints/mnist");
  EXPECT_EQ(Env(chief, "KUBETRAIN_CHECKPOINT_DURABLE"), "true");
  for (const json& pod : {Pod(job, ReplicaType::kWorker, 1), Pod(job, ReplicaType::kPS, 0)}) {
    EXPECT_FALSE(pod["spec"].contains("volumes")) << pod["metadata"]["name"];
    EXPECT_EQ(Env(pod, "KUBETRAIN_CHECKPOINT_DIR"), "<unset>");
  }

  TrainingJob with_chief =
      ValidJob(WithCheckpoint({{"claimName", "team-ckpt"}, {"mountPath", "/ckpt"}}, true));
  json pod = Pod(with_chief, ReplicaType::kChief, 0);
  EXPECT_EQ(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "team-ckpt");
  EXPECT_EQ(Env(pod, "KUBETRAIN_CHECKPOINT_DIR"), "/ckpt/mnist");
  EXPECT_FALSE(Pod(with_chief, ReplicaType::kWorker, 0)["spec"].contains("volumes"));
}

TEST(CheckpointRender, AChiefWithoutAClaimIsMarkedNotDurable) {
  TrainingJob plain = ValidJob(MinimalJob(1, 2));
  EXPECT_EQ(Env(Pod(plain, ReplicaType::kWorker, 0), "KUBETRAIN_CHECKPOINT_DURABLE"), "false");
  EXPECT_EQ(Env(Pod(plain, ReplicaType::kWorker, 1), "KUBETRAIN_CHECKPOINT_DURABLE"), "<unset>");

  // The user's own volume: durable when --checkpoint-dir is on a persistentVolumeClaim mount.
  json doc = MinimalJob(1, 2);
  json& spec = doc["spec"]["replicaSpecs"]["Worker"]["template"]["spec"];
  spec["volumes"] = {{{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "mine"}}}},
                     {{"name", "scratch"}, {"emptyDir", json::object()}}};
  spec["containers"][0]["volumeMounts"] = {{{"name", "ckpt"}, {"mountPath", "/ckpt"}},
                                           {{"name", "scratch"}, {"mountPath", "/scratch"}}};
  spec["containers"][0]["args"] = {"--checkpoint-dir", "/ckpt/run1"};
  EXPECT_EQ(Env(Pod(ValidJob(doc), ReplicaType::kWorker, 0), "KUBETRAIN_CHECKPOINT_DURABLE"),
            "true");
  spec["containers"][0]["args"] = {"--checkpoint-dir=/scratch/run1"};
  EXPECT_EQ(Env(Pod(ValidJob(doc), ReplicaType::kWorker, 0), "KUBETRAIN_CHECKPOINT_DURABLE"),
            "false");
  spec["containers"][0]["args"] = {"--checkpoint-dir=/ckptx"};
  EXPECT_EQ(Env(Pod(ValidJob(doc), ReplicaType::kWorker, 0), "KUBETRAIN_CHECKPOINT_DURABLE"),
            "false");
}

TEST(CheckpointClaim, OwnedByTheJobUnlessRetained) {
  json doc = WithCheckpoint({{"volumeClaimTemplate", Template()}});
  doc["metadata"]["uid"] = "uid-1";
  doc["spec"]["checkpoint"]["volumeClaimTemplate"]["metadata"] = {{"labels", {{"team", "a"}}}};
  json claim = BuildCheckpointClaim(ValidJob(doc));
  EXPECT_EQ(claim["kind"], "PersistentVolumeClaim");
  EXPECT_EQ(claim["metadata"]["name"], "mnist-checkpoint");
  EXPECT_EQ(claim["metadata"]["namespace"], "kubeflow");
  EXPECT_EQ(claim["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(claim["metadata"]["labels"]["kubetrain.dev/job-name"], "mnist");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["kind"], "TrainingJob");
  EXPECT_EQ(claim["spec"]["accessModes"], json({"ReadWriteOnce"}));
  EXPECT_EQ(claim["spec"]["resources"]["requests"]["storage"], "1Gi");

  doc["spec"]["checkpoint"]["reclaimPolicy"] = "Retain";
  EXPECT_FALSE(BuildCheckpointClaim(ValidJob(doc))["metadata"].contains("ownerReferences"));
}

json TfJobDoc(json annotations, json volumes = json()) {
  json container = {{"name", "tensorflow"}, {"image", "tf/dist-mnist:1"}};
  json pod_spec = {{"containers", json::array({container})}};
  if (!volumes.is_null()) {
    pod_spec["volumes"] = volumes;
    pod_spec["containers"][0]["volumeMounts"] = {{{"name", "ckpt"}, {"mountPath", "/train"}}};
  }
  json rs = {{"replicas", 2}, {"template", {{"spec", pod_spec}}}};
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", "dist"}, {"namespace", "ns"}, {"annotations", annotations}}},
          {"spec", {{"tfReplicaSpecs", {{"Worker", rs}}}}}};
}

TEST(CheckpointTfJob, TheChiefMountsTheAnnotatedClaimOrItsOwnVolume) {
  json pod = TfJobPod(TfJobDoc({{"kubetrain.dev/checkpoint-claim", "dist-ckpt"}}),
                      ReplicaType::kWorker, 0, "");
  EXPECT_EQ(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "dist-ckpt");
  EXPECT_EQ(Env(pod, "KUBETRAIN_CHECKPOINT_DIR"), "/var/lib/kubetrain/checkpoints/dist");
  EXPECT_EQ(Env(pod, "KUBETRAIN_CHECKPOINT_DURABLE"), "true");
  EXPECT_FALSE(TfJobPod(TfJobDoc({{"kubetrain.dev/checkpoint-claim", "dist-ckpt"}}),
                        ReplicaType::kWorker, 1, "")["spec"]
                   .contains("volumes"));

  EXPECT_EQ(Env(TfJobPod(TfJobDoc(json::object()), ReplicaType::kWorker, 0, ""),
                "KUBETRAIN_CHECKPOINT_DURABLE"),
            "false");
  // A TensorFlow program's checkpoint directory is its own flag: a claim it mounts counts.
  json own = {{{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "mine"}}}}};
  EXPECT_EQ(Env(TfJobPod(TfJobDoc(json::object(), own), ReplicaType::kWorker, 0, ""),
                "KUBETRAIN_CHECKPOINT_DURABLE"),
            "true");
  json scratch = {{{"name", "ckpt"}, {"emptyDir", json::object()}}};
  EXPECT_EQ(Env(TfJobPod(TfJobDoc(json::object(), scratch), ReplicaType::kWorker, 0, ""),
                "KUBETRAIN_CHECKPOINT_DURABLE"),
            "false");
}

}  // namespace
}  // namespace kubetrain::api
