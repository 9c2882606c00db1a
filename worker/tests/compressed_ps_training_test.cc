// --gradient-compression in the ps modes: two workers train against a real ps over gRPC bytes
// with fp16 pushes and pulls, and learn as well as with float32 while the metrics count half the
// bytes each way.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "common/testing/temp_dir.h"
#include "prometheus/registry.h"
#include "ps/metrics.h"
#include "ps/server.h"
#include "ps/tests/ps_cluster.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/fashion_mnist_fixture.h"

namespace kubetrain::worker {
namespace {

using CompressedPsTrainingTest = FashionMnistTest;

// The bytes the ps received and sent, from its own counters.
struct PsBytes {
  double received = 0;
  double sent = 0;
};

absl::StatusOr<TrainingSummary> TrainAgainstAPs(const Dataset& train, const Dataset& test,
                                                ps::WireFloat wire, WorkerMetrics* metrics,
                                                PsBytes* bytes) {
  prometheus::Registry ps_registry;
  ps::PsMetrics ps_metrics(ps_registry);
  auto ps = ps::PsServer::Start({.address = "127.0.0.1:0"}, &ps_metrics);
  if (!ps.ok()) return ps.status();
  constexpr int kWorkers = 2;
  TrainerOptions o;
  o.mode = Mode::kPsSync;
  o.epochs = 1;
  o.batch_size = 32;
  o.ps_shared_memory = false;  // the bytes go through the socket, where compression applies
  o.gradient_compression = wire;
  o.checkpoint_dir =
      ::kubetrain::testing::FreshTempDir(std::string("compressed_ps_") + ps::WireFloatName(wire));
  std::vector<absl::StatusOr<TrainingSummary>> results(kWorkers, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  std::atomic<bool> stop{false};
  for (int rank = 0; rank < kWorkers; ++rank) {
    threads.emplace_back([&, rank] {
      CpuDevice device;
      TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, kWorkers, {(*ps)->address()}};
      Trainer trainer(o, id, device, &train, &test, rank == 0 ? metrics : nullptr);
      results[rank] = trainer.Run(stop);
    });
  }
  for (auto& t : threads) t.join();
  bytes->received = ps::testing::Sample(ps_registry, "kubetrain_ps_received_bytes_total");
  bytes->sent = ps::testing::Sample(ps_registry, "kubetrain_ps_sent_bytes_total");
  if (!results[1].ok()) return results[1].status();
  return results[0];
}

TEST_F(CompressedPsTrainingTest, Fp16PushesAndPullsLearnAsWellWithHalfTheBytes) {
  const Dataset train = First(data_->train, 8000), test = First(data_->test, 2000);
  prometheus::Registry registry;
  WorkerMetrics plain_metrics(registry, {"plain", "chief", "0"});
  MetricLabels labels{"fp16", "chief", "0"};
  labels.compression = "fp16";
  WorkerMetrics fp16_metrics(registry, labels);
  PsBytes plain_bytes, fp16_bytes;
  auto plain = TrainAgainstAPs(train, test, ps::WireFloat::kFloat32, &plain_metrics, &plain_bytes);
  auto fp16 = TrainAgainstAPs(train, test, ps::WireFloat::kFloat16, &fp16_metrics, &fp16_bytes);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(fp16.ok()) << fp16.status();
  EXPECT_EQ(fp16->steps, 125);  // 4000 examples per worker, 32 a step
  EXPECT_GT(fp16->test_accuracy, 0.65);
  EXPECT_NEAR(fp16->test_accuracy, plain->test_accuracy, 0.02);
  EXPECT_EQ(fp16_metrics.sent_bytes.Value() * 2, plain_metrics.sent_bytes.Value());
  EXPECT_EQ(fp16_metrics.received_bytes.Value() * 2, plain_metrics.received_bytes.Value());
  // What the ps itself counted on its sockets: about half each way (headers and the chief's
  // float32 initialisation and exports aside).
  EXPECT_LT(fp16_bytes.received, 0.6 * plain_bytes.received);
  EXPECT_LT(fp16_bytes.sent, 0.6 * plain_bytes.sent);
}

}  // namespace
}  // namespace kubetrain::worker
