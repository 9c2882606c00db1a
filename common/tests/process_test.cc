#include "common/process.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"

namespace kubetrain {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;

ProcessOptions Shell(const std::string& script) {
  return {{"sh", "-c", script}, {{"PATH", "/usr/bin:/bin"}, {"GREETING", "hello"}}, ""};
}

std::string DrainAndWait(Process& p) {
  std::string out;
  while (p.ReadOutput(&out)) absl::SleepFor(absl::Milliseconds(5));
  while (!p.Poll()) absl::SleepFor(absl::Milliseconds(5));
  return out;
}

TEST(Process, CapturesStdoutAndStderrAndExitCode) {
  auto p = Process::Start(Shell("echo out; echo err >&2; echo $GREETING; exit 3"));
  ASSERT_TRUE(p.ok()) << p.status();
  std::string out = DrainAndWait(**p);
  EXPECT_EQ(out, "out\nerr\nhello\n");
  EXPECT_EQ((*p)->exit_code(), 3);
}

TEST(Process, KilledBySignalReports128PlusSignal) {
  auto p = Process::Start(Shell("kill -9 $$"));
  ASSERT_THAT(p, IsOk());
  DrainAndWait(**p);
  EXPECT_EQ((*p)->exit_code(), 128 + SIGKILL);
}

TEST(Process, SignalReachesTheWholeGroup) {
  auto p = Process::Start(Shell("sleep 30 & echo started; sleep 30; echo never"));
  ASSERT_THAT(p, IsOk());
  std::string out;
  // Until the background child is there (the shell says so), within a bound.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (out.find("started\n") == std::string::npos && absl::Now() < give_up) {
    struct pollfd readable = {.fd = (*p)->output_fd(), .events = POLLIN, .revents = 0};
    ::poll(&readable, 1, 100);
    if (!(*p)->ReadOutput(&out)) break;
  }
  ASSERT_EQ(out, "started\n");
  (*p)->Signal(SIGTERM);
  out = DrainAndWait(**p);  // EOF only once every holder of the pipe is gone
  EXPECT_EQ(out, "");
  EXPECT_EQ((*p)->exit_code(), 128 + SIGTERM);
}

TEST(Process, DestructorKillsARunningChild) {
  pid_t pid;
  {
    auto p = Process::Start(Shell("sleep 30"));
    ASSERT_THAT(p, IsOk());
    pid = (*p)->pid();
  }
  EXPECT_NE(kill(pid, 0), 0);  // reaped: no such process
}

TEST(Process, MissingExecutableIsNotFound) {
  auto p = Process::Start({{"kubetrain-does-not-exist"}, {{"PATH", "/usr/bin"}}, ""});
  EXPECT_THAT(p, StatusIs(absl::StatusCode::kNotFound,
                          "executable \"kubetrain-does-not-exist\" not found in PATH (/usr/bin)"));
}

}  // namespace
}  // namespace kubetrain
