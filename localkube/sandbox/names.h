// The names and addresses of everything a sandbox Network creates, derived from its prefix, so
// that a later start can find (and sweep) what a killed instance left by name alone.
//
// An instance prefix is a family (1 to 3 lowercase letters, "kt" by default) and 4 hex digits:
// "kt3fa2". Its objects in the host namespace are
//   bridge <prefix>b<node>   ifb <prefix>i<node>   veth (host end) <prefix>v<node>s<serial>
// and its network namespaces <prefix>-<node>-<sandbox name>; all fit Linux's 15-character
// interface names. Its links are also in a link group of its own (LinkGroup), so that they go in
// one kernel call. Addresses: instance block B (0..31) is the /20 198.18.0.0 + B * 4096 of
// RFC 2544's benchmarking range 198.18.0.0/15; node N gets the /24 number N inside it, its
// bridge the .1 and its sandboxes .2 to .254.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kubetrain::sandbox {

inline constexpr int kMaxNodes = 16;       // /24s in an instance's /20
inline constexpr int kBlocks = 32;         // /20s in 198.18.0.0/15
inline constexpr int kMaxSerial = 9999;    // veth serials keep names within 15 characters
inline constexpr int kHostsPerNode = 253;  // .2 to .254

// OK when `family` is 1 to 3 lowercase letters.
absl::Status ValidateFamily(absl::string_view family);
// OK when `prefix` is `family` followed by exactly 4 lowercase hex digits.
absl::Status ValidatePrefix(absl::string_view family, absl::string_view prefix);
// OK when `name` can name a sandbox: 1 to 63 of [a-z0-9.-], starting with a letter or digit.
absl::Status ValidateSandboxName(absl::string_view name);

// The instance prefix an object called `object` belongs to when it is one of `family`'s
// (an interface "<prefix>[biv]<digit>..." or a namespace "<prefix>-..."), else nullopt.
std::optional<std::string> InstanceOfLink(absl::string_view family, absl::string_view object);
std::optional<std::string> InstanceOfNetns(absl::string_view family, absl::string_view object);

// The link group (`ip link ... group N`) of the instance `prefix`, which must be valid: its
// family's letters (5 bits each, a = 1) above its 16 hex bits. Distinct prefixes get distinct
// groups, none of them 0 (the kernel's default group) and all below 2^31.
uint32_t LinkGroup(absl::string_view prefix);

std::string BridgeName(absl::string_view prefix, int node);
std::string IfbName(absl::string_view prefix, int node);
std::string VethName(absl::string_view prefix, int node, int serial);
std::string NetnsName(absl::string_view prefix, int node, absl::string_view sandbox);

// "198.18.16.0/20" for block 1.
std::string BlockCidr(int block);
// "198.18.17.0/24" for block 1, node 1.
std::string NodeCidr(int block, int node);
// The address `host` (1..254) of node `node`'s /24: host 1 is the bridge.
std::string NodeAddress(int block, int node, int host);

}  // namespace kubetrain::sandbox
