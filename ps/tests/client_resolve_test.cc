// A ps pod recreated on a cluster keeps its DNS name and gets a new IP (docs/decisions/0001):
// the client follows the name to the new address within seconds, where gRPC's resolver by
// default looks a name up again only every 30 s. Run in ps/tests/resolve_helper.cc, in a mount
// namespace with its own /etc/hosts (root only).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace {

TEST(PsClient, FollowsItsNameToTheNewAddressOfARecreatedPs) {
  if (geteuid() != 0) GTEST_SKIP() << "a mount namespace with its own /etc/hosts needs root";
  int status = std::system(KUBETRAIN_PS_RESOLVE_HELPER);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no mount namespaces here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the client did not follow its ps's name to the new address";
}

}  // namespace
