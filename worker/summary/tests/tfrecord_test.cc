#include "worker/summary/tfrecord.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "worker/summary/crc32c.h"

namespace kubetrain::summary {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TfRecord, FramesLengthCrcDataCrc) {
  std::string out;
  AppendTfRecord("abc", &out);
  ASSERT_EQ(out.size(), 3 + kTfRecordOverhead);
  EXPECT_EQ(out.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  auto le32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(out[at + i]);
    return v;
  };
  EXPECT_EQ(le32(8), MaskCrc(Crc32c(out.substr(0, 8))));
  EXPECT_EQ(out.substr(12, 3), "abc");
  EXPECT_EQ(le32(15), MaskCrc(Crc32c("abc")));
}

TEST(TfRecord, ReadsBackWhatWasFramed) {
  std::string file;
  AppendTfRecord("first", &file);
  AppendTfRecord("", &file);
  AppendTfRecord(std::string(1000, 'x'), &file);
  auto records = ReadTfRecords(file, "f");
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_THAT(*records, ElementsAre("first", "", std::string(1000, 'x')));
}

TEST(TfRecord, ReportsEachKindOfDamageWithItsRecordAndOffset) {
  std::string file;
  AppendTfRecord("one", &file);
  AppendTfRecord("two", &file);
  const size_t second = 3 + kTfRecordOverhead;

  std::string bad_data = file;
  bad_data[second + 12] ^= 1;
  EXPECT_THAT(ReadTfRecords(bad_data, "ev").status().message(),
              HasSubstr("ev: record 1 at byte 19 has a bad data CRC"));

  std::string bad_length = file;
  bad_length[second] ^= 1;
  EXPECT_THAT(ReadTfRecords(bad_length, "ev").status().message(),
              HasSubstr("record 1 at byte 19 has a bad length CRC"));

  EXPECT_THAT(ReadTfRecords(file.substr(0, file.size() - 1), "ev").status().message(),
              HasSubstr("record 1 at byte 19 is truncated in its data"));
  EXPECT_THAT(ReadTfRecords(file.substr(0, second + 5), "ev").status().message(),
              HasSubstr("is truncated in its header"));
}

TEST(TfRecord, RefusesALengthOverTheLimitWithoutAllocatingIt) {
  std::string file;
  AppendTfRecord(std::string(100, 'x'), &file);
  auto records = ReadTfRecords(file, "ev", 99);
  EXPECT_EQ(records.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(records.status().message(), HasSubstr("claims 100 bytes, over the limit of 99"));
}

}  // namespace
}  // namespace kubetrain::summary
