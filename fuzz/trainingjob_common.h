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
#include "operator/api/types.h"
#include "operator/api/validation.h"

namespace kubetrain::fuzz {

inline void ExerciseTrainingJob(const nlohmann::json& doc) {
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
