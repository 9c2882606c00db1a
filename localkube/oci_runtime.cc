#include "localkube/oci_runtime.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "localkube/json_fields.h"
#include "localkube/pod_sandbox.h"

extern char** environ;

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr char kNamePrefix[] = "localkube-";

std::string ShellQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

// The last line of buildah's output that says something (its error, or the mount point).
std::string LastLine(const std::string& output) {
  std::vector<std::string> lines = absl::StrSplit(output, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : std::string(absl::StripAsciiWhitespace(lines.back()));
}

struct Account {
  int64_t uid = 0, gid = 0;
  std::string home = "/";
};

// Looks `user` (a name or a number) up in the image's /etc/passwd.
std::optional<Account> LookUpUser(const std::string& root, const std::string& user) {
  std::ifstream in(root + "/etc/passwd");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ':');
    if (f.size() < 7) continue;
    if (f[0] == user || f[2] == user) {
      Account a;
      if (!absl::SimpleAtoi(f[2], &a.uid) || !absl::SimpleAtoi(f[3], &a.gid)) continue;
      a.home = f[5].empty() ? "/" : f[5];
      return a;
    }
  }
  return std::nullopt;
}

std::optional<int64_t> LookUpGroup(const std::string& root, const std::string& group) {
  int64_t gid;
  if (absl::SimpleAtoi(group, &gid)) return gid;
  std::ifstream in(root + "/etc/group");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ':');
    if (f.size() >= 3 && f[0] == group && absl::SimpleAtoi(f[2], &gid)) return gid;
  }
  return std::nullopt;
}

// Makes `target` (inside the container's root) a mount point like `source`: a directory for a
// directory, an empty file for a file.
void MakeMountPoint(const std::string& source, const std::string& target) {
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    fs::create_directories(target, ec);
  } else {
    fs::create_directories(fs::path(target).parent_path(), ec);
    if (!fs::exists(target, ec)) std::ofstream(target).flush();
  }
}

// The launcher of a container in the host's network: in a private mount namespace it mounts
// /proc, /dev, /etc/resolv.conf, the pod's /etc/hosts and the volumes into `root`, then becomes
// the program, in `root`, as uid and gid.
ProcessOptions HostLauncher(const std::string& root, const std::string& wd, int64_t uid,
                            int64_t gid, const std::vector<std::string>& argv,
                            const std::vector<ContainerMount>& mounts,
                            const std::string& etc_hosts) {
  std::vector<std::string> lines = {"set -e"};
  auto bind = [&](const std::string& source, const std::string& container_path, bool ro) {
    std::string target = OciRuntime::SecureJoin(root, container_path);
    MakeMountPoint(source, target);
    lines.push_back(absl::StrCat("/bin/mount --rbind ", ro ? "-o ro " : "", ShellQuote(source), " ",
                                 ShellQuote(target)));
  };
  std::error_code ec;
  std::string proc = OciRuntime::SecureJoin(root, "/proc");
  fs::create_directories(proc, ec);
  lines.push_back(absl::StrCat("/bin/mount -t proc proc ", ShellQuote(proc)));
  bind("/dev", "/dev", false);
  if (fs::exists("/etc/resolv.conf")) bind("/etc/resolv.conf", "/etc/resolv.conf", true);
  if (!etc_hosts.empty()) bind(etc_hosts, "/etc/hosts", true);
  for (const ContainerMount& m : mounts) bind(m.host_path, m.container_path, m.read_only);
  std::vector<std::string> exec = {"exec",
                                   "/usr/bin/unshare",
                                   ShellQuote("--root=" + root),
                                   ShellQuote("--wd=" + wd),
                                   absl::StrCat("--setgid=", gid),
                                   absl::StrCat("--setuid=", uid),
                                   "--"};
  for (const std::string& a : argv) exec.push_back(ShellQuote(a));
  lines.push_back(absl::StrJoin(exec, " "));
  ProcessOptions spec;
  spec.argv = {"/usr/bin/unshare", "--mount", "--propagation",           "private", "--",
               "/bin/sh",          "-c",      absl::StrJoin(lines, "\n")};
  return spec;
}

// A running container: the launcher process (which becomes the program) and the working
// container it runs in.
class OciContainer : public RunningContainer {
 public:
  OciContainer(OciRuntime* runtime, std::string name, std::string id,
               std::unique_ptr<ContainerProcess> process)
      : runtime_(runtime),
        name_(std::move(name)),
        id_(std::move(id)),
        process_(std::move(process)) {}
  ~OciContainer() override {
    process_.reset();  // SIGKILLs the group and reaps it
    if (!removed_) runtime_->Remove(name_);
  }
  std::string id() const override { return id_; }
  bool Poll(int* exit_code) override {
    if (!process_->Poll(exit_code)) return false;
    if (!removed_) {
      runtime_->Remove(name_);
      removed_ = true;
    }
    return true;
  }
  void Signal(int sig) override { process_->Signal(sig); }
  bool Alive() const override { return process_->Alive(); }

 private:
  OciRuntime* runtime_;
  std::string name_, id_;
  std::unique_ptr<ContainerProcess> process_;
  bool removed_ = false;
};

}  // namespace

OciRuntime::~OciRuntime() { Shutdown(absl::Now() + absl::Seconds(5)); }

absl::Status OciRuntime::Usable(const OciRuntimeOptions& options) {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "the oci runtime needs root (buildah's storage and mount namespaces); run localkube as "
        "root or use --runtime=process");
  }
  OciRuntime probe(options);
  absl::StatusOr<ToolResult> r = probe.Buildah({"--version"}, absl::Seconds(10));
  if (!r.ok() || r->exit_code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "buildah (\"", options.buildah,
        "\") does not run: ", r.ok() ? LastLine(r->output) : std::string(r.status().message()),
        "; install buildah or use --runtime=process"));
  }
  return absl::OkStatus();
}

absl::StatusOr<OciRuntime::ToolResult> OciRuntime::Buildah(const std::vector<std::string>& args,
                                                           absl::Duration timeout) const {
  ProcessOptions spec;
  spec.argv = {options_.buildah};
  spec.argv.insert(spec.argv.end(), options_.global_args.begin(), options_.global_args.end());
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(spec);
  if (!process.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot run ", options_.buildah, ": ", process.status().message(),
                     " (install buildah, or use --runtime=process)"));
  }
  ToolResult result;
  absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    (*process)->ReadOutput(&result.output);
    if (std::optional<int> code = (*process)->Poll()) {
      (*process)->ReadOutput(&result.output);
      result.exit_code = *code;
      return result;
    }
    if (absl::Now() >= deadline) {
      (*process)->Signal(SIGKILL);
      return absl::DeadlineExceededError(absl::StrCat("buildah ", absl::StrJoin(args, " "),
                                                      " did not finish within ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void OciRuntime::Prepare() {
  absl::StatusOr<ToolResult> r =
      Buildah({"containers", "--noheading", "--format", "{{.ContainerName}}"}, absl::Seconds(20));
  if (!r.ok() || r->exit_code != 0) return;
  std::vector<std::string> stale;
  for (absl::string_view line : absl::StrSplit(r->output, '\n', absl::SkipWhitespace())) {
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, kNamePrefix)) continue;
    int pid;
    if (!absl::SimpleAtoi(line.substr(0, line.find('-')), &pid) || pid <= 0) continue;
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    stale.push_back(absl::StrCat(kNamePrefix, line));
  }
  if (stale.empty()) return;
  std::vector<std::string> args = {"rm"};
  args.insert(args.end(), stale.begin(), stale.end());
  (void)Buildah(args, absl::Seconds(30));
  log::Info("Removed working containers of exited localkube instances",
            {{"count", static_cast<int64_t>(stale.size())}});
}

void OciRuntime::Remove(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_ || !live_.count(name)) return;
  }
  absl::StatusOr<ToolResult> r = Buildah({"rm", name}, absl::Seconds(30));
  if (!r.ok() || r->exit_code != 0) {
    log::Warn("Could not remove a working container",
              {{"container", name},
               {"error", r.ok() ? LastLine(r->output) : std::string(r.status().message())}});
    return;  // left for Shutdown
  }
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(name);
}

void OciRuntime::Shutdown(absl::Time deadline) {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    names.assign(live_.begin(), live_.end());
    live_.clear();
  }
  if (names.empty()) return;
  std::vector<std::string> args = {"rm"};
  args.insert(args.end(), names.begin(), names.end());
  absl::StatusOr<ToolResult> r =
      Buildah(args, std::max(deadline - absl::Now(), absl::Milliseconds(100)));
  if (!r.ok() || r->exit_code != 0) {
    log::Warn(
        "Working containers may be left behind (the next localkube with --runtime=oci "
        "removes them)",
        {{"containers", absl::StrJoin(names, " ")},
         {"error", r.ok() ? LastLine(r->output) : std::string(r.status().message())}});
  }
}

std::vector<std::string> OciRuntime::ResolveArgv(const std::vector<std::string>& entrypoint,
                                                 const std::vector<std::string>& cmd,
                                                 const std::vector<std::string>& command,
                                                 const std::vector<std::string>& args) {
  std::vector<std::string> argv = command.empty() ? entrypoint : command;
  const std::vector<std::string>& tail = !args.empty() ? args : command.empty() ? cmd : args;
  argv.insert(argv.end(), tail.begin(), tail.end());
  return argv;
}

std::string OciRuntime::SecureJoin(const std::string& root, const std::string& path) {
  std::vector<std::string> rest = absl::StrSplit(path, '/', absl::SkipEmpty());
  std::vector<std::string> done;
  int links = 0;
  while (!rest.empty()) {
    std::string part = rest.front();
    rest.erase(rest.begin());
    if (part == ".") continue;
    if (part == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    std::string candidate =
        absl::StrCat(root, "/", absl::StrJoin(done, "/"), done.empty() ? "" : "/", part);
    struct stat st;
    if (lstat(candidate.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && ++links <= 40) {
      char buf[4096];
      ssize_t n = readlink(candidate.c_str(), buf, sizeof(buf) - 1);
      if (n > 0) {
        std::string target(buf, n);
        std::vector<std::string> parts = absl::StrSplit(target, '/', absl::SkipEmpty());
        if (target[0] == '/') done.clear();
        rest.insert(rest.begin(), parts.begin(), parts.end());
        continue;
      }
    }
    done.push_back(part);
  }
  return absl::StrCat(root, done.empty() ? "" : "/", absl::StrJoin(done, "/"));
}

std::unique_ptr<RunningContainer> OciRuntime::Start(const ContainerConfig& config,
                                                    StartFailure* failure) {
  const std::string name = absl::StrCat(kNamePrefix, getpid(), "-", config.id);
  auto fail = [&](std::string reason, std::string message) -> std::unique_ptr<RunningContainer> {
    *failure = {std::move(reason), std::move(message)};
    return nullptr;
  };
  if (geteuid() != 0) {
    return fail("CreateContainerError",
                "the oci runtime needs root (buildah's storage and mount namespaces); run "
                "localkube as root or use --runtime=process");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return fail("CreateContainerError", "localkube is shutting down");
  }
  absl::StatusOr<ToolResult> from = Buildah(
      {"from", "--pull=never", "--quiet", "--name", name, config.image}, options_.create_timeout);
  if (!from.ok()) return fail("CreateContainerError", std::string(from.status().message()));
  if (from->exit_code != 0) {
    std::string why = LastLine(from->output);
    if (absl::StrContains(why, "image not known") || absl::StrContains(why, "not found")) {
      return fail("ErrImageNeverPull",
                  absl::StrCat("Container image \"", config.image,
                               "\" is not present with pull policy of Never (localkube never "
                               "pulls; build or load it into buildah's storage first)"));
    }
    if (absl::StrContains(why, "invalid reference format") ||
        absl::StrContains(why, "must be lowercase")) {
      return fail("InvalidImageName",
                  absl::StrCat("Failed to apply default image tag \"", config.image, "\": ", why));
    }
    return fail("CreateContainerError", absl::StrCat("buildah from ", config.image, ": ", why));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(name);
  }
  // From here on a failure removes the working container again.
  auto fail_rm = [&](std::string reason, std::string message) {
    Remove(name);
    return fail(std::move(reason), std::move(message));
  };
  absl::StatusOr<ToolResult> inspect =
      Buildah({"inspect", "--type", "container", name}, absl::Seconds(30));
  absl::StatusOr<ToolResult> mount = Buildah({"mount", name}, absl::Seconds(30));
  if (!inspect.ok() || inspect->exit_code != 0 || !mount.ok() || mount->exit_code != 0) {
    return fail_rm("CreateContainerError",
                   absl::StrCat("buildah inspect/mount ", name, ": ",
                                !inspect.ok()             ? inspect.status().message()
                                : inspect->exit_code != 0 ? LastLine(inspect->output)
                                : !mount.ok()             ? mount.status().message()
                                                          : LastLine(mount->output)));
  }
  size_t brace = inspect->output.find('{');
  json info =
      json::parse(brace == std::string::npos ? "" : inspect->output.substr(brace), nullptr, false);
  if (info.is_discarded() || !info.is_object()) {
    return fail_rm("CreateContainerError", "buildah inspect printed no JSON");
  }
  const json image_config = info.value("OCIv1", json::object()).value("config", json::object());
  const std::string root = LastLine(mount->output);
  if (root.empty() || root[0] != '/' || !fs::is_directory(root)) {
    return fail_rm("CreateContainerError",
                   absl::StrCat("buildah mount gave no root file system: ", root));
  }

  std::vector<std::string> argv =
      ResolveArgv(StringElements(image_config.value("Entrypoint", json())),
                  StringElements(image_config.value("Cmd", json())), config.command, config.args);
  if (argv.empty()) {
    return fail_rm("CreateContainerError",
                   absl::StrCat("no command specified: image \"", config.image,
                                "\" has no ENTRYPOINT or CMD; set the container's command"));
  }

  // The user: securityContext, else the image's USER ("name", "uid", "user:group").
  Account account;
  std::optional<int64_t> gid = config.run_as_group;
  if (config.run_as_user) {
    account.uid = *config.run_as_user;
    if (auto a = LookUpUser(root, std::to_string(account.uid))) {
      account = *a;
    }
    account.uid = *config.run_as_user;
  } else {
    std::string user = image_config.value("User", "");
    std::string group;
    if (size_t colon = user.find(':'); colon != std::string::npos) {
      group = user.substr(colon + 1);
      user = user.substr(0, colon);
    }
    if (!user.empty()) {
      std::optional<Account> a = LookUpUser(root, user);
      int64_t uid;
      if (!a && absl::SimpleAtoi(user, &uid)) {
        a = Account{uid, 0, "/"};
      }
      if (!a) {
        return fail_rm(
            "CreateContainerError",
            absl::StrCat("unable to find user ", user,
                         ": no matching entries in passwd file of image \"", config.image, "\""));
      }
      account = *a;
    }
    if (!group.empty() && !gid) {
      gid = LookUpGroup(root, group);
      if (!gid) {
        return fail_rm(
            "CreateContainerError",
            absl::StrCat("unable to find group ", group,
                         ": no matching entries in group file of image \"", config.image, "\""));
      }
    }
  }
  if (gid) account.gid = *gid;
  if (config.run_as_non_root && account.uid == 0) {
    return fail_rm("CreateContainerConfigError",
                   "container has runAsNonRoot and image will run as root (set "
                   "securityContext.runAsUser to a non-zero uid)");
  }

  // Environment: the image's ENV, then the kubelet's.
  std::map<std::string, std::string> env;
  for (const std::string& kv : StringElements(image_config.value("Env", json()))) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : config.env) env[k] = v;
  if (!env.count("PATH")) env["PATH"] = kDefaultPath;
  if (!env.count("HOME")) env["HOME"] = account.home;

  std::string wd =
      config.working_dir.empty() ? image_config.value("WorkingDir", "") : config.working_dir;
  if (wd.empty()) wd = "/";
  std::error_code ec;
  fs::create_directories(SecureJoin(root, wd), ec);

  std::vector<ContainerMount> mounts = config.mounts;
  // Parents before children, so nested mount paths stack as they should.
  std::stable_sort(mounts.begin(), mounts.end(),
                   [](const ContainerMount& a, const ContainerMount& b) {
                     return std::count(a.container_path.begin(), a.container_path.end(), '/') <
                            std::count(b.container_path.begin(), b.container_path.end(), '/');
                   });
  ProcessOptions spec;
  if (config.sandbox) {
    // In the pod's sandbox: localkube-pod-init makes the image's root the container's, with the
    // pod's /proc, /dev, /etc/hosts and network, and runs the program as the user.
    spec.argv = argv;
    spec.env = env;
    spec.working_dir = wd;
    PodSandbox::ImageRoot image{root, account.uid, account.gid};
    spec = config.sandbox->Wrap(std::move(spec), mounts, &image);
  } else {
    spec = HostLauncher(root, wd, account.uid, account.gid, argv, mounts, config.etc_hosts);
    spec.env = env;
  }
  auto process = ContainerProcess::Start(spec, config.log_path);
  if (!process.ok()) {
    return fail_rm("StartError", absl::StrCat("cannot start the container's launcher: ",
                                              process.status().message()));
  }
  std::string id = absl::StrCat("buildah://", info.value("ContainerID", name));
  return std::make_unique<OciContainer>(this, name, id, std::move(*process));
}

}  // namespace kubetrain::localkube
