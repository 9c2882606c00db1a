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

}  // namespace
}  // namespace kubetrain::controller
