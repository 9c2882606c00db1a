// RBAC authorization and OwnerReferencesPermissionEnforcement over real HTTP, and the operator's
// own RBAC from deploy/rbac/ checked request by request against what the operator does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/rbac.h"
#include "localkube/server.h"
#include "localkube/tests/host.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"
#include "operator/api/yaml.h"

namespace kubetrain::localkube {
namespace {

using nlohmann::json;

using testing::Binding;
using testing::IsFailure;
using testing::kAdminToken;
using testing::Pod;
using testing::Reply;
using testing::Role;
constexpr char kOperator[] = "operator-token";
constexpr char kOperatorUser[] = "system:serviceaccount:kubetrain-system:kubetrain-operator";

// Widgets (test.dev/v1) with the status and scale subresources.
json WidgetCrd() {
  return testing::Crd("test.dev", "v1", "Widget", "widgets", json::parse(R"({"subresources":{
      "status":{},
      "scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}}})"));
}

json PodGroupCrd() {
  return testing::Crd("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups",
                      {{"subresources", {{"status", json::object()}}}});
}

json OwnerRef(const json& owner, bool block) {
  json ref = {{"apiVersion", owner["apiVersion"]},
              {"kind", owner["kind"]},
              {"name", owner["metadata"]["name"]},
              {"uid", owner["metadata"]["uid"]},
              {"controller", true}};
  if (block) ref["blockOwnerDeletion"] = true;
  return json::array({ref});
}

// A file of the source tree, by its path from the root.
std::string Slurp(const std::string& relative) {
  return testing::ReadFile(std::string(KUBETRAIN_SOURCE_DIR) + "/" + relative);
}

// The operator's ServiceAccount (token kOperator) besides RbacApiTest's users.
class LocalkubeRbac : public testing::RbacApiTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.user_tokens[kOperator] = MakeUser(kOperatorUser, {});
    ASSERT_NO_FATAL_FAILURE(ServeWithRbac(options));
  }
  void InstallWidgets() {
    Admin("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", WidgetCrd());
  }
  // Installs the Widget CRD and creates widget ns1/w; the stored widget.
  json AddWidget() {
    InstallWidgets();
    return Admin("/apis/test.dev/v1/namespaces/ns1/widgets", {{"apiVersion", "test.dev/v1"},
                                                              {"kind", "Widget"},
                                                              {"metadata", {{"name", "w"}}},
                                                              {"spec", {{"replicas", 1}}}});
  }
};

TEST_F(LocalkubeRbac, UserWithoutBindingsGetsTheApiServersForbiddenStatus) {
  Reply r = Call(kSa, "GET", "/api/v1/namespaces/ns1/pods");
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body, json::parse(R"({"kind":"Status","apiVersion":"v1","metadata":{},
    "status":"Failure","reason":"Forbidden","code":403,"details":{"kind":"pods"},
    "message":"pods is forbidden: User \"system:serviceaccount:ns1:sa\" cannot list resource \"pods\" in API group \"\" in the namespace \"ns1\""})"));

  // Everything else is refused in the apiserver's words too (with its details, where given).
  const struct {
    std::string method, path, message;
    json details;
  } refusals[] = {
      {"GET", "/api/v1/nodes",
       "nodes is forbidden: User \"system:serviceaccount:ns1:sa\" cannot list resource \"nodes\" "
       "in API group \"\" at the cluster scope"},
      {"GET", "/api/v1/pods?watch=true",
       "pods is forbidden: User \"system:serviceaccount:ns1:sa\" cannot watch resource \"pods\" "
       "in API group \"\" at the cluster scope"},
      {"GET",
       "/api/v1/namespaces/ns1/pods/x",
       "pods \"x\" is forbidden: User \"system:serviceaccount:ns1:sa\" cannot get resource "
       "\"pods\" in API group \"\" in the namespace \"ns1\"",
       {{"name", "x"}, {"kind", "pods"}}},
      {"GET", "/api/v1/namespaces/ns1/pods/x/log",
       "pods \"x\" is forbidden: User \"system:serviceaccount:ns1:sa\" cannot get resource "
       "\"pods/log\" in API group \"\" in the namespace \"ns1\""},
      // Authorization comes before routing: a resource that does not exist is forbidden too.
      {"DELETE",
       "/apis/kubetrain.dev/v1/namespaces/ns1/trainingjobs",
       "trainingjobs.kubetrain.dev is forbidden: User \"system:serviceaccount:ns1:sa\" cannot "
       "deletecollection resource \"trainingjobs\" in API group \"kubetrain.dev\" in the "
       "namespace \"ns1\"",
       {{"group", "kubetrain.dev"}, {"kind", "trainingjobs"}}},
      // A namespace is its own namespace.
      {"GET", "/api/v1/namespaces/ns1",
       "namespaces \"ns1\" is forbidden: User \"system:serviceaccount:ns1:sa\" cannot get "
       "resource \"namespaces\" in API group \"\" in the namespace \"ns1\""},
      {"GET", "/metrics",
       "forbidden: User \"system:serviceaccount:ns1:sa\" cannot get path \"/metrics\""},
  };
  for (const auto& refused : refusals) {
    SCOPED_TRACE(refused.method + " " + refused.path);
    r = Call(kSa, refused.method, refused.path);
    EXPECT_THAT(r, IsFailure(403, "Forbidden", refused.message));
    if (!refused.details.is_null()) {
      EXPECT_EQ(r.body["details"], refused.details);
    }
  }
  // An unknown token is not a user at all.
  EXPECT_EQ(Call("nobody", "GET", "/api").code, 401);
}

// --authz-log: one JSON line per decision, allowed and forbidden alike, with what RBAC saw.
using LocalkubeAuthzLog = testing::RbacApiTest;
TEST_F(LocalkubeAuthzLog, RecordsEveryDecisionWithItsAttributes) {
  std::string path = ::testing::TempDir() + "/authz-log-" + std::to_string(getpid()) + ".jsonl";
  std::remove(path.c_str());
  ServerOptions options;
  options.token = kAdminToken;
  options.rbac = true;
  options.authz_log = path;
  options.user_tokens[kSa] = MakeUser(kSaUser, {});
  ASSERT_NO_FATAL_FAILURE(Serve(options));
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/default/pods/p/log").code, 403);
  EXPECT_EQ(Call(kSa, "GET", "/api").code, 200);
  server_->Stop();
  std::ifstream in(path);
  std::vector<json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], json::parse(R"({"user":"system:serviceaccount:ns1:sa","verb":"get",
    "decision":"forbid","apiGroup":"","resource":"pods","subresource":"log",
    "namespace":"default","name":"p"})"));
  EXPECT_EQ(lines[1], json::parse(R"({"user":"system:serviceaccount:ns1:sa","verb":"get",
    "decision":"allow","path":"/api"})"));
  std::remove(path.c_str());
}

TEST_F(LocalkubeRbac, DiscoveryIsOpenToEveryAuthenticatedUser) {
  InstallWidgets();
  for (const char* path : {"/api", "/api/v1", "/apis", "/apis/test.dev", "/apis/test.dev/v1",
                           "/version", "/openapi/v3", "/openapi/v3/api/v1"}) {
    EXPECT_EQ(Call(kSa, "GET", path).code, 200) << path;
  }
}

TEST_F(LocalkubeRbac, AdminAndSystemMastersBypassRbac) {
  EXPECT_EQ(Call(kAdminToken, "GET", "/api/v1/namespaces/ns1/pods").code, 200);
  EXPECT_EQ(Call(kMaster, "GET", "/api/v1/nodes").code, 200);
  EXPECT_EQ(Call(kMaster, "POST", "/api/v1/namespaces/ns1/pods", Pod("p")).code, 201);
}

TEST_F(LocalkubeRbac, RoleBindingGrantsInItsNamespaceOnly) {
  Grant("ns1", R"([{"apiGroups":[""],"resources":["pods"],"verbs":["list"]}])");
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns1/pods").code, 200);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns2/pods").code, 403);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/pods").code, 403);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns1/pods?watch=true").code, 403);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns1/configmaps").code, 403);
  // A ClusterRole bound by a RoleBinding grants in the binding's namespace only.
  Admin("/apis/rbac.authorization.k8s.io/v1/clusterroles",
        Role("", "cm-reader", json::parse(R"([{"apiGroups":["*"],"resources":["configmaps"],
                                                "verbs":["get","list"]}])")));
  Admin("/apis/rbac.authorization.k8s.io/v1/namespaces/ns2/rolebindings",
        Binding("ns2", "cm-reader", "ClusterRole", "cm-reader",
                json::array({{{"kind", "User"}, {"name", kSaUser}}})));
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns2/configmaps").code, 200);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns1/configmaps").code, 403);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/configmaps").code, 403);
  // A ServiceAccount subject without a namespace is the binding's: ns2's "sa" is someone else.
  Admin("/apis/rbac.authorization.k8s.io/v1/namespaces/ns2/roles",
        Role("ns2", "secrets", json::parse(R"([{"apiGroups":[""],"resources":["secrets"],
                                                "verbs":["list"]}])")));
  Admin("/apis/rbac.authorization.k8s.io/v1/namespaces/ns2/rolebindings",
        Binding("ns2", "secrets", "Role", "secrets",
                json::array({{{"kind", "ServiceAccount"}, {"name", "sa"}}})));
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns2/secrets").code, 403);
}

TEST_F(LocalkubeRbac, ClusterRoleBindingGrantsEverywhereAndGroupsMatch) {
  Admin("/apis/rbac.authorization.k8s.io/v1/clusterroles",
        Role("", "pod-reader", json::parse(R"([{"apiGroups":[""],"resources":["pods"],
                                                "verbs":["get","list","watch"]}])")));
  Admin("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        Binding("", "pod-reader", "ClusterRole", "pod-reader",
                json::array({{{"kind", "Group"}, {"name", "system:serviceaccounts:ns1"}}})));
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns1/pods").code, 200);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns2/pods").code, 200);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/pods").code, 200);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/nodes").code, 403);
  EXPECT_EQ(Call(kSa, "POST", "/api/v1/namespaces/ns1/pods", Pod("p")).code, 403);
  // The operator's service account is not in ns1's group.
  EXPECT_EQ(Call(kOperator, "GET", "/api/v1/pods").code, 403);
}

TEST_F(LocalkubeRbac, BindingToAMissingRoleExplainsItself) {
  Admin("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        Binding("", "ghost", "ClusterRole", "ghost",
                json::array({{{"kind", "User"}, {"name", kSaUser}}})));
  Reply r = Call(kSa, "GET", "/api/v1/namespaces/ns1/pods");
  EXPECT_EQ(r.body["message"],
            "pods is forbidden: User \"system:serviceaccount:ns1:sa\" cannot list resource "
            "\"pods\" in API group \"\" in the namespace \"ns1\": RBAC: "
            "clusterrole.rbac.authorization.k8s.io \"ghost\" not found");
}

TEST_F(LocalkubeRbac, SubresourcesAreDistinctFromTheirResource) {
  json widget = AddWidget();
  Admin("/api/v1/namespaces/ns1/pods", Pod("p"));
  Grant("ns1", R"([
    {"apiGroups":[""],"resources":["pods/log"],"verbs":["get"]},
    {"apiGroups":["test.dev"],"resources":["widgets/status"],"verbs":["update","get"]},
    {"apiGroups":["*"],"resources":["*/scale"],"verbs":["get"]}])");
  // pods/log is granted (no kubelet here: 400, but not 403), the pod itself is not.
  EXPECT_NE(Call(kSa, "GET", "/api/v1/namespaces/ns1/pods/p/log").code, 403);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns1/pods/p").code, 403);
  const std::string w = "/apis/test.dev/v1/namespaces/ns1/widgets/w";
  widget["status"] = {{"replicas", 1}};
  EXPECT_EQ(Call(kSa, "PUT", w + "/status", widget).code, 200);
  Reply r = Call(kSa, "PUT", w, widget);
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body["message"],
            "widgets.test.dev \"w\" is forbidden: User \"system:serviceaccount:ns1:sa\" cannot "
            "update resource \"widgets\" in API group \"test.dev\" in the namespace \"ns1\"");
  r = Call(kSa, "PATCH", w + "/status", json::object(), "application/merge-patch+json");
  EXPECT_EQ(r.body["message"],
            "widgets.test.dev \"w\" is forbidden: User \"system:serviceaccount:ns1:sa\" cannot "
            "patch resource \"widgets/status\" in API group \"test.dev\" in the namespace \"ns1\"");
  EXPECT_EQ(Call(kSa, "GET", w + "/scale").code, 200);
  EXPECT_EQ(Call(kSa, "PUT", w + "/scale", json::object()).code, 403);
}

TEST_F(LocalkubeRbac, ResourceNamesLimitNamedRequests) {
  Grant("ns1", R"([{"apiGroups":[""],"resources":["configmaps"],
                                 "resourceNames":["allowed"],"verbs":["get","list","update"]}])");
  const std::string cms = "/api/v1/namespaces/ns1/configmaps";
  EXPECT_EQ(Call(kSa, "GET", cms + "/allowed").code, 404);  // allowed, and not there
  EXPECT_EQ(Call(kSa, "GET", cms + "/other").code, 403);
  EXPECT_EQ(Call(kSa, "GET", cms).code, 403);
  // A list narrowed to one name by a field selector is a request for that name.
  EXPECT_EQ(Call(kSa, "GET", cms + "?fieldSelector=metadata.name%3Dallowed").code, 200);
  EXPECT_EQ(Call(kSa, "GET", cms + "?fieldSelector=metadata.name%3Dother").code, 403);
  // create cannot be narrowed by name: the name is not part of the request.
  EXPECT_EQ(Call(kSa, "POST", cms,
                 {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "allowed"}}}})
                .code,
            403);
}

TEST_F(LocalkubeRbac, BlockOwnerDeletionNeedsUpdateOnTheOwnersFinalizers) {
  json widget = AddWidget();
  Grant("ns1", R"([{"apiGroups":[""],"resources":["pods"],
                                 "verbs":["create","get","update"]}])");
  const std::string pods = "/api/v1/namespaces/ns1/pods";
  Reply r = Call(kSa, "POST", pods, Pod("blocking", OwnerRef(widget, true)));
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body, json::parse(R"({"kind":"Status","apiVersion":"v1","metadata":{},
    "status":"Failure","reason":"Forbidden","code":403,
    "details":{"name":"blocking","kind":"pods"},
    "message":"pods \"blocking\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>"})"));
  // Owners that do not block deletion need nothing more than create.
  EXPECT_EQ(Call(kSa, "POST", pods, Pod("plain", OwnerRef(widget, false))).code, 201);
  // An owner kind nobody serves cannot be checked.
  json gadget = widget;
  gadget["kind"] = "Gadget";
  r = Call(kSa, "POST", pods, Pod("gadget", OwnerRef(gadget, true)));
  EXPECT_EQ(r.body["message"],
            "pods \"gadget\" is forbidden: cannot set blockOwnerDeletion in this case because "
            "cannot find RESTMapping for APIVersion test.dev/v1 Kind Gadget: no matches for kind "
            "\"Gadget\" in version \"test.dev/v1\"");
  // Changing the owners of an existing object needs delete on it.
  Reply plain = Call(kSa, "GET", pods + "/plain");
  plain.body["metadata"]["ownerReferences"][0]["controller"] = false;
  r = Call(kSa, "PUT", pods + "/plain", plain.body);
  EXPECT_EQ(r.code, 403);
  EXPECT_EQ(r.body["message"],
            "pods \"plain\" is forbidden: cannot set an ownerRef on a resource you can't delete: "
            ", <nil>");
  Grant("ns1", R"([{"apiGroups":["test.dev"],"resources":["widgets/finalizers"],
                                 "resourceNames":["w"],"verbs":["update"]},
                                {"apiGroups":[""],"resources":["pods"],"verbs":["delete"]}])");
  EXPECT_EQ(Call(kSa, "POST", pods, Pod("blocking", OwnerRef(widget, true))).code, 201);
  EXPECT_EQ(Call(kSa, "PUT", pods + "/plain", plain.body).code, 200);
  // Turning blockOwnerDeletion on later is checked like setting it at creation (and passes now).
  plain = Call(kSa, "GET", pods + "/plain");
  plain.body["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = true;
  EXPECT_EQ(Call(kSa, "PUT", pods + "/plain", plain.body).code, 200);
  // The admin needs no grant.
  EXPECT_EQ(Call(kAdminToken, "POST", pods, Pod("admins", OwnerRef(widget, true))).code, 201);
}

// The operator's service account with exactly deploy/rbac/ (cluster-role.yaml,
// leader-election-role.yaml and, for --gang-scheduler=volcano, optional/volcano-cluster-role.yaml)
// performs every kind of request the operator makes; each denial is printed with the apiserver's
// message and fails the test.
TEST_F(LocalkubeRbac, OperatorRbacFromDeployCoversWhatTheOperatorDoes) {
  const std::string rbac = "/apis/rbac.authorization.k8s.io/v1";
  auto collection = [&](const json& doc) -> std::string {
    std::string kind = doc.value("kind", "");
    std::string ns = doc["metadata"].value("namespace", "");
    if (kind == "ClusterRole") return rbac + "/clusterroles";
    if (kind == "ClusterRoleBinding") return rbac + "/clusterrolebindings";
    if (kind == "Role") return rbac + "/namespaces/" + ns + "/roles";
    if (kind == "RoleBinding") return rbac + "/namespaces/" + ns + "/rolebindings";
    if (kind == "ServiceAccount") return "/api/v1/namespaces/" + ns + "/serviceaccounts";
    if (kind == "CustomResourceDefinition") {
      return "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    }
    if (kind == "Namespace") return "/api/v1/namespaces";
    ADD_FAILURE() << "unexpected kind " << kind;
    return "/unknown";
  };
  auto apply = [&](const std::string& text) {
    auto docs = api::ParseYamlDocuments(text);
    ASSERT_TRUE(docs.ok()) << docs.status();
    for (const json& doc : *docs) {
      if (!doc.is_object()) continue;
      Reply r = Call(kAdminToken, "POST", collection(doc), doc);
      EXPECT_EQ(r.code, 201) << doc.value("kind", "") << ": " << r.body.dump();
    }
  };
  Admin(
      "/api/v1/namespaces",
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "kubetrain-system"}}}});
  apply(Slurp("deploy/crd/kubetrain.dev_trainingjobs.yaml"));
  Admin("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", PodGroupCrd());
  for (const char* file : {"deploy/rbac/service-account.yaml", "deploy/rbac/cluster-role.yaml",
                           "deploy/rbac/leader-election-role.yaml",
                           "deploy/rbac/optional/volcano-cluster-role.yaml"}) {
    SCOPED_TRACE(file);
    apply(Slurp(file));
  }
  auto example = api::ParseYamlDocuments(Slurp("deploy/examples/fashion-mnist.yaml"));
  ASSERT_TRUE(example.ok() && !example->empty());
  const std::string jobs = "/apis/kubetrain.dev/v1/namespaces/ns1/trainingjobs";
  json job = Admin(jobs, (*example)[0]);
  ASSERT_TRUE(job.contains("metadata"));
  json owned = OwnerRef(job, true);  // what operator/api/render.cc puts on everything it creates
  const std::string ns1 = "/api/v1/namespaces/ns1";
  Admin(ns1 + "/pods", Pod("existing"));
  Admin(ns1 + "/services", {{"apiVersion", "v1"},
                            {"kind", "Service"},
                            {"metadata", {{"name", "existing"}}},
                            {"spec", {{"clusterIP", "None"}}}});
  json event = Admin(ns1 + "/events", {{"apiVersion", "v1"},
                                       {"kind", "Event"},
                                       {"metadata", {{"name", "existing"}}},
                                       {"reason", "Test"},
                                       {"message", "m"},
                                       {"type", "Normal"}});
  const std::string podgroups = "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns1/podgroups";
  Admin(podgroups, {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                    {"kind", "PodGroup"},
                    {"metadata", {{"name", "existing"}}},
                    {"spec", {{"minMember", 1}}}});
  const std::string leases = "/apis/coordination.k8s.io/v1/namespaces/kubetrain-system/leases";

  struct Check {
    std::string what;  // the request, and the grant a denial means is missing
    std::function<Reply()> run;
  };
  json pod = Pod("job-worker-0", owned);
  json service = {{"apiVersion", "v1"},
                  {"kind", "Service"},
                  {"metadata", {{"name", "job"}, {"ownerReferences", owned}}},
                  {"spec", {{"clusterIP", "None"}}}};
  json secret = {{"apiVersion", "v1"},
                 {"kind", "Secret"},
                 {"metadata", {{"name", "job-secret"}, {"ownerReferences", owned}}},
                 {"data", {{"k", "dg=="}}}};
  json group = {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                {"kind", "PodGroup"},
                {"metadata", {{"name", "job"}, {"ownerReferences", owned}}},
                {"spec", {{"minMember", 1}}}};
  json new_event = {{"apiVersion", "v1"},
                    {"kind", "Event"},
                    {"metadata", {{"generateName", "job."}}},
                    {"involvedObject",
                     {{"apiVersion", "kubetrain.dev/v1"},
                      {"kind", "TrainingJob"},
                      {"name", job["metadata"]["name"]},
                      {"namespace", "ns1"}}},
                    {"reason", "Created"},
                    {"message", "m"},
                    {"type", "Normal"}};
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "kubetrain-operator"}}},
                {"spec", {{"holderIdentity", "op"}, {"leaseDurationSeconds", 15}}}};
  const std::string op = kOperator;
  const std::string job_path = jobs + "/" + job["metadata"]["name"].get<std::string>();
  std::vector<Check> checks = {
      {"list trainingjobs (all namespaces)",
       [&] { return Call(op, "GET", "/apis/kubetrain.dev/v1/trainingjobs"); }},
      {"watch trainingjobs (all namespaces)",
       [&] {
         return Call(op, "GET", "/apis/kubetrain.dev/v1/trainingjobs?watch=true&timeoutSeconds=1");
       }},
      {"update trainingjobs/status",
       [&] {
         json current = Call(kAdminToken, "GET", job_path).body;
         current["status"] = {{"conditions", json::array()}};
         return Call(op, "PUT", job_path + "/status", current);
       }},
      {"list pods (all namespaces)", [&] { return Call(op, "GET", "/api/v1/pods"); }},
      {"watch pods (all namespaces)",
       [&] { return Call(op, "GET", "/api/v1/pods?watch=true&timeoutSeconds=1"); }},
      {"list services (all namespaces)", [&] { return Call(op, "GET", "/api/v1/services"); }},
      {"watch services (all namespaces)",
       [&] { return Call(op, "GET", "/api/v1/services?watch=true&timeoutSeconds=1"); }},
      {"create pods owned by the TrainingJob (blockOwnerDeletion: update "
       "trainingjobs/finalizers)",
       [&] { return Call(op, "POST", ns1 + "/pods", pod); }},
      {"get pods/log", [&] { return Call(op, "GET", ns1 + "/pods/existing/log"); }},
      {"delete pods", [&] { return Call(op, "DELETE", ns1 + "/pods/existing"); }},
      {"deletecollection pods (a finished job's, by its labels)",
       [&] {
         return Call(op, "DELETE", ns1 + "/pods?labelSelector=kubetrain.dev%2Fjob-name%3Dgone");
       }},
      {"create services owned by the TrainingJob (blockOwnerDeletion: update "
       "trainingjobs/finalizers)",
       [&] { return Call(op, "POST", ns1 + "/services", service); }},
      {"delete services", [&] { return Call(op, "DELETE", ns1 + "/services/existing"); }},
      {"create secrets owned by the TrainingJob (blockOwnerDeletion: update "
       "trainingjobs/finalizers)",
       [&] { return Call(op, "POST", ns1 + "/secrets", secret); }},
      {"get secrets", [&] { return Call(op, "GET", ns1 + "/secrets/job-secret"); }},
      {"create events", [&] { return Call(op, "POST", ns1 + "/events", new_event); }},
      {"patch events (repeats aggregated into count)",
       [&] {
         return Call(op, "PATCH", ns1 + "/events/existing", {{"count", 2}},
                     "application/merge-patch+json");
       }},
      {"create leases", [&] { return Call(op, "POST", leases, lease); }},
      {"get leases/kubetrain-operator",
       [&] { return Call(op, "GET", leases + "/kubetrain-operator"); }},
      {"update leases/kubetrain-operator",
       [&] {
         json current = Call(kAdminToken, "GET", leases + "/kubetrain-operator").body;
         current["spec"]["leaseTransitions"] = 1;
         return Call(op, "PUT", leases + "/kubetrain-operator", current);
       }},
      {"create podgroups owned by the TrainingJob (blockOwnerDeletion: update "
       "trainingjobs/finalizers)",
       [&] { return Call(op, "POST", podgroups, group); }},
      {"delete podgroups", [&] { return Call(op, "DELETE", podgroups + "/existing"); }},
      {"delete trainingjobs (ttlSecondsAfterFinished)",
       [&] { return Call(op, "DELETE", job_path); }},
  };
  for (const Check& c : checks) {
    Reply r = c.run();
    EXPECT_NE(r.code, 0) << c.what;
    if (r.code != 403) continue;
    std::cout << "[ DENIED ] " << c.what << "\n           " << r.body.value("message", "") << "\n";
    ADD_FAILURE() << "deploy/rbac/ does not let the operator " << c.what << ": "
                  << r.body.value("message", "");
  }
}

}  // namespace
}  // namespace kubetrain::localkube
