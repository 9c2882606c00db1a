// What the operator and `kubetrain validate|render|run` do with one manifest document, and the
// invariants that must hold along the way.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "operator/api/decode.h"
#include "operator/api/defaults.h"
#include "operator/api/field_errors.h"
#include "operator/api/render.h"
#include "operator/api/tf_config.h"
#include "operator/api/tfjob.h"
#include "operator/api/types.h"
#include "operator/api/validation.h"

namespace kubetrain::fuzz {

inline void ExerciseTrainingJob(const nlohmann::json& doc);

// A Kubeflow TFJob: converted (errors mapped to its own paths), Kubeflow's TF_CONFIG of every
// task read back by kubetrain's parser, the operator's reading of it (DecodeTfJob, TfJobStatus),
// then the TrainingJob it converts to, like any other.
inline void ExerciseTfJob(const nlohmann::json& doc) {
  api::FieldErrors errors;
  api::TfJobConversion converted = api::ConvertTfJob(doc, &errors);
  for (const api::FieldError& e : errors) (void)api::TfJobPath(doc, e.path);
  if (!errors.empty()) return;
  api::FieldErrors validation;
  api::TrainingJob job = api::DecodeAndValidate(converted.training_job, &validation);
  for (const api::FieldError& e : validation) (void)api::TfJobPath(doc, e.path);
  if (!validation.empty()) return;
  // The sparse form of enableDynamicWorker leaves the chief out of the cluster: not checked.
  const bool dynamic = doc["spec"].value("enableDynamicWorker", false) == true;
  for (const auto& [type, spec] : job.spec.replica_specs) {
    for (int i = 0; i < spec.replicas.value_or(1) && !dynamic; ++i) {
      // The Chief came from a Chief or a Master: Kubeflow names its task type after the key.
      std::string reason;
      bool parsed = false;
      for (const std::string& name : type == api::ReplicaType::kChief
                                         ? std::vector<std::string>{"chief", "master"}
                                         : std::vector<std::string>{api::TaskType(type)}) {
        const std::string tf_config = api::KubeflowTfConfig(doc, name, i, "cluster.local");
        absl::StatusOr<api::TfConfig> config = api::ParseTfConfig(tf_config);
        parsed |= tf_config.empty() || config.ok();
        if (!config.ok())
          absl::StrAppend(&reason, tf_config, ": ", config.status().message(), "\n");
      }
      if (!parsed) Fail("Kubeflow's TF_CONFIG does not parse:\n" + reason);
    }
  }
  for (const nlohmann::json& object : api::RenderTfJob(doc, "fuzz", "cluster.local")) {
    (void)object.dump();
  }
  // What the operator reads: the same verdict, and a status it writes reads back unchanged.
  api::FieldErrors decode_errors;
  api::TrainingJob decoded = api::DecodeTfJob(doc, &decode_errors);
  if (!decode_errors.empty()) Fail("DecodeTfJob refuses a TFJob that converts and validates");
  nlohmann::json written = doc;
  written["status"] = api::TfJobStatus(decoded.status, doc);
  api::FieldErrors reread_errors;
  if (api::ToJson(api::DecodeTfJob(written, &reread_errors).status) !=
      api::ToJson(decoded.status)) {
    Fail("a TFJob status the operator writes does not read back the same");
  }
  ExerciseTrainingJob(converted.training_job);
}

inline void ExerciseTrainingJob(const nlohmann::json& doc) {
  if (api::IsTfJob(doc)) return ExerciseTfJob(doc);
  api::FieldErrors errors;
  api::TrainingJob job = api::DecodeAndValidate(doc, &errors);
  // The operator writes status back even for a job it refuses.
  (void)api::ToJson(job).dump();
  if (!errors.empty()) {
    (void)api::ToStatus(errors, "fuzz.yaml");
    return;
  }

  // A valid job encodes to what decodes to the same job: defaults are idempotent and encoding
  // loses nothing the operator reads back on its next pass.
  const nlohmann::json encoded = api::ToJson(job);
  api::FieldErrors again_errors;
  api::TrainingJob again = api::DecodeAndValidate(encoded, &again_errors);
  if (!again_errors.empty()) {
    Fail(absl::StrCat("a valid job's own encoding is invalid: ",
                      api::ToStatus(again_errors, "ToJson(job)").message()));
  }
  if (api::ToJson(again) != encoded) {
    Fail(absl::StrCat("decode(encode(job)) differs:\n", encoded.dump(), "\n",
                      api::ToJson(again).dump()));
  }

  const api::ClusterDnsAddresses dns("cluster.local");
  for (const nlohmann::json& object : api::RenderObjects(job, dns, "fuzz-secret-0123456789")) {
    (void)object.dump();
  }

  const api::LoopbackAddresses loopback([](api::ReplicaType type, int index) {
    return 20000 + 100 * static_cast<int>(type) + index;
  });
  for (const api::Task& task : api::Tasks(job, loopback)) {
    const std::string tf_config =
        api::ToJsonString(api::TfConfigFor(job, loopback, task.type, task.index));
    // Every task reads its TF_CONFIG back with the same parser.
    if (absl::StatusOr<api::TfConfig> parsed = api::ParseTfConfig(tf_config); !parsed.ok()) {
      Fail(absl::StrCat("rendered TF_CONFIG ", tf_config,
                        " does not parse: ", parsed.status().message()));
    }
  }
}

}  // namespace kubetrain::fuzz
