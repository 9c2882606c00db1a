// The Kubernetes protobuf request bodies (protobuf.h): each kind kubectl's typed clients write,
// hand-encoded as client-go encodes it (proto2: every non-pointer field written, zero or not),
// decodes to the JSON a JSON client would have sent; malformed bodies are refused with the
// field path, never read past their end.
#include "localkube/protobuf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/protobuf_schema.h"
#include "localkube/server.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/protobuf_wire.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::Int;
using testing::Len;
using testing::Varint;

std::string Entry(int field, const std::string& key, const std::string& value) {
  return Len(field, Len(1, key) + Len(2, value));
}
// ObjectMeta as client-go writes a new object's: empty strings and a zero Time included.
std::string Meta(const std::string& name, const std::string& labels = "") {
  return Len(1, Len(1, name) + Len(2, "") + Len(3, "") + Len(4, "") + Len(5, "") + Len(6, "") +
                    Int(7, 0) + Len(8, "") + labels);
}
std::string Body(const std::string& api_version, const std::string& kind, const std::string& raw) {
  return std::string("k8s\0", 4) + Len(1, Len(1, api_version) + Len(2, kind)) + Len(2, raw) +
         Len(3, "") + Len(4, "");
}
// IntOrString.
std::string IntOr(int field, int32_t v) { return Len(field, Int(1, 0) + Int(2, v) + Len(3, "")); }
std::string StrOr(int field, const std::string& v) {
  return Len(field, Int(1, 1) + Int(2, 0) + Len(3, v));
}

json Decode(const std::string& body) {
  absl::StatusOr<json> decoded = DecodeK8sProtobuf(body);
  EXPECT_THAT(decoded, IsOk());
  return decoded.ok() ? *decoded : json();
}
std::string Error(const std::string& body) {
  absl::StatusOr<json> decoded = DecodeK8sProtobuf(body);
  EXPECT_FALSE(decoded.ok()) << decoded->dump();
  if (decoded.ok()) return "";
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << decoded.status();
  return std::string(decoded.status().message());
}

TEST(K8sProtobuf, RoleAsKubectlCreateRoleWritesIt) {
  std::string rule = Len(1, "get") + Len(1, "list") + Len(2, "") + Len(3, "pods");
  EXPECT_EQ(Decode(Body("rbac.authorization.k8s.io/v1", "Role", Meta("r") + Len(2, rule))),
            json::parse(R"({"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role",
              "metadata":{"name":"r"},
              "rules":[{"verbs":["get","list"],"apiGroups":[""],"resources":["pods"]}]})"));
}

TEST(K8sProtobuf, AccessReviewsAsKubectlAuthWritesThem) {
  // kubectl auth can-i create pods -n ml: resourceAttributes set, nonResourceAttributes absent.
  std::string attrs = Len(1, "ml") + Len(2, "create") + Len(3, "") + Len(4, "") + Len(5, "pods") +
                      Len(6, "") + Len(7, "");
  EXPECT_EQ(Decode(Body("authorization.k8s.io/v1", "SelfSubjectAccessReview",
                        Meta("") + Len(2, Len(1, attrs)))),
            json::parse(R"({"apiVersion":"authorization.k8s.io/v1",
              "kind":"SelfSubjectAccessReview","metadata":{},
              "spec":{"resourceAttributes":{"namespace":"ml","verb":"create","resource":"pods"}}})"));
  // A SubjectAccessReview's extra values (ExtraValue {items}) are string lists in JSON.
  std::string spec = Len(2, Len(1, "/healthz") + Len(2, "get")) + Len(3, "alice") + Len(4, "devs") +
                     Entry(5, "scopes", Len(1, "a") + Len(1, "b")) + Entry(5, "empty", "") +
                     Len(6, "u-1");
  EXPECT_EQ(Decode(Body("authorization.k8s.io/v1", "SubjectAccessReview", Len(2, spec)))["spec"],
            json::parse(R"({"nonResourceAttributes":{"path":"/healthz","verb":"get"},
              "user":"alice","groups":["devs"],"extra":{"scopes":["a","b"],"empty":[]},
              "uid":"u-1"})"));
  EXPECT_EQ(Decode(Body("authorization.k8s.io/v1", "SelfSubjectRulesReview",
                        Len(2, Len(1, "ml"))))["spec"],
            json({{"namespace", "ml"}}));
  EXPECT_EQ(Decode(Body("authentication.k8s.io/v1", "SelfSubjectReview", Meta(""))),
            json::parse(R"({"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview",
              "metadata":{}})"));
}

TEST(K8sProtobuf, BindingsAndClusterRoles) {
  std::string subjects =
      Len(2, Len(1, "User") + Len(2, "rbac.authorization.k8s.io") + Len(3, "u") + Len(4, "")) +
      Len(2, Len(1, "ServiceAccount") + Len(2, "") + Len(3, "sa") + Len(4, "ns"));
  std::string role_ref = Len(3, Len(1, "rbac.authorization.k8s.io") + Len(2, "Role") + Len(3, "r"));
  json expected = json::parse(R"({"metadata":{"name":"rb"},
    "subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"u"},
                {"kind":"ServiceAccount","name":"sa","namespace":"ns"}],
    "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"}})");
  for (const char* kind : {"RoleBinding", "ClusterRoleBinding"}) {
    json object =
        Decode(Body("rbac.authorization.k8s.io/v1", kind, Meta("rb") + subjects + role_ref));
    object.erase("apiVersion");
    object.erase("kind");
    EXPECT_EQ(object, expected) << kind;
  }
  std::string aggregation = Len(3, Len(1, Entry(1, "a", "b")));
  std::string urls = Len(2, Len(1, "get") + Len(5, "/logs") + Len(5, "/healthz"));
  json role =
      Decode(Body("rbac.authorization.k8s.io/v1", "ClusterRole", Meta("cr") + urls + aggregation));
  EXPECT_EQ(role["rules"],
            json::parse(R"([{"verbs":["get"],"nonResourceURLs":["/logs","/healthz"]}])"));
  EXPECT_EQ(role["aggregationRule"],
            json::parse(R"({"clusterRoleSelectors":[{"matchLabels":{"a":"b"}}]})"));
}

// A container with what kubectl's generators and a hand-written manifest set.
std::string Container() {
  std::string port = Len(6, Len(1, "") + Int(2, 0) + Int(3, 8080) + Len(4, "TCP") + Len(5, ""));
  std::string env =
      Len(7, Len(1, "A") + Len(2, "1")) +
      Len(7, Len(1, "PASSWORD") + Len(2, "") +
                 Len(3, Len(4, Len(1, Len(1, "db")) + Len(2, "pw"))));  // secretKeyRef
  std::string resources =
      Len(8, Entry(1, "cpu", Len(1, "200m")) + Entry(2, "memory", Len(1, "64Mi")));
  std::string probe = Len(10, Len(1, Len(2, Len(1, "/healthz") + IntOr(2, 8080))) + Int(2, 0) +
                                  Int(4, 5));  // httpGet (inline ProbeHandler), periodSeconds 5
  std::string security = Len(15, Int(4, 0) + Int(7, 0));  // runAsUser 0, allowPrivilegeEscalation
  return Len(1, "app") + Len(2, "busybox") + Len(3, "sleep") + Len(4, "10") + port + env +
         resources + Len(9, Len(1, "data") + Int(2, 0) + Len(3, "/data")) + probe + security +
         Len(14, "IfNotPresent") + Int(16, 0);  // stdin false: left out
}

TEST(K8sProtobuf, DeploymentWithAFullPodTemplate) {
  std::string labels = Entry(11, "app", "d");
  std::string volume = Len(1, Len(1, "data") + Len(2, Len(2, Len(1, "") + Len(2, Len(1, "1Gi")))));
  std::string pod_spec = volume + Len(2, Container()) + Len(3, "Always") + Len(8, "default") +
                         Len(14, Int(2, 1000) + Int(5, 2000));  // securityContext
  std::string spec = Int(1, 0) +                                // replicas: a pointer, so 0 is kept
                     Len(2, Entry(1, "app", "d")) +
                     Len(3, Len(1, Len(1, "") + Entry(11, "app", "d")) + Len(2, pod_spec)) +
                     Len(4, Len(1, "RollingUpdate") + Len(2, StrOr(2, "25%") + IntOr(1, 0)));
  json d = Decode(Body("apps/v1", "Deployment", Meta("d", labels) + Len(2, spec) + Len(3, "")));
  EXPECT_EQ(d["metadata"], json::parse(R"({"name":"d","labels":{"app":"d"}})"));
  EXPECT_EQ(d["spec"]["replicas"], 0);
  EXPECT_EQ(d["spec"]["template"]["metadata"], json::parse(R"({"labels":{"app":"d"}})"));
  EXPECT_EQ(d["spec"]["selector"], json::parse(R"({"matchLabels":{"app":"d"}})"));
  EXPECT_EQ(d["spec"]["strategy"], json::parse(R"({"type":"RollingUpdate",
    "rollingUpdate":{"maxSurge":"25%","maxUnavailable":0}})"));
  EXPECT_FALSE(d.contains("status")) << "status is not read from a create";
  const json& pod = d["spec"]["template"]["spec"];
  EXPECT_EQ(pod["volumes"], json::parse(R"([{"name":"data","emptyDir":{"sizeLimit":"1Gi"}}])"));
  EXPECT_EQ(pod["restartPolicy"], "Always");
  EXPECT_EQ(pod["serviceAccountName"], "default");
  EXPECT_EQ(pod["securityContext"], json::parse(R"({"runAsUser":1000,"fsGroup":2000})"));
  EXPECT_EQ(pod["containers"], json::parse(R"([{"name":"app","image":"busybox",
    "command":["sleep"],"args":["10"],"ports":[{"containerPort":8080,"protocol":"TCP"}],
    "env":[{"name":"A","value":"1"},
           {"name":"PASSWORD","valueFrom":{"secretKeyRef":{"name":"db","key":"pw"}}}],
    "resources":{"limits":{"cpu":"200m"},"requests":{"memory":"64Mi"}},
    "volumeMounts":[{"name":"data","mountPath":"/data"}],
    "livenessProbe":{"httpGet":{"path":"/healthz","port":8080},"periodSeconds":5},
    "securityContext":{"runAsUser":0,"allowPrivilegeEscalation":false},
    "imagePullPolicy":"IfNotPresent"}])"));
}

TEST(K8sProtobuf, JobsAndCronJobs) {
  std::string tmpl = Len(1, Len(1, "")) + Len(2, Len(2, Container()) + Len(3, "Never"));
  json job = Decode(Body("batch/v1", "Job", Meta("j") + Len(2, Int(7, 0) + Len(6, tmpl))));
  EXPECT_EQ(job["spec"]["backoffLimit"], 0);
  EXPECT_EQ(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(job["spec"]["template"]["metadata"], json::object());
  std::string cron_spec = Len(1, "*/1 * * * *") + Len(3, "Forbid") + Int(4, 0) +
                          Len(5, Len(1, "") + Len(2, Len(6, tmpl)));
  json cj = Decode(Body("batch/v1", "CronJob", Meta("cj") + Len(2, cron_spec)));
  EXPECT_EQ(cj["spec"]["schedule"], "*/1 * * * *");
  EXPECT_EQ(cj["spec"]["concurrencyPolicy"], "Forbid");
  EXPECT_EQ(cj["spec"]["suspend"], false);
  EXPECT_EQ(cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["name"], "app");
}

TEST(K8sProtobuf, ServicesQuotasBudgetsPriorityClassesIngressesTokens) {
  std::string ports =
      Len(1, Len(1, "80-8080") + Len(2, "TCP") + Int(3, 80) + IntOr(4, 8080) + Int(5, 30080)) +
      Len(1, Len(1, "web") + Len(2, "TCP") + Int(3, 81) + StrOr(4, "http") + Int(5, 0));
  json svc = Decode(
      Body("v1", "Service",
           Meta("s") + Len(2, ports + Entry(2, "app", "s") + Len(3, "None") + Len(4, "NodePort"))));
  EXPECT_EQ(svc["spec"], json::parse(R"({"ports":[
    {"name":"80-8080","protocol":"TCP","port":80,"targetPort":8080,"nodePort":30080},
    {"name":"web","protocol":"TCP","port":81,"targetPort":"http"}],
    "selector":{"app":"s"},"clusterIP":"None","type":"NodePort"})"));

  json quota =
      Decode(Body("v1", "ResourceQuota",
                  Meta("q") + Len(2, Entry(1, "pods", Len(1, "2")) + Len(2, "BestEffort"))));
  EXPECT_EQ(quota["spec"], json::parse(R"({"hard":{"pods":"2"},"scopes":["BestEffort"]})"));

  json pdb = Decode(Body("policy/v1", "PodDisruptionBudget",
                         Meta("p") + Len(2, IntOr(1, 1) + Len(2, Entry(1, "a", "b")))));
  EXPECT_EQ(pdb["spec"], json::parse(R"({"minAvailable":1,"selector":{"matchLabels":{"a":"b"}}})"));

  json pc = Decode(Body("scheduling.k8s.io/v1", "PriorityClass",
                        Meta("pc") + Int(2, 10) + Int(3, 0) + Len(4, "hi") + Len(5, "Never")));
  EXPECT_EQ(pc["value"], 10);
  EXPECT_FALSE(pc.contains("globalDefault"));
  EXPECT_EQ(pc["preemptionPolicy"], "Never");

  std::string backend = Len(4, Len(1, "svc1") + Len(2, Len(1, "") + Int(2, 8080)));
  std::string rule = Len(1, "foo.com") +
                     Len(2, Len(1, Len(1, Len(1, "/bar") + Len(3, "Exact") + Len(2, backend))));
  json ing =
      Decode(Body("networking.k8s.io/v1", "Ingress",
                  Meta("i") + Len(2, Len(3, rule) + Len(2, Len(1, "foo.com") + Len(2, "tls")) +
                                         Len(4, "nginx"))));
  EXPECT_EQ(ing["spec"], json::parse(R"({"ingressClassName":"nginx",
    "rules":[{"host":"foo.com","http":{"paths":[{"path":"/bar","pathType":"Exact",
      "backend":{"service":{"name":"svc1","port":{"number":8080}}}}]}}],
    "tls":[{"hosts":["foo.com"],"secretName":"tls"}]})"));

  json token =
      Decode(Body("authentication.k8s.io/v1", "TokenRequest",
                  Meta("") + Len(2, Len(1, "api") + Int(4, 3600) +
                                        Len(3, Len(1, "Pod") + Len(3, "p") + Len(4, "u1")))));
  EXPECT_EQ(token["spec"], json::parse(R"({"audiences":["api"],"expirationSeconds":3600,
    "boundObjectRef":{"kind":"Pod","name":"p","uid":"u1"}})"));
}

TEST(K8sProtobuf, MetadataSecretsAndConfigMaps) {
  std::string fields = Len(1, "kubectl") + Len(2, "Update") + Len(3, "v1") +
                       Len(4, Int(1, 1767225600)) + Len(6, "FieldsV1") +
                       Len(7, Len(1, R"({"f:data":{}})"));
  std::string meta = Len(1, Len(1, "s") + Len(8, Int(1, 1767225600)) + Int(10, 0) +
                                Entry(12, "note", "x") + Len(14, "a/b") + Len(17, fields) +
                                Len(13, Len(1, "Deployment") + Len(3, "d") + Len(4, "u") +
                                            Len(5, "apps/v1") + Int(6, 1)));
  json secret =
      Decode(Body("v1", "Secret",
                  meta + Entry(2, "k", std::string("\0\xff", 2)) + Len(3, "Opaque") + Int(5, 0)));
  EXPECT_EQ(secret["metadata"], json::parse(R"({"name":"s",
    "creationTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":0,
    "annotations":{"note":"x"},"finalizers":["a/b"],
    "ownerReferences":[{"kind":"Deployment","name":"d","uid":"u","apiVersion":"apps/v1",
                        "controller":true}],
    "managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1",
      "time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]})"));
  EXPECT_EQ(secret["data"], json::parse(R"({"k":"AP8="})"));
  EXPECT_EQ(secret["type"], "Opaque");
  EXPECT_EQ(secret["immutable"], false);

  json cm = Decode(Body("v1", "ConfigMap",
                        Meta("c") + Entry(2, "a", "b") + Entry(3, "bin", "\x01") + Int(4, 1)));
  EXPECT_EQ(cm["data"], json::parse(R"({"a":"b"})"));
  EXPECT_EQ(cm["binaryData"], json::parse(R"({"bin":"AQ=="})"));
  EXPECT_EQ(cm["immutable"], true);
}

TEST(K8sProtobuf, UnknownFieldsAreSkippedAndDeleteOptionsRead) {
  // Fields a newer client may send, of every wire type, at the top and nested.
  std::string unknown = Int(90, 7) + Len(91, "x") + Varint(92 << 3 | 1) + std::string(8, '\1') +
                        Varint(93 << 3 | 5) + std::string(4, '\2');
  std::string rule = Len(1, "get") + unknown;
  json role =
      Decode(Body("rbac.authorization.k8s.io/v1", "Role", Meta("r") + unknown + Len(2, rule)));
  EXPECT_EQ(role["rules"], json::parse(R"([{"verbs":["get"]}])"));

  json del = Decode(Body("meta.k8s.io/v1", "DeleteOptions",
                         Int(1, 0) + Len(4, "Foreground") + Len(5, "All") + Int(3, 0)));
  EXPECT_EQ(del, json::parse(R"({"apiVersion":"meta.k8s.io/v1","kind":"DeleteOptions",
    "gracePeriodSeconds":0,"propagationPolicy":"Foreground","dryRun":["All"],
    "orphanDependents":false})"));
}

TEST(K8sProtobuf, KindsWithoutASchemaAreUnimplemented) {
  absl::StatusOr<json> widget = DecodeK8sProtobuf(Body("test.dev/v1", "Widget", Meta("w")));
  EXPECT_EQ(widget.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_FALSE(K8sProtobufDecodable(Body("test.dev/v1", "Widget", Meta("w"))));
  EXPECT_TRUE(K8sProtobufDecodable(Body("apps/v1", "Deployment", Meta("w"))));
  // A body that is not an envelope goes on to be refused with 400, not 415.
  EXPECT_TRUE(K8sProtobufDecodable("{}"));
  EXPECT_THAT(Error("{}"), HasSubstr("magic"));
}

TEST(K8sProtobuf, MalformedBodiesNameWhatIsWrong) {
  const std::string role = "rbac.authorization.k8s.io/v1";
  // A verb written as a varint.
  EXPECT_THAT(
      Error(Body(role, "Role", Meta("r") + Len(2, Len(1, "get") + Int(1, 5)))),
      HasSubstr("Role rules[0].verbs: field 1 has wire type varint, want length-delimited"));
  // A length past the end of the rule.
  EXPECT_THAT(Error(Body(role, "Role", Len(2, Varint(1 << 3 | 2) + Varint(50) + "get"))),
              HasSubstr("rules[0]: field 1: length 50 at byte 0 runs past the end"));
  EXPECT_THAT(Error(Body(role, "Role", Len(2, Len(1, "g\xff")))),
              HasSubstr("rules[0].verbs: invalid UTF-8 byte 0xFF at offset 1"));
  EXPECT_THAT(Error(Body(role, "Role", Meta("r", Entry(11, "a\xc0", "b")))),
              HasSubstr("metadata.labels: invalid UTF-8"));
  EXPECT_THAT(Error(Body("policy/v1", "PodDisruptionBudget", Len(2, Len(1, Int(1, 7))))),
              HasSubstr("spec.minAvailable: IntOrString type 7: want 0 (int) or 1 (string)"));
  EXPECT_THAT(Error(Body("v1", "Secret", Len(1, Len(8, Int(1, int64_t{1} << 40))))),
              HasSubstr("metadata.creationTimestamp: Time seconds 1099511627776 is outside"));
  EXPECT_THAT(Error(Body("v1", "Secret", Len(1, Len(17, Len(7, Len(1, "{")))))),
              HasSubstr("metadata.managedFields[0].fieldsV1:"));
  EXPECT_THAT(Error(Body(role, "Role", Varint(2 << 3 | 3))), HasSubstr("wire type 3"));
  EXPECT_THAT(Error(Body(role, "Role", Int(0, 1))), HasSubstr("invalid field number 0"));
  EXPECT_THAT(Error(std::string("k8s\0\x0a\x05\x0a\x01", 8)), HasSubstr("envelope"));
}

TEST(K8sProtobuf, EveryTruncationOfARealBodyIsRefusedOrDecoded) {
  std::string tmpl = Len(1, Len(1, "")) + Len(2, Len(2, Container()));
  std::string body = Body("apps/v1", "Deployment", Meta("d") + Len(2, Len(3, tmpl)));
  ASSERT_THAT(DecodeK8sProtobuf(body), IsOk());
  for (size_t n = 0; n < body.size(); ++n) {
    absl::StatusOr<json> decoded = DecodeK8sProtobuf(body.substr(0, n));
    if (!decoded.ok()) {
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << n;
    }
  }
  // Every byte flipped: refused or decoded, never past the end.
  for (size_t i = 4; i < body.size(); ++i) {
    std::string bad = body;
    bad[i] = static_cast<char>(bad[i] ^ 0xff);
    (void)DecodeK8sProtobuf(bad);
  }
}

TEST(K8sProtobuf, SizeAndDepthAreBounded) {
  // Unknown fields are not descended, however deep.
  std::string deep = "x";
  for (int i = 0; i < 2000; ++i) deep = Len(1, deep);
  EXPECT_THAT(DecodeK8sProtobuf(Body("v1", "ConfigMap", Len(99, deep))), IsOk());
  // Two bytes per empty rule would make millions of JSON objects.
  std::string rules;
  for (size_t i = 0; i <= kMaxProtobufValues; ++i) rules += Len(2, "");
  EXPECT_THAT(Error(Body("rbac.authorization.k8s.io/v1", "Role", rules)),
              HasSubstr("more than 1048576 values"));
}

TEST(K8sProtobuf, SchemaIsWellFormed) {
  for (const pb::Message* m : pb::AllMessages()) {
    ASSERT_NE(m, nullptr);
    std::set<int> numbers;
    std::set<std::string> names;
    for (const pb::Field& f : m->fields) {
      EXPECT_TRUE(numbers.insert(f.number).second) << m->name << " field " << f.number;
      EXPECT_GT(f.number, 0) << m->name;
      const bool needs_message = f.type == pb::kMessage || f.type == pb::kMessageMap;
      EXPECT_EQ(needs_message, f.message != nullptr) << m->name << "." << f.name;
      EXPECT_EQ((f.flags & pb::kInline) != 0, std::string(f.name).empty())
          << m->name << " field " << f.number;
      if (!(f.flags & pb::kInline)) {
        EXPECT_TRUE(names.insert(f.name).second) << m->name << "." << f.name;
      }
    }
  }
}

// Through the server: decoded bodies are created, malformed ones are 400 naming the field, and
// kinds without a schema (custom resources) are 415, on which client-go retries with JSON.
class K8sProtobufHttp : public testing::ServedApiTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(ServeToAdmin()); }
};

TEST_F(K8sProtobufHttp, CreatesRefusesAndFallsBack) {
  const std::string roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles";
  const std::string type = "application/vnd.kubernetes.protobuf";
  const std::string rbac = "rbac.authorization.k8s.io/v1";
  auto post = [&](const std::string& body) {
    testing::Reply r = testing::Call(*client_, "POST", roles, json(body), type);
    return r;
  };
  testing::Reply created =
      post(Body(rbac, "Role", Meta("r") + Len(2, Len(1, "get") + Len(3, "pods"))));
  EXPECT_EQ(created.code, 201) << created.body;
  EXPECT_EQ(created.body["rules"], json::parse(R"([{"verbs":["get"],"resources":["pods"]}])"));
  EXPECT_EQ(testing::Call(*client_, "GET", roles + "/r").body["rules"], created.body["rules"]);

  testing::Reply bad = post(Body(rbac, "Role", Meta("r2") + Len(2, Int(1, 5))));
  EXPECT_EQ(bad.code, 400);
  EXPECT_EQ(bad.body["reason"], "BadRequest");
  EXPECT_THAT(bad.body.value("message", ""),
              HasSubstr("rules[0].verbs: field 1 has wire type varint, want length-delimited"));

  testing::Reply custom = post(Body("test.dev/v1", "Widget", Meta("w")));
  EXPECT_EQ(custom.code, 415);
  EXPECT_EQ(custom.body["reason"], "UnsupportedMediaType");
}

}  // namespace
}  // namespace kubetrain::localkube
