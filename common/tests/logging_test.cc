#include "common/logging.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kubetrain::log {
namespace {

const absl::Time kTime = absl::FromUnixMillis(1700000000123);

TEST(Logfmt, FormatsTimeLevelMessageAndFields) {
  EXPECT_EQ(FormatLine(kTime, Level::kInfo, "Created Pod",
                       {{"pod", "fmnist-ps-0"}, {"job", "default/fmnist"}}),
            "time=2023-11-14T22:13:20.123Z level=info msg=\"Created Pod\" pod=fmnist-ps-0 "
            "job=default/fmnist");
}

TEST(Logfmt, ProgressLineHasNumbersUnquoted) {
  EXPECT_EQ(FormatLine(kTime, Level::kInfo, "progress",
                       {{"step", 1200}, {"epoch", 2}, {"loss", 0.41}, {"accuracy", 0.861}}),
            "time=2023-11-14T22:13:20.123Z level=info msg=progress step=1200 epoch=2 loss=0.41 "
            "accuracy=0.861");
}

TEST(Logfmt, QuotesValuesThatWouldBreakParsing) {
  EXPECT_EQ(QuoteValue(""), "\"\"");
  EXPECT_EQ(QuoteValue("a b"), "\"a b\"");
  EXPECT_EQ(QuoteValue("k=v"), "\"k=v\"");
  EXPECT_EQ(QuoteValue("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(QuoteValue("line\nbreak"), "\"line\\nbreak\"");
  EXPECT_EQ(QuoteValue("bell\a del\x7f"), "\"bell\\x07 del\\x7f\"");
  EXPECT_EQ(QuoteValue("plain-value_1.0"), "plain-value_1.0");
}

TEST(Logfmt, StatusAndBoolFields) {
  EXPECT_EQ(FormatLine(kTime, Level::kError, "x",
                       {{"err", absl::UnavailableError("down")}, {"ok", true}}),
            "time=2023-11-14T22:13:20.123Z level=error msg=x err=down ok=true");
}

TEST(Logging, LevelFiltersAndSinkReceivesLines) {
  std::vector<std::string> lines;
  SetSink([&](absl::string_view line) { lines.emplace_back(line); });
  SetLevel(Level::kWarn);
  Info("hidden");
  Warn("shown", {{"n", 1}});
  SetLevel(Level::kInfo);
  SetSink(nullptr);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("level=warn msg=shown n=1"), std::string::npos);
}

TEST(Logging, ParsesLevelNames) {
  Level l;
  EXPECT_TRUE(ParseLevel("debug", &l));
  EXPECT_EQ(l, Level::kDebug);
  EXPECT_FALSE(ParseLevel("verbose", &l));
}

}  // namespace
}  // namespace kubetrain::log
