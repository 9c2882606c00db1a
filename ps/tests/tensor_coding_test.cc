// ps/tensor_coding.h against protobuf itself: what it encodes protobuf parses to the same message,
// what protobuf encodes it decodes to the same values, bit for bit, also when the bytes arrive
// split over many slices; sizes that disagree are refused with a message naming the partition.
#include "ps/tensor_coding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "kubetrain/v1/ps.pb.h"
#include "ps/tests/byte_buffers.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::ps::testing::Chunked;
using ::kubetrain::ps::testing::Flatten;
using ::kubetrain::ps::testing::Floats;
using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::HasSubstr;

// Values whose bits must survive exactly: signed zero, subnormals, infinities, a NaN payload.
std::vector<float> Awkward(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.37f - 1000.0f;
  const float specials[] = {
      -0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
      -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i) v[i] = specials[i];
  return v;
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST(TensorCoding, PushRequestParsesWithProtobufAndBack) {
  // 5 MiB: over gRPC's 4 MiB default and the plan's partition size, plus a tiny partition.
  const std::vector<float> big = Awkward((5u << 20) / sizeof(float));
  const std::vector<float> small = Awkward(3);
  const PartitionKey big_key{"embedding", 2}, small_key{"bias", 0};
  const PartitionView views[] = {{&big_key, 4096, big}, {&small_key, 0, small}};
  grpc::ByteBuffer encoded;
  {
    SlicePins pins;
    encoded = EncodePushRequest({"run-7", 3, 42}, views, pins);
    v1::PushRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(encoded)));
    EXPECT_EQ(parsed.run_id(), "run-7");
    EXPECT_EQ(parsed.worker(), 3u);
    EXPECT_EQ(parsed.step(), 42);
    ASSERT_EQ(parsed.gradients_size(), 2);
    EXPECT_EQ(parsed.gradients(0).key().variable(), "embedding");
    EXPECT_EQ(parsed.gradients(0).key().index(), 2u);
    EXPECT_EQ(parsed.gradients(0).offset(), 4096u);
    EXPECT_EQ(parsed.gradients(0).length(), big.size());
    EXPECT_EQ(parsed.gradients(0).values().size(), big.size() * sizeof(float));
    EXPECT_EQ(0, std::memcmp(parsed.gradients(0).values().data(), big.data(),
                             big.size() * sizeof(float)));
    EXPECT_EQ(parsed.gradients(1).key().variable(), "bias");

    // The server side reads protobuf's bytes, whole and split into odd-sized slices.
    for (size_t chunk : {size_t{1} << 30, size_t{4093}, size_t{7}}) {
      grpc::ByteBuffer wire = Chunked(parsed.SerializeAsString(), chunk);
      PushFrame frame;
      ASSERT_TRUE(frame.Parse(wire).ok()) << chunk;
      EXPECT_EQ(frame.args().run_id, "run-7");
      EXPECT_EQ(frame.args().step, 42);
      EXPECT_EQ(frame.worker(), 3u);
      ASSERT_EQ(frame.args().gradients.size(), 2u);
      EXPECT_EQ(frame.args().gradients[0].key, big_key);
      EXPECT_EQ(frame.args().gradients[1].key, small_key);
      EXPECT_TRUE(SameBits(Floats(frame.args().gradients[0].values), big));
      EXPECT_TRUE(SameBits(Floats(frame.args().gradients[1].values), small));
    }
    encoded.Clear();  // drops the last references to `big` and `small` before pins waits
  }
}

// PushAndPull's two fields: the step a push's pull waits for, and whether the push was stale.
TEST(TensorCoding, PushAndPullFieldsRoundTripThroughProtobuf) {
  const std::vector<float> grad = Awkward(5);
  const PartitionKey key{"w", 0};
  const PartitionView view{&key, 0, grad};
  SlicePins pins;
  PushHeader header{"run-1", 2, 41};
  header.pull_min_step = 42;
  grpc::ByteBuffer encoded = EncodePushRequest(header, {&view, 1}, pins);
  v1::PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(encoded)));
  EXPECT_EQ(parsed.pull_min_step(), 42);
  grpc::ByteBuffer wire = Chunked(parsed.SerializeAsString(), 3);
  PushFrame frame;
  ASSERT_THAT(frame.Parse(wire), IsOk());
  EXPECT_EQ(frame.pull_min_step(), 42);
  EXPECT_EQ(frame.args().step, 41);
  // A plain push leaves the field out: its bytes are those of a Push of an earlier release.
  grpc::ByteBuffer plain = EncodePushRequest({"run-1", 2, 41}, {&view, 1}, pins);
  ASSERT_TRUE(parsed.ParseFromString(Flatten(plain)));
  EXPECT_EQ(parsed.pull_min_step(), 0);
  EXPECT_EQ(Flatten(plain).size() + 2, Flatten(encoded).size());

  for (bool stale : {false, true}) {
    PullFrame answer;
    answer.Add(key, 0, grad);
    answer.Finish(42, "run-1", 84, stale);
    v1::PullResponse response;
    ASSERT_TRUE(response.ParseFromString(Flatten(answer.Encode())));
    EXPECT_EQ(response.push_stale(), stale);
    EXPECT_EQ(response.gradients_applied(), 84);
    std::vector<float> out(grad.size());
    auto decoded = DecodePullResponse(
        Chunked(response.SerializeAsString(), 4),
        [&](const PartitionKey&, uint64_t, uint64_t) -> absl::StatusOr<std::span<float>> {
          return std::span<float>(out);
        });
    ASSERT_THAT(decoded, IsOk());
    EXPECT_EQ(decoded->push_stale, stale);
    EXPECT_EQ(decoded->global_step, 42);
    EXPECT_TRUE(SameBits(out, grad));
  }
  encoded.Clear();
  plain.Clear();
  pins.WaitUntilReleased();
}

TEST(TensorCoding, PushEncodingReferencesCallerMemoryUntilReleased) {
  std::vector<float> grad(1024, 1.5f);
  const PartitionKey key{"w", 0};
  const PartitionView view{&key, 0, grad};
  SlicePins pins;
  grpc::ByteBuffer encoded = EncodePushRequest({}, {&view, 1}, pins);
  grad[0] = 2.5f;  // not copied: the encoded message sees the change
  PushFrame frame;
  ASSERT_THAT(frame.Parse(encoded), IsOk());
  EXPECT_EQ(Floats(frame.args().gradients[0].values)[0], 2.5f);
  frame = PushFrame();
  encoded.Clear();
  pins.WaitUntilReleased();  // returns: nothing references `grad` any more
}

TEST(TensorCoding, PullResponseRoundTripsThroughProtobufExactly) {
  const std::vector<float> a = Awkward((4u << 20) / sizeof(float) + 5);  // over 4 MiB
  const std::vector<float> b = Awkward(17);
  PullFrame frame;
  frame.Add({"embedding", 1}, 100, a);
  frame.Add({"bias", 0}, 0, b);
  frame.Finish(9, "run-3");

  v1::PullResponse parsed;
  const std::string bytes = Flatten(frame.Encode());
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.global_step(), 9);
  EXPECT_EQ(parsed.run_id(), "run-3");
  ASSERT_EQ(parsed.values_size(), 2);
  EXPECT_EQ(parsed.values(0).offset(), 100u);
  EXPECT_EQ(parsed.values(0).length(), a.size());
  EXPECT_EQ(0, std::memcmp(parsed.values(0).values().data(), a.data(), a.size() * sizeof(float)));

  // The client decodes protobuf's own encoding of the same message, split into odd slices.
  for (size_t chunk : {size_t{1} << 30, size_t{65531}, size_t{5}}) {
    std::vector<float> out_a(a.size()), out_b(b.size());
    std::vector<std::string> seen;
    auto header = DecodePullResponse(
        Chunked(parsed.SerializeAsString(), chunk),
        [&](const PartitionKey& key, uint64_t offset,
            uint64_t length) -> absl::StatusOr<std::span<float>> {
          seen.push_back(absl::StrCat(key.variable, "/", key.index, "@", offset, "+", length));
          return key.variable == "bias" ? std::span<float>(out_b) : std::span<float>(out_a);
        });
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->global_step, 9);
    EXPECT_EQ(header->run_id, "run-3");
    EXPECT_THAT(seen,
                ::testing::ElementsAre(absl::StrCat("embedding/1@100+", a.size()), "bias/0@0+17"));
    EXPECT_TRUE(SameBits(out_a, a));
    EXPECT_TRUE(SameBits(out_b, b));
  }
}

TEST(TensorCoding, PullDestinationOfTheWrongSizeIsRefused) {
  const std::vector<float> values(10, 1.0f);
  PullFrame frame;
  frame.Add({"w", 4}, 0, values);
  frame.Finish(1, "r");
  std::vector<float> out(9);
  auto header = DecodePullResponse(
      frame.Encode(),
      [&](const PartitionKey&, uint64_t, uint64_t) -> absl::StatusOr<std::span<float>> {
        return std::span<float>(out);
      });
  ASSERT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(header.status().message(), HasSubstr("partition w/4: got 40 bytes, want 36"));
}

TEST(TensorCoding, ValueBytesDisagreeingWithLengthAreRefused) {
  v1::PullResponse response;
  v1::Partition* p = response.add_values();
  p->mutable_key()->set_variable("w");
  p->set_length(3);
  p->set_values(std::string(8, '\0'));  // two floats, not three
  std::vector<float> out(3);
  auto header = DecodePullResponse(
      Chunked(response.SerializeAsString(), 1 << 20),
      [&](const PartitionKey&, uint64_t, uint64_t) -> absl::StatusOr<std::span<float>> {
        return std::span<float>(out);
      });
  ASSERT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(header.status().message(), HasSubstr("partition w/0 has 8 value bytes for 3 floats"));

  v1::PushRequest push;
  *push.add_gradients() = *p;
  grpc::ByteBuffer wire = Chunked(push.SerializeAsString(), 1 << 20);
  PushFrame frame;
  const absl::Status parsed = frame.Parse(wire);
  EXPECT_EQ(parsed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.message(), HasSubstr("8 value bytes for 3 floats"));
}

TEST(TensorCoding, ASharedMemoryPushCarriesHeadersOnlyAndEmptyValuesNeedARegion) {
  std::vector<float> grad(1000, 0.25f);
  const PartitionKey key{"w", 0};
  const PartitionView view{&key, 0, grad};
  SlicePins pins;
  grpc::ByteBuffer encoded = EncodePushRequest({"run", 1, 5, /*shm_region=*/77}, {&view, 1}, pins);
  EXPECT_LT(encoded.Length(), 64u);  // no tensor bytes
  v1::PushRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(encoded)));  // still a protobuf PushRequest
  EXPECT_EQ(parsed.shm_region(), 77u);
  EXPECT_EQ(parsed.gradients(0).length(), 1000u);
  EXPECT_TRUE(parsed.gradients(0).values().empty());
  PushFrame frame;
  ASSERT_THAT(frame.Parse(encoded), IsOk());
  EXPECT_EQ(frame.shm_region(), 77u);

  // The same partitions without a region are missing their bytes.
  parsed.clear_shm_region();
  grpc::ByteBuffer wire = Chunked(parsed.SerializeAsString(), 1 << 20);
  EXPECT_THAT(frame.Parse(wire),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 value bytes for 1000")));
}

// 2^62 floats are 2^64 bytes: a length check by multiplication wraps to zero and accepts them.
TEST(TensorCoding, LengthWhoseByteCountOverflowsIsRefused) {
  v1::PushRequest push;
  v1::Partition* g = push.add_gradients();
  g->mutable_key()->set_variable("w");
  g->set_length(uint64_t{1} << 62);
  grpc::ByteBuffer wire = Chunked(push.SerializeAsString(), 1 << 20);
  PushFrame frame;
  const absl::Status parsed = frame.Parse(wire);
  EXPECT_EQ(parsed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.message(), HasSubstr("0 value bytes for 4611686018427387904 floats"));

  v1::PullResponse response;
  *response.add_values() = *g;
  bool asked = false;
  auto header = DecodePullResponse(
      Chunked(response.SerializeAsString(), 1 << 20),
      [&](const PartitionKey&, uint64_t, uint64_t) -> absl::StatusOr<std::span<float>> {
        asked = true;
        return std::span<float>();
      });
  EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(asked);
}

TEST(TensorCoding, TruncatedMessagesAreRefused) {
  const std::vector<float> values(100, 2.0f);
  PullFrame frame;
  frame.Add({"w", 0}, 0, values);
  frame.Finish(1, "r");
  std::string bytes = Flatten(frame.Encode());
  bytes.resize(bytes.size() / 2);
  std::vector<float> out(100);
  auto header = DecodePullResponse(
      Chunked(bytes, 1 << 20),
      [&](const PartitionKey&, uint64_t, uint64_t) -> absl::StatusOr<std::span<float>> {
        return std::span<float>(out);
      });
  EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument) << header.status();
  EXPECT_THAT(header.status().message(), HasSubstr("malformed ps message"));
}

TEST(TensorCoding, DestinationErrorsStopDecoding) {
  const std::vector<float> values(4, 2.0f);
  PullFrame frame;
  frame.Add({"w", 0}, 0, values);
  auto header = DecodePullResponse(
      frame.Encode(),
      [&](const PartitionKey&, uint64_t, uint64_t) -> absl::StatusOr<std::span<float>> {
        return absl::FailedPreconditionError("not in plan");
      });
  EXPECT_EQ(header.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kubetrain::ps
