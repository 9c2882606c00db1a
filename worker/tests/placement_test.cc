// kubetrain-worker's decisions before it connects: which role and rank a TF_CONFIG (or the flags
// standing in for it) gives a task, which communicator an all-reduce job gets on which device,
// which GPU request it makes, and the errors for configurations that cannot run.
#include "worker/launch/placement.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/launch/options.h"

namespace kubetrain::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A ps-sync task configured by TF_CONFIG.
Options WithTfConfig(const std::string& tf_config, Mode mode = Mode::kPsSync) {
  Options o;
  o.tf_config = tf_config;
  o.trainer.mode = mode;
  return o;
}

constexpr char kChiefWorkersPs[] =
    R"({"cluster":{"chief":["chief-0:2222"],"worker":["worker-0:2222","worker-1:2222"],)"
    R"("ps":["ps-0:2222","ps-1:2222"]},"task":{"type":"%s","index":%d}})";

std::string ChiefWorkersPs(const std::string& type, int index) {
  char buffer[512];
  snprintf(buffer, sizeof(buffer), kChiefWorkersPs, type.c_str(), index);
  return buffer;
}

TEST(Identify, AWorkerIsRankedAfterTheChief) {
  absl::StatusOr<TaskPlace> place = Identify(WithTfConfig(ChiefWorkersPs("worker", 1)));
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->id.role, Role::kWorker);
  EXPECT_EQ(place->id.rank, 2);
  EXPECT_EQ(place->id.num_workers, 3);
  EXPECT_THAT(place->id.ps_addresses, ElementsAre("ps-0:2222", "ps-1:2222"));
  EXPECT_EQ(place->rendezvous.chief, "chief-0:2222");
  EXPECT_EQ(place->rendezvous.self, "worker-1:2222");
  EXPECT_THAT(place->rendezvous.ranks,
              ElementsAre("chief-0:2222", "worker-0:2222", "worker-1:2222"));
}

TEST(Identify, TheChiefTaskIsRankZero) {
  absl::StatusOr<TaskPlace> place = Identify(WithTfConfig(ChiefWorkersPs("chief", 0)));
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->id.role, Role::kChief);
  EXPECT_EQ(place->id.rank, 0);
  EXPECT_EQ(place->id.num_workers, 3);
}

TEST(Identify, KubeflowsMasterIsTheChief) {
  absl::StatusOr<TaskPlace> place =
      Identify(WithTfConfig(R"({"cluster":{"master":["m:1"],"worker":["w:1"],"ps":["p:1"]},)"
                            R"("task":{"type":"master","index":0}})"));
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->id.role, Role::kChief);
  EXPECT_EQ(place->id.num_workers, 2);
  EXPECT_EQ(place->rendezvous.chief, "m:1");
}

TEST(Identify, WithoutAChiefWorkerZeroIsTheChief) {
  const char* config =
      R"({"cluster":{"worker":["w0:1","w1:1"]},"task":{"type":"worker","index":%d}})";
  char buffer[256];
  snprintf(buffer, sizeof(buffer), config, 0);
  absl::StatusOr<TaskPlace> first = Identify(WithTfConfig(buffer, Mode::kAllReduce));
  snprintf(buffer, sizeof(buffer), config, 1);
  absl::StatusOr<TaskPlace> second = Identify(WithTfConfig(buffer, Mode::kAllReduce));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->id.role, Role::kChief);
  EXPECT_EQ(first->id.rank, 0);
  EXPECT_EQ(second->id.role, Role::kWorker);
  EXPECT_EQ(second->id.rank, 1);
  EXPECT_EQ(second->id.num_workers, 2);
  EXPECT_THAT(second->id.ps_addresses, IsEmpty());
  // Every rank meets at worker 0.
  EXPECT_EQ(second->rendezvous.chief, "w0:1");
  EXPECT_THAT(second->rendezvous.ranks, ElementsAre("w0:1", "w1:1"));
}

TEST(Identify, AnEvaluatorHasNoPlaceAmongTheRanks) {
  absl::StatusOr<TaskPlace> place = Identify(WithTfConfig(
      R"({"cluster":{"chief":["c:1"],"ps":["p:1"]},"task":{"type":"evaluator","index":0}})"));
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->id.role, Role::kEvaluator);
  EXPECT_EQ(place->id.num_workers, 1);
  EXPECT_EQ(place->rendezvous.self, "");
}

// A TF_CONFIG that Identify refuses in `mode`: the code where it matters and what the message
// says.
struct RefusedTfConfig {
  const char* name;
  std::string tf_config;
  Mode mode;
  std::optional<absl::StatusCode> code;
  std::vector<std::string> message_parts;
};

class IdentifyRefuses : public ::testing::TestWithParam<RefusedTfConfig> {};

TEST_P(IdentifyRefuses, SayingWhy) {
  const RefusedTfConfig& c = GetParam();
  absl::StatusOr<TaskPlace> place = Identify(WithTfConfig(c.tf_config, c.mode));
  ASSERT_FALSE(place.ok());
  if (c.code.has_value()) {
    EXPECT_EQ(place.status().code(), *c.code);
  }
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(place.status().message(), HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Identify, IdentifyRefuses,
    ::testing::Values(
        RefusedTfConfig{"APsTaskIsSentToKubetrainPs",
                        ChiefWorkersPs("ps", 0),
                        Mode::kPsSync,
                        absl::StatusCode::kInvalidArgument,
                        {"TF_CONFIG: task.type", "kubetrain-ps"}},
        RefusedTfConfig{"AnUnknownTaskTypeIsNamed",
                        R"({"cluster":{"chief":["c:1"],"ps":["p:1"],"trainer":["t:1"]},)"
                        R"("task":{"type":"trainer","index":0}})",
                        Mode::kPsSync,
                        std::nullopt,
                        {"task.type: unsupported \"trainer\""}},
        RefusedTfConfig{"MalformedTfConfigNamesTfConfig",
                        "{not json",
                        Mode::kPsSync,
                        std::nullopt,
                        {"TF_CONFIG"}},
        RefusedTfConfig{"PsModesNeedAParameterServer",
                        R"({"cluster":{"chief":["c:1"]},"task":{"type":"chief","index":0}})",
                        Mode::kPsSync,
                        absl::StatusCode::kInvalidArgument,
                        {"cluster.ps is empty", "--ps"}},
        RefusedTfConfig{"AllReduceRefusesPsTasks",
                        ChiefWorkersPs("worker", 0),
                        Mode::kAllReduce,
                        std::nullopt,
                        {"2 ps task(s)", "remove the PS replica spec"}},
        RefusedTfConfig{"AllReduceRefusesAnEvaluator",
                        R"({"cluster":{"chief":["c:1"]},"task":{"type":"evaluator","index":0}})",
                        Mode::kAllReduce,
                        std::nullopt,
                        {"remove the Evaluator replica"}}),
    [](const ::testing::TestParamInfo<RefusedTfConfig>& info) {
      return std::string(info.param.name);
    });

TEST(Identify, FlagsStandInForTfConfig) {
  Options o;
  o.ps = {"127.0.0.1:5000"};
  o.worker_index = 2;
  o.num_workers = 3;
  absl::StatusOr<TaskPlace> place = Identify(o);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->id.role, Role::kWorker);
  EXPECT_EQ(place->id.rank, 2);
  EXPECT_EQ(place->id.num_workers, 3);
  EXPECT_THAT(place->id.ps_addresses, ElementsAre("127.0.0.1:5000"));
  EXPECT_THAT(place->rendezvous.ranks, IsEmpty());

  o.worker_index = 0;
  place = Identify(o);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->id.role, Role::kChief);
}

TEST(Identify, AWorkerIndexOutsideTheJobNamesTheFlag) {
  Options o;
  o.ps = {"127.0.0.1:5000"};
  o.worker_index = 3;
  o.num_workers = 3;
  absl::StatusOr<TaskPlace> place = Identify(o);
  ASSERT_FALSE(place.ok());
  EXPECT_THAT(place.status().message(), HasSubstr("--worker-index: must be in [0, --num-workers)"));
}

TEST(Identify, AllReduceWithoutTfConfigMeetsAtTheCoordinatorFlag) {
  Options o;
  o.trainer.mode = Mode::kAllReduce;
  o.num_workers = 2;
  o.worker_index = 1;
  absl::StatusOr<TaskPlace> missing = Identify(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("--coordinator"));

  o.coordinator = "127.0.0.1:7000";
  absl::StatusOr<TaskPlace> place = Identify(o);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->rendezvous.chief, "127.0.0.1:7000");
  EXPECT_EQ(place->id.rank, 1);
}

TEST(CommunicatorFor, AutoIsNcclOnAGpuAndHostMemoryOnTheCpu) {
  EXPECT_EQ(CommunicatorFor("auto", "cuda").value_or(""), "nccl");
  EXPECT_EQ(CommunicatorFor("auto", "cpu").value_or(""), "host");
  EXPECT_EQ(CommunicatorFor("gloo", "cpu").value_or(""), "gloo");
  EXPECT_EQ(CommunicatorFor("shm", "cpu").value_or(""), "shm");
  EXPECT_EQ(CommunicatorFor("nccl", "cuda").value_or(""), "nccl");
}

TEST(CommunicatorFor, ACommunicatorForTheOtherMemoryIsRefused) {
  absl::StatusOr<std::string> nccl_on_cpu = CommunicatorFor("nccl", "cpu");
  ASSERT_FALSE(nccl_on_cpu.ok());
  EXPECT_EQ(nccl_on_cpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(nccl_on_cpu.status().message(), HasSubstr("--communicator nccl"));
  EXPECT_THAT(nccl_on_cpu.status().message(), HasSubstr("--device cuda"));
  for (const char* host : {"gloo", "shm"}) {
    absl::StatusOr<std::string> on_gpu = CommunicatorFor(host, "cuda");
    ASSERT_FALSE(on_gpu.ok()) << host;
    EXPECT_THAT(on_gpu.status().message(), HasSubstr(std::string("--communicator ") + host));
    EXPECT_THAT(on_gpu.status().message(), HasSubstr("use --communicator nccl"));
  }
}

TEST(GlooHost, TheBindAddressThenTheTasksOwnHostThenTheHostName) {
  Options o;
  Rendezvous r{.chief = "c:1", .self = "10.1.2.3:2222", .ranks = {}};
  o.bind_address = "192.168.0.5";
  EXPECT_EQ(GlooHost(o, r, "machine"), "192.168.0.5");
  o.bind_address = "0.0.0.0";
  EXPECT_EQ(GlooHost(o, r, "machine"), "10.1.2.3");
  r.self = "";
  EXPECT_EQ(GlooHost(o, r, "machine"), "machine");
}

TEST(DeviceRequestFor, CarriesTheFlagsTheEnvironmentAndTheRanks) {
  Options o = WithTfConfig(ChiefWorkersPs("worker", 0));
  o.device = "cuda";
  o.threads = 4;
  o.tf32 = true;
  o.precision = Precision::kBFloat16;
  absl::StatusOr<TaskPlace> place = Identify(o);
  ASSERT_TRUE(place.ok()) << place.status();
  DeviceRequest request =
      DeviceRequestFor(o, *place, {.local_rank = "3", .cuda_visible_devices = "0,1"});
  EXPECT_EQ(request.kind, "cuda");
  EXPECT_EQ(request.cpu.blas_threads, 4);
  EXPECT_EQ(request.tf32, true);
  EXPECT_EQ(request.precision, Precision::kBFloat16);
  EXPECT_FALSE(request.cuda.flag.has_value());
  EXPECT_EQ(request.cuda.local_rank, "3");
  EXPECT_EQ(request.cuda.cuda_visible_devices, "0,1");
  EXPECT_EQ(request.cuda.rank, 1);
  EXPECT_THAT(request.cuda.rank_addresses,
              ElementsAre("chief-0:2222", "worker-0:2222", "worker-1:2222"));

  o.cuda_device = 2;
  EXPECT_EQ(DeviceRequestFor(o, *place, {}).cuda.flag, 2);
}

TEST(DeviceRequestFor, AnEvaluatorAsksWithoutARank) {
  Options o = WithTfConfig(
      R"({"cluster":{"chief":["c:1"],"ps":["p:1"]},"task":{"type":"evaluator","index":0}})");
  absl::StatusOr<TaskPlace> place = Identify(o);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(DeviceRequestFor(o, *place, {}).cuda.rank, -1);
}

absl::StatusOr<Options> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kubetrain-worker");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return ParseFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(ParseFlags, TheTfConfigFlagPlacesTheTask) {
  absl::StatusOr<Options> o =
      Parse({"--mode=allreduce",
             "--tf-config=" + std::string(R"({"cluster":{"worker":["w0:1","w1:1"]},)") +
                 R"("task":{"type":"worker","index":1}})"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.mode, Mode::kAllReduce);
  absl::StatusOr<TaskPlace> place = Identify(*o);
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->id.rank, 1);
  EXPECT_EQ(place->rendezvous.chief, "w0:1");
}

TEST(ParseFlags, ABadValueNamesItsFlagAndTheAllowedOnes) {
  absl::StatusOr<Options> mode = Parse({"--mode=ring"});
  ASSERT_FALSE(mode.ok());
  EXPECT_THAT(
      mode.status().message(),
      HasSubstr("--mode: unsupported value \"ring\"; allowed: ps-sync, ps-async, allreduce"));
  absl::StatusOr<Options> communicator = Parse({"--communicator=mpi"});
  ASSERT_FALSE(communicator.ok());
  EXPECT_THAT(
      communicator.status().message(),
      HasSubstr("--communicator: unsupported value \"mpi\"; allowed: auto, gloo, shm, nccl"));
  absl::StatusOr<Options> fusion = Parse({"--fusion-threshold-mb=0"});
  ASSERT_FALSE(fusion.ok());
  EXPECT_THAT(fusion.status().message(), HasSubstr("--fusion-threshold-mb: must be >= 1"));
  absl::StatusOr<Options> compression = Parse({"--gradient-compression=fp8"});
  ASSERT_FALSE(compression.ok());
  EXPECT_THAT(
      compression.status().message(),
      HasSubstr("--gradient-compression: unsupported value \"fp8\"; allowed: none, fp16, bf16"));
  absl::StatusOr<Options> precision = Parse({"--precision=fp16"});
  ASSERT_FALSE(precision.ok());
  EXPECT_THAT(precision.status().message(),
              HasSubstr("--precision: unsupported value \"fp16\"; allowed: fp32, bf16"));
}

TEST(ParseFlags, PrecisionIsFp32UnlessAsked) {
  absl::StatusOr<Options> plain = Parse({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->precision, Precision::kFloat32);
  absl::StatusOr<Options> bf16 = Parse({"--precision=bf16"});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->precision, Precision::kBFloat16);
}

TEST(ParseFlags, GradientCompressionIsOffUnlessAsked) {
  absl::StatusOr<Options> plain = Parse({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->trainer.gradient_compression, ps::WireFloat::kFloat32);
  EXPECT_FALSE(plain->trainer.overlap_allreduce);
  absl::StatusOr<Options> bf16 = Parse({"--gradient-compression=bf16", "--overlap-allreduce"});
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->trainer.gradient_compression, ps::WireFloat::kBFloat16);
  EXPECT_TRUE(bf16->trainer.overlap_allreduce);
}

TEST(SummaryDirFor, TheChiefWritesBesideItsCheckpointsTheEvaluatorInEval) {
  TrainerOptions o;
  o.checkpoint_dir = "/ckpt/job/";
  EXPECT_EQ(SummaryDirFor(o, Role::kChief), "/ckpt/job/summaries");
  EXPECT_EQ(SummaryDirFor(o, Role::kEvaluator), "/ckpt/job/summaries/eval");
  EXPECT_EQ(SummaryDirFor(o, Role::kWorker), "") << "training workers write no summaries";
  o.summary_dir = "/tb";
  EXPECT_EQ(SummaryDirFor(o, Role::kChief), "/tb");
  EXPECT_EQ(SummaryDirFor(o, Role::kEvaluator), "/tb/eval");
  EXPECT_EQ(SummaryDirFor(TrainerOptions{}, Role::kEvaluator), "")
      << "an evaluator without either folder writes none";
}

TEST(RoleName, NamesEachRole) {
  EXPECT_EQ(RoleName(Role::kChief), "chief");
  EXPECT_EQ(RoleName(Role::kWorker), "worker");
  EXPECT_EQ(RoleName(Role::kEvaluator), "evaluator");
}

}  // namespace
}  // namespace kubetrain::worker
