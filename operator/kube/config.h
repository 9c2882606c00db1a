// Where the API server is and how to authenticate: from a kubeconfig file or, inside a pod, from
// the service-account files (docs/architecture.md §2).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kubetrain::kube {

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// A kubeconfig user's credential plugin (users[].user.exec), as kubectl runs it: a command that
// prints a client.authentication.k8s.io ExecCredential with a bearer token, a client
// certificate, or both (exec_credential.h).
struct ExecConfig {
  std::string api_version;  // client.authentication.k8s.io/v1 or /v1beta1
  // An absolute path when the kubeconfig named one with a '/' (relative ones resolve against the
  // kubeconfig's folder); otherwise a name looked up in PATH when the plugin runs.
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the process's environment
  std::string install_hint;                              // shown when the command is not found
  bool provide_cluster_info = false;                     // pass the cluster in KUBERNETES_EXEC_INFO
  std::string interactive_mode;  // "Never" or "IfAvailable": the plugin never gets a terminal
  std::string cluster_server;    // the cluster's server URL as written
  // The cluster's extensions entry "client.authentication.k8s.io/exec", as JSON; "" when absent.
  std::string cluster_config_json;
  std::string user;    // the kubeconfig user, for errors
  std::string source;  // the kubeconfig file, for errors
};

struct ClusterConfig {
  std::string scheme = "https";  // "https" or "http"
  std::string host;
  int port = 443;
  std::string path_prefix;  // e.g. "/k8s/clusters/c-1" behind a proxy; usually empty
  std::string token;        // static bearer token
  std::string token_file;   // re-read at most once a minute (bound service-account tokens)
  // Set only when the user has no token, token file or client certificate: as in client-go,
  // those take precedence over the plugin.
  std::optional<ExecConfig> exec;
  std::string ca_pem;     // trusted CA certificates; empty: the system's
  std::string ca_source;  // where ca_pem came from, for TLS errors ("" = the system's CAs)
  std::string client_cert_pem;
  std::string client_key_pem;
  bool insecure_skip_tls_verify = false;
  std::string namespace_ = "default";
  std::string source;  // "kubeconfig /root/.kube/config (context x)" or "in-cluster", for logs
};

// Reads a kubeconfig; `context` empty means current-context. Relative file paths in it are
// resolved against the kubeconfig's folder. Errors name the file and the missing piece.
absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path,
                                             const std::string& context = "");

// The pod's service account: KUBERNETES_SERVICE_HOST/PORT, token, ca.crt and namespace under
// `dir`. FAILED_PRECONDITION outside a pod.
absl::StatusOr<ClusterConfig> LoadInClusterConfig(const std::string& dir = kServiceAccountDir);

// kubectl's order: --kubeconfig, then $KUBECONFIG (first file of the list), then in-cluster when
// KUBERNETES_SERVICE_HOST is set, then ~/.kube/config.
absl::StatusOr<ClusterConfig> LoadConfig(const std::string& kubeconfig_flag,
                                         const std::string& context = "");

// Parses "https://host:port/prefix" into the config's scheme, host, port and path prefix.
absl::Status ParseServerUrl(const std::string& url, ClusterConfig* config);

// Refuses a value bound for a request's header or URL that holds a control character: a CR LF
// in a token ends the Authorization header and starts one of the token's choosing
// ("x\r\nImpersonate-User: system:admin"). As Go's net/http (and so kubectl) refuses such a
// header. INVALID_ARGUMENT naming `what`, the value's source, and the character's position.
absl::Status RefuseControlCharacters(absl::string_view value, absl::string_view what);

// The bearer token to send: the static token, or the token file's content, re-read once the
// last read is older than `refresh`. A file whose token holds a control character is refused
// (INVALID_ARGUMENT naming the file), on every read. Thread-safe.
class TokenSource {
 public:
  TokenSource(std::string token, std::string token_file, absl::Duration refresh = absl::Minutes(1));
  absl::StatusOr<std::string> Token();

 private:
  std::mutex mu_;
  std::string token_;
  const std::string token_file_;
  const absl::Duration refresh_;
  absl::Time read_at_ = absl::InfinitePast();
};

}  // namespace kubetrain::kube
