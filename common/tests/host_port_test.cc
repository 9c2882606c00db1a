#include "common/host_port.h"

#include <set>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/status_matchers.h"

namespace kubetrain {
namespace {

using ::kubetrain::testing::IsOk;

// An address, the function that splits it and the host and port it must split into.
struct SplitCase {
  std::string name;
  absl::Status (*split)(absl::string_view address, std::string* host, int* port);
  std::string address;
  std::string host;
  int port = 0;
};

class SplitTest : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitTest, GivesTheHostAndPort) {
  const SplitCase& c = GetParam();
  std::string host;
  int port = -1;
  ASSERT_THAT(c.split(c.address, &host, &port), IsOk());
  EXPECT_EQ(host, c.host);
  EXPECT_EQ(port, c.port);
}

INSTANTIATE_TEST_SUITE_P(
    HostPort, SplitTest,
    ::testing::Values(SplitCase{"ListenAddressWithAnEmptyHostIsEveryInterface", SplitListenAddress,
                                ":8081", "0.0.0.0", 8081},
                      SplitCase{"ListenAddressAcceptsPortZero", SplitListenAddress, "[::1]:0",
                                "::1", 0},
                      SplitCase{"HostPortOfAnIpv6Host", SplitHostPort, "[::1]:2222", "::1", 2222},
                      SplitCase{"HostPortOfAServiceName", SplitHostPort,
                                "a-ps-0.a.default.svc:2223", "a-ps-0.a.default.svc", 2223}),
    [](const ::testing::TestParamInfo<SplitCase>& info) { return info.param.name; });

TEST(SplitListenAddress, RefusesNoPortAndAPortOutOfRange) {
  std::string host;
  int port = -1;
  EXPECT_EQ(SplitListenAddress("127.0.0.1", &host, &port).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitListenAddress("127.0.0.1:70000", &host, &port).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SplitHostPort, NeedsAHostAndADialablePort) {
  std::string host;
  int port = 0;
  ASSERT_THAT(SplitHostPort("a-ps-0.a:2222", &host, &port), IsOk());
  EXPECT_EQ(host, "a-ps-0.a");
  EXPECT_EQ(port, 2222);
  EXPECT_FALSE(SplitHostPort(":2222", &host, &port).ok());
  EXPECT_FALSE(SplitHostPort("a:0", &host, &port).ok());
  EXPECT_EQ(JoinHostPort(host, port), "a-ps-0.a:2222");
}

// `kubetrain run` gives each task of a job two ports: none may be handed out twice, which 2 x
// tasks separate calls of FreeLoopbackPort cannot promise (the kernel picks at random).
TEST(FreeLoopbackPorts, HandsOutDifferentPortsOnly) {
  absl::StatusOr<std::vector<int>> ports = FreeLoopbackPorts(400);
  ASSERT_THAT(ports, IsOk());
  ASSERT_EQ(ports->size(), 400u);
  EXPECT_EQ(std::set<int>(ports->begin(), ports->end()).size(), 400u);
  for (int port : *ports) {
    EXPECT_GT(port, 0);
    EXPECT_LE(port, 65535);
  }
  absl::StatusOr<std::vector<int>> none = FreeLoopbackPorts(0);
  ASSERT_THAT(none, IsOk());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace kubetrain
