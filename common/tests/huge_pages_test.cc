#include "common/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kubetrain {
namespace {

// The VmFlags line of the mapping of /proc/self/smaps that holds `address` ("" if none does).
std::string VmFlagsAt(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    // A mapping's first line is its range, then fields; the others are "Key: value".
    const bool first_line = line.find(':') > line.find(' ');
    if (first_line && range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HugePages, GrowingKeepsTheValuesAndZeroesTheNewOnes) {
  std::vector<uint8_t> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t n : {size_t{4} << 20, size_t{5} << 20, size_t{13} << 20, size_t{2000}}) {
    ResizeOnHugePages(v, n);
    ASSERT_EQ(v.size(), n);
  }
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(v[i], static_cast<uint8_t>(i * 7 + 1)) << i;
  for (size_t i = 1000; i < v.size(); ++i) ASSERT_EQ(v[i], 0) << i;
  EXPECT_GE(v.capacity(), size_t{13} << 20);  // shrinking keeps the memory, as resize does
}

TEST(HugePages, ALargeArrayIsAdvisedBeforeItIsTouched) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  }
  std::vector<float> images;
  ResizeOnHugePages(images, size_t{16} << 20);  // 64 MiB, as a data set's arrays are
  const std::string flags = VmFlagsAt(images.data() + images.size() / 2);
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the array";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  for (float x : images) ASSERT_EQ(x, 0.0f);
}

TEST(HugePages, SmallOrEmptyRangesAreLeftAlone) {
  AdviseHugePages(nullptr, size_t{64} << 20);
  std::vector<uint8_t> small;
  ResizeOnHugePages(small, 100);
  EXPECT_EQ(small, std::vector<uint8_t>(100, 0));
  ResizeOnHugePages(small, 0);
  EXPECT_TRUE(small.empty());
}

}  // namespace
}  // namespace kubetrain
