// The device rules of worker/core/device_choice.h, table by table: which GPU a task uses, what a
// CUDA probe means, what --device decides, and how NCCL's duplicate-GPU error reads. Pure
// functions: these run the same with and without a GPU.
#include "worker/core/device_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace kubetrain::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Two pods of a job on a cluster: every rank on a host of its own.
const std::vector<std::string> kPods = {"j-worker-0.j.ns.svc:2222", "j-worker-1.j.ns.svc:2222"};
// `kubetrain run` or processes started by hand: every rank on loopback.
const std::vector<std::string> kLoopback = {"127.0.0.1:4000", "127.0.0.1:4001", "localhost:4002"};
// Two nodes with two ranks each (a chief and three workers).
const std::vector<std::string> kTwoNodes = {"node-a:1", "node-b:1", "node-a:2", "node-b:2"};

struct OrdinalCase {
  std::string name;
  CudaOrdinalInputs in;
  int ordinal;                     // expected when error is empty
  std::string source;              // expected when error is empty
  std::vector<std::string> error;  // substrings of the expected error; empty: success
};

TEST(ChooseCudaOrdinal, Table) {
  const std::vector<OrdinalCase> cases = {
      {"nothing set: GPU 0", {.visible_devices = 1}, 0, "default", {}},
      {"the flag wins over everything",
       {.flag = 1, .local_rank = "0", .rank_addresses = kLoopback, .rank = 2, .visible_devices = 2},
       1,
       "--cuda-device",
       {}},
      {"flag beyond the visible devices",
       {.flag = 2, .cuda_visible_devices = "3,5", .visible_devices = 2},
       0,
       "",
       {"--cuda-device=2: only 2 CUDA devices are visible", "CUDA_VISIBLE_DEVICES=\"3,5\"",
        "choose 0..1"}},
      {"flag with one GPU names the only choice",
       {.flag = 1, .visible_devices = 1},
       0,
       "",
       {"only 1 CUDA device is visible (CUDA_VISIBLE_DEVICES unset)", "the only one is 0"}},
      {"LOCAL_RANK wins over TF_CONFIG",
       {.local_rank = "3", .rank_addresses = kLoopback, .rank = 0, .visible_devices = 4},
       3,
       "LOCAL_RANK",
       {}},
      {"empty LOCAL_RANK counts as unset",
       {.local_rank = "", .visible_devices = 2},
       0,
       "default",
       {}},
      {"LOCAL_RANK that is no number",
       {.local_rank = "one", .visible_devices = 2},
       0,
       "",
       {"LOCAL_RANK=\"one\": not a non-negative integer", "--cuda-device"}},
      {"negative LOCAL_RANK", {.local_rank = "-1", .visible_devices = 2}, 0, "", {"LOCAL_RANK"}},
      {"LOCAL_RANK beyond the visible devices",
       {.local_rank = "1", .cuda_visible_devices = "0", .visible_devices = 1},
       0,
       "",
       {"LOCAL_RANK=1, but only 1 CUDA device is visible", "NCCL refuses", "nvidia.com/gpu: 1",
        "CUDA_VISIBLE_DEVICES", "--cuda-device"}},
      {"one pod per rank: each sees its own GPU as 0",
       {.rank_addresses = kPods, .rank = 1, .visible_devices = 1},
       0,
       "TF_CONFIG",
       {}},
      {"loopback ranks take GPUs in rank order (localhost is loopback too)",
       {.rank_addresses = kLoopback, .rank = 2, .visible_devices = 4},
       2,
       "TF_CONFIG",
       {}},
      {"the local rank counts only this host's ranks",
       {.rank_addresses = kTwoNodes, .rank = 3, .visible_devices = 2},
       1,
       "TF_CONFIG",
       {}},
      {"more ranks on this host than GPUs",
       {.rank_addresses = kLoopback, .rank = 0, .visible_devices = 2},
       0,
       "",
       {"TF_CONFIG puts 3 ranks of this job on this host (ranks 0, 1, 2; this is rank 0)",
        "only 2 CUDA devices are visible", "NCCL refuses", "nvidia.com/gpu: 1", "--cuda-device"}},
      {"an evaluator is no rank: GPU 0",
       {.rank_addresses = kLoopback, .rank = -1, .visible_devices = 1},
       0,
       "default",
       {}},
      {"no GPU at all", {.visible_devices = 0}, 0, "", {"no CUDA device to choose from"}},
  };
  for (const OrdinalCase& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<CudaOrdinal> got = ChooseCudaOrdinal(c.in);
    if (c.error.empty()) {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->ordinal, c.ordinal);
      EXPECT_EQ(got->source, c.source);
      continue;
    }
    ASSERT_FALSE(got.ok()) << "chose " << got->ordinal;
    for (const std::string& part : c.error) {
      EXPECT_THAT(std::string(got.status().message()), HasSubstr(part));
    }
  }
}

TEST(ChooseCudaOrdinal, ErrorCodesSayWhoMustAct) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      ChooseCudaOrdinal({.local_rank = "x", .visible_devices = 1}).status()));
  EXPECT_TRUE(
      absl::IsFailedPrecondition(ChooseCudaOrdinal({.flag = 3, .visible_devices = 1}).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      ChooseCudaOrdinal({.rank_addresses = kLoopback, .rank = 1, .visible_devices = 1}).status()));
}

struct ProbeCase {
  std::string name;
  CudaProbeReport report;
  bool available;
  std::string reason;
  bool suspicious;
  std::vector<std::string> message;  // substrings
};

TEST(ExplainCudaProbe, Table) {
  const std::vector<ProbeCase> cases = {
      {"a GPU",
       {.device_count = 2, .driver_version = 13000, .runtime_version = 13000},
       true,
       "gpu",
       false,
       {}},
      {"a build without CUDA",
       {.built_with_cuda = false},
       false,
       "no-cuda-build",
       false,
       {"no CUDA backend", "KUBETRAIN_CUDA"}},
      {"a CPU machine: no driver at all",
       {.error = cuda_error::kInsufficientDriver, .runtime_version = 13000},
       false,
       "no-driver",
       false,
       {"no CUDA device/driver: no NVIDIA driver is loaded", "CUDA 13.0",
        "needs NVIDIA driver 580 or newer"}},
      {"a 570 driver (CUDA 12.8) under the CUDA 13 runtime",
       {.error = cuda_error::kInsufficientDriver,
        .driver_version = 12080,
        .runtime_version = 13000},
       false,
       "driver-too-old",
       true,
       {"CUDA driver too old: the NVIDIA driver supports CUDA 12.8",
        "this build's runtime is CUDA 13.0, which needs NVIDIA driver 580 or newer",
        "upgrade the node's NVIDIA driver"}},
      {"forward compatibility refused on this GPU",
       {.error = cuda_error::kCompatNotSupportedOnDevice,
        .driver_version = 12020,
        .runtime_version = 13000},
       false,
       "driver-too-old",
       true,
       {"CUDA 12.2", "cuda-compat", "580"}},
      {"a driver without a visible GPU",
       {.error = cuda_error::kNoDevice, .driver_version = 13000, .runtime_version = 13000},
       false,
       "no-gpu",
       false,
       {"no CUDA device/driver", "CUDA_VISIBLE_DEVICES", "nvidia.com/gpu"}},
      {"a count of zero",
       {.device_count = 0, .driver_version = 13000, .runtime_version = 13000},
       false,
       "no-gpu",
       false,
       {"no CUDA device/driver", "nvidia.com/gpu"}},
      {"the toolkit's stub libcuda",
       {.error = cuda_error::kStubLibrary, .runtime_version = 13000},
       false,
       "no-driver",
       false,
       {"stub", "LD_LIBRARY_PATH"}},
      {"kernel module and libcuda disagree",
       {.error = cuda_error::kSystemDriverMismatch,
        .driver_version = 13000,
        .runtime_version = 13000},
       false,
       "driver-mismatch",
       true,
       {"NVIDIA driver mismatch", "reboot"}},
      {"anything else keeps CUDA's words",
       {.error = 999,
        .error_text = "cudaErrorUnknown: unknown error",
        .driver_version = 13000,
        .runtime_version = 13000},
       false,
       "cuda-error",
       true,
       {"CUDA failed to start: cudaErrorUnknown: unknown error", "driver supports CUDA 13.0"}},
  };
  for (const ProbeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const CudaAvailability a = ExplainCudaProbe(c.report);
    EXPECT_EQ(a.available, c.available);
    EXPECT_EQ(a.reason, c.reason);
    EXPECT_EQ(a.suspicious, c.suspicious);
    if (c.available) {
      EXPECT_EQ(a.message, "");
    }
    for (const std::string& part : c.message) EXPECT_THAT(a.message, HasSubstr(part));
  }
}

TEST(ExplainCudaProbe, ReportsTheVersions) {
  const CudaAvailability a = ExplainCudaProbe({.error = cuda_error::kInsufficientDriver,
                                               .driver_version = 12040,
                                               .runtime_version = 13010});
  EXPECT_EQ(a.driver_cuda, "12.4");
  EXPECT_EQ(a.runtime_cuda, "13.1");
  EXPECT_EQ(CudaVersionString(0), "none");
  EXPECT_EQ(MinimumDriverFor(13000), "580");
  EXPECT_EQ(MinimumDriverFor(12080), "525");
  EXPECT_EQ(MinimumDriverFor(99000), "");
}

TEST(DecideDevice, Table) {
  const CudaAvailability gpu = ExplainCudaProbe({.device_count = 1, .runtime_version = 13000});
  const CudaAvailability none =
      ExplainCudaProbe({.error = cuda_error::kInsufficientDriver, .runtime_version = 13000});
  const CudaAvailability old = ExplainCudaProbe({.error = cuda_error::kInsufficientDriver,
                                                 .driver_version = 12080,
                                                 .runtime_version = 13000});
  struct Case {
    std::string kind;
    CudaAvailability cuda;
    bool use_cuda;
    std::string reason;
    bool warn;
  };
  const std::vector<Case> cases = {
      {"cpu", gpu, false, "requested", false},   {"cpu", none, false, "requested", false},
      {"cuda", gpu, true, "requested", false},   {"auto", gpu, true, "gpu", false},
      {"auto", none, false, "no-driver", false}, {"auto", old, false, "driver-too-old", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind + " " + c.cuda.reason);
    absl::StatusOr<DeviceDecision> d = DecideDevice(c.kind, c.cuda);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->use_cuda, c.use_cuda);
    EXPECT_EQ(d->reason, c.reason);
    EXPECT_EQ(d->warn, c.warn);
    EXPECT_EQ(d->fallback, c.use_cuda || c.kind == "cpu" ? "" : c.cuda.message);
  }
}

TEST(DecideDevice, CudaWithoutCudaFailsNamingTheCauseAndTheWayOut) {
  const CudaAvailability old = ExplainCudaProbe({.error = cuda_error::kInsufficientDriver,
                                                 .driver_version = 12080,
                                                 .runtime_version = 13000});
  absl::StatusOr<DeviceDecision> d = DecideDevice("cuda", old);
  ASSERT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  EXPECT_THAT(std::string(d.status().message()), StartsWith("--device=cuda: CUDA driver too old"));
  EXPECT_THAT(d.status().message(), HasSubstr("580"));
  EXPECT_THAT(d.status().message(), HasSubstr("or pass --device=cpu"));
}

TEST(DecideDevice, UnknownKindsAreRefused) {
  for (const char* kind : {"tpu", "CPU", ""}) {
    absl::StatusOr<DeviceDecision> d = DecideDevice(kind, {});
    EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << kind;
    EXPECT_THAT(d.status().message(), HasSubstr("auto, cpu, cuda"));
  }
}

TEST(ExplainDuplicateGpu, TranslatesNcclsDuplicateGpuOnly) {
  const absl::Status nccl = absl::FailedPreconditionError(
      "nccl_communicator.cc:80: ncclCommInitRankConfig failed: invalid usage: Duplicate GPU "
      "detected : rank 1 and rank 0 both on CUDA device 1a000");
  const absl::Status explained = ExplainDuplicateGpu(nccl, 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(explained));
  EXPECT_THAT(std::string(explained.message()),
              StartsWith("two ranks of this job got the same GPU"));
  EXPECT_THAT(explained.message(), HasSubstr("CUDA device 0"));
  EXPECT_THAT(explained.message(), HasSubstr("nvidia.com/gpu: 1"));
  EXPECT_THAT(explained.message(), HasSubstr("--cuda-device"));
  EXPECT_THAT(explained.message(), HasSubstr("rank 1 and rank 0 both on CUDA device 1a000"));

  const absl::Status other = absl::UnavailableError("ncclCommInitRankConfig failed: remote error");
  EXPECT_EQ(ExplainDuplicateGpu(other, 0), other);
  EXPECT_TRUE(ExplainDuplicateGpu(absl::OkStatus(), 0).ok());
  EXPECT_THAT(ExplainDuplicateGpu(other, 0).message(), Not(HasSubstr("same GPU")));
}

}  // namespace
}  // namespace kubetrain::worker
