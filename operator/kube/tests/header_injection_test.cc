// Credentials and URL parts that would inject into a request: a bearer token holding CR LF ends
// the Authorization header and starts one of its own ("Impersonate-User: system:admin"). Each
// source is refused with an error naming it, and nothing reaches the server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/scoped_env.h"
#include "common/testing/status_matchers.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/kube/exec_credential.h"

namespace kubetrain::kube {
namespace {

namespace fs = std::filesystem;
using ::kubetrain::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const Resource kConfigMaps{"", "v1", "configmaps", "ConfigMap", true};

std::string WriteScratch(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A plain-HTTP server on loopback that answers every GET with an empty list and keeps each
// request's headers.
class RecordingServer {
 public:
  RecordingServer() {
    server_.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      headers_.push_back(req.headers);
      res.set_content(R"({"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[]})",
                      "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() is a no-op until the server runs: a test that sends nothing must not outrun it.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~RecordingServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  std::vector<httplib::Headers> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return headers_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<httplib::Headers> headers_;
};

std::string Kubeconfig(const std::string& server, const std::string& user_yaml,
                       const std::string& ns = "default") {
  return absl::StrCat(R"(apiVersion: v1
kind: Config
current-context: c
clusters:
- name: k
  cluster: {server: ")",
                      server, R"("}
users:
- name: u
  user: )",
                      user_yaml, R"(
contexts:
- name: c
  context: {cluster: k, user: u, namespace: ")",
                      ns, R"("}
)");
}

TEST(HeaderInjection, KubeconfigTokenWithCrLfIsRefusedNamingFileAndUser) {
  std::string path =
      WriteScratch("inject-token.yaml",
                   Kubeconfig("http://127.0.0.1:1", R"({token: "good\r\nX-Injected: yes"})"));
  auto c = LoadKubeconfig(path);
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr(path + ": user u: token holds a control character, CR")));
}

TEST(HeaderInjection, TokenFileWithCrLfSendsNothingAndNamesTheFile) {
  RecordingServer server;
  std::string token_file =
      WriteScratch("inject-token-file", "good\r\nImpersonate-User: system:admin\n");
  std::string path =
      WriteScratch("inject-token-file.yaml",
                   Kubeconfig(server.url(), absl::StrCat("{tokenFile: ", token_file, "}")));
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  auto client = Client::Create(*config);
  ASSERT_TRUE(client.ok()) << client.status();
  auto got = (*client)->List(kConfigMaps, "default", {});
  EXPECT_THAT(got,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the token in " + token_file + " holds a control character, CR")));
  EXPECT_TRUE(server.requests().empty());
}

TEST(HeaderInjection, AStaticTokenThatBypassedTheLoaderIsStillNotSent) {
  RecordingServer server;
  ClusterConfig config;
  ASSERT_TRUE(ParseServerUrl(server.url(), &config).ok());
  config.token = "good\nX-Injected: yes";
  auto client = Client::Create(config);
  ASSERT_TRUE(client.ok()) << client.status();
  auto got = (*client)->List(kConfigMaps, "default", {});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_NE(got.status().message().find("LF"), std::string::npos) << got.status();
  EXPECT_TRUE(server.requests().empty());
}

TEST(HeaderInjection, AGoodTokenIsSentAsOneHeader) {
  RecordingServer server;
  std::string path = WriteScratch("good-token.yaml", Kubeconfig(server.url(), "{token: good}"));
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  auto client = Client::Create(*config);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->List(kConfigMaps, "default", {}).ok());
  auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].count("Authorization"), 1u);
  EXPECT_EQ(requests[0].find("Authorization")->second, "Bearer good");
  EXPECT_EQ(requests[0].count("X-Injected"), 0u);
}

TEST(HeaderInjection, ExecPluginTokenWithCrLfIsRefusedNamingThePlugin) {
  ExecConfig exec;
  exec.api_version = "client.authentication.k8s.io/v1";
  exec.command = "/usr/local/bin/get-token";
  exec.user = "u";
  exec.source = "/home/me/.kube/config";
  auto cred = DecodeExecCredential(
      exec, R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",)"
            R"("status":{"token":"good\r\nImpersonate-User: system:admin"}})");
  EXPECT_THAT(cred, StatusIs(absl::StatusCode::kInvalidArgument,
                             AllOf(HasSubstr("status.token holds a control character, CR"),
                                   HasSubstr("get-token"))));
}

TEST(HeaderInjection, ServerUrlAndNamespaceWithControlCharactersAreRefused) {
  ClusterConfig c;
  absl::Status url = ParseServerUrl("https://api.example\r\nX-Injected: yes:6443", &c);
  EXPECT_EQ(url.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(url.message().find("holds a control character, CR"), std::string::npos) << url;
  EXPECT_EQ(ParseServerUrl("https://api example:6443", &c).code(),
            absl::StatusCode::kInvalidArgument);

  std::string path = WriteScratch("inject-ns.yaml", Kubeconfig("http://127.0.0.1:1", "{token: t}",
                                                               "team\\r\\nX-Injected: yes"));
  auto ns = LoadKubeconfig(path);
  EXPECT_THAT(ns, StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr(path + ": context c: namespace holds a control character")));
}

TEST(HeaderInjection, InClusterTokenWithCrLfIsRefused) {
  std::string dir = ::testing::TempDir() + "/inject-sa";
  fs::create_directories(dir);
  WriteScratch("inject-sa/token", "good\r\nImpersonate-User: system:admin\n");
  absl::StatusOr<ClusterConfig> c;
  {
    ::kubetrain::testing::ScopedEnv env(
        {{"KUBERNETES_SERVICE_HOST", "127.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}});
    c = LoadInClusterConfig(dir);
  }
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("the service-account token in " + dir + "/token")));
}

TEST(Kubeconfig, FieldsOfTheWrongTypeAreErrorsNotExceptions) {
  for (const char* user : {"{token: [1, 2]}", "{tokenFile: 7}", "{client-key-data: {}}"}) {
    std::string path = WriteScratch("wrong-type.yaml", Kubeconfig("http://127.0.0.1:1", user));
    auto c = LoadKubeconfig(path);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << user << ": " << c.status();
    EXPECT_NE(c.status().message().find("must be a string"), std::string::npos) << c.status();
  }
  std::string path = WriteScratch("wrong-type2.yaml",
                                  "apiVersion: v1\ncurrent-context: 3\n"
                                  "contexts: [1, {name: 3, context: {cluster: [x]}}]\n");
  auto c = LoadKubeconfig(path);
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace kubetrain::kube
