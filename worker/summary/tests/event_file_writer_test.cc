#include "worker/summary/event_file_writer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/unique_temp_dir.h"
#include "tensorflow/core/util/event.pb.h"
#include "worker/summary/tfrecord.h"

namespace kubetrain::summary {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The file as TensorBoard sees it: records checked, each decoded by the protobuf runtime.
std::vector<tensorflow::Event> ReadEvents(const std::string& path) {
  auto records = ReadTfRecords(ReadFile(path), path);
  EXPECT_TRUE(records.ok()) << records.status();
  std::vector<tensorflow::Event> events;
  if (!records.ok()) return events;
  for (const std::string& record : *records) {
    tensorflow::Event event;
    EXPECT_TRUE(event.ParseFromString(record));
    events.push_back(event);
  }
  return events;
}

class EventFileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.Make("summary-"));
    root_ = tmp_.path();
    dir_ = root_ + "/ckpt/summaries";
  }
  EventFileOptions Options() { return {.directory = dir_, .host = "chief-0", .clock = &clock_}; }
  std::unique_ptr<EventFileWriter> MustCreate(EventFileOptions options) {
    auto writer = EventFileWriter::Create(std::move(options));
    EXPECT_TRUE(writer.ok()) << writer.status();
    return writer.ok() ? std::move(*writer) : nullptr;
  }

  FakeClock clock_{absl::FromUnixSeconds(1'700'000'000)};
  ::kubetrain::testing::UniqueTempDir tmp_;
  std::string root_;
  std::string dir_;
};

TEST_F(EventFileWriterTest, FileHoldsTheVersionThenEachStepsScalars) {
  auto writer = MustCreate(Options());
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->path(), dir_ + "/events.out.tfevents.1700000000.chief-0");
  ASSERT_TRUE(writer->AddScalars(10, 1700000001.5, {{"loss", 0.75f}, {"accuracy", 0.5f}}).ok());
  ASSERT_TRUE(writer->AddScalars(20, 1700000002.0, {{"loss", 0.0f}}).ok());
  ASSERT_TRUE(writer->Flush().ok());

  std::vector<tensorflow::Event> events = ReadEvents(writer->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(events[0].wall_time(), 1700000000.0);

  EXPECT_EQ(events[1].step(), 10);
  EXPECT_DOUBLE_EQ(events[1].wall_time(), 1700000001.5);
  ASSERT_EQ(events[1].summary().value_size(), 2);
  EXPECT_EQ(events[1].summary().value(0).tag(), "loss");
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 0.75f);
  EXPECT_EQ(events[1].summary().value(1).tag(), "accuracy");
  EXPECT_FLOAT_EQ(events[1].summary().value(1).simple_value(), 0.5f);

  // A loss of exactly 0 is still a value TensorBoard plots, not an empty one.
  EXPECT_EQ(events[2].step(), 20);
  ASSERT_EQ(events[2].summary().value_size(), 1);
  EXPECT_EQ(events[2].summary().value(0).value_case(), tensorflow::Summary::Value::kSimpleValue);
}

TEST_F(EventFileWriterTest, MakesTheMissingDirectoryOwnerOnly) {
  auto writer = MustCreate(Options());
  ASSERT_NE(writer, nullptr);
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(EventFileWriterTest, RefusesADirectoryOthersMayWriteNamingIt) {
  fs::create_directories(dir_);
  fs::permissions(dir_, fs::perms::all);
  auto writer = EventFileWriter::Create(Options());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(writer.status().message(), HasSubstr(dir_));
}

TEST_F(EventFileWriterTest, ARestartWritesANewFileAndLeavesTheOldOneAsItWas) {
  auto first = MustCreate(Options());
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->AddScalars(100, 1.0, {{"loss", 1.0f}}).ok());
  first.reset();  // the old chief exits; its destructor flushes
  const std::string first_path = dir_ + "/events.out.tfevents.1700000000.chief-0";
  const std::string before = ReadFile(first_path);
  ASSERT_EQ(ReadEvents(first_path).size(), 2u);

  // Restarted within the same second: same time and host, so a suffixed name.
  auto second = MustCreate(Options());
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->path(), first_path + ".1");
  ASSERT_TRUE(second->AddScalars(100, 2.0, {{"loss", 0.5f}}).ok());
  ASSERT_TRUE(second->Flush().ok());

  EXPECT_EQ(ReadFile(first_path), before);
  std::vector<tensorflow::Event> events = ReadEvents(second->path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FLOAT_EQ(events[1].summary().value(0).simple_value(), 0.5f);
}

TEST_F(EventFileWriterTest, AddWritesOnceTheFlushIntervalHasPassed) {
  EventFileOptions options = Options();
  options.flush_interval = absl::Seconds(5);
  auto writer = MustCreate(options);
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->AddScalars(1, 1.0, {{"loss", 1.0f}}).ok());
  EXPECT_EQ(ReadEvents(writer->path()).size(), 1u);  // only the version record so far

  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(writer->AddScalars(2, 2.0, {{"loss", 0.9f}}).ok());
  std::vector<tensorflow::Event> events = ReadEvents(writer->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].step(), 2);
}

TEST_F(EventFileWriterTest, RefusesATagThatIsEmptyOrNotUtf8) {
  auto writer = MustCreate(Options());
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->AddScalars(1, 1.0, {{"", 1.0f}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->AddScalars(1, 1.0, {}).code(), absl::StatusCode::kInvalidArgument);
  absl::Status latin1 = writer->AddScalars(1, 1.0,
                                           {{"d\xE9"
                                             "bit",
                                             1.0f}});
  EXPECT_EQ(latin1.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(latin1.message(), AllOf(HasSubstr("tag \"d\\xe9"), HasSubstr("is not UTF-8")));
  EXPECT_TRUE(writer
                  ->AddScalars(1, 1.0,
                               {{"d\xC3\xA9"
                                 "bit \xE2\x82\xAC \xF0\x9F\x98\x80",
                                 1.0f}})
                  .ok());
  EXPECT_EQ(writer->AddScalars(1, 1.0, {{"\xC0\xAF", 1.0f}}).code(),  // overlong '/'
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer->AddScalars(1, 1.0, {{"\xE2\x82", 1.0f}}).code(),  // cut short
            absl::StatusCode::kInvalidArgument);
}

// A file size limit (RLIMIT_FSIZE: the kernel refuses writes past it with EFBIG, as a full disk
// refuses with ENOSPC) in a child process: the writer reports the error naming the file, refuses
// later writes with the same error, and does not crash, also when it is destroyed.
TEST_F(EventFileWriterTest, AWriteErrorIsReturnedNamingTheFileAndRepeatedAfter) {
  auto run = [&] {
    signal(SIGXFSZ, SIG_IGN);
    auto writer = EventFileWriter::Create(Options());
    if (!writer.ok()) std::exit(2);
    struct rlimit limit = {.rlim_cur = 200, .rlim_max = RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) std::exit(3);
    absl::Status first;
    for (int step = 0; step < 100 && first.ok(); ++step) {
      first = (*writer)->AddScalars(step, 1.0, {{"loss", 1.0f}});
      if (first.ok()) first = (*writer)->Flush();
    }
    if (first.ok()) std::exit(4);
    absl::Status again = (*writer)->AddScalars(1000, 1.0, {{"loss", 1.0f}});
    if (again != first || (*writer)->Flush() != first) std::exit(5);
    writer->reset();
    std::fprintf(stderr, "%s\n", first.ToString().c_str());
    std::exit(0);
  };
  EXPECT_EXIT(run(), ::testing::ExitedWithCode(0),
              "RESOURCE_EXHAUSTED: writing event file .*/ckpt/summaries/"
              "events.out.tfevents.1700000000.chief-0: File too large");
}

}  // namespace
}  // namespace kubetrain::summary
