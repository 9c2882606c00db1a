// Credentials from a kubeconfig's exec credential plugin (users[].user.exec), run the way
// client-go runs it (docs/architecture.md §2): the ExecCredential request in
// KUBERNETES_EXEC_INFO, the configured env on top of the process's environment, no terminal, and
// the answer cached until its expirationTimestamp or until the API server answers 401.
//
// The answer is a bearer token (status.token), a TLS client certificate and its key
// (status.clientCertificateData and status.clientKeyData, PEM), or both; the client sends
// whatever the plugin returned.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/kube/config.h"

namespace kubetrain::kube {

struct ExecRunOptions {
  // After this the plugin's process group is killed and the run fails with DEADLINE_EXCEEDED.
  absl::Duration timeout = absl::Seconds(60);
  size_t max_output = 1 << 20;  // stdout beyond this fails the run
  // Polled while the plugin runs (and while waiting for another thread's run): once true, the
  // plugin's process group is killed and the call returns CANCELLED. Not owned; may be null.
  const std::atomic<bool>* cancelled = nullptr;
};

struct ExecCredential {
  std::string token;  // "" when the plugin returned only a client certificate
  // PEM: the certificate (possibly followed by its intermediates) and its private key; both ""
  // when the plugin returned only a token. Validated: they parse and the key is the
  // certificate's.
  std::string client_cert_pem;
  std::string client_key_pem;
  absl::Time expiry = absl::InfiniteFuture();  // no expirationTimestamp: valid until a 401
};

// The ExecCredential request for KUBERNETES_EXEC_INFO: apiVersion, kind, spec.interactive=false
// and, with provideClusterInfo, spec.cluster (server, certificate-authority-data from
// `config.ca_pem`, insecure-skip-tls-verify, and the cluster's exec extension as config).
std::string ExecInfo(const ExecConfig& exec, const ClusterConfig& config);

// Decodes a plugin's standard output: an ExecCredential of `exec.api_version` with a token
// (no control characters: it becomes a header), a client certificate and key that parse and
// match, or both, and an optional RFC 3339 expirationTimestamp. INVALID_ARGUMENT naming the
// plugin and the field otherwise.
absl::StatusOr<ExecCredential> DecodeExecCredential(const ExecConfig& exec, const std::string& out);

// Runs the plugin once and decodes its answer. Errors name the command and the kubeconfig user:
// FAILED_PRECONDITION when the command is not found (with its installHint) or not executable,
// UNAVAILABLE when it exits non-zero (with the exit code and the tail of its stderr),
// DEADLINE_EXCEEDED after the timeout, INVALID_ARGUMENT for output that is too large, not an
// ExecCredential of the configured apiVersion, carrying neither a token nor a client certificate,
// a certificate without a key (or a key without one), PEM that does not parse, or a key that is
// not the certificate's, CANCELLED when `options.cancelled` became true. The plugin's stderr is
// copied to this process's stderr.
absl::StatusOr<ExecCredential> RunExecPlugin(const ExecConfig& exec, const std::string& exec_info,
                                             const ExecRunOptions& options);

// The credential for a cluster whose user has an exec plugin. Thread-safe: one plugin run at a
// time; callers that arrive meanwhile wait for that run and share its result, credential or error.
class ExecCredentialProvider {
 public:
  // What the plugin returned last, as the client uses it.
  struct Credential {
    std::string token;            // "" when the plugin returned none
    std::string client_cert_pem;  // with client_key_pem; both "" when the plugin returned none
    std::string client_key_pem;
    // Identifies this answer of the plugin, for Invalidate.
    int64_t serial = 0;
    // Changes exactly when a plugin answer carries a different certificate/key pair than the
    // answer before it (a new pair, or a pair given or taken away): TLS connections made with
    // another generation's pair are not to be reused. 0 before the plugin returned a pair.
    int64_t cert_generation = 0;
  };

  // `config.exec` must be set.
  ExecCredentialProvider(const ClusterConfig& config, ExecRunOptions options = {});

  // The cached credential, or a fresh one from the plugin once the cached one is missing, dropped
  // or close to its expiry (the last tenth of its lifetime, at most 10 s before it).
  absl::StatusOr<Credential> Get();
  // Get()'s token ("" for a plugin that returns only a client certificate).
  absl::StatusOr<std::string> Token();
  // Drops the cached credential if it is still the answer `rejected` came from (the API server
  // answered 401 to it), so the next Get() runs the plugin; an answer already replaced by another
  // thread is kept.
  void Invalidate(const Credential& rejected);
  // The generation of the certificate/key pair cached now (Credential::cert_generation).
  int64_t cert_generation() const;
  // How many times the plugin was started.
  int64_t runs() const;

 private:
  bool Cancelled() const;

  const ExecConfig exec_;
  const std::string exec_info_;
  const ExecRunOptions options_;
  mutable std::mutex mu_;
  std::condition_variable done_;
  bool running_ = false;     // a plugin run is in progress (by a thread without mu_)
  int64_t runs_ = 0;         // runs started
  absl::Status last_error_;  // the result of the last run when it failed
  bool cached_ = false;      // credential_ holds a usable answer
  Credential credential_;    // the last answer; its pair is kept after Invalidate for comparison
  absl::Time refresh_at_ = absl::InfinitePast();
};

}  // namespace kubetrain::kube
