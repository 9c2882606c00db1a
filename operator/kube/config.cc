#include "operator/kube/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "operator/api/yaml.h"

namespace kubetrain::kube {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Finds the entry called `name` in a kubeconfig list such as "clusters" and returns its `key`
// object ("cluster", "user", "context").
absl::StatusOr<json> Named(const json& doc, const char* list, const char* key,
                           const std::string& name, const std::string& path) {
  if (doc.contains(list) && doc[list].is_array()) {
    for (const json& entry : doc[list]) {
      if (entry.is_object() && entry.value("name", json()) == name && entry.contains(key) &&
          entry[key].is_object()) {
        return entry[key];
      }
    }
  }
  return absl::NotFoundError(absl::StrCat(path, ": no ", key, " named \"", name, "\" in ", list));
}

// obj[key] as a string ("" when absent or null); INVALID_ARGUMENT naming `where` and the key
// when it holds something else (a number, a list), which nlohmann's value() would throw on.
absl::StatusOr<std::string> Text(const json& obj, const char* key, absl::string_view where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return std::string();
  if (!obj[key].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, " must be a string"));
  }
  return obj[key].get<std::string>();
}

// A PEM from "<field>-data" (base64) or "<field>" (a path, relative to the kubeconfig's folder).
absl::StatusOr<std::string> Pem(const json& obj, const std::string& field, const fs::path& base,
                                const std::string& path) {
  ASSIGN_OR_RETURN(std::string data, Text(obj, (field + "-data").c_str(), path));
  if (!data.empty()) {
    std::string pem;
    if (!absl::Base64Unescape(data, &pem)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", field, "-data is not base64"));
    }
    return pem;
  }
  ASSIGN_OR_RETURN(std::string name, Text(obj, field.c_str(), path));
  if (!name.empty()) {
    fs::path file = name;
    if (file.is_relative()) file = base / file;
    return ReadFile(file.string());
  }
  return std::string();
}

constexpr char kExecV1[] = "client.authentication.k8s.io/v1";
constexpr char kExecV1Beta1[] = "client.authentication.k8s.io/v1beta1";
constexpr char kExecExtension[] = "client.authentication.k8s.io/exec";

// users[].user.exec, validated as client-go validates it (tools/clientcmd/validation.go), with
// one difference: kubetrain never has a terminal to give the plugin, so interactiveMode Always
// is refused here rather than on first use.
absl::StatusOr<ExecConfig> ParseExec(const json& exec, const json& cluster, const std::string& user,
                                     const fs::path& base, const std::string& path) {
  std::string where = absl::StrCat(path, ": user ", user, ": exec");
  auto bad = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", field, " ", why));
  };
  if (!exec.is_object()) return absl::InvalidArgumentError(where + " must be a mapping");
  auto text = [&](const char* field, std::string* out) -> absl::Status {
    if (!exec.contains(field) || exec[field].is_null()) return absl::OkStatus();
    if (!exec[field].is_string()) return bad(field, "must be a string");
    *out = exec[field].get<std::string>();
    return absl::OkStatus();
  };
  ExecConfig config;
  config.user = user;
  config.source = path;
  RETURN_IF_ERROR(text("apiVersion", &config.api_version));
  RETURN_IF_ERROR(text("command", &config.command));
  RETURN_IF_ERROR(text("installHint", &config.install_hint));
  RETURN_IF_ERROR(text("interactiveMode", &config.interactive_mode));
  if (config.api_version.empty()) {
    return bad("apiVersion", absl::StrCat("is missing; set ", kExecV1));
  }
  if (config.api_version != kExecV1 && config.api_version != kExecV1Beta1) {
    return bad("apiVersion", absl::StrCat("\"", config.api_version, "\" is not supported; use ",
                                          kExecV1, " or ", kExecV1Beta1));
  }
  if (config.command.empty()) return bad("command", "is missing: name the plugin to run");
  if (config.command.find('/') != std::string::npos) {
    fs::path command = config.command;
    if (command.is_relative()) config.command = (base / command).lexically_normal().string();
  }
  if (exec.contains("args") && !exec["args"].is_null()) {
    if (!exec["args"].is_array()) return bad("args", "must be a list of strings");
    for (const json& arg : exec["args"]) {
      if (!arg.is_string()) return bad("args", "must be a list of strings");
      config.args.push_back(arg.get<std::string>());
    }
  }
  if (exec.contains("env") && !exec["env"].is_null()) {
    if (!exec["env"].is_array()) return bad("env", "must be a list of {name, value}");
    for (const json& var : exec["env"]) {
      if (!var.is_object() || !var.value("name", json()).is_string() ||
          !var.value("value", json("")).is_string()) {
        return bad("env", "must be a list of {name, value} with string values");
      }
      std::string name = var["name"].get<std::string>();
      if (name.empty() || name.find('=') != std::string::npos) {
        return bad("env", absl::StrCat("has a bad variable name \"", name, "\""));
      }
      config.env.emplace_back(std::move(name), var.value("value", ""));
    }
  }
  if (exec.contains("provideClusterInfo")) {
    if (!exec["provideClusterInfo"].is_boolean())
      return bad("provideClusterInfo", "must be true or false");
    config.provide_cluster_info = exec["provideClusterInfo"].get<bool>();
  }
  // client-go defaults interactiveMode to IfAvailable for v1beta1 only; v1 must say it.
  if (config.interactive_mode.empty() && config.api_version == kExecV1Beta1) {
    config.interactive_mode = "IfAvailable";
  }
  if (config.interactive_mode.empty()) {
    return bad("interactiveMode",
               absl::StrCat("is missing (", kExecV1, " requires it); set interactiveMode: Never"));
  }
  if (config.interactive_mode == "Always") {
    return bad("interactiveMode",
               "is Always, but kubetrain runs the plugin without a terminal; set "
               "interactiveMode: Never (or IfAvailable) and make the plugin work without input");
  }
  if (config.interactive_mode != "Never" && config.interactive_mode != "IfAvailable") {
    return bad("interactiveMode", absl::StrCat("\"", config.interactive_mode,
                                               "\" is not one of Never, IfAvailable, Always"));
  }
  config.cluster_server = cluster.value("server", "");
  if (cluster.contains("extensions") && cluster["extensions"].is_array()) {
    for (const json& ext : cluster["extensions"]) {
      if (ext.is_object() && ext.value("name", json()) == kExecExtension &&
          ext.contains("extension")) {
        config.cluster_config_json = ext["extension"].dump();
      }
    }
  }
  return config;
}

}  // namespace

absl::Status ParseServerUrl(const std::string& url, ClusterConfig* config) {
  RETURN_IF_ERROR(
      RefuseControlCharacters(url, absl::StrCat("server \"", absl::CEscape(url), "\"")));
  if (url.find(' ') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("server \"", url, "\" holds a space, which no URL may: remove it"));
  }
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    config->scheme = "https";
    config->port = 443;
  } else if (absl::ConsumePrefix(&rest, "http://")) {
    config->scheme = "http";
    config->port = 80;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("server \"", url, "\" must start with https:// or http://"));
  }
  size_t slash = rest.find('/');
  absl::string_view hostport = rest.substr(0, slash);
  config->path_prefix = slash == absl::string_view::npos ? "" : std::string(rest.substr(slash));
  while (absl::EndsWith(config->path_prefix, "/")) config->path_prefix.pop_back();
  size_t colon = hostport.rfind(':');
  bool bracketed = absl::StartsWith(hostport, "[");
  if (colon != absl::string_view::npos && (!bracketed || hostport[colon - 1] == ']')) {
    if (!absl::SimpleAtoi(hostport.substr(colon + 1), &config->port)) {
      return absl::InvalidArgumentError(absl::StrCat("server \"", url, "\" has a bad port"));
    }
    hostport = hostport.substr(0, colon);
  }
  if (bracketed) hostport = hostport.substr(1, hostport.size() - 2);
  if (hostport.empty())
    return absl::InvalidArgumentError(absl::StrCat("server \"", url, "\" has no host"));
  config->host = std::string(hostport);
  return absl::OkStatus();
}

absl::StatusOr<ClusterConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(std::vector<json> docs, api::ParseYamlDocuments(text), path);
  if (docs.size() != 1 || !docs[0].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a kubeconfig"));
  }
  const json& doc = docs[0];
  ASSIGN_OR_RETURN(std::string current, Text(doc, "current-context", path));
  std::string name = context.empty() ? current : context;
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": no current-context; pass --context or set one with kubectl config "
                     "use-context"));
  }
  ASSIGN_OR_RETURN(json ctx, Named(doc, "contexts", "context", name, path));
  std::string where = absl::StrCat(path, ": context ", name);
  ASSIGN_OR_RETURN(std::string cluster_name, Text(ctx, "cluster", where));
  ASSIGN_OR_RETURN(std::string user_name, Text(ctx, "user", where));
  ASSIGN_OR_RETURN(json cluster, Named(doc, "clusters", "cluster", cluster_name, path));
  json user = json::object();
  if (ctx.contains("user")) {
    ASSIGN_OR_RETURN(user, Named(doc, "users", "user", user_name, path));
  }
  std::string cluster_where = absl::StrCat(path, ": cluster ", cluster_name);
  std::string user_where = absl::StrCat(path, ": user ", user_name);
  ClusterConfig config;
  ASSIGN_OR_RETURN(std::string server, Text(cluster, "server", cluster_where));
  RETURN_IF_ERROR(ParseServerUrl(server, &config), cluster_where);
  fs::path base = fs::path(path).parent_path();
  ASSIGN_OR_RETURN(config.ca_pem, Pem(cluster, "certificate-authority", base, cluster_where));
  if (cluster.contains("certificate-authority-data")) {
    config.ca_source =
        absl::StrCat("certificate-authority-data of cluster ", cluster_name, " in ", path);
  } else if (cluster.contains("certificate-authority")) {
    fs::path file = cluster["certificate-authority"].get<std::string>();
    config.ca_source = (file.is_relative() ? base / file : file).string();
  }
  if (cluster.contains("insecure-skip-tls-verify")) {
    if (!cluster["insecure-skip-tls-verify"].is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(cluster_where, ": insecure-skip-tls-verify must be true or false"));
    }
    config.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"].get<bool>();
  }
  ASSIGN_OR_RETURN(config.token, Text(user, "token", user_where));
  RETURN_IF_ERROR(RefuseControlCharacters(config.token, user_where + ": token"));
  ASSIGN_OR_RETURN(std::string token_file, Text(user, "tokenFile", user_where));
  if (!token_file.empty()) {
    fs::path file = token_file;
    config.token_file = (file.is_relative() ? base / file : file).string();
  }
  ASSIGN_OR_RETURN(config.client_cert_pem, Pem(user, "client-certificate", base, user_where));
  ASSIGN_OR_RETURN(config.client_key_pem, Pem(user, "client-key", base, user_where));
  if (user.contains("auth-provider")) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": user ", user_name,
        " authenticates with an auth-provider plugin, which kubetrain does not run; use an exec "
        "plugin, a token, tokenFile or client certificate"));
  }
  if (user.contains("exec")) {
    ASSIGN_OR_RETURN(ExecConfig exec, ParseExec(user["exec"], cluster, user_name, base, path));
    // As in client-go, a token, token file or client certificate of the same user wins.
    if (config.token.empty() && config.token_file.empty() && config.client_cert_pem.empty()) {
      config.exec = std::move(exec);
    }
  }
  ASSIGN_OR_RETURN(std::string ns, Text(ctx, "namespace", where));
  if (!ns.empty()) config.namespace_ = ns;
  RETURN_IF_ERROR(RefuseControlCharacters(config.namespace_, where + ": namespace"));
  config.source = absl::StrCat("kubeconfig ", path, " (context ", name, ")");
  return config;
}

absl::StatusOr<ClusterConfig> LoadInClusterConfig(const std::string& dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0') {
    return absl::FailedPreconditionError(
        "not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset; "
        "pass --kubeconfig");
  }
  ClusterConfig config;
  std::string h = host;
  RETURN_IF_ERROR(ParseServerUrl(
      absl::StrCat("https://", h.find(':') != std::string::npos ? "[" + h + "]" : h, ":", port),
      &config));
  config.token_file = dir + "/token";
  ASSIGN_OR_RETURN(std::string token, ReadFile(config.token_file), "service-account token");
  config.token = std::string(absl::StripAsciiWhitespace(token));
  RETURN_IF_ERROR(
      RefuseControlCharacters(config.token, "the service-account token in " + config.token_file));
  absl::StatusOr<std::string> ca = ReadFile(dir + "/ca.crt");
  if (ca.ok()) {
    config.ca_pem = *ca;
    config.ca_source = dir + "/ca.crt";
  }
  const char* pod_ns = std::getenv("POD_NAMESPACE");
  absl::StatusOr<std::string> ns = ReadFile(dir + "/namespace");
  if (pod_ns != nullptr && *pod_ns != '\0') {
    config.namespace_ = pod_ns;
  } else if (ns.ok()) {
    config.namespace_ = std::string(absl::StripAsciiWhitespace(*ns));
  }
  RETURN_IF_ERROR(RefuseControlCharacters(config.namespace_, pod_ns != nullptr && *pod_ns != '\0'
                                                                 ? "POD_NAMESPACE"
                                                                 : dir + "/namespace"));
  config.source = "in-cluster service account";
  return config;
}

absl::StatusOr<ClusterConfig> LoadConfig(const std::string& kubeconfig_flag,
                                         const std::string& context) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag, context);
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    std::vector<std::string> paths = absl::StrSplit(env, ':', absl::SkipEmpty());
    for (const std::string& p : paths) {
      if (fs::exists(p)) return LoadKubeconfig(p, context);
    }
  }
  if (std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) return LoadInClusterConfig();
  const char* home = std::getenv("HOME");
  std::string default_path = absl::StrCat(home ? home : "", "/.kube/config");
  if (fs::exists(default_path)) return LoadKubeconfig(default_path, context);
  return absl::FailedPreconditionError(
      "no cluster configuration: pass --kubeconfig, set KUBECONFIG, run in a pod, or create "
      "~/.kube/config");
}

TokenSource::TokenSource(std::string token, std::string token_file, absl::Duration refresh)
    : token_(std::move(token)), token_file_(std::move(token_file)), refresh_(refresh) {
  if (!token_.empty()) read_at_ = absl::Now();
}

absl::StatusOr<std::string> TokenSource::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!token_file_.empty() && absl::Now() - read_at_ >= refresh_) {
    absl::StatusOr<std::string> t = ReadFile(token_file_);
    // A failed re-read keeps the last token: it is usually still valid for a while.
    if (t.ok()) token_ = std::string(absl::StripAsciiWhitespace(*t));
    read_at_ = absl::Now();
  }
  RETURN_IF_ERROR(RefuseControlCharacters(
      token_, token_file_.empty() ? "the kubeconfig's token" : "the token in " + token_file_));
  return token_;
}

absl::Status RefuseControlCharacters(absl::string_view value, absl::string_view what) {
  for (size_t i = 0; i < value.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(value[i]);
    if (c >= 0x20 && c != 0x7f) continue;
    std::string shown = c == '\r' ? "CR (\\r)" : c == '\n' ? "LF (\\n)" : c == '\t' ? "a tab" : "";
    if (shown.empty()) shown = absl::StrFormat("byte 0x%02x", c);
    return absl::InvalidArgumentError(absl::StrCat(
        what, " holds a control character, ", shown, " at offset ", i,
        ", which would end the request's header or URL early; it is refused, not sent: remove "
        "it from ",
        what));
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::kube
