// kube::Client's REST verbs (see client.h): resource paths and query strings, one request with
// its rate limit, credentials and retries (Do), the verbs over it, streaming watches, and the
// reading of answers into absl::Status codes. Connections, TLS and shutdown are in
// client_connection.cc.
#include "operator/kube/client.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/status.h"

namespace kubetrain::kube {
namespace {

using nlohmann::json;

std::string UrlEncode(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

std::string Query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [k, v] : params) {
    if (v.empty()) continue;
    absl::StrAppend(&q, q.empty() ? "?" : "&", k, "=", UrlEncode(v));
  }
  return q;
}

// The client's reading of an API server's answer: HTTP code and Status reason → what the caller
// should do (docs/architecture.md §2, "Reaching the API server"). Kept apart from localkube's
// table (localkube/errors.cc) on purpose: that one is the server's wire contract, the code
// and reason kube-apiserver sends (§6, decision 0004), this one a client's interpretation of it;
// one shared table would let the test server bend to the client it tests.
// - 429 TooManyRequests is UNAVAILABLE, as 5xx: the server is busy, try again (Client::Do
//   already retries it when it carries Retry-After, up to max_retries). Never
//   RESOURCE_EXHAUSTED, which the reconciler records as a refused create.
// - 415 UnsupportedMediaType is UNIMPLEMENTED, as 405: this server does not take that content
//   type (a strategic-merge patch of a custom resource); the same request again cannot succeed.
absl::StatusCode CodeFor(int http, const std::string& reason) {
  if (reason == "AlreadyExists") return absl::StatusCode::kAlreadyExists;
  if (reason == "Conflict") return absl::StatusCode::kAborted;
  if (reason == "Expired" || reason == "Gone") return absl::StatusCode::kOutOfRange;
  switch (http) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
    case 415:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kUnavailable;
    default:
      return http >= 500 ? absl::StatusCode::kUnavailable : absl::StatusCode::kUnknown;
  }
}

const char* ContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kApply:
      return "application/apply-patch+yaml";
  }
  return "application/merge-patch+json";
}

}  // namespace

std::string Resource::CollectionPath(const std::string& ns) const {
  std::string path =
      group.empty() ? absl::StrCat("/api/", version) : absl::StrCat("/apis/", group, "/", version);
  if (namespaced && !ns.empty()) absl::StrAppend(&path, "/namespaces/", ns);
  return absl::StrCat(path, "/", plural);
}

Resource Resource::Pods() { return {"", "v1", "pods", "Pod", true}; }
Resource Resource::Services() { return {"", "v1", "services", "Service", true}; }
Resource Resource::Secrets() { return {"", "v1", "secrets", "Secret", true}; }
Resource Resource::Events() { return {"", "v1", "events", "Event", true}; }
Resource Resource::Leases() { return {"coordination.k8s.io", "v1", "leases", "Lease", true}; }
Resource Resource::TrainingJobs() {
  return {"kubetrain.dev", "v1", "trainingjobs", "TrainingJob", true};
}
Resource Resource::TfJobs() { return {"kubeflow.org", "v1", "tfjobs", "TFJob", true}; }
Resource Resource::PodGroups() {
  return {"scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", true};
}

absl::Status StatusFromResponse(int http, const std::string& body, const std::string& what) {
  json status = json::parse(body, nullptr, false);
  std::string reason;
  std::string message;
  if (status.is_object() && status.value("kind", "") == "Status") {
    reason = status.value("reason", "");
    message = status.value("message", "");
  }
  if (message.empty()) message = body.empty() ? absl::StrCat("HTTP ", http) : body.substr(0, 300);
  return absl::Status(CodeFor(http, reason),
                      absl::StrCat(what, ": ", message, " (", reason.empty() ? "" : reason + ", ",
                                   "HTTP ", http, ")"));
}

std::string FormatTime(absl::Time t) { return KubeTime(t); }

std::string FormatMicroTime(absl::Time t) { return KubeMicroTime(t); }

absl::Time ParseTime(const std::string& text) {
  absl::Time t;
  std::string err;
  if (text.empty() || !absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    return absl::InfinitePast();
  }
  return t;
}

struct Client::Call {
  std::string method;  // GET, POST, PUT, PATCH, DELETE
  std::string verb;    // for metrics
  std::string path;    // with query
  std::string body;
  std::string content_type = "application/json";
  bool text = false;  // a text answer (logs): returned as a JSON string, not parsed
};

Client::Client(ClusterConfig config, ClientOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      tokens_(config_.token, config_.token_file),
      exec_(config_.exec ? std::make_unique<ExecCredentialProvider>(
                               config_, ExecRunOptions{.cancelled = &shutdown_})
                         : nullptr),
      limiter_(options_.qps, options_.burst) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClusterConfig config,
                                                       ClientOptions options) {
  if (config.host.empty()) return absl::InvalidArgumentError("cluster config has no server");
  // OpenSSL writes to sockets with write(2): a peer that closed its end (a watch the server cut)
  // would raise SIGPIPE and kill the process. As gRPC does, ignore it once, process-wide.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { signal(SIGPIPE, SIG_IGN); });
  auto client = std::unique_ptr<Client>(new Client(std::move(config), std::move(options)));
  // Fail early on unusable TLS material rather than on the first request.
  // An exec plugin is not run yet: this connection is made without its certificate.
  ASSIGN_OR_RETURN(auto conn, client->Connect(client->options_.timeout));
  client->ReturnConnection(std::move(conn), 0);
  return client;
}

absl::StatusOr<json> Client::Do(Call& call) {
  std::string what = absl::StrCat(call.method, " ", call.path.substr(0, call.path.find('?')));
  bool reauthenticated = false;
  for (int attempt = 0;; ++attempt) {
    if (!SleepUnlessShutDown(limiter_.Reserve())) {
      return absl::CancelledError(what + ": the client is shutting down");
    }
    // Before taking a connection: an exec plugin may take seconds, or fail, and its client
    // certificate decides which connections may be used.
    std::string token;
    std::optional<ExecCredentialProvider::Credential> cred;
    int64_t generation = 0;
    if (exec_ != nullptr) {
      ASSIGN_OR_RETURN(cred, exec_->Get(), what, ": getting credentials");
      token = cred->token;
      generation = cred->cert_generation;
    } else {
      ASSIGN_OR_RETURN(token, tokens_.Token(), what);
    }
    RETURN_IF_ERROR(RefuseControlCharacters(call.path, "the request's path"), what);
    std::unique_ptr<httplib::ClientImpl> conn = TakeConnection(generation);
    bool reused = conn != nullptr;
    if (!conn) {
      ASSIGN_OR_RETURN(conn, Connect(options_.timeout, cred ? &*cred : nullptr));
    }
    httplib::Request req;
    req.method = call.method;
    req.path = config_.path_prefix + call.path;
    req.headers = {{"Accept", call.text ? "*/*" : "application/json"},
                   {"User-Agent", options_.user_agent}};
    if (!token.empty()) req.headers.emplace("Authorization", "Bearer " + token);
    if (!call.body.empty() || call.method == "POST" || call.method == "PUT" ||
        call.method == "PATCH") {
      req.body = call.body;
      req.headers.emplace("Content-Type", call.content_type);
    }
    TrackInFlight(conn.get(), true);
    httplib::Result res = conn->send(req);
    TrackInFlight(conn.get(), false);
    if (options_.on_request) options_.on_request(call.verb, res ? res->status : 0);
    if (!res) {
      // A reused connection the server had closed: nothing reached the server when the write
      // failed, and GET/PUT/DELETE are safe to repeat; try once more on a fresh connection.
      bool idempotent = call.method == "GET" || call.method == "PUT" || call.method == "DELETE";
      if (reused && (res.error() == httplib::Error::Write || idempotent) && attempt == 0 &&
          !shutdown_.load()) {
        continue;
      }
      return TransportError(what, *conn, static_cast<int>(res.error()));
    }
    int code = res->status;
    std::string body = std::move(res->body);
    std::string retry_after = res->get_header_value("Retry-After");
    ReturnConnection(std::move(conn), generation);
    if (code >= 200 && code < 300) {
      if (call.text) return json(std::move(body));
      if (body.empty()) return json::object();
      json doc = json::parse(body, nullptr, false);
      if (doc.is_discarded())
        return absl::InternalError(absl::StrCat(what, ": response is not JSON"));
      return doc;
    }
    if (code == 401 && exec_ != nullptr && !reauthenticated) {
      // As client-go does: the plugin's credential was rejected (revoked, rotated early), so
      // drop it and try once more with a fresh one.
      exec_->Invalidate(*cred);
      reauthenticated = true;
      continue;
    }
    int seconds = 0;
    bool retryable = (code == 429 || code >= 500) && absl::SimpleAtoi(retry_after, &seconds);
    if (!retryable || attempt >= options_.max_retries) return StatusFromResponse(code, body, what);
    if (!SleepUnlessShutDown(
            std::min(absl::Seconds(std::max(seconds, 0)), options_.max_retry_after))) {
      return StatusFromResponse(code, body, what);
    }
  }
}

bool Client::SleepUnlessShutDown(absl::Duration d) {
  absl::Time until = absl::Now() + d;
  while (!shutdown_.load()) {
    absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
    absl::SleepFor(std::min(left, absl::Milliseconds(20)));
  }
  return false;
}

std::string Client::ObjectPath(const Resource& r, const std::string& ns,
                               const std::string& name) const {
  return absl::StrCat(r.CollectionPath(r.namespaced ? ns : ""), "/", name);
}

absl::StatusOr<json> Client::Get(const Resource& r, const std::string& ns,
                                 const std::string& name) {
  Call call{"GET", "get", ObjectPath(r, ns, name)};
  return Do(call);
}

absl::StatusOr<json> Client::List(const Resource& r, const std::string& ns, const ListOptions& o,
                                  const std::string& continue_token) {
  Call call{"GET", "list",
            r.CollectionPath(ns) +
                Query({{"labelSelector", o.label_selector},
                       {"fieldSelector", o.field_selector},
                       {"resourceVersion", continue_token.empty() ? o.resource_version : ""},
                       {"limit", o.limit > 0 ? std::to_string(o.limit) : ""},
                       {"continue", continue_token}})};
  return Do(call);
}

absl::StatusOr<json> Client::ListAll(const Resource& r, const std::string& ns,
                                     const ListOptions& o) {
  ASSIGN_OR_RETURN(json list, List(r, ns, o));
  if (!list.contains("items") || list["items"].is_null()) list["items"] = json::array();
  std::string token = list["metadata"].value("continue", "");
  while (!token.empty()) {
    absl::StatusOr<json> page = List(r, ns, o, token);
    if (page.status().code() == absl::StatusCode::kOutOfRange) {
      // The continue token expired: read everything at once, as client-go's pager does.
      ListOptions full = o;
      full.limit = 0;
      full.resource_version = "";
      return List(r, ns, full);
    }
    RETURN_IF_ERROR(page.status());
    for (json& item : (*page)["items"]) list["items"].push_back(std::move(item));
    token = (*page)["metadata"].value("continue", "");
  }
  list["metadata"].erase("continue");
  return list;
}

absl::StatusOr<json> Client::Create(const Resource& r, const std::string& ns, const json& object,
                                    const CreateOptions& options) {
  std::vector<std::pair<std::string, std::string>> query = {
      {"fieldManager", options_.field_manager}};
  if (options.dry_run) query.emplace_back("dryRun", "All");
  Call call{"POST", options.dry_run ? "create-dry-run" : "create",
            r.CollectionPath(ns) + Query(query), object.dump()};
  return Do(call);
}

absl::StatusOr<json> Client::Update(const Resource& r, const std::string& ns, const json& object) {
  Call call{"PUT", "update",
            ObjectPath(r, ns, object["metadata"].value("name", "")) +
                Query({{"fieldManager", options_.field_manager}}),
            object.dump()};
  return Do(call);
}

absl::StatusOr<json> Client::UpdateStatus(const Resource& r, const std::string& ns,
                                          const json& object) {
  Call call{"PUT", "update",
            ObjectPath(r, ns, object["metadata"].value("name", "")) + "/status" +
                Query({{"fieldManager", options_.field_manager}}),
            object.dump()};
  return Do(call);
}

absl::StatusOr<json> Client::Patch(const Resource& r, const std::string& ns,
                                   const std::string& name, PatchType type, const std::string& body,
                                   const std::string& subresource) {
  std::string path = ObjectPath(r, ns, name);
  if (!subresource.empty()) absl::StrAppend(&path, "/", subresource);
  path += Query({{"fieldManager", options_.field_manager},
                 {"force", type == PatchType::kApply ? "true" : ""}});
  Call call{"PATCH", "patch", path, body, ContentType(type)};
  return Do(call);
}

absl::Status Client::Delete(const Resource& r, const std::string& ns, const std::string& name,
                            const DeleteOptions& o) {
  json body = {
      {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", o.propagation_policy}};
  if (!o.precondition_uid.empty()) body["preconditions"] = {{"uid", o.precondition_uid}};
  if (o.grace_period_seconds) body["gracePeriodSeconds"] = *o.grace_period_seconds;
  Call call{"DELETE", "delete", ObjectPath(r, ns, name), body.dump()};
  return Do(call).status();
}

absl::StatusOr<std::vector<json>> Client::DeleteCollection(const Resource& r, const std::string& ns,
                                                           const ListOptions& selectors,
                                                           const DeleteOptions& o) {
  if (!o.precondition_uid.empty()) {
    return absl::InvalidArgumentError("DeleteCollection takes no uid precondition");
  }
  json body = {
      {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", o.propagation_policy}};
  if (o.grace_period_seconds) body["gracePeriodSeconds"] = *o.grace_period_seconds;
  Call call{"DELETE", "deletecollection",
            r.CollectionPath(ns) + Query({{"labelSelector", selectors.label_selector},
                                          {"fieldSelector", selectors.field_selector}}),
            body.dump()};
  ASSIGN_OR_RETURN(json list, Do(call));
  std::vector<json> deleted;
  if (list.is_object() && list.contains("items") && list["items"].is_array()) {
    for (json& item : list["items"]) deleted.push_back(std::move(item));
  }
  return deleted;
}

absl::StatusOr<std::string> Client::GetLog(const std::string& ns, const std::string& pod,
                                           const std::string& container, int tail_lines,
                                           int64_t limit_bytes) {
  Call call{"GET", "get",
            ObjectPath(Resource::Pods(), ns, pod) + "/log" +
                Query({{"container", container},
                       {"tailLines", std::to_string(tail_lines)},
                       {"limitBytes", std::to_string(limit_bytes)}})};
  call.text = true;
  ASSIGN_OR_RETURN(json text, Do(call));
  return text.get<std::string>();
}

absl::StatusOr<json> Client::GetPath(const std::string& path) {
  Call call{"GET", "get", path};
  return Do(call);
}

absl::Status Client::Watch(const Resource& r, const std::string& ns, const WatchOptions& o,
                           const std::function<bool(const WatchEvent&)>& on_event,
                           WatchCancel* cancel) {
  std::string path =
      r.CollectionPath(ns) + Query({{"watch", "true"},
                                    {"allowWatchBookmarks", o.allow_bookmarks ? "true" : ""},
                                    {"resourceVersion", o.resource_version},
                                    {"timeoutSeconds", std::to_string(o.timeout_seconds)},
                                    {"labelSelector", o.label_selector},
                                    {"fieldSelector", o.field_selector}});
  std::string what = absl::StrCat("WATCH ", r.CollectionPath(ns));
  if (!SleepUnlessShutDown(limiter_.Reserve())) return absl::OkStatus();
  // Before connecting: an exec plugin may take seconds, or fail.
  std::string token;
  std::optional<ExecCredentialProvider::Credential> cred;
  if (exec_ != nullptr) {
    absl::StatusOr<ExecCredentialProvider::Credential> c = exec_->Get();
    if (shutdown_.load()) return absl::OkStatus();
    if (!c.ok()) return Annotate(c.status(), what + ": getting credentials");
    cred = *std::move(c);
    token = cred->token;
  } else {
    ASSIGN_OR_RETURN(token, tokens_.Token(), what);
  }
  RETURN_IF_ERROR(RefuseControlCharacters(path, "the request's path"), what);
  // The server ends the watch after timeoutSeconds; read longer than that, never shorter.
  ASSIGN_OR_RETURN(std::unique_ptr<httplib::ClientImpl> conn,
                   Connect(absl::Seconds(o.timeout_seconds + 30), cred ? &*cred : nullptr));
  if (cancel != nullptr) {
    cancel->Attach(conn.get());
    if (cancel->cancelled()) {
      cancel->Detach();
      return absl::OkStatus();
    }
  }
  int http = 0;
  std::string pending;  // bytes after the last newline: events may be split across chunks
  std::string error_body;
  absl::Status event_error;
  bool stopped_by_caller = false;
  httplib::Request req;
  req.method = "GET";
  req.path = config_.path_prefix + path;
  req.headers = {{"Accept", "application/json"}, {"User-Agent", options_.user_agent}};
  if (!token.empty()) req.headers.emplace("Authorization", "Bearer " + token);
  req.response_handler = [&](const httplib::Response& res) {
    http = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    if (http != 200) {
      error_body.append(data, len);
      return true;
    }
    pending.append(data, len);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      json ev = json::parse(pending.begin() + start, pending.begin() + nl, nullptr, false);
      if (!ev.is_object()) continue;
      std::string type = ev.value("type", "");
      if (type == "ERROR") {
        const json& st = ev["object"];
        event_error = StatusFromResponse(st.value("code", 500), st.dump(), what);
        return false;
      }
      if (!on_event({type, std::move(ev["object"])})) {
        stopped_by_caller = true;
        return false;
      }
    }
    pending.erase(0, start);
    return true;
  };
  TrackInFlight(conn.get(), true);
  httplib::Result res = conn->send(req);
  TrackInFlight(conn.get(), false);
  if (cancel != nullptr) cancel->Detach();
  if (options_.on_request) options_.on_request("watch", http);
  if (!event_error.ok()) return event_error;
  if (stopped_by_caller || (cancel != nullptr && cancel->cancelled()) || shutdown_.load()) {
    return absl::OkStatus();
  }
  if (http == 401 && exec_ != nullptr) {
    // The caller re-watches; let that run the plugin again rather than resend a rejected
    // credential.
    exec_->Invalidate(*cred);
  }
  if (http != 0 && http != 200) return StatusFromResponse(http, error_body, what);
  if (!res) {
    // A read timeout or a closed connection ends this watch; the caller re-watches.
    if (res.error() == httplib::Error::Read) return absl::OkStatus();
    return TransportError(what, *conn, static_cast<int>(res.error()));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube
