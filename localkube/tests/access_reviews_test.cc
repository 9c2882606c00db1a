// Impersonation and the access review APIs (impersonation.h, access_reviews.h): what
// `kubectl auth can-i`, `kubectl auth can-i --list`, `kubectl auth whoami` and `kubectl --as` see,
// with the real kubectl, and the review objects and errors over HTTP.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/rbac.h"
#include "localkube/server.h"
#include "localkube/tests/host.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"
#include "localkube/tls.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;
using testing::Binding;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using testing::kAdminToken;
using testing::Reply;
using testing::Role;

constexpr char kDevToken[] = "dev-token";  // user "dev", no groups of its own
constexpr char kTrainer[] = "system:serviceaccount:ml:trainer";
constexpr char kRbacApi[] = "/apis/rbac.authorization.k8s.io/v1";
constexpr char kSsar[] = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";

class AccessReviews : public testing::ServedApiTest {
 protected:
  void SetUp() override {
    dir_ = testing::TestDir("localkube_access_reviews_test");
    // HTTPS: kubectl sends bearer tokens over TLS only.
    absl::StatusOr<TlsFiles> tls = MakeSelfSignedCert(dir_);
    ASSERT_THAT(tls.status(), IsOk());
    ca_pem_ = tls->cert_pem;
    ServerOptions options;
    options.token = kAdminToken;
    options.rbac = true;
    options.user_tokens[kDevToken] = MakeUser("dev", {});
    options.cert_path = tls->cert_path;
    options.key_path = tls->key_path;
    ASSERT_NO_FATAL_FAILURE(Serve(options));
    // The server speaks HTTPS only: client_ is a TLS client of it.
    client_ =
        std::make_unique<httplib::Client>(absl::StrCat("https://127.0.0.1:", server_->port()));
    client_->enable_server_certificate_verification(false);
    client_->set_read_timeout(10, 0);
    // ServiceAccount ml/trainer may create and get pods in ml.
    Admin("/api/v1/namespaces",
          {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "ml"}}}});
    std::string ml = absl::StrCat(kRbacApi, "/namespaces/ml");
    Admin(
        ml + "/roles",
        Role("ml", "pod-writer",
             json::array(
                 {{{"apiGroups", {""}}, {"resources", {"pods"}}, {"verbs", {"create", "get"}}}})));
    Admin(ml + "/rolebindings",
          Binding("ml", "trainer", "Role", "pod-writer",
                  json::array({{{"kind", "ServiceAccount"}, {"name", "trainer"}}})));
  }
  void TearDown() override {
    ServedApiTest::TearDown();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // A POST of `body` to `path` as the user of `token`, with `headers` besides.
  Reply Post(const std::string& token, const std::string& path, const json& body,
             httplib::Headers headers = {}) {
    headers.emplace("Authorization", "Bearer " + token);
    return testing::Call(*client_, "POST", path, body, "application/json", headers);
  }
  // Runs kubectl as the user of `token` with `args`; its exit code in `*status`.
  std::string Kubectl(const std::string& token, const std::string& args, int* status) {
    std::string kubeconfig = absl::StrCat(dir_, "/", token, ".kubeconfig");
    if (!std::filesystem::exists(kubeconfig)) {
      EXPECT_THAT(WriteKubeconfig(kubeconfig, server_->address(), token, ca_pem_), IsOk());
    }
    return testing::Shell(absl::StrCat(kubectl_, " --kubeconfig ", kubeconfig, " --cache-dir ",
                                       dir_, "/cache-", token, " ", args),
                          status);
  }
  bool NeedKubectl() {
    kubectl_ = testing::FindKubectl();
    return !kubectl_.empty();
  }

  std::string dir_;
  std::string ca_pem_;
  std::string kubectl_;
};

TEST_F(AccessReviews, KubectlCanIAnswersForAServiceAccountThroughImpersonation) {
  if (!NeedKubectl()) GTEST_SKIP() << "no kubectl in .tools/bin or on PATH";
  int status = -1;
  std::string as = absl::StrCat(" --as=", kTrainer);
  std::string out = Kubectl(kAdminToken, "auth can-i create pods -n ml" + as, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "yes\n");
  out = Kubectl(kAdminToken, "auth can-i delete pods -n ml" + as, &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(out, "no\n");
  // The Role is in ml only.
  out = Kubectl(kAdminToken, "auth can-i create pods -n default" + as, &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(out, "no\n");
  // The admin (system:masters) may do anything.
  out = Kubectl(kAdminToken, "auth can-i delete pods -A", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, "yes\n");
}

TEST_F(AccessReviews, KubectlCanIListShowsTheRulesOfTheNamespace) {
  if (!NeedKubectl()) GTEST_SKIP() << "no kubectl in .tools/bin or on PATH";
  int status = -1;
  std::string out =
      Kubectl(kAdminToken, absl::StrCat("auth can-i --list -n ml --as=", kTrainer), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, ContainsRegex("Resources +Non-Resource URLs +Resource Names +Verbs"));
  EXPECT_THAT(out, ContainsRegex("\npods +\\[\\] +\\[\\] +\\[create get\\]"));
  EXPECT_THAT(out, ContainsRegex("selfsubjectaccessreviews.authorization.k8s.io +\\[\\] +\\[\\] "
                                 "+\\[create\\]"));
  EXPECT_THAT(out, ContainsRegex("\n +\\[/apis/\\*\\] +\\[\\] +\\[get\\]"));
  // Outside ml the Role does not apply.
  out = Kubectl(kAdminToken, absl::StrCat("auth can-i --list -n default --as=", kTrainer), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, ::testing::Not(ContainsRegex("\npods ")));
}

TEST_F(AccessReviews, KubectlWhoamiShowsTheUserTheRequestRunsAs) {
  if (!NeedKubectl()) GTEST_SKIP() << "no kubectl in .tools/bin or on PATH";
  int status = -1;
  std::string out = Kubectl(kAdminToken, absl::StrCat("auth whoami --as=", kTrainer), &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, ContainsRegex("Username +system:serviceaccount:ml:trainer\n"));
  EXPECT_THAT(out, ContainsRegex("Groups +\\[system:serviceaccounts system:serviceaccounts:ml "
                                 "system:authenticated\\]"));
  out = Kubectl(kDevToken, "auth whoami", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, ContainsRegex("Username +dev\n"));
  EXPECT_THAT(out, ContainsRegex("Groups +\\[system:authenticated\\]"));
}

TEST_F(AccessReviews, ImpersonationNeedsTheImpersonateVerb) {
  if (!NeedKubectl()) GTEST_SKIP() << "no kubectl in .tools/bin or on PATH";
  int status = -1;
  std::string out = Kubectl(kDevToken, "get pods -n ml --as=alice", &status);
  EXPECT_EQ(status, 1) << out;
  // (kubectl's discovery client reports the 403 of discovery as "unknown"; a raw GET shows it.)
  out = Kubectl(kDevToken, "get --raw /api/v1/namespaces/ml/pods --as=alice", &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_THAT(out, HasSubstr("Error from server (Forbidden): users \"alice\" is forbidden: User "
                             "\"dev\" cannot impersonate resource \"users\" in API group \"\" at "
                             "the cluster scope"));
  out = Kubectl(kDevToken, absl::StrCat("auth can-i create pods -n ml --as=", kTrainer), &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("serviceaccounts \"trainer\" is forbidden: User \"dev\" cannot "
                             "impersonate resource \"serviceaccounts\" in API group \"\" in the "
                             "namespace \"ml\""));
  // dev may impersonate alice (only), and alice may list pods in ml.
  Admin(absl::StrCat(kRbacApi, "/clusterroles"), Role("", "impersonate-alice",
                                                      json::array({{{"apiGroups", {""}},
                                                                    {"resources", {"users"}},
                                                                    {"resourceNames", {"alice"}},
                                                                    {"verbs", {"impersonate"}}}})));
  Admin(absl::StrCat(kRbacApi, "/clusterrolebindings"),
        Binding("", "dev-impersonates-alice", "ClusterRole", "impersonate-alice",
                json::array({{{"kind", "User"}, {"name", "dev"}}})));
  Admin(absl::StrCat(kRbacApi, "/namespaces/ml/roles"),
        Role("ml", "pod-reader",
             json::array(
                 {{{"apiGroups", {""}}, {"resources", {"pods"}}, {"verbs", {"get", "list"}}}})));
  Admin(absl::StrCat(kRbacApi, "/namespaces/ml/rolebindings"),
        Binding("ml", "alice-reads-pods", "Role", "pod-reader",
                json::array({{{"kind", "User"}, {"name", "alice"}}})));
  out = Kubectl(kDevToken, "get pods -n ml --as=alice", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("No resources found in ml namespace."));
  out = Kubectl(kDevToken, "get pods -n ml", &status);  // dev itself may not
  EXPECT_EQ(status, 1) << out;
  out = Kubectl(kDevToken, "get --raw /api/v1/namespaces/ml/pods --as=bob", &status);
  EXPECT_EQ(status, 1) << out;
  EXPECT_THAT(out, HasSubstr("users \"bob\" is forbidden"));
}

TEST_F(AccessReviews, SelfSubjectAccessReviewSaysWhichBindingAllows) {
  json review = {
      {"apiVersion", "authorization.k8s.io/v1"},
      {"kind", "SelfSubjectAccessReview"},
      {"spec",
       {{"resourceAttributes", {{"namespace", "ml"}, {"verb", "create"}, {"resource", "pods"}}}}}};
  Reply r = Post(kAdminToken, kSsar, review, {{"Impersonate-User", kTrainer}});
  ASSERT_EQ(r.code, 201) << r.body.dump();
  EXPECT_EQ(r.body["kind"], "SelfSubjectAccessReview");
  EXPECT_EQ(r.body["spec"], review["spec"]);
  EXPECT_EQ(r.body["status"],
            json({{"allowed", true},
                  {"reason",
                   "RBAC: allowed by RoleBinding \"trainer/ml\" of Role \"pod-writer\" to "
                   "ServiceAccount \"trainer/ml\""}}));
  review["spec"]["resourceAttributes"]["verb"] = "delete";
  r = Post(kAdminToken, kSsar, review, {{"Impersonate-User", kTrainer}});
  ASSERT_EQ(r.code, 201) << r.body.dump();
  EXPECT_EQ(r.body["status"], json({{"allowed", false}}));
  // The default system:basic-user and system:discovery bindings.
  r = Post(kDevToken, kSsar,
           {{"spec", {{"nonResourceAttributes", {{"path", "/apis/apps"}, {"verb", "get"}}}}}});
  ASSERT_EQ(r.code, 201) << r.body.dump();
  EXPECT_EQ(r.body["status"]["reason"],
            "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole "
            "\"system:discovery\" to Group \"system:authenticated\"");
  // Neither attribute set.
  r = Post(kDevToken, kSsar, {{"spec", json::object()}});
  EXPECT_EQ(r.code, 422) << r.body.dump();
  EXPECT_EQ(
      r.body["message"],
      "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: "
      "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes "
      "must be specified");
  r = testing::CallAs(*client_, kAdminToken, "GET", kSsar);
  EXPECT_EQ(r.code, 405) << r.body.dump();
}

TEST_F(AccessReviews, SubjectAccessReviewNeedsCreateOnIt) {
  json review = {
      {"apiVersion", "authorization.k8s.io/v1"},
      {"kind", "SubjectAccessReview"},
      {"spec",
       {{"user", kTrainer},
        {"groups", {"system:serviceaccounts"}},
        {"resourceAttributes", {{"namespace", "ml"}, {"verb", "get"}, {"resource", "pods"}}}}}};
  const std::string path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
  Reply r = Post(kDevToken, path, review);
  EXPECT_EQ(r.code, 403) << r.body.dump();
  EXPECT_EQ(r.body["message"],
            "subjectaccessreviews.authorization.k8s.io is forbidden: User \"dev\" cannot create "
            "resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the "
            "cluster scope");
  r = Post(kAdminToken, path, review);
  ASSERT_EQ(r.code, 201) << r.body.dump();
  EXPECT_EQ(r.body["status"]["allowed"], true) << r.body.dump();
  review["spec"].erase("user");
  review["spec"].erase("groups");
  r = Post(kAdminToken, path, review);
  EXPECT_EQ(r.code, 422) << r.body.dump();
  EXPECT_THAT(r.body["message"].get<std::string>(),
              HasSubstr("spec.user: Invalid value: \"\": at least one of user or group must be "
                        "specified"));
}

TEST_F(AccessReviews, ImpersonatingGroupsNeedsAUser) {
  Reply r = Post(kAdminToken, kSsar,
                 {{"spec", {{"nonResourceAttributes", {{"path", "/api"}, {"verb", "get"}}}}}},
                 {{"Impersonate-Group", "devs"}});
  EXPECT_EQ(r.code, 400) << r.body.dump();
  EXPECT_EQ(r.body["message"], "requested [{Group  devs    }] without impersonating a user");
  // With a user, the groups asked for replace the ServiceAccount's.
  r = Post(kAdminToken, "/apis/authentication.k8s.io/v1/selfsubjectreviews",
           {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "SelfSubjectReview"}},
           {{"Impersonate-User", kTrainer},
            {"Impersonate-Group", "devs"},
            {"Impersonate-Extra-Reason", "debugging"}});
  ASSERT_EQ(r.code, 201) << r.body.dump();
  EXPECT_EQ(r.body["status"]["userInfo"], json({{"username", kTrainer},
                                                {"groups", {"devs", "system:authenticated"}},
                                                {"extra", {{"reason", {"debugging"}}}}}));
}

TEST_F(AccessReviews, DiscoveryListsTheReviews) {
  Reply r = testing::CallAs(*client_, kDevToken, "GET", "/apis/authorization.k8s.io/v1");
  ASSERT_EQ(r.code, 200) << r.body.dump();
  std::vector<std::string> names;
  for (const json& res : r.body["resources"]) names.push_back(res["name"]);
  EXPECT_THAT(names,
              ::testing::UnorderedElementsAre("selfsubjectaccessreviews", "selfsubjectrulesreviews",
                                              "subjectaccessreviews"));
  r = testing::CallAs(*client_, kDevToken, "GET", "/apis");
  ASSERT_EQ(r.code, 200) << r.body.dump();
  EXPECT_THAT(r.body.dump(), HasSubstr("\"name\":\"authentication.k8s.io\""));
}

}  // namespace
}  // namespace kubetrain::localkube
