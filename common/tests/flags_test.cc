#include "common/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "common/testing/status_matchers.h"

namespace kubetrain {
namespace {

using ::kubetrain::testing::IsOk;

struct Options {
  int port = 2222;
  std::string data_dir = "/data";
  bool verbose = false;
  double lr = 0.1;
  absl::Duration timeout = absl::Seconds(30);
  std::vector<std::string> tags;
};

FlagSet MakeFlags(Options* o) {
  FlagSet flags("prog", "Does things.");
  flags.Add("port", &o->port, "gRPC port", "KT_TEST_PORT");
  flags.Add("data-dir", &o->data_dir, "dataset folder");
  flags.Add("verbose", &o->verbose, "log more");
  flags.Add("lr", &o->lr, "learning rate");
  flags.Add("timeout", &o->timeout, "RPC timeout");
  flags.Add("tag", &o->tags, "a tag");
  return flags;
}

// The message with which MakeFlags' set refuses `args`; "" when it accepts them.
std::string Refusal(const std::vector<std::string>& args) {
  Options o;
  FlagSet flags = MakeFlags(&o);
  auto r = flags.Parse(args);
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(FlagSet, ParsesAllFormsAndKeepsPositionals) {
  Options o;
  FlagSet flags = MakeFlags(&o);
  auto rest = flags.Parse({"--port=3000", "job.yaml", "--data-dir", "/tmp/x", "--verbose",
                           "--lr=0.5", "--timeout=1m30s", "--tag", "a", "--tag=b", "--", "--x"});
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(*rest, (std::vector<std::string>{"job.yaml", "--x"}));
  EXPECT_EQ(o.port, 3000);
  EXPECT_EQ(o.data_dir, "/tmp/x");
  EXPECT_TRUE(o.verbose);
  EXPECT_DOUBLE_EQ(o.lr, 0.5);
  EXPECT_EQ(o.timeout, absl::Seconds(90));
  EXPECT_EQ(o.tags, (std::vector<std::string>{"a", "b"}));
}

TEST(FlagSet, BareNumberDurationIsSeconds) {
  Options o;
  FlagSet flags = MakeFlags(&o);
  ASSERT_THAT(flags.Parse({"--timeout", "2.5"}), IsOk());
  EXPECT_EQ(o.timeout, absl::Milliseconds(2500));
}

TEST(FlagSet, NegatedBoolean) {
  Options o;
  o.verbose = true;
  FlagSet flags = MakeFlags(&o);
  ASSERT_THAT(flags.Parse({"--no-verbose"}), IsOk());
  EXPECT_FALSE(o.verbose);
}

TEST(FlagSet, AnOptionalBooleanStaysUnsetUnlessGiven) {
  for (const auto& [args, want] :
       std::vector<std::pair<std::vector<std::string>, std::optional<bool>>>{
           {{}, std::nullopt},
           {{"--tf32"}, true},
           {{"--tf32=false"}, false},
           {{"--no-tf32"}, false},
           {{"--tf32=true"}, true}}) {
    std::optional<bool> tf32;
    FlagSet flags("prog", "Does things.");
    flags.Add("tf32", &tf32, "TF32");
    ASSERT_THAT(flags.Parse(args), IsOk());
    EXPECT_EQ(tf32, want) << ::testing::PrintToString(args);
  }
  std::optional<bool> tf32;
  FlagSet flags("prog", "Does things.");
  flags.Add("tf32", &tf32, "TF32");
  EXPECT_THAT(flags.Help(), ::testing::HasSubstr("unset"));
  auto r = flags.Parse({"--tf32=maybe"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("--tf32"));
}

TEST(FlagSet, BadValueNamesFlagAndValue) {
  EXPECT_EQ(Refusal({"--port=abc"}), "--port: must be an integer, got \"abc\"");
}

TEST(FlagSet, UnknownFlagSuggestsClosest) {
  EXPECT_EQ(Refusal({"--prot=1"}), "unknown flag --prot; did you mean --port? (see prog --help)");
}

TEST(FlagSet, MissingValueIsAnError) {
  EXPECT_EQ(Refusal({"--data-dir"}), "--data-dir: needs a value");
}

TEST(FlagSet, EnvironmentIsUsedUnlessFlagGiven) {
  setenv("KT_TEST_PORT", "4000", 1);
  Options a;
  FlagSet fa = MakeFlags(&a);
  ASSERT_THAT(fa.Parse(std::vector<std::string>{}), IsOk());
  EXPECT_EQ(a.port, 4000);
  Options b;
  FlagSet fb = MakeFlags(&b);
  ASSERT_THAT(fb.Parse({"--port=5000"}), IsOk());
  EXPECT_EQ(b.port, 5000);
  setenv("KT_TEST_PORT", "x", 1);
  Options c;
  FlagSet fc = MakeFlags(&c);
  auto r = fc.Parse(std::vector<std::string>{});
  unsetenv("KT_TEST_PORT");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "environment variable KT_TEST_PORT: must be an integer, got \"x\"");
}

TEST(FlagSet, HelpListsFlagsDefaultsAndEnv) {
  Options o;
  FlagSet flags = MakeFlags(&o);
  std::string help = flags.Help();
  EXPECT_NE(help.find("Usage: prog [flags]"), std::string::npos);
  EXPECT_NE(help.find("--port VALUE"), std::string::npos);
  EXPECT_NE(help.find("(default 2222) [$KT_TEST_PORT]"), std::string::npos);
  auto r = flags.Parse({"--help"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
}

TEST(FlagSet, PortOutsideZeroTo65535IsRefusedFromFlagAndEnvironment) {
  int port = 2222;
  FlagSet flags("prog", "");
  flags.Add("port", &port, "gRPC port", "KT_TEST_RANGE_PORT").Port();
  auto r = flags.Parse({"--port=99999"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--port: must be an integer from 0 to 65535, got \"99999\"");
  EXPECT_EQ(port, 2222);
  EXPECT_FALSE(flags.Parse({"--port=-1"}).ok());
  ASSERT_THAT(flags.Parse({"--port=65535"}), IsOk());
  EXPECT_EQ(port, 65535);
  setenv("KT_TEST_RANGE_PORT", "70000", 1);
  r = flags.Parse(std::vector<std::string>{});
  unsetenv("KT_TEST_RANGE_PORT");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "environment variable KT_TEST_RANGE_PORT: must be an integer from 0 to 65535, got "
            "\"70000\"");
  EXPECT_NE(flags.Help().find("(default 2222; from 0 to 65535)"), std::string::npos)
      << flags.Help();
}

TEST(FlagSet, NegativeDurationIsRefusedWhenTheFlagMustBeNonNegative) {
  absl::Duration wait = absl::Minutes(10);
  FlagSet flags("prog", "");
  flags.Add("max-pull-wait", &wait, "longest wait").AtLeast(absl::ZeroDuration());
  auto r = flags.Parse({"--max-pull-wait=-5s"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--max-pull-wait: must be a duration >= 0, got \"-5s\"");
  EXPECT_FALSE(flags.Parse({"--max-pull-wait=-1"}).ok());
  EXPECT_EQ(wait, absl::Minutes(10));
  ASSERT_THAT(flags.Parse({"--max-pull-wait=0"}), IsOk());
  EXPECT_EQ(wait, absl::ZeroDuration());
}

TEST(FlagSet, IntegerAndNumberRangesNameTheirBounds) {
  int workers = 4;
  double rate = 1;
  uint64_t mib = 64;
  absl::Duration grace = absl::Seconds(1);
  FlagSet flags("prog", "");
  flags.Add("workers", &workers, "").AtLeast(1);
  flags.Add("rate", &rate, "").Range(0, 1);
  flags.Add("mib", &mib, "").Range(1, 1024);
  flags.Add("grace", &grace, "").Range(absl::ZeroDuration(), absl::Seconds(2));
  EXPECT_EQ(flags.Parse({"--workers=0"}).status().message(),
            "--workers: must be an integer >= 1, got \"0\"");
  EXPECT_EQ(flags.Parse({"--rate=1.5"}).status().message(),
            "--rate: must be a number from 0 to 1, got \"1.5\"");
  EXPECT_EQ(flags.Parse({"--mib=2000"}).status().message(),
            "--mib: must be a non-negative integer from 1 to 1024, got \"2000\"");
  EXPECT_EQ(flags.Parse({"--grace=3s"}).status().message(),
            "--grace: must be a duration from 0 to 2s, got \"3s\"");
  ASSERT_THAT(flags.Parse({"--workers=2", "--rate=0.5", "--mib=1024", "--grace=2s"}), IsOk());
  EXPECT_EQ(workers, 2);
  EXPECT_EQ(mib, 1024u);
  EXPECT_EQ(grace, absl::Seconds(2));
}

TEST(FlagSet, HelpIsToldApartFromOtherCancellationsAndExitsZero) {
  FlagSet flags("prog", "A program.");
  absl::StatusOr<std::vector<std::string>> help = flags.Parse({"--help"});
  ASSERT_FALSE(help.ok());
  EXPECT_TRUE(HelpRequested(help.status()));
  EXPECT_EQ(UsageExit("prog", help.status()), 0);
  EXPECT_FALSE(HelpRequested(absl::CancelledError("stopped by signal")));
  absl::StatusOr<std::vector<std::string>> bad = flags.Parse({"--no-such-flag"});
  ASSERT_FALSE(bad.ok());
  EXPECT_FALSE(HelpRequested(bad.status()));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(UsageExit("prog", bad.status()), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              ::testing::StartsWith("prog: unknown flag --no-such-flag"));
}

}  // namespace
}  // namespace kubetrain
