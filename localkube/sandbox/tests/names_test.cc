#include "localkube/sandbox/names.h"

#include <gtest/gtest.h>

namespace kubetrain::sandbox {
namespace {

TEST(SandboxNames, InterfaceNamesFitLinuxsFifteenCharacters) {
  const std::string prefix =
      "abc"
      "ffff";  // the longest family
  EXPECT_LE(BridgeName(prefix, kMaxNodes - 1).size(), 15u);
  EXPECT_LE(IfbName(prefix, kMaxNodes - 1).size(), 15u);
  EXPECT_LE(VethName(prefix, kMaxNodes - 1, kMaxSerial).size(), 15u);
}

TEST(SandboxNames, ObjectsAreTracedBackToTheirInstance) {
  EXPECT_EQ(InstanceOfLink("kt", "kt3fa2b0"), "kt3fa2");
  EXPECT_EQ(InstanceOfLink("kt", "kt3fa2v12s340"), "kt3fa2");
  EXPECT_EQ(InstanceOfNetns("kt", "kt3fa2-1-rank-0"), "kt3fa2");
  EXPECT_EQ(InstanceOfLink("kt", "eth0"), std::nullopt);
  EXPECT_EQ(InstanceOfLink("kt", "kt3fa2x0"), std::nullopt);  // not one of ours
  EXPECT_EQ(InstanceOfLink("kt", "ktzzzzb0"), std::nullopt);  // not hex
  EXPECT_EQ(InstanceOfLink("k", "kt3fa2b0"), std::nullopt);   // another family's
  EXPECT_EQ(InstanceOfNetns("kt", "kt3fa2b0"), std::nullopt);
}

TEST(SandboxNames, PrefixesAndSandboxNamesAreChecked) {
  EXPECT_TRUE(ValidatePrefix("kt", "kt00a1").ok());
  EXPECT_FALSE(ValidatePrefix("kt", "kt00A1").ok());
  EXPECT_FALSE(ValidatePrefix("kt", "kx00a1").ok());
  EXPECT_FALSE(ValidatePrefix("kt", "kt00a").ok());
  EXPECT_FALSE(ValidateFamily("").ok());
  EXPECT_FALSE(ValidateFamily("kube").ok());
  EXPECT_TRUE(ValidateSandboxName("rank-0").ok());
  EXPECT_FALSE(ValidateSandboxName("-rank").ok());
  EXPECT_FALSE(ValidateSandboxName("a/b").ok());
}

TEST(SandboxNames, EachPrefixHasALinkGroupOfItsOwn) {
  EXPECT_EQ(LinkGroup("a0000"), 1u << 16);
  EXPECT_EQ(LinkGroup("kt3fa2"), ((11u * 32 + 20) << 16) + 0x3fa2);
  EXPECT_NE(LinkGroup("kt0001"), LinkGroup("kt0000"));
  EXPECT_NE(LinkGroup("k0000"), LinkGroup("kt0000"));
  EXPECT_NE(LinkGroup("ktu0000"), LinkGroup("ku0000"));
  EXPECT_LT(LinkGroup("zzzffff"), 1u << 31);  // never taken for a negative number
}

TEST(SandboxNames, BlocksTileTheBenchmarkingRangeWithoutOverlap) {
  EXPECT_EQ(BlockCidr(0), "198.18.0.0/20");
  EXPECT_EQ(BlockCidr(1), "198.18.16.0/20");
  EXPECT_EQ(BlockCidr(kBlocks - 1), "198.19.240.0/20");
  EXPECT_EQ(NodeCidr(1, 1), "198.18.17.0/24");
  EXPECT_EQ(NodeCidr(kBlocks - 1, kMaxNodes - 1), "198.19.255.0/24");
  EXPECT_EQ(NodeAddress(16, 0, 1), "198.19.0.1");
}

}  // namespace
}  // namespace kubetrain::sandbox
