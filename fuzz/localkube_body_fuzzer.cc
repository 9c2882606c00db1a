// Request bodies as localkube's HTTP layer hands them to its API: creates (JSON) and the four
// PATCH flavours against a pod and a TrainingJob (whose CRD schema then validates the result),
// and the Kubernetes protobuf bodies kubectl's typed generators send.
//
// Input: a mode byte, then the body. Modes (mode % 11):
//   0 create a pod, 1 create a TrainingJob (JSON body)
//   2-5 patch the pod: json-patch, merge-patch, strategic-merge-patch, apply-patch+yaml
//   6-9 the same four on the TrainingJob
//   10 a Kubernetes protobuf body
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "localkube/api.h"
#include "localkube/protobuf.h"
#include "localkube/resources.h"
#include "localkube/store.h"
#include "operator/api/yaml.h"

namespace {

namespace localkube = kubetrain::localkube;
using kubetrain::fuzz::Fail;
using nlohmann::json;

const char* const kPatchTypes[] = {
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
};

json& Crd() {
  static json crd;
  return crd;
}

json Pod() {
  return json::parse(R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"b"},
    "finalizers":["x/y"]},"spec":{"containers":[{"name":"app","image":"busybox","ports":[
    {"containerPort":80}],"env":[{"name":"A","value":"1"}]},{"name":"side","image":"b"}]}})");
}

json TrainingJob() {
  return json::parse(R"({"apiVersion":"kubetrain.dev/v1","kind":"TrainingJob","metadata":{
    "name":"tj"},"spec":{"replicaSpecs":{"Worker":{"replicas":2,"template":{"spec":{
    "containers":[{"name":"kubetrain","image":"kubetrain/worker"}]}}}}}})");
}

// A fresh server per input, so one input's writes never change how the next one behaves.
struct World {
  localkube::Registry registry;
  localkube::Store store;
  localkube::Api api{&registry, &store};

  World() {
    localkube::Target crds{registry.Find("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
                           "", "", ""};
    absl::StatusOr<json> crd = api.Create(crds, Crd(), {});
    if (!crd.ok()) Fail(absl::StrCat("the TrainingJob CRD is refused: ", crd.status().message()));
    if (!api.Create(Pods(""), Pod(), {}).ok()) Fail("the seed pod is refused");
    if (!api.Create(Jobs(""), TrainingJob(), {}).ok()) Fail("the seed TrainingJob is refused");
  }
  localkube::Target Pods(std::string name) const {
    return {registry.Find("", "v1", "pods"), "default", std::move(name), ""};
  }
  localkube::Target Jobs(std::string name) const {
    return {registry.Find("kubetrain.dev", "v1", "trainingjobs"), "default", std::move(name), ""};
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  absl::StatusOr<std::string> text = kubetrain::api::ReadFileOrStdin(
      std::string(KUBETRAIN_SOURCE_DIR) + "/deploy/crd/kubetrain.dev_trainingjobs.yaml");
  if (!text.ok()) Fail(std::string(text.status().message()));
  absl::StatusOr<std::vector<json>> docs = kubetrain::api::ParseYamlDocuments(*text);
  if (!docs.ok() || docs->size() != 1) Fail("the TrainingJob CRD does not parse");
  Crd() = (*docs)[0];
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 11;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode == 10) {
    (void)localkube::DecodeK8sProtobuf(body);
    return 0;
  }
  World world;
  if (mode < 2) {
    json object = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) return 0;
    (void)world.api.Create(mode == 0 ? world.Pods("") : world.Jobs(""), std::move(object), {});
    return 0;
  }
  const bool pod = mode < 6;
  localkube::WriteOptions options;
  options.field_manager = "fuzz";
  options.field_validation = "Strict";
  bool created = false;
  (void)world.api.Patch(pod ? world.Pods("p") : world.Jobs("tj"), kPatchTypes[(mode - 2) % 4], body,
                        options, &created);
  return 0;
}
