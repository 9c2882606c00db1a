// Pod validation (422 Invalid), quantity decoding (400) and Pod Security Admission (403 and
// warnings) over real HTTP, with the apiserver's wording.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/pod_security.h"
#include "localkube/pod_validation.h"
#include "localkube/server.h"
#include "localkube/tests/host.h"
#include "localkube/tests/http_client.h"
#include "localkube/tests/served_api_fixture.h"
#include "localkube/tests/test_objects.h"
#include "operator/api/render.h"
#include "operator/api/validation.h"
#include "operator/api/yaml.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using json = nlohmann::json;

using testing::IsFailure;
using testing::Reply;
constexpr char kPods[] = "/api/v1/namespaces/default/pods";

json WorkerPod(const std::string& name, json container_extra = json::object()) {
  json container = {{"name", "c"}, {"image", "kubetrain/worker:0.1.0"}};
  container.update(container_extra);
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}}},
          {"spec", {{"restartPolicy", "Never"}, {"containers", {container}}}}};
}

// The securityContext the restricted level asks of every container.
json RestrictedContainer() {
  return json::parse(R"({"securityContext":{
      "allowPrivilegeEscalation":false,"runAsNonRoot":true,
      "capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"}}})");
}

class PodAdmission : public testing::ServedApiTest {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(ServeToAdmin()); }

  Reply Call(const std::string& method, const std::string& path, const json& body = nullptr,
             const std::string& content_type = "application/json") {
    return testing::Call(*client_, method, path, body, content_type);
  }
  void Namespace(const std::string& name, const json& labels) {
    json ns = {{"metadata", {{"name", name}, {"labels", labels}}}};
    ASSERT_EQ(Call("POST", "/api/v1/namespaces", ns).code, 201);
  }
  static std::string PodsIn(const std::string& ns) { return "/api/v1/namespaces/" + ns + "/pods"; }
};

TEST(Quantity, ParsesTheApimachineryGrammar) {
  for (const char* ok : {"500m", "1Gi", "2", "1e3", "0.5", "+1", "1.", ".5", "1E-3", "0"}) {
    EXPECT_TRUE(ParseQuantity(ok).ok()) << ok;
  }
  auto wrong = ParseQuantity("lots");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(),
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
  EXPECT_FALSE(ParseQuantity("").ok());
  EXPECT_FALSE(ParseQuantity("1.5.5").ok());
  EXPECT_EQ(ParseQuantity("32MMi").status().message(), "unable to parse quantity's suffix");
  EXPECT_EQ(ParseQuantity("1e").status().message(), "unable to parse quantity's suffix");
}

TEST(Quantity, CanonicalFormsAndOrder) {
  auto str = [](const char* s) { return ParseQuantity(s)->String(); };
  EXPECT_EQ(str("500m"), "500m");
  EXPECT_EQ(str("0.5"), "500m");
  EXPECT_EQ(str("1.5"), "1500m");
  EXPECT_EQ(str("1000"), "1k");
  EXPECT_EQ(str("1e3"), "1e3");
  EXPECT_EQ(str("1Gi"), "1Gi");
  EXPECT_EQ(str("1024Mi"), "1Gi");
  EXPECT_EQ(str("1536Mi"), "1536Mi");
  EXPECT_EQ(str("0.5Gi"), "512Mi");
  EXPECT_EQ(str("512"), "512");
  EXPECT_EQ(str("0.0000000001"), "1n");
  EXPECT_EQ(str("-2"), "-2");
  auto cmp = [](const char* a, const char* b) {
    return CompareQuantities(*ParseQuantity(a), *ParseQuantity(b));
  };
  EXPECT_EQ(cmp("1", "1000m"), 0);
  EXPECT_EQ(cmp("1Gi", "1073741824"), 0);
  EXPECT_LT(cmp("500m", "1"), 0);
  EXPECT_GT(cmp("2", "1"), 0);
  EXPECT_GT(cmp("1e3", "999"), 0);
  EXPECT_LT(cmp("-1", "0"), 0);
}

TEST_F(PodAdmission, AnUnparsableQuantityMakesTheBodyUndecodable) {
  json pod = WorkerPod("w-0", {{"resources", {{"limits", {{"cpu", "lots"}}}}}});
  EXPECT_THAT(Call("POST", kPods, pod),
              IsFailure(400, "BadRequest",
                        "Pod in version \"v1\" cannot be handled as a Pod: quantities must match "
                        "the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"));
  // In a PATCH the patched object fails to decode: 422 on the `patch` field.
  ASSERT_EQ(Call("POST", kPods, WorkerPod("w-1")).code, 201);
  Reply patched = Call("PATCH", std::string(kPods) + "/w-1",
                       json::parse(R"({"spec":{"containers":[{"name":"c","image":"x",
                                     "resources":{"requests":{"memory":"1MMi"}}}]}})"),
                       "application/merge-patch+json");
  EXPECT_EQ(patched.code, 422);
  EXPECT_EQ(patched.body["details"]["causes"][0]["field"], "patch");
  EXPECT_NE(patched.body["message"].get<std::string>().find("unable to parse quantity's suffix"),
            std::string::npos);
}

TEST_F(PodAdmission, AValidPodIsCreatedWithCanonicalQuantities) {
  json pod = WorkerPod("w-0", json::parse(R"({
      "resources":{"requests":{"cpu":"500m","memory":"1Gi"},"limits":{"cpu":1.5,"memory":"2Gi",
                   "nvidia.com/gpu":"1"}},
      "ports":[{"name":"http","containerPort":8080,"protocol":"TCP"}],
      "env":[{"name":"my.env-name","value":"x"},{"name":"1_STARTS_WITH_DIGIT","value":"y"}]})"));
  pod["spec"]["initContainers"] = {{{"name", "init"}, {"image", "busybox"}}};
  Reply r = Call("POST", kPods, pod);
  ASSERT_EQ(r.code, 201) << r.body.dump();
  const json& resources = r.body["spec"]["containers"][0]["resources"];
  EXPECT_EQ(resources["limits"]["cpu"], "1500m");
  EXPECT_EQ(resources["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(resources["requests"]["memory"], "1Gi");
  EXPECT_EQ(Call("GET", std::string(kPods) + "/w-0").code, 200);
}

TEST_F(PodAdmission, MissingImageIsRequired) {
  json pod = WorkerPod("w-0");
  pod["spec"]["containers"][0].erase("image");
  Reply r = Call("POST", kPods, pod);
  ASSERT_THAT(r, IsFailure(422, "Invalid",
                           "Pod \"w-0\" is invalid: spec.containers[0].image: Required value"));
  EXPECT_EQ(r.body["details"], json::parse(R"({"name":"w-0","kind":"Pod","causes":[
      {"reason":"FieldValueRequired","message":"Required value",
       "field":"spec.containers[0].image"}]})"));
}

TEST_F(PodAdmission, ContainersAreRequired) {
  json pod = WorkerPod("w-0");
  pod["spec"]["containers"] = json::array();
  EXPECT_THAT(Call("POST", kPods, pod),
              IsFailure(422, "Invalid", "Pod \"w-0\" is invalid: spec.containers: Required value"));
}

TEST_F(PodAdmission, ContainerNamesAreUniqueLabels) {
  json pod = WorkerPod("w-0");
  pod["spec"]["containers"].push_back({{"name", "c"}, {"image", "x"}});
  pod["spec"]["containers"].push_back({{"name", "Bad_Name"}, {"image", "x"}});
  pod["spec"]["initContainers"] = {{{"name", "c"}, {"image", "x"}}};
  Reply r = Call("POST", kPods, pod);
  ASSERT_EQ(r.code, 422);
  const json& causes = r.body["details"]["causes"];
  ASSERT_EQ(causes.size(), 3u) << r.body.dump();
  EXPECT_EQ(causes[0], json::parse(R"({"reason":"FieldValueDuplicate",
      "message":"Duplicate value: \"c\"","field":"spec.containers[1].name"})"));
  EXPECT_EQ(causes[1]["field"], "spec.containers[2].name");
  EXPECT_EQ(causes[1]["message"],
            "Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower case "
            "alphanumeric characters or '-', and must start and end with an alphanumeric character "
            "(e.g. 'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')");
  EXPECT_EQ(causes[2]["field"], "spec.initContainers[0].name");
  EXPECT_EQ(causes[2]["reason"], "FieldValueDuplicate");
}

TEST_F(PodAdmission, RequestsMayNotExceedLimits) {
  json pod = WorkerPod("w-0", json::parse(R"({"resources":{"requests":{"cpu":"2","memory":"-1"},
                                                     "limits":{"cpu":"1"}}})"));
  Reply r = Call("POST", kPods, pod);
  ASSERT_THAT(r,
              IsFailure(422, "Invalid",
                        "Pod \"w-0\" is invalid: [spec.containers[0].resources.requests: Invalid "
                        "value: \"2\": must be less than or equal to cpu limit of 1, "
                        "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": "
                        "must be greater than or equal to 0]"));
  EXPECT_EQ(r.body["details"]["causes"][0], json::parse(R"({"reason":"FieldValueInvalid",
                "message":"Invalid value: \"2\": must be less than or equal to cpu limit of 1",
                "field":"spec.containers[0].resources.requests"})"));
  json gpu = WorkerPod("w-1", json::parse(R"({"resources":{"requests":{"nvidia.com/gpu":"1"}}})"));
  EXPECT_THAT(Call("POST", kPods, gpu),
              IsFailure(422, "Invalid",
                        "Pod \"w-1\" is invalid: spec.containers[0].resources.limits: Required "
                        "value: Limit must be set for non overcommitable resources"));
  json unknown = WorkerPod("w-2", json::parse(R"({"resources":{"limits":{"gpu":"1"}}})"));
  EXPECT_THAT(Call("POST", kPods, unknown),
              IsFailure(422, "Invalid",
                        "Pod \"w-2\" is invalid: spec.containers[0].resources.limits[gpu]: Invalid "
                        "value: \"gpu\": must be a standard resource for containers"));
}

TEST_F(PodAdmission, EnumsPortsAndEnvNames) {
  json pod = WorkerPod("w-0", json::parse(R"({"ports":[{"containerPort":70000,"protocol":"HTTP"}],
                                        "env":[{"name":"A=B"}]})"));
  pod["spec"]["restartPolicy"] = "Sometimes";
  Reply r = Call("POST", kPods, pod);
  ASSERT_THAT(
      r, IsFailure(
             422, "Invalid",
             "Pod \"w-0\" is invalid: [spec.containers[0].ports[0].containerPort: Invalid value: "
             "70000: must be between 1 and 65535, inclusive, spec.containers[0].ports[0].protocol: "
             "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\", "
             "spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable "
             "name must consist only of printable ASCII characters other than '=', "
             "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", "
             "\"OnFailure\", \"Never\"]"));
  EXPECT_EQ(r.body["details"]["causes"][1]["reason"], "FieldValueNotSupported");
}

TEST_F(PodAdmission, DnsConfigIsValidatedAsTheApiServerDoes) {
  json none = WorkerPod("w-0");
  none["spec"]["dnsPolicy"] = "None";
  EXPECT_THAT(Call("POST", kPods, none),
              IsFailure(422, "Invalid",
                        "Pod \"w-0\" is invalid: spec.dnsConfig: Required value: must provide "
                        "`dnsConfig` when `dnsPolicy` is None"));
  none["spec"]["dnsConfig"] = json::parse(R"({"searches":["a.example"]})");
  EXPECT_THAT(Call("POST", kPods, none),
              IsFailure(422, "Invalid",
                        "Pod \"w-0\" is invalid: spec.dnsConfig.nameservers: Required value: must "
                        "provide at least one DNS nameserver when `dnsPolicy` is None"));
  json bad = WorkerPod("w-1");
  bad["spec"]["dnsConfig"] = json::parse(R"({"nameservers":["10.0.0.1","::1","1.1.1.1","dns"],
      "searches":["ok.example.", "Bad_Search"], "options":[{"name":"ndots","value":"2"},{}]})");
  Reply r = Call("POST", kPods, bad);
  ASSERT_EQ(r.code, 422) << r.body.dump();
  std::vector<std::string> fields, messages;
  for (const json& cause : r.body["details"]["causes"]) {
    fields.push_back(cause["field"]);
    messages.push_back(cause["message"]);
  }
  EXPECT_EQ(fields,
            (std::vector<std::string>{"spec.dnsConfig.nameservers", "spec.dnsConfig.nameservers[3]",
                                      "spec.dnsConfig.searches[1]", "spec.dnsConfig.options[1]"}));
  EXPECT_EQ(messages[0],
            "Invalid value: []string{\"10.0.0.1\", \"::1\", \"1.1.1.1\", \"dns\"}: must not have "
            "more than 3 nameservers");
  EXPECT_EQ(
      messages[1],
      "Invalid value: \"dns\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)");
  EXPECT_EQ(messages[3], "Required value: must not be empty");
  json good = WorkerPod("w-2");
  good["spec"]["dnsPolicy"] = "None";
  good["spec"]["dnsConfig"] = json::parse(R"({"nameservers":["10.0.0.1"]})");
  EXPECT_EQ(Call("POST", kPods, good).code, 201);
}

TEST_F(PodAdmission, PodNamesAreSubdomains) {
  EXPECT_THAT(
      Call("POST", kPods, WorkerPod("a..b")),
      IsFailure(
          422, "Invalid",
          "Pod \"a..b\" is invalid: metadata.name: Invalid value: \"a..b\": a lowercase RFC 1123 "
          "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
          "start and end with an alphanumeric character (e.g. 'example.com', regex used for "
          "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"));
}

TEST_F(PodAdmission, UpdatesAreValidated) {
  Reply created = Call("POST", kPods, WorkerPod("w-0"));
  ASSERT_EQ(created.code, 201);
  json updated = created.body;
  updated["spec"]["containers"][0]["image"] = "";
  Reply r = Call("PUT", std::string(kPods) + "/w-0", updated);
  EXPECT_EQ(r.code, 422);
  EXPECT_EQ(r.body["details"]["causes"][0]["field"], "spec.containers[0].image");
}

TEST_F(PodAdmission, DryRunValidatesButStoresNothing) {
  json invalid = WorkerPod("w-0");
  invalid["spec"]["containers"][0].erase("image");
  EXPECT_EQ(Call("POST", std::string(kPods) + "?dryRun=All", invalid).code, 422);
  int64_t revision = store_.Revision();
  Reply r = Call("POST", std::string(kPods) + "?dryRun=All", WorkerPod("w-0"));
  ASSERT_EQ(r.code, 201);
  EXPECT_EQ(r.body["metadata"]["name"], "w-0");
  EXPECT_EQ(Call("GET", std::string(kPods) + "/w-0").code, 404);
  // Nothing was written, so no watcher (the kubelet among them) heard of a pod.
  EXPECT_EQ(store_.Revision(), revision);
  int64_t at = 0;
  EXPECT_TRUE(store_.List("/pods", "", &at).empty());
}

TEST_F(PodAdmission, RestrictedRefusesABarePod) {
  Namespace("secure", {{"pod-security.kubernetes.io/enforce", "restricted"}});
  Reply r = Call("POST", PodsIn("secure"), WorkerPod("x"));
  ASSERT_THAT(
      r, IsFailure(403, "Forbidden",
                   "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\": "
                   "allowPrivilegeEscalation != false (container \"c\" must set "
                   "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities "
                   "(container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), "
                   "runAsNonRoot != true (pod or container \"c\" must set "
                   "securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" "
                   "must set securityContext.seccompProfile.type to \"RuntimeDefault\" or "
                   "\"Localhost\")"));
  EXPECT_EQ(r.body["details"], json::parse(R"({"name":"x","kind":"pods"})"));
  EXPECT_EQ(Call("GET", PodsIn("secure") + "/x").code, 404);
  // Dry runs are admitted the same way.
  EXPECT_EQ(Call("POST", PodsIn("secure") + "?dryRun=All", WorkerPod("x")).code, 403);
}

TEST_F(PodAdmission, RestrictedAcceptsAFullSecurityContext) {
  Namespace("secure", {{"pod-security.kubernetes.io/enforce", "restricted"}});
  Reply r = Call("POST", PodsIn("secure"), WorkerPod("x", RestrictedContainer()));
  EXPECT_EQ(r.code, 201) << r.body.dump();
  EXPECT_TRUE(r.warnings.empty());
  // Pod-level runAsNonRoot and seccompProfile cover every container.
  json pod = WorkerPod("y", json::parse(R"({"securityContext":{"allowPrivilegeEscalation":false,
                                        "capabilities":{"drop":["ALL"],"add":["NET_BIND_SERVICE"]}}})"));
  pod["spec"]["securityContext"] =
      json::parse(R"({"runAsNonRoot":true,"seccompProfile":{"type":"Localhost",
                      "localhostProfile":"p.json"}})");
  pod["spec"]["volumes"] = json::parse(R"([{"name":"scratch","emptyDir":{}}])");
  EXPECT_EQ(Call("POST", PodsIn("secure"), pod).code, 201);
  // Root and host paths are not.
  json root = WorkerPod("z", RestrictedContainer());
  root["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0;
  root["spec"]["volumes"] = json::parse(R"([{"name":"data","hostPath":{"path":"/data"}}])");
  EXPECT_THAT(Call("POST", PodsIn("secure"), root),
              IsFailure(403, "Forbidden",
                        "pods \"z\" is forbidden: violates PodSecurity \"restricted:latest\": "
                        "restricted volume types (volume \"data\" uses restricted volume type "
                        "\"hostPath\"), runAsUser=0 (container \"c\" must not set runAsUser=0)"));
}

TEST_F(PodAdmission, BaselineRefusesPrivilegedAndHostPath) {
  Namespace("base", {{"pod-security.kubernetes.io/enforce", "baseline"},
                     {"pod-security.kubernetes.io/enforce-version", "v1.30"}});
  EXPECT_THAT(
      Call("POST", PodsIn("base"), WorkerPod("p", {{"securityContext", {{"privileged", true}}}})),
      IsFailure(403, "Forbidden",
                "pods \"p\" is forbidden: violates PodSecurity \"baseline:v1.30\": privileged "
                "(container \"c\" must not set securityContext.privileged=true)"));
  json host_path = WorkerPod("h");
  host_path["spec"]["volumes"] = json::parse(R"([{"name":"data","hostPath":{"path":"/data"}}])");
  host_path["spec"]["hostNetwork"] = true;
  EXPECT_THAT(Call("POST", PodsIn("base"), host_path),
              IsFailure(403, "Forbidden",
                        "pods \"h\" is forbidden: violates PodSecurity \"baseline:v1.30\": host "
                        "namespaces (hostNetwork=true), hostPath volumes (volume \"data\")"));
  // Baseline does not ask for what restricted does.
  EXPECT_EQ(Call("POST", PodsIn("base"), WorkerPod("bare")).code, 201);
}

TEST_F(PodAdmission, UnlabelledNamespacesArePrivileged) {
  json pod = WorkerPod("p", {{"securityContext", {{"privileged", true}}}});
  pod["spec"]["volumes"] = json::parse(R"([{"name":"data","hostPath":{"path":"/data"}}])");
  Reply r = Call("POST", kPods, pod);
  EXPECT_EQ(r.code, 201);
  EXPECT_TRUE(r.warnings.empty());
}

TEST_F(PodAdmission, WarnLabelAddsAWarningHeader) {
  Namespace("watched", {{"pod-security.kubernetes.io/warn", "restricted"}});
  Reply r =
      Call("POST", PodsIn("watched"), WorkerPod("x", {{"securityContext", {{"runAsUser", 0}}}}));
  ASSERT_EQ(r.code, 201);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(
      r.warnings[0],
      "299 - \"would violate PodSecurity \\\"restricted:latest\\\": "
      "allowPrivilegeEscalation != false (container \\\"c\\\" must set "
      "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities "
      "(container \\\"c\\\" must set securityContext.capabilities.drop=[\\\"ALL\\\"]), "
      "runAsNonRoot != true (pod or container \\\"c\\\" must set "
      "securityContext.runAsNonRoot=true), runAsUser=0 (container \\\"c\\\" must not set "
      "runAsUser=0), seccompProfile (pod or container \\\"c\\\" must set "
      "securityContext.seccompProfile.type to \\\"RuntimeDefault\\\" or \\\"Localhost\\\")\"");
}

TEST_F(PodAdmission, OnlySignificantUpdatesAreChecked) {
  Namespace("later", json::object());
  Reply created = Call("POST", PodsIn("later"), WorkerPod("x"));
  ASSERT_EQ(created.code, 201);
  ASSERT_EQ(Call("PATCH", "/api/v1/namespaces/later", json::parse(R"({"metadata":{"labels":{
                     "pod-security.kubernetes.io/enforce":"restricted"}}})"),
                 "application/merge-patch+json")
                .code,
            200);
  // Labels do not matter to the policy; a new image does.
  Reply labelled =
      Call("PATCH", PodsIn("later") + "/x", json::parse(R"({"metadata":{"labels":{"a":"b"}}})"),
           "application/merge-patch+json");
  EXPECT_EQ(labelled.code, 200);
  Reply image = Call("PATCH", PodsIn("later") + "/x",
                     json::parse(R"({"spec":{"containers":[{"name":"c","image":"other"}]}})"),
                     "application/strategic-merge-patch+json");
  EXPECT_EQ(image.code, 403);
  EXPECT_EQ(image.body["reason"], "Forbidden");
}

TEST(PodSecurity, BaselineChecksInThePluginsOrder) {
  json pod = json::parse(R"({"metadata":{"name":"p","annotations":{
      "container.apparmor.security.beta.kubernetes.io/c":"unconfined"}},
    "spec":{"hostPID":true,"securityContext":{"sysctls":[{"name":"kernel.msgmax","value":"1"}],
            "seLinuxOptions":{"type":"spc_t"}},
      "containers":[{"name":"c","image":"x","ports":[{"containerPort":80,"hostPort":80},
                                                     {"containerPort":443,"hostPort":443}],
        "securityContext":{"capabilities":{"add":["SYS_ADMIN"]},"procMount":"Unmasked",
                           "seccompProfile":{"type":"Unconfined"}}}]}})");
  std::vector<PodSecurityViolation> v = EvaluatePodSecurity("baseline", pod);
  EXPECT_EQ(PodSecurityDetail(v),
            "forbidden AppArmor profile (annotation must not set AppArmor profile type to "
            "\"container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"\"), non-default "
            "capabilities (container \"c\" must not include \"SYS_ADMIN\" in "
            "securityContext.capabilities.add), host namespaces (hostPID=true), hostPort "
            "(container \"c\" uses hostPorts 443, 80), procMount (container \"c\" must not set "
            "securityContext.procMount to \"Unmasked\"), seLinuxOptions (pod set forbidden "
            "securityContext.seLinuxOptions: type \"spc_t\"), seccompProfile (container \"c\" must "
            "not set securityContext.seccompProfile.type to \"Unconfined\"), forbidden sysctls "
            "(kernel.msgmax)");
  EXPECT_TRUE(EvaluatePodSecurity("privileged", pod).empty());
}

// What users deploy: every pod the operator renders from deploy/examples/*.yaml (the GPU one
// with its nvidia.com/gpu limit included) is a valid pod that Pod Security "restricted" admits.
TEST(PodSecurity, EveryExamplesPodsPassRestricted) {
  int pods = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(KUBETRAIN_SOURCE_DIR) +
                                                               "/deploy/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    absl::StatusOr<std::vector<json>> docs =
        api::ParseYamlDocuments(testing::ReadFile(entry.path().string()));
    ASSERT_TRUE(docs.ok()) << docs.status();
    for (const json& doc : *docs) {
      api::FieldErrors errors;
      const api::TrainingJob job = api::DecodeAndValidate(doc, &errors);
      ASSERT_TRUE(errors.empty()) << errors.front().ToString();
      const api::ClusterDnsAddresses addresses;
      for (const api::Task& task : api::Tasks(job, addresses)) {
        json pod = api::BuildPod(job, task.type, task.index, addresses);
        EXPECT_THAT(CheckPodQuantities(&pod), IsOk()) << task.name;
        EXPECT_TRUE(ValidatePod(pod).empty()) << task.name << ": " << ValidatePod(pod)[0].message;
        EXPECT_EQ(PodSecurityDetail(EvaluatePodSecurity("restricted", pod)), "") << task.name;
        ++pods;
      }
    }
  }
  EXPECT_GT(pods, 0);
}

}  // namespace
}  // namespace kubetrain::localkube
