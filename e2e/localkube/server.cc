#include "e2e/localkube/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "e2e/localkube/decode.h"
#include "e2e/localkube/discovery.h"
#include "e2e/localkube/errors.h"
#include "e2e/localkube/pod_security.h"
#include "e2e/localkube/protobuf.h"
#include "e2e/localkube/table.h"
#include "e2e/localkube/tls.h"
#include "operator/api/yaml.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kJson[] = "application/json";

// Whether `fd` is a connected TCP socket whose local port is `port`: one the server on `port`
// accepted (a client's socket to that port has an ephemeral local port; the listener has no
// peer). getsockname and getpeername only read the socket.
bool AcceptedOn(int fd, int port) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  int local_port = 0;
  if (local.ss_family == AF_INET) {
    local_port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  } else if (local.ss_family == AF_INET6) {
    local_port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  }
  if (local_port != port) return false;
  return getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0;
}

// The inode of the socket /proc/self/fd/NAME links to ("socket:[INODE]"); 0 for anything else.
// Reading the link does not touch the descriptor, which another thread may be closing.
ino_t SocketInode(const std::filesystem::path& link) {
  std::error_code ec;
  std::string link_target = std::filesystem::read_symlink(link, ec).string();
  absl::string_view target = link_target;
  if (ec || !absl::ConsumePrefix(&target, "socket:[") || !absl::ConsumeSuffix(&target, "]")) {
    return 0;
  }
  uint64_t inode = 0;
  return absl::SimpleAtoi(target, &inode) ? static_cast<ino_t>(inode) : 0;
}

}  // namespace

// The connections the server has accepted and not yet finished with, so that Stop can shut them
// down: httplib's idle keep-alive connections otherwise sit out their whole keep-alive timeout
// after stop(), and localkube must exit within 2 s of SIGTERM.
//
// httplib (0.11) has no hook that sees an accepted descriptor: the accept loop hands the task
// queue a closure that serves the socket and then closes it, and the socket options callback
// applies to the listener only. So Track, called by the queue on the accepting thread between
// accept and the connection's task, finds the one socket on the server's port that is not tracked
// yet (the accepting thread owns it until the task starts) and keeps a duplicate descriptor of it.
// The duplicate stays open until the task has returned, so the socket's number cannot be reused
// while it is tracked and a shutdown reaches that connection and nothing else; shutting down
// and closing duplicates happen under one mutex.
class AcceptedSockets {
 public:
  explicit AcceptedSockets(int port) : port_(port) {}
  ~AcceptedSockets() {
    for (const auto& [fd, inode] : tracked_) close(fd);
  }

  // Returns the duplicate (to hand to Untrack), or -1 when the socket was not found.
  int Track() {
    std::lock_guard<std::mutex> lock(mu_);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      int fd = 0;
      if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
      ino_t inode = SocketInode(entry.path());
      if (inode == 0 || inodes_.contains(inode) || !AcceptedOn(fd, port_)) continue;
      int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (copy < 0) continue;
      struct stat st;
      if (fstat(copy, &st) != 0 || st.st_ino != inode || !AcceptedOn(copy, port_)) {
        close(copy);  // the number was closed and reused since it was read
        continue;
      }
      tracked_.emplace(copy, inode);
      inodes_.insert(inode);
      if (stopping_) ::shutdown(copy, SHUT_RDWR);
      return copy;
    }
    return -1;
  }

  // After the connection's task has returned (httplib has closed its own descriptor).
  void Untrack(int copy) {
    if (copy < 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tracked_.find(copy);
    if (it == tracked_.end()) return;
    inodes_.erase(it->second);
    tracked_.erase(it);
    close(copy);
  }

  // Shuts down every tracked connection, and any tracked from now on.
  void ShutdownAll() {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (const auto& [fd, inode] : tracked_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  const int port_;
  std::mutex mu_;
  std::map<int, ino_t> tracked_;  // duplicate descriptor -> socket inode
  std::set<ino_t> inodes_;
  bool stopping_ = false;
};

namespace {

// Runs every connection on its own thread: watches and `logs -f` hold a connection for minutes,
// so a fixed pool (httplib's default is 8 threads) would starve ordinary requests. Threads get a
// large stack: objects may nest 10000 deep (the JSON decoder's limit) and copying, printing and
// merging them recurses once per level, which a default stack does not hold in debug or
// sanitizer builds.
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  explicit ThreadPerConnection(std::shared_ptr<AcceptedSockets> sockets)
      : sockets_(std::move(sockets)) {}

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++active_;
    }
    auto* task = new Task{this, std::move(fn), sockets_->Track()};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kStackBytes);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    if (pthread_create(&thread, &attr, &Run, task) != 0) Run(task);  // serve it inline
    pthread_attr_destroy(&attr);
  }
  // Shuts every connection down and waits (at most 10 s) for their threads to finish.
  void shutdown() override {
    sockets_->ShutdownAll();
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait_for(lock, std::chrono::seconds(10), [&] { return active_ == 0; });
  }

 private:
  static constexpr size_t kStackBytes = 64 << 20;
  struct Task {
    ThreadPerConnection* queue;
    std::function<void()> fn;
    int tracked;  // AcceptedSockets::Track's duplicate
  };
  static void* Run(void* arg) {
    std::unique_ptr<Task> task(static_cast<Task*>(arg));
    task->fn();  // serves the connection, then closes it
    ThreadPerConnection* queue = task->queue;
    queue->sockets_->Untrack(task->tracked);
    task.reset();
    std::lock_guard<std::mutex> l(queue->mu_);
    if (--queue->active_ == 0) queue->idle_.notify_all();
    return nullptr;
  }

  std::shared_ptr<AcceptedSockets> sockets_;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;
};

// Go's strconv.ParseBool, which is what the apiserver uses for query booleans.
bool ParseBool(const std::string& v) {
  return v == "1" || v == "t" || v == "T" || v == "true" || v == "TRUE" || v == "True";
}

std::string Param(const httplib::Request& req, const char* name) {
  return req.has_param(name) ? req.get_param_value(name) : "";
}

void Reply(httplib::Response& res, int code, const json& body) {
  res.status = code;
  res.set_content(body.dump(), kJson);
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  json body = StatusBody(status);
  Reply(res, body.value("code", 500), body);
}

bool WantsTable(const httplib::Request& req) {
  return absl::StrContains(req.get_header_value("Accept"), "as=Table");
}

struct ParsedPath {
  std::string group, version;
  std::vector<std::string> rest;
  bool ok = false;
};

ParsedPath SplitApiPath(const std::string& path) {
  ParsedPath p;
  std::vector<std::string> segs = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (segs.size() >= 2 && segs[0] == "api") {
    p.version = segs[1];
    p.rest.assign(segs.begin() + 2, segs.end());
    p.ok = true;
  } else if (segs.size() >= 3 && segs[0] == "apis") {
    p.group = segs[1];
    p.version = segs[2];
    p.rest.assign(segs.begin() + 3, segs.end());
    p.ok = true;
  }
  return p;
}

WriteOptions WriteOptionsOf(const httplib::Request& req) {
  WriteOptions o;
  o.dry_run = req.has_param("dryRun");
  o.field_manager = Param(req, "fieldManager");
  o.user_agent = req.get_header_value("User-Agent");  // the manager when fieldManager is absent
  o.force = ParseBool(Param(req, "force"));
  std::string v = Param(req, "fieldValidation");
  o.field_validation = v.empty() ? "Warn" : v;
  return o;
}

// The apiserver's versioner: strconv.ParseUint on anything but "" and "0".
absl::StatusOr<int64_t> ParseResourceVersion(const std::string& rv) {
  if (rv.empty() || rv == "0") return 0;
  auto invalid = [&](absl::string_view why) {
    std::string quoted = absl::StrCat("\"", absl::CHexEscape(rv), "\"");
    return BadRequestError(
        absl::StrCat("invalid resource version: resourceVersion: Invalid value: ", quoted,
                     ": strconv.ParseUint: parsing ", quoted, ": ", why));
  };
  if (!std::all_of(rv.begin(), rv.end(), absl::ascii_isdigit)) return invalid("invalid syntax");
  uint64_t v = 0;
  if (!absl::SimpleAtoi(rv, &v)) return invalid("value out of range");
  return static_cast<int64_t>(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
}

absl::StatusOr<ListOptions> ListOptionsOf(const httplib::Request& req) {
  ListOptions o;
  ASSIGN_OR_RETURN(o.resource_version, ParseResourceVersion(Param(req, "resourceVersion")));
  ASSIGN_OR_RETURN(o.labels, LabelSelector::Parse(Param(req, "labelSelector")));
  ASSIGN_OR_RETURN(o.fields, FieldSelector::Parse(Param(req, "fieldSelector")));
  absl::SimpleAtoi(Param(req, "limit"), &o.limit);
  o.continue_token = Param(req, "continue");
  return o;
}

absl::StatusOr<DeleteOptions> DeleteOptionsOf(const httplib::Request& req) {
  DeleteOptions o;
  json body = json::object();
  if (absl::StrContains(req.get_header_value("Content-Type"), "protobuf")) {
    ASSIGN_OR_RETURN(body, DecodeK8sProtobuf(req.body));
  } else if (!req.body.empty()) {
    ASSIGN_OR_RETURN(body, DecodeJson(req.body));
  }
  o.propagation = body.value("propagationPolicy", Param(req, "propagationPolicy"));
  if (body.value("orphanDependents", false) || ParseBool(Param(req, "orphanDependents"))) {
    o.propagation = "Orphan";
  }
  if (!o.propagation.empty() && o.propagation != "Background" && o.propagation != "Foreground" &&
      o.propagation != "Orphan") {
    return InvalidError("DeleteOptions.meta.k8s.io", "",
                        {{"FieldValueNotSupported",
                          absl::StrCat("Unsupported value: \"", o.propagation,
                                       "\": supported values: \"Foreground\", \"Background\", "
                                       "\"Orphan\""),
                          "propagationPolicy"}});
  }
  int64_t grace;
  if (body.contains("gracePeriodSeconds") && body["gracePeriodSeconds"].is_number()) {
    o.grace_seconds = body["gracePeriodSeconds"].get<int64_t>();
  } else if (absl::SimpleAtoi(Param(req, "gracePeriodSeconds"), &grace)) {
    o.grace_seconds = grace;
  }
  o.dry_run = req.has_param("dryRun") || body.contains("dryRun");
  if (body.contains("preconditions")) {
    o.precondition_uid = body["preconditions"].value("uid", "");
    o.precondition_rv = body["preconditions"].value("resourceVersion", "");
  }
  return o;
}

// Applies the selector transition rules of the watch cache: entering the selection is ADDED,
// leaving it is DELETED (with the previous state and the new revision).
std::optional<json> WatchEventFor(const StoreEvent& e, const Target& target,
                                  const ListOptions& filter) {
  auto matches = [&](const json& o) {
    if (o.is_null()) return false;
    if (!target.ns.empty() && o["metadata"].value("namespace", "") != target.ns) return false;
    return filter.labels.Matches(o["metadata"].value("labels", json())) && filter.fields.Matches(o);
  };
  bool now = e.type != "DELETED" && matches(e.object);
  bool before = e.type == "DELETED" ? matches(e.object) : matches(e.previous);
  json object = e.object;
  std::string type;
  if (now && before) {
    type = "MODIFIED";
  } else if (now) {
    type = "ADDED";
  } else if (before) {
    type = "DELETED";
    if (e.type != "DELETED") {
      object = e.previous;
      object["metadata"]["resourceVersion"] = std::to_string(e.revision);
    }
  } else {
    return std::nullopt;
  }
  object["apiVersion"] = target.type->GroupVersion();
  return json{{"type", type}, {"object", object}};
}

}  // namespace

Server::Server(ServerOptions options, Api* api, LogSource* logs)
    : options_(std::move(options)), api_(api), logs_(logs) {}

Server::~Server() { Stop(); }

std::string Server::address() const {
  return absl::StrCat(options_.cert_path.empty() ? "http://" : "https://", options_.host, ":",
                      port_);
}

absl::Status Server::Start() {
  if (options_.cert_path.empty()) {
    http_ = std::make_unique<httplib::Server>();
  } else {
    auto https =
        std::make_unique<httplib::SSLServer>(options_.cert_path.c_str(), options_.key_path.c_str());
    if (!https->is_valid()) return absl::InternalError("cannot load the TLS certificate");
    http_ = std::move(https);
  }
  http_->new_task_queue = [this] { return new ThreadPerConnection(sockets_); };
  http_->set_payload_max_length(64 << 20);
  http_->set_keep_alive_max_count(10000);
  http_->set_keep_alive_timeout(30);
  // httplib writes a response's headers and body separately; with Nagle on, the body waits for
  // the client's delayed ACK (40 ms), capping each keep-alive connection near 25 requests/s.
  http_->set_tcp_nodelay(true);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
  http_->Get(R"(/.*)", handler);
  http_->Post(R"(/.*)", handler);
  http_->Put(R"(/.*)", handler);
  http_->Patch(R"(/.*)", handler);
  http_->Delete(R"(/.*)", handler);
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
  } else {
    port_ = http_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.host, ":", options_.port));
  }
  sockets_ = std::make_shared<AcceptedSockets>(port_);
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  if (options_.compact_every > absl::ZeroDuration()) {
    compactor_ = std::thread([this] {
      absl::Time next = absl::Now() + options_.compact_every;
      while (!stopping_) {
        absl::SleepFor(absl::Milliseconds(100));
        if (absl::Now() < next) continue;
        api_->store()->Compact();
        next = absl::Now() + options_.compact_every;
      }
    });
  }
  return absl::OkStatus();
}

void Server::Stop() {
  if (stopping_.exchange(true)) return;
  api_->store()->Shutdown();
  if (http_) http_->stop();
  if (sockets_) sockets_->ShutdownAll();
  if (listener_.joinable()) listener_.join();
  if (compactor_.joinable()) compactor_.join();
}

bool Server::WaitForRevision(int64_t revision) {
  Store* store = api_->store();
  absl::Time deadline = absl::Now() + options_.too_large_rv_wait;
  while (!stopping_ && store->Revision() < revision && absl::Now() < deadline) {
    store->WaitForChange(revision - 1, deadline);
  }
  return store->Revision() >= revision;
}

std::optional<UserInfo> Server::Authenticate(const httplib::Request& req) const {
  std::string auth = req.get_header_value("Authorization");
  size_t space = auth.find(' ');
  std::string token;
  if (space != std::string::npos && absl::AsciiStrToLower(auth.substr(0, space)) == "bearer") {
    token = std::string(absl::StripAsciiWhitespace(auth.substr(space + 1)));
  }
  if (!token.empty() && token == options_.token) return AdminUser();
  if (auto it = options_.user_tokens.find(token);
      !token.empty() && it != options_.user_tokens.end()) {
    return it->second;
  }
  // Without --token every other request is the admin's.
  if (options_.token.empty()) return AdminUser();
  return std::nullopt;
}

bool Server::InjectFault(const httplib::Request& req, httplib::Response& res) {
  if (ParseBool(Param(req, "watch")) || ParseBool(Param(req, "follow"))) return false;
  if (options_.latency > absl::ZeroDuration()) absl::SleepFor(options_.latency);
  if (options_.error_rate <= 0) return false;
  static thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> dist(0, 1);
  if (dist(rng) >= options_.error_rate) return false;
  if (dist(rng) < 0.5) {
    ReplyError(res, ApiError(500, "InternalError", "Internal error occurred: injected fault"));
  } else {
    res.set_header("Retry-After", "1");
    ReplyError(res, ApiError(429, "TooManyRequests", "Too many requests: injected fault"));
  }
  return true;
}

void Server::Handle(const httplib::Request& req, httplib::Response& res) {
  // httplib gzips JSON and text/* bodies when the client accepts it (Go always does), and its
  // gzip stream buffers chunked output until the end: watches and `logs -f` would deliver
  // nothing until they close. The Request object is httplib's own non-const local, so
  // dropping the header here is well-defined; we never compress anything.
  const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
  log::Debug("Served request", {{"method", req.method}, {"path", req.path}});
  if (req.path == "/healthz" || req.path == "/readyz" || req.path == "/livez") {
    res.set_content("ok", "text/plain");
    return;
  }
  std::optional<UserInfo> user = Authenticate(req);
  if (!user) {
    ReplyError(res, ApiError(401, "Unauthorized", "Unauthorized"));
    return;
  }
  if (options_.rbac) {
    absl::Status allowed =
        Authorize(*api_->store(), *user,
                  AttributesOf(req.method, req.path, ParseBool(Param(req, "watch")),
                               Param(req, "fieldSelector")));
    if (!allowed.ok()) return ReplyError(res, allowed);
  }
  if (InjectFault(req, res)) return;
  std::string ct = absl::AsciiStrToLower(req.get_header_value("Content-Type"));
  if ((req.method == "POST" || req.method == "PUT") && !req.body.empty() &&
      !absl::StrContains(ct, "json") && !absl::StrContains(ct, "yaml") &&
      !(absl::StrContains(ct, "protobuf") && DecodeK8sProtobuf(req.body).ok())) {
    // Protobuf/CBOR bodies: 415 makes client-go fall back to JSON.
    ReplyError(res, ApiError(415, "UnsupportedMediaType",
                             absl::StrCat("the body of the request was in an unknown format - "
                                          "accepted media types include: application/json, "
                                          "application/yaml")));
    return;
  }
  try {
    if (ServeDiscovery(req, res)) return;
    ServeResource(req, res, *user);
  } catch (const std::exception& e) {
    log::Error("Failed request", {{"path", req.path}, {"error", std::string(e.what())}});
    ReplyError(res,
               ApiError(500, "InternalError", absl::StrCat("Internal error occurred: ", e.what())));
  }
}

bool Server::ServeDiscovery(const httplib::Request& req, httplib::Response& res) {
  if (req.method != "GET") return false;
  const Registry& registry = *api_->registry();
  const std::string& path = req.path;
  json body;
  if (path == "/version") {
    body = VersionInfo();
  } else if (path == "/api") {
    body = ApiVersions(absl::StrCat(options_.host, ":", port_));
  } else if (path == "/apis") {
    body = ApiGroupList(registry);
  } else if (path == "/openapi/v3") {
    body = OpenApiRoot(registry);
  } else if (absl::StartsWith(path, "/openapi/v3/")) {
    ParsedPath p = SplitApiPath(path.substr(strlen("/openapi/v3")));
    body = p.ok && p.rest.empty() ? OpenApiGroupVersion(registry, p.group, p.version) : json();
    if (body.is_null()) {
      ReplyError(res,
                 ApiError(404, "NotFound", "the server could not find the requested resource"));
      return true;
    }
  } else {
    std::vector<std::string> segs = absl::StrSplit(path, '/', absl::SkipEmpty());
    if (segs.size() == 2 && segs[0] == "apis") {
      body = ApiGroup(registry, segs[1]);
    } else if ((segs.size() == 2 && segs[0] == "api") || (segs.size() == 3 && segs[0] == "apis")) {
      ParsedPath p = SplitApiPath(path);
      body = ResourceList(registry, p.group, p.version);
    } else {
      return false;
    }
    if (body.is_null()) {
      ReplyError(res,
                 ApiError(404, "NotFound", "the server could not find the requested resource"));
      return true;
    }
  }
  Reply(res, 200, body);
  return true;
}

void Server::ServeResource(const httplib::Request& req, httplib::Response& res,
                           const UserInfo& user) {
  ParsedPath p = SplitApiPath(req.path);
  const absl::Status not_found =
      ApiError(404, "NotFound", "the server could not find the requested resource");
  if (!p.ok || p.rest.empty()) return ReplyError(res, not_found);
  Target target;
  std::vector<std::string>& r = p.rest;
  std::string plural;
  size_t i = 0;
  bool ns_subresource =
      r.size() == 3 && r[0] == "namespaces" && (r[2] == "status" || r[2] == "finalize");
  if (r[0] == "namespaces" && r.size() >= 3 && !ns_subresource) {
    target.ns = r[1];
    i = 2;
  }
  plural = r[i];
  if (r.size() > i + 1) target.name = r[i + 1];
  if (r.size() > i + 2) target.subresource = r[i + 2];
  if (r.size() > i + 3) return ReplyError(res, not_found);
  target.type = api_->registry()->Find(p.group, p.version, plural);
  if (!target.type) return ReplyError(res, not_found);
  if (!target.type->namespaced && !target.ns.empty()) return ReplyError(res, not_found);
  const std::string& sub = target.subresource;
  if (!sub.empty() && !(sub == "status" && target.type->status_subresource) &&
      !(sub == "scale" && target.type->scale_subresource) &&
      !(sub == "log" && target.type->kind == "Pod" && target.type->group.empty()) &&
      !(target.type->kind == "Namespace" && sub == "finalize")) {
    return ReplyError(res, not_found);
  }
  if (target.type->namespaced && target.ns.empty() && !target.name.empty()) {
    return ReplyError(res, not_found);
  }
  const std::string& m = req.method;
  bool collection = target.name.empty();
  std::vector<std::string> warnings;
  auto write_options = [&] {
    WriteOptions o = WriteOptionsOf(req);
    o.warnings = &warnings;
    if (options_.rbac) o.user = user;
    return o;
  };
  absl::StatusOr<json> result;
  int ok_code = 200;
  if (m == "GET" && collection) {
    if (ParseBool(Param(req, "watch"))) return ServeWatch(target, req, res);
    auto list_options = ListOptionsOf(req);
    if (!list_options.ok()) return ReplyError(res, list_options.status());
    // "Not older than" this version: wait for the store to get there, as the watch cache does.
    if (list_options->continue_token.empty() && !WaitForRevision(list_options->resource_version)) {
      return ReplyError(res, TooLargeResourceVersionError(list_options->resource_version,
                                                          api_->store()->Revision()));
    }
    result = api_->List(target, *list_options);
    if (result.ok() && WantsTable(req)) {
      std::vector<json> items((*result)["items"].begin(), (*result)["items"].end());
      result = ToTable(*target.type, items, (*result)["metadata"]["resourceVersion"],
                       Param(req, "includeObject"));
      (*result)["metadata"] = (*result)["metadata"];
    }
  } else if (m == "GET") {
    if (sub == "log") return ServeLog(target, req, res);
    result = api_->Get(target);
    if (result.ok() && WantsTable(req) && sub.empty()) {
      result = ToTable(*target.type, {*result}, (*result)["metadata"].value("resourceVersion", ""),
                       Param(req, "includeObject"));
    }
  } else if (m == "POST" && collection) {
    auto body = DecodeObject(*target.type, *api_->registry(), req.get_header_value("Content-Type"),
                             req.body);
    if (!body.ok()) return ReplyError(res, body.status());
    result = api_->Create(target, std::move(*body), write_options());
    ok_code = 201;
  } else if (m == "PUT" && !collection) {
    auto body = DecodeObject(*target.type, *api_->registry(), req.get_header_value("Content-Type"),
                             req.body);
    if (!body.ok()) return ReplyError(res, body.status());
    bool created = false;
    result = api_->Update(target, std::move(*body), write_options(), &created);
    if (created) ok_code = 201;
  } else if (m == "PATCH" && !collection) {
    bool created = false;
    result = api_->Patch(target, req.get_header_value("Content-Type"), req.body, write_options(),
                         &created);
    if (created) ok_code = 201;
  } else if (m == "DELETE") {
    auto options = DeleteOptionsOf(req);
    if (!options.ok()) return ReplyError(res, options.status());
    if (collection) {
      auto list_options = ListOptionsOf(req);
      if (!list_options.ok()) return ReplyError(res, list_options.status());
      result = api_->DeleteCollection(target, *list_options, *options);
    } else {
      result = api_->Delete(target, *options);
    }
  } else {
    return ReplyError(res,
                      ApiError(405, "MethodNotAllowed",
                               "the server does not allow this method on the requested resource"));
  }
  for (const std::string& w : warnings) res.set_header("Warning", WarningHeaderValue(w));
  if (!result.ok()) return ReplyError(res, result.status());
  Reply(res, ok_code, *result);
}

void Server::ServeWatch(const Target& target, const httplib::Request& req, httplib::Response& res) {
  if (req.has_param("sendInitialEvents")) {
    // Without a real WatchList implementation the only safe answer is the one a server with the
    // feature gate off gives: client-go then falls back to LIST + WATCH.
    return ReplyError(res, InvalidError("ListOptions.meta.k8s.io", "",
                                        {{"FieldValueForbidden",
                                          "Forbidden: sendInitialEvents is forbidden for watch "
                                          "unless the WatchList feature gate is enabled",
                                          "sendInitialEvents"}}));
  }
  auto filter = ListOptionsOf(req);
  if (!filter.ok()) return ReplyError(res, filter.status());
  int64_t timeout = 0;
  absl::SimpleAtoi(Param(req, "timeoutSeconds"), &timeout);
  if (timeout <= 0) timeout = 1800;
  const bool initial_list = filter->resource_version == 0;
  bool bookmarks = ParseBool(Param(req, "allowWatchBookmarks"));
  bool table = WantsTable(req);
  std::string include_object = Param(req, "includeObject");
  absl::Time deadline = absl::Now() + absl::Seconds(timeout);
  bool drop = false;
  if (options_.drop_watches_every > absl::ZeroDuration() &&
      absl::Now() + options_.drop_watches_every < deadline) {
    deadline = absl::Now() + options_.drop_watches_every;
    drop = true;
  }
  res.status = 200;
  res.set_chunked_content_provider(
      kJson, [this, target, filter = *filter, initial_list, bookmarks, table, include_object,
              deadline, drop](size_t, httplib::DataSink& sink) {
        Store* store = api_->store();
        const std::string key = target.type->StorageKey();
        auto emit = [&](json event) {
          if (table && event["type"] != "ERROR" && event["type"] != "BOOKMARK") {
            event["object"] =
                ToTable(*target.type, {event["object"]},
                        event["object"]["metadata"].value("resourceVersion", ""), include_object);
          }
          std::string line = event.dump() + "\n";
          log::Debug("Sent watch event", {{"type", event.value("type", "")},
                                          {"resource", target.type->plural},
                                          {"bytes", line.size()}});
          return sink.write(line.data(), line.size());
        };
        int64_t cursor = 0;
        if (initial_list) {
          std::vector<json> objects = store->List(key, target.ns, &cursor);
          for (json& o : objects) {
            StoreEvent e{cursor, "ADDED", key, std::move(o), nullptr};
            if (auto ev = WatchEventFor(e, target, filter)) {
              if (!emit(*ev)) return false;
            }
          }
        } else if (!WaitForRevision(filter.resource_version)) {
          // Past the answer's start, errors travel as an ERROR event (the apiserver's
          // errWatcher); client-go relists on this cause.
          if (stopping_) return false;
          emit({{"type", "ERROR"},
                {"object", StatusBody(TooLargeResourceVersionError(filter.resource_version,
                                                                   store->Revision()))}});
          sink.done();
          return true;
        } else {
          cursor = filter.resource_version;
        }
        absl::Time next_bookmark = absl::Now() + options_.bookmark_every;
        while (!stopping_ && sink.is_writable()) {
          std::vector<StoreEvent> events;
          int64_t scanned = cursor;
          absl::Status st = store->EventsAfter(key, cursor, &events, &scanned);
          if (!st.ok()) {
            json status = StatusBody(GoneError(st.message()));
            status["code"] = 410;
            emit({{"type", "ERROR"}, {"object", status}});
            break;
          }
          for (const StoreEvent& e : events) {
            if (auto ev = WatchEventFor(e, target, filter)) {
              if (!emit(*ev)) return false;
            }
          }
          cursor = scanned;
          absl::Time now = absl::Now();
          if (now >= deadline) break;
          if (bookmarks && now >= next_bookmark) {
            json obj = {{"kind", target.type->kind},
                        {"apiVersion", target.type->GroupVersion()},
                        {"metadata", {{"resourceVersion", std::to_string(cursor)}}}};
            if (!emit({{"type", "BOOKMARK"}, {"object", obj}})) return false;
            next_bookmark = now + options_.bookmark_every;
          }
          store->WaitForChange(cursor, std::min(deadline, next_bookmark));
        }
        // An injected drop ends the stream without the final chunk, like a lost connection.
        if (drop && absl::Now() >= deadline) return false;
        sink.done();
        return true;
      });
}

void Server::ServeLog(const Target& target, const httplib::Request& req, httplib::Response& res) {
  auto pod = api_->Get(Target{target.type, target.ns, target.name, ""});
  if (!pod.ok()) return ReplyError(res, pod.status());
  std::string container = Param(req, "container");
  const json containers = (*pod)["spec"].value("containers", json::array());
  if (container.empty()) {
    if (containers.size() != 1) {
      return ReplyError(res, BadRequestError(absl::StrCat(
                                 "a container name must be specified for pod ", target.name)));
    }
    container = containers[0].value("name", "");
  }
  if (!logs_) {
    return ReplyError(
        res, BadRequestError(absl::StrCat("container \"", container, "\" in pod \"", target.name,
                                          "\" is waiting to start: no kubelet")));
  }
  auto path = logs_->LogPath(target.ns, target.name, container, ParseBool(Param(req, "previous")));
  if (!path.ok()) return ReplyError(res, path.status());
  bool follow = ParseBool(Param(req, "follow"));
  bool timestamps = ParseBool(Param(req, "timestamps"));
  // absl::SimpleAtoi zeroes its output on failure, so absent parameters keep their -1 here.
  int64_t tail = -1, limit_bytes = -1;
  if (req.has_param("tailLines")) absl::SimpleAtoi(Param(req, "tailLines"), &tail);
  if (req.has_param("limitBytes")) absl::SimpleAtoi(Param(req, "limitBytes"), &limit_bytes);
  // Each stored line is "<timestamp> <text>"; strip the stamp unless asked for.
  auto render = [timestamps](const std::string& line) {
    if (timestamps) return line + "\n";
    size_t space = line.find(' ');
    return (space == std::string::npos ? line : line.substr(space + 1)) + "\n";
  };
  std::ifstream in(*path);
  std::vector<std::string> lines;
  std::string line;
  std::streamoff offset = 0;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial last line is sent once it is complete
    lines.push_back(line);
    offset = in.tellg();
  }
  size_t start = tail >= 0 && static_cast<size_t>(tail) < lines.size() ? lines.size() - tail : 0;
  std::string initial;
  for (size_t i = start; i < lines.size(); ++i) initial += render(lines[i]);
  if (limit_bytes >= 0 && initial.size() > static_cast<size_t>(limit_bytes)) {
    initial.resize(limit_bytes);
  }
  if (!follow) {
    res.set_content(initial, "text/plain");
    return;
  }
  res.set_chunked_content_provider("text/plain", [this, target, container, file = *path, initial,
                                                  offset, render](size_t, httplib::DataSink& sink) {
    if (!initial.empty() && !sink.write(initial.data(), initial.size())) return false;
    std::ifstream f(file);
    f.seekg(offset);
    std::string pending;
    while (!stopping_ && sink.is_writable()) {
      bool running = logs_->Running(target.ns, target.name, container);
      std::string chunk;
      char buf[4096];
      f.clear();
      while (f.read(buf, sizeof(buf)) || f.gcount() > 0) chunk.append(buf, f.gcount());
      pending += chunk;
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string out = render(pending.substr(0, nl));
        pending.erase(0, nl + 1);
        if (!sink.write(out.data(), out.size())) return false;
      }
      if (!running && chunk.empty()) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    sink.done();
    return true;
  });
}

absl::Status WriteKubeconfig(const std::string& path, const std::string& server,
                             const std::string& token, const std::string& ca_pem) {
  std::string text = absl::StrCat(
      "apiVersion: v1\nkind: Config\n",
      "clusters:\n- name: localkube\n  cluster:\n    server: ", server, "\n",
      ca_pem.empty()
          ? ""
          : absl::StrCat("    certificate-authority-data: ", absl::Base64Escape(ca_pem), "\n"),
      "users:\n- name: localkube\n  user:\n",
      token.empty() ? "    username: admin\n" : absl::StrCat("    token: ", token, "\n"),
      "contexts:\n- name: localkube\n  context:\n    cluster: localkube\n",
      "    user: localkube\n    namespace: default\n", "current-context: localkube\n");
  // It carries the admin token.
  return WritePrivateFile(path, text);
}

}  // namespace kubetrain::localkube
