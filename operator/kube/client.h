// A Kubernetes REST client: typed paths for any resource, JSON bodies, every patch type, the
// /status subresource, streaming watches, errors decoded from Status bodies into absl::Status
// codes chosen by what the caller should do, client-side QPS/burst limits and Retry-After.
//
// Thread-safe: any number of threads may call any method; each call takes an HTTP connection
// from a small pool (a watch holds one for its duration).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "operator/kube/config.h"
#include "operator/kube/exec_credential.h"
#include "operator/kube/rate_limiter.h"

namespace httplib {
class ClientImpl;
}

namespace kubetrain::kube {

// A REST resource: where its objects live and what they are called.
struct Resource {
  std::string group;  // "" for the core group
  std::string version;
  std::string plural;
  std::string kind;
  bool namespaced = true;

  std::string ApiVersion() const { return group.empty() ? version : group + "/" + version; }
  // The collection path: /api/v1/namespaces/<ns>/pods, /apis/<g>/<v>/<plural> (all namespaces
  // when `ns` is empty).
  std::string CollectionPath(const std::string& ns) const;

  static Resource Pods();
  static Resource Services();
  static Resource Secrets();
  static Resource Events();
  static Resource Leases();
  static Resource TrainingJobs();
  static Resource TfJobs();     // kubeflow.org/v1 tfjobs
  static Resource PodGroups();  // scheduling.volcano.sh/v1beta1
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" = most recent, "0" = any (may be served from a cache)
  int64_t limit = 500;           // page size; ListAll follows `continue` tokens
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;
  int timeout_seconds = 300;
  bool allow_bookmarks = true;
};

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK
  nlohmann::json object;
};

enum class PatchType { kMerge, kJson, kStrategicMerge, kApply };

struct CreateOptions {
  // ?dryRun=All: the server validates and admits the object (admission webhooks, quotas, Pod
  // Security) and answers as for a real create, but stores nothing.
  bool dry_run = false;
};

struct DeleteOptions {
  std::string propagation_policy = "Background";  // Foreground, Background, Orphan
  std::string precondition_uid;                   // delete only this incarnation
  std::optional<int64_t> grace_period_seconds;
};

// Cancels one watch from another thread. Thread-safe; one per watching thread.
class WatchCancel {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class Client;
  void Attach(httplib::ClientImpl* conn);
  void Detach();

  mutable std::mutex mu_;
  httplib::ClientImpl* conn_ = nullptr;
  bool cancelled_ = false;
};

struct ClientOptions {
  double qps = 50;  // client-side limit; <= 0 disables it
  int burst = 100;
  std::string user_agent = "kubetrain-operator/0.1.0";
  std::string field_manager = "kubetrain-operator";
  absl::Duration timeout = absl::Seconds(30);  // every request except watches
  int max_retries = 5;                         // 429 and 5xx answers that carry Retry-After
  absl::Duration max_retry_after = absl::Seconds(10);
  // Called after every request with its verb (get, list, watch, create, create-dry-run,
  // update, patch, delete, deletecollection) and HTTP code (0: no response). For metrics.
  std::function<void(const std::string& verb, int code)> on_request;
};

// The verbs the controllers use, as an interface: kube::Client speaks them to an API server;
// kube::testing::FakeApiClient (operator/kube/testing/fake_api.h) keeps objects in memory so
// reconcile rules are unit-tested in milliseconds beside their live tests against localkube.
// Error codes as Client documents them below.
class ApiClient {
 public:
  virtual ~ApiClient() = default;

  virtual absl::StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                                             const std::string& name) = 0;
  virtual absl::StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns,
                                                const nlohmann::json& object,
                                                const CreateOptions& options = {}) = 0;
  virtual absl::StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns,
                                                      const nlohmann::json& object) = 0;
  virtual absl::StatusOr<nlohmann::json> Patch(const Resource& r, const std::string& ns,
                                               const std::string& name, PatchType type,
                                               const std::string& body,
                                               const std::string& subresource = "") = 0;
  virtual absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                              const DeleteOptions& options = {}) = 0;
  // Deletes every object of `r` in `ns` that the selectors match, in one request (the
  // deletecollection verb); returns what was deleted (the server's list of the objects, each
  // with its deletionTimestamp where deletion is graceful).
  virtual absl::StatusOr<std::vector<nlohmann::json>> DeleteCollection(
      const Resource& r, const std::string& ns, const ListOptions& selectors,
      const DeleteOptions& options = {}) = 0;
  virtual absl::StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod,
                                             const std::string& container, int tail_lines,
                                             int64_t limit_bytes = 64 << 10) = 0;
};

// Error codes: 404 NOT_FOUND, 409 AlreadyExists ALREADY_EXISTS, 409 Conflict ABORTED (re-read
// and retry), 410 Expired/Gone OUT_OF_RANGE (relist), 400/422 INVALID_ARGUMENT, 401
// UNAUTHENTICATED, 403 PERMISSION_DENIED, 429/5xx/no connection UNAVAILABLE, a server
// certificate that fails verification UNAVAILABLE with IsTlsVerificationError, after Shutdown
// CANCELLED. The message is the server's Status message, with the verb and path.
class Client : public ApiClient {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(ClusterConfig config,
                                                        ClientOptions options = {});
  ~Client() override;

  const ClusterConfig& config() const { return config_; }

  absl::StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                                     const std::string& name) override;
  // One page.
  absl::StatusOr<nlohmann::json> List(const Resource& r, const std::string& ns,
                                      const ListOptions& options,
                                      const std::string& continue_token = "");
  // Every page, items concatenated; metadata.resourceVersion is the first page's.
  absl::StatusOr<nlohmann::json> ListAll(const Resource& r, const std::string& ns,
                                         const ListOptions& options);
  absl::StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns,
                                        const nlohmann::json& object,
                                        const CreateOptions& options = {}) override;
  // PUT of the whole object (metadata.resourceVersion makes it conditional).
  absl::StatusOr<nlohmann::json> Update(const Resource& r, const std::string& ns,
                                        const nlohmann::json& object);
  absl::StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns,
                                              const nlohmann::json& object) override;
  // `subresource` is "" or "status"; kApply sends fieldManager and force=true.
  absl::StatusOr<nlohmann::json> Patch(const Resource& r, const std::string& ns,
                                       const std::string& name, PatchType type,
                                       const std::string& body,
                                       const std::string& subresource = "") override;
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {}) override;
  // Only `selectors`' label_selector and field_selector are used; a precondition uid is refused.
  absl::StatusOr<std::vector<nlohmann::json>> DeleteCollection(
      const Resource& r, const std::string& ns, const ListOptions& selectors,
      const DeleteOptions& options = {}) override;

  // Streams events to `on_event` until the server ends the watch (OK), `on_event` returns false
  // (OK), `cancel` is cancelled (OK), or it fails. An ERROR event is returned as its Status
  // (410 → OUT_OF_RANGE).
  absl::Status Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     WatchCancel* cancel = nullptr);

  // The last `tail_lines` lines (at most `limit_bytes`) of a container's log, as text.
  absl::StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod,
                                     const std::string& container, int tail_lines,
                                     int64_t limit_bytes = 64 << 10) override;

  // Raw GET of an absolute API path (discovery, /version, /healthz). For tests and tools.
  absl::StatusOr<nlohmann::json> GetPath(const std::string& path);

  // Makes every call in flight or to come return CANCELLED at once, watches included, so a
  // stopping process does not sit out request timeouts, Retry-After waits or rate limits.
  void Shutdown();
  bool shut_down() const { return shutdown_.load(); }

 private:
  struct Call;
  Client(ClusterConfig config, ClientOptions options);

  absl::StatusOr<nlohmann::json> Do(Call& call);
  // Why a request got no HTTP answer, naming the server and, for TLS failures, the CA used.
  absl::Status TransportError(const std::string& what, httplib::ClientImpl& conn, int error);
  // Sleeps up to `d`; false when Shutdown cut it short.
  bool SleepUnlessShutDown(absl::Duration d);
  void TrackInFlight(httplib::ClientImpl* conn, bool add);
  // A connection with the kubeconfig's client certificate, or with the one in `exec_cred` (the
  // exec plugin's current credential) when that has one.
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> Connect(
      absl::Duration read_timeout, const ExecCredentialProvider::Credential* exec_cred = nullptr);
  // A pooled connection made with the exec plugin's certificate generation `cert_generation`
  // (0 without a plugin certificate); connections of other generations are dropped.
  std::unique_ptr<httplib::ClientImpl> TakeConnection(int64_t cert_generation);
  // Pools `conn`, made with `cert_generation`, unless the plugin's certificate changed since.
  void ReturnConnection(std::unique_ptr<httplib::ClientImpl> conn, int64_t cert_generation);
  std::string ObjectPath(const Resource& r, const std::string& ns, const std::string& name) const;

  ClusterConfig config_;
  ClientOptions options_;
  TokenSource tokens_;
  // The kubeconfig user's exec plugin (config_.exec), in place of tokens_; null without one.
  std::unique_ptr<ExecCredentialProvider> exec_;
  TokenBucket limiter_;
  struct PooledConnection {
    std::unique_ptr<httplib::ClientImpl> conn;
    absl::Time last_used;
    int64_t
        cert_generation;  // ExecCredentialProvider::Credential::cert_generation it was made with
  };
  std::mutex pool_mu_;
  std::vector<PooledConnection> pool_;           // most recently used last
  std::vector<httplib::ClientImpl*> in_flight_;  // guarded by pool_mu_
  std::atomic<bool> shutdown_{false};
};

// True when `s` says the API server's TLS certificate failed verification: retrying with the
// same configuration cannot succeed.
bool IsTlsVerificationError(const absl::Status& s);

// The Status code for an HTTP answer: decodes `body` when it is a Status object.
absl::Status StatusFromResponse(int http_code, const std::string& body, const std::string& what);

// RFC 3339 with seconds, UTC ("2026-11-21T10:00:00Z"), as Kubernetes writes timestamps.
std::string FormatTime(absl::Time t);
// RFC 3339 with microseconds (Lease MicroTime).
std::string FormatMicroTime(absl::Time t);
// Parses either; absl::InfinitePast() when empty or malformed.
absl::Time ParseTime(const std::string& text);

}  // namespace kubetrain::kube
