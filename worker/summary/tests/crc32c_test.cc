#include "worker/summary/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace kubetrain::summary {
namespace {

// RFC 3720 (iSCSI) appendix B.4, and the common check value of "123456789".
TEST(Crc32c, MatchesThePublishedVectors) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
}

TEST(Crc32c, ExtendingInPiecesEqualsOnePass) {
  const std::string data = "TensorBoard reads what TensorFlow writes";
  EXPECT_EQ(Crc32cExtend(Crc32c(data.substr(0, 11)), data.substr(11)), Crc32c(data));
}

TEST(Crc32c, MaskIsTensorFlowsAndUnmaskUndoesIt) {
  // ((crc >> 15) | (crc << 17)) + 0xa282ead8, computed by hand for crc = 1 and crc = 0.
  EXPECT_EQ(MaskCrc(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc(1), 0x00020000u + 0xa282ead8u);
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) EXPECT_EQ(UnmaskCrc(MaskCrc(crc)), crc);
}

}  // namespace
}  // namespace kubetrain::summary
