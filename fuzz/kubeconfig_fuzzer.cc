// The credentials a client takes from outside: a kubeconfig file (LoadKubeconfig, with its exec
// block) and an exec plugin's answer (DecodeExecCredential).
//
// Input: one mode byte, then the text. Mode bit 0 clear: the text is a kubeconfig, loaded from a
// file with its current context. Bit 0 set: the text is a plugin's standard output, decoded for
// a client.authentication.k8s.io/v1 plugin (bit 1 set: v1beta1).
//
// Besides sanitizer findings: whatever loads carries no control character in what becomes a
// request's header or URL (the token, the host, the path prefix, the namespace).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "operator/kube/config.h"
#include "operator/kube/exec_credential.h"

namespace {

void ExpectHeaderSafe(const std::string& value, const char* what) {
  if (!kubetrain::kube::RefuseControlCharacters(value, what).ok()) {
    fprintf(stderr, "%s holds a control character but was accepted\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  kubetrain::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace kube = kubetrain::kube;
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((mode & 1) == 0) {
    const std::string path = kubetrain::fuzz::ScratchDir() + "/kubeconfig";
    kubetrain::fuzz::WriteFileOrDie(path, text);
    absl::StatusOr<kube::ClusterConfig> config = kube::LoadKubeconfig(path);
    if (config.ok()) {
      ExpectHeaderSafe(config->token, "token");
      ExpectHeaderSafe(config->host, "host");
      ExpectHeaderSafe(config->path_prefix, "path prefix");
      ExpectHeaderSafe(config->namespace_, "namespace");
    }
    return 0;
  }
  kube::ExecConfig exec;
  exec.api_version =
      (mode & 2) ? "client.authentication.k8s.io/v1beta1" : "client.authentication.k8s.io/v1";
  exec.command = "/usr/local/bin/plugin";
  exec.user = "u";
  exec.source = "kubeconfig";
  absl::StatusOr<kube::ExecCredential> cred = kube::DecodeExecCredential(exec, text);
  if (cred.ok()) ExpectHeaderSafe(cred->token, "token");
  return 0;
}
