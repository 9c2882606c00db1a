#include "operator/kube/exec_credential.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/openssl_ptr.h"
#include "common/status.h"

extern char** environ;

namespace kubetrain::kube {
namespace {

using nlohmann::json;

constexpr char kExecInfoEnv[] = "KUBERNETES_EXEC_INFO";
constexpr size_t kStderrTail = 2048;  // bytes of the plugin's stderr kept for error messages
constexpr absl::Duration kPollInterval = absl::Milliseconds(20);
constexpr absl::Duration kMaxRefreshMargin = absl::Seconds(10);

std::string Describe(const ExecConfig& exec) {
  return absl::StrCat("exec plugin \"", exec.command, "\" of user ", exec.user, " in ",
                      exec.source);
}

// execvp's lookup, done before spawning: a name without '/' is searched in PATH (the system's
// default path when PATH is unset); the first executable regular file wins.
std::optional<std::string> FindCommand(const std::string& command) {
  if (command.find('/') != std::string::npos) return command;
  const char* env = std::getenv("PATH");
  std::string path = env != nullptr ? env : "/bin:/usr/bin";
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", command);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

absl::Status NotFound(const ExecConfig& exec, absl::string_view why) {
  std::string message = absl::StrCat(Describe(exec), ": ", why);
  if (!exec.install_hint.empty()) absl::StrAppend(&message, ". ", exec.install_hint);
  return absl::FailedPreconditionError(message);
}

// The process's environment, then the kubeconfig's env, then KUBERNETES_EXEC_INFO: a later
// entry replaces an earlier one of the same name.
std::vector<std::string> PluginEnvironment(const ExecConfig& exec, const std::string& exec_info) {
  auto overridden = [&](absl::string_view entry) {
    absl::string_view name = entry.substr(0, entry.find('='));
    if (name == kExecInfoEnv) return true;
    return std::any_of(exec.env.begin(), exec.env.end(),
                       [&](const auto& var) { return var.first == name; });
  };
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (!overridden(*e)) env.emplace_back(*e);
  }
  for (const auto& [name, value] : exec.env) env.push_back(absl::StrCat(name, "=", value));
  env.push_back(absl::StrCat(kExecInfoEnv, "=", exec_info));
  return env;
}

// Reads what `fd` has now into `out`; false at end of file or on an error other than EAGAIN.
bool ReadAvailable(int fd, std::string* out) {
  char buf[16384];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      out->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// A started plugin: its pid (also its process group) and the read ends of its stdout and stderr.
// Destruction kills the group if the plugin was not reaped, then reaps it: no zombie, no
// straggler.
class PluginProcess {
 public:
  PluginProcess(pid_t pid, int out, int err) : pid_(pid), out_(out), err_(err) {}
  ~PluginProcess() {
    if (!reaped_) {
      kill(-pid_, SIGKILL);
      int status;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (out_ >= 0) close(out_);
    if (err_ >= 0) close(err_);
  }
  PluginProcess(const PluginProcess&) = delete;
  PluginProcess& operator=(const PluginProcess&) = delete;

  // The wait status once the plugin has exited.
  std::optional<int> Poll() {
    if (!reaped_) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        status_ = status;
      }
    }
    return reaped_ ? std::optional<int>(status_) : std::nullopt;
  }

  // Moves what the pipes hold into `out` and `err`, waiting at most `wait` for data.
  void Read(absl::Duration wait, std::string* out, std::string* err) {
    pollfd fds[2];
    nfds_t n = 0;
    if (out_ >= 0) fds[n++] = {out_, POLLIN, 0};
    if (err_ >= 0) fds[n++] = {err_, POLLIN, 0};
    if (poll(fds, n, static_cast<int>(absl::ToInt64Milliseconds(wait))) <= 0) return;
    if (out_ >= 0 && !ReadAvailable(out_, out)) {
      close(out_);
      out_ = -1;
    }
    if (err_ >= 0 && !ReadAvailable(err_, err)) {
      close(err_);
      err_ = -1;
    }
  }

 private:
  const pid_t pid_;
  int out_;
  int err_;
  bool reaped_ = false;
  int status_ = 0;
};

// Starts `path` with stdin on /dev/null, stdout and stderr on pipes, in a process group of its
// own (so a timeout or Shutdown can kill whatever it started), with default signal dispositions
// and mask: the operator ignores SIGPIPE and may block signals, and neither should reach the
// plugin. posix_spawn because the operator is multi-threaded: nothing runs between fork and exec
// that could take a lock another thread holds.
absl::StatusOr<std::unique_ptr<PluginProcess>> Spawn(const ExecConfig& exec,
                                                     const std::string& path,
                                                     const std::vector<std::string>& env) {
  std::vector<std::string> args = {path};
  args.insert(args.end(), exec.args.begin(), exec.args.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat(Describe(exec), ": pipe: ", std::strerror(errno)));
  }
  if (pipe2(err, O_CLOEXEC) != 0) {
    int e = errno;
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat(Describe(exec), ": pipe: ", std::strerror(e)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors other threads opened without O_CLOEXEC (sockets, files) stay out of the plugin.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, path.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    if (rc == ENOENT || rc == ENOTDIR) return NotFound(exec, absl::StrCat(path, " does not exist"));
    if (rc == EACCES || rc == ENOEXEC) {
      return absl::FailedPreconditionError(
          absl::StrCat(Describe(exec), ": ", path, " cannot be executed: ", std::strerror(rc)));
    }
    return absl::InternalError(
        absl::StrCat(Describe(exec), ": starting ", path, ": ", std::strerror(rc)));
  }
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  fcntl(err[0], F_SETFL, fcntl(err[0], F_GETFL) | O_NONBLOCK);
  return std::make_unique<PluginProcess>(pid, out[0], err[0]);
}

// The first OpenSSL error of this thread, as text; clears the thread's error queue, which the
// next TLS call on this thread would otherwise misread.
std::string OpenSslError() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no PEM block found";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

// The plugin's PEM: the first certificate and the key parse, the key is the certificate's.
absl::Status CheckKeyPair(const std::string& who, const std::string& cert_pem,
                          const std::string& key_pem) {
  ERR_clear_error();
  BioPtr cert_bio(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  X509Ptr cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": status.clientCertificateData is not a PEM certificate (", OpenSslError(), ")"));
  }
  BioPtr key_bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  // No passphrase callback: an encrypted key fails here rather than prompting.
  pem_password_cb* no_prompt = [](char*, int, int, void*) { return 0; };
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_prompt, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": status.clientKeyData is not an unencrypted PEM private key (",
                     OpenSslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    char subject[256] = "";
    X509_NAME_oneline(X509_get_subject_name(cert.get()), subject, sizeof(subject));
    return absl::InvalidArgumentError(
        absl::StrCat(who,
                     ": status.clientKeyData is not the private key of the certificate in "
                     "status.clientCertificateData (subject ",
                     subject, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExecCredential> DecodeExecCredential(const ExecConfig& exec,
                                                    const std::string& out) {
  std::string who = Describe(exec);
  json doc = json::parse(out, nullptr, false);
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": its output is not an ExecCredential JSON object (", out.size(), " bytes)"));
  }
  std::string api_version = doc.value("apiVersion", json("")).is_string()
                                ? doc.value("apiVersion", "")
                                : std::string("(not a string)");
  std::string kind = doc.value("kind", json("")).is_string() ? doc.value("kind", "") : "";
  if (kind != "ExecCredential" || api_version != exec.api_version) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": printed apiVersion \"", api_version, "\" kind \"", kind, "\"; expected ",
        exec.api_version, " ExecCredential (the kubeconfig's exec.apiVersion)"));
  }
  const json status = doc.value("status", json());
  if (!status.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": its ExecCredential has no status"));
  }
  auto text = [&](const char* field) {
    const json v = status.value(field, json());
    return v.is_string() ? v.get<std::string>() : std::string();
  };
  ExecCredential cred;
  cred.token = text("token");
  cred.client_cert_pem = text("clientCertificateData");
  cred.client_key_pem = text("clientKeyData");
  if (cred.token.empty() && cred.client_cert_pem.empty() && cred.client_key_pem.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": returned neither a token nor a client certificate"));
  }
  RETURN_IF_ERROR(RefuseControlCharacters(cred.token, absl::StrCat(who, ": status.token")));
  if (cred.client_cert_pem.empty() != cred.client_key_pem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": returned ",
        cred.client_cert_pem.empty() ? "status.clientKeyData without status.clientCertificateData"
                                     : "status.clientCertificateData without status.clientKeyData",
        "; a client certificate needs both"));
  }
  if (!cred.client_cert_pem.empty()) {
    RETURN_IF_ERROR(CheckKeyPair(who, cred.client_cert_pem, cred.client_key_pem));
  }
  std::string expiry = text("expirationTimestamp");
  if (!expiry.empty()) {
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, expiry, &cred.expiry, &err)) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": status.expirationTimestamp \"", expiry,
                                                     "\" is not RFC 3339: ", err));
    }
  }
  return cred;
}

std::string ExecInfo(const ExecConfig& exec, const ClusterConfig& config) {
  json info = {{"apiVersion", exec.api_version},
               {"kind", "ExecCredential"},
               {"spec", {{"interactive", false}}}};
  if (exec.provide_cluster_info) {
    std::string server = exec.cluster_server;
    if (server.empty()) {
      server =
          absl::StrCat(config.scheme, "://", config.host, ":", config.port, config.path_prefix);
    }
    json cluster = {{"server", server}};
    if (!config.ca_pem.empty()) {
      cluster["certificate-authority-data"] = absl::Base64Escape(config.ca_pem);
    }
    if (config.insecure_skip_tls_verify) cluster["insecure-skip-tls-verify"] = true;
    if (!exec.cluster_config_json.empty()) {
      json extension = json::parse(exec.cluster_config_json, nullptr, false);
      if (!extension.is_discarded()) cluster["config"] = std::move(extension);
    }
    info["spec"]["cluster"] = std::move(cluster);
  }
  return info.dump();
}

absl::StatusOr<ExecCredential> RunExecPlugin(const ExecConfig& exec, const std::string& exec_info,
                                             const ExecRunOptions& options) {
  std::optional<std::string> path = FindCommand(exec.command);
  if (!path) {
    const char* env = std::getenv("PATH");
    return NotFound(exec, absl::StrCat("command not found in PATH (", env ? env : "unset", ")"));
  }
  absl::StatusOr<std::unique_ptr<PluginProcess>> started =
      Spawn(exec, *path, PluginEnvironment(exec, exec_info));
  if (!started.ok()) return started.status();
  PluginProcess& plugin = **started;
  std::string out;
  std::string err_tail;
  absl::Time deadline = absl::Now() + options.timeout;
  std::optional<int> status;
  for (;;) {
    std::string err;
    // Once the plugin has exited, what it wrote is in the pipes: take it without waiting (a
    // child it left behind may hold them open).
    plugin.Read(status ? absl::ZeroDuration() : kPollInterval, &out, &err);
    if (!err.empty()) {
      // The plugin's diagnostics (login prompts' replacements, warnings) belong to the user.
      (void)!write(STDERR_FILENO, err.data(), err.size());
      err_tail += err;
      if (err_tail.size() > kStderrTail) err_tail.erase(0, err_tail.size() - kStderrTail);
    }
    if (out.size() > options.max_output) {
      return absl::InvalidArgumentError(absl::StrCat(Describe(exec), ": printed more than ",
                                                     options.max_output,
                                                     " bytes on stdout; it was stopped"));
    }
    if (status) break;
    if (options.cancelled != nullptr && options.cancelled->load()) {
      return absl::CancelledError(
          absl::StrCat(Describe(exec), ": stopped because the client is shutting down"));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(Describe(exec), ": did not finish within ",
                                                      absl::FormatDuration(options.timeout),
                                                      "; its process group was killed"));
    }
    status = plugin.Poll();
  }
  if (WIFSIGNALED(*status)) {
    return absl::UnavailableError(
        absl::StrCat(Describe(exec), ": killed by signal ", WTERMSIG(*status),
                     "; its stderr ends: ", err_tail.empty() ? "(empty)" : err_tail));
  }
  if (WEXITSTATUS(*status) != 0) {
    return absl::UnavailableError(
        absl::StrCat(Describe(exec), ": failed with exit code ", WEXITSTATUS(*status),
                     "; its stderr ends: ", err_tail.empty() ? "(empty)" : err_tail));
  }
  return DecodeExecCredential(exec, out);
}

ExecCredentialProvider::ExecCredentialProvider(const ClusterConfig& config, ExecRunOptions options)
    : exec_(*config.exec), exec_info_(ExecInfo(*config.exec, config)), options_(options) {}

bool ExecCredentialProvider::Cancelled() const {
  return options_.cancelled != nullptr && options_.cancelled->load();
}

absl::StatusOr<ExecCredentialProvider::Credential> ExecCredentialProvider::Get() {
  std::unique_lock<std::mutex> lock(mu_);
  bool waited = false;
  for (;;) {
    if (cached_ && absl::Now() < refresh_at_) return credential_;
    // The run this caller waited for failed: its error is the answer, not a second run.
    if (waited && !last_error_.ok()) return last_error_;
    if (Cancelled()) {
      return absl::CancelledError(
          absl::StrCat(Describe(exec_), ": not run: the client is shutting down"));
    }
    if (!running_) break;
    waited = true;
    // Bounded waits: Shutdown sets the flag without notifying.
    while (running_ && !Cancelled()) {
      done_.wait_for(lock, absl::ToChronoMilliseconds(kPollInterval));
    }
  }
  running_ = true;
  ++runs_;
  lock.unlock();
  absl::StatusOr<ExecCredential> cred = RunExecPlugin(exec_, exec_info_, options_);
  absl::Time now = absl::Now();
  lock.lock();
  running_ = false;
  done_.notify_all();
  if (!cred.ok()) {
    last_error_ = cred.status();
    return last_error_;
  }
  last_error_ = absl::OkStatus();
  // As client-go does, only a changed pair retires connections: a refreshed token alone does not.
  if (cred->client_cert_pem != credential_.client_cert_pem ||
      cred->client_key_pem != credential_.client_key_pem) {
    ++credential_.cert_generation;
    credential_.client_cert_pem = std::move(cred->client_cert_pem);
    credential_.client_key_pem = std::move(cred->client_key_pem);
  }
  credential_.token = std::move(cred->token);
  ++credential_.serial;
  cached_ = true;
  if (cred->expiry == absl::InfiniteFuture()) {
    refresh_at_ = absl::InfiniteFuture();
  } else {
    absl::Duration margin =
        std::clamp((cred->expiry - now) / 10, absl::ZeroDuration(), kMaxRefreshMargin);
    refresh_at_ = cred->expiry - margin;
  }
  // A credential that is already expired is still tried once, as client-go does.
  return credential_;
}

absl::StatusOr<std::string> ExecCredentialProvider::Token() {
  absl::StatusOr<Credential> cred = Get();
  if (!cred.ok()) return cred.status();
  return std::move(cred->token);
}

void ExecCredentialProvider::Invalidate(const Credential& rejected) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_ && credential_.serial == rejected.serial) {
    cached_ = false;
    refresh_at_ = absl::InfinitePast();
  }
}

int64_t ExecCredentialProvider::cert_generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return credential_.cert_generation;
}

int64_t ExecCredentialProvider::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_;
}

}  // namespace kubetrain::kube
