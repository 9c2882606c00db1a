// ServiceAccounts over real HTTP: the TokenRequest API, tokens authenticating as their
// ServiceAccount under RBAC (and 401 for bad, expired, foreign-audience and orphaned tokens), the
// per-namespace default ServiceAccount and kube-root-ca.crt ConfigMap, and the ServiceAccount
// admission plugin's pod mutations and refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <regex>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/namespace_companions.h"
#include "localkube/rbac.h"
#include "localkube/server.h"
#include "localkube/service_accounts.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/protobuf_wire.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;

using testing::Binding;
using testing::kAdminToken;
using testing::Pod;
using testing::Reply;
using testing::Role;
constexpr char kPem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

// The apiserver's answer to any request whose credentials do not authenticate.
const json& UnauthorizedStatus() {
  static const json* body = new json(json::parse(R"({"kind":"Status","apiVersion":"v1",
    "metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401})"));
  return *body;
}

json JwtClaims(const std::string& token) {
  std::vector<std::string> parts = absl::StrSplit(token, '.');
  if (parts.size() != 3) return nullptr;
  std::string payload;
  if (!absl::WebSafeBase64Unescape(parts[1], &payload)) return nullptr;
  return json::parse(payload, nullptr, false);
}

class ServiceAccounts : public testing::ServedApiTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.token = kAdminToken;
    options.rbac = true;
    ASSERT_NO_FATAL_FAILURE(Serve(options));
    ASSERT_THAT(PublishRootCa(api_.get(), kPem), IsOk());
    ASSERT_NO_FATAL_FAILURE(AddNamespace("ns1"));
    ASSERT_EQ(Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts",
                   {{"metadata", {{"name", "sa"}}}})
                  .code,
              201);
  }
  std::string Token(const std::string& ns, const std::string& sa, const json& spec = nullptr) {
    json body = {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}};
    if (!spec.is_null()) body["spec"] = spec;
    Reply r = Call(kAdminToken, "POST",
                   "/api/v1/namespaces/" + ns + "/serviceaccounts/" + sa + "/token", body);
    EXPECT_EQ(r.code, 201) << r.body.dump();
    return r.body["status"].value("token", "");
  }
  // Lets ServiceAccount ns1/sa list the pods of `ns`.
  void GrantPodList(const std::string& ns) {
    const std::string prefix = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns;
    Admin(
        prefix + "/roles",
        Role(ns, "reader", {{{"apiGroups", {""}}, {"resources", {"pods"}}, {"verbs", {"list"}}}}));
    Admin(prefix + "/rolebindings",
          Binding(ns, "reader", "Role", "reader",
                  {{{"kind", "ServiceAccount"}, {"name", "sa"}, {"namespace", "ns1"}}}));
  }
  json CreatePod(const std::string& ns, const json& pod) {
    return Admin("/api/v1/namespaces/" + ns + "/pods", pod);
  }
};

TEST_F(ServiceAccounts, TokenRequestRoundTrip) {
  Reply r = Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts/sa/token",
                 {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}});
  ASSERT_EQ(r.code, 201) << r.body.dump();
  EXPECT_EQ(r.body["kind"], "TokenRequest");
  EXPECT_EQ(r.body["apiVersion"], "authentication.k8s.io/v1");
  EXPECT_EQ(r.body["metadata"],
            json::parse(R"({"name":"sa","namespace":"ns1","creationTimestamp":null})"));
  EXPECT_EQ(r.body["spec"],
            json::parse(R"({"audiences":["https://kubernetes.default.svc.cluster.local"],
                                            "expirationSeconds":3600,"boundObjectRef":null})"));
  EXPECT_TRUE(r.body["status"]["expirationTimestamp"].is_string());
  json claims = JwtClaims(r.body["status"]["token"]);
  ASSERT_TRUE(claims.is_object());
  EXPECT_EQ(claims["sub"], "system:serviceaccount:ns1:sa");
  EXPECT_EQ(claims["iss"], kServiceAccountIssuer);
  EXPECT_EQ(claims["aud"], json::array({kServiceAccountIssuer}));
  EXPECT_EQ(claims["exp"].get<int64_t>() - claims["iat"].get<int64_t>(), 3600);
  EXPECT_EQ(claims["nbf"], claims["iat"]);
  EXPECT_EQ(claims["kubernetes.io"]["namespace"], "ns1");
  EXPECT_EQ(claims["kubernetes.io"]["serviceaccount"]["name"], "sa");
  EXPECT_FALSE(claims["kubernetes.io"]["serviceaccount"].value("uid", "").empty());

  r = Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts/sa/token",
           {{"spec", {{"audiences", {"vault"}}, {"expirationSeconds", 7200}}}});
  ASSERT_EQ(r.code, 201) << r.body.dump();
  EXPECT_EQ(r.body["spec"]["audiences"], json::array({"vault"}));
  EXPECT_EQ(JwtClaims(r.body["status"]["token"])["aud"], json::array({"vault"}));
}

TEST_F(ServiceAccounts, TokenRequestErrorsAreTheApiServers) {
  Reply r = Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts/nope/token",
                 json::object());
  EXPECT_EQ(r.code, 404);
  EXPECT_EQ(r.body["message"], "serviceaccounts \"nope\" not found");
  EXPECT_EQ(r.body["reason"], "NotFound");
  r = Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts/sa/token",
           {{"spec", {{"expirationSeconds", 60}}}});
  EXPECT_EQ(r.code, 422);
  EXPECT_EQ(r.body["message"],
            "TokenRequest.authentication.k8s.io \"sa\" is invalid: spec.expirationSeconds: "
            "Invalid value: 60: may not specify a duration less than 10 minutes");
  r = Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts/sa/token", json("nope"));
  EXPECT_EQ(r.code, 400);
  // Only POST is served.
  EXPECT_EQ(Call(kAdminToken, "GET", "/api/v1/namespaces/ns1/serviceaccounts/sa/token").code, 405);
}

TEST_F(ServiceAccounts, TokenAuthenticatesAsItsServiceAccountUnderRbac) {
  std::string token = Token("ns1", "sa");
  Reply r = Call(token, "GET", "/api/v1/namespaces/ns1/pods");
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body["message"],
            "pods is forbidden: User \"system:serviceaccount:ns1:sa\" cannot list resource "
            "\"pods\" in API group \"\" in the namespace \"ns1\"");
  GrantPodList("ns1");
  r = Call(token, "GET", "/api/v1/namespaces/ns1/pods");
  EXPECT_EQ(r.code, 200) << r.body.dump();
  EXPECT_EQ(r.body["kind"], "PodList");
  EXPECT_EQ(Call(token, "GET", "/api/v1/namespaces/default/pods").code, 403);
  EXPECT_EQ(Call(token, "DELETE", "/api/v1/namespaces/ns1/pods/x").code, 403);
  // The group system:serviceaccounts:ns1 is the user's too.
  const std::string prefix = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
  Admin(prefix + "/roles",
        Role("default", "cm",
             {{{"apiGroups", {""}}, {"resources", {"configmaps"}}, {"verbs", {"get"}}}}));
  Admin(prefix + "/rolebindings",
        Binding("default", "cm", "Role", "cm",
                {{{"kind", "Group"}, {"name", "system:serviceaccounts:ns1"}}}));
  r = Call(token, "GET", "/api/v1/namespaces/default/configmaps/kube-root-ca.crt");
  EXPECT_EQ(r.code, 200) << r.body.dump();
  // IssueToken, the kubelet's way in, makes tokens that work the same.
  auto issued = server_->service_account_tokens()->IssueToken("ns1", "sa", "", 3607);
  ASSERT_THAT(issued, IsOk());
  EXPECT_EQ(Call(*issued, "GET", "/api/v1/namespaces/ns1/pods").code, 200);
  EXPECT_EQ(server_->service_account_tokens()->IssueToken("ns1", "nope", "", 3607).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ServiceAccounts, BadExpiredForeignAndOrphanedTokensAre401) {
  GrantPodList("ns1");
  const std::string path = "/api/v1/namespaces/ns1/pods";
  std::string token = Token("ns1", "sa");
  ASSERT_EQ(Call(token, "GET", path).code, 200);
  for (const std::string& bad : {std::string("garbage"), std::string("a.b.c"), token + "x",
                                 token.substr(0, token.size() - 2),
                                 std::string(6000, 'a') + "." + std::string(10, 'b') + ".c"}) {
    Reply r = Call(bad, "GET", path);
    EXPECT_EQ(r.code, 401) << bad.substr(0, 40);
    EXPECT_EQ(r.body, UnauthorizedStatus());
  }
  // A token of another signer: same claims, other key.
  Store other_store;
  Registry other_registry;
  Api other(&other_registry, &other_store);
  ASSERT_THAT(other.Create(Target{other_registry.Find("", "v1", "namespaces"), "", "", ""},
                           {{"metadata", {{"name", "ns1"}}}}, WriteOptions{}),
              IsOk());
  ASSERT_THAT(other.Create(Target{other_registry.Find("", "v1", "serviceaccounts"), "ns1", "", ""},
                           {{"metadata", {{"name", "sa"}}}}, WriteOptions{}),
              IsOk());
  auto foreign = ServiceAccountTokens(&other_store).IssueToken("ns1", "sa", "", 3600);
  ASSERT_THAT(foreign, IsOk());
  EXPECT_EQ(Call(*foreign, "GET", path).code, 401);
  // Expired an hour ago.
  auto expired = server_->service_account_tokens()->IssueTokenAt(
      "ns1", "sa", {kServiceAccountIssuer}, 3600, absl::Now() - absl::Hours(2));
  ASSERT_THAT(expired, IsOk());
  EXPECT_EQ(Call(*expired, "GET", path).body, UnauthorizedStatus());
  // For another audience than the API's.
  std::string vault = Token("ns1", "sa", {{"audiences", {"vault"}}});
  EXPECT_EQ(Call(vault, "GET", path).code, 401);
  // Deleting the ServiceAccount invalidates its tokens, even once one of the same name is back.
  ASSERT_EQ(Call(kAdminToken, "DELETE", "/api/v1/namespaces/ns1/serviceaccounts/sa").code, 200);
  EXPECT_EQ(Call(token, "GET", path).body, UnauthorizedStatus());
  ASSERT_EQ(Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts",
                 {{"metadata", {{"name", "sa"}}}})
                .code,
            201);
  EXPECT_EQ(Call(token, "GET", path).code, 401);
  EXPECT_EQ(Call(Token("ns1", "sa"), "GET", path).code, 200);
}

// A pod's token of the admission plugin's 3607 s for the API is valid for a year, as with
// kube-apiserver's default --service-account-extend-token-expiration: a long-running operator pod
// keeps its access past the hour although the file it reads is never rotated here. Other lengths,
// audiences and TokenRequests expire when asked.
TEST_F(ServiceAccounts, APodsAdmissionTokenOutlivesTheHour) {
  GrantPodList("ns1");
  const std::string path = "/api/v1/namespaces/ns1/pods";
  const ServiceAccountTokens& tokens = *server_->service_account_tokens();
  const absl::Time two_hours_ago = absl::Now() - absl::Hours(2);
  auto pods = tokens.IssueTokenAt("ns1", "sa", {kServiceAccountIssuer}, kWarnOnlyTokenSeconds,
                                  two_hours_ago, /*for_pod=*/true);
  ASSERT_THAT(pods, IsOk());
  EXPECT_EQ(Call(*pods, "GET", path).code, 200);
  json claims = JwtClaims(*pods);
  const int64_t iat = absl::ToUnixSeconds(two_hours_ago);
  EXPECT_EQ(claims["exp"], iat + kExtendedTokenSeconds) << claims.dump();
  EXPECT_EQ(claims["kubernetes.io"]["warnafter"], iat + kWarnOnlyTokenSeconds) << claims.dump();
  // The kubelet's way in is a pod's.
  auto kubelets = tokens.IssueToken("ns1", "sa", "", kWarnOnlyTokenSeconds);
  ASSERT_THAT(kubelets, IsOk());
  EXPECT_EQ(JwtClaims(*kubelets)["exp"].get<int64_t>() - JwtClaims(*kubelets)["iat"].get<int64_t>(),
            kExtendedTokenSeconds);
  for (auto [seconds, for_pod] :
       {std::pair{kWarnOnlyTokenSeconds, false}, std::pair{int64_t{3600}, true}}) {
    auto expired =
        tokens.IssueTokenAt("ns1", "sa", {kServiceAccountIssuer}, seconds, two_hours_ago, for_pod);
    ASSERT_THAT(expired, IsOk());
    EXPECT_EQ(Call(*expired, "GET", path).code, 401) << seconds << " for_pod=" << for_pod;
    EXPECT_FALSE(JwtClaims(*expired)["kubernetes.io"].contains("warnafter"));
  }
  auto other_audience = tokens.IssueToken("ns1", "sa", "vault", kWarnOnlyTokenSeconds);
  ASSERT_THAT(other_audience, IsOk());
  EXPECT_EQ(JwtClaims(*other_audience)["exp"].get<int64_t>() -
                JwtClaims(*other_audience)["iat"].get<int64_t>(),
            kWarnOnlyTokenSeconds);
  // A TokenRequest of 3607 s (kubectl create token --duration 3607s) gets what it asked.
  json requested = JwtClaims(Token("ns1", "sa", {{"expirationSeconds", kWarnOnlyTokenSeconds}}));
  EXPECT_EQ(requested["exp"].get<int64_t>() - requested["iat"].get<int64_t>(),
            kWarnOnlyTokenSeconds);
}

TEST_F(ServiceAccounts, EveryNamespaceHasADefaultServiceAccountAndTheRootCa) {
  for (const char* ns : {"default", "kube-system", "kube-public", "kube-node-lease", "ns1"}) {
    EXPECT_EQ(Call(kAdminToken, "GET",
                   absl::StrCat("/api/v1/namespaces/", ns, "/serviceaccounts/default"))
                  .code,
              200)
        << ns;
    Reply cm = Call(kAdminToken, "GET",
                    absl::StrCat("/api/v1/namespaces/", ns, "/configmaps/kube-root-ca.crt"));
    EXPECT_EQ(cm.code, 200) << ns;
    EXPECT_EQ(cm.body["data"], json({{"ca.crt", kPem}})) << ns;
  }
  // Namespace deletion takes them along.
  ASSERT_EQ(Call(kAdminToken, "DELETE", "/api/v1/namespaces/ns1").code, 200);
  EXPECT_EQ(Call(kAdminToken, "GET", "/api/v1/namespaces/ns1/configmaps/kube-root-ca.crt").code,
            404);
}

TEST_F(ServiceAccounts, PodsGetTheDefaultServiceAccountAndTheTokenVolume) {
  json pod = Pod("p");
  pod["spec"]["initContainers"] = {{{"name", "init"}, {"image", "busybox"}}};
  pod["spec"]["containers"].push_back(
      {{"name", "own"},
       {"image", "busybox"},
       {"volumeMounts", {{{"name", "x"}, {"mountPath", kServiceAccountMountPath}}}}});
  pod["spec"]["volumes"] = {{{"name", "x"}, {"emptyDir", json::object()}}};
  json created = CreatePod("ns1", pod);
  const json& spec = created["spec"];
  EXPECT_EQ(spec["serviceAccountName"], "default");
  EXPECT_EQ(spec["serviceAccount"], "default");
  ASSERT_EQ(spec["volumes"].size(), 2u);
  const json& volume = spec["volumes"][1];
  std::string name = volume["name"];
  EXPECT_TRUE(std::regex_match(name, std::regex("kube-api-access-[a-z0-9]{5}"))) << name;
  EXPECT_EQ(volume["projected"], json::parse(R"({"defaultMode":420,"sources":[
      {"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}},
      {"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}},
      {"downwardAPI":{"items":[{"path":"namespace",
        "fieldRef":{"apiVersion":"v1","fieldPath":"metadata.namespace"}}]}}]})"));
  json mount = {{"name", name}, {"readOnly", true}, {"mountPath", kServiceAccountMountPath}};
  EXPECT_EQ(spec["containers"][0]["volumeMounts"], json::array({mount}));
  EXPECT_EQ(spec["initContainers"][0]["volumeMounts"], json::array({mount}));
  // A container already mounting the path keeps its own mount.
  EXPECT_EQ(spec["containers"][1]["volumeMounts"].size(), 1u);
  EXPECT_EQ(spec["containers"][1]["volumeMounts"][0]["name"], "x");
  // Updates leave the volume alone.
  created["metadata"]["labels"]["a"] = "b";
  Reply updated = Call(kAdminToken, "PUT", "/api/v1/namespaces/ns1/pods/p", created);
  ASSERT_EQ(updated.code, 200) << updated.body.dump();
  EXPECT_EQ(updated.body["spec"]["volumes"], spec["volumes"]);
}

TEST_F(ServiceAccounts, AutomountFalseOnThePodOrTheServiceAccount) {
  json pod = Pod("no-mount");
  pod["spec"]["automountServiceAccountToken"] = false;
  json created = CreatePod("ns1", pod);
  EXPECT_FALSE(created["spec"].contains("volumes"));
  EXPECT_FALSE(created["spec"]["containers"][0].contains("volumeMounts"));

  ASSERT_EQ(Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/serviceaccounts",
                 {{"metadata", {{"name", "quiet"}}}, {"automountServiceAccountToken", false}})
                .code,
            201);
  pod = Pod("quiet");
  pod["spec"]["serviceAccountName"] = "quiet";
  created = CreatePod("ns1", pod);
  EXPECT_EQ(created["spec"]["serviceAccountName"], "quiet");
  EXPECT_FALSE(created["spec"].contains("volumes"));
  // The pod's own setting wins.
  pod = Pod("loud");
  pod["spec"]["serviceAccountName"] = "quiet";
  pod["spec"]["automountServiceAccountToken"] = true;
  created = CreatePod("ns1", pod);
  ASSERT_EQ(created["spec"]["volumes"].size(), 1u);
  // The deprecated serviceAccount field names the account when serviceAccountName is empty.
  pod = Pod("deprecated");
  pod["spec"]["serviceAccount"] = "sa";
  created = CreatePod("ns1", pod);
  EXPECT_EQ(created["spec"]["serviceAccountName"], "sa");
}

TEST_F(ServiceAccounts, APodNamingAMissingServiceAccountIsForbidden) {
  json pod = Pod("x");
  pod["spec"]["serviceAccountName"] = "name";
  Reply r = Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/pods", pod);
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body, json::parse(R"({"kind":"Status","apiVersion":"v1","metadata":{},
    "status":"Failure","reason":"Forbidden","code":403,"details":{"name":"x","kind":"pods"},
    "message":"pods \"x\" is forbidden: error looking up service account ns1/name: serviceaccount \"name\" not found"})"));
  // Generated names are not made yet: the message names the prefix, as a ReplicaSet's events do.
  pod["metadata"] = {{"generateName", "web-abc-"}};
  r = Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/pods", pod);
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body["message"],
            "pods \"web-abc-\" is forbidden: error looking up service account ns1/name: "
            "serviceaccount \"name\" not found");
  // Dry runs are refused alike.
  json dry = Pod("y");
  dry["spec"]["serviceAccountName"] = "name";
  EXPECT_EQ(Call(kAdminToken, "POST", "/api/v1/namespaces/ns1/pods?dryRun=All", dry).code, 403);
  EXPECT_EQ(Call(kAdminToken, "GET", "/api/v1/namespaces/ns1/pods/x").code, 404);
}

TEST_F(ServiceAccounts, KubectlsProtobufTokenRequestIsDecoded) {
  using testing::Int;
  using testing::Len;
  std::string spec = Len(1, "vault") + Len(1, "api") + Int(4, 1200) +
                     Len(3, Len(1, "Pod") + Len(2, "v1") + Len(3, "p") + Len(4, "u"));
  std::string body = std::string("k8s\0", 4) +
                     Len(1, Len(1, "authentication.k8s.io/v1") + Len(2, "TokenRequest")) +
                     Len(2, Len(1, "") + Len(2, spec));
  auto decoded = DecodeTokenRequestProtobuf(body);
  ASSERT_THAT(decoded, IsOk());
  EXPECT_EQ((*decoded)["spec"],
            json::parse(R"({"audiences":["vault","api"],"expirationSeconds":1200,
      "boundObjectRef":{"kind":"Pod","apiVersion":"v1","name":"p","uid":"u"}})"));
  httplib::Headers headers = {{"Authorization", std::string("Bearer ") + kAdminToken}};
  auto r = client_->Post("/api/v1/namespaces/ns1/serviceaccounts/sa/token", headers, body,
                         "application/vnd.kubernetes.protobuf");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;
  EXPECT_EQ(json::parse(r->body)["spec"]["expirationSeconds"], 1200);
  // Truncated or foreign bodies are refused, never read past their end.
  for (size_t n = 0; n < body.size(); ++n) (void)DecodeTokenRequestProtobuf(body.substr(0, n));
  EXPECT_FALSE(DecodeTokenRequestProtobuf("k8s").ok());
  EXPECT_FALSE(DecodeTokenRequestProtobuf(std::string("k8s\0\x0a\xff", 6)).ok());
}

TEST_F(ServiceAccounts, PublishingTheRootCaAgainUpdatesEveryNamespace) {
  ASSERT_THAT(PublishRootCa(api_.get(), "new"), IsOk());
  for (const char* ns : {"default", "ns1"}) {
    Reply cm = Call(kAdminToken, "GET",
                    absl::StrCat("/api/v1/namespaces/", ns, "/configmaps/kube-root-ca.crt"));
    EXPECT_EQ(cm.body["data"]["ca.crt"], "new") << ns;
  }
  ASSERT_EQ(
      Call(kAdminToken, "POST", "/api/v1/namespaces", {{"metadata", {{"name", "later"}}}}).code,
      201);
  EXPECT_EQ(Call(kAdminToken, "GET", "/api/v1/namespaces/later/configmaps/kube-root-ca.crt")
                .body["data"]["ca.crt"],
            "new");
}

}  // namespace
}  // namespace kubetrain::localkube
