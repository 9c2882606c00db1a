// TF_CONFIG as kubetrain-ps and kubetrain-worker read it from their environment.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "operator/api/tf_config.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace api = kubetrain::api;
  using kubetrain::fuzz::Fail;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<api::TfConfig> config = api::ParseTfConfig(text);
  if (!config.ok()) return 0;
  (void)config->IsChief();
  (void)config->TaskAddress();
  for (const char* type : {"chief", "ps", "worker", "evaluator", config->task_type.c_str()}) {
    (void)config->Addresses(type);
  }
  // What the operator writes for a config must be accepted by the tasks, unchanged.
  const std::string written = api::ToJsonString(*config);
  absl::StatusOr<api::TfConfig> back = api::ParseTfConfig(written);
  if (!back.ok()) {
    Fail(absl::StrCat("ToJsonString output does not parse: ", back.status().message(), "\n",
                      written));
  }
  if (back->cluster != config->cluster || back->task_type != config->task_type ||
      back->task_index != config->task_index) {
    Fail(absl::StrCat("ToJsonString does not read back the same: ", written));
  }
  return 0;
}
