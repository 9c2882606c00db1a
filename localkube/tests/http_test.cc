// Drives a real localkube Server over HTTP on port 0: the semantics clients depend on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>

#include "absl/strings/match.h"
#include "absl/time/clock.h"

#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/server.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using nlohmann::json;

using testing::IsFailure;
using testing::kAdminToken;
using testing::Reply;

// Widgets (test.dev/v1) as the suite serves them: a short name, a printer column, the status and
// scale subresources, and a schema with bounds, an enum and a default.
json ValidatedWidgetCrd() {
  json crd = testing::Crd("test.dev", "v1", "Widget", "widgets", json::parse(R"({
      "subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas",
                                           "statusReplicasPath":".status.replicas"}},
      "additionalPrinterColumns":[{"name":"Size","type":"integer","jsonPath":".spec.replicas"}],
      "schema":{"openAPIV3Schema":{"type":"object","properties":{
        "spec":{"type":"object","properties":{
          "replicas":{"type":"integer","minimum":1,"maximum":5,"default":1},
          "color":{"type":"string","enum":["red","blue"]}}},
        "status":{"type":"object","properties":{"replicas":{"type":"integer"},
                                                "phase":{"type":"string"}}}}}}})"));
  crd["spec"]["names"]["shortNames"] = {"wg"};
  return crd;
}

json Widget(const std::string& name, json spec = json::object()) {
  return {{"apiVersion", "test.dev/v1"},
          {"kind", "Widget"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

class LocalkubeHttp : public testing::ServedApiTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.token = kAdminToken;
    options.bookmark_every = absl::Milliseconds(200);
    ASSERT_NO_FATAL_FAILURE(Serve(options, std::string("bearer ") + kAdminToken));
  }

  Reply Call(const std::string& method, const std::string& path, const json& body = nullptr,
             const std::string& content_type = "application/json") {
    return testing::Call(*client_, method, path, body, content_type);
  }
  // Reads a watch until the server closes it (timeoutSeconds) and returns its events.
  std::vector<json> Watch(const std::string& path) {
    std::string data;
    auto r = client_->Get(path.c_str(), [&](const char* d, size_t n) {
      data.append(d, n);
      return true;
    });
    EXPECT_TRUE(r);
    std::vector<json> events;
    size_t start = 0, nl;
    while ((nl = data.find('\n', start)) != std::string::npos) {
      events.push_back(json::parse(data.substr(start, nl - start)));
      start = nl + 1;
    }
    return events;
  }
  void InstallCrd() {
    ASSERT_EQ(Call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                   ValidatedWidgetCrd())
                  .code,
              201);
  }
};

constexpr char kWidgets[] = "/apis/test.dev/v1/namespaces/default/widgets";
constexpr char kConfigMaps[] = "/api/v1/namespaces/default/configmaps";

TEST_F(LocalkubeHttp, RejectsMissingTokenWithStatus) {
  httplib::Client anonymous("127.0.0.1", server_->port());
  auto r = anonymous.Get("/api");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["reason"], "Unauthorized");
}

TEST_F(LocalkubeHttp, DiscoveryShapes) {
  Reply version = Call("GET", "/version");
  for (const char* f : {"major", "minor", "gitVersion", "gitCommit", "gitTreeState", "buildDate",
                        "goVersion", "compiler", "platform"}) {
    EXPECT_TRUE(version.body.contains(f)) << f;
  }
  Reply api = Call("GET", "/api");
  EXPECT_EQ(api.body["serverAddressByClientCIDRs"].size(), 1u);
  Reply v1 = Call("GET", "/api/v1");
  bool found_log = false;
  for (const auto& r : v1.body["resources"]) {
    EXPECT_TRUE(r.contains("singularName") && r["verbs"].is_array());
    if (r["name"] == "pods/log") found_log = true;
  }
  EXPECT_TRUE(found_log);
  EXPECT_EQ(Call("GET", "/apis/test.dev/v1").code, 404);
  InstallCrd();
  Reply group = Call("GET", "/apis/test.dev/v1");
  ASSERT_EQ(group.code, 200);
  EXPECT_EQ(group.body["resources"][0]["shortNames"], json::parse(R"(["wg"])"));
  EXPECT_EQ(group.body["resources"][2]["kind"], "Scale");
  Reply openapi = Call("GET", "/openapi/v3");
  EXPECT_TRUE(openapi.body["paths"].contains("apis/test.dev/v1"));
  Reply doc = Call("GET", "/openapi/v3/apis/test.dev/v1");
  const json& patch =
      doc.body["paths"]["/apis/test.dev/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
  EXPECT_EQ(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
  bool validation = false;
  for (const auto& p : patch["parameters"]) validation |= p["name"] == "fieldValidation";
  EXPECT_TRUE(validation);
}

TEST_F(LocalkubeHttp, CreateConflictsAndNotFound) {
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "a"}}},
             {"data", {{"k", "v"}}}};
  Reply created = Call("POST", kConfigMaps, cm);
  ASSERT_EQ(created.code, 201);
  EXPECT_FALSE(created.body["metadata"]["uid"].get<std::string>().empty());
  EXPECT_FALSE(created.body["metadata"].contains("generation"));
  Reply again = Call("POST", kConfigMaps, cm);
  EXPECT_EQ(again.code, 409);
  EXPECT_EQ(again.body["reason"], "AlreadyExists");
  json stale = created.body;
  stale["metadata"]["resourceVersion"] = "1";
  Reply conflict = Call("PUT", std::string(kConfigMaps) + "/a", stale);
  EXPECT_EQ(conflict.code, 409);
  EXPECT_EQ(conflict.body["reason"], "Conflict");
  json unconditional = cm;
  unconditional["data"]["k"] = "w";
  EXPECT_EQ(Call("PUT", std::string(kConfigMaps) + "/a", unconditional).code, 200);
  Reply missing = Call("GET", std::string(kConfigMaps) + "/nope");
  EXPECT_EQ(missing.code, 404);
  EXPECT_EQ(missing.body["message"], "configmaps \"nope\" not found");
  json generated = {{"metadata", {{"generateName", "gen-"}}}};
  Reply gen = Call("POST", kConfigMaps, generated);
  ASSERT_EQ(gen.code, 201);
  EXPECT_EQ(gen.body["metadata"]["name"].get<std::string>().size(), 9u);
  EXPECT_EQ(Call("POST", "/api/v1/namespaces/nowhere/configmaps", cm).code, 404);
}

TEST_F(LocalkubeHttp, CustomResourceSchemaDefaultsAndPruning) {
  InstallCrd();
  Reply bad = Call("POST", kWidgets, Widget("w", {{"replicas", 9}, {"color", "green"}}));
  ASSERT_EQ(bad.code, 422);
  EXPECT_EQ(bad.body["reason"], "Invalid");
  EXPECT_EQ(bad.body["details"]["causes"].size(), 2u);
  EXPECT_EQ(bad.body["details"]["causes"][0]["field"], "spec.color");
  Reply strict = Call("POST", std::string(kWidgets) + "?fieldValidation=Strict",
                      Widget("w", {{"shape", "round"}}));
  EXPECT_EQ(strict.code, 400);
  Reply ok = Call("POST", kWidgets, Widget("w", {{"shape", "round"}}));
  ASSERT_EQ(ok.code, 201);
  EXPECT_EQ(ok.body["spec"], json::parse(R"({"replicas":1})"));
  EXPECT_EQ(ok.body["metadata"]["generation"], 1);
  // CRs need a resourceVersion on PUT.
  EXPECT_EQ(Call("PUT", std::string(kWidgets) + "/w", Widget("w")).code, 422);
}

TEST_F(LocalkubeHttp, StatusSubresourceAndGeneration) {
  InstallCrd();
  ASSERT_EQ(Call("POST", kWidgets, Widget("w")).code, 201);
  std::string item = std::string(kWidgets) + "/w";
  Reply status = Call("PATCH", item + "/status",
                      json::parse(R"({"status":{"phase":"Ready"},"spec":{"replicas":4}})"),
                      "application/merge-patch+json");
  ASSERT_EQ(status.code, 200);
  EXPECT_EQ(status.body["status"]["phase"], "Ready");
  EXPECT_EQ(status.body["spec"]["replicas"], 1);
  EXPECT_EQ(status.body["metadata"]["generation"], 1);
  Reply spec = Call("PATCH", item, json::parse(R"({"spec":{"replicas":3},"status":{"phase":"X"}})"),
                    "application/merge-patch+json");
  EXPECT_EQ(spec.body["metadata"]["generation"], 2);
  EXPECT_EQ(spec.body["status"]["phase"], "Ready");
  Reply label = Call("PATCH", item, json::parse(R"({"metadata":{"labels":{"a":"b"}}})"),
                     "application/merge-patch+json");
  EXPECT_EQ(label.body["metadata"]["generation"], 2);
  Reply scale = Call("GET", item + "/scale");
  EXPECT_EQ(scale.body["spec"]["replicas"], 3);
  Reply smp =
      Call("PATCH", item, json::parse(R"({"spec":{}})"), "application/strategic-merge-patch+json");
  EXPECT_EQ(smp.code, 415);
  Reply apply = Call("PATCH", item + "?fieldManager=test",
                     json::parse(R"({"apiVersion":"test.dev/v1","kind":"Widget",
                                     "metadata":{"name":"w"},"spec":{"color":"red"}})"),
                     "application/apply-patch+yaml");
  EXPECT_EQ(apply.body["spec"], json::parse(R"({"replicas":3,"color":"red"})"));
  Reply create_apply = Call("PATCH", std::string(kWidgets) + "/v?fieldManager=test", Widget("v"),
                            "application/apply-patch+yaml");
  EXPECT_EQ(create_apply.code, 201);
  EXPECT_EQ(Call("PATCH", item, Widget("w"), "application/apply-patch+yaml").code, 422);
}

TEST_F(LocalkubeHttp, WatchResumesFiltersAndExpires) {
  json cm = {{"metadata", {{"name", "a"}, {"labels", {{"app", "x"}}}}}};
  Reply created = Call("POST", kConfigMaps, cm);
  std::string rv = created.body["metadata"]["resourceVersion"];
  Call("PATCH", std::string(kConfigMaps) + "/a", json::parse(R"({"data":{"k":"1"}})"),
       "application/merge-patch+json");
  Call("PATCH", std::string(kConfigMaps) + "/a",
       json::parse(R"({"metadata":{"labels":{"app":"y"}}})"), "application/merge-patch+json");
  Call("POST", kConfigMaps, json{{"metadata", {{"name", "b"}}}});
  std::vector<json> events = Watch(std::string(kConfigMaps) + "?watch=true&resourceVersion=" + rv +
                                   "&labelSelector=app%3Dx&timeoutSeconds=1");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["type"], "MODIFIED");
  EXPECT_EQ(events[1]["type"], "DELETED");  // the label change leaves the selection
  EXPECT_EQ(events[1]["object"]["metadata"]["labels"]["app"], "x");
  std::vector<json> initial =
      Watch(std::string(kConfigMaps) + "?watch=1&timeoutSeconds=1&allowWatchBookmarks=true");
  ASSERT_GE(initial.size(), 3u);
  EXPECT_EQ(initial[0]["type"], "ADDED");
  EXPECT_EQ(initial.back()["type"], "BOOKMARK");
  EXPECT_EQ(Call("GET", std::string(kConfigMaps) +
                            "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
                .code,
            422);
  store_.Compact();
  std::vector<json> expired =
      Watch(std::string(kConfigMaps) + "?watch=true&timeoutSeconds=1&resourceVersion=" + rv);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0]["type"], "ERROR");
  EXPECT_EQ(expired[0]["object"]["code"], 410);
  EXPECT_EQ(expired[0]["object"]["reason"], "Expired");
}

TEST_F(LocalkubeHttp, ListPagingAndTable) {
  InstallCrd();
  for (const char* n : {"a", "b", "c"}) Call("POST", kWidgets, Widget(n, {{"replicas", 2}}));
  Reply page = Call("GET", std::string(kWidgets) + "?limit=2");
  ASSERT_EQ(page.body["items"].size(), 2u);
  std::string token = page.body["metadata"]["continue"];
  Reply rest = Call("GET", std::string(kWidgets) + "?limit=2&continue=" + token);
  ASSERT_EQ(rest.body["items"].size(), 1u);
  EXPECT_EQ(rest.body["items"][0]["metadata"]["name"], "c");
  EXPECT_EQ(
      Call("GET", std::string(kWidgets) + "?fieldSelector=metadata.name%3Db").body["items"].size(),
      1u);
  httplib::Headers headers = {{"Accept", "application/json;as=Table;g=meta.k8s.io;v=v1"}};
  auto r = client_->Get(kWidgets, headers);
  ASSERT_TRUE(r);
  json table = json::parse(r->body);
  EXPECT_EQ(table["kind"], "Table");
  EXPECT_EQ(table["columnDefinitions"][1]["name"], "Size");
  EXPECT_EQ(table["rows"][0]["cells"][1], 2);
}

TEST_F(LocalkubeHttp, GarbageCollectionAndFinalizers) {
  InstallCrd();
  Reply owner = Call("POST", kWidgets, Widget("owner"));
  json ref = {{"apiVersion", "test.dev/v1"},
              {"kind", "Widget"},
              {"name", "owner"},
              {"uid", owner.body["metadata"]["uid"]},
              {"blockOwnerDeletion", true}};
  json dep = {{"metadata", {{"name", "dep"}, {"ownerReferences", {ref}}}}};
  ASSERT_EQ(Call("POST", kConfigMaps, dep).code, 201);
  Reply fg =
      Call("DELETE", std::string(kWidgets) + "/owner", json{{"propagationPolicy", "Foreground"}});
  EXPECT_EQ(fg.code, 200);
  EXPECT_EQ(Call("GET", std::string(kConfigMaps) + "/dep").code, 404);
  EXPECT_EQ(Call("GET", std::string(kWidgets) + "/owner").code, 404);

  json held = Widget("held");
  held["metadata"]["finalizers"] = {"test.dev/hold"};
  Call("POST", kWidgets, held);
  Reply marked = Call("DELETE", std::string(kWidgets) + "/held");
  EXPECT_TRUE(marked.body["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(Call("GET", std::string(kWidgets) + "/held").code, 200);
  Call("PATCH", std::string(kWidgets) + "/held", json::parse(R"({"metadata":{"finalizers":null}})"),
       "application/merge-patch+json");
  EXPECT_EQ(Call("GET", std::string(kWidgets) + "/held").code, 404);

  Call("POST", "/api/v1/namespaces", json{{"metadata", {{"name", "doomed"}}}});
  Call("POST", "/api/v1/namespaces/doomed/configmaps", json{{"metadata", {{"name", "x"}}}});
  EXPECT_EQ(Call("DELETE", "/api/v1/namespaces/doomed").code, 200);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/doomed/configmaps/x").code, 404);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/doomed").code, 404);
}

// A CRD whose spec keeps any value, so nesting reaches storage untouched.
json BlobCrd() {
  return testing::Crd("test.dev", "v1", "Blob", "blobs",
                      json::parse(R"({"schema":{"openAPIV3Schema":{
      "type":"object","properties":{
        "spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}})"));
}

// `levels` nested objects around 1, e.g. {"a":{"a":1}} for 2.
std::string Nested(int levels) {
  std::string text;
  for (int i = 0; i < levels; ++i) text += R"({"a":)";
  text += "1";
  text.append(levels, '}');
  return text;
}

// A request without Content-Length or Transfer-Encoding has no body (RFC 9112 §6.3), as `curl -X
// POST URL` sends one: the server answers it, and the connection serves the next request.
TEST_F(LocalkubeHttp, RequestWithoutContentLengthHasNoBody) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval bound = {20, 0};  // only bounds a server that never answers
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
  const std::string auth = std::string("Authorization: Bearer ") + kAdminToken + "\r\n";
  auto request = [&](const std::string& head) {
    std::string text = head + "Host: localhost\r\n" + auth + "\r\n";
    ASSERT_EQ(send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
  };
  // Reads one response: its head, then Content-Length bytes of body.
  auto response = [&]() -> std::string {
    std::string got;
    char buf[4096];
    size_t head_end;
    while ((head_end = got.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return got;
      got.append(buf, static_cast<size_t>(n));
    }
    size_t at = got.find("Content-Length: ");
    size_t length = at == std::string::npos ? 0 : std::stoul(got.substr(at + 16));
    while (got.size() < head_end + 4 + length) {
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  };
  request(std::string("POST ") + kConfigMaps + " HTTP/1.1\r\n");
  std::string created = response();
  // An empty body: admission names what is missing.
  EXPECT_TRUE(absl::StartsWith(created, "HTTP/1.1 422")) << created;
  EXPECT_THAT(created, ::testing::HasSubstr("name or generateName is required"));
  request("GET /version HTTP/1.1\r\n");
  std::string version = response();
  EXPECT_TRUE(absl::StartsWith(version, "HTTP/1.1 200")) << version;
  close(fd);
}

TEST_F(LocalkubeHttp, NestingBeyondTheJsonDecoderLimitIsABadRequest) {
  ASSERT_EQ(Call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", BlobCrd()).code,
            201);
  const std::string blobs = "/apis/test.dev/v1/namespaces/default/blobs";
  // The document's own object and spec are two levels: 9998 more reach encoding/json's 10000.
  std::string at_limit =
      R"({"apiVersion":"test.dev/v1","kind":"Blob","metadata":{"name":"deep"},"spec":)" +
      Nested(9998) + "}";
  auto created = client_->Post(blobs.c_str(), at_limit, "application/json");
  ASSERT_TRUE(created);
  EXPECT_EQ(created->status, 201) << created->body.substr(0, 300);
  auto got = client_->Get((blobs + "/deep").c_str());
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(Call("GET", blobs).code, 200);
  EXPECT_EQ(Call("PATCH", blobs + "/deep", json::parse(R"({"metadata":{"labels":{"a":"b"}}})"),
                 "application/merge-patch+json")
                .code,
            200);
  EXPECT_EQ(Call("DELETE", blobs + "/deep").code, 200);

  std::string over = R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":)" +
                     Nested(80000) + "}";
  auto refused = client_->Post(kConfigMaps, over, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  json status = json::parse(refused->body);
  EXPECT_EQ(status["reason"], "BadRequest");
  EXPECT_EQ(status["message"],
            "the object provided is unrecognized (must be of type ConfigMap): couldn't get "
            "version/kind; json parse error: invalid character '{' exceeded max depth "
            "({\"apiVersion\":\"v1\",\"kind\":\"Con ...)");
  auto patch = client_->Patch((blobs + "/x").c_str(), R"({"spec":)" + Nested(80000) + "}",
                              "application/merge-patch+json");
  ASSERT_TRUE(patch);
  EXPECT_EQ(patch->status, 400);
  EXPECT_EQ(Call("GET", "/version").code, 200);  // still serving
}

TEST_F(LocalkubeHttp, InvalidUtf8IsABadRequestAndNeverStored) {
  auto json_body =
      client_->Post(kConfigMaps, "{\"metadata\":{\"name\":\"u\"},\"data\":{\"k\":\"\xff\xfe\"}}",
                    "application/json");
  ASSERT_TRUE(json_body);
  EXPECT_EQ(json_body->status, 400);
  EXPECT_TRUE(absl::StrContains(json::parse(json_body->body)["message"].get<std::string>(),
                                "invalid UTF-8 byte 0xFF"));
  auto yaml_body = client_->Post(
      kConfigMaps, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: u\ndata:\n  k: \"\xff\"\n",
      "application/yaml");
  ASSERT_TRUE(yaml_body);
  EXPECT_EQ(yaml_body->status, 400);
  auto patch = client_->Patch((std::string(kConfigMaps) + "/u").c_str(),
                              "{\"data\":{\"k\":\"\xc0\xaf\"}}", "application/merge-patch+json");
  ASSERT_TRUE(patch);
  EXPECT_EQ(patch->status, 400);
  Reply list = Call("GET", kConfigMaps);
  EXPECT_EQ(list.code, 200);
  EXPECT_TRUE(list.body["items"].empty());
}

TEST_F(LocalkubeHttp, BodyOfAnotherKindOrVersionIsABadRequest) {
  json secret = {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "s"}}}};
  EXPECT_THAT(Call("POST", kConfigMaps, secret),
              IsFailure(400, "BadRequest",
                        "Secret in version \"v1\" cannot be handled as a ConfigMap: converting "
                        "(v1.Secret) to (core.ConfigMap): unknown conversion"));
  json other_group = {
      {"apiVersion", "apps/v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "c"}}}};
  EXPECT_THAT(Call("POST", kConfigMaps, other_group),
              IsFailure(400, "BadRequest",
                        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: no kind "
                        "\"ConfigMap\" is registered for version \"apps/v1\" in scheme "
                        "\"pkg/api/legacyscheme/scheme.go:30\""));
  ASSERT_EQ(Call("POST", kConfigMaps, json{{"metadata", {{"name", "c"}}}}).code, 201);
  json put = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "c"}}}};
  EXPECT_EQ(Call("PUT", std::string(kConfigMaps) + "/c", put).code, 400);
  EXPECT_EQ(Call("GET", "/api/v1/namespaces/default/secrets/s").code, 404);
}

TEST_F(LocalkubeHttp, FieldsOfTheWrongGoTypeAreBadRequests) {
  EXPECT_THAT(
      Call("POST", kConfigMaps, json::parse(R"({"metadata":{"name":"d"},"data":{"k":1}})")),
      IsFailure(400, "BadRequest",
                "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot "
                "unmarshal number into Go struct field ConfigMap.data of type string"));
  Reply secret = Call("POST", "/api/v1/namespaces/default/secrets",
                      json::parse(R"({"metadata":{"name":"s"},"stringData":{"k":true}})"));
  EXPECT_EQ(secret.code, 400);
  EXPECT_THAT(
      Call("POST", kConfigMaps, json::parse(R"({"metadata":{"name":"r","resourceVersion":5}})")),
      IsFailure(400, "BadRequest",
                "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot "
                "unmarshal number into Go struct field ObjectMeta.metadata.resourceVersion of type "
                "string"));
  EXPECT_EQ(Call("POST", kConfigMaps, json::parse(R"({"metadata":{"name":7}})")).code, 400);
  ASSERT_EQ(Call("POST", kConfigMaps, json::parse(R"({"metadata":{"name":"ok"}})")).code, 201);
  Reply patched = Call("PATCH", std::string(kConfigMaps) + "/ok",
                       json::parse(R"({"data":{"k":[1]}})"), "application/merge-patch+json");
  EXPECT_EQ(patched.code, 422);
  EXPECT_EQ(patched.body["details"]["causes"][0]["field"], "patch");
  EXPECT_EQ(Call("GET", kConfigMaps).body["items"].size(), 1u);
}

TEST_F(LocalkubeHttp, UnparsableResourceVersionIsABadRequest) {
  for (const char* query : {"?resourceVersion=abc", "?watch=true&resourceVersion=abc"}) {
    Reply r = Call("GET", std::string(kConfigMaps) + query);
    EXPECT_EQ(r.code, 400) << query;
    EXPECT_EQ(r.body["message"],
              "invalid resource version: resourceVersion: Invalid value: \"abc\": "
              "strconv.ParseUint: parsing \"abc\": invalid syntax");
  }
  EXPECT_EQ(Call("GET", std::string(kConfigMaps) + "?resourceVersion=-1").code, 400);
}

// Integer query parameters that are not numbers are refused, naming the parameter, as the
// apiserver's query decoding refuses them; they are never read as 0 (no limit, no timeout).
TEST_F(LocalkubeHttp, UnparsableIntegerParametersAreBadRequests) {
  for (const char* query : {"?limit=ten", "?watch=true&timeoutSeconds=1m"}) {
    Reply r = Call("GET", std::string(kConfigMaps) + query);
    EXPECT_EQ(r.code, 400) << query;
    EXPECT_NE(r.body.value("message", "").find("invalid query parameter"), std::string::npos)
        << query << ": " << r.body;
  }
  EXPECT_EQ(Call("GET", std::string(kConfigMaps) + "?limit=").code, 200) << "empty is absent";

  // A delete with a grace period that is not a number is refused, and nothing is deleted.
  ASSERT_EQ(Call("POST", kConfigMaps, json{{"metadata", {{"name", "kept"}}}}).code, 201);
  Reply refused = Call("DELETE", std::string(kConfigMaps) + "/kept?gracePeriodSeconds=soon");
  EXPECT_EQ(refused.code, 400);
  EXPECT_NE(refused.body.value("message", "").find("gracePeriodSeconds"), std::string::npos)
      << refused.body;
  EXPECT_EQ(Call("GET", std::string(kConfigMaps) + "/kept").code, 200);
  EXPECT_EQ(Call("DELETE", std::string(kConfigMaps) + "/kept?gracePeriodSeconds=0").code, 200);
}

TEST_F(LocalkubeHttp, FutureResourceVersionTimesOutAfterTheWatchCacheWait) {
  Reply created = Call("POST", kConfigMaps, json{{"metadata", {{"name", "a"}}}});
  int64_t rv = std::stoll(created.body["metadata"]["resourceVersion"].get<std::string>());
  std::string future = std::to_string(rv + 1000);
  absl::Time start = absl::Now();
  Reply list = Call("GET", std::string(kConfigMaps) + "?resourceVersion=" + future);
  absl::Duration waited = absl::Now() - start;
  EXPECT_THAT(list, IsFailure(504, "Timeout",
                              "Timeout: Too large resource version: " + future +
                                  ", current: " + std::to_string(rv)));
  EXPECT_EQ(list.body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
  EXPECT_EQ(list.body["details"]["retryAfterSeconds"], 1);
  // The apiserver's watch cache wait: 3 s, then the 504 (README).
  EXPECT_GE(waited, absl::Milliseconds(2900));
  EXPECT_LT(waited, absl::Seconds(6));

  std::vector<json> events =
      Watch(std::string(kConfigMaps) + "?watch=true&timeoutSeconds=10&resourceVersion=" + future);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["type"], "ERROR");
  EXPECT_EQ(events[0]["object"]["code"], 504);
  EXPECT_EQ(events[0]["object"]["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");

  // A read at the next version is held while the store is behind (nothing comes back for
  // 300 ms), and served once a write reaches that version.
  std::future<Reply> caught_up = std::async(std::launch::async, [&] {
    return Call("GET", std::string(kConfigMaps) + "?resourceVersion=" + std::to_string(rv + 1));
  });
  ASSERT_EQ(caught_up.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  auto writer = testing::LoopbackClient(server_->port());
  writer->set_default_headers({{"Authorization", std::string("bearer ") + kAdminToken}});
  EXPECT_EQ(testing::Call(*writer, "POST", kConfigMaps, {{"metadata", {{"name", "b"}}}}).code, 201);
  Reply served = caught_up.get();
  EXPECT_EQ(served.code, 200);
  EXPECT_EQ(served.body["items"].size(), 2u);
}

TEST_F(LocalkubeHttp, DryRunWritesNothing) {
  Reply r =
      Call("POST", std::string(kConfigMaps) + "?dryRun=All", json{{"metadata", {{"name", "d"}}}});
  EXPECT_EQ(r.code, 201);
  EXPECT_EQ(Call("GET", std::string(kConfigMaps) + "/d").code, 404);
}

}  // namespace
}  // namespace kubetrain::localkube
