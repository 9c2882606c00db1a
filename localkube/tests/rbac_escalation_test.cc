// RBAC privilege escalation prevention over real HTTP: Roles and bindings a user writes may grant
// only what the user holds, unless the user has `escalate` (roles) or `bind` (the referenced
// role); the cases of the Kubernetes documentation and the rule comparison itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/rbac.h"
#include "localkube/rbac_rules.h"
#include "localkube/server.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
// Named, so the unity build keeps these helpers apart from other tests'.
namespace rbac_escalation_test {
namespace {

using nlohmann::json;
using testing::Binding;
using testing::IsFailure;
using testing::Reply;
using testing::Role;

constexpr char kRbac[] = "/apis/rbac.authorization.k8s.io/v1";
// How the refusals name the ServiceAccount.
constexpr char kSaWho[] =
    "user \"system:serviceaccount:ns1:sa\" (groups=[\"system:serviceaccounts\" "
    "\"system:serviceaccounts:ns1\" \"system:authenticated\"]) is attempting to grant RBAC "
    "permissions not currently held:\n";

json Rules(const char* text) { return json::parse(text); }

std::string Roles(const std::string& ns) {
  return absl::StrCat(kRbac, "/namespaces/", ns, "/roles");
}
std::string RoleBindings(const std::string& ns) {
  return absl::StrCat(kRbac, "/namespaces/", ns, "/rolebindings");
}
const std::string kClusterRoles = absl::StrCat(kRbac, "/clusterroles");
const std::string kClusterRoleBindings = absl::StrCat(kRbac, "/clusterrolebindings");

class RbacEscalation : public testing::RbacApiTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(ServeWithRbac());
    // The bootstrap ClusterRoles of a real cluster the cases refer to.
    Admin(kClusterRoles, Role("", "cluster-admin", Rules(R"([
      {"apiGroups":["*"],"resources":["*"],"verbs":["*"]},
      {"nonResourceURLs":["*"],"verbs":["*"]}])")));
    Admin(kClusterRoles, Role("", "view", Rules(R"([
      {"apiGroups":[""],"resources":["pods","configmaps"],"verbs":["get","list","watch"]}])")));
    Admin(kClusterRoles, Role("", "edit", Rules(R"([
      {"apiGroups":[""],"resources":["pods","configmaps","secrets"],
       "verbs":["get","list","watch","create","update","patch","delete"]}])")));
  }
  // A 403 whose message is `<prefix>` + kSaWho + `missing`.
  void ExpectEscalation(const Reply& r, const std::string& prefix, const std::string& missing) {
    EXPECT_THAT(r, IsFailure(403, "Forbidden", absl::StrCat(prefix, kSaWho, missing)));
  }
};

// A ServiceAccount allowed only to create Roles and RoleBindings can no longer make itself (or
// anyone) cluster-admin, nor write a `*` Role, and so never gets to read Secrets.
TEST_F(RbacEscalation, CreatingRolesAndBindingsDoesNotMakeTheCreatorAdmin) {
  Grant("ns1", R"([{"apiGroups":["rbac.authorization.k8s.io"],
                    "resources":["roles","rolebindings"],"verbs":["create"]}])");
  Reply r = Call(kSa, "POST", RoleBindings("ns1"),
                 Binding("ns1", "own-admin", "ClusterRole", "cluster-admin", SaSubjects()));
  ExpectEscalation(
      r, "rolebindings.rbac.authorization.k8s.io \"own-admin\" is forbidden: ",
      "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}\n{NonResourceURLs:[\"*\"], "
      "Verbs:[\"*\"]}");
  EXPECT_EQ(r.body["details"], json::parse(R"({"name":"own-admin",
    "group":"rbac.authorization.k8s.io","kind":"rolebindings"})"));
  ExpectEscalation(Call(kSa, "POST", Roles("ns1"),
                        Role("ns1", "star", Rules(R"([{"apiGroups":["*"],"resources":["*"],
                                                "verbs":["*"]}])"))),
                   "roles.rbac.authorization.k8s.io \"star\" is forbidden: ",
                   "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}");
  json other = json::array({{{"kind", "User"}, {"name", "mallory"}}});
  EXPECT_EQ(Call(kSa, "POST", RoleBindings("ns1"),
                 Binding("ns1", "their-admin", "ClusterRole", "cluster-admin", other))
                .code,
            403);
  // Binding a role that grants only a subset of the creator's permissions is fine.
  EXPECT_EQ(Call(kSa, "POST", Roles("ns1"),
                 Role("ns1", "maker", Rules(R"([{"apiGroups":["rbac.authorization.k8s.io"],
                                                      "resources":["roles"],"verbs":["create"]}])")))
                .code,
            201);
  EXPECT_EQ(
      Call(kSa, "POST", RoleBindings("ns1"), Binding("ns1", "maker", "Role", "maker", other)).code,
      201);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/namespaces/ns1/secrets").code, 403);
  EXPECT_EQ(Call(kSa, "GET", "/api/v1/secrets").code, 403);
}

TEST_F(RbacEscalation, RolesMayGrantOnlyWhatTheCreatorHoldsInTheRolesScope) {
  Grant("ns1", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles"],
                    "verbs":["create"]},
                   {"apiGroups":[""],"resources":["pods","pods/log"],"verbs":["get","list"]},
                   {"apiGroups":["apps"],"resources":["*/scale"],"verbs":["get"]},
                   {"apiGroups":[""],"resources":["configmaps"],"resourceNames":["a"],
                    "verbs":["get"]}])");
  Grant("ns2", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles"],
                    "verbs":["create"]}])");
  Grant("", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["clusterroles"],
                 "verbs":["create"]},
                {"nonResourceURLs":["/healthz/*"],"verbs":["get"]}])");
  auto create = [&](const std::string& ns, const std::string& name, const char* rules) {
    return Call(kSa, "POST", ns.empty() ? kClusterRoles : Roles(ns), Role(ns, name, Rules(rules)));
  };
  EXPECT_EQ(create("ns1", "subset", R"([{"apiGroups":[""],"resources":["pods"],"verbs":["get"]},
      {"apiGroups":[""],"resources":["pods/log"],"verbs":["list","get"]},
      {"apiGroups":["apps"],"resources":["deployments/scale"],"verbs":["get"]},
      {"apiGroups":[""],"resources":["configmaps"],"resourceNames":["a"],"verbs":["get"]}])")
                .code,
            201);
  // Non-resource URLs: "/healthz/*" covers what it prefixes, and no more.
  EXPECT_EQ(create("", "probe", R"([{"nonResourceURLs":["/healthz/ready"],"verbs":["get"]}])").code,
            201);
  // Role (or ClusterRole) "x" with `rules` in `ns` asks for more: the refusal names what is
  // missing.
  const struct {
    std::string ns;
    const char* rules;
    const char* missing;
  } beyond[] = {
      // Missing verbs are listed compacted per resource, in the role's verb order.
      {"ns1",
       R"([{"apiGroups":[""],"resources":["secrets"],"verbs":["watch","get"]},
           {"apiGroups":[""],"resources":["pods"],"verbs":["get","delete"]}])",
       "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}\n"
       "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"watch\" \"get\"]}"},
      // A subresource is not its resource; "*/scale" covers only scale.
      {"ns1",
       R"([{"apiGroups":["apps"],"resources":["deployments","deployments/status"],
            "verbs":["get"]}])",
       "{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"get\"]}\n"
       "{APIGroups:[\"apps\"], Resources:[\"deployments/status\"], Verbs:[\"get\"]}"},
      // Held for one name only: neither every name nor another name.
      {"ns1", R"([{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}])",
       "{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"get\"]}"},
      {"ns1",
       R"([{"apiGroups":[""],"resources":["configmaps"],"resourceNames":["a","b"],
            "verbs":["get"]}])",
       "{APIGroups:[\"\"], Resources:[\"configmaps\"], ResourceNames:[\"b\"], Verbs:[\"get\"]}"},
      // Held in ns1 is not held in ns2, nor cluster-wide.
      {"ns2", R"([{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}])",
       "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\"]}"},
      {"", R"([{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}])",
       "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\"]}"},
      {"", R"([{"nonResourceURLs":["/metrics"],"verbs":["get"]}])",
       "{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"},
  };
  for (const auto& role : beyond) {
    SCOPED_TRACE(role.rules);
    ExpectEscalation(create(role.ns, "x", role.rules),
                     absl::StrCat(role.ns.empty() ? "clusterroles" : "roles",
                                  ".rbac.authorization.k8s.io \"x\" is forbidden: "),
                     role.missing);
  }
}

// "escalate" on roles lets a user write roles granting more than they hold.
TEST_F(RbacEscalation, EscalateVerbAllowsRolesBeyondWhatIsHeld) {
  Grant("ns1", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles"],
                    "verbs":["create","update"]}])");
  json star = Role("ns1", "star", Rules(R"([{"apiGroups":["*"],"resources":["*"],
                                                 "verbs":["*"]}])"));
  EXPECT_EQ(Call(kSa, "POST", Roles("ns1"), star).code, 403);
  Grant("ns1", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles"],
                    "verbs":["escalate"]}])");
  EXPECT_EQ(Call(kSa, "POST", Roles("ns1"), star).code, 201);
  // Not for ClusterRoles: escalate is per resource.
  Grant("", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["clusterroles"],
                 "verbs":["create"]}])");
  EXPECT_EQ(Call(kSa, "POST", kClusterRoles, Role("", "star", star["rules"])).code, 403);
  // system:masters needs neither.
  EXPECT_EQ(Call(kMaster, "POST", kClusterRoles, Role("", "star", star["rules"])).code, 201);
}

// The documentation's case: a user may bind a role whose permissions they lack only with "bind"
// on that role, which resourceNames may narrow to particular roles.
TEST_F(RbacEscalation, BindVerbAllowsBindingNamedRolesNotHeld) {
  Grant("ns1", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["rolebindings"],
                    "verbs":["create"]}])");
  json bob = json::array({{{"kind", "User"}, {"name", "bob"}}});
  const std::string b = "rolebindings.rbac.authorization.k8s.io \"b\" is forbidden: ";
  ExpectEscalation(
      Call(kSa, "POST", RoleBindings("ns1"), Binding("ns1", "b", "ClusterRole", "view", bob)), b,
      "{APIGroups:[\"\"], Resources:[\"configmaps\"], Verbs:[\"get\" \"list\" \"watch\"]}\n"
      "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"list\" \"watch\"]}");
  Grant("", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["clusterroles"],
                 "resourceNames":["view"],"verbs":["bind"]}])");
  EXPECT_EQ(
      Call(kSa, "POST", RoleBindings("ns1"), Binding("ns1", "b", "ClusterRole", "view", bob)).code,
      201);
  EXPECT_EQ(
      Call(kSa, "POST", RoleBindings("ns1"), Binding("ns1", "e", "ClusterRole", "edit", bob)).code,
      403);
  // Holding every permission of a role is as good as bind on it.
  Grant("ns1", R"([{"apiGroups":[""],"resources":["*"],"verbs":["*"]}])");
  EXPECT_EQ(
      Call(kSa, "POST", RoleBindings("ns1"), Binding("ns1", "e", "ClusterRole", "edit", bob)).code,
      201);
  // A role that does not exist cannot be checked.
  EXPECT_THAT(Call(kSa, "POST", RoleBindings("ns1"), Binding("ns1", "ghost", "Role", "ghost", bob)),
              IsFailure(403, "Forbidden",
                        "rolebindings.rbac.authorization.k8s.io \"ghost\" is forbidden: "
                        "role.rbac.authorization.k8s.io \"ghost\" not found"));
}

// PUT and every PATCH flavour are checked on the object they produce; a write that changes
// only what the garbage collector writes is not.
TEST_F(RbacEscalation, UpdatesAndPatchesAreCheckedOnTheResult) {
  Grant("ns1", R"([{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles"],
                    "verbs":["create","get","update","patch"]},
                   {"apiGroups":[""],"resources":["pods"],"verbs":["get"]}])");
  const std::string r = Roles("ns1") + "/r";
  ASSERT_EQ(Call(kSa, "POST", Roles("ns1"),
                 Role("ns1", "r", Rules(R"([{"apiGroups":[""],"resources":["pods"],
                                                  "verbs":["get"]}])")))
                .code,
            201);
  const std::string role_r = "roles.rbac.authorization.k8s.io \"r\" is forbidden: ";
  const std::string secrets = "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}";
  json role = Call(kSa, "GET", r).body;
  role["rules"].push_back(Rules(R"({"apiGroups":[""],"resources":["secrets"],"verbs":["list"]})"));
  ExpectEscalation(Call(kSa, "PUT", r, role), role_r, secrets);
  json more = {{"rules", json::array({Rules(R"({"apiGroups":[""],"resources":["secrets"],
                                               "verbs":["list"]})")})}};
  ExpectEscalation(Call(kSa, "PATCH", r, more, "application/merge-patch+json"), role_r, secrets);
  ExpectEscalation(Call(kSa, "PATCH", r, more, "application/strategic-merge-patch+json"), role_r,
                   secrets);
  json add = json::array({{{"op", "add"}, {"path", "/rules/-"}, {"value", more["rules"][0]}}});
  ExpectEscalation(Call(kSa, "PATCH", r, add, "application/json-patch+json"), role_r, secrets);
  const std::string apply =
      "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: r\n"
      "  namespace: ns1\nrules:\n- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [list]\n";
  ExpectEscalation(
      Call(kSa, "PATCH", r + "?fieldManager=t", json(apply), "application/apply-patch+yaml"),
      role_r, secrets);
  // Server-side apply that creates is checked as a create.
  ExpectEscalation(Call(kSa, "PATCH", Roles("ns1") + "/new?fieldManager=t",
                        json(absl::StrCat(apply.substr(0, apply.find("name: r")), "name: new",
                                          apply.substr(apply.find("name: r") + 7))),
                        "application/apply-patch+yaml"),
                   "roles.rbac.authorization.k8s.io \"new\" is forbidden: ", secrets);
  EXPECT_EQ(Call(kSa, "GET", r).body["rules"].size(), 1u);
  // Within what is held, writes pass.
  EXPECT_EQ(Call(kSa, "PATCH", r, {{"metadata", {{"labels", {{"a", "b"}}}}}},
                 "application/merge-patch+json")
                .code,
            200);
  // An admin's role granting more than the ServiceAccount holds: only a GC-field change passes.
  Admin(Roles("ns1"), Role("ns1", "big", Rules(R"([{"apiGroups":["*"],"resources":["*"],
                                                        "verbs":["*"]}])")));
  EXPECT_EQ(Call(kSa, "PATCH", Roles("ns1") + "/big", {{"metadata", {{"finalizers", {"x/y"}}}}},
                 "application/merge-patch+json")
                .code,
            200);
  EXPECT_EQ(Call(kSa, "PATCH", Roles("ns1") + "/big", {{"metadata", {{"labels", {{"a", "b"}}}}}},
                 "application/merge-patch+json")
                .code,
            403);
}

// The rule comparison on its own.
TEST(RbacRules, CoverageCompactionAndTheirMessageForm) {
  PolicyRule wide = PolicyRuleOf(Rules(R"({"apiGroups":["*"],"resources":["*"],"verbs":["*"]})"));
  PolicyRule pods = PolicyRuleOf(Rules(R"({"apiGroups":[""],"resources":["pods","pods/log"],
                                            "verbs":["get","list"],"resourceNames":["p"]})"));
  EXPECT_TRUE(Covers({wide}, {pods}).covered);
  EXPECT_TRUE(Covers({pods}, {pods}).covered);
  Coverage c = Covers({pods}, {wide});
  EXPECT_FALSE(c.covered);
  ASSERT_EQ(c.missing.size(), 1u);
  EXPECT_EQ(CompactString(c.missing[0]), "{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}");
  // A rule without apiGroups grants nothing, so it needs nothing.
  EXPECT_TRUE(
      Covers({}, {PolicyRuleOf(Rules(R"({"resources":["pods"],"verbs":["get"]})"))}).covered);
  // Missing atoms of one resource merge their verbs.
  std::vector<PolicyRule> compact = CompactRules(Covers({}, {pods}).missing);
  ASSERT_EQ(compact.size(), 2u);
  EXPECT_EQ(CompactString(compact[0]),
            "{APIGroups:[\"\"], Resources:[\"pods\"], ResourceNames:[\"p\"], Verbs:[\"get\" "
            "\"list\"]}");
  // Quoting is Go's.
  EXPECT_EQ(GoQuotedList({"a\"b", ""}), "[\"a\\\"b\" \"\"]");
  // A role standing for too many combinations is refused, not enumerated.
  PolicyRule huge;
  for (int i = 0; i < 200; ++i) {
    huge.verbs.push_back(absl::StrCat("v", i));
    huge.api_groups.push_back(absl::StrCat("g", i));
    huge.resources.push_back(absl::StrCat("r", i));
  }
  Coverage refused = Covers({wide}, {huge});
  EXPECT_FALSE(refused.covered);
  EXPECT_TRUE(refused.too_large);
}

}  // namespace
}  // namespace rbac_escalation_test
}  // namespace kubetrain::localkube
