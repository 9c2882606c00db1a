// Exec credential plugins (kubeconfig users[].user.exec): /bin/sh scripts as plugins, each
// counting its runs in a file, and a live localkube as the API server that accepts or rejects
// the tokens they print.
#include "operator/kube/exec_credential.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "operator/api/yaml.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/kube/tests/localkube_fixture.h"

namespace kubetrain::kube {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Localkube;

const Resource kConfigMaps{"", "v1", "configmaps", "ConfigMap", true};
constexpr char kV1[] = "client.authentication.k8s.io/v1";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Prints an ExecCredential with the token in $DIR/token (no expiry) after counting the run.
constexpr char kTokenPlugin[] = R"sh(echo run >> "$DIR/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$DIR/exec-info"
printf '%s' "$PLUGIN_FLAVOUR" > "$DIR/flavour"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$(cat "$DIR/token")"
)sh";

class ExecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kt-exec-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // An executable /bin/sh script in the test's folder; $DIR is that folder.
  std::string Plugin(const std::string& name, const std::string& body) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\nDIR='" << dir_ << "'\n" << body;
    chmod(path.c_str(), 0755);
    return path;
  }
  void WriteToken(const std::string& token) { std::ofstream(dir_ + "/token") << token; }
  int Runs() {
    std::string text = ReadText(dir_ + "/runs");
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  }

  void StartServer() {
    auto lk = Localkube::Start({"--token=kt-exec-test-token"});
    ASSERT_TRUE(lk.ok()) << lk.status();
    server_ = std::move(*lk);
    auto text = api::ReadFileOrStdin(server_->kubeconfig());
    ASSERT_TRUE(text.ok()) << text.status();
    auto docs = api::ParseYamlDocuments(*text);
    ASSERT_TRUE(docs.ok() && docs->size() == 1);
    base_kubeconfig_ = docs->front();
    good_token_ = base_kubeconfig_["users"][0]["user"].value("token", "");
    ASSERT_FALSE(good_token_.empty());
  }

  // localkube's kubeconfig (or a stand-in without a server) with its user's credentials replaced
  // by `exec`; written as JSON, which is YAML.
  std::string Kubeconfig(const json& exec, const json& cluster_extra = json::object()) {
    json doc = base_kubeconfig_;
    if (doc.is_null()) {
      doc = json::parse(R"({"apiVersion": "v1", "kind": "Config", "current-context": "c",
          "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
          "users": [{"name": "u", "user": {}}],
          "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]})");
    }
    doc["users"][0]["user"] = {{"exec", exec}};
    doc["clusters"][0]["cluster"].update(cluster_extra);
    std::string path = dir_ + "/kubeconfig";
    std::ofstream(path) << doc.dump(2);
    return path;
  }

  json Exec(const std::string& command) {
    return {{"apiVersion", kV1}, {"command", command}, {"interactiveMode", "Never"}};
  }

  absl::StatusOr<std::unique_ptr<Client>> NewClient(const json& exec,
                                                    const json& cluster_extra = json::object()) {
    auto config = LoadKubeconfig(Kubeconfig(exec, cluster_extra));
    if (!config.ok()) return config.status();
    return Client::Create(*config);
  }

  // A plugin's error as the provider reports it, with no server involved.
  absl::Status PluginError(const std::string& body, ExecRunOptions options = {},
                           const std::string& install_hint = "") {
    json exec = Exec(Plugin("plugin", body));
    if (!install_hint.empty()) exec["installHint"] = install_hint;
    auto config = LoadKubeconfig(Kubeconfig(exec));
    if (!config.ok()) return config.status();
    ExecCredentialProvider provider(*config, options);
    return provider.Token().status();
  }

  std::string dir_;
  json base_kubeconfig_;
  std::string good_token_;
  std::unique_ptr<Localkube> server_;
};

TEST_F(ExecTest, KubeconfigExecUserParses) {
  fs::create_directories(dir_ + "/bin");
  json exec = {{"apiVersion", kV1},
               {"command", "./bin/get-token"},
               {"args", {"--cluster", "prod"}},
               {"env", {{{"name", "AWS_PROFILE"}, {"value", "ops"}}}},
               {"installHint", "install get-token"},
               {"provideClusterInfo", true},
               {"interactiveMode", "IfAvailable"}};
  auto c = LoadKubeconfig(Kubeconfig(exec));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->exec.has_value());
  EXPECT_EQ(c->exec->command, dir_ + "/bin/get-token");  // relative to the kubeconfig's folder
  EXPECT_EQ(c->exec->args, (std::vector<std::string>{"--cluster", "prod"}));
  ASSERT_EQ(c->exec->env.size(), 1u);
  EXPECT_EQ(c->exec->env[0].first, "AWS_PROFILE");
  EXPECT_EQ(c->exec->env[0].second, "ops");
  EXPECT_EQ(c->exec->install_hint, "install get-token");
  EXPECT_TRUE(c->exec->provide_cluster_info);
  EXPECT_EQ(c->exec->interactive_mode, "IfAvailable");

  // A bare name is looked up in PATH when it runs; v1beta1 defaults interactiveMode.
  json beta = {{"apiVersion", "client.authentication.k8s.io/v1beta1"}, {"command", "aws"}};
  auto b = LoadKubeconfig(Kubeconfig(beta));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->exec->command, "aws");
  EXPECT_EQ(b->exec->interactive_mode, "IfAvailable");

  // A token of the same user wins over the plugin, as in client-go.
  json doc = json::parse(ReadText(Kubeconfig(beta)));
  doc["users"][0]["user"]["token"] = "static";
  std::ofstream(dir_ + "/kubeconfig") << doc.dump();
  auto t = LoadKubeconfig(dir_ + "/kubeconfig");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->exec.has_value());
  EXPECT_EQ(t->token, "static");
}

TEST_F(ExecTest, BadExecBlocksNameFileUserAndField) {
  struct Case {
    json exec;
    std::string field;
    std::string fix;
  };
  std::vector<Case> cases = {
      {{{"apiVersion", "client.authentication.k8s.io/v1alpha1"}, {"command", "aws"}},
       "exec.apiVersion",
       "client.authentication.k8s.io/v1beta1"},
      {{{"apiVersion", kV1}, {"interactiveMode", "Never"}}, "exec.command", "missing"},
      {{{"apiVersion", kV1}, {"command", "aws"}}, "exec.interactiveMode", "interactiveMode: Never"},
      {{{"apiVersion", kV1}, {"command", "aws"}, {"interactiveMode", "Always"}},
       "exec.interactiveMode",
       "interactiveMode: Never"},
      {{{"apiVersion", kV1}, {"command", "aws"}, {"interactiveMode", "Sometimes"}},
       "exec.interactiveMode",
       "Sometimes"},
      {{{"apiVersion", kV1}, {"command", "aws"}, {"interactiveMode", "Never"}, {"args", "x"}},
       "exec.args",
       "list"},
  };
  for (const Case& c : cases) {
    std::string path = Kubeconfig(c.exec);
    auto got = LoadKubeconfig(path);
    ASSERT_FALSE(got.ok()) << c.exec.dump();
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    std::string message(got.status().message());
    for (const std::string& part : {path, std::string("user u"), c.field, c.fix}) {
      EXPECT_NE(message.find(part), std::string::npos) << message << " lacks " << part;
    }
  }
}

TEST_F(ExecTest, ClientAuthenticatesWithThePluginsTokenAndCachesIt) {
  StartServer();
  WriteToken(good_token_);
  json exec = Exec(Plugin("plugin", kTokenPlugin));
  exec["env"] = {{{"name", "PLUGIN_FLAVOUR"}, {"value", "vanilla"}}};
  exec["provideClusterInfo"] = true;
  json extension = {{"extensions",
                     {{{"name", "client.authentication.k8s.io/exec"},
                       {"extension", {{"audience", "kubetrain-test"}}}}}}};
  auto client = NewClient(exec, extension);
  ASSERT_TRUE(client.ok()) << client.status();
  // Many threads at once: one plugin run serves them all.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        if (!(*client)->List(kConfigMaps, "default", {}).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Runs(), 1);
  EXPECT_EQ(ReadText(dir_ + "/flavour"), "vanilla");

  json info = json::parse(ReadText(dir_ + "/exec-info"), nullptr, false);
  ASSERT_TRUE(info.is_object()) << ReadText(dir_ + "/exec-info");
  EXPECT_EQ(info["apiVersion"], kV1);
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"],
            base_kubeconfig_["clusters"][0]["cluster"]["server"]);
  EXPECT_EQ(info["spec"]["cluster"]["certificate-authority-data"],
            base_kubeconfig_["clusters"][0]["cluster"]["certificate-authority-data"]);
  EXPECT_EQ(info["spec"]["cluster"]["config"]["audience"], "kubetrain-test");
}

TEST_F(ExecTest, WrongTokenIsUnauthenticatedAfterOneRetry) {
  StartServer();
  WriteToken("not-the-token");
  auto client = NewClient(Exec(Plugin("plugin", kTokenPlugin)));
  ASSERT_TRUE(client.ok()) << client.status();
  auto got = (*client)->List(kConfigMaps, "default", {});
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnauthenticated) << got.status();
  EXPECT_EQ(Runs(), 2);  // the rejected token was dropped and the plugin asked once more
}

TEST_F(ExecTest, A401RunsThePluginAgainAndTheFreshTokenWorks) {
  StartServer();
  // The first run prints a revoked token, later runs the good one.
  Plugin("plugin", absl::StrCat(R"sh(echo run >> "$DIR/runs"
if [ "$(wc -l < "$DIR/runs")" -eq 1 ]; then t=revoked; else t=')sh",
                                good_token_, R"sh('; fi
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$t"
)sh"));
  auto client = NewClient(Exec(dir_ + "/plugin"));
  ASSERT_TRUE(client.ok()) << client.status();
  auto got = (*client)->List(kConfigMaps, "default", {});
  EXPECT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Runs(), 2);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE((*client)->List(kConfigMaps, "default", {}).ok());
  EXPECT_EQ(Runs(), 2);
}

TEST_F(ExecTest, TokenIsRefreshedOnceItsExpirationTimestampPasses) {
  StartServer();
  WriteToken(good_token_);
  Plugin("plugin", R"sh(echo run >> "$DIR/runs"
exp=$(date -u -d "@$(( $(date +%s) + 3 ))" +%Y-%m-%dT%H:%M:%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}' "$(cat "$DIR/token")" "$exp"
)sh");
  auto client = NewClient(Exec(dir_ + "/plugin"));
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE((*client)->List(kConfigMaps, "default", {}).ok());
  EXPECT_EQ(Runs(), 1);
  absl::SleepFor(absl::Seconds(3.2));
  EXPECT_TRUE((*client)->List(kConfigMaps, "default", {}).ok());
  EXPECT_EQ(Runs(), 2);
}

TEST_F(ExecTest, MissingCommandNamesItAndGivesTheInstallHint) {
  json exec = Exec("kt-no-such-plugin");
  exec["installHint"] = "Install kt-no-such-plugin with: apt-get install kt-plugin";
  auto config = LoadKubeconfig(Kubeconfig(exec));
  ASSERT_TRUE(config.ok()) << config.status();
  ExecCredentialProvider provider(*config);
  auto got = provider.Token();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  std::string message(got.status().message());
  EXPECT_NE(message.find("\"kt-no-such-plugin\""), std::string::npos) << message;
  EXPECT_NE(message.find("apt-get install kt-plugin"), std::string::npos) << message;
  EXPECT_NE(message.find("user u"), std::string::npos) << message;

  // A path that does not exist says the same.
  json by_path = Exec("./plugins/get-token");
  by_path["installHint"] = "see the docs";
  auto path = LoadKubeconfig(Kubeconfig(by_path));
  ASSERT_TRUE(path.ok()) << path.status();
  ExecCredentialProvider gone(*path);
  auto g = gone.Token();
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition) << g.status();
  EXPECT_NE(g.status().message().find("see the docs"), std::string::npos) << g.status();
  EXPECT_NE(g.status().message().find(dir_ + "/plugins/get-token"), std::string::npos)
      << g.status();
}

TEST_F(ExecTest, FailingPluginReportsExitCodeAndStderrTail) {
  auto s = PluginError(R"(echo "starting" >&2
echo "error: the SSO session has expired; run aws sso login" >&2
exit 3
)");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  std::string message(s.message());
  EXPECT_NE(message.find("exit code 3"), std::string::npos) << message;
  EXPECT_NE(message.find("the SSO session has expired"), std::string::npos) << message;
  EXPECT_NE(message.find(dir_ + "/plugin"), std::string::npos) << message;
}

TEST_F(ExecTest, BadOutputIsAClearError) {
  struct Case {
    std::string body;
    absl::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases = {
      {"head -c 2000000 /dev/zero | tr '\\0' a\n", absl::StatusCode::kInvalidArgument,
       "more than 1048576 bytes"},
      {"yes\n", absl::StatusCode::kInvalidArgument, "more than 1048576 bytes"},
      {"echo not json\n", absl::StatusCode::kInvalidArgument, "not an ExecCredential"},
      {R"(echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}')"
       "\n",
       absl::StatusCode::kInvalidArgument, "expected client.authentication.k8s.io/v1"},
      {R"(echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}')"
       "\n",
       absl::StatusCode::kInvalidArgument, "neither a token nor a client certificate"},
      {R"(echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"c","clientKeyData":"k"}}')"
       "\n",
       absl::StatusCode::kUnimplemented, "only tokens"},
      {R"(echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"soon"}}')"
       "\n",
       absl::StatusCode::kInvalidArgument, "expirationTimestamp"},
  };
  for (const Case& c : cases) {
    absl::Time start = absl::Now();
    absl::Status s = PluginError(c.body);
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << c.body;
    EXPECT_EQ(s.code(), c.code) << c.body << ": " << s;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s;
    EXPECT_NE(s.message().find("exec plugin"), std::string::npos) << s;
  }
}

TEST_F(ExecTest, APluginThatHangsIsKilledAtTheTimeout) {
  absl::Time start = absl::Now();
  absl::Status s = PluginError(R"(echo $$ > "$DIR/pid"
sleep 1000
)",
                               {.timeout = absl::Milliseconds(500)});
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(took, absl::Seconds(3));
  int pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadText(dir_ + "/pid")), &pid));
  EXPECT_EQ(kill(pid, 0), -1);  // killed and reaped: not even a zombie
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(ExecTest, ShutdownStopsAPluginRunWithinTwoSeconds) {
  StartServer();
  Plugin("plugin", R"(echo $$ > "$DIR/pid.tmp" && mv "$DIR/pid.tmp" "$DIR/pid"
sleep 1000
)");
  auto client = NewClient(Exec(dir_ + "/plugin"));
  ASSERT_TRUE(client.ok()) << client.status();
  // One caller runs the plugin; the others wait for its result.
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back(
        [&, t] { results[t] = (*client)->List(kConfigMaps, "default", {}).status(); });
  }
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!fs::exists(dir_ + "/pid") && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(fs::exists(dir_ + "/pid"));
  absl::Time start = absl::Now();
  (*client)->Shutdown();
  for (auto& t : threads) t.join();
  absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(2));
  for (const absl::Status& s : results) EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  int pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadText(dir_ + "/pid")), &pid));
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace kubetrain::kube
