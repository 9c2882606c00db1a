// The Server's request routing: start and stop, authentication and RBAC, fault injection,
// discovery and OpenAPI, and the REST verbs on resources (with Table content negotiation).
// Watches are served in watch.cc, pods/log in pod_log.cc, connections in connections.cc.
#include "localkube/server.h"

#include <httplib.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/http_serve.h"
#include "common/logging.h"
#include "localkube/access_reviews.h"
#include "localkube/binding.h"
#include "localkube/connections.h"
#include "localkube/decode.h"
#include "localkube/discovery.h"
#include "localkube/disruption.h"
#include "localkube/errors.h"
#include "localkube/impersonation.h"
#include "localkube/kinds.h"
#include "localkube/pod_security.h"
#include "localkube/protobuf.h"
#include "localkube/request.h"
#include "localkube/table.h"
#include "localkube/tls.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

namespace {

absl::Status MethodNotAllowed() {
  return ApiError(405, "MethodNotAllowed",
                  "the server does not allow this method on the requested resource");
}

}  // namespace

Server::Server(ServerOptions options, Api* api, LogSource* logs)
    : options_(std::move(options)), api_(api), logs_(logs) {
  if (!options_.service_account_tokens) {
    options_.service_account_tokens = std::make_shared<ServiceAccountTokens>(api_->store());
  }
}

Server::~Server() { Stop(); }

std::string Server::address() const {
  return absl::StrCat(options_.cert_path.empty() ? "http://" : "https://", options_.host, ":",
                      port_);
}

absl::Status Server::Start() {
  if (!options_.authz_log.empty()) {
    authz_log_.open(options_.authz_log, std::ios::app);
    if (!authz_log_) return absl::InvalidArgumentError("cannot open " + options_.authz_log);
  }
  auto make = [this]() -> std::unique_ptr<httplib::Server> {
    std::unique_ptr<httplib::Server> http;
    if (options_.cert_path.empty()) {
      http = std::make_unique<httplib::Server>();
    } else {
      auto https = std::make_unique<httplib::SSLServer>(options_.cert_path.c_str(),
                                                        options_.key_path.c_str());
      if (!https->is_valid()) return nullptr;
      http = std::move(https);
    }
    http->new_task_queue = [this] { return new ThreadPerConnection(sockets_); };
    http->set_payload_max_length(64 << 20);
    http->set_keep_alive_max_count(10000);
    http->set_keep_alive_timeout(30);
    // httplib writes a response's headers and body separately; with Nagle on, the body waits
    // for the client's delayed ACK (40 ms), capping each keep-alive connection near 25
    // requests/s.
    http->set_tcp_nodelay(true);
    // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112 §6.3;
    // Go's server, and so kube-apiserver, reads it so). httplib would read one until the client
    // closes the connection, so a bodiless `curl -X POST` hung: the header is added before
    // httplib reads the body. The request is httplib's own, not const, object.
    http->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
      if (req.method != "GET" && !req.has_header("Content-Length") &&
          !req.has_header("Transfer-Encoding")) {
        const_cast<httplib::Request&>(req).headers.emplace("Content-Length", "0");
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      Handle(req, res);
    };
    http->Get(R"(/.*)", handler);
    http->Post(R"(/.*)", handler);
    http->Put(R"(/.*)", handler);
    http->Patch(R"(/.*)", handler);
    http->Delete(R"(/.*)", handler);
    return http;
  };
  http_ = make();
  if (!http_) return absl::InternalError("cannot load the TLS certificate");
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
  // The same port on each further address (the nodes' bridges, for pods), one listener each.
  for (const std::string& host : options_.also_listen_on) {
    std::unique_ptr<httplib::Server> http = make();
    if (!http || !http->bind_to_port(host, port_)) {
      Stop();
      return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port_));
    }
    more_listeners_.push_back(ServeInBackground(*http));
    more_http_.push_back(std::move(http));
  }
  listener_ = ServeInBackground(*http_);  // so that a Stop right after this stops it
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
  for (auto& http : more_http_) http->stop();
  if (sockets_) sockets_->ShutdownAll();
  if (listener_.joinable()) listener_.join();
  for (std::thread& t : more_listeners_) t.join();
  if (compactor_.joinable()) compactor_.join();
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
  // The ServiceAccount token authenticator: a JWT that verifies, has not expired, names the API
  // audience and whose ServiceAccount still exists.
  if (LooksLikeJwt(token)) {
    absl::StatusOr<UserInfo> sa = options_.service_account_tokens->Authenticate(token);
    if (sa.ok()) return *sa;
    log::Debug("Refused a service account token", {{"error", std::string(sa.status().message())}});
  }
  // Without --token every other request is the admin's.
  if (options_.token.empty()) return AdminUser();
  return std::nullopt;
}

void Server::ServeNodeFault(const httplib::Request& req, httplib::Response& res,
                            const UserInfo& user) {
  std::vector<std::string> parts =
      absl::StrSplit(req.path.substr(strlen("/localkube/v1/nodes/")), '/');
  if (!options_.node_fault || parts.size() != 2 || parts[0].empty()) {
    return ReplyError(
        res, ApiError(404, "NotFound", "the server could not find the requested resource"));
  }
  if (std::find(user.groups.begin(), user.groups.end(), "system:masters") == user.groups.end()) {
    return ReplyError(res, ApiError(403, "Forbidden",
                                    absl::StrCat("User \"", user.name,
                                                 "\" cannot change nodes' faults: only "
                                                 "system:masters can")));
  }
  if (req.method != "POST") {
    return ReplyError(res, ApiError(405, "MethodNotAllowed", "node faults are POSTed"));
  }
  absl::StatusOr<std::string> state = options_.node_fault(parts[0], parts[1]);
  if (!state.ok()) return ReplyError(res, state.status());
  res.set_content(json{{"node", parts[0]}, {"state", *state}}.dump(), "application/json");
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
  if (std::any_of(req.headers.begin(), req.headers.end(), [](const auto& h) {
        return absl::StartsWithIgnoreCase(h.first, "impersonate-");
      })) {
    absl::StatusOr<UserInfo> acting = Impersonate(
        options_.rbac ? api_->store() : nullptr, *user,
        std::vector<std::pair<std::string, std::string>>(req.headers.begin(), req.headers.end()));
    if (!acting.ok()) return ReplyError(res, acting.status());
    user = std::move(*acting);
  }
  if (options_.rbac) {
    RequestAttributes attributes = AttributesOf(
        req.method, req.path, ParseBool(Param(req, "watch")), Param(req, "fieldSelector"));
    absl::Status allowed = Authorize(*api_->store(), *user, attributes);
    if (!options_.authz_log.empty()) {
      json line = {{"user", user->name},
                   {"verb", attributes.verb},
                   {"decision", allowed.ok() ? "allow" : "forbid"}};
      if (attributes.resource_request) {
        line["apiGroup"] = attributes.api_group;
        line["resource"] = attributes.resource;
        if (!attributes.subresource.empty()) line["subresource"] = attributes.subresource;
        if (!attributes.ns.empty()) line["namespace"] = attributes.ns;
        if (!attributes.name.empty()) line["name"] = attributes.name;
      } else {
        line["path"] = attributes.path;
      }
      std::lock_guard<std::mutex> lock(authz_log_mu_);
      authz_log_ << line.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
    }
    if (!allowed.ok()) return ReplyError(res, allowed);
  }
  if (absl::StartsWith(req.path, "/localkube/v1/nodes/")) return ServeNodeFault(req, res, *user);
  if (InjectFault(req, res)) return;
  std::string ct = absl::AsciiStrToLower(req.get_header_value("Content-Type"));
  if ((req.method == "POST" || req.method == "PUT") && !req.body.empty() &&
      !absl::StrContains(ct, "json") && !absl::StrContains(ct, "yaml") &&
      !(absl::StrContains(ct, "protobuf") && K8sProtobufDecodable(req.body))) {
    // CBOR bodies, and protobuf ones of kinds without a schema here (custom resources): 415
    // makes client-go fall back to JSON.
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
  if (IsAccessReview(p.group, p.version, plural)) {
    if (!target.ns.empty() || !target.name.empty()) return ReplyError(res, not_found);
    if (req.method != "POST") return ReplyError(res, MethodNotAllowed());
    auto review = CreateAccessReview(*api_->registry(), options_.rbac ? api_->store() : nullptr,
                                     user, plural, req.get_header_value("Content-Type"), req.body);
    if (!review.ok()) return ReplyError(res, review.status());
    return Reply(res, 201, *review);
  }
  target.type = api_->registry()->Find(p.group, p.version, plural);
  if (!target.type) return ReplyError(res, not_found);
  if (!target.type->namespaced && !target.ns.empty()) return ReplyError(res, not_found);
  const std::string& sub = target.subresource;
  const std::vector<std::string>& served = HooksFor(*target.type).subresources;
  if (!sub.empty() && !(sub == "status" && target.type->status_subresource) &&
      !(sub == "scale" && target.type->scale_subresource) &&
      std::find(served.begin(), served.end(), sub) == served.end()) {
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
  if ((sub == "token" || sub == "eviction" || sub == "binding") &&
      m != "POST") {  // create-only subresources
    return ReplyError(res, MethodNotAllowed());
  }
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
  } else if (m == "POST" && sub == "token" && target.type->StorageKey() == kServiceAccountsKey) {
    // The TokenRequest subresource (authentication.k8s.io/v1 TokenRequest in, and out).
    json body = json::object();
    if (!req.body.empty()) {
      auto decoded =
          absl::StrContains(absl::AsciiStrToLower(req.get_header_value("Content-Type")), "protobuf")
              ? DecodeTokenRequestProtobuf(req.body)
              : DecodeJson(req.body);
      if (!decoded.ok()) return ReplyError(res, decoded.status());
      body = std::move(*decoded);
    }
    result = options_.service_account_tokens->CreateTokenRequest(target.ns, target.name, body);
    ok_code = 201;
  } else if (m == "POST" && sub == "eviction") {
    auto body = DecodeJson(req.body);
    if (!body.ok()) return ReplyError(res, body.status());
    result = EvictPod(api_, target.ns, target.name, *body, req.has_param("dryRun"));
    ok_code = 201;
  } else if (m == "POST" && sub == "binding" && target.type->StorageKey() == kPodsKey) {
    auto body = DecodeJson(req.body);
    if (!body.ok()) return ReplyError(res, body.status());
    result = BindPod(*api_, target.ns, target.name, *body, write_options().dry_run);
    ok_code = 201;
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
    return ReplyError(res, MethodNotAllowed());
  }
  for (const std::string& w : warnings) res.set_header("Warning", WarningHeaderValue(w));
  if (!result.ok()) return ReplyError(res, result.status());
  Reply(res, ok_code, *result);
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
