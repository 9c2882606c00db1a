// The set-up the HTTP suites share: an Api over an empty store, served on a loopback port by a
// Server, and a client of it; the server stops at the end of each test. RbacApiTest serves it under
// RBAC, to a ServiceAccount that holds what a test grants it.
#pragma once

#include <httplib.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/rbac.h"
#include "localkube/server.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube::testing {

class ServedApiTest : public ::testing::Test {
 protected:
  // Serves api_ with `options` and points client_ (plain HTTP) at it. With `authorization`, every
  // request client_ sends carries that Authorization header.
  void Serve(const ServerOptions& options, const std::string& authorization = "") {
    api_ = std::make_unique<Api>(&registry_, &store_);
    server_ = std::make_unique<Server>(options, api_.get(), nullptr);
    ASSERT_THAT(server_->Start(), ::kubetrain::testing::IsOk());
    client_ = LoopbackClient(server_->port());
    if (!authorization.empty()) client_->set_default_headers({{"Authorization", authorization}});
  }
  // Serves api_ to the admin alone: its token is kAdminToken, which client_ sends after `scheme`.
  void ServeToAdmin(const std::string& scheme = "Bearer") {
    ServerOptions options;
    options.token = kAdminToken;
    Serve(options, scheme + " " + kAdminToken);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  // A request as the user of bearer token `token`.
  Reply Call(const std::string& token, const std::string& method, const std::string& path,
             const nlohmann::json& body = nullptr,
             const std::string& content_type = "application/json") {
    return CallAs(*client_, token, method, path, body, content_type);
  }
  // Creates Namespace `name` as the admin.
  void AddNamespace(const std::string& name) {
    ASSERT_EQ(Call(kAdminToken, "POST", "/api/v1/namespaces",
                   {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", name}}}})
                  .code,
              201);
  }
  // Creates `object` at `collection` as the admin (kAdminToken); the stored object.
  nlohmann::json Admin(const std::string& collection, const nlohmann::json& object) {
    Reply r = CallAs(*client_, kAdminToken, "POST", collection, object);
    EXPECT_EQ(r.code, 201) << collection << ": " << r.body.dump();
    return r.body;
  }

  Registry registry_;
  Store store_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<httplib::Client> client_;
};

// The API under RBAC (ServeWithRbac): the admin, the ServiceAccount ns1/sa (token kSa), which holds
// nothing until Grant, and a member of system:masters (token kMaster), in namespaces ns1 and ns2.
class RbacApiTest : public ServedApiTest {
 public:
  static constexpr char kSa[] = "sa-token";
  static constexpr char kSaUser[] = "system:serviceaccount:ns1:sa";
  static constexpr char kMaster[] = "master-token";

 protected:
  // Serves `options` under RBAC with the users above added, and creates ns1 and ns2.
  void ServeWithRbac(ServerOptions options = {}) {
    options.token = kAdminToken;
    options.rbac = true;
    options.user_tokens[kSa] = MakeUser(kSaUser, {});
    options.user_tokens[kMaster] = MakeUser("root", {"system:masters"});
    ASSERT_NO_FATAL_FAILURE(Serve(options));
    ASSERT_NO_FATAL_FAILURE(AddNamespace("ns1"));
    ASSERT_NO_FATAL_FAILURE(AddNamespace("ns2"));
  }
  // Grants the ServiceAccount `rules` (their JSON text) in `ns`, or cluster-wide when `ns` is
  // empty, through a role and binding of its own.
  void Grant(const std::string& ns, const std::string& rules) {
    const std::string name = absl::StrCat("grant-", ++grants_);
    const std::string rbac = "/apis/rbac.authorization.k8s.io/v1";
    if (ns.empty()) {
      Admin(rbac + "/clusterroles", Role("", name, nlohmann::json::parse(rules)));
      Admin(rbac + "/clusterrolebindings", Binding("", name, "ClusterRole", name, SaSubjects()));
    } else {
      Admin(absl::StrCat(rbac, "/namespaces/", ns, "/roles"),
            Role(ns, name, nlohmann::json::parse(rules)));
      Admin(absl::StrCat(rbac, "/namespaces/", ns, "/rolebindings"),
            Binding(ns, name, "Role", name, SaSubjects()));
    }
  }
  // The ServiceAccount as a binding's subjects.
  static nlohmann::json SaSubjects() {
    return nlohmann::json::array(
        {{{"kind", "ServiceAccount"}, {"name", "sa"}, {"namespace", "ns1"}}});
  }

 private:
  int grants_ = 0;
};

}  // namespace kubetrain::localkube::testing
