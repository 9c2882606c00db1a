// Pod volumes as the kubelet materializes them (volumes.h), the ENTRYPOINT/CMD rules of the oci
// runtime, and what the kubelet does with volumes and service variables when it runs pods with
// the process runtime.
#include "localkube/volumes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "localkube/api.h"
#include "localkube/kubelet.h"
#include "localkube/oci_runtime.h"
#include "localkube/tests/host.h"
#include "localkube/tests/kubelet_fixture.h"
#include "localkube/tests/test_objects.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::Eventually;
using ::kubetrain::testing::IsOk;
using nlohmann::json;
using testing::FileMode;
using ::testing::HasSubstr;
using testing::ReadFile;
namespace fs = std::filesystem;

json Secret(const std::string& name, const json& data) {
  json encoded = json::object();
  for (const auto& [k, v] : data.items()) encoded[k] = absl::Base64Escape(v.get<std::string>());
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"data", encoded}};
}

json ConfigMap(const std::string& name, const json& data) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"data", data}};
}

json PodWithVolumes(const json& volumes) {
  return {{"metadata",
           {{"name", "p"},
            {"namespace", "default"},
            {"uid", "u-1"},
            {"labels", {{"app", "web"}, {"tier", "a \"b\""}}}}},
          {"spec", {{"serviceAccountName", "builder"}, {"volumes", volumes}}}};
}

class Volumes : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::TestDir("volumes_test"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
  Store store_;
};

TEST_F(Volumes, SecretItemsAndModes) {
  store_.Put("/secrets", Secret("creds", {{"user", "alice"}, {"pass", "s3cret"}}));
  json pod = PodWithVolumes({{{"name", "s"},
                              {"secret",
                               {{"secretName", "creds"},
                                {"defaultMode", 0400},
                                {"items",
                                 {{{"key", "user"}, {"path", "conf/user.txt"}},
                                  {{"key", "pass"}, {"path", "pass"}, {"mode", 0440}}}}}}}});
  auto volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, nullptr, "127.1.1.1"});
  ASSERT_THAT(volumes.status(), IsOk());
  const PodVolume& v = volumes->at("s");
  EXPECT_EQ(v.host_path, dir_ + "/volumes/kubernetes.io~secret/s");
  EXPECT_TRUE(v.read_only);
  EXPECT_EQ(ReadFile(v.host_path + "/conf/user.txt"), "alice");
  EXPECT_EQ(FileMode(v.host_path + "/conf/user.txt"), 0400);
  EXPECT_EQ(ReadFile(v.host_path + "/pass"), "s3cret");
  EXPECT_EQ(FileMode(v.host_path + "/pass"), 0440);
  EXPECT_FALSE(fs::exists(v.host_path + "/user"));  // items select keys
}

TEST_F(Volumes, ConfigMapAllKeysWithDefaultModeAndBinaryData) {
  json cm = ConfigMap("cfg", {{"a.conf", "x=1\n"}, {"b", "two"}});
  cm["binaryData"] = {{"blob", absl::Base64Escape(std::string("\x00\x01\xff", 3))}};
  store_.Put("/configmaps", cm);
  json pod = PodWithVolumes({{{"name", "c"}, {"configMap", {{"name", "cfg"}}}}});
  auto volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, nullptr, ""});
  ASSERT_THAT(volumes.status(), IsOk());
  std::string d = volumes->at("c").host_path;
  EXPECT_EQ(ReadFile(d + "/a.conf"), "x=1\n");
  EXPECT_EQ(ReadFile(d + "/b"), "two");
  EXPECT_EQ(ReadFile(d + "/blob"), std::string("\x00\x01\xff", 3));
  EXPECT_EQ(FileMode(d + "/b"), 0644);  // the API's default 420
}

TEST_F(Volumes, ProjectedTokenConfigMapSecretAndDownwardApi) {
  store_.Put("/configmaps", ConfigMap("kube-root-ca.crt", {{"ca.crt", "-----BEGIN CERT"}}));
  store_.Put("/secrets", Secret("extra", {{"k", "v"}}));
  std::vector<std::string> calls;
  ServiceAccountTokenFunc token = [&](const std::string& ns, const std::string& sa,
                                      const std::string& audience,
                                      int64_t seconds) -> absl::StatusOr<std::string> {
    calls.push_back(absl::StrCat(ns, "/", sa, "/", audience, "/", seconds));
    return std::string("tok-123");
  };
  json projected = {
      {"defaultMode", 0640},
      {"sources",
       {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}},
        {{"configMap",
          {{"name", "kube-root-ca.crt"}, {"items", {{{"key", "ca.crt"}, {"path", "ca.crt"}}}}}}},
        {{"secret", {{"name", "extra"}}}},
        {{"downwardAPI",
          {{"items",
            {{{"path", "namespace"}, {"fieldRef", {{"fieldPath", "metadata.namespace"}}}},
             {{"path", "labels"}, {"fieldRef", {{"fieldPath", "metadata.labels"}}}},
             {{"path", "name"},
              {"fieldRef", {{"fieldPath", "metadata.name"}}},
              {"mode", 0600}}}}}}}}}};
  json pod = PodWithVolumes({{{"name", "kube-api-access-abcde"}, {"projected", projected}}});
  auto volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, token, ""});
  ASSERT_THAT(volumes.status(), IsOk());
  std::string d = volumes->at("kube-api-access-abcde").host_path;
  EXPECT_EQ(d, dir_ + "/volumes/kubernetes.io~projected/kube-api-access-abcde");
  EXPECT_EQ(ReadFile(d + "/token"), "tok-123");
  EXPECT_EQ(FileMode(d + "/token"), 0600);  // the token is its owner's alone, whatever defaultMode
  EXPECT_EQ(ReadFile(d + "/ca.crt"), "-----BEGIN CERT");
  EXPECT_EQ(ReadFile(d + "/k"), "v");
  EXPECT_EQ(ReadFile(d + "/namespace"), "default");
  EXPECT_EQ(ReadFile(d + "/labels"), "app=\"web\"\ntier=\"a \\\"b\\\"\"");  // fieldpath.FormatMap
  EXPECT_EQ(FileMode(d + "/name"), 0600);
  EXPECT_THAT(calls, ::testing::ElementsAre("default/builder//3607"));
}

// Tokens are their owner's alone, and no directory leading to a pod's volumes is open to other
// users of the host; the pod's runAsUser gets its token (when localkube runs as root to give it).
TEST_F(Volumes, TokensAndTheDirectoriesLeadingToThemArePrivate) {
  store_.Put("/secrets", Secret("creds", {{"pass", "s3cret"}}));
  ServiceAccountTokenFunc token = [](const std::string&, const std::string&, const std::string&,
                                     int64_t) -> absl::StatusOr<std::string> {
    return std::string("tok");
  };
  json projected = {
      {"defaultMode", 0644},
      {"sources", {{{"serviceAccountToken", {{"expirationSeconds", 3607}, {"path", "token"}}}}}}};
  json pod = PodWithVolumes({{{"name", "kube-api-access-abcde"}, {"projected", projected}},
                             {{"name", "s"}, {"secret", {{"secretName", "creds"}}}}});
  const std::string pod_dir = dir_ + "/default_p_u-1";
  auto volumes = SetUpVolumes(pod, pod_dir, VolumeContext{&store_, token, ""});
  ASSERT_THAT(volumes.status(), IsOk());
  for (const std::string& d :
       {pod_dir, pod_dir + "/volumes", pod_dir + "/volumes/kubernetes.io~projected",
        pod_dir + "/volumes/kubernetes.io~secret"}) {
    EXPECT_EQ(FileMode(d), 0700) << d;
  }
  const std::string token_path = volumes->at("kube-api-access-abcde").host_path + "/token";
  EXPECT_EQ(FileMode(token_path), 0600);
  // Every container running as one user gets the token as that user; an fsGroup may read it.
  pod["spec"]["securityContext"] = {{"runAsUser", 4321}, {"fsGroup", 2345}};
  pod["spec"]["containers"] = {{{"name", "c"}}};
  volumes = SetUpVolumes(pod, pod_dir, VolumeContext{&store_, token, ""});
  ASSERT_THAT(volumes.status(), IsOk());
  EXPECT_EQ(FileMode(token_path), 0640);
  if (geteuid() == 0) {
    struct stat st;
    ASSERT_EQ(stat(token_path.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 2345u);
  }
}

TEST_F(Volumes, DownwardApiAndEmptyDir) {
  json pod = PodWithVolumes(
      {{{"name", "info"},
        {"downwardAPI",
         {{"items",
           {{{"path", "app"}, {"fieldRef", {{"fieldPath", "metadata.labels['app']"}}}},
            {{"path", "uid"}, {"fieldRef", {{"fieldPath", "metadata.uid"}}}}}}}}},
       {{"name", "scratch"}, {"emptyDir", json::object()}}});
  auto volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, nullptr, ""});
  ASSERT_THAT(volumes.status(), IsOk());
  EXPECT_EQ(ReadFile(volumes->at("info").host_path + "/app"), "web");
  EXPECT_EQ(ReadFile(volumes->at("info").host_path + "/uid"), "u-1");
  EXPECT_TRUE(fs::is_directory(volumes->at("scratch").host_path));
  EXPECT_EQ(FileMode(volumes->at("scratch").host_path), 0777);
  EXPECT_FALSE(volumes->at("scratch").read_only);
}

TEST_F(Volumes, MissingSourcesAreFailedMountUnlessOptional) {
  json pod = PodWithVolumes({{{"name", "cfg"}, {"configMap", {{"name", "nope"}}}}});
  auto volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, nullptr, ""});
  EXPECT_EQ(volumes.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(volumes.status().message(),
            "MountVolume.SetUp failed for volume \"cfg\" : configmap \"nope\" not found");

  pod = PodWithVolumes({{{"name", "s"}, {"secret", {{"secretName", "nope"}, {"optional", true}}}}});
  volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, nullptr, ""});
  ASSERT_THAT(volumes.status(), IsOk());
  EXPECT_TRUE(fs::is_directory(volumes->at("s").host_path));

  store_.Put("/secrets", Secret("creds", {{"user", "alice"}}));
  pod = PodWithVolumes(
      {{{"name", "s"},
        {"secret", {{"secretName", "creds"}, {"items", {{{"key", "password"}, {"path", "p"}}}}}}}});
  volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, nullptr, ""});
  EXPECT_THAT(volumes.status().message(),
              HasSubstr("secret references non-existent secret key: password"));

  pod = PodWithVolumes(
      {{{"name", "s"},
        {"secret",
         {{"secretName", "creds"}, {"items", {{{"key", "user"}, {"path", "../escape"}}}}}}}});
  volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, nullptr, ""});
  EXPECT_THAT(volumes.status().message(), HasSubstr("must not contain '..'"));

  // A token the issuer refuses.
  ServiceAccountTokenFunc refuse = [](const std::string&, const std::string& sa, const std::string&,
                                      int64_t) -> absl::StatusOr<std::string> {
    return absl::NotFoundError(absl::StrCat("serviceaccounts \"", sa, "\" not found"));
  };
  pod = PodWithVolumes(
      {{{"name", "t"},
        {"projected", {{"sources", {{{"serviceAccountToken", {{"path", "token"}}}}}}}}}});
  volumes = SetUpVolumes(pod, dir_, VolumeContext{&store_, refuse, ""});
  EXPECT_EQ(volumes.status().message(),
            "MountVolume.SetUp failed for volume \"t\" : failed to fetch token: serviceaccounts "
            "\"builder\" not found");
}

TEST(OciRuntimeRules, EntrypointAndCmdAsKubernetesDefines) {
  using V = std::vector<std::string>;
  const V ep = {"/entry", "-x"}, cmd = {"serve", "--port=1"};
  EXPECT_EQ(OciRuntime::ResolveArgv(ep, cmd, {}, {}), (V{"/entry", "-x", "serve", "--port=1"}));
  EXPECT_EQ(OciRuntime::ResolveArgv(ep, cmd, {"/bin/app"}, {}), (V{"/bin/app"}));
  EXPECT_EQ(OciRuntime::ResolveArgv(ep, cmd, {}, {"other"}), (V{"/entry", "-x", "other"}));
  EXPECT_EQ(OciRuntime::ResolveArgv(ep, cmd, {"/bin/app"}, {"a"}), (V{"/bin/app", "a"}));
  EXPECT_EQ(OciRuntime::ResolveArgv({}, cmd, {}, {}), cmd);
  EXPECT_EQ(OciRuntime::ResolveArgv({}, {}, {}, {"a"}), (V{"a"}));
  EXPECT_TRUE(OciRuntime::ResolveArgv({}, {}, {}, {}).empty());
}

TEST(OciRuntimeRules, SecureJoinKeepsSymlinksInsideTheRoot) {
  std::string root = testing::TestDir("securejoin");
  fs::create_directories(root + "/run");
  fs::create_directories(root + "/var");
  fs::create_symlink("/run", root + "/var/run");     // absolute: resolved inside the root
  fs::create_symlink("../../..", root + "/run/up");  // cannot climb above the root
  EXPECT_EQ(OciRuntime::SecureJoin(root, "/var/run/secrets/x"), root + "/run/secrets/x");
  EXPECT_EQ(OciRuntime::SecureJoin(root, "/run/up/etc"), root + "/etc");
  EXPECT_EQ(OciRuntime::SecureJoin(root, "/../../etc/passwd"), root + "/etc/passwd");
  EXPECT_EQ(OciRuntime::SecureJoin(root, "/"), root);
  fs::remove_all(root);
}

// A kubelet (process runtime) over an in-memory API.
class KubeletVolumes : public testing::KubeletTest {
 protected:
  void SetUp() override {
    dir_ = testing::TestDir("kubelet_volumes");
    // The namespace's default ServiceAccount, which pod admission looks up.
    store_.Put("/serviceaccounts",
               {{"apiVersion", "v1"},
                {"kind", "ServiceAccount"},
                {"metadata", {{"name", "default"}, {"namespace", "default"}, {"uid", "sa-uid"}}}});
    KubeletOptions options;
    options.log_dir = dir_ + "/logs";
    options.hosts_file = dir_ + "/hosts";
    kubelet_ = std::make_unique<Kubelet>(options, api_.get());
    kubelet_->SetApiServer("127.0.0.1", 6443);
    api_->EnableGracefulPodDeletion();
    kubelet_->Start();
  }
  void TearDown() override {
    KubeletTest::TearDown();
    fs::remove_all(dir_);
  }
  void CreatePod(const std::string& name, json container, const json& volumes = json::array()) {
    container["name"] = "c";
    container["image"] = "busybox";
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "default"}}},
                {"spec",
                 {{"restartPolicy", "Never"},
                  {"automountServiceAccountToken", false},
                  {"containers", {container}},
                  {"volumes", volumes}}}};
    ASSERT_THAT(api_->Create(Of("pods"), pod, WriteOptions{}).status(), IsOk());
  }
  static std::string Waiting(const json& pod) {
    const json statuses = pod["status"].value("containerStatuses", json::array());
    if (statuses.empty() || !statuses[0]["state"].contains("waiting")) return "";
    return statuses[0]["state"]["waiting"].value("reason", "");
  }
};

TEST_F(KubeletVolumes, MissingConfigMapKeepsPodContainerCreatingUntilItExists) {
  CreatePod("waits", {{"command", {"true"}}},
            {{{"name", "cfg"}, {"configMap", {{"name", "late"}}}}});
  json pod = WaitPod("waits", [](const json& p) { return Waiting(p) == "ContainerCreating"; });
  ASSERT_FALSE(pod.is_null());
  EXPECT_EQ(pod["status"]["phase"], "Pending");
  // The FailedMount event names the volume and what is missing.
  int64_t revision = 0;
  bool found = false;
  for (const json& e : store_.List("/events", "default", &revision)) {
    if (e.value("reason", "") == "FailedMount") {
      found = true;
      EXPECT_EQ(e["involvedObject"]["name"], "waits");
      EXPECT_EQ(e["message"],
                "MountVolume.SetUp failed for volume \"cfg\" : configmap \"late\" not found");
    }
  }
  EXPECT_TRUE(found);
  // Retried: once the ConfigMap exists the pod runs to completion.
  ASSERT_THAT(
      api_->Create(Of("configmaps"), ConfigMap("late", {{"k", "v"}}), WriteOptions{}).status(),
      IsOk());
  pod =
      WaitPod("waits", [](const json& p) { return p["status"].value("phase", "") == "Succeeded"; });
  ASSERT_FALSE(pod.is_null());
  // The process runtime cannot mount it, but the files are there to see, for this user alone.
  std::string uid = pod["metadata"]["uid"];
  EXPECT_EQ(FileMode(dir_ + "/logs"), 0700);
  EXPECT_EQ(FileMode(absl::StrCat(dir_, "/logs/default_waits_", uid)), 0700);
  EXPECT_EQ(ReadFile(absl::StrCat(dir_, "/logs/default_waits_", uid,
                                  "/volumes/kubernetes.io~configmap/cfg/k")),
            "v");
}

TEST_F(KubeletVolumes, VolumeMountOfNoVolumeIsCreateContainerConfigError) {
  CreatePod("badmount",
            {{"command", {"true"}}, {"volumeMounts", {{{"name", "ghost"}, {"mountPath", "/x"}}}}});
  json pod =
      WaitPod("badmount", [](const json& p) { return Waiting(p) == "CreateContainerConfigError"; });
  ASSERT_FALSE(pod.is_null());
  EXPECT_EQ(pod["status"]["phase"], "Pending");
  EXPECT_THAT(pod["status"]["containerStatuses"][0]["state"]["waiting"].value("message", ""),
              HasSubstr("cannot find volume \"ghost\" to mount into container \"c\""));
  // Deleting it is not held up by the container that never started.
  ASSERT_THAT(api_->Delete(Of("pods", "badmount"), DeleteOptions{}).status(), IsOk());
  EXPECT_TRUE(
      Eventually([&] { return !api_->Get(Of("pods", "badmount")).ok(); }, absl::Seconds(10)));
}

TEST_F(KubeletVolumes, MissingSecretKeyRefIsCreateContainerConfigError) {
  CreatePod(
      "badenv",
      {{"command", {"true"}},
       {"env",
        {{{"name", "P"}, {"valueFrom", {{"secretKeyRef", {{"name", "none"}, {"key", "k"}}}}}}}}});
  json pod =
      WaitPod("badenv", [](const json& p) { return Waiting(p) == "CreateContainerConfigError"; });
  ASSERT_FALSE(pod.is_null());
  EXPECT_EQ(pod["status"]["containerStatuses"][0]["state"]["waiting"].value("message", ""),
            "secret \"none\" not found");
}

TEST_F(KubeletVolumes, KubernetesServiceVariables) {
  CreatePod("env", {{"command",
                     {"sh", "-c",
                      "echo host=$KUBERNETES_SERVICE_HOST port=$KUBERNETES_SERVICE_PORT "
                      "url=$KUBERNETES_PORT tcp=$KUBERNETES_PORT_6443_TCP_ADDR:"
                      "$KUBERNETES_PORT_6443_TCP_PORT ref=$REF"}},
                    {"env", {{{"name", "REF"}, {"value", "$(KUBERNETES_SERVICE_PORT)"}}}}});
  json pod =
      WaitPod("env", [](const json& p) { return p["status"].value("phase", "") == "Succeeded"; });
  ASSERT_FALSE(pod.is_null());
  EXPECT_THAT(Log("env"), HasSubstr("host=127.0.0.1 port=6443 url=tcp://127.0.0.1:6443 "
                                    "tcp=127.0.0.1:6443 ref=6443"));
}

}  // namespace
}  // namespace kubetrain::localkube
