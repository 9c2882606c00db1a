// The Kubernetes REST API over HTTP on loopback: routing, bearer-token auth, content
// negotiation (JSON, Table), watch and log streaming, and fault injection. Implemented in
// server.cc (routing), watch.cc, pod_log.cc, request.cc (request parsing, replies) and
// connections.cc (a thread per connection, shutting connections down on Stop).
//
// Owns the cpp-httplib server and its listening thread. Start/Stop from one thread; request
// handlers run on a thread per connection (every open watch holds one).
#pragma once

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "localkube/api.h"
#include "localkube/logs.h"
#include "localkube/service_accounts.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kubetrain::localkube {

class AcceptedSockets;  // connections.h

struct ServerOptions {
  std::string host = "127.0.0.1";
  // Further addresses served on the same port (the pod network's node bridges; the TLS
  // certificate must name them); never a wildcard.
  std::vector<std::string> also_listen_on;
  int port = 0;       // 0 picks a free port
  std::string token;  // empty accepts every request
  // More bearer tokens and the users they authenticate as; `token` authenticates AdminUser().
  std::map<std::string, UserInfo> user_tokens;
  // Issues (TokenRequest) and authenticates ServiceAccount tokens; the Server makes its own when
  // null. Share it with the kubelet so that the tokens it mounts authenticate here.
  std::shared_ptr<ServiceAccountTokens> service_account_tokens;
  // Authorize every request with RBAC and enforce OwnerReferencesPermissionEnforcement.
  bool rbac = false;
  // With rbac: every authorization decision appended here as one JSON line (user, verb,
  // apiGroup, resource, subresource, namespace, name, decision allow|forbid), as an audit log
  // at the Metadata level would record it. Empty: none.
  std::string authz_log;
  // HTTPS with this certificate and key; both empty serves plain HTTP.
  std::string cert_path;
  std::string key_path;
  // POST /localkube/v1/nodes/<node>/<action> (node_faults.h) for system:masters; unset: 404.
  std::function<absl::StatusOr<std::string>(const std::string& node, const std::string& action)>
      node_fault;
  absl::Duration drop_watches_every = absl::ZeroDuration();
  double error_rate = 0;
  absl::Duration latency = absl::ZeroDuration();
  absl::Duration compact_every = absl::ZeroDuration();
  absl::Duration bookmark_every = absl::Seconds(15);
  // How long a read at a resourceVersion ahead of the store waits before 504 (the watch
  // cache's blockTimeout).
  absl::Duration too_large_rv_wait = absl::Seconds(3);
};

class Server {
 public:
  // `logs` may be null (no kubelet: pods/log answers that the container is not running).
  Server(ServerOptions options, Api* api, LogSource* logs);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving in the background.
  absl::Status Start();
  void Stop();
  int port() const { return port_; }
  std::string address() const;  // https://127.0.0.1:PORT (http:// without TLS)
  const std::shared_ptr<ServiceAccountTokens>& service_account_tokens() const {
    return options_.service_account_tokens;
  }

 private:
  void Handle(const httplib::Request& req, httplib::Response& res);
  // The request's user; nullopt answers 401. The static tokens first, then ServiceAccount
  // tokens (JWTs).
  std::optional<UserInfo> Authenticate(const httplib::Request& req) const;
  // Waits (up to too_large_rv_wait, or until Stop) for the store to reach `revision`.
  bool WaitForRevision(int64_t revision);
  void ServeNodeFault(const httplib::Request& req, httplib::Response& res, const UserInfo& user);
  bool InjectFault(const httplib::Request& req, httplib::Response& res);
  bool ServeDiscovery(const httplib::Request& req, httplib::Response& res);
  void ServeResource(const httplib::Request& req, httplib::Response& res, const UserInfo& user);
  void ServeWatch(const Target& target, const httplib::Request& req, httplib::Response& res);
  void ServeLog(const Target& target, const httplib::Request& req, httplib::Response& res);

  ServerOptions options_;
  Api* api_;
  LogSource* logs_;
  std::unique_ptr<httplib::Server> http_;
  std::mutex authz_log_mu_;
  std::ofstream authz_log_;  // guarded by authz_log_mu_
  // The accepted connections, which Stop shuts down; shared with httplib's task queue.
  std::shared_ptr<AcceptedSockets> sockets_;
  std::thread listener_;
  std::vector<std::unique_ptr<httplib::Server>> more_http_;  // also_listen_on's
  std::vector<std::thread> more_listeners_;
  std::thread compactor_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
};

// Writes a kubeconfig pointing at `server` with `token` (namespace default), mode 0600.
// `ca_pem` (may be empty) becomes certificate-authority-data.
absl::Status WriteKubeconfig(const std::string& path, const std::string& server,
                             const std::string& token, const std::string& ca_pem);

}  // namespace kubetrain::localkube
