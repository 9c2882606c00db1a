#include "common/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "common/testing/status_matchers.h"
#include "prometheus/counter.h"

namespace kubetrain {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::HasSubstr;

TEST(MetricsServer, ServesRegisteredCountersOverHttp) {
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  auto& family = prometheus::BuildCounter()
                     .Name("kubetrain_test_events_total")
                     .Help("Events seen by the test.")
                     .Register((*server)->registry());
  family.Add({{"role", "worker"}}).Increment(3);

  ASSERT_GT((*server)->port(), 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("kubetrain_test_events_total{role=\"worker\"} 3"), std::string::npos)
      << res->body;
}

// 256 KiB of static TLS in this test binary, as cuBLAS brings ~110 KiB into the worker: every
// thread's stack must hold it, so a server with small fixed thread stacks (civetweb's 100 KiB,
// under prometheus-cpp's Exposer) cannot start its threads in such a process.
thread_local char g_large_tls[256 << 10];

TEST(MetricsServer, ServesInAProcessWithLargeStaticTls) {
  g_large_tls[0] = 1;
  auto server = MetricsServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsServer, BusyPortIsAClearError) {
  auto first = MetricsServer::Start("127.0.0.1:0");
  ASSERT_THAT(first, IsOk());
  auto second = MetricsServer::Start(JoinHostPort("127.0.0.1", (*first)->port()));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("--metrics-port")));
}

TEST(JoinHostPort, BracketsIpv6) {
  EXPECT_EQ(JoinHostPort("127.0.0.1", 80), "127.0.0.1:80");
  EXPECT_EQ(JoinHostPort("::1", 80), "[::1]:80");
}

}  // namespace
}  // namespace kubetrain
