// A TrainingJob as the operator receives it from the API server: a JSON body, then decode,
// defaults, validation and rendering (operator/kube/client.cc, operator/controller).
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "fuzz/trainingjob_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc = nlohmann::json::parse(data, data + size, nullptr,
                                                   /*allow_exceptions=*/false);
  if (doc.is_discarded()) return 0;
  kubetrain::fuzz::ExerciseTrainingJob(doc);
  return 0;
}
