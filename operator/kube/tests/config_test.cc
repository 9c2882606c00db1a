#include "operator/kube/config.h"
#include "common/testing/scoped_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace kubetrain::kube {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

constexpr char kKubeconfig[] = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443/prefix/
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
- name: plain
  cluster:
    server: http://[::1]:8080
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: s3cret
- name: robot
  user:
    tokenFile: robot-token
contexts:
- name: dev
  context: {cluster: local, user: admin, namespace: team-a}
- name: bot
  context: {cluster: plain, user: robot}
)";

TEST(Kubeconfig, CurrentContextClusterUserAndNamespace) {
  auto c = LoadKubeconfig(Write("kc1", kKubeconfig));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->scheme, "https");
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 6443);
  EXPECT_EQ(c->path_prefix, "/prefix");
  EXPECT_EQ(c->ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(c->token, "s3cret");
  EXPECT_EQ(c->namespace_, "team-a");
  EXPECT_FALSE(c->insecure_skip_tls_verify);
}

TEST(Kubeconfig, NamedContextWithRelativeTokenFile) {
  std::string path = Write("kc2", kKubeconfig);
  auto c = LoadKubeconfig(path, "bot");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->scheme, "http");
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 8080);
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->token_file,
            (std::filesystem::path(::testing::TempDir()) / "robot-token").lexically_normal());
  EXPECT_EQ(c->namespace_, "default");
}

TEST(Kubeconfig, ErrorsNameFileAndMissingPiece) {
  std::string path = Write("kc3", kKubeconfig);
  auto c = LoadKubeconfig(path, "prod");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), path + ": no context named \"prod\" in contexts");
  auto missing = LoadKubeconfig("/nonexistent/kubeconfig");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  std::string plugin = Write("kc4", R"(current-context: x
clusters: [{name: c, cluster: {server: "https://a:1"}}]
users: [{name: u, user: {auth-provider: {name: oidc}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  auto p = LoadKubeconfig(plugin);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(p.status().message().find("auth-provider"), std::string::npos) << p.status();
  // An exec plugin is run (operator/kube/exec_credential.h); a malformed one is named.
  std::string exec = Write("kc5", R"(current-context: x
clusters: [{name: c, cluster: {server: "https://a:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws,
                                interactiveMode: Never}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  auto e = LoadKubeconfig(exec);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(e->exec.has_value());
  EXPECT_EQ(e->exec->command, "aws");
  std::string bad = Write("kc6", R"(current-context: x
clusters: [{name: c, cluster: {server: "https://a:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  auto b = LoadKubeconfig(bad);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find(bad + ": user u: exec.interactiveMode"), std::string::npos)
      << b.status();
}

TEST(InCluster, ReadsServiceAccountFilesAndEnv) {
  std::string dir = ::testing::TempDir() + "/sa";
  std::filesystem::create_directories(dir);
  Write("sa/token", "tok-1\n");
  Write("sa/namespace", "training\n");
  Write("sa/ca.crt", "CA");
  absl::StatusOr<ClusterConfig> c;
  {
    ::kubetrain::testing::ScopedEnv env(
        {{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}});
    c = LoadInClusterConfig(dir);
  }
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "10.0.0.1");
  EXPECT_EQ(c->port, 443);
  EXPECT_EQ(c->token, "tok-1");
  EXPECT_EQ(c->token_file, dir + "/token");
  EXPECT_EQ(c->namespace_, "training");
  EXPECT_EQ(c->ca_pem, "CA");
  auto outside = LoadInClusterConfig(dir);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TokenSource, RereadsTheFileAfterRefresh) {
  std::string path = Write("token", "one\n");
  TokenSource tokens("", path, absl::Milliseconds(50));
  EXPECT_EQ(tokens.Token().value_or(""), "one");
  Write("token", "two\n");
  EXPECT_EQ(tokens.Token().value_or(""), "one");  // not yet
  absl::SleepFor(absl::Milliseconds(60));         // past the 50 ms refresh period
  EXPECT_EQ(tokens.Token().value_or(""), "two");
}

TEST(ServerUrl, RejectsOtherSchemes) {
  ClusterConfig c;
  EXPECT_EQ(ParseServerUrl("ftp://x", &c).message(),
            "server \"ftp://x\" must start with https:// or http://");
}

}  // namespace
}  // namespace kubetrain::kube
