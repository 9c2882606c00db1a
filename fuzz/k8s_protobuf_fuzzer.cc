// localkube's decoder of Kubernetes protobuf request bodies (DecodeK8sProtobuf): what kubectl's
// typed clients send for every built-in kind. Checks that a decoded body is an object of the
// envelope's kind that serializes (valid UTF-8 throughout), and that no body is both refused
// and decoded (the server's 415 gate, K8sProtobufDecodable, agrees with the decoder).
//
// Input: a mode byte, then
//   mode even: the whole request body ("k8s\0" + runtime.Unknown), as a client sends it;
//   mode odd: a kind-index byte and the object's message bytes, wrapped in the envelope of
//     that kind (so every schema is reached without finding its apiVersion and kind first).
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "localkube/protobuf.h"
#include "localkube/protobuf_schema.h"
#include "localkube/tests/protobuf_wire.h"

namespace {

namespace localkube = kubetrain::localkube;
using kubetrain::fuzz::Fail;
using kubetrain::localkube::testing::Len;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 2 == 1) {
    if (body.empty()) return 0;
    const auto kinds = localkube::pb::Kinds();
    const localkube::pb::KindRow& row = kinds[static_cast<uint8_t>(body[0]) % kinds.size()];
    body = std::string("k8s\0", 4) + Len(1, Len(1, row.api_version) + Len(2, row.kind)) +
           Len(2, body.substr(1));
  }
  absl::StatusOr<nlohmann::json> decoded = localkube::DecodeK8sProtobuf(body);
  const bool decodable = localkube::K8sProtobufDecodable(body);
  if (!decoded.ok()) {
    if (decoded.status().code() == absl::StatusCode::kUnimplemented && decodable) {
      Fail("a kind without a schema passes the 415 gate");
    }
    if (decoded.status().code() != absl::StatusCode::kUnimplemented &&
        decoded.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("a refusal that is neither 400 nor 415");
    }
    return 0;
  }
  if (!decodable) Fail("a decoded body fails the 415 gate");
  if (!decoded->is_object() || !(*decoded)["kind"].is_string() ||
      !(*decoded)["apiVersion"].is_string()) {
    Fail("a decoded body without its apiVersion and kind");
  }
  // Throws (and so fails) on invalid UTF-8 anywhere in the object.
  (void)decoded->dump();
  return 0;
}
