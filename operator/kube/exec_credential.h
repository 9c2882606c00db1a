// Bearer tokens from a kubeconfig's exec credential plugin (users[].user.exec), run the way
// client-go runs it (docs/architecture.md §2): the ExecCredential request in
// KUBERNETES_EXEC_INFO, the configured env on top of the process's environment, no terminal, and
// the answer's token cached until its expirationTimestamp or until the API server answers 401.
//
// Only tokens are used: a plugin that answers with a client certificate alone is refused.
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
  std::string token;
  absl::Time expiry = absl::InfiniteFuture();  // no expirationTimestamp: valid until a 401
};

// The ExecCredential request for KUBERNETES_EXEC_INFO: apiVersion, kind, spec.interactive=false
// and, with provideClusterInfo, spec.cluster (server, certificate-authority-data from
// `config.ca_pem`, insecure-skip-tls-verify, and the cluster's exec extension as config).
std::string ExecInfo(const ExecConfig& exec, const ClusterConfig& config);

// Runs the plugin once and decodes its answer. Errors name the command and the kubeconfig user:
// FAILED_PRECONDITION when the command is not found (with its installHint) or not executable,
// UNAVAILABLE when it exits non-zero (with the exit code and the tail of its stderr),
// DEADLINE_EXCEEDED after the timeout, INVALID_ARGUMENT for output that is too large, not an
// ExecCredential of the configured apiVersion, or carries no token, UNIMPLEMENTED for a client
// certificate without a token, CANCELLED when `options.cancelled` became true. The plugin's stderr
// is copied to this process's stderr.
absl::StatusOr<ExecCredential> RunExecPlugin(const ExecConfig& exec, const std::string& exec_info,
                                             const ExecRunOptions& options);

// The token for a cluster whose user has an exec plugin. Thread-safe: one plugin run at a time;
// callers that arrive meanwhile wait for that run and share its result, token or error.
class ExecCredentialProvider {
 public:
  // `config.exec` must be set.
  ExecCredentialProvider(const ClusterConfig& config, ExecRunOptions options = {});

  // The cached token, or a fresh one from the plugin once the cached one is missing, dropped or
  // close to its expiry (the last tenth of its lifetime, at most 10 s before it).
  absl::StatusOr<std::string> Token();
  // Drops the cached token if it is still `rejected` (the API server answered 401 with it), so
  // the next Token() runs the plugin; a token already replaced by another thread is kept.
  void Invalidate(const std::string& rejected);
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
  std::string token_;        // "" when none is cached
  absl::Time refresh_at_ = absl::InfinitePast();
};

}  // namespace kubetrain::kube
