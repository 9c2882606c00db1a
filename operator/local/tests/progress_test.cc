#include "operator/local/progress.h"

#include <gtest/gtest.h>

namespace kubetrain::local {
namespace {

TEST(ParseLogfmt, ReadsPlainAndQuotedValues) {
  auto f =
      ParseLogfmt(R"(time=2026-01-01T00:00:00Z level=info msg="epoch done" step=10 x="a \"b\"")");
  EXPECT_EQ(f["msg"], "epoch done");
  EXPECT_EQ(f["step"], "10");
  EXPECT_EQ(f["x"], "a \"b\"");
}

TEST(ProgressTracker, OddJsonLinesAreIgnored) {
  // A task prints what it likes; a JSON line with an unexpected shape must not end the run.
  ProgressTracker t;
  EXPECT_FALSE(t.Observe(R"({"event":5})"));
  EXPECT_FALSE(t.Observe(R"({"event":["training_complete"]})"));
  EXPECT_FALSE(t.Observe("{not json"));
  EXPECT_TRUE(t.Observe(R"({"event":"training_complete"})"));
}

TEST(ProgressTracker, KeepsLatestValuesAndCompletion) {
  ProgressTracker t;
  EXPECT_FALSE(t.Observe("level=info msg=starting"));
  EXPECT_TRUE(t.Observe("msg=progress step=100 epoch=0 loss=0.9 examples_per_sec=5000"));
  EXPECT_TRUE(t.Observe("msg=eval step=200 epoch=1 accuracy=0.85"));
  EXPECT_FALSE(t.Observe("msg=eval step=200 epoch=1 accuracy=0.85"));
  EXPECT_EQ(t.Summary(), "step=200 epoch=1 loss=0.9 accuracy=0.85 examples_per_sec=5000");
  EXPECT_TRUE(t.Observe(R"({"event":"training_complete","test_accuracy":0.89,"steps":200})"));
  ASSERT_TRUE(t.completion().has_value());
  EXPECT_EQ((*t.completion())["test_accuracy"], 0.89);
}

TEST(ProgressTracker, RemembersWhereTheChiefWritesItsTensorBoardSummaries) {
  ProgressTracker t;
  EXPECT_EQ(t.summary_dir(), "");
  EXPECT_FALSE(t.Observe(
      R"(ts=2026-11-29T07:00:00Z level=info msg="Writing TensorBoard summaries" dir="/tmp/kubetrain-0/run 1/checkpoints/summaries" file=/x)"));
  EXPECT_EQ(t.summary_dir(), "/tmp/kubetrain-0/run 1/checkpoints/summaries");
  EXPECT_FALSE(t.has_progress()) << "not a progress line";
}

}  // namespace
}  // namespace kubetrain::local
