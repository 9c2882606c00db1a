// Exec credential plugins (kubeconfig users[].user.exec): /bin/sh scripts as plugins, each
// counting its runs in a file, and a live localkube as the API server that accepts or rejects
// the tokens they print. localkube authenticates bearer tokens only, so client certificates from
// plugins are checked against a small loopback HTTPS server that requires a client certificate
// from a CA the test makes.
#include "operator/kube/exec_credential.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "operator/api/yaml.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/kube/testing/localkube.h"

namespace kubetrain::kube::testing {
namespace {

using ::kubetrain::testing::IsOk;

namespace fs = std::filesystem;
using nlohmann::json;

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

// A key and certificate, owned, with their PEM.
struct Identity {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key{nullptr, &EVP_PKEY_free};
  std::unique_ptr<X509, decltype(&X509_free)> cert{nullptr, &X509_free};
  std::string cert_pem;
  std::string key_pem;
};

std::string ToPem(const std::function<int(BIO*)>& write) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  if (write(bio.get()) != 1) return "";
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

bool AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A P-256 key and a certificate for it with common name `cn`, signed by `issuer` (self-signed when
// null), carrying the extensions in `extensions` (NID, value). Empty PEM on failure.
Identity Issue(const std::string& cn, const Identity* issuer,
               const std::vector<std::pair<int, const char*>>& extensions) {
  Identity id;
  id.key.reset(EVP_EC_gen("P-256"));
  id.cert.reset(X509_new());
  if (!id.key || !id.cert) return id;
  X509* cert = id.cert.get();
  X509_set_version(cert, 2);
  uint64_t serial = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial));
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert), serial >> 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, id.key.get());
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509* issuer_cert = issuer != nullptr ? issuer->cert.get() : cert;
  X509_set_issuer_name(cert, X509_get_subject_name(issuer_cert));
  for (const auto& [nid, value] : extensions) {
    if (!AddExtension(cert, issuer_cert, nid, value)) return id;
  }
  EVP_PKEY* signer = issuer != nullptr ? issuer->key.get() : id.key.get();
  if (X509_sign(cert, signer, EVP_sha256()) == 0) return id;
  id.cert_pem = ToPem([&](BIO* b) { return PEM_write_bio_X509(b, cert); });
  id.key_pem = ToPem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, id.key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  return id;
}

// A CA, the HTTPS server's certificate for 127.0.0.1 and two client certificates it signed.
struct Pki {
  Pki() {
    ca = Issue("kt-test-ca", nullptr,
               {{NID_basic_constraints, "critical,CA:TRUE"},
                {NID_key_usage, "critical,keyCertSign,cRLSign"}});
    server = Issue("kt-test-server", &ca,
                   {{NID_subject_alt_name, "IP:127.0.0.1"},
                    {NID_key_usage, "critical,digitalSignature"},
                    {NID_ext_key_usage, "serverAuth"}});
    client_a =
        Issue("kt-client-a", &ca,
              {{NID_key_usage, "critical,digitalSignature"}, {NID_ext_key_usage, "clientAuth"}});
    client_b =
        Issue("kt-client-b", &ca,
              {{NID_key_usage, "critical,digitalSignature"}, {NID_ext_key_usage, "clientAuth"}});
  }
  bool ok() const {
    return !ca.cert_pem.empty() && !server.cert_pem.empty() && !client_a.cert_pem.empty() &&
           !client_b.cert_pem.empty();
  }
  Identity ca;
  Identity server;
  Identity client_a;
  Identity client_b;
};

// An HTTPS server on 127.0.0.1 that completes a TLS handshake only with a client certificate
// signed by the test's CA, records each request's certificate subject, Authorization header and
// client port (one port per connection), and answers like an API server listing ConfigMaps (or a
// watch sending one event). Requests whose certificate's common name was Reject()ed get 401.
class MtlsServer {
 public:
  struct Request {
    std::string subject_cn;  // "" when the request came without a client certificate
    std::string authorization;
    int port = 0;
  };

  explicit MtlsServer(const Pki& pki)
      : server_([&pki](SSL_CTX& ctx) {
          X509_STORE* store = X509_STORE_new();
          X509_STORE_add_cert(store, pki.ca.cert.get());
          SSL_CTX_set_cert_store(&ctx, store);
          SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
          return SSL_CTX_use_certificate(&ctx, pki.server.cert.get()) == 1 &&
                 SSL_CTX_use_PrivateKey(&ctx, pki.server.key.get()) == 1;
        }) {
    server_.set_keep_alive_max_count(1000);
    server_.set_keep_alive_timeout(60);
    server_.Get(".*", [this](const httplib::Request& req, httplib::Response& res) {
      Request seen;
      if (req.ssl != nullptr) {
        if (X509* peer = SSL_get1_peer_certificate(req.ssl)) {
          char cn[256] = "";
          if (X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn,
                                        sizeof(cn)) > 0) {
            seen.subject_cn = cn;
          }
          X509_free(peer);
        }
      }
      seen.authorization = req.get_header_value("Authorization");
      seen.port = req.remote_port;
      bool rejected;
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(seen);
        rejected = rejected_.count(seen.subject_cn) > 0;
      }
      if (rejected) {
        res.status = 401;
        res.set_content(
            R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","message":"Unauthorized","code":401})",
            "application/json");
      } else if (req.has_param("watch")) {
        res.set_content(
            R"({"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm"}}})"
            "\n",
            "application/json");
      } else {
        res.set_content(R"({"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[]})",
                        "application/json");
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ > 0) thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~MtlsServer() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  bool ok() const { return server_.is_valid() && port_ > 0; }
  int port() const { return port_; }
  std::vector<Request> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  void Reject(const std::string& cn) {
    std::lock_guard<std::mutex> lock(mu_);
    rejected_.insert(cn);
  }

 private:
  httplib::SSLServer server_;
  int port_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Request> requests_;
  std::set<std::string> rejected_;
};

// A kubeconfig cluster entry for `server`, trusting the test CA.
json ClusterOf(const Pki& pki, const MtlsServer& server) {
  return {{"server", absl::StrCat("https://127.0.0.1:", server.port())},
          {"certificate-authority-data", absl::Base64Escape(pki.ca.cert_pem)}};
}

// Prints $DIR/cred-<run>.json, or $DIR/cred-last.json once there is none for this run.
constexpr char kFilePlugin[] = R"sh(echo run >> "$DIR/runs"
n=$(wc -l < "$DIR/runs" | tr -d ' ')
if [ -f "$DIR/cred-$n.json" ]; then cat "$DIR/cred-$n.json"; else cat "$DIR/cred-last.json"; fi
)sh";

// An ExecCredential with these status fields ("" ones left out).
std::string Credential(const std::string& token, const std::string& cert_pem,
                       const std::string& key_pem, const std::string& expiry = "") {
  json status = json::object();
  if (!token.empty()) status["token"] = token;
  if (!cert_pem.empty()) status["clientCertificateData"] = cert_pem;
  if (!key_pem.empty()) status["clientKeyData"] = key_pem;
  if (!expiry.empty()) status["expirationTimestamp"] = expiry;
  return json{{"apiVersion", kV1}, {"kind", "ExecCredential"}, {"status", status}}.dump();
}

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

  // Lists the ConfigMaps of "default" through `client` `n` times: success if every list
  // succeeds, else the first failure.
  ::testing::AssertionResult ListsSucceed(Client& client, int n) {
    for (int i = 0; i < n; ++i) {
      auto got = client.List(kConfigMaps, "default", {});
      if (!got.ok()) {
        return ::testing::AssertionFailure()
               << "list " << i + 1 << " of " << n << ": " << got.status();
      }
    }
    return ::testing::AssertionSuccess();
  }

  // A first list whose credential the server rejects (401) succeeds with the plugin's next one,
  // and `more` lists after it keep that credential: two plugin runs in all.
  void ExpectOneRerunThenKept(Client& client, int more) {
    auto got = client.List(kConfigMaps, "default", {});
    EXPECT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(Runs(), 2);
    EXPECT_TRUE(ListsSucceed(client, more));
    EXPECT_EQ(Runs(), 2);
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
  ExpectOneRerunThenKept(**client, 5);
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
  for (int i = 0; i < 10; ++i) ASSERT_THAT((*client)->List(kConfigMaps, "default", {}), IsOk());
  EXPECT_EQ(Runs(), 1);
  absl::SleepFor(absl::Seconds(3.2));  // past the token's expirationTimestamp, 3 s on
  EXPECT_THAT((*client)->List(kConfigMaps, "default", {}), IsOk());
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
       absl::StatusCode::kInvalidArgument, "status.clientCertificateData is not a PEM certificate"},
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
  // The plugin is running once it has written its pid.
  ASSERT_TRUE(
      kubetrain::testing::Eventually([&] { return fs::exists(dir_ + "/pid"); }, absl::Seconds(10)));
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

TEST_F(ExecTest, PluginsClientCertificateIsUsedForTls) {
  Pki pki;
  ASSERT_TRUE(pki.ok());
  MtlsServer server(pki);
  ASSERT_TRUE(server.ok());
  json cluster = ClusterOf(pki, server);

  // The server refuses a client without a certificate: a token-only plugin gets nowhere.
  WriteToken("some-token");
  auto no_cert = NewClient(Exec(Plugin("token-plugin", kTokenPlugin)), cluster);
  ASSERT_TRUE(no_cert.ok()) << no_cert.status();
  EXPECT_FALSE((*no_cert)->List(kConfigMaps, "default", {}).ok());
  no_cert->reset();
  std::vector<MtlsServer::Request> seen = server.requests();
  EXPECT_TRUE(seen.empty()) << seen.front().subject_cn;
  fs::remove(dir_ + "/runs");

  // A certificate alone: no Authorization header, the certificate's subject at the server; one
  // plugin run and one pooled connection serve every request, watches included.
  std::ofstream(dir_ + "/cred-last.json")
      << Credential("", pki.client_a.cert_pem, pki.client_a.key_pem);
  auto client = NewClient(Exec(Plugin("plugin", kFilePlugin)), cluster);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(ListsSucceed(**client, 5));
  int events = 0;
  absl::Status watched = (*client)->Watch(kConfigMaps, "default", {}, [&](const WatchEvent& e) {
    events += e.type == "ADDED";
    return true;
  });
  EXPECT_TRUE(watched.ok()) << watched;
  EXPECT_EQ(events, 1);
  EXPECT_EQ(Runs(), 1);
  seen = server.requests();
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& r : seen) {
    EXPECT_EQ(r.subject_cn, "kt-client-a");
    EXPECT_EQ(r.authorization, "");
  }
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(seen[i].port, seen[0].port) << "request " << i;
  client->reset();

  // A token and a certificate: both are sent.
  std::ofstream(dir_ + "/cred-last.json")
      << Credential("both-token", pki.client_b.cert_pem, pki.client_b.key_pem);
  auto both = NewClient(Exec(dir_ + "/plugin"), cluster);
  ASSERT_TRUE(both.ok()) << both.status();
  auto got = (*both)->List(kConfigMaps, "default", {});
  ASSERT_TRUE(got.ok()) << got.status();
  seen = server.requests();
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen.back().subject_cn, "kt-client-b");
  EXPECT_EQ(seen.back().authorization, "Bearer both-token");
}

TEST_F(ExecTest, ARotatedCertificateIsUsedAndOldConnectionsAreDropped) {
  Pki pki;
  ASSERT_TRUE(pki.ok());
  MtlsServer server(pki);
  ASSERT_TRUE(server.ok());
  json cluster = ClusterOf(pki, server);
  // Run 1: certificate A, expiring in 2 to 3 s; later runs: certificate B without expiry.
  absl::Time expiry = absl::Now() + absl::Seconds(3);
  std::ofstream(dir_ + "/cred-1.json")
      << Credential("", pki.client_a.cert_pem, pki.client_a.key_pem, kube::FormatTime(expiry));
  std::ofstream(dir_ + "/cred-last.json")
      << Credential("", pki.client_b.cert_pem, pki.client_b.key_pem);
  auto client = NewClient(Exec(Plugin("plugin", kFilePlugin)), cluster);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE(ListsSucceed(**client, 3));
  EXPECT_EQ(Runs(), 1);
  // Past the expiry (the refresh comes up to a tenth of the lifetime before it).
  absl::SleepFor(expiry - absl::Now() + absl::Milliseconds(100));
  ASSERT_TRUE(ListsSucceed(**client, 3));
  EXPECT_EQ(Runs(), 2);
  std::vector<MtlsServer::Request> seen = server.requests();
  ASSERT_EQ(seen.size(), 6u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].subject_cn, "kt-client-a") << "request " << i;
    EXPECT_EQ(seen[i].port, seen[0].port) << "request " << i;
  }
  for (size_t i = 3; i < 6; ++i) {
    EXPECT_EQ(seen[i].subject_cn, "kt-client-b") << "request " << i;
    // The pooled connection made with A was dropped, not reused.
    EXPECT_NE(seen[i].port, seen[0].port) << "request " << i;
    EXPECT_EQ(seen[i].port, seen[3].port) << "request " << i;
  }
}

TEST_F(ExecTest, A401RotatesTheCertificate) {
  Pki pki;
  ASSERT_TRUE(pki.ok());
  MtlsServer server(pki);
  ASSERT_TRUE(server.ok());
  server.Reject("kt-client-a");
  json cluster = ClusterOf(pki, server);
  // Certificate A never expires, but the server has revoked it; the plugin's next answer is B.
  std::ofstream(dir_ + "/cred-1.json")
      << Credential("", pki.client_a.cert_pem, pki.client_a.key_pem);
  std::ofstream(dir_ + "/cred-last.json")
      << Credential("", pki.client_b.cert_pem, pki.client_b.key_pem);
  auto client = NewClient(Exec(Plugin("plugin", kFilePlugin)), cluster);
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectOneRerunThenKept(**client, 3);
  std::vector<MtlsServer::Request> seen = server.requests();
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].subject_cn, "kt-client-a");
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(seen[i].subject_cn, "kt-client-b") << "request " << i;
    EXPECT_NE(seen[i].port, seen[0].port) << "request " << i;
  }
}

TEST_F(ExecTest, CertificateGenerationChangesOnlyWithThePair) {
  Pki pki;
  ASSERT_TRUE(pki.ok());
  std::ofstream(dir_ + "/cred-1.json")
      << Credential("t1", pki.client_a.cert_pem, pki.client_a.key_pem);
  std::ofstream(dir_ + "/cred-2.json")
      << Credential("t2", pki.client_a.cert_pem, pki.client_a.key_pem);
  std::ofstream(dir_ + "/cred-3.json") << Credential("t3", "", "");
  std::ofstream(dir_ + "/cred-last.json")
      << Credential("", pki.client_b.cert_pem, pki.client_b.key_pem);
  auto config = LoadKubeconfig(Kubeconfig(Exec(Plugin("plugin", kFilePlugin))));
  ASSERT_TRUE(config.ok()) << config.status();
  ExecCredentialProvider provider(*config);
  EXPECT_EQ(provider.cert_generation(), 0);

  auto c1 = provider.Get();
  ASSERT_TRUE(c1.ok()) << c1.status();
  EXPECT_EQ(c1->token, "t1");
  EXPECT_EQ(c1->client_cert_pem, pki.client_a.cert_pem);
  EXPECT_EQ(c1->client_key_pem, pki.client_a.key_pem);
  EXPECT_EQ(c1->cert_generation, 1);

  // A new token with the same pair keeps the generation (connections stay).
  provider.Invalidate(*c1);
  auto c2 = provider.Get();
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(c2->token, "t2");
  EXPECT_EQ(c2->cert_generation, 1);
  EXPECT_NE(c2->serial, c1->serial);
  // A stale rejection does not drop the newer answer.
  provider.Invalidate(*c1);
  ASSERT_THAT(provider.Get(), IsOk());
  EXPECT_EQ(provider.runs(), 2);

  // The pair taken away, then a new one: each is a new generation.
  provider.Invalidate(*c2);
  auto c3 = provider.Get();
  ASSERT_TRUE(c3.ok()) << c3.status();
  EXPECT_EQ(c3->token, "t3");
  EXPECT_EQ(c3->client_cert_pem, "");
  EXPECT_EQ(c3->cert_generation, 2);
  provider.Invalidate(*c3);
  auto c4 = provider.Get();
  ASSERT_TRUE(c4.ok()) << c4.status();
  EXPECT_EQ(c4->token, "");
  EXPECT_EQ(c4->client_cert_pem, pki.client_b.cert_pem);
  EXPECT_EQ(c4->cert_generation, 3);
  EXPECT_EQ(provider.cert_generation(), 3);
  EXPECT_EQ(provider.runs(), 4);
}

TEST_F(ExecTest, BadClientCertificateIsAClearError) {
  Pki pki;
  ASSERT_TRUE(pki.ok());
  const std::string& cert = pki.client_a.cert_pem;
  const std::string& key = pki.client_a.key_pem;
  std::string broken_cert = cert.substr(0, 40) + "!!!!" + cert.substr(44);
  struct Case {
    std::string credential;
    std::string says;
  };
  std::vector<Case> cases = {
      {Credential("", cert, ""), "status.clientCertificateData without status.clientKeyData"},
      {Credential("t", "", key), "status.clientKeyData without status.clientCertificateData"},
      {Credential("", "not a certificate", key),
       "status.clientCertificateData is not a PEM certificate"},
      {Credential("", broken_cert, key), "status.clientCertificateData is not a PEM certificate"},
      {Credential("", cert, "not a key"), "status.clientKeyData is not an unencrypted PEM"},
      {Credential("", key, cert), "status.clientCertificateData is not a PEM certificate"},
      {Credential("t", cert, pki.client_b.key_pem), "is not the private key of the certificate"},
  };
  for (const Case& c : cases) {
    std::ofstream(dir_ + "/cred-last.json") << c.credential;
    absl::Status s = PluginError(kFilePlugin);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says << ": " << s;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s;
    EXPECT_NE(s.message().find(absl::StrCat("exec plugin \"", dir_, "/plugin\"")),
              std::string::npos)
        << s;
  }
  // The mismatch names the certificate.
  std::ofstream(dir_ + "/cred-last.json") << Credential("", cert, pki.client_b.key_pem);
  absl::Status s = PluginError(kFilePlugin);
  EXPECT_NE(s.message().find("kt-client-a"), std::string::npos) << s;
}

}  // namespace
}  // namespace kubetrain::kube::testing
