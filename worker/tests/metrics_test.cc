// kubetrain_worker_device_info as Prometheus shows it: which device and why.
#include "worker/runtime/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace kubetrain::worker {
namespace {

using ::testing::HasSubstr;

std::string Scrape(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(WorkerMetrics, DeviceInfoSaysWhyTheTaskRunsOnTheCpu) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {.job = "fm",
                                   .role = "chief",
                                   .index = "0",
                                   .device = "cpu",
                                   .device_name = "cpu",
                                   .device_reason = "driver-too-old"});
  EXPECT_THAT(Scrape(registry),
              HasSubstr("kubetrain_worker_device_info{device=\"cpu\",index=\"0\",job=\"fm\","
                        "name=\"cpu\",reason=\"driver-too-old\",role=\"chief\"} 1"));
}

TEST(WorkerMetrics, DeviceInfoReasonIsNeverEmpty) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {"fm", "worker", "1"});
  EXPECT_THAT(Scrape(registry), HasSubstr("reason=\"unknown\""));
}

}  // namespace
}  // namespace kubetrain::worker
