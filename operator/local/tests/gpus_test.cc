// Which GPUs `kubetrain run` sees and which task gets which, with the GPU list injected.
#include "operator/local/gpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace kubetrain::local {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(ParseCudaVisibleDevices, ReadsLikeCuda) {
  EXPECT_THAT(ParseCudaVisibleDevices("0,1"), ElementsAre("0", "1"));
  EXPECT_THAT(ParseCudaVisibleDevices(" 2 , 3"), ElementsAre("2", "3"));
  EXPECT_THAT(ParseCudaVisibleDevices("GPU-8f2a,MIG-77c1"), ElementsAre("GPU-8f2a", "MIG-77c1"));
  // CUDA stops at the first entry it cannot read: these hide every GPU, or those after it.
  EXPECT_THAT(ParseCudaVisibleDevices(""), IsEmpty());
  EXPECT_THAT(ParseCudaVisibleDevices("-1"), IsEmpty());
  EXPECT_THAT(ParseCudaVisibleDevices("none"), IsEmpty());
  EXPECT_THAT(ParseCudaVisibleDevices("0,-1,1"), ElementsAre("0"));
}

TEST(CountNvidiaSmiGpus, CountsGpuLinesOnly) {
  EXPECT_EQ(CountNvidiaSmiGpus(""), 0);
  EXPECT_EQ(CountNvidiaSmiGpus("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n"
                               "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"),
            2);
  EXPECT_EQ(CountNvidiaSmiGpus("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)\n"
                               "  MIG 1g.5gb      Device  0: (UUID: MIG-1)\n"
                               "  MIG 1g.5gb      Device  1: (UUID: MIG-2)\n"),
            1);
}

TEST(GpuIds, TheGivenCudaVisibleDevicesElseTheCount) {
  EXPECT_THAT(GpuIds(std::nullopt, 0), IsEmpty());
  EXPECT_THAT(GpuIds(std::nullopt, 3), ElementsAre("0", "1", "2"));
  EXPECT_THAT(GpuIds(std::string("2,3"), 8), ElementsAre("2", "3"));
  EXPECT_THAT(GpuIds(std::string(""), 8), IsEmpty());  // set but empty: no GPU for anyone
}

std::vector<api::Task> Tasks(std::vector<std::pair<api::ReplicaType, int>> specs) {
  std::vector<api::Task> tasks;
  for (auto [type, index] : specs) tasks.push_back({.type = type, .index = index});
  return tasks;
}

TEST(AssignGpus, RoundRobinOverTheWorkerTasksSkippingPs) {
  using enum api::ReplicaType;
  const std::vector<api::Task> tasks =
      Tasks({{kChief, 0}, {kPS, 0}, {kWorker, 0}, {kWorker, 1}, {kEvaluator, 0}});
  EXPECT_THAT(AssignGpus(tasks, {"0", "1"}), ElementsAre("0", "", "1", "0", "1"));
  EXPECT_THAT(AssignGpus(tasks, {"GPU-a", "GPU-b", "GPU-c", "GPU-d", "GPU-e"}),
              ElementsAre("GPU-a", "", "GPU-b", "GPU-c", "GPU-d"));
}

TEST(AssignGpus, NoGpusSetsNothing) {
  using enum api::ReplicaType;
  EXPECT_THAT(AssignGpus(Tasks({{kWorker, 0}, {kWorker, 1}}), {}), ElementsAre("", ""));
  EXPECT_THAT(AssignGpus({}, {"0"}), IsEmpty());
}

}  // namespace
}  // namespace kubetrain::local
