// --gradient-compression over Gloo's TCP ring (worker/collective/tcp_ring.h): 16-bit values on
// the wire, float32 sums within the documented bound, the same bits on every rank, inf and NaN
// passed on, an fp16 overflow refused by name; and two ranks training with fp16 learn as well
// as with float32. Real loopback TCP, one thread per rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "common/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/fashion_mnist_fixture.h"
#include "worker/tests/gloo_ranks.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::testing::HasSubstr;

// Runs `body(rank, communicator)` on `n` Gloo ranks (worker/tests/gloo_ranks.h), then closes
// each communicator.
void CompressedRanks(int n, const std::function<void(int, Communicator&)>& body) {
  for (const absl::Status& joined : testing::RunGlooRanks(n, [&](int rank, Communicator&comm) {
         body(rank, comm);
         (void)comm.Close();
         return absl::OkStatus();
       })) {
    EXPECT_THAT(joined, IsOk());
  }
}

// Rank r's values: magnitudes over fp16's normal range, both signs, from a seed per rank.
std::vector<float> RankValues(int rank, size_t n) {
  std::mt19937 gen(1234 + rank);
  std::uniform_real_distribution<float> exponent(-12.0f, 12.0f), sign(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = std::copysign(std::exp2(exponent(gen)), sign(gen));
  return v;
}

struct RingCase {
  ps::WireFloat wire;
  int ranks;
  size_t count;  // above TcpRing's segment (kPartBytes / 4 x ranks values): several segments
};

class CompressedRing : public ::testing::TestWithParam<RingCase> {};

TEST_P(CompressedRing, SumsWithinTheBoundAndEveryRankHoldsTheSameBits) {
  const RingCase c = GetParam();
  const double unit = c.wire == ps::WireFloat::kFloat16 ? 0x1p-11 : 0x1p-8;
  std::vector<std::vector<float>> results(c.ranks);
  CompressedRanks(c.ranks, [&](int rank, Communicator& comm) {
    ASSERT_TRUE(comm.CompressesOnTheWire());
    std::vector<float> data = RankValues(rank, c.count);
    // Two fused buffers, as the all-reduce exchange passes them.
    const size_t split = c.count / 3;
    std::vector<absl::Span<float>> buffers = {absl::MakeSpan(data.data(), split),
                                              absl::MakeSpan(data.data() + split, c.count - split)};
    ASSERT_THAT(comm.AllReduceManyCompressed(buffers, c.wire), IsOk());
    results[rank] = std::move(data);
  });
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < c.ranks; ++r) inputs.push_back(RankValues(r, c.count));
  double worst = 0;
  for (size_t i = 0; i < c.count; ++i) {
    double exact = 0, magnitudes = 0;
    for (int r = 0; r < c.ranks; ++r) {
      exact += inputs[r][i];
      magnitudes += std::fabs(inputs[r][i]);
    }
    // n roundings to 16 bits, each of a partial sum no larger than the sum of magnitudes.
    const double error = std::fabs(results[0][i] - exact);
    ASSERT_LE(error, c.ranks * unit * magnitudes * 1.0001) << i;
    worst = std::max(worst, error / magnitudes);
    for (int r = 1; r < c.ranks; ++r) {
      ASSERT_EQ(std::bit_cast<uint32_t>(results[r][i]), std::bit_cast<uint32_t>(results[0][i]))
          << "rank " << r << " element " << i;
    }
  }
  EXPECT_GT(worst, 0);
  // The sums came back through 16 bits: each is a value the format holds.
  std::vector<float> rounded = results[0];
  ps::RoundTrip(c.wire, std::span<float>(rounded));
  for (size_t i = 0; i < c.count; ++i) ASSERT_EQ(rounded[i], results[0][i]) << i;
}

// (7 << 20) + 7 values: two buffers of 2 and 3 segments, so the third segment's codes reuse the
// first one's slot.
INSTANTIATE_TEST_SUITE_P(
    Formats, CompressedRing,
    ::testing::Values(RingCase{ps::WireFloat::kFloat16, 2, (size_t{5} << 20) / 2 + 7},
                      RingCase{ps::WireFloat::kFloat16, 2, (size_t{7} << 20) + 7},
                      RingCase{ps::WireFloat::kBFloat16, 2, 1001},
                      RingCase{ps::WireFloat::kFloat16, 3, 100003}));

TEST(CompressedRing, InfinityAndNanArePassedOnNotHidden) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (ps::WireFloat wire : {ps::WireFloat::kFloat16, ps::WireFloat::kBFloat16}) {
    CompressedRanks(2, [&](int rank, Communicator& comm) {
      std::vector<float> data = {1.0f, rank == 0 ? std::nanf("") : 2.0f, rank == 1 ? kInf : 3.0f,
                                 0.5f};
      std::vector<absl::Span<float>> buffers = {absl::MakeSpan(data)};
      ASSERT_THAT(comm.AllReduceManyCompressed(buffers, wire), IsOk());
      EXPECT_EQ(data[0], 2.0f);
      EXPECT_TRUE(std::isnan(data[1]));
      EXPECT_EQ(data[2], kInf);
      EXPECT_EQ(data[3], 1.0f);
    });
  }
}

TEST(CompressedRing, AnFp16OverflowIsRefusedNamingTheFix) {
  std::vector<absl::Status> statuses(2);
  CompressedRanks(2, [&](int rank, Communicator& comm) {
    // Each value fits fp16 (1.5 x 2^15); their sum does not.
    std::vector<float> data(64, 49152.0f);
    std::vector<absl::Span<float>> buffers = {absl::MakeSpan(data)};
    statuses[rank] = comm.AllReduceManyCompressed(buffers, ps::WireFloat::kFloat16);
  });
  int named = 0;
  for (const absl::Status& s : statuses) {
    EXPECT_FALSE(s.ok());
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      EXPECT_THAT(s.message(), HasSubstr("beyond fp16's largest value 65504"));
      EXPECT_THAT(s.message(), HasSubstr("--gradient-compression=bf16"));
      ++named;
    }
  }
  EXPECT_GE(named, 1);
  // bf16 holds float32's range.
  CompressedRanks(2, [&](int, Communicator& comm) {
    std::vector<float> data(64, 49152.0f);
    std::vector<absl::Span<float>> buffers = {absl::MakeSpan(data)};
    ASSERT_THAT(comm.AllReduceManyCompressed(buffers, ps::WireFloat::kBFloat16), IsOk());
    EXPECT_EQ(data[0], 98304.0f);  // 1.5 x 2^16: exact in bf16
  });
}

using CompressedTrainingTest = FashionMnistTest;

// Two ranks train a few hundred steps of the MLP with and without fp16 on the wire: the same
// accuracy within a point, half the bytes on the chief's counter, bit-identical parameters.
TEST_F(CompressedTrainingTest, TwoRanksLearnAsWellWithFp16OnTheWire) {
  const Dataset train = First(data_->train, 16000), test = First(data_->test, 2000);
  auto train_ranks = [&](ps::WireFloat wire, WorkerMetrics* metrics) {
    std::vector<absl::StatusOr<TrainingSummary>> results(2, absl::UnknownError("not run"));
    CompressedRanks(2, [&](int rank, Communicator& comm) {
      TrainerOptions o;
      o.mode = Mode::kAllReduce;
      o.epochs = 1;
      o.batch_size = 32;
      o.gradient_compression = wire;
      CpuDevice device;
      TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, 2, {}};
      id.communicator = &comm;
      std::atomic<bool> stop{false};
      Trainer trainer(o, id, device, &train, &test, rank == 0 ? metrics : nullptr);
      results[rank] = trainer.Run(stop);
    });
    return results;
  };
  prometheus::Registry registry;
  WorkerMetrics plain_metrics(registry, {"plain", "chief", "0"});
  MetricLabels labels{"fp16", "chief", "0"};
  labels.compression = "fp16";
  WorkerMetrics fp16_metrics(registry, labels);
  auto plain = train_ranks(ps::WireFloat::kFloat32, &plain_metrics);
  auto fp16 = train_ranks(ps::WireFloat::kFloat16, &fp16_metrics);
  for (const auto* results : {&plain, &fp16}) {
    ASSERT_TRUE((*results)[0].ok()) << (*results)[0].status();
    ASSERT_TRUE((*results)[1].ok()) << (*results)[1].status();
  }
  EXPECT_EQ(fp16[0]->steps, 250);
  EXPECT_GT(fp16[0]->test_accuracy, 0.70);
  EXPECT_NEAR(fp16[0]->test_accuracy, plain[0]->test_accuracy, 0.01);
  EXPECT_EQ(fp16_metrics.sent_bytes.Value() * 2, plain_metrics.sent_bytes.Value());
}

}  // namespace
}  // namespace kubetrain::worker
