#include "common/quote.h"

#include <gtest/gtest.h>

#include <string>

namespace kubetrain {
namespace {

TEST(GoQuote, EscapesQuotesBackslashesAndWhitespaceAsGoDoes) {
  EXPECT_EQ(GoQuote(""), "\"\"");
  EXPECT_EQ(GoQuote("x"), "\"x\"");
  EXPECT_EQ(GoQuote("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(GoQuote("C:\\dir"), "\"C:\\\\dir\"");
  EXPECT_EQ(GoQuote("line\nbreak\ttab\rcr"), "\"line\\nbreak\\ttab\\rcr\"");
}

TEST(GoQuote, WritesOtherControlBytesAndDelAsHex) {
  EXPECT_EQ(GoQuote(std::string("a\0b", 3)), "\"a\\x00b\"");
  EXPECT_EQ(GoQuote("\x1b[0m"), "\"\\x1b[0m\"");
  EXPECT_EQ(GoQuote("\x7f"), "\"\\x7f\"");
}

TEST(GoQuote, KeepsUtf8AsItIs) { EXPECT_EQ(GoQuote("größe ✓"), "\"größe ✓\""); }

}  // namespace
}  // namespace kubetrain
