// 16-bit tensors on the ps's wire (--gradient-compression): pushes and pulls coded as fp16 or
// bf16 parse and decode to the rounded float32 values, protobuf reads the same encoding, sizes
// and unknown encodings are refused by name, and a real ps trains in float32 from fp16 pushes
// and answers fp16 pulls with half the bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/testing/status_matchers.h"
#include "kubetrain/v1/ps.pb.h"
#include "ps/half_float.h"
#include "ps/tensor_coding.h"
#include "ps/tests/byte_buffers.h"
#include "ps/tests/ps_cluster.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::ps::testing::Buffer;
using ::kubetrain::ps::testing::Chunked;
using ::kubetrain::ps::testing::Flatten;
using ::kubetrain::ps::testing::Floats;
using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<float> Values() {
  return {0.1f, -3.14159f, 1e-6f, 70000.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f, 2.0f};
}

std::vector<float> Rounded(WireFloat wire) {
  std::vector<float> v = Values();
  RoundTrip(wire, v);
  return v;
}

void ExpectSameBits(std::span<const float> got, std::span<const float> want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_EQ(got[i], want[i]) << i;
    }
  }
}

TEST(CompressedCoding, APushInFp16IsReadByProtobufAndWidenedByTheFrame) {
  const std::vector<float> values = Values();
  const PartitionKey key{"w", 2};
  const PartitionView views[] = {{&key, 10, values, WireFloat::kFloat16}};
  SlicePins pins;
  grpc::ByteBuffer encoded =
      EncodePushRequest({.run_id = "r", .step = 5, .pull_wire = WireFloat::kBFloat16}, views, pins);
  v1::PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(encoded)));
  ASSERT_EQ(parsed.gradients_size(), 1);
  EXPECT_EQ(parsed.gradients(0).encoding(), v1::VALUE_ENCODING_FLOAT16);
  EXPECT_EQ(parsed.gradients(0).values().size(), 2 * values.size());
  EXPECT_EQ(parsed.pull_encoding(), v1::VALUE_ENCODING_BFLOAT16);

  PushFrame frame;
  ASSERT_THAT(frame.Parse(encoded), IsOk());
  ASSERT_EQ(frame.args().gradients.size(), 1u);
  const GradientBytes& pushed = frame.args().gradients[0].values;
  EXPECT_EQ(pushed.encoding(), WireFloat::kFloat16);  // widened as the store reads it
  ASSERT_EQ(pushed.size(), values.size());
  const std::vector<float> widened = Floats(pushed);
  ExpectSameBits(widened, Rounded(WireFloat::kFloat16));  // NaN stays NaN; 70000 is inf
  EXPECT_EQ(widened[3], std::numeric_limits<float>::infinity());
  EXPECT_EQ(frame.pull_wire(), WireFloat::kBFloat16);
}

TEST(CompressedCoding, APullInBf16DecodesToTheRoundedValues) {
  const std::vector<float> values = Values();
  PullFrame frame;
  frame.Add({"w", 0}, 0, values, WireFloat::kBFloat16);
  frame.Finish(7, "run");
  grpc::ByteBuffer encoded = frame.Encode();
  v1::PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(encoded)));
  EXPECT_EQ(parsed.values(0).encoding(), v1::VALUE_ENCODING_BFLOAT16);
  EXPECT_EQ(parsed.values(0).values().size(), 2 * values.size());
  EXPECT_LE(frame.byte_size(), encoded.Length() + 29);

  std::vector<float> out(values.size());
  auto header = DecodePullResponse(encoded, [&](const PartitionKey&, uint64_t, uint64_t) {
    return absl::StatusOr<std::span<float>>(std::span<float>(out));
  });
  ASSERT_THAT(header, IsOk());
  EXPECT_EQ(header->global_step, 7);
  ExpectSameBits(out, Rounded(WireFloat::kBFloat16));
}

TEST(CompressedCoding, ALargePullSplitAcrossSlicesDecodesEveryValue) {
  // More values than one widening run, in slices of an odd size: values straddle slices.
  std::vector<float> values(3 * 4096 + 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.37f - 2000.0f;
  for (WireFloat wire : {WireFloat::kFloat16, WireFloat::kBFloat16}) {
    PullFrame frame;
    frame.Add({"w", 0}, 0, values, wire);
    frame.Finish(3, "run");
    grpc::ByteBuffer encoded = Chunked(Flatten(frame.Encode()), 4093);
    std::vector<float> out(values.size());
    auto header = DecodePullResponse(encoded, [&](const PartitionKey&, uint64_t, uint64_t) {
      return absl::StatusOr<std::span<float>>(std::span<float>(out));
    });
    ASSERT_THAT(header, IsOk());
    std::vector<float> want = values;
    RoundTrip(wire, want);
    ExpectSameBits(out, want);
  }
}

TEST(CompressedCoding, AWrongByteCountOrAnUnknownEncodingIsRefusedByName) {
  v1::PushRequest request;
  v1::Partition* p = request.add_gradients();
  p->mutable_key()->set_variable("w");
  p->set_length(3);
  p->set_encoding(v1::VALUE_ENCODING_FLOAT16);
  p->set_values(std::string(12, '\0'));  // float32's size, not fp16's
  grpc::ByteBuffer wrong = Buffer(request.SerializeAsString());
  PushFrame frame;
  EXPECT_THAT(frame.Parse(wrong), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("12 value bytes for 3 fp16 values")));

  p->set_values(std::string(6, '\0'));
  p->set_encoding(static_cast<v1::ValueEncoding>(9));
  grpc::ByteBuffer unknown = Buffer(request.SerializeAsString());
  EXPECT_THAT(frame.Parse(unknown),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("value encoding 9 is not one this ps build knows")));
}

// One worker against two real ps: an fp16 push is applied in float32 (the ps's values are the
// float32 sums of rounded gradients), an fp16 pull returns those values rounded, and each
// direction moves about half the bytes of float32; a NaN still meets the ps's finite check.
TEST(CompressedPs, PushAndPullInFp16TrainInFloat32WithHalfTheBytes) {
  testing::Cluster cluster(2);
  auto plan = PlacementPlan::Build({{"dense/kernel", 100'000}, {"dense/bias", 300}}, 2);
  ASSERT_THAT(plan, IsOk());
  auto plain = cluster.Client(*plan, /*shared_memory=*/false);
  auto client = PsClient::Create({cluster.server(0).address(), cluster.server(1).address()}, *plan,
                                 {.shared_memory = false, .compression = WireFloat::kFloat16});
  ASSERT_THAT(client, IsOk());
  ModelState initial{{UpdateMode::kSync, 1, {.learning_rate = 1}}, 0, "run-1", {}};
  size_t elements = 0;
  for (const VariableSpec& v : plan->variables()) {
    VariableState& var = initial.variables.emplace_back();
    var.name = v.name;
    for (size_t i = 0; i < v.elements; ++i) var.values.push_back(1.0f + float(i % 7) / 3);
    elements += v.elements;
  }
  ASSERT_THAT(plain->Init(initial), IsOk());
  ASSERT_THAT(plain->WaitReady(absl::Seconds(30), true), IsOk());

  auto params = testing::Buffers(*plan);
  auto pulled = (*client)->Pull(testing::Spans(params));
  ASSERT_THAT(pulled, IsOk());
  auto grads = testing::Buffers(*plan, 0.1f);
  std::vector<std::span<const float>> spans(grads.begin(), grads.end());
  const double received = cluster.Total("kubetrain_ps_received_bytes_total");
  ASSERT_THAT((*client)->Push(spans, *pulled), IsOk());
  const double pushed = cluster.Total("kubetrain_ps_received_bytes_total") - received;
  EXPECT_LT(pushed, 0.55 * 4 * elements);
  EXPECT_GT(pushed, 2.0 * elements);

  // The ps hold float32: initial - fp16(0.1), exactly as float32 arithmetic gives it.
  const float step = HalfToFloat(FloatToHalf(0.1f));
  auto exact = testing::Buffers(*plan);
  ASSERT_THAT(plain->Pull(testing::Spans(exact)), IsOk());
  for (size_t v = 0; v < exact.size(); ++v) {
    for (size_t i = 0; i < exact[v].size(); i += 37) {
      ASSERT_EQ(exact[v][i], (1.0f + float(i % 7) / 3) - step) << v << "/" << i;
    }
  }
  const double sent = cluster.Total("kubetrain_ps_sent_bytes_total");
  ASSERT_THAT((*client)->Pull(testing::Spans(params)), IsOk());
  EXPECT_LT(cluster.Total("kubetrain_ps_sent_bytes_total") - sent, 0.55 * 4 * elements);
  for (size_t v = 0; v < params.size(); ++v) {
    std::vector<float> want = exact[v];
    RoundTrip(WireFloat::kFloat16, want);
    ASSERT_EQ(params[v], want) << v;
  }

  // NaN survives the 16 bits and the ps refuses it as it refuses a float32 NaN.
  grads[0][5] = std::numeric_limits<float>::quiet_NaN();
  auto now = plain->Pull(testing::Spans(exact));
  ASSERT_THAT(now, IsOk());
  absl::StatusOr<PushResult> refused = (*client)->Push(spans, *now);
  EXPECT_THAT(refused.status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has nan at index 5; push refused, nothing applied")));
}

}  // namespace
}  // namespace kubetrain::ps
