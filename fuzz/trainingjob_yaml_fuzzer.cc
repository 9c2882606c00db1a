// A TrainingJob manifest as `kubetrain validate|render|run` and kubectl users write it: YAML
// (multi-document), then decode, defaults, validation and rendering of every document.
#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/trainingjob_common.h"
#include "operator/api/yaml.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kubetrain::fuzz::Fail;
  namespace api = kubetrain::api;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<nlohmann::json>> docs = api::ParseYamlDocuments(text);
  if (!docs.ok()) return 0;
  for (const nlohmann::json& doc : *docs) {
    // `kubetrain render` prints what it read with ToYaml: it must read back as the same value.
    const std::string yaml = api::ToYaml(doc);
    absl::StatusOr<std::vector<nlohmann::json>> back = api::ParseYamlDocuments(yaml);
    if (!back.ok()) {
      Fail(absl::StrCat("ToYaml output does not parse: ", back.status().message(), "\n", yaml));
    }
    if (back->size() != 1 || (*back)[0] != doc) {
      Fail(absl::StrCat("ToYaml does not read back the same:\n", doc.dump(), "\n", yaml));
    }
    kubetrain::fuzz::ExerciseTrainingJob(doc);
  }
  return 0;
}
