#include "operator/controller/progress.h"

#include <gtest/gtest.h>

namespace kubetrain::controller {
namespace {

TEST(Progress, ReadsTheChiefsGauges) {
  auto p = ParseProgress(R"(# HELP kubetrain_worker_global_step Global step of the ps.
# TYPE kubetrain_worker_global_step gauge
kubetrain_worker_global_step{job="fm",role="chief",index="0",device="cpu"} 1200
kubetrain_worker_epoch{job="fm",role="chief",index="0",device="cpu"} 2
kubetrain_worker_loss{job="fm",role="chief",index="0",device="cpu"} 0.41
kubetrain_worker_accuracy{job="fm",role="chief",index="0",device="cpu"} 0.861
kubetrain_worker_examples_per_second{job="fm",role="chief",index="0",device="cpu"} 21000
)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 1200);
  EXPECT_EQ(p->epoch, 2);
  EXPECT_DOUBLE_EQ(p->loss, 0.41);
  EXPECT_DOUBLE_EQ(p->accuracy, 0.861);
  EXPECT_DOUBLE_EQ(p->examples_per_second, 21000);
}

TEST(Progress, OtherMetricsAreNotFound) {
  EXPECT_EQ(ParseProgress("up 1\n").status().code(), absl::StatusCode::kNotFound);
}

TEST(FinalSummary, TheLastSummaryLineWinsAndOtherLinesAreSkipped) {
  auto p = ParseFinalSummary(
      "step=100 loss=0.5\n"
      R"({"event":"training_complete","test_accuracy":0.80,"steps":468,"epochs":1})"
      "\nnot json {\n"
      R"(kubetrain | {"event":"training_complete","test_accuracy":0.8735,"test_loss":0.3571,)"
      R"("steps":936,"epochs":2,"examples_per_sec":20150.5})"
      "\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 936);
  EXPECT_EQ(p->epoch, 2);
  EXPECT_DOUBLE_EQ(p->accuracy, 0.8735);
  EXPECT_DOUBLE_EQ(p->loss, 0.3571);
  EXPECT_DOUBLE_EQ(p->examples_per_second, 20150.5);
}

TEST(FinalSummary, MissingOrMalformedIsNotFound) {
  EXPECT_EQ(ParseFinalSummary("").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseFinalSummary("Error: out of memory\n").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseFinalSummary(R"({"event":"training_complete","steps":)").status().code(),
            absl::StatusCode::kNotFound);
  // Fields of the wrong type read as zero rather than throwing.
  auto p = ParseFinalSummary(R"({"event":"training_complete","steps":"many"})");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->step, 0);
}

}  // namespace
}  // namespace kubetrain::controller
