// The coordinator's answer to a wait longer than any it serves: a raw request with a timeout
// of 2^62 ms, as a confused or hostile client could send, still waits (bounded) for its key.
#include <gtest/gtest.h>

#include <thread>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "grpcpp/grpcpp.h"
#include "kubetrain/v1/coordinator.grpc.pb.h"
#include "worker/collective/coordinator.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

TEST(Coordinator, AnEndlessTimeoutIsBoundedNotTakenAsAlreadyOver) {
  auto server = CoordinatorServer::Start({.address = "127.0.0.1:0", .world_size = 2});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto setter = CoordinatorClient::Connect(
      {.address = address, .rank = 0, .world_size = 2, .connect_timeout = absl::Seconds(10)});
  ASSERT_TRUE(setter.ok()) << setter.status();

  auto stub =
      v1::Coordinator::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::GetRequest request;
  request.set_session((*setter)->session());
  request.set_key("nccl/unique_id");
  request.set_timeout_ms(int64_t{1} << 62);
  std::thread set_later([&] {
    // Set while the Get already waits (the behaviour under test).
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_THAT((*setter)->Set("nccl/unique_id", "id"), IsOk());
  });
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::GetResponse response;
  grpc::Status status = stub->Get(&context, request, &response);
  set_later.join();
  ASSERT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(response.value(), "id");
}

}  // namespace
}  // namespace kubetrain::worker
