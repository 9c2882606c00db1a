// The worker image's entrypoint: which program each task of a job runs, and that it runs it in
// its own place (exec), with the real kubetrain-ps and kubetrain-worker.
#include "worker/entrypoint/entrypoint.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/host_port.h"

namespace kubetrain::worker {
namespace {

absl::StatusOr<int> Port4321() { return 4321; }

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Config(const std::string& type, int index) {
  return R"({"cluster":{"ps":["a-ps-0.ns.svc:2222"],"worker":["a-worker-0.ns.svc:2222","a-worker-1.ns.svc:2222"]},)"
         R"("task":{"type":")" +
         type + R"(","index":)" + std::to_string(index) + R"(},"environment":"cloud"})";
}

TEST(ChooseLaunch, PsTasksRunThePsAndTheOthersTheWorkerWithTheArgsAsGiven) {
  absl::StatusOr<Launch> ps = ChooseLaunch(Config("ps", 0), {"--threads=2"}, Port4321);
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->program, "kubetrain-ps");
  EXPECT_THAT(ps->args, ElementsAre("--threads=2"));
  EXPECT_THAT(ps->default_env, IsEmpty());
  for (const char* type : {"worker", "chief", "master", "evaluator"}) {
    std::string config = std::string(type) == "worker"
                             ? Config("worker", 1)
                             : R"({"cluster":{"ps":["p:2222"],"worker":["w:2222"],")" +
                                   std::string(type) + R"(":["c:2222"]},"task":{"type":")" + type +
                                   R"(","index":0}})";
    if (std::string(type) == "evaluator") {
      config = R"({"cluster":{"ps":["p:2222"],"worker":["w:2222"]},)"
               R"("task":{"type":"evaluator","index":0}})";
    }
    absl::StatusOr<Launch> l = ChooseLaunch(config, {"--epochs=1"}, Port4321);
    ASSERT_TRUE(l.ok()) << type << ": " << l.status();
    EXPECT_EQ(l->program, "kubetrain-worker") << type;
    EXPECT_THAT(l->args, ElementsAre("--epochs=1")) << type;
  }
}

// A one-replica TFJob gets no TF_CONFIG: one process trains alone, as a TensorFlow program
// does; the user's flags come after the entrypoint's, so they win, and a KUBETRAIN_MODE the
// container sets is kept.
TEST(ChooseLaunch, WithoutTfConfigOneProcessTrainsAlone) {
  for (const std::optional<std::string>& none :
       {std::optional<std::string>(), std::optional<std::string>("")}) {
    absl::StatusOr<Launch> l = ChooseLaunch(none, {"--epochs=1"}, Port4321);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->program, "kubetrain-worker");
    EXPECT_THAT(l->args, ElementsAre("--coordinator=127.0.0.1:4321", "--epochs=1"));
    EXPECT_THAT(l->default_env,
                ElementsAre(std::pair<std::string, std::string>("KUBETRAIN_MODE", "allreduce")));
  }
  absl::StatusOr<int> free = FreePortOnEveryInterface();
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_GT(*free, 0);
}

TEST(ChooseLaunch, AFirstArgumentThatIsNotAFlagIsTheProgram) {
  absl::StatusOr<Launch> l =
      ChooseLaunch(Config("worker", 0), {"kubetrain-ps", "--port=2222"}, Port4321);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->program, "kubetrain-ps");
  EXPECT_THAT(l->args, ElementsAre("--port=2222"));
}

TEST(ChooseLaunch, BadTfConfigIsNamed) {
  absl::StatusOr<Launch> l = ChooseLaunch(std::string("{not json"), {}, Port4321);
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(l.status().message(), HasSubstr("TF_CONFIG"));
  l = ChooseLaunch(R"({"cluster":{"tpu":["t:1"]},"task":{"type":"tpu","index":0}})", {}, Port4321);
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(l.status().message(), HasSubstr("task.type"));
  EXPECT_THAT(l.status().message(), HasSubstr("\"tpu\""));
}

// The binary: runs `args` with TF_CONFIG and PATH holding the real programs; returns the exit
// status, stdout and stderr together in *out, and the child's pid in *pid.
int RunEntrypoint(const std::vector<std::string>& args, const std::string& tf_config,
                  std::string* out, pid_t* pid) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  *pid = fork();
  if (*pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    const std::string bin_dir = std::filesystem::path(KUBETRAIN_WORKER_BIN).parent_path();
    setenv("PATH", (bin_dir + ":/usr/bin:/bin").c_str(), 1);
    if (tf_config.empty()) {
      unsetenv("TF_CONFIG");
    } else {
      setenv("TF_CONFIG", tf_config.c_str(), 1);
    }
    std::vector<std::string> all = {KUBETRAIN_ENTRYPOINT_BIN};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out->append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(*pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// exec, not a child: the program has the entrypoint's pid, so the container runtime's SIGTERM
// reaches it.
TEST(EntrypointBinary, ExecsTheProgramInItsOwnPlace) {
  std::string out;
  pid_t pid = 0;
  ASSERT_EQ(RunEntrypoint({"/bin/sh", "-c", "echo pid=$$"}, "", &out, &pid), 0) << out;
  EXPECT_THAT(out, HasSubstr("pid=" + std::to_string(pid)));
}

TEST(EntrypointBinary, APsTaskRunsTheRealPsAndAWorkerTaskTheRealWorker) {
  std::string out;
  pid_t pid = 0;
  ASSERT_EQ(RunEntrypoint({"--help"}, Config("ps", 0), &out, &pid), 0) << out;
  EXPECT_THAT(out, HasSubstr("exec kubetrain-ps"));
  EXPECT_THAT(out, HasSubstr("Usage: kubetrain-ps"));
  out.clear();
  ASSERT_EQ(RunEntrypoint({"--help"}, Config("worker", 1), &out, &pid), 0) << out;
  EXPECT_THAT(out, HasSubstr("Usage: kubetrain-worker"));
  out.clear();
  EXPECT_EQ(RunEntrypoint({}, R"({"task":{"type":"tpu"}})", &out, &pid), 2);
  EXPECT_THAT(out, HasSubstr("kubetrain-entrypoint: TF_CONFIG"));
}

}  // namespace
}  // namespace kubetrain::worker
