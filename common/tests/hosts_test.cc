#include "common/hosts.h"

#include <gtest/gtest.h>

#include <fstream>

namespace kubetrain {
namespace {

TEST(HostsFile, ParsesNamesAliasesAndComments) {
  auto hosts = ParseHostsFile(
      "# localkube\n127.0.1.2 j-ps-0 j-ps-0.j j-ps-0.j.default.svc  # ps\n"
      "\n127.0.1.3\tj-worker-0\n127.0.9.9 j-ps-0\n");
  EXPECT_EQ(hosts["j-ps-0"], "127.0.1.2");  // the first entry wins, as in glibc
  EXPECT_EQ(hosts["j-ps-0.j.default.svc"], "127.0.1.2");
  EXPECT_EQ(hosts["j-worker-0"], "127.0.1.3");
  EXPECT_EQ(hosts.count("#"), 0u);
}

TEST(HostsFile, ResolvesHostKeepingPort) {
  std::string path = ::testing::TempDir() + "/kt_hosts";
  std::ofstream(path) << "127.0.4.5 fm-ps-0.fm.default.svc\n";
  EXPECT_EQ(ResolveWithHostsFile("fm-ps-0.fm.default.svc:2222", path), "127.0.4.5:2222");
  EXPECT_EQ(ResolveWithHostsFile("FM-PS-0.fm.default.svc:2222", path), "127.0.4.5:2222");
  EXPECT_EQ(ResolveWithHostsFile("other:2222", path), "other:2222");
  EXPECT_EQ(ResolveWithHostsFile("fm-ps-0.fm.default.svc:2222", ""), "fm-ps-0.fm.default.svc:2222");
  EXPECT_EQ(ResolveWithHostsFile("x:1", "/nonexistent/hosts"), "x:1");
}

}  // namespace
}  // namespace kubetrain
